"""Hostile and unusual programs: the rewrite works exactly as the runtime would, or refuses with a clear error.

One regression test per class of issue 11 (each fails on the code before its fix), every input forged
from a real corpus file with the project's own encoder:

* segments shared between tables (the constant segment also read as initial data or named data, the
  initial-data segment also a delegate's blob): re-laying one out corrupted the other;
* an ``_h2d_copy.out`` whose return slot is another value that something reads;
* two methods with one name: verdicts were grouped by name and mixed up;
* a rewrite that would cross the verifier's table limit;
* adversarial shapes that made analysis quadratic (many copies into one device tensor, one tensor
  in many lists sharing one items vector, many delegate calls reading one value), and the work
  budget that stops whatever is left.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest

from cli_runner import invoke, invoke_json
from conftest import CORPUS, pte_path
from pte_devconst.rewriter.model.analysis import analyze_program
from pte_devconst.rewriter.plan import RewriteOptions
from pte_devconst.rewriter.rewrite import rewrite_file
from pte_devconst.schema import model as m
from pte_devconst.util.errors import UnsupportedProgramError
from pte_devconst.schema.pte_file import PteFile, open_pte

try:
    from fuzz.mutate import assemble_pte
except ImportError:  # collected as a package
    from tests.fuzz.mutate import assemble_pte


def _forge(tmp_path: Path, name: str, edit, file_name: str = "forged.pte") -> Path:  # noqa: ANN001
    """``name`` from the corpus with ``edit(program)`` applied, re-encoded in front of its own segment bytes."""
    data = pte_path(name).read_bytes()
    with PteFile.from_bytes(data) as pte:
        program = edit(pte.program)
    path = tmp_path / file_name
    path.write_bytes(assemble_pte(program, data))
    return path


def _runs_as_recorded(path: Path, name: str) -> None:
    """The real 1.5.1 runtime gives the corpus's recorded outputs for ``path``."""
    torch = pytest.importorskip("torch")
    from et_oracle import run_with_executorch

    inputs = torch.load(CORPUS / f"{name}.inputs.pt", weights_only=True)["forward"]
    recorded = torch.load(CORPUS / f"{name}.runtime.pt", weights_only=True)["forward"]
    for given, want in zip(inputs, recorded):
        got = run_with_executorch(path, "forward", given)
        assert all(torch.equal(a, b) for a, b in zip(got, want))


# --------------------------------------------------------------------------- shared segments

def test_a_constant_segment_also_read_as_initial_data_keeps_its_kept_constants(tmp_path: Path) -> None:
    """Was: the constant segment was re-laid out, then overwritten with the initial-data segment built on the
    same index, so the constants that stayed read the wrong bytes.  The real runtime is the judge."""
    source = _forge(tmp_path, "v_h_cpu_only", lambda p: replace(
        p, mutable_data_segments=(m.SubsegmentOffsets(p.constant_segment.segment_index, (0,)),)))
    _runs_as_recorded(source, "v_h_cpu_only")  # the forged input is a program the runtime runs
    out = tmp_path / "out.pte"
    # Host placement (the CPU encoding the 1.5.1 runtime runs); --min-bytes keeps the two small constants.
    result = rewrite_file(source, out, options=RewriteOptions(host_placement=True, min_bytes=64))
    _runs_as_recorded(out, "v_h_cpu_only")
    with open_pte(source) as before, open_pte(out) as after:
        cs = before.program.constant_segment.segment_index
        assert bytes(after.read(after.segment_span(cs))) == bytes(before.read(before.segment_span(cs)))
        assert after.program.mutable_data_segments[0].segment_index != cs  # initial data went to a new segment
    assert len(result.plan.placements) == 1 and result.plan.segments.constant_shared_with
    assert result.plan.dropped_constants == ()


def test_a_constant_segment_shared_with_named_data_is_not_emptied(tmp_path: Path) -> None:
    """Was: every constant moved, so the re-laid constant segment was empty, and so was the named data in it."""
    source = _forge(tmp_path, "v_h_cpu_only", lambda p: replace(
        p, named_data=(m.NamedData("blob", p.constant_segment.segment_index),)))
    out = tmp_path / "out.pte"
    result = rewrite_file(source, out, options=RewriteOptions(host_placement=True))
    assert len(result.plan.placements) == 3
    with open_pte(source) as before, open_pte(out) as after:
        assert len(before.named_data("blob")) == 180
        assert bytes(after.named_data("blob")) == bytes(before.named_data("blob"))
    _runs_as_recorded(out, "v_h_cpu_only")


def test_an_initial_data_segment_shared_with_a_delegate_blob_is_left_whole(tmp_path: Path) -> None:
    """Was: the new initial data was appended to the segment the XNNPACK delegate reads as its blob."""
    def share(p: m.Program) -> m.Program:
        return replace(p, mutable_data_segments=(
            m.SubsegmentOffsets(p.execution_plan[0].delegates[0].processed.index, (0,)),))

    source = _forge(tmp_path, "v_h_xnnpack", share)
    out = tmp_path / "out.pte"
    result = rewrite_file(source, out, options=RewriteOptions(host_placement=True))
    with open_pte(source) as before, open_pte(out) as after:
        old = before.program.execution_plan[0].delegates[0]
        new = after.program.execution_plan[0].delegates[0]
        assert bytes(after.delegate_blob(new)) == bytes(before.delegate_blob(old))
    _runs_as_recorded(out, "v_h_xnnpack")
    assert result.plan.placements and result.plan.segments.fresh_mutable


# --------------------------------------------------------------------------- return slots

def _with_copy_args(program: m.Program, instruction: int, args: tuple[int, ...], *extra: m.Instruction,
                    values: tuple[m.EValue, ...] = ()) -> m.Program:
    plan = program.execution_plan[0]
    chain = plan.chains[0]
    instructions = list(chain.instructions)
    instructions[instruction] = replace(instructions[instruction], args=args)
    plan = replace(plan, values=plan.values + values,
                   chains=(replace(chain, instructions=tuple(instructions) + extra),))
    return replace(program, execution_plan=(plan,))


def test_a_copy_returning_into_another_value_that_is_read_is_not_removed(tmp_path: Path) -> None:
    """v_a_dtypes_copy copies value 0 by ``_h2d_copy.out(0, 15, 15)``.  Forged: ``(0, 15, 42)`` with value 42
    read by a ``_d2h_copy`` afterwards.  Was: only the out slot was followed, the copy was removed, and
    value 42 was never set.  The codegen'd kernel never writes a return slot, so this is refused."""
    with open_pte(pte_path("v_a_dtypes_copy")) as pte:
        program = pte.program
    plan = program.execution_plan[0]
    ret, host = len(plan.values), len(plan.values) + 1
    extra_values = (plan.values[15], plan.values[35])  # a cuda:0 tensor like the out slot, and a host one
    d2h = m.KernelCall(1, (ret, host, host))
    forged = _with_copy_args(program, 1, (0, 15, ret), d2h, values=extra_values)
    verdict = next(c for c in analyze_program(forged).methods[0].constants if c.value == 0)
    assert not verdict.eligible
    assert verdict.reasons == ("its _h2d_copy returns into another value that is read",)
    assert "returns into value 42, not its out value 15" in verdict.details[0]
    # A return slot nobody else reads changes nothing: the copy still goes.
    unread = _with_copy_args(program, 1, (0, 15, ret), values=extra_values)
    assert next(c for c in analyze_program(unread).methods[0].constants if c.value == 0).eligible
    # Through the command line: nothing of value 0 moves.
    path = tmp_path / "ret.pte"
    path.write_bytes(assemble_pte(forged, pte_path("v_a_dtypes_copy").read_bytes()))
    code, doc = invoke_json("rewrite", path, "--dry-run")
    assert code == 0 and 0 not in [p["value"] for p in doc["methods"][0]["moved"]]


def test_a_copy_with_the_wrong_number_of_arguments_is_not_removed() -> None:
    """The kernel checks it gets exactly (self, out, return); anything else fails at run time."""
    with open_pte(pte_path("v_a_dtypes_copy")) as pte:
        program = pte.program
    for args in ((0, 15), (0, 15, 15, 15)):
        verdict = next(c for c in analyze_program(_with_copy_args(program, 1, args)).methods[0].constants
                       if c.value == 0)
        assert verdict.reasons == ("copied by a malformed _h2d_copy",)


# --------------------------------------------------------------------------- two methods, one name

def _renamed(program: m.Program) -> m.Program:
    return replace(program, execution_plan=tuple(replace(p, name="forward") for p in program.execution_plan))


def test_two_methods_with_one_name_are_rewritten_each_as_itself(tmp_path: Path) -> None:
    """v_f_multi_method_copy's plans are 'forward' (two movable constants) and 'other' (one: its value 1 is
    also read by a host kernel).  Forged: both named 'forward'.  Was: verdicts grouped by name, so each plan
    got both plans' placements (value 1 of 'other' moved, delegates rewired at the other plan's positions).
    Now the rewrite of the renamed program is exactly the renamed rewrite of the original."""
    original = pte_path("v_f_multi_method_copy")
    renamed = _forge(tmp_path, "v_f_multi_method_copy", _renamed)
    rewrite_file(original, tmp_path / "a.pte")
    result = rewrite_file(renamed, tmp_path / "b.pte")
    assert [(e.plan_index, [p.value for p in e.placements]) for e in result.plan.methods] == [(0, [0, 1]), (1, [0])]
    assert [e.name for e in result.plan.methods] == ["forward (plan 0)", "forward (plan 1)"]
    with open_pte(tmp_path / "a.pte") as a, open_pte(tmp_path / "b.pte") as b:
        assert _renamed(a.program) == b.program
    # Reports name each plan apart and say which one the runtime loads.
    code, doc = invoke_json("check", renamed)
    assert code == 1 and {x["method"] for x in doc["files"][0]["findings"]} == {"forward (plan 0)", "forward (plan 1)"}
    assert "always loads plan 0" in doc["files"][0]["note"]
    inspected = invoke("inspect", renamed, "--format", "json")
    assert "2 methods are named 'forward'" in inspected.stdout
    assert [mt["name"] for mt in __import__("json").loads(inspected.stdout)["file"]["methods"]] == \
        ["forward (plan 0)", "forward (plan 1)"]


# --------------------------------------------------------------------------- the verifier's limit, on output

def test_a_rewrite_that_would_cross_the_table_limit_is_refused_before_writing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A legacy rewrite adds two tables per moved constant (its allocation and device info).  With the limit
    just above the input's count the result would not load, so nothing is written (was: written)."""
    import pte_devconst.schema.limits as limits

    source = pte_path("v_b_dtypes_legacy")
    with open_pte(source) as pte:
        tables = pte.table_count
    out = tmp_path / "out.pte"
    rewrite_file(source, out)
    with open_pte(out) as written:  # what the rewrite adds, as the runtime's verifier counts it
        assert written.table_count > tables
        added = written.table_count - tables
    out.unlink()
    monkeypatch.setattr(limits, "MAX_TABLES", tables + added - 1)
    with pytest.raises(UnsupportedProgramError, match=f"would have {tables + added:,} flatbuffer tables, over the"):
        rewrite_file(source, out)
    assert not out.exists() and not list(tmp_path.iterdir())
    result = invoke("rewrite", source, "-o", out)
    assert result.exit_code == 2 and "program verifier accepts" in result.stderr and not out.exists()
    monkeypatch.setattr(limits, "MAX_TABLES", tables + added)
    rewrite_file(source, out)
    assert out.exists()


# --------------------------------------------------------------------------- adversarial shapes

SHAPES = textwrap.dedent('''
    import resource, struct, sys, time
    from dataclasses import replace
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))  # 1 GiB: the old code needed several
    from pte_devconst.rewriter.load import analyze_file
    started = time.process_time()
    analysis = analyze_file(sys.argv[1])
    print(time.process_time() - started)
''')


def _analyse_in_a_child(path: Path) -> float:
    """CPU seconds of ``analyze_file(path)`` in a child limited to 1 GiB of memory and 120 s."""
    done = subprocess.run([sys.executable, "-c", SHAPES, str(path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return float(done.stdout.strip())


def _copies_into_one_tensor(n: int):  # noqa: ANN202
    """n constants, each copied by its own ``_h2d_copy`` into one device tensor that a delegate reads."""
    def edit(program: m.Program) -> m.Program:
        plan = program.execution_plan[0]
        constant, device_copy, out = plan.values[0], plan.values[15], plan.values[28]
        values = (constant,) * n + (device_copy, out)
        instructions = tuple(m.KernelCall(0, (i, n, n)) for i in range(n)) + (m.DelegateCall(0, (n, n + 1)),)
        plan = replace(plan, values=values, inputs=(), outputs=(n + 1,), chains=(m.Chain(instructions=instructions),))
        return replace(program, execution_plan=(plan,))
    return edit


def _calls_reading_one_value(n: int):  # noqa: ANN202
    """n calls of a cuda:0 delegate, each reading one host tensor (the per-call copy estimate's worst case)."""
    def edit(program: m.Program) -> m.Program:
        plan = program.execution_plan[0]
        plan = replace(plan, values=(plan.values[7],), inputs=(0,), outputs=(),
                       chains=(m.Chain(instructions=(m.DelegateCall(0, (0,)),) * n),))
        return replace(program, execution_plan=(plan,))
    return edit


def _lists_sharing_one_vector(path: Path, lists: int) -> None:
    """Point every TensorList's items at the first list's vector (the encoder never shares one; a forger can)."""
    from pte_devconst.schema.flatbuf import U32, FlatReader

    data = bytearray(path.read_bytes())
    program_size = struct.unpack_from("<Q", data, 16)[0]
    reader = FlatReader(memoryview(data)[:program_size], budget=1 << 60)
    plans, _ = reader.root()._vector_header(1, 4)
    plan = reader.table_at(plans + U32.unpack_from(data, plans)[0])
    start, count = plan._vector_header(2, 4)
    fields = []
    for i in range(count):
        evalue = reader.table_at(start + 4 * i + U32.unpack_from(data, start + 4 * i)[0])
        if evalue.scalar(0, struct.Struct("<B"), 0) == 10:  # TensorList
            at = evalue.table(1)._field(0, 4)
            fields.append((at, at + U32.unpack_from(data, at)[0]))
    assert len(fields) == lists
    shared = max(target for _, target in fields)  # written first, so after every table that points at it
    for at, _ in fields:
        struct.pack_into("<I", data, at, shared - at)
    path.write_bytes(bytes(data))


def test_adversarial_shapes_are_analysed_in_linear_time_and_memory(tmp_path: Path) -> None:
    """Each shape below took seconds to minutes and gigabytes before (quadratic); measured on this branch's
    parent: 2,000 copies into one tensor (203 KB) took 5.5 s and 1.3 GB, 4,000 would take ~22 s and ~5 GB;
    8,000 delegate calls reading one value (259 KB) took 5 s, 32,000 (1 MB) ~80 s.  Now each is well
    under a second; the bound is generous for slow machines."""
    copies = _forge(tmp_path, "v_a_dtypes_copy", _copies_into_one_tensor(4000), "copies.pte")
    calls = _forge(tmp_path, "v_a_dtypes_copy", _calls_reading_one_value(32_000), "calls.pte")

    def in_lists(program: m.Program) -> m.Program:  # and the device copy listed 200 x 400 times besides
        program = _copies_into_one_tensor(2000)(program)
        plan = program.execution_plan[0]
        lists = (m.TensorList((2000,) * 400),) * 200
        return replace(program, execution_plan=(replace(plan, values=plan.values + lists),))

    lists = _forge(tmp_path, "v_a_dtypes_copy", in_lists, "lists.pte")
    _lists_sharing_one_vector(lists, 200)
    for path in (copies, calls, lists):
        assert os.path.getsize(path) < 1_100_000
        assert _analyse_in_a_child(path) < 10, path.name
    with open_pte(copies) as pte:  # and the verdicts stay readable: a few details per reason, then a count
        verdicts = analyze_program(pte.program).methods[0].constants
    assert len(verdicts) == 4000 and not any(v.eligible for v in verdicts)
    assert all(len(v.details) <= 4 for v in verdicts)
    assert "(and 7,997 more uses like it)" in verdicts[0].details[0]


def test_inspect_shows_a_constant_in_80_000_list_slots_in_one_line(tmp_path: Path) -> None:
    """Was: 8.6 MB of text and 8 s for a 332 KB file (every slot in the 'read by' cell); JSON still lists all."""
    def in_lists(program: m.Program) -> m.Program:
        plan = program.execution_plan[0]
        return replace(program, execution_plan=(replace(plan, values=plan.values + (m.TensorList((0,) * 400),) * 200),))

    path = _forge(tmp_path, "v_a_dtypes_copy", in_lists)
    _lists_sharing_one_vector(path, 200)
    result = invoke("inspect", path, env={"COLUMNS": "200"})
    assert result.exit_code == 0 and len(result.stdout) < 20_000
    # Its copy and the first lists met, each once, then the count of the other reads: 80,001 - 1 - 2 x 400.
    assert "#1 _h2d_copy.out; in list value 42; in list value 43; and 79,200 more" in result.stdout
    code, doc = invoke_json("inspect", path)
    assert len(doc["file"]["methods"][0]["constants"][0]["readers"]) == 80_001  # its copy, and every slot


def test_the_work_budget_stops_analysis_with_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Past its budget (steps per value, instruction and read) analysis raises instead of running on."""
    import pte_devconst.program.method_context as method_context  # the work budget's home

    big = _forge(tmp_path, "v_a_dtypes_copy", _copies_into_one_tensor(3000), "big.pte")
    monkeypatch.setattr(method_context, "WORK_PER_ITEM", 0)  # a budget of 4,096 steps, which 3,000 constants exceed
    with open_pte(big) as pte, pytest.raises(UnsupportedProgramError, match="analysis needed more than 4,096 steps"):
        analyze_program(pte.program)
    code, doc = invoke_json("check", big)
    assert code == 2 and "analysis needed more than" in doc["files"][0]["error"]
    # The analysis costs under 2 steps per item even on this shape (4 allowed here, 16 by default).
    monkeypatch.setattr(method_context, "WORK_PER_ITEM", 4)
    assert invoke("check", big).exit_code == 0


def test_diff_pairs_two_methods_of_one_name_by_plan(tmp_path: Path) -> None:
    """Was: plans keyed by name, so the second 'forward' hid the first (the one the runtime loads)."""
    renamed = _forge(tmp_path, "v_f_multi_method_copy", _renamed)
    rewrite_file(renamed, tmp_path / "out.pte")
    code, doc = invoke_json("diff", renamed, tmp_path / "out.pte")
    assert code == 0
    methods = {mt["name"]: mt for mt in doc["diff"]["methods"]}
    assert set(methods) == {"forward (plan 0)", "forward (plan 1)"}
    # Each plan against its own rewrite: plan 0 lost both copies, plan 1 its one.
    assert [(mt["instructions_before"], mt["instructions_after"]) for mt in methods.values()] == [(5, 3), (5, 4)]


def test_an_error_while_a_program_in_memory_is_open_names_it_not_its_bytes() -> None:
    """``opened`` names the file of an error raised inside it; a program in memory by its name (os.fspath of a
    ProgramBytes is the bytes themselves, which made the error's str() raise TypeError)."""
    from pte_devconst.rewriter.load import opened
    from pte_devconst.schema.pte_file import ProgramBytes
    from pte_devconst.util.errors import PteDevconstError

    data = ProgramBytes(pte_path("v_a_dtypes_copy").read_bytes(), "<export>")
    with pytest.raises(PteDevconstError) as raised:
        with opened(data):
            raise PteDevconstError("refused by the analysis")
    assert raised.value.file == "<export>"
    assert str(raised.value) == "<export>: refused by the analysis"
