"""``rewrite --runtime 1.5``: the first-call encoding, on the corpus's real exports (ExecuTorch 1.5.1).

What it promises (issue: "works on the runtime users have"): only instruction types and operators the program
already has; no device tensor with initial data left (a 1.5 runtime loads the output); each moved constant copied
once, on the first call, into device memory nothing else uses; the same eligibility as a 1.6 rewrite; ``check``
passes the output; a second rewrite changes nothing; ``--runtime 1.6`` converts a 1.5 file and back.  The runner
executes it faithfully (``validate``).  The real runtime's own verdict is in tests/test_real_runtime*.py.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Optional

import pytest

from cli_runner import invoke
from conftest import CASES, EXAMPLES, ptd_path, pte_path
from selfcheck_helpers import corrupt_apply, refused, use_plan
from pte_devconst import api
from pte_devconst.program.executorch import H2D_COPY
from pte_devconst.rewriter.encodings.first_call import first_call_copies, first_call_prologue
from pte_devconst.rewriter.encodings import Runtime, required_runtime
from pte_devconst.program.transfers import TransferKind, once_transfers, per_call_transfers
from pte_devconst.schema import model as m
from pte_devconst.schema.pte_file import PteFile, open_pte
from pte_devconst.util.exit_code import ExitCode

COPY_CASES = [name for name in CASES if name.endswith("_copy")]
LEGACY_CASES = [name for name in CASES if name.endswith("_legacy")]


def _rewrite(source: Path, out: Path, runtime: str, data: Optional[Path] = None, **options: object
             ) -> "api.RewriteResult":  # type: ignore[name-defined]
    """``rewrite`` of ``source`` (with ``data``, else its own NAME.ptd when there is one), checked every byte."""
    ptd = data if data is not None else source.with_suffix(".ptd")
    return api.rewrite(source, out, runtime=runtime, ptd=ptd if ptd.exists() else None, verify="full",
                       **options)  # type: ignore[arg-type]


def _program(path: Path) -> m.Program:
    with open_pte(path) as pte:
        return pte.program


# --- the runtime a file needs ----------------------------------------------------------------------------


def test_inputs_load_in_1_5_and_a_default_rewrite_needs_1_6(tmp_path: Path) -> None:
    source = EXAMPLES / "mlp_copy.pte"
    assert required_runtime(_program(source)).runtime == Runtime(1, 5)
    result = _rewrite(source, tmp_path / "out.pte", "1.6")
    need = required_runtime(_program(tmp_path / "out.pte"))
    assert need.runtime == Runtime(1, 6) and len(need.tensors) == 4
    assert result.plan.output_need == need
    assert need.describe() == "ExecuTorch >= 1.6: device initial data (4 tensors)"


# --- the 1.5 encoding on every copy-style export -----------------------------------------------------------


@pytest.mark.parametrize("name", COPY_CASES)
def test_first_call_encoding_loads_in_1_5_and_copies_once(name: str, tmp_path: Path) -> None:
    source, out = pte_path(name), tmp_path / "out15.pte"
    plain = _rewrite(source, tmp_path / "out16.pte", "1.6").plan
    result = _rewrite(source, out, "1.5")
    plan = result.plan
    # the same constants move as in a 1.6 rewrite, to the same devices, saving the same bytes per call
    assert {(p.plan_index, p.value, p.device) for p in plan.placements} == \
        {(p.plan_index, p.value, p.device) for p in plain.placements}
    assert plan.bytes_per_call_saved == plain.bytes_per_call_saved > 0
    written = _program(out)
    assert required_runtime(written).runtime == Runtime(1, 5) and plan.output_runtime == Runtime(1, 5)
    original = _program(source)
    for index, (before, after) in enumerate(zip(original.execution_plan or (), written.execution_plan or ())):
        # no new operator, no instruction kind the input lacks
        assert after.operators == before.operators
        kinds = {type(i) for c in after.chains or () for i in c.instructions or ()}
        assert kinds <= {type(i) for c in before.chains or () for i in c.instructions or ()} | {
            m.JumpFalseCall, m.MoveCall}
        moved = [p for p in plan.placements if p.plan_index == index]
        prologue = first_call_prologue(after)
        if not moved:
            assert prologue is None
            continue
        assert prologue is not None and len(prologue.copies) == len(moved)
        copies = first_call_copies(after, prologue)
        assert {(src, dst) for dst, (src, _) in copies.items()} == {(p.value, p.holder) for p in moved}
        # per call: none of the moved constants crosses; once: every one of them does
        per_call = {t.value for t in per_call_transfers(after) if t.kind is TransferKind.H2D_KERNEL}
        assert not per_call & {p.value for p in moved}
        assert sorted(t.value for t in once_transfers(after)) == sorted(p.value for p in moved)
        # each destination is device memory that no other value shares
        devices = after.buffer_devices()
        for p in moved:
            holder = (after.values or ())[p.holder]
            assert isinstance(holder, m.Tensor) and not holder.has_initial_data
            assert holder.allocation_info is not None
            assert not devices[holder.allocation_info.memory_id].is_cpu
    # check passes it; a second rewrite for 1.5 changes nothing
    assert api.check([out], ptd=ptd_path(name)).exit_code is ExitCode.OK
    again = _rewrite(out, tmp_path / "again.pte", "1.5", data=ptd_path(name))  # the original's data, if any
    assert not again.changed and (tmp_path / "again.pte").read_bytes() == out.read_bytes()


@pytest.mark.parametrize("name", COPY_CASES)
def test_1_6_converts_a_first_call_file_and_back(name: str, tmp_path: Path) -> None:
    first, data = tmp_path / "first.pte", ptd_path(name)
    _rewrite(pte_path(name), first, "1.5")
    to16 = _rewrite(first, tmp_path / "to16.pte", "1.6", data)
    assert to16.changed and to16.plan.output_runtime == Runtime(1, 6)
    assert to16.plan.bytes_per_call_saved == 0  # nothing was copied per call: only the encoding changes
    written = _program(tmp_path / "to16.pte")
    assert all(first_call_prologue(p) is None for p in written.execution_plan or ())
    back = _rewrite(tmp_path / "to16.pte", tmp_path / "back.pte", "1.5", data)
    assert back.changed and back.plan.output_runtime == Runtime(1, 5)
    assert len(back.plan.reencoded) == len(to16.plan.placements)
    assert not back.plan.initial_data
    assert len(back.plan.dropped_initial_data) == len({r.initial_data_index for r in back.plan.reencoded} - {0})
    assert required_runtime(_program(tmp_path / "back.pte")).runtime == Runtime(1, 5)


@pytest.mark.parametrize("name", LEGACY_CASES)
def test_legacy_style_is_left_as_it_is_with_a_reason_per_constant(name: str, tmp_path: Path) -> None:
    out = tmp_path / "out.pte"
    result = _rewrite(pte_path(name), out, "1.5")
    assert not result.changed and out.read_bytes() == pte_path(name).read_bytes()
    eligible = [c for method in result.plan.analysis.methods for c in method.eligible]
    assert eligible and len(result.plan.kept_for_runtime) == len(eligible)
    assert all("legacy style" in s.reason for s in result.plan.kept_for_runtime)


def test_jumps_shift_past_the_prologue(tmp_path: Path) -> None:
    """torch.cond: every jump of the input lands on the same instruction after the prologue is put in front."""
    source, out = pte_path("v_j_cond_copy"), tmp_path / "out.pte"
    result = _rewrite(source, out, "1.5")
    before, after = _program(source).execution_plan[0], _program(out).execution_plan[0]  # type: ignore[index]
    edit = result.plan.methods[0]
    shift = edit.leading_length
    assert shift == edit.payload.copies + 2
    old = before.chains[0].instructions  # type: ignore[index]
    new = after.chains[0].instructions  # type: ignore[index]
    mapping = edit.instruction_maps[0]
    jumps = [(k, ins) for k, ins in enumerate(old) if isinstance(ins, m.JumpFalseCall)]  # type: ignore[arg-type]
    assert jumps
    for k, ins in jumps:
        moved_to = mapping[k]
        assert moved_to is not None and moved_to >= shift
        landing = next(n for n in mapping[ins.destination_instruction:] if n is not None)
        assert new[moved_to] == m.JumpFalseCall(ins.cond_value_index, landing)  # type: ignore[index]
        assert new[landing] == old[ins.destination_instruction] or ins.destination_instruction in {
            c for c, n in enumerate(mapping) if n is None}  # type: ignore[index]


def test_each_method_gets_its_own_guard(tmp_path: Path) -> None:
    out = tmp_path / "out.pte"
    result = _rewrite(pte_path("v_f_multi_method_copy"), out, "1.5")
    guards = [edit.payload.guard for edit in result.plan.methods  # type: ignore[attr-defined]
              if edit.payload.copies]
    assert len(guards) >= 2
    for plan in _program(out).execution_plan or ():
        prologue = first_call_prologue(plan)
        if prologue is not None:
            assert (plan.values or ())[prologue.guard] == m.Bool(True)
            assert (plan.values or ())[prologue.cleared_from] == m.Bool(False)


def test_device_memory_stays_within_the_bar_of_a_1_6_rewrite(tmp_path: Path) -> None:
    for name in COPY_CASES:
        plan16 = _rewrite(pte_path(name), tmp_path / f"{name}.16.pte", "1.6").plan
        plan15 = _rewrite(pte_path(name), tmp_path / f"{name}.15.pte", "1.5").plan
        memory = plan15.memory
        assert memory.after <= max(memory.before, int(1.10 * memory.bound) + 16), (name, memory)
        assert memory.after <= max(plan16.memory.after, memory.before), (name, memory, plan16.memory)


# --- the runner: first call and later calls ---------------------------------------------------------------


@pytest.mark.parametrize("name", ["mlp_copy", "transformer_copy", "two_gpu_copy"])
def test_validate_proves_each_copy_runs_once_on_the_first_call(name: str, tmp_path: Path) -> None:
    source, out = EXAMPLES / f"{name}.pte", tmp_path / "out.pte"
    plan = _rewrite(source, out, "1.5").plan
    result = api.validate(source, out, inputs=EXAMPLES / f"{name}.inputs.pt",
                          expected=EXAMPLES / f"{name}.expected.pt", calls=3, simulate_devices=True)
    assert result.passed, [c for mv in result.methods for c in mv.checks if not c.passed]
    (method,) = result.methods
    once = next(c for c in method.checks if c.name.endswith("copied to their device once"))
    assert "on the first call" in once.detail
    moved = sum(p.nbytes for p in plan.placements)
    first, *later = method.calls
    # the first call carries the moved bytes, later calls none of them
    assert first.h2d_after == first.h2d_before - plan.bytes_per_call_saved + moved
    assert all(call.h2d_after == call.h2d_before - plan.bytes_per_call_saved for call in later)


def test_validate_fails_a_first_call_copy_that_runs_every_call(tmp_path: Path) -> None:
    """A forged 1.5 file that copies one constant again at the end of every call: validate's rows fail it (the
    outputs still agree: only the copies show it)."""
    out = tmp_path / "out.pte"
    _rewrite(EXAMPLES / "mlp_copy.pte", out, "1.5")
    with PteFile.from_bytes(out.read_bytes()) as pte:
        program = pte.program
    plan, values, instructions = _first_method(program)
    prologue = first_call_prologue(plan)
    assert prologue is not None
    instructions.append(instructions[prologue.copies[0]])
    from fuzz.mutate import assemble_pte

    (tmp_path / "forged.pte").write_bytes(assemble_pte(_with(program, plan, values, instructions), out.read_bytes()))
    result = api.validate(EXAMPLES / "mlp_copy.pte", tmp_path / "forged.pte",
                          inputs=EXAMPLES / "mlp_copy.inputs.pt", calls=3, simulate_devices=True)
    failed = {c.name for mv in result.methods for c in mv.checks if not c.passed}
    # first_call_prologue calls it no prologue (a destination is written again): nothing was moved, and the rows
    # that compare the copies and the reads fail it
    assert not result.passed
    assert {"every read sees what the input's sees (byte replay)",
            "per-call H2D bytes fell by the moved constants' bytes"} <= failed, failed


# --- the self-check refuses a wrong prologue ---------------------------------------------------------------


def _first_method(program: m.Program) -> tuple[m.ExecutionPlan, list[m.EValue], list[m.Instruction]]:
    plan = program.execution_plan[0]  # type: ignore[index]
    return plan, list(plan.values or ()), list(plan.chains[0].instructions or ())  # type: ignore[index]


def _with(program: m.Program, plan: m.ExecutionPlan, values: list[m.EValue],
          instructions: list[m.Instruction]) -> m.Program:
    chain = replace(plan.chains[0], instructions=tuple(instructions))  # type: ignore[index]
    new = replace(plan, values=tuple(values), chains=(chain,) + tuple(plan.chains[1:]))  # type: ignore[index]
    return replace(program, execution_plan=(new,) + tuple(program.execution_plan[1:]))  # type: ignore[index]


def test_self_check_refuses_a_guard_that_never_clears(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def corrupt(source: object, program: m.Program, contents: object) -> m.Program:
        plan, values, instructions = _first_method(program)
        prologue = first_call_prologue(plan)
        assert prologue is not None
        values[prologue.cleared_from] = m.Bool(True)
        return _with(program, plan, values, instructions)

    corrupt_apply(monkeypatch, corrupt)
    refused(tmp_path, EXAMPLES / "mlp_copy.pte", "is not what the plan adds", extra=("--runtime", "1.5"))


def test_self_check_refuses_a_guard_jumping_elsewhere(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def corrupt(source: object, program: m.Program, contents: object) -> m.Program:
        plan, values, instructions = _first_method(program)
        jump = instructions[0]
        assert isinstance(jump, m.JumpFalseCall)
        instructions[0] = replace(jump, destination_instruction=jump.destination_instruction - 1)  # skips the move
        return _with(program, plan, values, instructions)

    corrupt_apply(monkeypatch, corrupt)
    refused(tmp_path, EXAMPLES / "mlp_copy.pte", "first-call prologue", extra=("--runtime", "1.5"))


def test_self_check_refuses_a_jump_into_the_prologue(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def corrupt(source: object, program: m.Program, contents: object) -> m.Program:
        plan, values, instructions = _first_method(program)
        values.append(m.Bool(False))
        instructions.append(m.JumpFalseCall(len(values) - 1, 1))  # back to the first copy: it would run again
        return _with(program, plan, values, instructions)

    corrupt_apply(monkeypatch, corrupt)
    refused(tmp_path, EXAMPLES / "mlp_copy.pte", "the number of values changed", extra=("--runtime", "1.5"))


def test_self_check_refuses_a_destination_another_instruction_writes(monkeypatch: pytest.MonkeyPatch,
                                                                     tmp_path: Path) -> None:
    def corrupt(source: object, program: m.Program, contents: object) -> m.Program:
        plan, values, instructions = _first_method(program)
        prologue = first_call_prologue(plan)
        assert prologue is not None
        copy = instructions[prologue.copies[0]]
        assert isinstance(copy, m.KernelCall)
        instructions.append(copy)  # the same copy again, every call, at the end
        return _with(program, plan, values, instructions)

    corrupt_apply(monkeypatch, corrupt)
    refused(tmp_path, EXAMPLES / "mlp_copy.pte", "chain 0 has 10 instructions, expected 9", extra=("--runtime", "1.5"))


def test_self_check_refuses_a_plan_whose_destinations_share_bytes(monkeypatch: pytest.MonkeyPatch,
                                                                   tmp_path: Path) -> None:
    """A planner bug: two first-call destinations at one offset.  The output is what the plan says, but one copy
    would overwrite the other's constant: the self-check proves each destination apart from every other value."""
    from pte_devconst.rewriter.load import opened
    from pte_devconst.rewriter.encodings import encoding_for
    from pte_devconst.rewriter.plan import RewriteOptions
    from pte_devconst.rewriter.rewrite import plan_file

    with opened(EXAMPLES / "mlp_copy.pte", None) as (source, data):
        plan = plan_file(source, data, RewriteOptions(encoding=encoding_for(Runtime(1, 5))))
    edit = plan.methods[0]
    first, second = edit.placements[:2]
    wrong = replace(edit, placements=(first, replace(second, offset=first.offset)) + edit.placements[2:])
    use_plan(monkeypatch, replace(plan, methods=(wrong,)))
    refused(tmp_path, EXAMPLES / "mlp_copy.pte", "overlaps the region of moved value", extra=("--runtime", "1.5"))


# --- the command line ------------------------------------------------------------------------------------


def test_the_summary_line_names_the_runtime_the_output_needs(tmp_path: Path) -> None:
    source = EXAMPLES / "mlp_copy.pte"
    done = invoke("rewrite", source, "-o", tmp_path / "a.pte")
    assert done.exit_code == 0
    assert "needs ExecuTorch >= 1.6 (device initial data; for a 1.5 runtime: --runtime 1.5)" in done.stdout
    done = invoke("rewrite", source, "-o", tmp_path / "b.pte", "--runtime", "1.5")
    assert done.exit_code == 0 and "needs ExecuTorch >= 1.5 (first-call copies" in done.stdout
    quiet = invoke("-q", "rewrite", source, "-o", tmp_path / "c.pte")
    assert quiet.exit_code == 0 and not quiet.stdout
    assert "needs ExecuTorch >= 1.6" in quiet.stderr  # -q still says it, unless the config chose the runtime
    (tmp_path / "pyproject.toml").write_text('[tool.pte-devconst]\nruntime = "1.6"\n')
    chosen = invoke("-q", "rewrite", source, "-o", tmp_path / "d.pte", "--config", tmp_path / "pyproject.toml")
    assert chosen.exit_code == 0 and not chosen.stdout and not chosen.stderr


def test_the_config_chooses_the_encoding(tmp_path: Path) -> None:
    config = tmp_path / "pyproject.toml"
    config.write_text('[tool.pte-devconst]\nruntime = "1.5"\n')
    done = invoke("rewrite", EXAMPLES / "mlp_copy.pte", "-o", tmp_path / "out.pte", "--config", config)
    assert done.exit_code == 0, done.stderr
    assert required_runtime(_program(tmp_path / "out.pte")).runtime == Runtime(1, 5)
    config.write_text('[tool.pte-devconst]\nruntime = "1.4"\n')
    bad = invoke("rewrite", EXAMPLES / "mlp_copy.pte", "-o", tmp_path / "bad.pte", "--config", config)
    assert bad.exit_code == 2 and len(bad.stderr.splitlines()) == 1
    assert f"{config}: runtime: unknown ExecuTorch runtime '1.4'" in bad.stderr
    assert not (tmp_path / "bad.pte").exists()


def test_no_new_operator_is_added_to_a_program_without_the_copy_kernel(tmp_path: Path) -> None:
    """Folding in a legacy-style method under 1.5 would need et_copy::_h2d_copy.out: refused per chain."""
    fixtures = Path(__file__).parent / "fixtures" / "fold"
    result = _rewrite(fixtures / "both_legacy.pte", tmp_path / "out.pte", "1.5", fold=True)
    assert not result.plan.folds and all(H2D_COPY in s.reason for s in result.plan.fold_skipped)
    assert _program(tmp_path / "out.pte").execution_plan[0].operators == \
        _program(fixtures / "both_legacy.pte").execution_plan[0].operators  # type: ignore[index]


def test_check_fails_a_1_6_only_file_for_a_1_5_project_and_passes_its_fix(tmp_path: Path) -> None:
    source = EXAMPLES / "mlp_copy.pte"
    sixteen, fifteen = tmp_path / "m16.pte", tmp_path / "m15.pte"
    _rewrite(source, sixteen, "1.6")
    _rewrite(source, fifteen, "1.5")
    # a 1.6 project: both rewrites pass; the 1.6-only one is named in the runtime line
    report = api.check([sixteen, fifteen])
    assert report.exit_code is ExitCode.OK and not report.runtime_findings
    assert [f.runtime_need.runtime for f in report.files] == [Runtime(1, 6), Runtime(1, 5)]  # type: ignore[union-attr]
    # a 1.5 project: the 1.6 file fails, one finding per tensor only 1.6 loads, with the fix for 1.5
    report = api.check([sixteen, fifteen], runtime="1.5")
    assert report.exit_code is ExitCode.FINDINGS and report.runtime == Runtime(1, 5)
    (failing,) = [f for f in report.files if f.runtime_findings]
    assert failing.file == str(sixteen) and len(failing.runtime_findings) == 4
    assert all("rewrite --runtime 1.5" in x.reason for x in failing.runtime_findings)
    done = invoke("check", sixteen, fifteen, "--runtime", "1.5")
    assert done.exit_code == 1
    assert f"fix: pte-devconst rewrite --runtime 1.5 --in-place {sixteen}" in done.stdout.replace("\n", "")
    # the fix it names makes the file pass
    assert invoke("rewrite", "--runtime", "1.5", "--in-place", sixteen).exit_code == 0
    assert api.check([sixteen, fifteen], runtime="1.5").exit_code is ExitCode.OK
    # per-call copies fail a 1.5 project with the 1.5 fix command
    done = invoke("check", source, "--runtime", "1.5")
    assert done.exit_code == 1 and "pte-devconst rewrite --runtime 1.5 --in-place FILE" in " ".join(done.stdout.split())


def test_check_passes_legacy_copies_a_1_5_project_cannot_remove_as_stays() -> None:
    report = api.check([EXAMPLES / "mlp_legacy.pte"], runtime="1.5")
    assert report.exit_code is ExitCode.OK and not report.findings
    assert len(report.stays) == 4 and all("legacy style" in x.reason for x in report.stays)
    assert api.check([EXAMPLES / "mlp_legacy.pte"], runtime="1.5", strict=True).exit_code is ExitCode.FINDINGS


def test_inspect_and_diff_name_the_runtime(tmp_path: Path) -> None:
    sixteen, fifteen = tmp_path / "m16.pte", tmp_path / "m15.pte"
    _rewrite(EXAMPLES / "mlp_copy.pte", sixteen, "1.6")
    _rewrite(EXAMPLES / "mlp_copy.pte", fifteen, "1.5")
    text = " ".join(invoke("inspect", sixteen).stdout.split())
    assert ("Loads in ExecuTorch >= 1.6 (device initial data: 4 tensors); for a 1.5 runtime: pte-devconst rewrite "
            "--runtime 1.5.") in text
    text = " ".join(invoke("inspect", fifteen).stdout.split())
    assert "Loads in ExecuTorch 1.5 runtimes and newer." in text
    assert "No constant is copied to a device on every call." in text
    assert "constants copied to a device once, on the first call" in text
    done = invoke("diff", sixteen, fifteen)
    row = next(line for line in done.stdout.splitlines() if "loads in ExecuTorch" in line)
    assert ">= 1.6" in row and ">= 1.5" in row and "now loads in 1.5" in row
