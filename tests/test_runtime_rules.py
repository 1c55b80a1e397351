"""The reader accepts exactly what ExecuTorch 1.5.1's loader accepts, and reads it as the loader does.

Each input is forged from a real corpus file.  Where the CPU runtime can load it, the real runtime
(``tests/et_oracle.py``) is the judge: the tool must accept what it runs and read what it reads.

* a segment base 16- rather than 128-aligned, and a pre-1.0 extended header of 24 bytes (no
  ``segment_data_size``), both loaded by ``Program::load``: were refused;
* a .ptd whose key repeats: the runtime takes the first entry, the tool took the last;
* a .ptd entry the runtime never reaches (shadowed by an earlier one with its key) was still checked;
* the flatbuffers verifier's table limit: counted as the runtime counts it, flagged by ``check``.
"""

from __future__ import annotations

import json
import struct
from dataclasses import replace
from pathlib import Path

import pytest

from cli_runner import invoke, invoke_json
from conftest import CASES, CORPUS, pte_path
from pte_devconst.schema import model as m
from pte_devconst.schema.decode import decode_program_counted
from pte_devconst.util.errors import FormatError
from pte_devconst.schema.header import align_up
from pte_devconst.schema.ptd_file import PtdFile, open_ptd
from pte_devconst.schema.ptd_model import PtdNamedData
from pte_devconst.schema.pte_file import PteFile, open_pte
from pte_devconst.schema.limits import MAX_TABLES, count_tables

try:
    from fuzz.mutate import assemble_ptd, assemble_pte
except ImportError:  # collected as a package
    from tests.fuzz.mutate import assemble_ptd, assemble_pte

CPU = "v_h_cpu_only"


def _calls(name: str, kind: str) -> list:
    import torch

    return torch.load(CORPUS / f"{name}.{kind}.pt", weights_only=True)["forward"]


def _assert_runtime_runs_it_as_the_original(path: Path, name: str = CPU) -> None:
    torch = pytest.importorskip("torch")
    from et_oracle import run_with_executorch

    for given, want in zip(_calls(name, "inputs"), _calls(name, "runtime")):
        got = run_with_executorch(path, "forward", given)
        assert all(torch.equal(a, b) for a, b in zip(got, want))


def _relaid(data: bytes, base: int, header_length: int = 32) -> bytes:
    """``data`` with its segments moved to ``base`` (and the extended header's length field set)."""
    _, _, program_size, old_base, size = struct.unpack_from("<4sIQQQ", data, 8)
    head = bytearray(data[:program_size])
    struct.pack_into("<IQQ", head, 12, header_length, program_size, base)
    return bytes(head) + bytes(base - program_size) + data[old_base:old_base + size]


def _accepted_everywhere(path: Path) -> None:
    """The tool opens, inspects, checks and rewrites it, and the copy it writes reads back the same program."""
    with open_pte(path) as pte, open_pte(pte_path(CPU)) as original:
        assert pte.program == original.program
        for value in pte.program.execution_plan[0].values:
            if isinstance(value, m.Tensor) and value.is_constant:
                assert bytes(pte.tensor_bytes(value)) == bytes(original.tensor_bytes(value))
    assert invoke("inspect", path).exit_code == 0
    assert invoke("check", path).exit_code == 0
    out = path.with_name("out.pte")
    from pte_devconst.rewriter.plan import RewriteOptions
    from pte_devconst.rewriter.rewrite import rewrite_file

    rewrite_file(path, out, options=RewriteOptions(host_placement=True))
    _assert_runtime_runs_it_as_the_original(out)


def test_a_16_aligned_segment_base_is_accepted_as_the_runtime_accepts_it(tmp_path: Path) -> None:
    """Was: 'segment_base_offset ... not 128-aligned'.  Program::load checks no alignment of it."""
    data = pte_path(CPU).read_bytes()
    program_size = struct.unpack_from("<Q", data, 16)[0]
    base = align_up(program_size, 16)
    base += 16 if base % 128 == 0 else 0
    path = tmp_path / "base16.pte"
    path.write_bytes(_relaid(data, base))
    _assert_runtime_runs_it_as_the_original(path)
    _accepted_everywhere(path)


def test_a_24_byte_extended_header_with_segments_is_accepted(tmp_path: Path) -> None:
    """Was: every segment 'past the end of the segment data (0 bytes)'.  A header from before ExecuTorch 1.0
    has no segment_data_size; the runtime then reads each segment wherever the file holds it."""
    data = pte_path(CPU).read_bytes()
    path = tmp_path / "old_header.pte"
    path.write_bytes(_relaid(data, struct.unpack_from("<Q", data, 24)[0], header_length=24))
    _assert_runtime_runs_it_as_the_original(path)
    _accepted_everywhere(path)


def test_segments_past_the_file_end_are_still_refused(tmp_path: Path) -> None:
    """What the loader does refuse stays refused: a segment the file does not hold."""
    data = pte_path(CPU).read_bytes()
    with pytest.raises(FormatError, match="truncated"):
        PteFile.from_bytes(data[:-1], path="cut.pte")
    old = _relaid(data, struct.unpack_from("<Q", data, 24)[0], header_length=24)
    with pytest.raises(FormatError, match=r"segments\[0\].*past the end"):
        PteFile.from_bytes(old[:-1], path="cut.pte")


def _forged(edit) -> bytes:  # noqa: ANN001
    data = pte_path(CPU).read_bytes()
    with PteFile.from_bytes(data) as pte:
        return assemble_pte(edit(pte.program), data)


def test_entries_no_tensor_uses_are_not_checked(tmp_path: Path) -> None:
    """Was: every constant offset, and every initial-data list, checked when the file opens.  The runtime
    checks an entry when a tensor uses it (get_constant_buffer_data, load_mutable_subsegment_into)."""
    path = tmp_path / "unused.pte"
    path.write_bytes(_forged(lambda p: replace(
        p, constant_segment=replace(p.constant_segment, offsets=p.constant_segment.offsets + (1 << 40,)),
        mutable_data_segments=(m.SubsegmentOffsets(7, (0, 1 << 40)),))))
    _assert_runtime_runs_it_as_the_original(path)
    assert invoke("inspect", path).exit_code == 0 and invoke("check", path).exit_code == 0
    # Nothing can be appended to an initial-data list whose segment does not exist: refused, not crashed.
    from pte_devconst.rewriter.plan import RewriteOptions
    from pte_devconst.rewriter.rewrite import rewrite_file
    from pte_devconst.util.errors import UnsupportedProgramError

    with pytest.raises(UnsupportedProgramError, match="names segment 7, which does not exist"):
        rewrite_file(path, tmp_path / "out.pte", options=RewriteOptions(host_placement=True))
    # An entry a tensor does use is checked, as the runtime checks it.
    with pytest.raises(FormatError, match="constant entry 1 starts at 1099511627776, past the end"):
        PteFile.from_bytes(_forged(lambda p: replace(p, constant_segment=replace(
            p.constant_segment, offsets=(0, 1 << 40) + p.constant_segment.offsets[2:]))), path="x.pte")


# --------------------------------------------------------------------------- .ptd keys

EXTERNAL = "v_g_external_cpu"  # (x + w + b + only_dev) * b, all three constants in its .ptd


def _forged_ptd(tmp_path: Path, first: PtdNamedData, *, last: PtdNamedData | None = None) -> Path:
    original = (CORPUS / f"{EXTERNAL}.ptd").read_bytes()
    with PtdFile.from_bytes(original) as ptd:
        ft = ptd.flat_tensor
    named = (first,) + ft.named_data + ((last,) if last else ())
    path = tmp_path / "forged.ptd"
    path.write_bytes(assemble_ptd(replace(ft, named_data=named), original))
    return path


def test_a_repeated_ptd_key_means_its_first_entry_as_in_the_runtime(tmp_path: Path) -> None:
    """Was: the last entry.  FlatTensorDataMap::get_named_data stops at the first match."""
    torch = pytest.importorskip("torch")
    from et_oracle import run_with_executorch
    from pte_devconst.runner import run_program

    with open_ptd(CORPUS / f"{EXTERNAL}.ptd") as ptd:
        w, b, only_dev = (ptd.entry(key) for key in ("w", "b", "only_dev"))
        tensors = {key: torch.frombuffer(bytearray(ptd.tensor_bytes(key)), dtype=torch.float32).reshape(4, 4)
                   for key in ("w", "b", "only_dev")}
    # A first "w" that holds only_dev's bytes, in front of the real one.
    forged = _forged_ptd(tmp_path, replace(w, segment_index=only_dev.segment_index))
    with open_ptd(forged) as data:
        assert data.keys() == ["w", "b", "only_dev"]
        assert bytes(data.tensor_bytes("w")) == tensors["only_dev"].numpy().tobytes()
    inputs = _calls(EXTERNAL, "inputs")
    result = run_program(pte_path(EXTERNAL), ptd_path=forged, method="forward", inputs=inputs, calls=len(inputs))
    for (x,), call in zip(inputs, result.calls):
        live = run_with_executorch(pte_path(EXTERNAL), "forward", (x,), forged)
        expected = (x + tensors["only_dev"] + tensors["b"] + tensors["only_dev"]) * tensors["b"]
        torch.testing.assert_close(live[0], expected)  # the runtime used the first entry...
        torch.testing.assert_close(call.outputs[0], live[0])  # ...and so does the tool


def test_a_key_is_the_runtimes_c_string_so_two_entries_can_answer_one_name(tmp_path: Path) -> None:
    """The runtime looks an external tensor up by its name's ``c_str()`` (the key ends at the first NUL) and
    compares with ``strncmp``: a tensor named ``"w\\0x"`` loads the entry ``"w"``, even behind an entry named
    exactly ``"w\\0x"``. Was: the tool took the exact name, so ``run``, ``validate`` and the analysis judged other
    bytes than the runtime loads. Every lookup now goes through ``PtdFile.entry``."""
    torch = pytest.importorskip("torch")
    from et_oracle import run_with_executorch
    from forge import edit_plans, edit_program
    from pte_devconst.rewriter.load import analyze_file
    from pte_devconst.runner import run_program

    with open_ptd(CORPUS / f"{EXTERNAL}.ptd") as ptd:
        w, only_dev = ptd.entry("w"), ptd.entry("only_dev")
        tensors = {key: torch.frombuffer(bytearray(ptd.tensor_bytes(key)), dtype=torch.float32).reshape(4, 4)
                   for key in ("w", "b", "only_dev")}
    renamed = "w\0x"

    def rename(plan: m.ExecutionPlan) -> m.ExecutionPlan:
        values = tuple(replace(v, extra_tensor_info=replace(v.extra_tensor_info, fully_qualified_name=renamed))
                       if isinstance(v, m.Tensor) and v.fqn == "w" else v for v in plan.values)
        return replace(plan, values=values)

    pte = edit_program(pte_path(EXTERNAL), tmp_path / "renamed.pte", lambda p: edit_plans(p, rename))
    # An entry named exactly like the tensor, holding only_dev's bytes, in front of the real "w".
    forged = _forged_ptd(tmp_path, replace(w, key=renamed, segment_index=only_dev.segment_index))
    with open_ptd(forged) as data:
        assert data.entry(renamed) is data.entry("w") and data.entry("w").segment_index == w.segment_index
        assert bytes(data.tensor_bytes(renamed)) == tensors["w"].numpy().tobytes()
        assert "w\0x" not in data.keys()  # no tensor name can reach it
    inputs = _calls(EXTERNAL, "inputs")
    result = run_program(pte, ptd_path=forged, method="forward", inputs=inputs, calls=len(inputs))
    for (x,), call in zip(inputs, result.calls):
        live = run_with_executorch(pte, "forward", (x,), forged)
        expected = (x + tensors["w"] + tensors["b"] + tensors["only_dev"]) * tensors["b"]
        torch.testing.assert_close(live[0], expected)  # the runtime loaded the entry "w"...
        torch.testing.assert_close(call.outputs[0], live[0])  # ...and so does the tool
    verdicts = {c.name: c for c in analyze_file(pte, forged, host_placement=True).methods[0].constants}
    assert not any("not in the .ptd" in r for c in verdicts.values() for r in c.reasons), verdicts


def test_the_layout_of_a_repeated_key_is_judged_from_its_first_entry(tmp_path: Path) -> None:
    """A first entry whose layout does not match makes the runtime refuse to load: it is not movable."""
    from pte_devconst.rewriter.load import analyze_file

    with open_ptd(CORPUS / f"{EXTERNAL}.ptd") as ptd:
        w = ptd.entry("w")
    wrong = replace(w, tensor_layout=replace(w.tensor_layout, sizes=(16,), dim_order=(0,)))
    forged = _forged_ptd(tmp_path, wrong)
    from et_oracle import run_with_executorch

    with pytest.raises(RuntimeError):
        run_with_executorch(pte_path(EXTERNAL), "forward", _calls(EXTERNAL, "inputs")[0], forged)
    verdicts = {c.name: c for c in analyze_file(pte_path(EXTERNAL), forged, host_placement=True).methods[0].constants}
    assert not verdicts["w"].eligible and "the .ptd layout of 'w' does not match" in verdicts["w"].verdict
    assert verdicts["b"].eligible  # the other keys are unaffected


def test_an_entry_without_a_tensor_layout_is_not_movable(tmp_path: Path) -> None:
    """The runtime asks every external tensor's entry for its layout (parse_external_constants ->
    get_tensor_layout), so an entry without one cannot load; was: judged movable."""
    from pte_devconst.rewriter.load import analyze_file

    with open_ptd(CORPUS / f"{EXTERNAL}.ptd") as ptd:
        w = ptd.entry("w")
    forged = _forged_ptd(tmp_path, replace(w, tensor_layout=None))
    verdicts = {c.name: c for c in analyze_file(pte_path(EXTERNAL), forged, host_placement=True).methods[0].constants}
    assert verdicts["w"].reasons == ("the .ptd entry of 'w' has no tensor layout (the runtime needs one to load it)",)
    assert verdicts["b"].eligible


def test_an_entry_the_runtime_never_reaches_is_not_checked(tmp_path: Path) -> None:
    """Was: 'segment_index 99 is out of range' for a last, shadowed duplicate that no lookup can reach."""
    from et_oracle import run_with_executorch

    with open_ptd(CORPUS / f"{EXTERNAL}.ptd") as ptd:
        w = ptd.entry("w")
    path = tmp_path / "shadowed.ptd"
    forged = _forged_ptd(tmp_path, w, last=replace(w, segment_index=99))
    forged.rename(path)
    run_with_executorch(pte_path(EXTERNAL), "forward", _calls(EXTERNAL, "inputs")[0], path)  # the runtime loads it
    with open_ptd(path) as data:
        assert data.entry("w").segment_index == w.segment_index
    assert invoke("inspect", pte_path(EXTERNAL), "--ptd", path).exit_code == 0
    with pytest.raises(FormatError, match="segment_index 99 is out of range"):  # reached: still refused
        open_ptd(_forged_ptd(tmp_path, replace(w, segment_index=99)))


# --------------------------------------------------------------------------- the verifier's table limit

@pytest.mark.parametrize("name", CASES)
def test_tables_are_counted_as_the_verifier_counts_them(name: str) -> None:
    with open_pte(pte_path(name)) as pte:
        program, tables = decode_program_counted(pte.data[:pte.flatbuffer_size])
        assert tables == pte.table_count == count_tables(program)
        assert pte.load_refusal is None


def _padded(tables: int) -> tuple[bytes, m.Program]:
    """The CPU corpus program with unused values added until it has exactly ``tables`` tables."""
    data = pte_path(CPU).read_bytes()
    with PteFile.from_bytes(data) as pte:
        program = pte.program
    extra = tables - count_tables(program)
    odd = (m.Tensor(6, sizes=(), dim_order=(), extra_tensor_info=m.ExtraTensorInfo()),) if extra % 2 else ()
    plan = program.execution_plan[0]
    values = plan.values + odd + (m.Null(),) * ((extra - 3 * len(odd)) // 2)  # an EValue + its member: 2 tables
    program = replace(program, execution_plan=(replace(plan, values=values),))
    return assemble_pte(program, data), program


@pytest.mark.slow
def test_the_table_limit_is_the_runtimes_to_the_table(tmp_path: Path) -> None:
    """1,000,000 tables load in the real runtime (InternalConsistency, its Python default); 1,000,001 do not.
    ``check`` passes the first and reports the second as an error (was: passed both)."""
    from executorch.runtime import Runtime

    for tables, loads in ((MAX_TABLES, True), (MAX_TABLES + 1, False)):
        path = tmp_path / f"t{tables}.pte"
        path.write_bytes(_padded(tables)[0])
        try:
            Runtime.get().load_program(str(path))
            loaded = True
        except RuntimeError:
            loaded = False
        assert loaded is loads
        with open_pte(path) as pte:
            assert pte.table_count == tables and (pte.load_refusal is None) is loads
        code, doc = invoke_json("check", path)
        assert code == (0 if loads else 2), doc
        if not loads:
            assert "1,000,001 flatbuffer tables" in doc["files"][0]["error"]


def test_check_and_inspect_flag_a_program_the_verifier_refuses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same rule at a small limit (the real one takes a 10 MB file; see the slow test above)."""
    import pte_devconst.schema.limits as limits

    path = tmp_path / "big.pte"
    path.write_bytes(_padded(200)[0])
    monkeypatch.setattr(limits, "MAX_TABLES", 199)
    code, doc = invoke_json("check", path)
    assert code == 2 and "200 flatbuffer tables" in doc["files"][0]["error"] and doc["files"][0]["status"] == "error"
    result = invoke("check", path)
    assert result.exit_code == 2 and "over the 199 that" in result.stderr
    inspected = invoke("inspect", path, "--format", "json")
    assert inspected.exit_code == 0 and "200 flatbuffer tables" in json.loads(inspected.stdout)["load_refusal"]
    assert "warning: the program has 200 flatbuffer tables" in invoke("inspect", path).stdout
    monkeypatch.setattr(limits, "MAX_TABLES", 200)
    assert invoke("check", path).exit_code == 0
