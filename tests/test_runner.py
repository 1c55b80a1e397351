"""The torch runner against the real ExecuTorch runtime, eager outputs, and the copy counts it reports."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest
import torch

from conftest import CASES, CPU_CASES, facts, pte_path, ptd_path
from forge import with_backend
from et_oracle import run_with_executorch
from pte_devconst.runner import Cause, DelegateExecutor, Direction, LoadedProgram, RunnerError, run_program
from pte_devconst.runner import delegates as delegate_registry
from pte_devconst.program.dtypes import dim_order_strides
from pte_devconst.runner.profiling import memcpy_totals
from pte_devconst.schema import model as m
from pte_devconst.util.errors import PteDevconstError
from pte_devconst.schema.pte_file import open_pte
from pte_devconst.schema.pte_writer import unchanged_segments, write_pte

CORPUS = pte_path(CASES[0]).parent
DEVICE_CASES = [name for name in CASES if facts(name)["style"] in ("copy", "legacy")]
# Portable kernels and ATen may sum in different orders: float32 results agree to a few ulps.
RTOL, ATOL = 1e-5, 1e-6


def corpus_calls(name: str, kind: str) -> dict[str, list]:
    return torch.load(CORPUS / f"{name}.{kind}.pt", weights_only=True)


def assert_outputs_close(got: list, want: list, exact: bool = False) -> None:
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert a.dtype == b.dtype and a.shape == b.shape
        if exact:
            assert torch.equal(a, b)
        else:
            torch.testing.assert_close(a, b, rtol=RTOL, atol=ATOL)


def run_case(name: str, method: str, extra_calls: int = 0, **kwargs: Any):
    inputs = corpus_calls(name, "inputs")[method]
    return run_program(pte_path(name), ptd_path=ptd_path(name), method=method, inputs=inputs,
                       calls=len(inputs) + extra_calls, **kwargs)


@pytest.mark.parametrize("name", [n for n in CPU_CASES if n != "v_h_xnnpack"])
def test_cpu_corpus_agrees_with_executorch_runtime(name: str) -> None:
    inputs = corpus_calls(name, "inputs")["forward"]
    result = run_case(name, "forward")
    recorded = corpus_calls(name, "runtime")["forward"]
    for call, given, stored in zip(result.calls, inputs, recorded):
        live = run_with_executorch(pte_path(name), "forward", given, ptd_path(name))
        assert_outputs_close(call.outputs, live)
        assert_outputs_close(call.outputs, stored)
        assert call.copies.h2d.count == 0 and call.copies.d2h.count == 0


def test_xnnpack_delegate_runs_in_the_installed_runtime_as_the_runtime_runs_it() -> None:
    # Executing XNNPACK's packed graph needs XNNPACK itself: the installed ExecuTorch runtime runs it
    # (runner/runtime_backend.py), so the outputs are the runtime's own, bit for bit.
    result = run_case("v_h_xnnpack", "forward")
    recorded = corpus_calls("v_h_xnnpack", "runtime")["forward"]
    assert_outputs_close([c.outputs[0] for c in result.calls], [r[0] for r in recorded], exact=True)
    assert [(d.backend_id, d.execution.value) for d in result.delegates] == [("XnnpackBackend", "ExecuTorch runtime")]


def test_an_unknown_backend_is_a_clear_error_naming_it(tmp_path: Path) -> None:
    path = with_backend(pte_path("v_h_xnnpack"), tmp_path / "vendor.pte", "VendorBackend")
    with pytest.raises(RunnerError, match=r"VendorBackend.*pte_devconst\.delegate_executors"):
        run_program(path)


@pytest.mark.parametrize("name", DEVICE_CASES)
def test_device_corpus_matches_eager_with_simulated_devices(name: str) -> None:
    expected = corpus_calls(name, "expected")
    for method, calls in expected.items():
        result = run_case(name, method, simulate_devices=True)
        for call, want in zip(result.calls, calls):
            assert_outputs_close(call.outputs, list(want))


@pytest.mark.parametrize("name", DEVICE_CASES)
def test_every_eligible_constant_is_copied_to_its_device_on_every_call(name: str) -> None:
    info = facts(name)
    for method, details in info["methods"].items():
        if method not in corpus_calls(name, "inputs"):
            continue
        result = run_case(name, method, extra_calls=1, simulate_devices=True)
        assert result.load.h2d.count == 0  # nothing is placed on a device at load in 1.5.1 programs
        eligible = {c["value"]: c for c in details["constants"] if c["verdict"].startswith("eligible")}
        first, last = result.calls[0].copies, result.calls[-1].copies
        assert first.cells == last.cells  # every call copies the same
        for value, constant in eligible.items():
            copied = [e for e in result.events if e.phase == "call 0" and e.source_value == value
                      and e.direction is Direction.H2D]
            assert copied, f"value {value} is not copied per call"
            assert all(e.nbytes == constant["nbytes"] for e in copied)
            assert {e.device for e in copied} == {constant["verdict"].split(":", 1)[1]}
            cause = Cause.H2D_KERNEL if info["style"] == "copy" else Cause.DELEGATE_HOST_INPUT
            assert {e.cause for e in copied} == {cause}


def test_copy_and_legacy_styles_copy_the_same_bytes_per_call() -> None:
    legacy_of = {facts(n)["scenario"]: n for n in DEVICE_CASES if facts(n)["style"] == "legacy"}
    legacy_of["a"] = legacy_of.pop("b")  # scenario b is the legacy version of a
    for copy_name in [n for n in DEVICE_CASES if facts(n)["style"] == "copy"]:
        legacy = legacy_of[facts(copy_name)["scenario"]]
        a = run_case(copy_name, "forward", simulate_devices=True).calls[-1].copies
        b = run_case(legacy, "forward", simulate_devices=True).calls[-1].copies
        assert (a.h2d, a.d2h) == (b.h2d, b.d2h), copy_name


def test_kv_cache_state_carries_over_between_calls() -> None:
    # v_i's calls run in order on one loaded method: the cache (initial data) accumulates.
    result = run_case("v_i_kvcache_copy", "forward", simulate_devices=True)
    for call, want in zip(result.calls, corpus_calls("v_i_kvcache_copy", "expected")["forward"]):
        assert_outputs_close(call.outputs, list(want))
    assert not torch.equal(result.calls[0].outputs[0], result.calls[1].outputs[0])


def test_cond_program_takes_both_branches() -> None:
    result = run_case("v_j_cond_legacy", "forward", simulate_devices=True)
    assert len(result.calls) == 2  # call 0 takes the true branch, call 1 the false branch
    for call, want in zip(result.calls, corpus_calls("v_j_cond_legacy", "expected")["forward"]):
        assert_outputs_close(call.outputs, list(want))


def test_planned_tensors_alias_their_arena() -> None:
    with LoadedProgram(str(pte_path("v_a_dtypes_copy")), simulate_devices=True) as program:
        method = program.load_method("forward")
        plan = method.plan
        by_place: dict[tuple[int, int], list[int]] = {}
        for index, value in enumerate(plan.values):
            if isinstance(value, m.Tensor) and value.allocation_info is not None and value.nbytes:
                info = value.allocation_info
                by_place.setdefault((info.memory_id, info.memory_offset), []).append(index)
        shared = [indices for indices in by_place.values() if len(indices) > 1]
        assert shared, "the corpus program should reuse planned memory"
        a, b = shared[0][:2]
        ta, tb = method.rv.values[a], method.rv.values[b]
        assert ta.data_ptr() == tb.data_ptr()
        ta.view(-1).view(torch.uint8)[0] ^= 0xFF  # a write through one view shows through the other
        assert tb.contiguous().view(-1).view(torch.uint8)[0] == ta.contiguous().view(-1).view(torch.uint8)[0]


def test_device_arenas_are_labelled_with_their_logical_device() -> None:
    with LoadedProgram(str(pte_path("v_k_cuda1_copy")), simulate_devices=True) as program:
        method = program.load_method("forward")
        assert {str(d) for d in method.memory.arena_devices.values()} == {"cpu", "cuda:0", "cuda:1"}
        assert all(t.device.type == "cpu" for t in method.memory.arenas.values())  # simulated


def test_dim_order_strides() -> None:
    assert dim_order_strides((2, 3, 4), (0, 1, 2)) == (12, 4, 1)
    assert dim_order_strides((2, 3, 4, 5), (0, 2, 3, 1)) == (60, 1, 15, 3)
    assert dim_order_strides((0, 4), (0, 1)) == (4, 1)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message shown without a GPU")
def test_device_program_without_gpu_suggests_simulation() -> None:
    for name in ("v_a_dtypes_copy", "v_b_dtypes_legacy"):
        with pytest.raises(PteDevconstError, match="--simulate-devices"):
            run_case(name, "forward")


@pytest.mark.parametrize("mutate, message", [
    (lambda t: t[:, :2], r"expected shape \[3, 4\], got \[3, 2\]"),
    (lambda t: t.double(), "expected dtype float32, got float64"),
])
def test_wrong_inputs_are_one_clear_error(mutate: Callable, message: str) -> None:
    inputs = list(corpus_calls("v_a_dtypes_copy", "inputs")["forward"][0])
    inputs[0] = mutate(inputs[0])
    with pytest.raises(RunnerError, match=message) as caught:
        run_program(pte_path("v_a_dtypes_copy"), inputs=tuple(inputs), simulate_devices=True)
    assert "input 0" in str(caught.value) and "v_a_dtypes_copy.pte" in str(caught.value)


def test_missing_ptd_is_a_clear_error() -> None:
    with pytest.raises(PteDevconstError, match="--ptd"):
        run_program(pte_path("v_g_external_cpu"))


def test_unknown_method_is_a_clear_error() -> None:
    with pytest.raises(PteDevconstError, match="no method 'nope'"):
        run_program(pte_path("v_h_cpu_only"), method="nope")


def _with_operator(tmp_path: Path, name: str, overload: str) -> Path:
    with open_pte(pte_path("v_h_cpu_only")) as source:
        plan = source.program.execution_plan[0]
        operators = (m.Operator(name, overload),) + tuple(plan.operators[1:])
        program = m.replace(source.program, execution_plan=(m.replace(plan, operators=operators),))
        out = tmp_path / "edited.pte"
        write_pte(out, program, unchanged_segments(source))
    return out


def test_unknown_operator_is_named(tmp_path: Path) -> None:
    path = _with_operator(tmp_path, "aten::no_such_op", "out")
    with pytest.raises(RunnerError, match=r"unknown operator aten::no_such_op\.out"):
        run_program(path)


def test_host_kernel_on_device_memory_is_refused(tmp_path: Path) -> None:
    # Point the h2d copy's output at a host kernel: a CPU kernel must not touch device memory.
    with open_pte(pte_path("v_c_shared_host_copy")) as source:
        plan = source.program.execution_plan[0]
        names = [op.qualified_name for op in plan.operators]
        h2d = names.index("et_copy::_h2d_copy.out")
        operators = list(plan.operators)
        operators[h2d] = m.Operator("aten::copy_", "")
        program = m.replace(source.program, execution_plan=(m.replace(plan, operators=tuple(operators)),))
        out = tmp_path / "edited.pte"
        write_pte(out, program, unchanged_segments(source))
    with pytest.raises(RunnerError, match="cuda:0"):
        run_program(out, simulate_devices=True)


class _Doubling(DelegateExecutor):
    """A third-party executor: out = 2 * in (for a program whose single delegate has one input)."""

    backend_id = "XnnpackBackend"
    calls = 0

    def init(self, blob: bytes, compile_specs: dict[str, bytes], context: Any) -> None:
        return None

    def execute(self, handle: Any, args: list, context: Any) -> None:
        _Doubling.calls += 1
        for arg in args[len(args) // 2:]:
            arg.value.zero_()


def test_registered_executor_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(delegate_registry, "_REGISTERED", {})
    delegate_registry.register_executor("XnnpackBackend", _Doubling)
    result = run_case("v_h_xnnpack", "forward")
    assert _Doubling.calls == len(result.calls)
    assert all(float(o.abs().sum()) == 0 for c in result.calls for o in c.outputs)


def test_entry_point_executor_is_discovered(monkeypatch: pytest.MonkeyPatch) -> None:
    class FakeEntryPoint:
        name, value = "XnnpackBackend", "thirdparty:Executor"

        def load(self) -> type:
            return _Doubling

    monkeypatch.setattr(delegate_registry, "_REGISTERED", {})
    monkeypatch.setattr(delegate_registry.metadata, "entry_points", lambda group: [FakeEntryPoint()])
    assert "XnnpackBackend" in delegate_registry.known_backends()
    run_case("v_h_xnnpack", "forward")


def test_synthetic_inputs_when_none_are_given() -> None:
    result = run_program(pte_path("v_h_cpu_only"), calls=2)
    assert [tuple(o.shape) for o in result.calls[0].outputs] == [(3, 5), (3,)]
    assert_outputs_close(result.calls[0].outputs, result.calls[1].outputs, exact=True)


def test_memcpy_totals_reads_a_chrome_trace() -> None:
    # The parser of the GPU cross-check (tests/test_runner_gpu.py) needs no GPU.
    trace = {"traceEvents": [
        {"cat": "gpu_memcpy", "name": "Memcpy HtoD (Pageable -> Device)", "args": {"bytes": 64}},
        {"cat": "gpu_memcpy", "name": "Memcpy DtoH (Device -> Pageable)", "args": {"bytes": 16}},
        {"cat": "kernel", "name": "gemm", "args": {}},
    ]}
    totals = memcpy_totals(trace)
    assert (totals.h2d_count, totals.h2d_bytes, totals.d2h_count, totals.d2h_bytes) == (1, 64, 1, 16)


def test_programs_run_with_exact_float32_math_and_the_settings_come_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """TF32 or autotuned cuDNN algorithms on a GPU would round float32 work differently between runs."""
    from pte_devconst.runner import method as runner_method

    def settings() -> tuple[bool, bool, bool, bool]:
        return (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
                torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark)

    seen = []
    original_execute = runner_method.LoadedMethod.execute

    def spy(self: runner_method.LoadedMethod) -> None:
        seen.append(settings())
        original_execute(self)

    monkeypatch.setattr(runner_method.LoadedMethod, "execute", spy)
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", True)
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", True)
    before = settings()
    run_program(pte_path("v_a_dtypes_copy"), simulate_devices=True)
    assert seen == [(False, False, True, False)]
    assert settings() == before
