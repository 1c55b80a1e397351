"""The runner computes what ExecuTorch 1.5.1's runtime computes, bit for bit, where it once did not.

The fixtures (``tests/fixtures/runtime_ops``, made by ``examples/runtime_fixtures.py`` with the real
exporter) each hold operators the runner used to get wrong or could not run: half-precision convolution,
``addmm`` and batch norm (the portable kernels round every step; in float32 and float64 their in-order sums
differ from ATen's in the last bits), ExecuTorch's quantized kernels
(``quantized_decomposed::*``), and outputs the caller owns (``alloc_graph_output=False``).  Each test runs
a program in the real runtime (``et_oracle``) and in the runner, on the same inputs, call after call.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Callable, Sequence

import pytest
import torch

from et_oracle import run_calls_with_executorch
from pte_devconst.runner import run_program

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "runtime_ops"
Inputs = Callable[[torch.Generator], tuple[torch.Tensor, ...]]


def _portable(dtype: torch.dtype) -> Inputs:
    def make(g: torch.Generator) -> tuple[torch.Tensor, ...]:
        shapes = ((2, 8, 9, 11), (2, 4, 20), (3, 48), (3, 5), (48, 5))
        return tuple((torch.randn(shape, generator=g) * 3).to(dtype) for shape in shapes)

    return make


def _quantized(g: torch.Generator) -> tuple[torch.Tensor, ...]:
    # Values large enough that quantize clamps some, and enough of them that some land on a rounding tie.
    return torch.randn(4, 32, generator=g) * 4, torch.randint(0, 10, (2, 3), generator=g)


def _quantized_more(g: torch.Generator) -> tuple[torch.Tensor, ...]:
    # examples/runtime_fixtures.py's quantized_more_inputs: float activations, uint8 and int8 quantized ones,
    # token ids.
    def quantized(dtype: torch.dtype, high: int) -> torch.Tensor:
        return torch.randint(0, high, (3, 5), generator=g, dtype=dtype)

    return (torch.randn(4, 32, generator=g) * 3, quantized(torch.uint8, 256), quantized(torch.uint8, 256),
            quantized(torch.int8, 128), quantized(torch.int8, 128), torch.randint(0, 10, (2, 3), generator=g))


def _caller(g: torch.Generator) -> tuple[torch.Tensor, ...]:
    return torch.randn(3, 8, generator=g), torch.randn(3, 8, generator=g)


def _batch_norm(g: torch.Generator) -> tuple[torch.Tensor, ...]:
    return (torch.randn(2, 8, 5, 5, generator=g),)


PROGRAMS: dict[str, Inputs] = {
    "portable_bf16": _portable(torch.bfloat16),
    "portable_f16": _portable(torch.float16),
    "portable_f32": _batch_norm,
    "portable_f32_conv": _portable(torch.float32),
    "portable_f64": _portable(torch.float64),
    "quantized": _quantized,
    "quantized_more": _quantized_more,
    "caller_outputs": _caller,
}


def _calls(make: Inputs, count: int = 2) -> list[tuple[torch.Tensor, ...]]:
    g = torch.Generator().manual_seed(7)
    return [make(g) for _ in range(count)]


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(
        a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))


def _runtime(name: str, calls: Sequence[tuple[torch.Tensor, ...]]) -> list[list[torch.Tensor]]:
    import executorch.kernels.quantized  # noqa: F401 - registers the quantized kernels with the runtime

    return run_calls_with_executorch(FIXTURES / f"{name}.pte", "forward", calls)


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_run_matches_the_executorch_runtime_bit_for_bit(name: str) -> None:
    calls = _calls(PROGRAMS[name])
    want = _runtime(name, calls)
    result = run_program(str(FIXTURES / f"{name}.pte"), inputs=calls, calls=len(calls))
    for number, (expected, call) in enumerate(zip(want, result.calls)):
        assert len(call.outputs) == len(expected)
        for position, (got, ref) in enumerate(zip(call.outputs, expected)):
            assert _same_bits(got, ref), (
                f"{name} call {number} output {position}: {got.dtype}{list(got.shape)} differs from the runtime's "
                f"{ref.dtype}{list(ref.shape)} by up to {(got.double() - ref.double()).abs().max().item()}")


def test_the_quantized_delegate_runs_the_functional_quantized_operators() -> None:
    """The reference delegate's graph calls quantized_decomposed::*.default; outputs that depend only on
    quantized arithmetic match the runtime's CPU program exactly, the others within one quantization step
    (the delegate's linear layer sums in ATen's order)."""
    calls = _calls(_quantized, 1)
    want = _runtime("quantized", calls)[0]
    got = run_program(str(FIXTURES / "quantized_all_legacy.pte"), inputs=calls, calls=1,
                      simulate_devices=True).calls[0].outputs
    # the dequantized weight, the uint8 -> float16 dequantize, embedding_byte, and the dynamic quantization of x
    for position in (0, 5, 6, 7, 8, 9, 10, 11, 12):
        assert _same_bits(got[position], want[position]), position
    for position in (1, 3):  # quantized activations
        assert got[position].dtype == want[position].dtype
        assert (got[position].int() - want[position].int()).abs().max() <= 1


def test_the_quantized_delegate_runs_the_rest_of_the_quantized_library_bit_for_bit() -> None:
    """The delegate's graph calls the functional mixed_mm, mixed_linear, add and 2/4-bit embeddings; each
    output equals the runtime's .out kernels' on the CPU program, bit for bit."""
    calls = _calls(_quantized_more)
    want = _runtime("quantized_more", calls)
    result = run_program(str(FIXTURES / "quantized_more_all_legacy.pte"), inputs=calls, calls=len(calls),
                         simulate_devices=True)
    for expected, call in zip(want, result.calls):
        assert len(call.outputs) == len(expected) == 14
        for position, (got, ref) in enumerate(zip(call.outputs, expected)):
            assert _same_bits(got, ref), position


def test_caller_owned_outputs_of_a_device_program_are_written_by_the_delegate() -> None:
    calls = _calls(_caller)
    want = _runtime("caller_outputs", calls)
    result = run_program(str(FIXTURES / "caller_outputs_all_legacy.pte"), inputs=calls, calls=len(calls),
                         simulate_devices=True)
    for expected, call in zip(want, result.calls):
        assert all(_same_bits(g, w) for g, w in zip(call.outputs, expected))


def test_quantized_kernels_need_neither_executorch_nor_torch_ao() -> None:
    """A fresh process, where torch has no quantized_decomposed operators, runs the quantized program on the
    host and through the reference delegate (whose graph names the functional operators)."""
    script = ("import torch, sys\n"
              "from pte_devconst.runner import run_program\n"
              "counts = []\n"
              "for host, delegated in zip(sys.argv[1::2], sys.argv[2::2]):\n"
              "    counts.append(len(run_program(host, calls=1).calls[0].outputs))\n"
              "    counts.append(len(run_program(delegated, calls=1, simulate_devices=True).calls[0].outputs))\n"
              "assert not hasattr(torch.ops.quantized_decomposed, 'dequantize_per_channel')\n"
              "assert not hasattr(torch.ops.quantized_decomposed, 'mixed_linear')\n"
              "assert not any(m.startswith(('executorch', 'torch.ao.quantization.fx._decomposed')) "
              "for m in sys.modules)\n"
              "print(*counts)\n")
    programs = [str(FIXTURES / f"{name}.pte") for name in
                ("quantized", "quantized_all_legacy", "quantized_more", "quantized_more_all_legacy")]
    done = subprocess.run([sys.executable, "-c", script, *programs], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["13", "13", "14", "14"]


@pytest.mark.parametrize("name", ["quantized_all_legacy", "quantized_more_all_legacy", "caller_outputs_all_legacy"])
def test_rewrite_then_validate_passes_on_the_device_programs(name: str, tmp_path: Path) -> None:
    """The rewrite moves the constants these delegates read; validate runs both programs (quantized ops in the
    delegate, outputs the caller owns) and every check passes."""
    from pte_devconst.rewriter.rewrite import rewrite_file
    from pte_devconst.runner.validate import validate

    rewritten = tmp_path / f"{name}.devconst.pte"
    rewrite_file(FIXTURES / f"{name}.pte", rewritten)
    report = validate(str(FIXTURES / f"{name}.pte"), str(rewritten), calls=2, simulate_devices=True)
    assert report.passed, [(c.name, c.status, c.detail) for method in report.methods for c in method.checks]
    assert any(c.status == "pass" and "moved" in c.name for method in report.methods for c in method.checks)
