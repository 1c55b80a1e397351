"""program/transfers.py: the host-to-device copies of one call, read from the program alone.

The per-call figure of every committed program is held equal to the runner's in
test_estimate_vs_runner.py; these tests cover what no committed program has: jumps over copies
(``torch.cond`` branches with delegates in them), MoveCalls and host delegates writing device memory.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import EXAMPLES
from forge import edit_plans, edit_program
from pte_devconst.schema import model as m
from pte_devconst.program.transfers import TransferKind, h2d_bytes_per_call, per_call_transfers

CUDA0 = m.Device(m.DeviceType.CUDA, 0)
MLP_COPY = EXAMPLES / "mlp_copy.pte"  # five _h2d_copy kernels (2048, 128, 256, 1024, 32 B), then the delegate


def _with_jump(plan: m.ExecutionPlan, condition: m.EValue) -> m.ExecutionPlan:
    """A JumpFalseCall on a new value ``condition`` before copy 3 (value 2, 1,024 B), jumping over it."""
    cond = len(plan.values)
    instructions = list(plan.chains[0].instructions)
    instructions.insert(3, m.JumpFalseCall(cond_value_index=cond, destination_instruction=5))
    chain = m.replace(plan.chains[0], instructions=tuple(instructions))
    return m.replace(plan, values=plan.values + (condition,), chains=(chain,))


def _runner_bytes(path: Path, call: list) -> int:
    pytest.importorskip("torch")
    from pte_devconst.runner import run_program

    return run_program(path, inputs=[call], calls=1, simulate_devices=True).calls[0].copies.h2d.nbytes


@pytest.mark.parametrize("jumps", [True, False])
def test_a_jump_on_a_constant_condition_is_followed(tmp_path: Path, jumps: bool) -> None:
    forged = edit_program(MLP_COPY, tmp_path / "jump.pte",
                          lambda p: edit_plans(p, lambda plan: _with_jump(plan, m.Bool(not jumps))))
    from pte_devconst.schema.pte_file import open_pte

    with open_pte(forged) as pte:
        figure = h2d_bytes_per_call(pte.program.execution_plan[0])
    assert figure == 3488 - (1024 if jumps else 0)
    torch = pytest.importorskip("torch")
    assert figure == _runner_bytes(forged, [torch.ones(4, 16)])


def test_a_runtime_condition_counts_the_costlier_path(tmp_path: Path) -> None:
    """A jump on a tensor that the caller passes: the figure is the path that copies more, and the runner
    measures exactly that path's bytes when the call takes it."""
    def edit(plan: m.ExecutionPlan) -> m.ExecutionPlan:
        flag = m.Tensor(scalar_type=m.ScalarType.BOOL, sizes=(1,), dim_order=(0,))
        plan = _with_jump(plan, flag)
        return m.replace(plan, inputs=tuple(plan.inputs) + (len(plan.values) - 1,))

    forged = edit_program(MLP_COPY, tmp_path / "cond.pte", lambda p: edit_plans(p, edit))
    from pte_devconst.schema.pte_file import open_pte

    with open_pte(forged) as pte:
        assert h2d_bytes_per_call(pte.program.execution_plan[0]) == 3488
    torch = pytest.importorskip("torch")
    x = torch.ones(4, 16)
    assert _runner_bytes(forged, [x, torch.tensor([True])]) == 3488
    assert _runner_bytes(forged, [x, torch.tensor([False])]) == 3488 - 1024


def _t(memory_id: int | None = None, offset: int = 0, **kw) -> m.Tensor:
    alloc = None if memory_id is None else m.AllocationDetails(memory_id, offset)
    return m.Tensor(scalar_type=m.ScalarType.FLOAT, sizes=(4,), dim_order=(0,), allocation_info=alloc, **kw)


def _plan(values: list, instructions: list, delegates: tuple[m.BackendDelegate, ...],
          inputs: tuple[int, ...] = ()) -> m.ExecutionPlan:
    return m.ExecutionPlan(name="forward", values=tuple(values), inputs=inputs, outputs=(),
                           chains=(m.Chain(instructions=tuple(instructions)),), operators=(),
                           delegates=delegates, non_const_buffer_sizes=(0, 64, 64),
                           non_const_buffer_device=(m.NonConstBufferDevice(2, m.DeviceType.CUDA, 0),))


def _delegate(device: str | None) -> m.BackendDelegate:
    specs = () if device is None else (m.CompileSpec("target_device", device.encode()),)
    return m.BackendDelegate(id="X", compile_specs=specs)


def test_a_move_gives_its_destination_the_source_memory() -> None:
    # value 0 lives on cuda:0 (buffer 2); a MoveCall puts it in value 2 (planned on the host), which the
    # cuda:0 delegate then reads: no copy.  Value 1 (host) moved into value 3 is copied.
    values = [_t(2, 0), _t(1, 0), _t(1, 16), _t(1, 32), _t(2, 16)]
    instructions = [m.MoveCall(0, 2), m.MoveCall(1, 3), m.DelegateCall(0, (2, 3, 4))]
    transfers = per_call_transfers(_plan(values, instructions, (_delegate("cuda:0"),), inputs=(0, 1)))
    assert [(t.kind, t.value) for t in transfers] \
        == [(TransferKind.METHOD_INPUT, 0), (TransferKind.DELEGATE_HOST_INPUT, 3)]


def test_a_host_delegate_writing_device_memory_is_a_copy() -> None:
    values = [_t(1, 0), _t(2, 0)]
    transfers = per_call_transfers(_plan(values, [m.DelegateCall(0, (0, 1))], (_delegate(None),), inputs=(0,)))
    assert [(t.kind, t.value, t.device) for t in transfers] == [(TransferKind.HOST_DELEGATE_OUTPUT, 1, CUDA0)]


def test_a_long_list_read_by_many_instructions_is_refused_before_the_data_flow_runs() -> None:
    """The data flow follows a list's items at every read: one 2,000-item list read by 2,000 kernels is 4 million
    steps for a program of a few thousand items.  The analysis counts that first and refuses, in one line."""
    from pte_devconst.rewriter.model.analysis import analyze_program
    from pte_devconst.util.errors import UnsupportedProgramError

    n = 2000
    values = [_t(1, 0)] * n + [m.TensorList(tuple(range(n))), _t(1, 0)]
    kernels = [m.KernelCall(0, (n, n + 1)) for _ in range(n)]
    plan = m.ExecutionPlan(name="forward", values=tuple(values), inputs=(), outputs=(),
                           chains=(m.Chain(instructions=tuple(kernels)),), operators=(m.Operator("aten::cat", "out"),),
                           non_const_buffer_sizes=(0, 64))
    with pytest.raises(UnsupportedProgramError, match="analysis needed more than"):
        analyze_program(m.Program(execution_plan=(plan,)))
    small = m.replace(plan, chains=(m.Chain(instructions=tuple(kernels[:2])),))
    assert analyze_program(m.Program(execution_plan=(small,))).methods[0].h2d_bytes_per_call == 0
