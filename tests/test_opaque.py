"""Opaque delegates and the digest behind them and behind the delegate-boundary transcript."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from cli_runner import invoke
from conftest import CORPUS, pte_path
from forge import with_backend
from pte_devconst.runner import Cause, Direction, run_program
from pte_devconst.runner.delegates import OpaquePolicy
from pte_devconst.runner.digest import fetch_digests, fill_standin, mix, tensor_digest
from pte_devconst.runner.validate import validate
from pte_devconst.util.errors import PteDevconstError

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "models"
MASK = (1 << 64) - 1


def digest(tensor: torch.Tensor) -> tuple[int, int]:
    return fetch_digests([tensor_digest(tensor)])[0]


def reference_digest(data: bytes) -> tuple[int, int]:
    """The documented definition, word by word in Python: little-endian 64-bit words, zero-padded."""
    padded = data + bytes(-len(data) % 8)
    words = [int.from_bytes(padded[i: i + 8], "little") for i in range(0, len(padded), 8)]
    return sum(words) & MASK, sum((i + 1) * w for i, w in enumerate(words)) & MASK


@pytest.mark.parametrize("nbytes", [0, 1, 7, 8, 9, 8 * 1024 - 1, 8 * 1024, 8 * 1024 + 5, 3 * 8 * 1024 + 17])
def test_digest_is_the_documented_sum_of_words(nbytes: int) -> None:
    data = torch.randint(0, 256, (nbytes,), dtype=torch.uint8, generator=torch.Generator().manual_seed(nbytes))
    assert digest(data) == reference_digest(data.numpy().tobytes())


def test_digest_reads_memory_bytes_whatever_the_view() -> None:
    x = torch.randn(6, 5, generator=torch.Generator().manual_seed(1))
    assert digest(x) == digest(x.view(torch.uint8)) == reference_digest(x.numpy().tobytes())
    # A dense tensor in another dim order: its memory, in memory order (what a delegate reads).
    assert digest(x.t()) == digest(x)
    # Not dense (a strided slice): its elements, packed row-major.
    assert digest(x[:, ::2]) == reference_digest(x[:, ::2].contiguous().numpy().tobytes())
    assert digest(x[1:]) == reference_digest(x[1:].numpy().tobytes())  # a view at an unaligned offset too
    assert digest(torch.tensor(True)) == (1, 1)


def test_every_single_byte_change_changes_the_digest() -> None:
    data = torch.randint(0, 256, (2053,), dtype=torch.uint8, generator=torch.Generator().manual_seed(7))
    base = digest(data)
    masks = torch.randint(1, 256, (data.numel(),), generator=torch.Generator().manual_seed(8))
    for position in range(data.numel()):
        changed = data.clone()
        changed[position] ^= int(masks[position])
        assert digest(changed) != base, position


def test_swapped_words_change_the_digest() -> None:
    words = torch.randint(-2**62, 2**62, (4096,), dtype=torch.int64, generator=torch.Generator().manual_seed(3))
    base = digest(words)
    for a, b in [(0, 1), (5, 4000), (1023, 1024), (17, 2048 + 17)]:
        swapped = words.clone()
        swapped[a], swapped[b] = words[b], words[a]
        assert digest(swapped) != base


def test_stand_ins_are_deterministic_benign_and_seeded() -> None:
    seed = mix(1234, [tensor_digest(torch.arange(10))], torch.device("cpu"))
    other = mix(1234, [tensor_digest(torch.arange(11))], torch.device("cpu"))
    for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.float64):
        values = fill_standin(torch.empty(64, 33, dtype=dtype), seed)
        assert values.dtype == dtype and values.shape == (64, 33)
        assert bool(((values >= 0.5) & (values <= 1.5)).all()) and values.unique().numel() > 30
        assert torch.equal(values, fill_standin(torch.empty(64, 33, dtype=dtype), seed))
        assert not torch.equal(values, fill_standin(torch.empty(64, 33, dtype=dtype), other))
    for dtype in (torch.int64, torch.int32, torch.int8, torch.uint8):
        assert not fill_standin(torch.empty(5, 7, dtype=dtype), seed).any()  # 0 indexes any non-empty dim
    flags = fill_standin(torch.empty(1000, dtype=torch.bool), seed)
    assert 300 < int(flags.sum()) < 700
    assert fill_standin(torch.empty(0, 3), seed).shape == (0, 3)


def test_opaque_outputs_are_a_function_of_the_inputs_bytes() -> None:
    x = torch.randn(4, 16, generator=torch.Generator().manual_seed(5))
    path = EXAMPLES / "mlp_copy.pte"
    first = run_program(path, inputs=(x,), calls=2, simulate_devices=True, opaque=OpaquePolicy.ALWAYS)
    again = run_program(path, inputs=(x.clone(),), calls=1, simulate_devices=True, opaque=OpaquePolicy.ALWAYS)
    nudged = x.clone()
    nudged.view(torch.uint8)[0] ^= 1
    other = run_program(path, inputs=(nudged,), calls=1, simulate_devices=True, opaque=OpaquePolicy.ALWAYS)
    assert first.opaque_backends == ["PteDevconstReference"]
    assert torch.equal(first.calls[0].outputs[0], first.calls[1].outputs[0])
    assert torch.equal(first.calls[0].outputs[0], again.calls[0].outputs[0])
    assert not torch.equal(first.calls[0].outputs[0], other.calls[0].outputs[0])


@pytest.mark.parametrize("name", ["mlp_legacy", "mlp_copy", "two_gpu_legacy"])
def test_an_opaque_delegate_copies_what_a_device_delegate_copies(name: str) -> None:
    """The same bytes cross the boundary as with the reference backend's executor, by the same causes."""
    common = dict(inputs=EXAMPLES / f"{name}.inputs.pt", calls=2, simulate_devices=True)
    real = run_program(EXAMPLES / f"{name}.pte", **common)
    opaque = run_program(EXAMPLES / f"{name}.pte", opaque=OpaquePolicy.ALWAYS, **common)
    assert [c.copies.cells for c in opaque.calls] == [c.copies.cells for c in real.calls]
    assert opaque.load.cells == real.load.cells
    if name.endswith("legacy"):  # the delegate reads host constants and writes a host output: both counted
        cells = opaque.calls[-1].copies.cells
        assert cells[(Direction.H2D, Cause.DELEGATE_HOST_INPUT)].count >= 5
        assert (Direction.D2H, Cause.DELEGATE_HOST_OUTPUT) in cells


def test_xnnpack_validates_through_an_opaque_delegate_when_asked(tmp_path: Path) -> None:
    """XNNPACK runs in the installed runtime (tests/test_runtime_backend.py); --opaque-delegates makes it a
    stand-in all the same, which the boundary check still validates, and --expected then has nothing to compare."""
    name = "v_h_xnnpack"
    result = validate(pte_path(name), pte_path(name), inputs=CORPUS / f"{name}.inputs.pt", opaque_delegates=True)
    assert result.passed and result.methods[0].opaque_backends == ["XnnpackBackend"]
    assert [d.execution.value for d in result.methods[0].original.delegates] == ["stand-in"]
    checks = {c.name: c for c in result.methods[0].checks}
    assert checks["delegate boundaries match"].status.value == "pass"
    assert result.verdict.value == "nothing moved" and result.verdict.exit_code == 3  # the same file twice
    # Its one output comes from the stand-in: expected outputs would compare nothing, which is an error, not PASS.
    with pytest.raises(PteDevconstError, match=r"every output depends on opaque delegates \(XnnpackBackend\)"):
        validate(pte_path(name), pte_path(name), inputs=CORPUS / f"{name}.inputs.pt",
                 expected=CORPUS / f"{name}.expected.pt", opaque_delegates=True)


def test_run_uses_opaque_delegates_only_when_asked(tmp_path: Path) -> None:
    path = with_backend(EXAMPLES / "mlp_legacy.pte", tmp_path / "cuda.pte", "CudaBackend")
    refused = invoke("run", path, "--simulate-devices")
    assert refused.exit_code == 2 and "CudaBackend" in refused.stderr and "--opaque-delegates" in refused.stderr
    done = invoke("run", path, "--simulate-devices", "--opaque-delegates", "--format", "json")
    assert done.exit_code == 0, done.stderr
    assert json.loads(done.stdout)["opaque_backends"] == ["CudaBackend"]
    text = invoke("run", path, "--simulate-devices", "--opaque-delegates")
    assert "opaque delegates: CudaBackend ran as stand-ins" in text.stdout
    assert "5 copies" in text.stdout and "3,488 B in all" in text.stdout  # 4 host constants and the input
