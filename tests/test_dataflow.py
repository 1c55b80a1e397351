"""program/dataflow.py: the static input/output split of delegate calls, and which outputs a delegate reaches."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from conftest import CASES, CORPUS, EXAMPLES, facts, pte_path, ptd_path, shipped
from forge import with_backend
from pte_devconst.runner import run_program
from pte_devconst.runner.delegates import OpaquePolicy
from pte_devconst.runner.demo_backend import parse_blob
from pte_devconst.schema import model as m
from pte_devconst.program.dataflow import delegate_call_sites
from pte_devconst.program.effects import outputs_depending_on
from pte_devconst.schema.pte_file import open_pte

REAL = CORPUS.parent / "real_models"
PROGRAMS = ([EXAMPLES / f"{n}.pte" for n in shipped(EXAMPLES)] + [pte_path(n) for n in CASES]
            + [REAL / f"{n}.pte" for n in shipped(REAL)]
            + [CORPUS.parent / "moe_swin" / f"{n}.pte" for n in shipped(CORPUS.parent / "moe_swin")])


def _stated_inputs(backend: str, blob: bytes, n_args: int) -> int | None:
    """The input count a backend's own blob states: the reference backend's `inputs`, the demo's op arities."""
    if backend == "PteDevconstReference":
        return len(json.loads(blob)["inputs"])
    if backend == "BackendWithCompilerDemo":
        wiring = parse_blob(blob, "test").wiring(n_args)
        assert wiring is not None
        return wiring[0]
    return None


def test_split_agrees_with_every_blob_that_states_it() -> None:
    checked = 0
    views = 0
    for path in PROGRAMS:
        with open_pte(path) as pte:
            for plan in pte.program.execution_plan:
                for site in delegate_call_sites(plan):
                    delegate = plan.delegates[site.delegate_index]
                    stated = _stated_inputs(delegate.id, bytes(pte.delegate_blob(delegate)), len(site.args))
                    if stated is None:
                        continue
                    assert site.n_inputs == stated, (path.name, plan.name, site)
                    checked += 1
                    views += path.stem == "v_d_host_view_legacy"
    assert checked >= 370  # every delegate call of the examples, the corpus and the real-model device programs
    assert views == 1  # including the one whose inputs hold a static view the emitter elided


# --- the rule on hand-made plans ------------------------------------------------------------------

def _t(memory_id: int | None = None, offset: int = 0, sizes: tuple[int, ...] = (4,), **kw) -> m.Tensor:
    alloc = None if memory_id is None else m.AllocationDetails(memory_id, offset)
    return m.Tensor(scalar_type=m.ScalarType.FLOAT, sizes=sizes, dim_order=tuple(range(len(sizes))),
                    allocation_info=alloc, **kw)


def _plan(values: list, instructions: list, inputs: tuple[int, ...] = (0,),
          outputs: tuple[int, ...] = ()) -> m.ExecutionPlan:
    return m.ExecutionPlan(name="forward", values=tuple(values), inputs=inputs, outputs=outputs,
                           chains=(m.Chain(instructions=tuple(instructions)),),
                           operators=(m.Operator("aten::relu", "out"),), delegates=(m.BackendDelegate(id="X"),),
                           non_const_buffer_sizes=(0, 256))


def _split(plan: m.ExecutionPlan) -> list[int]:
    return [site.n_inputs for site in delegate_call_sites(plan)]


def test_a_static_view_of_pending_data_is_an_input_even_last() -> None:
    # value 1 = relu(x) at @16; value 2 is the emitter's elided static view of it (same region, no
    # instruction); the delegate reads (x, view) and writes value 3.  Listed last, the view is still an input.
    values = [_t(1, 0), _t(1, 16), _t(1, 16, sizes=(2, 2)), _t(1, 32)]
    kernel = m.KernelCall(0, (0, 1, 1))
    assert _split(_plan(values, [kernel, m.DelegateCall(0, (0, 2, 3))])) == [2]
    # Without the view rule the split would be 1: the view is the only argument no instruction mentions.
    assert _split(_plan(values, [kernel, m.DelegateCall(0, (0, 3))])) == [1]


def test_an_output_may_reuse_the_region_of_data_already_read() -> None:
    # relu writes value 1 at @16, a second relu reads it; the delegate's output value 3 reuses @16.
    values = [_t(1, 0), _t(1, 16), _t(1, 48), _t(1, 16)]
    instructions = [m.KernelCall(0, (0, 1, 1)), m.KernelCall(0, (1, 2, 2)), m.DelegateCall(0, (2, 3))]
    assert _split(_plan(values, instructions)) == [1]


def test_the_last_argument_is_an_output_even_over_pending_data() -> None:
    # Value 1 is written and never read (an unused second result); the delegate's only output reuses its slot.
    values = [_t(1, 0), _t(1, 16), _t(1, 16)]
    assert _split(_plan(values, [m.KernelCall(0, (0, 1, 1)), m.DelegateCall(0, (0, 2))])) == [1]


def test_kinds_inputs_constants_and_state_are_never_outputs() -> None:
    constant = _t(None, data_buffer_idx=1)
    state = _t(1, 64, data_buffer_idx=1)
    values = [_t(1, 0), constant, state, m.Double(1.5), m.Int(3), _t(1, 16)]
    # (input, constant, state, double, symint out, tensor out)
    assert _split(_plan(values, [m.DelegateCall(0, (0, 1, 2, 3, 4, 5))])) == [4]
    assert _split(_plan(values, [m.DelegateCall(0, (5, 0, 1, 2, 3))])) == [5]  # nothing defined last: no outputs


# --- which outputs depend on a delegate --------------------------------------------------------------

def test_outputs_depending_on_a_delegate_on_a_hand_made_plan() -> None:
    # delegate 0: x -> value 1 (output 0); relu: x -> value 2 (output 1); relu: value 1 -> value 3 (output 2)
    values = [_t(1, 0), _t(1, 16), _t(1, 32), _t(1, 48)]
    plan = _plan(values, [m.DelegateCall(0, (0, 1)), m.KernelCall(0, (0, 2, 2)), m.KernelCall(0, (1, 3, 3))],
                 outputs=(1, 2, 3))
    assert outputs_depending_on(plan, {0}) == {0, 2}
    assert outputs_depending_on(plan, set()) == frozenset()


DEVICE_CASES = [n for n in CASES if facts(n)["style"] in ("copy", "legacy")]


@pytest.mark.parametrize("name", DEVICE_CASES)
def test_outputs_not_reached_by_delegates_are_untouched_by_stand_ins(name: str) -> None:
    """Ground truth from the runner: running every delegate opaque changes exactly the outputs the rule names."""
    inputs = torch.load(CORPUS / f"{name}.inputs.pt", weights_only=True)
    with open_pte(pte_path(name)) as pte:
        plans = {p.name: p for p in pte.program.execution_plan}
    for method, calls in inputs.items():
        plan = plans[method]
        reached = outputs_depending_on(plan, set(range(len(plan.delegates))))
        common = dict(ptd_path=ptd_path(name), method=method, inputs=calls, calls=len(calls), simulate_devices=True)
        real = run_program(pte_path(name), **common)
        opaque = run_program(pte_path(name), opaque=OpaquePolicy.ALWAYS, **common)
        for a, b in zip(real.calls, opaque.calls):
            for position, (x, y) in enumerate(zip(a.outputs, b.outputs)):
                if position not in reached:
                    assert torch.equal(x, y), (method, position)
                elif x.numel():  # an empty output has nothing to differ in
                    assert not torch.equal(x, y), (method, position)


@pytest.mark.parametrize("name", ["v_c_shared_host_copy", "v_c_shared_host_legacy"])
def test_an_output_independent_of_the_opaque_delegate_keeps_its_real_value(name: str, tmp_path: Path) -> None:
    # v_c: delegate 0 -> host mul -> output 1; delegate 0's result also feeds delegate 1 -> output 0.
    # With only delegate 1 opaque (its backend renamed to one without an executor), output 1 is real.
    forged = with_backend(pte_path(name), tmp_path / "one_opaque.pte", "CudaBackend", delegates={1})
    calls = torch.load(CORPUS / f"{name}.inputs.pt", weights_only=True)["forward"]
    with open_pte(forged) as pte:
        plan = pte.program.execution_plan[0]
    assert outputs_depending_on(plan, {1}) == {0}
    assert outputs_depending_on(plan, {0}) == {0, 1}
    common = dict(inputs=calls, calls=len(calls), simulate_devices=True)
    real = run_program(pte_path(name), **common)
    partly = run_program(forged, opaque=OpaquePolicy.MISSING, **common)
    assert partly.opaque_delegates == {1: "CudaBackend"}
    for a, b in zip(real.calls, partly.calls):
        assert torch.equal(a.outputs[1], b.outputs[1]) and not torch.equal(a.outputs[0], b.outputs[0])


def test_a_region_read_through_a_view_is_free_for_the_next_output() -> None:
    # An RNN step (gru_mm_legacy): a delegate writes value 1, a kernel reads it through its static view
    # value 2 (same region), and the next delegate call writes value 3 into that region again.  Value 3 is
    # an output although its region held data that value 1 itself never read.
    values = [_t(1, 0), _t(1, 16), _t(1, 16, sizes=(2, 2)), _t(1, 16), _t(1, 32), _t(1, 48)]
    instructions = [m.DelegateCall(0, (0, 1)), m.KernelCall(0, (2, 4, 4)), m.DelegateCall(0, (0, 3, 5))]
    assert _split(_plan(values, instructions)) == [1, 1]
    # Not read yet, the region still holds value 1's data: an argument there is a view of it, an input.
    unread = [m.DelegateCall(0, (0, 1)), m.DelegateCall(0, (0, 3, 5))]
    assert _split(_plan(values, unread)) == [1, 2]
