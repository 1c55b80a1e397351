"""Export the example programs with the real ExecuTorch 1.5.1 exporter (needs the ``executorch`` extra).

    python examples/export_examples.py                 # the committed small examples -> examples/models/
    python examples/export_examples.py --out DIR       # somewhere else
    python examples/export_examples.py --big --out DIR # + mlp_big_{copy,legacy}.pte, >= 256 MiB of constants

Every program delegates to the reference device backend (examples/devconst_backend.py) with the
constants its ops read left outside the delegate, so ExecuTorch copies them host-to-device on every
call: in "copy" style (``enable_non_cpu_memory_planning=True``, the 1.5.1 default: explicit
``et_copy::_h2d_copy.out`` kernels) and in "legacy" style (``=False``: the delegate copies them).
Each NAME.pte comes with NAME.inputs.pt ({method: [call inputs]}) and NAME.expected.pt ({method:
[eager outputs]}), in the corpus's format.

Copy style with a constant feeding a device delegate crashes the 1.5.1 emitter (the h2d copy's
TensorSpec is cloned from the constant's, still ``const`` with no storage).  ``clone_spec_patch``
fixes the clone at run time, for this script only, the way the corpus generator did.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from devconst_backend import DevconstPartitioner  # noqa: E402

from pte_devconst.exporting import clone_spec_patch  # noqa: E402,F401 - also imported from here by other scripts

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "models"
SEED = 20240611


class MLP(torch.nn.Module):
    def __init__(self, d_in: int = 16, hidden: int = 32, d_out: int = 8) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(d_in, hidden)
        self.fc2 = torch.nn.Linear(hidden, d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x)))


class TransformerBlock(torch.nn.Module):
    """Pre-norm self-attention + MLP block, small enough to commit."""

    def __init__(self, dim: int = 32, heads: int = 4, hidden: int = 64) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = torch.nn.LayerNorm(dim)
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.proj = torch.nn.Linear(dim, dim)
        self.norm2 = torch.nn.LayerNorm(dim)
        self.up = torch.nn.Linear(dim, hidden)
        self.down = torch.nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, dim = x.shape
        q, k, v = self.qkv(self.norm1(x)).reshape(batch, seq, 3, self.heads, dim // self.heads).permute(2, 0, 3, 1, 4)
        scores = torch.softmax(q @ k.transpose(-2, -1) / (dim // self.heads) ** 0.5, dim=-1)
        attended = (scores @ v).transpose(1, 2).reshape(batch, seq, dim)
        x = x + self.proj(attended)
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm2(x))))


class TwoStage(torch.nn.Module):
    """Stage 0 (mm, add, relu) runs on cuda:0, stage 1 (mul, sigmoid, sub) on cuda:1, each with its weights."""

    def __init__(self, dim: int = 16) -> None:
        super().__init__()
        self.w0 = torch.nn.Parameter(torch.randn(dim, dim) / dim ** 0.5)
        self.b0 = torch.nn.Parameter(torch.randn(dim))
        self.g1 = torch.nn.Parameter(torch.randn(dim))
        self.c1 = torch.nn.Parameter(torch.randn(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(torch.mm(x, self.w0) + self.b0)
        return torch.sigmoid(h * self.g1) - self.c1


class AddChain(torch.nn.Module):
    """The seed's shape: ``y = x + w0 + w1 + ... + w{n-1}``, every weight read only by the device delegate."""

    def __init__(self, params: int = 300, shape: tuple[int, ...] = (2, 4), seed: int = 0) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(seed)
        self.weights = torch.nn.ParameterList(
            torch.nn.Parameter(torch.randn(*shape, generator=generator), requires_grad=False) for _ in range(params))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for weight in self.weights:
            x = x + weight
        return x


def export_seed_chain(out: Path, params: int = 300, styles: Sequence[str] = ("copy", "legacy")) -> list[Path]:
    """``seed_chain{params}_{style}.pte`` (+ inputs, expected): a real export of the seed's shape with many
    constants, every add on the reference device backend (tests/fixtures/seed, kept in the default suite)."""
    generator = torch.Generator().manual_seed(1)
    calls = [(torch.randn(2, 4, generator=generator),) for _ in range(2)]
    return [write_example(out, f"seed_chain{params}", AddChain(params), calls,
                          [DevconstPartitioner({"aten.add"}, "cuda:0")], style) for style in styles]


@dataclass(frozen=True)
class Example:
    name: str
    make: Callable[[], torch.nn.Module]
    inputs: Callable[[torch.Generator], tuple[torch.Tensor, ...]]
    partitioners: Callable[[], list]  # fresh partitioners per export; [] = CPU only
    styles: Sequence[str] = ("copy", "legacy")


def _all_ops(device: str = "cuda:0") -> Callable[[], list]:
    return lambda: [DevconstPartitioner(None, device, "outside")]


EXAMPLES = (
    Example("mlp", MLP, lambda g: (torch.randn(4, 16, generator=g),), _all_ops()),
    Example("mlp", MLP, lambda g: (torch.randn(4, 16, generator=g),), lambda: [], ("cpu",)),
    # The baseline a real device backend aims for: weights inside the delegate, on the device from init.
    Example("mlp_inside", MLP, lambda g: (torch.randn(4, 16, generator=g),),
            lambda: [DevconstPartitioner(None, "cuda:0", "inside")], ("copy",)),
    Example("transformer", TransformerBlock, lambda g: (torch.randn(2, 8, 32, generator=g),), _all_ops()),
    Example("two_gpu", TwoStage, lambda g: (torch.randn(4, 16, generator=g),),
            lambda: [DevconstPartitioner({"aten.mm", "aten.add", "aten.relu"}, "cuda:0"),
                     DevconstPartitioner({"aten.mul", "aten.sigmoid", "aten.sub"}, "cuda:1")]),
)


def export_program(model: torch.nn.Module, example: tuple[torch.Tensor, ...], partitioners: list, style: str) -> bytes:
    """Export ``model`` with the real ExecuTorch exporter in ``style`` (copy, legacy or cpu)."""
    from executorch.exir import ExecutorchBackendConfig, to_edge_transform_and_lower

    program = torch.export.export(model, example, strict=False)
    edge = to_edge_transform_and_lower(program, partitioner=partitioners or None)
    config = ExecutorchBackendConfig(enable_non_cpu_memory_planning=style != "legacy")
    with clone_spec_patch() if style == "copy" else contextlib.nullcontext():
        return edge.to_executorch(config).buffer


def write_example(out: Path, name: str, model: torch.nn.Module, calls: list[tuple[torch.Tensor, ...]],
                  partitioners: list, style: str) -> Path:
    """Export one program and save NAME.pte, NAME.inputs.pt and NAME.expected.pt (eager outputs)."""
    model.eval()
    path = out / f"{name}_{style}.pte"
    path.write_bytes(export_program(model, calls[0], partitioners, style))
    with torch.no_grad():
        expected = [[model(*call)] for call in calls]
    torch.save({"forward": calls}, out / f"{name}_{style}.inputs.pt")
    torch.save({"forward": expected}, out / f"{name}_{style}.expected.pt")
    return path


def export_all(out: Path, big: bool = False, only: Optional[set[str]] = None) -> list[Path]:
    """Export every example (or those named in ``only``, e.g. ``{"mlp_legacy"}``) into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for example in EXAMPLES:
        for style in example.styles:
            if only is not None and f"{example.name}_{style}" not in only:
                continue
            torch.manual_seed(SEED)
            generator = torch.Generator().manual_seed(SEED)
            model = example.make()
            calls = [example.inputs(generator) for _ in range(2)]
            written.append(write_example(out, example.name, model, calls, example.partitioners(), style))
    if big:
        for style in ("copy", "legacy"):
            if only is not None and f"mlp_big_{style}" not in only:
                continue
            torch.manual_seed(SEED)
            generator = torch.Generator().manual_seed(SEED)
            model = MLP(4096, 8192, 4096)  # 2 x 4096 x 8192 fp32 weights = 256 MiB, plus biases
            calls = [(torch.randn(8, 4096, generator=generator),) for _ in range(2)]
            written.append(write_example(out, "mlp_big", model, calls, _all_ops()(), style))
    return written


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output folder (default examples/models)")
    parser.add_argument("--only", action="append", metavar="NAME",
                        help="export only this program (e.g. mlp_legacy); repeatable")
    parser.add_argument("--big", action="store_true",
                        help="also export mlp_big_{copy,legacy}.pte with >= 256 MiB of constants (not committed)")
    args = parser.parse_args(argv)
    for path in export_all(args.out, args.big, set(args.only) if args.only else None):
        print(f"{path}  {path.stat().st_size} B")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
