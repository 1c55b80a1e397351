"""Conversion between the two runtime encodings is a proven operation (issue 35).

``rewrite --runtime R`` of a file in the other encoding converts it; ``validate`` passes every correct conversion
against the file it came from and against the true original (the byte replay judges what each read sees, not
which instruction of which encoding wrote it).  Hand-made first-call files the tool cannot prove are treated as
ordinary per-call copies, and ``check``, ``rewrite --dry-run`` and ``rewrite`` give one answer for each.
The real runtime's verdict on the same conversions is in tests/test_real_runtime.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional

import pytest

from conftest import EXAMPLES, pte_path
from pte_devconst import api
from pte_devconst.rewriter.encodings.first_call import first_call_prologue
from pte_devconst.schema import model as m
from pte_devconst.schema.pte_file import open_pte
from pte_devconst.util.exit_code import ExitCode

FIXTURES = Path(__file__).parent / "fixtures" / "xnnpack_device"

# (program, its inputs): real XNNPACK-as-device exports (one and two methods, a KV cache, a GRU, a fold case), the
# shipped examples, and the corpus's torch.cond export
PROGRAMS = {
    **{name: (FIXTURES / f"{name}.pte", FIXTURES / f"{name}.inputs.pt")
       for name in ("mlp_copy", "two_methods_copy", "kv_cache_copy", "gru_copy", "fold_copy", "attention_copy")},
    **{name: (EXAMPLES / f"{name}.pte", EXAMPLES / f"{name}.inputs.pt") for name in ("mlp_copy", "two_gpu_copy")},
    "cond": (pte_path("v_j_cond_copy"), pte_path("v_j_cond_copy").with_suffix(".inputs.pt")),
}
# the example names repeat a fixture's: keep both, told apart
CASES = [(f"{'example_' if path.parent == EXAMPLES else ''}{name}", path, inputs)
         for name, (path, inputs) in PROGRAMS.items()]


def _failed(result: "api.ValidationResult") -> list[str]:  # type: ignore[name-defined]
    return [f"{mv.method}: {c.name}: {c.detail}" for mv in result.methods for c in mv.checks if not c.passed]


def _validate(before: Path, after: Path, inputs: Path) -> None:
    result = api.validate(before, after, inputs=inputs, calls=3, simulate_devices=True)
    assert result.passed, (before.name, after.name, _failed(result))


@pytest.mark.parametrize("fold", [False, True], ids=["plain", "fold"])
@pytest.mark.parametrize("name, source, inputs", CASES, ids=[c[0] for c in CASES])
def test_every_conversion_passes_validate_against_its_input_and_the_original(
        name: str, source: Path, inputs: Path, fold: bool, tmp_path: Path) -> None:
    """1.6 -> 1.5 -> 1.6 and 1.5 -> 1.6 -> 1.5: each step is validated against the file it converted and
    against the original export; each conversion changes the encoding and nothing else."""
    for first, second in (("1.6", "1.5"), ("1.5", "1.6")):
        chain = [source]
        for step, runtime in enumerate((first, second, first)):
            out = tmp_path / f"{first}_{step}.pte"
            result = api.rewrite(chain[-1], out, runtime=runtime, fold=fold)
            assert result.changed, (runtime, step)
            if step:  # a conversion: nothing was copied per call, only the encoding changes
                assert result.plan.bytes_per_call_saved == 0
            chain.append(out)
        for before, after in zip(chain, chain[1:]):
            _validate(before, after, inputs)
        for after in chain[2:]:
            _validate(source, after, inputs)
        # back in its first encoding, the file is settled: rewriting it for that runtime again changes nothing
        assert not api.rewrite(chain[3], tmp_path / "again.pte", runtime=first, fold=fold).changed


# --- hand-made first-call files --------------------------------------------------------------------------------


def _first_call(tmp_path: Path) -> Path:
    out = tmp_path / "first_call.pte"
    api.rewrite(EXAMPLES / "mlp_copy.pte", out, runtime="1.5")
    return out


Edit = Callable[[m.ExecutionPlan, list[m.EValue], list[m.Instruction]], None]


def _hand_made(tmp_path: Path, name: str, edit: Edit) -> Path:
    """The shipped MLP's 1.5 rewrite with its first method changed by ``edit`` (values and chain 0 in place)."""
    from fuzz.mutate import assemble_pte

    good = _first_call(tmp_path)
    with open_pte(good) as pte:
        program = pte.program
    plan = program.execution_plan[0]  # type: ignore[index]
    values, instructions = list(plan.values or ()), list(plan.chains[0].instructions or ())  # type: ignore[index]
    edit(plan, values, instructions)
    chain = m.replace(plan.chains[0], instructions=tuple(instructions), stacktrace=None)  # type: ignore[index]
    new = m.replace(plan, values=tuple(values), chains=(chain,) + tuple(plan.chains[1:]))  # type: ignore[index]
    program = m.replace(program, execution_plan=(new,) + tuple(program.execution_plan[1:]))  # type: ignore[index]
    out = tmp_path / f"{name}.pte"
    out.write_bytes(assemble_pte(program, good.read_bytes()))
    return out


def _prologue(plan: m.ExecutionPlan) -> "object":
    found = first_call_prologue(plan)
    assert found is not None, "the tool's own 1.5 rewrite starts with a prologue"
    return found


def never_clears(plan: m.ExecutionPlan, values: list[m.EValue], instructions: list[m.Instruction]) -> None:
    values[_prologue(plan).cleared_from] = m.Bool(True)  # type: ignore[attr-defined]


def written_later(plan: m.ExecutionPlan, values: list[m.EValue], instructions: list[m.Instruction]) -> None:
    instructions.append(instructions[_prologue(plan).copies[0]])  # type: ignore[attr-defined]


def input_source(plan: m.ExecutionPlan, values: list[m.EValue], instructions: list[m.Instruction]) -> None:
    k = _prologue(plan).copies[0]  # type: ignore[attr-defined]
    copy = instructions[k]
    assert isinstance(copy, m.KernelCall)
    instructions[k] = m.replace(copy, args=(plan.inputs[0], *copy.args[1:]))  # type: ignore[index]


def two_into_one(plan: m.ExecutionPlan, values: list[m.EValue], instructions: list[m.Instruction]) -> None:
    first, second = _prologue(plan).copies[:2]  # type: ignore[attr-defined]
    a, b = instructions[first], instructions[second]
    assert isinstance(a, m.KernelCall) and isinstance(b, m.KernelCall)
    instructions[second] = m.replace(b, args=(b.args[0], a.args[1], a.args[2]))  # type: ignore[index]


def jump_enters(plan: m.ExecutionPlan, values: list[m.EValue], instructions: list[m.Instruction]) -> None:
    instructions.append(m.JumpFalseCall(_prologue(plan).cleared_from, 2))  # type: ignore[attr-defined]


HAND_MADE: dict[str, tuple[Edit, Optional[int]]] = {
    # name: (the edit, the constants check must find copied per call; None: any number, the file must not fail)
    "never_clears": (never_clears, 4),  # every call runs the prologue's copies again
    "written_later": (written_later, None),
    "input_source": (input_source, None),
    "two_into_one": (two_into_one, None),
    "jump_enters": (jump_enters, None),
}


@pytest.mark.parametrize("runtime", ["1.5", "1.6"])
@pytest.mark.parametrize("name", sorted(HAND_MADE))
def test_hand_made_first_call_files_get_one_answer(name: str, runtime: str, tmp_path: Path) -> None:
    """Not recognised as a first-call prologue (first_call_prologue is strict), each is a program with per-call
    copies behind a jump: check, rewrite --dry-run and rewrite agree on what moves, and a rewrite that moves
    something is correct (validate against the hand-made file), never an internal error."""
    edit, copied = HAND_MADE[name]
    made = _hand_made(tmp_path, name, edit)
    with open_pte(made) as pte:
        assert first_call_prologue(pte.program.execution_plan[0]) is None  # type: ignore[index]
    report = api.check([made], runtime=runtime)
    dry = api.rewrite(made, tmp_path / "dry.pte", runtime=runtime, dry_run=True)
    out = tmp_path / "out.pte"
    done = api.rewrite(made, out, runtime=runtime)
    assert len(report.findings) == len(dry.plan.placements) == len(done.plan.placements)
    if copied is not None:
        assert len(report.findings) == copied and report.exit_code is ExitCode.FINDINGS
    else:
        assert report.exit_code is ExitCode.OK and report.stays  # copies that stay, each with its reason
    if done.changed:
        _validate(made, out, EXAMPLES / "mlp_copy.inputs.pt")
        assert api.check([out], runtime=runtime).exit_code is ExitCode.OK


def test_check_fails_a_guard_that_never_clears_and_its_rewrite_fixes_it(tmp_path: Path) -> None:
    made = _hand_made(tmp_path, "never_clears", never_clears)
    report = api.check([made], runtime="1.5")
    assert report.exit_code is ExitCode.FINDINGS
    assert report.bytes_per_call == sum(f.nbytes for f in report.findings) > 0
    out = tmp_path / "fixed.pte"
    assert api.rewrite(made, out, runtime="1.5").changed
    assert api.check([out], runtime="1.5").exit_code is ExitCode.OK
    _validate(EXAMPLES / "mlp_copy.pte", out, EXAMPLES / "mlp_copy.inputs.pt")


def test_a_conversion_keeps_initial_data_offsets_in_order(tmp_path: Path) -> None:
    """Converting to first-call copies drops the initial-data entries only re-encoded constants read: they hold no
    bytes and the offsets never decrease (ExecuTorch's Python serializer cuts the segment at successive offsets:
    with dropped entries at offset 0 a round trip gave the KV cache's value the key cache's bytes)."""
    source = FIXTURES / "kv_cache_copy.pte"
    at_load, once = tmp_path / "at_load.pte", tmp_path / "once.pte"
    api.rewrite(source, at_load)
    result = api.rewrite(at_load, once, runtime="1.5")
    assert result.plan.dropped_initial_data  # the case: entries dropped
    with open_pte(once) as pte:
        (lists,) = pte.program.mutable_data_segments or ()
        offsets = list(lists.offsets or ())
    assert offsets == sorted(offsets), offsets


def test_validate_fails_a_guard_that_never_clears(tmp_path: Path) -> None:
    """The first-call encoding's reader of its own files still names the copies of a prologue whose guard never
    clears (what the file claims to copy once), so the runner holds them to running once and fails the file."""
    made = _hand_made(tmp_path, "never_clears", never_clears)
    result = api.validate(EXAMPLES / "mlp_copy.pte", made, inputs=EXAMPLES / "mlp_copy.inputs.pt", calls=3,
                          simulate_devices=True)
    assert not result.passed
    assert sum(len(mv.moved) for mv in result.methods) == 4  # the four claimed copies, each expected once
