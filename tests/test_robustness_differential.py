"""What the differential fuzz check found (tests/fuzz/differential.py), one regression test per finding.

Each program is a real corpus file with the structure the fuzzer found forged into it, and each test
fails on the code before its fix.  The judges are the ones the fuzzer uses: the real ExecuTorch 1.5.1
runtime (``et_oracle``) where it can load the program, and ``validate --simulate-devices`` otherwise.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from conftest import CORPUS, pte_path, ptd_path
from et_oracle import run_with_executorch
from forge import edit_program, with_value
from pte_devconst.runner import run_program
from pte_devconst.schema import model as m

RTOL, ATOL = 1e-5, 1e-6


def _inputs(name: str) -> list:
    return torch.load(CORPUS / f"{name}.inputs.pt", weights_only=True)["forward"]


def _plan(program: m.Program) -> m.ExecutionPlan:
    return program.execution_plan[0]


def _instruction_args(plan: m.ExecutionPlan, op: str) -> tuple[int, tuple[int, ...]]:
    """(index, args) of the first KernelCall of ``op`` in the plan's chain."""
    for k, ins in enumerate(plan.chains[0].instructions):
        if isinstance(ins, m.KernelCall) and plan.operators[ins.op_index].qualified_name == op:
            return k, tuple(ins.args)
    raise AssertionError(f"no {op} in the program")


def _with_args(plan: m.ExecutionPlan, k: int, args: tuple[int, ...]) -> m.ExecutionPlan:
    chain = plan.chains[0]
    instructions = list(chain.instructions)
    instructions[k] = m.replace(instructions[k], args=args)
    return m.replace(plan, chains=(m.replace(chain, instructions=tuple(instructions)),))


def _with_plan(program: m.Program, plan: m.ExecutionPlan) -> m.Program:
    return m.replace(program, execution_plan=(plan,))


def test_the_runner_never_writes_an_out_variants_return_slot(tmp_path: Path) -> None:
    """Was: the runner made a return slot naming another value an alias of the out tensor, so a later reader
    of that value read the kernel's result.  The codegen'd wrapper of an out variant never writes the slot
    (executorch/codegen/gen.py).  Here relu.out returns into the constant that mul.out reads next; the
    runtime still multiplies by the constant (fuzz: structure case 187, a return slot on mul.out)."""
    name = "v_h_cpu_only"

    def edit(program: m.Program) -> m.Program:
        plan = _plan(program)
        k, relu = _instruction_args(plan, "aten::relu.out")
        _, mul = _instruction_args(plan, "aten::mul.out")
        constant = mul[1]
        assert isinstance(plan.values[constant], m.Tensor) and plan.values[constant].is_constant
        return _with_plan(program, _with_args(plan, k, relu[:-1] + (constant,)))

    forged = edit_program(pte_path(name), tmp_path / "slot.pte", edit)
    for call in _inputs(name):
        want = run_with_executorch(forged, "forward", call)
        assert all(torch.equal(a, b) for a, b in zip(want, run_with_executorch(pte_path(name), "forward", call)))
        got = run_program(forged, inputs=[call]).calls[0].outputs
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b, rtol=RTOL, atol=ATOL)


def test_a_list_as_a_method_output_is_refused_as_the_runtime_refuses_it(tmp_path: Path) -> None:
    """Was: ``run`` returned the list, ``run --json`` failed with "internal error: Object of type Tensor is not
    JSON serializable", and ``validate`` with "Boolean value of Tensor ... is ambiguous".  The runtime's
    MethodMeta knows no list outputs, so ExecuTorch's Python runtime fails on them (fuzz: structure case 21,
    a constant in a TensorList that is an output)."""
    from cli_runner import invoke
    from pte_devconst.runner.validate import validate
    from pte_devconst.schema.errors import PteDevconstError

    def edit(program: m.Program) -> m.Program:
        plan = _plan(program)
        constant = next(i for i, v in enumerate(plan.values) if isinstance(v, m.Tensor) and v.is_constant)
        values = plan.values + (m.TensorList((constant, constant)),)
        return _with_plan(program, m.replace(plan, values=values, outputs=plan.outputs + (len(values) - 1,)))

    cpu = edit_program(pte_path("v_h_cpu_only"), tmp_path / "cpu.pte", edit)
    with pytest.raises(Exception, match="output"):
        run_with_executorch(cpu, "forward", _inputs("v_h_cpu_only")[0])
    for args in (("run", cpu), ("run", "--json", cpu)):
        result = invoke(*args)
        assert result.exit_code == 2 and "output 2 (value 14) is a TensorList" in result.stderr
        assert len(result.stderr.splitlines()) == 1 and "internal error" not in result.stderr
    device = edit_program(pte_path("v_a_dtypes_copy"), tmp_path / "device.pte", edit)
    with pytest.raises(PteDevconstError, match="is a TensorList: ExecuTorch returns only tensors"):
        validate(device, device, simulate_devices=True)


def test_a_delegate_executor_failing_on_its_arguments_is_one_error_naming_the_delegate(tmp_path: Path) -> None:
    """Was: "internal error: RuntimeError: mat1 and mat2 shapes cannot be multiplied" from ``run`` and a
    traceback out of ``validate``: torch's error escaped the demo backend's executor (fuzz: structure case 87,
    a delegate call whose arguments no longer fit its blob).  Here the two operands of the cuda:1
    delegate's mm are swapped."""
    from cli_runner import invoke
    from pte_devconst.runner import RunnerError

    def edit(program: m.Program) -> m.Program:
        plan = _plan(program)
        chain = plan.chains[0]
        instructions = list(chain.instructions)
        k = next(i for i, ins in enumerate(instructions) if isinstance(ins, m.DelegateCall) and ins.delegate_index == 1)
        a = instructions[k].args
        instructions[k] = m.replace(instructions[k], args=(a[1], a[0]) + a[2:])
        return _with_plan(program, m.replace(plan, chains=(m.replace(chain, instructions=tuple(instructions)),)))

    swapped = edit_program(pte_path("v_k_cuda1_legacy"), tmp_path / "swapped.pte", edit)
    with pytest.raises(RunnerError, match=r"delegate 1, BackendWithCompilerDemo\): BackendWithCompilerDemo execute "
                                          r"failed: mat1 and mat2 shapes cannot be multiplied"):
        run_program(swapped, simulate_devices=True)
    result = invoke("run", "--simulate-devices", swapped)
    assert result.exit_code == 2 and len(result.stderr.splitlines()) == 1 and "internal error" not in result.stderr


def test_a_tensor_list_given_to_a_delegate_is_recorded_by_shape_and_compared_by_bytes(tmp_path: Path) -> None:
    """Was: the transcript and the opaque stand-in printed every tensor of a list argument with ``repr``:
    a list of 20,000 tensors took about a minute per call (fuzz: structure case 674; 2,000 here took 5 s),
    and the list's bytes were never compared.  Now the list is named by dtype and shape, and its tensors'
    bytes are digested."""
    from pte_devconst.runner.delegates import OpaquePolicy
    from pte_devconst.runner.transcript import compare_transcripts

    def with_list(item: int):  # noqa: ANN202
        def edit(program: m.Program) -> m.Program:
            plan = _plan(program)
            values = plan.values + (m.TensorList((item,) * 2000),)
            chain = plan.chains[0]
            instructions = list(chain.instructions)
            instructions[0] = m.replace(instructions[0], args=(len(values) - 1,) + instructions[0].args)
            return _with_plan(program, m.replace(plan, values=values,
                                                 chains=(m.replace(chain, instructions=tuple(instructions)),)))
        return edit

    name = "v_e_two_devices_legacy"
    runs = []
    for item in (0, 1):  # two [4, 4] constants with different bytes
        forged = edit_program(pte_path(name), tmp_path / f"list{item}.pte", with_list(item))
        runs.append(run_program(forged, simulate_devices=True, opaque=OpaquePolicy.ALWAYS, transcript=True))
    first = runs[0].calls[0].delegate_calls[0].args[0]
    assert first.kind == "list" and first.literal == "[float32[4, 4] x 2000]" and first.digest is not None
    differences = compare_transcripts([runs[0].calls[0].delegate_calls], [runs[1].calls[0].delegate_calls], {})
    assert [d.detail.split(" (")[0] for d in differences if d.ordinal == 0 and d.argument == 0] == [
        "the list's tensors differ"]
