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



def test_digests_and_stand_ins_are_the_same_on_the_gpu() -> None:
    from pte_devconst.runner.digest import fetch_digests, fill_standin, mix, tensor_digest

    generator = torch.Generator().manual_seed(11)
    for nbytes in (0, 5, 8, 8 * 1024 + 3, 5 << 20):
        data = torch.randint(0, 256, (nbytes,), dtype=torch.uint8, generator=generator)
        assert fetch_digests([tensor_digest(data)]) == fetch_digests([tensor_digest(data.cuda())])
    seeds = {d: mix(99, [tensor_digest(torch.arange(7, device=d))], torch.device(d)) for d in ("cpu", "cuda")}
    for dtype in (torch.float32, torch.float16, torch.bool, torch.int64):
        on_cpu = fill_standin(torch.empty(300, 7, dtype=dtype), seeds["cpu"])
        on_gpu = fill_standin(torch.empty(300, 7, dtype=dtype), seeds["cuda"])
        assert on_gpu.device.type == "cuda" and torch.equal(on_cpu, on_gpu.cpu())


@pytest.mark.parametrize("name", ["mlp_copy", "mlp_legacy", "transformer_copy"])
def test_opaque_transcript_on_the_gpu_equals_the_simulated_one(name: str) -> None:
    """Same bytes, same digests, same stand-ins on a real GPU as on simulated devices: the whole transcript."""
    from pte_devconst.runner.delegates import OpaquePolicy

    common = dict(inputs=inputs(name), calls=2, opaque=OpaquePolicy.ALWAYS, transcript=True)
    real = run_program(EXAMPLES / f"{name}.pte", **common)
    simulated = run_program(EXAMPLES / f"{name}.pte", simulate_devices=True, **common)
    for a, b in zip(real.calls, simulated.calls):
        assert a.delegate_calls == b.delegate_calls and a.delegate_calls
        for x, y in zip(a.outputs, b.outputs):
            assert torch.equal(x, y)


@pytest.mark.parametrize("name", ["mlp_copy", "mlp_legacy"])
def test_transcript_and_opaque_delegates_add_no_memcpy(name: str) -> None:
    """Digests stay on the device until the call is over: the profiler sees only the ledger's copies."""
    from pte_devconst.runner.delegates import OpaquePolicy

    for opaque in (OpaquePolicy.NEVER, OpaquePolicy.ALWAYS):
        result = run_program(EXAMPLES / f"{name}.pte", inputs=inputs(name), calls=3, profile=True, transcript=True,
                             opaque=opaque)
        for call in result.calls[1:]:
            assert call.delegate_calls and call.profiled is not None
            assert call.profiled.h2d_bytes == call.copies.h2d.nbytes
            assert call.profiled.d2h_bytes == call.copies.d2h.nbytes


def test_validate_on_the_gpu_reports_the_profiler_next_to_the_ledger(tmp_path: Path) -> None:
    from pte_devconst.rewriter import rewrite_file
    from pte_devconst.runner.validate import validate

    out = tmp_path / "mlp_copy.devconst.pte"
    rewrite_file(EXAMPLES / "mlp_copy.pte", out)
    for opaque in (False, True):
        result = validate(EXAMPLES / "mlp_copy.pte", out, inputs=EXAMPLES / "mlp_copy.inputs.pt", calls=3,
                          profile=True, opaque_delegates=opaque)
        assert result.passed, [(c.name, c.detail) for c in result.methods[0].checks]
        for call in result.methods[0].calls[1:]:
            assert call.profiled_before.h2d_bytes == call.h2d_before
            assert call.profiled_after.h2d_bytes == call.h2d_after


REAL_MODELS = Path(__file__).resolve().parent / "fixtures" / "real_models"


def _real_model_device_fixtures() -> list[dict]:
    import json

    manifest = json.loads((REAL_MODELS / "manifest.json").read_text())
    return [entry for entry in manifest["fixtures"] if entry["style"] != "cpu"]


@pytest.mark.parametrize("entry", _real_model_device_fixtures(), ids=lambda entry: entry["name"])
def test_real_models_validate_on_the_gpu_with_profiler_bytes_equal_to_the_ledger(entry: dict, tmp_path: Path) -> None:
    """Every real-architecture device program, rewritten, validates on the real GPU; torch.profiler's memcpy
    bytes equal the runner's ledger on every steady call, before and after the rewrite."""
    from pte_devconst.api import rewrite
    from pte_devconst.runner.validate import validate

    name = entry["name"]
    out = tmp_path / f"{name}.devconst.pte"
    rewrite(REAL_MODELS / f"{name}.pte", out, fsync=False)
    result = validate(REAL_MODELS / f"{name}.pte", out, inputs=REAL_MODELS / f"{name}.inputs.pt",
                      expected=REAL_MODELS / f"{name}.expected.pt", calls=entry["calls"],
                      rtol=entry["rtol"], atol=entry["atol"], profile=True)
    assert result.passed, [(c.name, c.detail) for mv in result.methods for c in mv.checks if not c.passed]
    for mv in result.methods:
        for call in mv.calls[1:]:  # call 0 may include one-off allocator or library traffic
            assert call.profiled_before is not None and call.profiled_after is not None
            assert (call.profiled_before.h2d_bytes, call.profiled_after.h2d_bytes) == (call.h2d_before, call.h2d_after)
            assert (call.profiled_before.d2h_bytes, call.profiled_after.d2h_bytes) == (call.d2h_before, call.d2h_after)


MM = [entry for entry in _real_model_device_fixtures() if "_mm_" in entry["name"]]


@pytest.mark.parametrize("entry", MM, ids=lambda entry: entry["name"])
def test_folded_real_models_validate_on_the_gpu_with_no_constant_derived_copy(entry: dict, tmp_path: Path) -> None:
    """rewrite --fold of every matmul-and-convolution partition validates on the real GPU: folded values loaded
    into device memory once, bit-identical outputs, the profiler's memcpy bytes equal to the ledger, and no
    constant-derived byte crossing per call except wav2vec2's weight norm (arithmetic: never folded)."""
    from pte_devconst.api import rewrite
    from pte_devconst.runner.validate import validate

    name = entry["name"]
    out = tmp_path / f"{name}.folded.pte"
    rewrite(REAL_MODELS / f"{name}.pte", out, fsync=False, fold=True)
    result = validate(REAL_MODELS / f"{name}.pte", out, inputs=REAL_MODELS / f"{name}.inputs.pt",
                      expected=REAL_MODELS / f"{name}.expected.pt", calls=entry["calls"],
                      rtol=entry["rtol"], atol=entry["atol"], profile=True)
    assert result.passed, [(c.name, c.detail) for mv in result.methods for c in mv.checks if not c.passed]
    for mv in result.methods:
        assert mv.bit_identical_required and any(c.folded for c in mv.moved)
        for call in mv.calls[1:]:
            assert (call.profiled_before.h2d_bytes, call.profiled_after.h2d_bytes) == (call.h2d_before, call.h2d_after)
            assert call.derived_after == (2048 if name.startswith("wav2vec2") else 0)
