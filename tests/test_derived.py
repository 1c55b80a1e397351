"""rewriter/derived.py: which per-call copies carry constant data, and the reason each one is still made.

On the corpus and the real models (the ``mm`` partitions transpose every linear weight on the host),
and held against the runner: a copy called constant-derived carries the same bytes on every call.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import CASES, FIXTURES, ptd_path, pte_path, shipped
from pte_devconst.rewriter.derived import DerivedStatus, derived_copies, reason_kind, reasons_in_brief
from pte_devconst.rewriter.load import analyze_opened, opened
from pte_devconst.schema import model as m
from pte_devconst.program.transfers import per_call_transfers

REAL = FIXTURES / "real_models"


def _copies(path: Path, ptd: Path | None = None):
    with opened(path, ptd) as (source, data):
        analysis = analyze_opened(source, data)
        return analysis, derived_copies(source.program, analysis)


def _by_value(copies) -> dict[tuple[int, str], object]:
    return {(c.value, str(c.device)): c for c in copies}


@pytest.mark.parametrize("name, value, device, status, reason", [
    ("v_c_shared_host_copy", 0, "cuda:0", DerivedStatus.STAYS, "read by host kernel aten::mul.out"),
    ("v_c_shared_host_legacy", 0, "cuda:0", DerivedStatus.STAYS, "read by host kernel aten::mul.out"),
    ("v_c_shared_host_copy", 2, "cuda:0", DerivedStatus.MOVABLE, ""),
    ("v_e_two_devices_copy", 0, "cuda:1", DerivedStatus.STAYS,
     "read by delegates on different devices (cuda:0, cuda:1)"),
    ("v_d_host_view_legacy", 5, "cuda:0", DerivedStatus.STAYS,
     "transposed on the host from value 0 (aten::permute_copy.out)"),
    ("v_g_external_copy", 1, "cuda:0", DerivedStatus.STAYS, "read by host kernel aten::mul.out"),
])
def test_each_copy_gets_its_status_and_reason(name: str, value: int, device: str, status: str, reason: str) -> None:
    _, copies = _copies(pte_path(name), ptd_path(name))
    copy = _by_value(copies)[(value, device)]
    assert (copy.status, copy.reason) == (status, reason)
    assert copy.computed == reason.startswith("transposed")


def test_an_external_constant_without_its_data_is_unknown_with_the_way_to_pass_it(tmp_path: Path) -> None:
    lone = tmp_path / "model.pte"
    lone.write_bytes(pte_path("v_g_external_copy").read_bytes())
    _, copies = _copies(lone)
    statuses = {c.name: (c.status, c.reason) for c in copies}
    assert statuses["w"][0] == DerivedStatus.UNKNOWN and "pass --ptd" in statuses["w"][1]
    assert statuses["b"] == (DerivedStatus.STAYS, "read by host kernel aten::mul.out")


def test_a_weight_transposed_on_the_host_stays_before_and_after_the_rewrite(tmp_path: Path) -> None:
    from pte_devconst.rewriter.rewrite import rewrite_file

    source = REAL / "gpt2_mm_copy.pte"
    analysis, before = _copies(source)
    transposed = [c for c in before if c.status == DerivedStatus.STAYS]
    assert transposed and all(reason_kind(c.reason) == "transposed on the host" for c in transposed)
    assert all(c.sources and c.host_ops == ("aten::permute_copy.out",) for c in transposed)
    out = tmp_path / "out.pte"
    rewrite_file(source, out)
    _, after = _copies(out)
    assert [c for c in after if c.status == DerivedStatus.MOVABLE] == []
    assert {(c.value, c.reason) for c in after} == {(c.value, c.reason) for c in transposed}


PROGRAMS = ([pytest.param(pte_path(n), ptd_path(n), id=n) for n in CASES]
            + [pytest.param(REAL / f"{n}.pte", None, id=f"real-{n}") for n in shipped(REAL)])


@pytest.mark.parametrize("pte, ptd", PROGRAMS)
def test_the_movable_copies_are_what_the_rewrite_saves_and_all_are_per_call_copies(pte: Path, ptd) -> None:
    analysis, copies = _copies(pte, ptd)
    movable = sum(c.bytes_per_call for c in copies if c.status == DerivedStatus.MOVABLE)
    assert movable == sum(c.nbytes * c.copies_per_call for c in analysis.eligible)
    for method in analysis.methods:
        mine = [c for c in copies if c.plan_index == method.plan_index]
        assert sum(c.bytes_per_call for c in mine) <= method.h2d_bytes_per_call
        sources = {(t.value, t.device) for t in method.transfers}
        assert all((c.value, c.device) in sources for c in mine)


def _digests_by_copy(pte: Path, ptd, inputs: Path) -> list[dict[int, tuple]]:
    """Per call: the digest of every value that crossed to a device at a delegate boundary, keyed by source value."""
    pytest.importorskip("torch")
    from pte_devconst.runner import run_program
    from pte_devconst.runner.delegates import OpaquePolicy

    result = run_program(pte, ptd_path=ptd, inputs=inputs, calls=2, simulate_devices=True,
                         opaque=OpaquePolicy.MISSING, transcript=True)
    calls = []
    for call in result.calls:
        seen: dict[int, tuple] = {}
        for record in call.delegate_calls:
            for arg in record.args:
                if arg.digest is not None:
                    seen.setdefault(arg.h2d_source if arg.h2d_source is not None else arg.value, arg.digest)
        calls.append(seen)
    return calls


MM = [n for n in shipped(REAL) if "_mm_" in n]


@pytest.mark.parametrize("name", MM)
def test_a_constant_derived_copy_carries_the_same_bytes_on_calls_with_other_inputs(name: str) -> None:
    """The runner's delegate-boundary digests on two calls with different inputs: every value called
    constant-derived crossed with the same bytes both times, and the activations did not."""
    pte = REAL / f"{name}.pte"
    _, copies = _copies(pte)
    first, second = _digests_by_copy(pte, None, REAL / f"{name}.inputs.pt")
    derived = {c.value for c in copies}
    assert derived and derived <= set(first) & set(second)
    assert all(first[v] == second[v] for v in derived)
    assert any(first[v] != second[v] for v in set(first) & set(second) - derived)


# --- the rule on hand-made plans ------------------------------------------------------------------

def _t(memory_id: int | None = None, offset: int = 0, **kw) -> m.Tensor:
    alloc = None if memory_id is None else m.AllocationDetails(memory_id, offset)
    return m.Tensor(scalar_type=m.ScalarType.FLOAT, sizes=(4,), dim_order=(0,), allocation_info=alloc, **kw)


def _derived_values(values: list, instructions: list, inputs: tuple[int, ...] = ()) -> set[int]:
    from pte_devconst.rewriter.model.analysis import analyze_program

    plan = m.ExecutionPlan(name="forward", values=tuple(values), inputs=inputs, outputs=(),
                           chains=(m.Chain(instructions=tuple(instructions)),),
                           operators=(m.Operator("aten::permute_copy", "out"), m.Operator("aten::add", "out")),
                           delegates=(m.BackendDelegate(id="X", compile_specs=(
                               m.CompileSpec("target_device", b"cuda:0"),)),),
                           non_const_buffer_sizes=(0, 256))
    program = m.Program(execution_plan=(plan,))
    assert per_call_transfers(plan)  # every case below copies something per call
    return {c.value for c in derived_copies(program, analyze_program(program))}


CONST = _t(data_buffer_idx=1)


def test_the_rule_follows_host_kernels_views_and_moves_but_not_inputs_or_state() -> None:
    # value 0 constant, value 1 input, value 2 an Int literal; 3 = permute(0) (derived), 4 = add(3, 1) (not:
    # an input), 5 = a static view of 3 (same region), 6 = moved from 3; 7 holds initial data (state).
    values = [CONST, _t(1, 0), m.Int(1), _t(1, 16), _t(1, 32), _t(1, 16), _t(1, 48), _t(1, 64, data_buffer_idx=1),
              _t(1, 80)]
    instructions = [m.KernelCall(0, (0, 2, 3, 3)), m.KernelCall(1, (3, 1, 2, 4, 4)), m.MoveCall(3, 6),
                    m.DelegateCall(0, (3, 4, 5, 6, 7, 8))]
    assert _derived_values(values, instructions, inputs=(1,)) == {3, 5, 6}


def test_a_constant_moved_into_another_value_stays_with_the_constant_verdict() -> None:
    from pte_devconst.rewriter.model.analysis import analyze_program

    values = [CONST, _t(1, 0), _t(1, 16)]
    plan = m.ExecutionPlan(name="forward", values=tuple(values), inputs=(), outputs=(),
                           chains=(m.Chain(instructions=(m.MoveCall(0, 1), m.DelegateCall(0, (1, 2)))),),
                           operators=(), delegates=(m.BackendDelegate(id="X", compile_specs=(
                               m.CompileSpec("target_device", b"cuda:0"),)),), non_const_buffer_sizes=(0, 64))
    program = m.Program(execution_plan=(plan,))
    (copy,) = derived_copies(program, analyze_program(program))
    assert (copy.value, copy.status, copy.reason) == (1, DerivedStatus.STAYS, "used by a MoveCall")


def test_a_device_delegate_result_is_not_constant_derived() -> None:
    values = [CONST, _t(1, 0), _t(1, 16)]
    instructions = [m.DelegateCall(0, (0, 1)), m.DelegateCall(0, (1, 2))]  # 1 comes back from the device
    assert _derived_values(values, instructions) == {0}


def test_a_jump_keeps_a_value_that_was_not_constant_derived_so() -> None:
    # Value 3 is written from the input, then (if the caller's flag, value 2, is true) from the constant.
    flag = m.Tensor(scalar_type=m.ScalarType.BOOL, sizes=(1,), dim_order=(0,))
    values = [CONST, _t(1, 0), flag, _t(1, 16), _t(1, 32)]
    instructions = [m.KernelCall(0, (1, 3, 3)), m.JumpFalseCall(2, 3), m.KernelCall(0, (0, 3, 3)),
                    m.DelegateCall(0, (3, 4))]
    assert _derived_values(values, instructions, inputs=(1, 2)) == set()
    # Without the jump the constant's result is what the delegate reads.
    straight = [instructions[0], instructions[2], instructions[3]]
    assert _derived_values(values, straight, inputs=(1, 2)) == {3}


def test_a_copy_of_a_literal_that_is_not_a_tensor_is_no_constant_derived_copy(tmp_path: Path) -> None:
    """A forged _h2d_copy whose source is an Int (found by tests/test_fold_fuzz.py's long run): no constant data
    crosses, so it is no finding, and inspect, check and rewrite judge the program instead of crashing."""
    try:
        from fuzz.mutate import assemble_pte
    except ImportError:
        from tests.fuzz.mutate import assemble_pte
    from cli_runner import invoke
    from pte_devconst.rewriter.model.analysis import analyze_program
    from pte_devconst.schema.pte_file import PteFile

    source = FIXTURES / "fold" / "channels_last_copy.pte"
    data = source.read_bytes()
    with PteFile.from_bytes(data) as pte:
        program = pte.program
    plan = program.execution_plan[0]
    (copy_index,) = [i for i, ins in enumerate(plan.chains[0].instructions)
                     if isinstance(ins, m.KernelCall) and ins.args == (1, 9, 9)]
    literal = next(i for i, v in enumerate(plan.values) if isinstance(v, m.Int))
    instructions = list(plan.chains[0].instructions)
    instructions[copy_index] = m.replace(instructions[copy_index], args=(literal, 9, 9))
    forged = m.replace(program, execution_plan=(m.replace(plan, chains=(m.replace(
        plan.chains[0], instructions=tuple(instructions)),)),))
    assert literal in {t.value for t in per_call_transfers(forged.execution_plan[0])}  # the copy is still a transfer
    assert literal not in {c.value for c in derived_copies(forged, analyze_program(forged))}
    path = tmp_path / "literal_copy.pte"
    path.write_bytes(assemble_pte(forged, data))
    for args in (("inspect", path), ("check", "--fold", path), ("rewrite", path, "--fold", "-o", tmp_path / "o.pte")):
        result = invoke(*args)
        assert result.exit_code in (0, 1) and "Traceback" not in result.stderr, (args, result.stderr)


def test_reasons_in_brief_counts_each_kind() -> None:
    reasons = ["read by host kernel aten::mul.out", "transposed on the host from w (aten::permute_copy.out)",
               "transposed on the host from v (aten::permute_copy.out)"]
    assert reasons_in_brief(reasons) == "2 transposed on the host, 1 read by host kernel aten::mul.out"
