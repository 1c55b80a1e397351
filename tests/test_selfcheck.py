"""The self-check proves the whole output: it refuses every class of wrong file, built from real corpus files.

Each wrong output is made the way the bug it stands for makes it, but forced
here (a plan from the clean corpus file, or a corruption applied after the real
``apply_plan``), so that the test keeps feeding the self-check a wrong file
after the analysis or apply bug behind it is fixed.  Every refusal must be one
stderr line (exit 2) that says "internal error", names the difference and the
destination, and leaves the destination as it was, with no temporary file.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Callable

import pytest

from cli_runner import invoke
from selfcheck_helpers import corrupt_apply as _corrupt_apply, refused as _refused, use_plan as _use_plan
from conftest import CASES, ptd_path, pte_path, shipped
from forge import large_constant
from pte_devconst.rewriter import rewrite as rewrite_module
from pte_devconst.rewriter.load import analyze_opened, opened
from pte_devconst.rewriter.plan import RewriteOptions, RewritePlan, make_plan
from pte_devconst.rewriter.rewrite import plan_file, rewrite_file
from pte_devconst.rewriter.verify import RewriteCheckError
from pte_devconst.schema import limits
from pte_devconst.schema import model as m
from pte_devconst.util.errors import InternalError, PteDevconstError, UnsupportedProgramError
from pte_devconst.schema.model import Device
from pte_devconst.schema.ptd_model import PtdNamedData, TensorLayout
from pte_devconst.schema.ptd_file import PtdFile
from pte_devconst.schema.pte_file import PteFile
from pte_devconst.schema.pte_writer import FileRange, SegmentContent

try:
    from fuzz.mutate import assemble_pte, assemble_ptd
except ImportError:
    from tests.fuzz.mutate import assemble_pte, assemble_ptd

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "models"
EXAMPLE_NAMES = shipped(EXAMPLES)  # never a NAME.devconst.pte the README's first command wrote there


# --- helpers -----------------------------------------------------------------------------------------

def _program(name: str) -> tuple[bytes, m.Program]:
    data = pte_path(name).read_bytes()
    with PteFile.from_bytes(data) as pte:
        return data, pte.program


def _forge(tmp_path: Path, name: str, edit: Callable[[m.Program], m.Program], out: str = "forged.pte") -> Path:
    """A corpus program with ``edit`` applied to its tables, in front of its original segment bytes."""
    data, program = _program(name)
    path = tmp_path / out
    path.write_bytes(assemble_pte(edit(program), data))
    return path


def _plan_of(name: str, options: RewriteOptions = RewriteOptions()) -> RewritePlan:
    with opened(pte_path(name), ptd_path(name)) as (source, data):
        return plan_file(source, data, options)


# --- it passes on every real rewrite -----------------------------------------------------------------

@pytest.mark.parametrize("name", CASES + [f"example:{n}" for n in EXAMPLE_NAMES])
@pytest.mark.parametrize("verify", ["sampled", "full"])
def test_the_self_check_passes_every_corpus_and_example_rewrite(name: str, verify: str, tmp_path: Path) -> None:
    path = EXAMPLES / f"{name[8:]}.pte" if name.startswith("example:") else pte_path(name)
    ptd = path.with_suffix(".ptd")
    out = tmp_path / "out.pte"
    rewrite_file(path, out, ptd=ptd if ptd.exists() else None, verify=verify)
    assert out.exists()
    if not name.startswith("example:"):  # the library's CPU placement too (moves what host kernels read)
        rewrite_file(path, tmp_path / "host.pte", ptd=ptd if ptd.exists() else None, verify=verify,
                     options=RewriteOptions(host_placement=True))


# --- the classes of wrong output ---------------------------------------------------------------

def test_named_data_sharing_the_constant_segment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Named data in the constant segment: dropping a constant re-lays the segment and empties the named data."""
    forged = _forge(tmp_path, "v_f_multi_method_copy",
                    lambda p: replace(p, named_data=(m.NamedData("blob", p.constant_segment.segment_index),)))
    _use_plan(monkeypatch, _plan_of("v_f_multi_method_copy"))

    def keep_named_data_on_the_constant_segment(source, program, contents):
        return replace(program, named_data=(m.NamedData("blob", program.constant_segment.segment_index),))

    _corrupt_apply(monkeypatch, keep_named_data_on_the_constant_segment)
    _refused(tmp_path, forged, "segment 0 (named data 'blob'): its bytes differ from the input's")


def test_initial_data_sharing_the_constant_segment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """mutable_data_segments on the constant segment: the initial data overwrites the re-laid constants."""
    forged = _forge(tmp_path, "v_f_multi_method_copy",
                    lambda p: replace(p, mutable_data_segments=(m.SubsegmentOffsets(0, (0,)),)))
    plan = _plan_of("v_f_multi_method_copy")
    _use_plan(monkeypatch, plan)

    def initial_data_over_the_constants(source, program, contents):
        """What the bug writes: the input's constant segment as it was, the new initial data after it."""
        constants = source.segment_span(0)
        shared = SegmentContent(0, [(0, source.piece(constants))])
        offsets = [0]
        cursor = -(-constants.size // 16) * 16
        for entry in plan.initial_data:
            shared.pieces.append((cursor, source.piece(source.constant_span(entry.source_index, entry.nbytes))))
            offsets.append(cursor)
            cursor = -(-(cursor + entry.nbytes) // 16) * 16
        shared.size = cursor
        old_count = len(source.program.segments)
        contents[:] = [shared] + contents[1:old_count]
        return replace(program, segments=program.segments[:old_count],
                       mutable_data_segments=(m.SubsegmentOffsets(0, tuple(offsets)),))

    _corrupt_apply(monkeypatch, initial_data_over_the_constants)
    _refused(tmp_path, forged, "method 1 ('other'): value 1 (kept constant): its bytes differ from the input's")


def test_h2d_copy_whose_return_slot_is_another_value(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """``_h2d_copy.out(C, X, Y)``: removing it leaves Y (read as a method output here) never written."""
    def return_slot_elsewhere(program: m.Program) -> m.Program:
        plan = program.execution_plan[0]
        values = plan.values + (plan.values[15],)  # Y: a second value like the copy's out slot X = 15
        chain = plan.chains[0]
        copy = chain.instructions[1]  # _h2d_copy.out(0, 15, 15)
        instructions = list(chain.instructions)
        instructions[1] = replace(copy, args=(0, 15, len(plan.values)))
        plan = replace(plan, values=values, outputs=plan.outputs + (len(plan.values),),
                       chains=(replace(chain, instructions=tuple(instructions)),))
        return replace(program, execution_plan=(plan,))

    forged = _forge(tmp_path, "v_a_dtypes_copy", return_slot_elsewhere)
    _use_plan(monkeypatch, _plan_of("v_a_dtypes_copy"))
    # The kernel never writes its return slot, so Y is a static view of X's place, which only the copy wrote.
    _refused(tmp_path, forged, "value 42 is still read by method output, but it is a view of memory only removed "
                               "instructions wrote (value 15)")


def test_two_methods_with_the_same_name(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Verdicts grouped by name: method 1 gets method 0's verdict for its value 1 (copy and delegate included).

    Both methods are called ``forward``; the plan then moves method 1's value 1 (read by a host kernel
    there), removes method 1's instruction 2 (its delegate call, where method 0 has a copy) and rewires
    the wrong delegate.  The self-check matches methods by plan index, never by name.
    """
    def same_names(program: m.Program) -> m.Program:
        return replace(program, execution_plan=tuple(replace(p, name="forward") for p in program.execution_plan))

    forged = _forge(tmp_path, "v_f_multi_method_copy", same_names)
    with opened(forged) as (source, _):
        analysis = analyze_opened(source, None)
        first, second = analysis.methods
        borrowed = replace(next(c for c in first.constants if c.value == 1), method="forward#1")
        if any(f.name == "plan_index" for f in dataclasses.fields(borrowed)):  # plans that group by plan index
            borrowed = replace(borrowed, plan_index=second.plan_index)
        constants = tuple(borrowed if c.value == 1 else replace(c, method="forward#1") for c in second.constants)
        second = replace(second, name="forward#1", constants=constants)
        plan = make_plan(source.program, replace(analysis, methods=(first, second)))
    assert [(e.plan_index, [p.value for p in e.placements]) for e in plan.methods] == [(0, [0, 1]), (1, [0, 1])]
    _use_plan(monkeypatch, plan)
    _refused(tmp_path, forged, "method 1 ('forward'): chain 0 instruction 2 was removed but is not an "
             "et_copy::_h2d_copy.out of a constant moved in this method")


def _duplicate_key_ptd(tmp_path: Path, *, same_layout: bool = False) -> tuple[Path, Path, str]:
    """v_g_external_copy with a .ptd whose moved key has a second entry first (another segment; another layout
    unless ``same_layout``)."""
    ptd_source = ptd_path("v_g_external_copy")
    data = ptd_source.read_bytes()
    with PtdFile.from_bytes(data) as ptd:
        flat = ptd.flat_tensor
    plan = _plan_of("v_g_external_copy")
    key = next(p.external_key for p in plan.placements if p.external_key)
    target = next(e for e in flat.named_data if e.key == key)
    other = next(e for e in flat.named_data if e.key != key)
    layout = target.tensor_layout if same_layout else TensorLayout(target.tensor_layout.scalar_type, (1,), (0,))
    duplicated = replace(flat, named_data=(PtdNamedData(key, other.segment_index, layout),) + flat.named_data)
    pte = tmp_path / "model.pte"
    shutil.copyfile(pte_path("v_g_external_copy"), pte)
    ptd_out = tmp_path / "model.ptd"
    try:
        ptd_out.write_bytes(assemble_ptd(duplicated, data))
        PtdFile.open(ptd_out).close()
    except Exception as error:  # a reader that refuses duplicate keys outright is fine too
        pytest.fail(f"could not build the duplicate-key .ptd: {error}")
    return pte, ptd_out, key


def test_ptd_with_duplicate_keys(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The runtime loads the first entry with a key; the tool must not move a constant whose key is ambiguous."""
    pte, ptd, key = _duplicate_key_ptd(tmp_path)
    _use_plan(monkeypatch, _plan_of("v_g_external_copy"))
    _refused(tmp_path, pte, f"its key {key!r} appears 2 times", ptd=ptd)


def test_the_analysis_keeps_a_constant_whose_ptd_key_repeats(tmp_path: Path) -> None:
    """The rule the self-check holds, asked first: the constant stays, with its reason, and the rewrite of the
    rest exits 0 (before, the plan moved it and the self-check refused the output: "internal error", a fuzz case)."""
    pte, ptd, key = _duplicate_key_ptd(tmp_path, same_layout=True)
    out = tmp_path / "out.pte"
    result = invoke("rewrite", pte, "--ptd", ptd, "-o", out)
    assert result.exit_code in (0, 3), result.stderr
    from pte_devconst.rewriter.load import analyze_file
    verdicts = [c for c in analyze_file(pte, ptd).methods[0].constants if c.tensor.fqn == key]
    assert verdicts and not any(v.eligible for v in verdicts)
    assert any(f"external key {key!r} appears more than once in the .ptd" in v.reasons for v in verdicts)


def test_a_rewrite_over_the_runtime_verifier_table_limit(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Legacy style adds two tables per moved constant: a program just under the limit goes over it."""
    _, program = _program("v_b_dtypes_legacy")
    monkeypatch.setattr(limits, "MAX_TABLES", limits.count_tables(program) + 5)
    # First the pre-write refusal (nothing written at all)...
    result = invoke("rewrite", pte_path("v_b_dtypes_legacy"), "-o", tmp_path / "out.pte")
    assert result.exit_code == 2 and "over the" in result.stderr and "nothing was written" in result.stderr
    assert "ExecuTorch's program verifier" in result.stderr and not (tmp_path / "out.pte").exists()
    # ...and the self-check on its own, as if the pre-write check had missed it.
    monkeypatch.setattr(rewrite_module, "over_runtime_limits", lambda program: None)
    _refused(tmp_path, pte_path("v_b_dtypes_legacy"), "flatbuffer tables, over the")


# --- plan-independent postconditions: a plan made from a wrong analysis ------------------------------

def _plan_with_verdict(name: str, value: int, **changes) -> RewritePlan:
    """The plan of ``name`` after one constant's verdict is changed (an analysis bug, forged)."""
    with opened(pte_path(name), ptd_path(name)) as (source, data):
        analysis = analyze_opened(source, data)
        method = analysis.methods[0]
        constants = tuple(replace(c, **changes) if c.value == value else c for c in method.constants)
        analysis = replace(analysis, methods=(replace(method, constants=constants),) + analysis.methods[1:])
        return make_plan(source.program, analysis)


def test_a_moved_constant_that_a_host_kernel_still_reads(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """v_c value 0 is read by aten::mul.out on the host; an analysis that calls it eligible is caught."""
    plan = _plan_with_verdict("v_c_shared_host_copy", 0, device=Device(1, 0), reasons=())
    assert 0 in {p.value for p in plan.placements}
    _use_plan(monkeypatch, plan)
    _refused(tmp_path, pte_path("v_c_shared_host_copy"),
             "moved value 0 now lives on cuda:0 but is read by host kernel")


def test_removing_an_instruction_that_is_not_a_copy_of_a_moved_constant(monkeypatch: pytest.MonkeyPatch,
                                                                        tmp_path: Path) -> None:
    from pte_devconst.rewriter.model.analysis import DeviceCopy
    with opened(pte_path("v_c_shared_host_copy")) as (source, _):
        verdict = analyze_opened(source, None).methods[0].constants[2]
    wrong = verdict.copies + (DeviceCopy(0, 3, verdict.value, 7, Device(1, 0)),)  # the _d2h_copy at 3
    _use_plan(monkeypatch, _plan_with_verdict("v_c_shared_host_copy", verdict.value, copies=wrong))
    _refused(tmp_path, pte_path("v_c_shared_host_copy"),
             "chain 0 instruction 3 was removed but is not an et_copy::_h2d_copy.out of a constant moved")


# --- the whole output, not just what moved: corruptions after a correct apply ---------------------------

def _segment_of_delegate(program: m.Program) -> int:
    return program.execution_plan[0].delegates[0].processed.index


def _flip_first_byte(piece_source: PteFile, content: SegmentContent) -> SegmentContent:
    offset, piece = content.pieces[0]
    data = bytearray(piece if isinstance(piece, bytes) else piece_source.data[piece.offset: piece.offset + piece.size])
    data[0] ^= 0xFF
    return SegmentContent(content.size, [(offset, bytes(data))] + content.pieces[1:], content.alignment)


def _shift_first_piece(content: SegmentContent, by: int) -> SegmentContent:
    offset, piece = content.pieces[0]
    assert isinstance(piece, FileRange)
    return SegmentContent(content.size, [(offset, replace(piece, offset=piece.offset + by))] + content.pieces[1:],
                          content.alignment)


def _operators_renamed(source, program, contents):
    plan = program.execution_plan[0]
    ops = (replace(plan.operators[0], name="aten::other"),) + plan.operators[1:]
    return replace(program, execution_plan=(replace(plan, operators=ops),) + program.execution_plan[1:])


def _value_changed(source, program, contents):
    plan = program.execution_plan[0]
    values = list(plan.values)
    values[7] = replace(values[7], requires_grad=not values[7].requires_grad)  # a method input
    return replace(program, execution_plan=(replace(plan, values=tuple(values)),) + program.execution_plan[1:])


def _kept_constant_from_the_wrong_place(source, program, contents):
    contents[0] = _shift_first_piece(contents[0], 16)
    return program


def _delegate_blob_changed(source, program, contents):
    index = _segment_of_delegate(program)
    contents[index] = _flip_first_byte(source, contents[index])
    return program


def _initial_data_from_another_constant(source, program, contents):
    index = program.mutable_data_segments[0].segment_index
    contents[index] = _shift_first_piece(contents[index], 48)
    return program


def _instruction_dropped(source, program, contents):
    plan = program.execution_plan[0]
    chain = plan.chains[0]
    chains = (replace(chain, instructions=chain.instructions[:-1]),)
    return replace(program, execution_plan=(replace(plan, chains=chains),) + program.execution_plan[1:])


def _delegate_argument_swapped(source, program, contents):
    plan = program.execution_plan[0]
    chain = plan.chains[0]
    instructions = list(chain.instructions)
    k = next(i for i, ins in enumerate(instructions) if isinstance(ins, m.DelegateCall))
    args = list(instructions[k].args)
    args[1], args[2] = args[2], args[1]
    instructions[k] = replace(instructions[k], args=tuple(args))
    chains = (replace(chain, instructions=tuple(instructions)),)
    return replace(program, execution_plan=(replace(plan, chains=chains),) + program.execution_plan[1:])


def _jump_not_remapped(source, program, contents):
    plan = program.execution_plan[0]
    chain = plan.chains[0]
    instructions = tuple(m.JumpFalseCall(ins.cond_value_index, ins.destination_instruction + 1)
                         if isinstance(ins, m.JumpFalseCall) else ins for ins in chain.instructions)
    return replace(program, execution_plan=(replace(plan, chains=(replace(chain, instructions=instructions),)),))


def _buffer_grown_more(source, program, contents):
    plan = program.execution_plan[0]
    sizes = plan.non_const_buffer_sizes[:-1] + (plan.non_const_buffer_sizes[-1] + 16,)
    return replace(program, execution_plan=(replace(plan, non_const_buffer_sizes=sizes),) + program.execution_plan[1:])


def _buffer_shrunk(source, program, contents):
    plan = program.execution_plan[0]
    sizes = plan.non_const_buffer_sizes[:-1] + (plan.non_const_buffer_sizes[-1] - 16,)
    return replace(program, execution_plan=(replace(plan, non_const_buffer_sizes=sizes),) + program.execution_plan[1:])


def _segment_added(source, program, contents):
    contents.append(SegmentContent.of(b"stray"))
    return replace(program, segments=program.segments + (m.DataSegment(),))


CORRUPTIONS = {
    "an operator renamed": ("v_a_dtypes_copy", _operators_renamed, "method 0 ('forward'): its operators changed"),
    "a value the plan does not move": ("v_a_dtypes_copy", _value_changed,
                                       "value 7 changed although the plan does not move it"),
    "a kept constant copied from the wrong place": ("v_f_multi_method_copy", _kept_constant_from_the_wrong_place,
                                                    "method 1 ('other'): value 1 (kept constant): its bytes differ"),
    "a delegate blob changed": ("v_c_shared_host_copy", _delegate_blob_changed,
                                "segment 1 (the blob of method 0 ('forward') delegate 0, BackendWithCompilerDemo): "
                                "its bytes differ"),
    "initial data copied from another constant": ("v_a_dtypes_copy", _initial_data_from_another_constant,
                                                  "(initial data from constant entry"),
    "an instruction dropped": ("v_c_shared_host_copy", _instruction_dropped, "chain 0 has 8 instructions, expected 9"),
    "a delegate argument rewired to another constant": ("v_a_dtypes_copy", _delegate_argument_swapped,
                                                        "argument 1 changed from value 15 to 16"),
    "a jump not remapped": ("v_j_cond_copy", _jump_not_remapped, "the jump is not to instruction 9"),
    # the relaid buffer keeps its 752 bytes: the constants take the removed copies' regions
    "a buffer grown more than the plan says": ("v_a_dtypes_copy", _buffer_grown_more,
                                               "planned buffer 2 is 768 bytes (input: 752)"),
    "a buffer smaller than the plan says (the reader refuses it)": ("v_a_dtypes_copy", _buffer_shrunk,
                                                                    "the written file does not read back"),
    "a stray segment": ("v_a_dtypes_copy", _segment_added, "the segment table went from 2 to 4 entries"),
}


@pytest.mark.parametrize("case", sorted(CORRUPTIONS))
def test_the_self_check_catches_a_corrupted_output(case: str, monkeypatch: pytest.MonkeyPatch,
                                                    tmp_path: Path) -> None:
    name, corrupt, fragment = CORRUPTIONS[case]
    _corrupt_apply(monkeypatch, corrupt)
    _refused(tmp_path, pte_path(name), fragment)


# --- what --verify full adds --------------------------------------------------------------------------

def _large_program(tmp_path: Path, rows: int) -> Path:
    """v_a_dtypes_copy with value 0 grown to ``rows`` x 4 float32 of counting bytes (``forge.large_constant``)."""
    return large_constant(pte_path("v_a_dtypes_copy"), tmp_path / "large.pte", rows)


def test_full_verification_compares_every_byte_of_bulk_copies(monkeypatch: pytest.MonkeyPatch,
                                                              tmp_path: Path) -> None:
    """A byte the kernel copy got wrong between two sampled windows: only --verify full sees it."""
    from pte_devconst.rewriter.model import verify_bytes
    source = _large_program(tmp_path, 1 << 17)  # a 2 MiB constant
    real_write = rewrite_module.write_pte_to_fd
    damaged: list[int] = []  # where, relative to the range

    def write_then_damage(fd, layout, contents, progress=None, *, writeback=True):
        real_write(fd, layout, contents, progress, writeback=writeback)
        segment, offset = next((i, o) for i, content in enumerate(contents) for o, piece in content.pieces
                               if isinstance(piece, FileRange) and piece.size == 2 << 20 and i == len(contents) - 1)
        start_of_range = layout.segment_base + layout.segments[segment].offset + offset
        sampled = verify_bytes.windows(2 << 20, False, start_of_range)
        inside = next(k for k in range(verify_bytes.SAMPLE_BYTES + 1000, 2 << 20, 4096)
                      if all(not start <= k < start + length for start, length in sampled))
        damaged[:] = [inside]
        os.pwrite(fd, bytes([os.pread(fd, 1, start_of_range + inside)[0] ^ 0xFF]), start_of_range + inside)

    monkeypatch.setattr(rewrite_module, "write_pte_to_fd", write_then_damage)
    sampled = invoke("rewrite", source, "-o", tmp_path / "sampled.pte")
    assert sampled.exit_code == 0, sampled.stderr  # the damage lies between the sampled windows
    (tmp_path / "sampled.pte").unlink()
    _refused(tmp_path, source, "moved value 0", f"its bytes differ from the input's at byte {damaged[0]:,}",
             extra=("--verify", "full"))
    monkeypatch.setenv("PTE_DEVCONST_FULL_CHECK", "1")
    _refused(tmp_path, source, "moved value 0", f"at byte {damaged[0]:,}")


def _writer_with(monkeypatch: pytest.MonkeyPatch, change: Callable[[int, int, int, int], tuple[int, int]],
                 size: int = 2 << 20) -> None:
    """The writer's kernel copy of the one ``size``-byte range given a wrong source offset or length
    (``change(src_fd, offset, count, dst_fd)`` -> the (offset, count) really copied): a writer bug, with the recipe
    still right."""
    from pte_devconst.schema import pte_writer
    real = pte_writer.copy_range

    def copy(src_fd: int, offset: int, count: int, dst_fd: int) -> None:
        if count == size:
            new_offset, new_count = change(src_fd, offset, count, dst_fd)
            real(src_fd, new_offset, new_count, dst_fd)
            if new_count < count:  # the rest of the range as the file would hold it: zeros
                os.write(dst_fd, bytes(count - new_count))
            return
        real(src_fd, offset, count, dst_fd)

    monkeypatch.setattr(pte_writer, "copy_range", copy)


# A 2 MiB constant and a 256 KiB one: every proven range over SMALL_BYTES is sampled, whatever its size.
BULK_ROWS = pytest.mark.parametrize("rows", [1 << 17, 1 << 14], ids=["2MiB", "256KiB"])


@BULK_ROWS
def test_a_bulk_copy_from_a_shifted_source_offset_is_caught_in_its_first_window(monkeypatch: pytest.MonkeyPatch,
                                                                               tmp_path: Path, rows: int) -> None:
    source = _large_program(tmp_path, rows)
    _writer_with(monkeypatch, lambda fd, offset, count, dst: (offset + 16, count), size=rows * 16)
    _refused(tmp_path, source, "moved value 0", "its bytes differ from the input's at byte 0")


@BULK_ROWS
def test_a_bulk_copy_of_the_wrong_length_is_caught_in_its_last_window(monkeypatch: pytest.MonkeyPatch,
                                                                     tmp_path: Path, rows: int) -> None:
    source = _large_program(tmp_path, rows)
    _writer_with(monkeypatch, lambda fd, offset, count, dst: (offset, count - 4096), size=rows * 16)
    line = _refused(tmp_path, source, "moved value 0", "its bytes differ from the input's at byte ")
    at = int(line.split("at byte ")[1].split(";")[0].replace(",", ""))
    assert rows * 16 - 4096 <= at < rows * 16  # in the last window, where the copy stopped short


def test_a_wrong_byte_the_writer_wrote_itself_is_caught(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Bytes the tool writes itself are read back whole, never sampled: a moved constant's data index one off in
    the program the writer encoded (its flatbuffer) is a file that is not the plan's."""
    from pte_devconst.schema import pte_writer
    real = pte_writer.write_all
    from pte_devconst import api
    index = api.rewrite(pte_path("v_a_dtypes_copy"), dry_run=True).plan.placements[0].initial_data_index

    def write(fd: int, data: bytes) -> None:
        marker = index.to_bytes(4, "little")
        if data[4:8] == b"ET12" and marker in data:  # the program: the first moved constant's data index, one off
            at = data.rindex(marker)
            data = data[:at] + (index + 1).to_bytes(4, "little") + data[at + 4:]
        real(fd, data)

    monkeypatch.setattr(pte_writer, "write_all", write)
    dest = tmp_path / "out.pte"
    done = invoke("rewrite", pte_path("v_a_dtypes_copy"), "-o", dest)
    assert done.exit_code == 2 and not dest.exists(), done.stderr
    assert "failed the self-check" in done.stderr


def test_the_sampled_self_check_reads_a_bounded_amount_per_range(tmp_path: Path) -> None:
    """Four pages of each file per bulk range, whatever its size: the bytes read grow with the ranges' number."""
    from pte_devconst import api
    from pte_devconst.rewriter.model import verify_bytes

    for folder in "abc":
        (tmp_path / folder).mkdir()
    smaller = _large_program(tmp_path / "c", 1 << 14)  # 256 KiB: read whole while only ranges over 1 MiB were sampled
    small, large = _large_program(tmp_path / "a", 1 << 17), _large_program(tmp_path / "b", 1 << 20)  # 2 and 16 MiB
    read = [api.rewrite(path, path.with_name("out.pte")).self_check_bytes for path in (smaller, small, large)]
    assert read[1] == read[2], read  # the same number of bulk ranges: the same bytes, 8x the data
    assert read[0] < 2 * (256 << 10) <= read[1]  # not the 256 KiB range whole (the small ranges' window is shorter)
    read = read[1:]
    window = 2 * (2 + verify_bytes.SPREAD_WINDOWS) * verify_bytes.SAMPLE_BYTES
    assert window <= read[0] < window + 4 * verify_bytes.FULL_COMPARE_BYTES  # and the small ranges' reads
    full = api.rewrite(large, large.with_name("full.pte"), verify="full").self_check_bytes
    assert full >= 2 * (16 << 20)  # --verify full reads every byte of both


def test_an_unproven_bulk_range_is_compared_whole(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Sampling needs a source range proven by the writer's recipe: a piece from the wrong offset is read whole."""
    source = _large_program(tmp_path, 1 << 17)

    def initial_data_one_element_off(src, program, contents):
        index = program.mutable_data_segments[0].segment_index
        offset, piece = contents[index].pieces[0]
        big = max(contents[index].pieces, key=lambda item: item[1].size if isinstance(item[1], FileRange) else 0)
        pieces = [(o, replace(p, offset=p.offset + 4) if (o, p) == big else p) for o, p in contents[index].pieces]
        contents[index] = SegmentContent(contents[index].size, pieces, contents[index].alignment)
        return program

    _corrupt_apply(monkeypatch, initial_data_one_element_off)
    _refused(tmp_path, source, "(initial data from constant entry 1): its bytes differ from the input's at byte 0")


def test_full_verification_checks_the_padding(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    real_write = rewrite_module.write_pte_to_fd

    def write_then_scribble(fd, layout, contents, progress=None, *, writeback=True):
        real_write(fd, layout, contents, progress, writeback=writeback)
        os.pwrite(fd, b"\x01", layout.segment_base - 1)  # the zero fill between the program and the segments

    monkeypatch.setattr(rewrite_module, "write_pte_to_fd", write_then_scribble)
    assert invoke("rewrite", pte_path("v_a_dtypes_copy"), "-o", tmp_path / "sampled.pte").exit_code == 0
    _refused(tmp_path, pte_path("v_a_dtypes_copy"), "padding at", "is not zero", extra=("--verify", "full"))


def test_an_identity_copy_is_checked_too(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Nothing to move: the output must be the input byte for byte."""
    real = rewrite_module.write_piece

    def copy_then_damage(fd, piece, *, flush=None):
        size = real(fd, piece, flush=flush)
        os.pwrite(fd, bytes([os.pread(fd, 1, size - 1)[0] ^ 0xFF]), size - 1)
        return size

    monkeypatch.setattr(rewrite_module, "write_piece", copy_then_damage)
    _refused(tmp_path, pte_path("v_h_cpu_only"), "the copy of the input differs from it at byte")


def test_verify_option_is_checked_in_the_api(tmp_path: Path) -> None:
    from pte_devconst import api
    from pte_devconst.util.errors import PteDevconstError
    with pytest.raises(PteDevconstError, match="verify must be one of sampled, full"):
        api.rewrite(pte_path("v_a_dtypes_copy"), tmp_path / "out.pte", verify="every")
    api.rewrite(pte_path("v_a_dtypes_copy"), tmp_path / "out.pte", verify="full")
    assert (tmp_path / "out.pte").exists()


def test_the_check_raises_a_rewrite_check_error_in_the_library(monkeypatch: pytest.MonkeyPatch,
                                                               tmp_path: Path) -> None:
    _corrupt_apply(monkeypatch, _operators_renamed)
    # A bug caught by the tool's own check, never a PteDevconstError (documented as never a bug).
    assert issubclass(RewriteCheckError, InternalError) and not issubclass(RewriteCheckError, PteDevconstError)
    with pytest.raises(RewriteCheckError, match="its operators changed"):
        rewrite_file(pte_path("v_a_dtypes_copy"), tmp_path / "out.pte")
    assert list(tmp_path.iterdir()) == []


def test_the_limit_refusal_is_an_unsupported_program_in_the_library(monkeypatch: pytest.MonkeyPatch,
                                                                    tmp_path: Path) -> None:
    monkeypatch.setattr(limits, "MAX_TABLES", 10)
    with pytest.raises(UnsupportedProgramError, match="flatbuffer tables"):
        rewrite_file(pte_path("v_a_dtypes_copy"), tmp_path / "out.pte")


def test_the_report_says_how_the_output_was_checked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from cli_runner import invoke_json
    monkeypatch.delenv("PTE_DEVCONST_FULL_CHECK", raising=False)
    name = pte_path("v_a_dtypes_copy")
    assert invoke_json("rewrite", name, "-o", tmp_path / "a.pte")[1]["verified"] == "sampled"
    assert invoke_json("rewrite", name, "-o", tmp_path / "b.pte", "--verify", "full")[1]["verified"] == "full"
    assert invoke_json("rewrite", name, "--dry-run")[1]["verified"] is None
    text = invoke("rewrite", name, "-o", tmp_path / "c.pte", "--verify", "full")
    assert text.exit_code == 0 and "re-read and checked (every byte); needs ExecuTorch >= 1.6" in text.stdout
    monkeypatch.setenv("PTE_DEVCONST_FULL_CHECK", "1")
    assert invoke_json("rewrite", name, "-o", tmp_path / "d.pte")[1]["verified"] == "full"
    assert invoke_json("rewrite", name, "-o", tmp_path / "e.pte", "--verify", "sampled")[1]["verified"] == "sampled"


def test_a_rewrite_that_would_grow_a_buffer_past_2_to_the_62_is_refused(tmp_path: Path) -> None:
    """Fuzz case 2066 (seed 0): a buffer just under the format's 2^62 bytes, which moving constants would cross."""
    def huge_buffer(program: m.Program) -> m.Program:
        plan = program.execution_plan[0]
        sizes = plan.non_const_buffer_sizes[:2] + ((1 << 62) - 16,)
        return replace(program, execution_plan=(replace(plan, non_const_buffer_sizes=sizes),))

    forged = _forge(tmp_path, "v_a_dtypes_copy", huge_buffer)
    result = invoke("rewrite", forged, "-o", tmp_path / "out.pte")
    lines = result.stderr.splitlines()
    assert result.exit_code == 2 and len(lines) == 1 and "internal error" not in lines[0], result.stderr
    assert "2^62" in lines[0] and "buffer 2" in lines[0] and not (tmp_path / "out.pte").exists()


def _initial_data_in_a_new_segment(damage_old_copy: bool):
    """Another correct layout: the grown initial data in a new segment, the old segment left as it was.

    (What a rewrite does when the old initial-data segment is shared with another table.)
    """
    def relocate(source, program, contents):
        lists = program.mutable_data_segments
        old_index = lists[0].segment_index
        grown = contents[old_index]
        if damage_old_copy:
            grown = _flip_first_byte(source, grown)
        contents[old_index] = SegmentContent.of(source.piece(source.segment_span(old_index)))
        contents.append(grown)
        return replace(program, segments=program.segments + (m.DataSegment(),),
                       mutable_data_segments=(replace(lists[0], segment_index=len(program.segments)),) + lists[1:])

    return relocate


def test_initial_data_may_grow_in_a_new_segment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _corrupt_apply(monkeypatch, _initial_data_in_a_new_segment(damage_old_copy=False))
    out = tmp_path / "fresh.pte"
    result = invoke("rewrite", pte_path("v_i_kvcache_copy"), "-o", out)
    assert result.exit_code == 0, result.stderr
    with PteFile.open(out) as written:
        assert written.program.mutable_data_segments[0].segment_index == 3
    _corrupt_apply(monkeypatch, _initial_data_in_a_new_segment(damage_old_copy=True))
    _refused(tmp_path, pte_path("v_i_kvcache_copy"), "initial data", "its bytes differ from the input's at byte 0")
