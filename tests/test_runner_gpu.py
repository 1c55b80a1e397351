"""Real-GPU checks (marked ``gpu``; skipped without CUDA): real device memory and torch.profiler's memcpy counts."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from pte_devconst.runner import LoadedProgram, run_program

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "models"
pytestmark = pytest.mark.gpu


def inputs(name: str) -> list:
    return torch.load(EXAMPLES / f"{name}.inputs.pt", weights_only=True)["forward"]


def test_device_arenas_live_on_the_gpu() -> None:
    with LoadedProgram(str(EXAMPLES / "mlp_copy.pte")) as program:
        method = program.load_method("forward")
        devices = {str(method.memory.arena_devices[i]): t.device for i, t in method.memory.arenas.items()}
        assert devices["cuda:0"].type == "cuda"


@pytest.mark.parametrize("name", ["mlp_copy", "mlp_legacy", "transformer_copy"])
def test_real_gpu_outputs_match_simulation_and_eager(name: str) -> None:
    real = run_program(EXAMPLES / f"{name}.pte", inputs=inputs(name), calls=2)
    simulated = run_program(EXAMPLES / f"{name}.pte", inputs=inputs(name), calls=2, simulate_devices=True)
    expected = torch.load(EXAMPLES / f"{name}.expected.pt", weights_only=True)["forward"]
    for a, b, want in zip(real.calls, simulated.calls, expected):
        for x, y, z in zip(a.outputs, b.outputs, want):
            torch.testing.assert_close(x, y, rtol=1e-4, atol=1e-5)  # GPU kernels may round differently
            torch.testing.assert_close(x, z, rtol=1e-4, atol=1e-5)
        assert (a.copies.h2d, a.copies.d2h) == (b.copies.h2d, b.copies.d2h)  # the counts do not depend on it


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA GPUs")
def test_two_gpu_example_on_two_gpus() -> None:
    result = run_program(EXAMPLES / "two_gpu_copy.pte", inputs=inputs("two_gpu_copy"), calls=2)
    assert {e.device for e in result.events} >= {"cuda:0", "cuda:1"}


@pytest.mark.parametrize("name", ["mlp_copy", "mlp_legacy"])
def test_profiler_memcpy_bytes_match_the_ledger(name: str) -> None:
    result = run_program(EXAMPLES / f"{name}.pte", inputs=inputs(name), calls=3, profile=True)
    for call in result.calls[1:]:  # call 0 may include one-off allocator or library traffic
        assert call.profiled is not None
        assert call.profiled.h2d_bytes == call.copies.h2d.nbytes
        assert call.profiled.d2h_bytes == call.copies.d2h.nbytes

