"""Export the programs ``rewrite --fold`` is tested on (tests/fixtures/fold), with the real ExecuTorch 1.5.1 exporter.

    python examples/fold_cases.py              # every case -> tests/fixtures/fold/
    python examples/fold_cases.py --only steps # one case (the manifest keeps the others)

Two kinds of program:

* ``oracle_*_cpu``: CPU programs whose outputs are chains of table kernels applied to constants of several
  dtypes (every kernel the exporter emits, casts between float32/float16/bfloat16/float64/int/bool,
  contiguous <-> channels-last dim orders).  ``tests/test_fold_exact.py`` compares what fold computes with
  what the real runtime returns, and runs their host-placement folds on the real runtime.  ``oracle_mul_cpu``
  multiplies every chain by an input so that no chain is a method output (a host kernel reads it).
* device programs (``*_copy``, ``*_legacy``) partitioned like the real-model ``mm`` fixtures (only matrix
  products and convolutions delegated, constants left outside the delegate): a transposed weight also read
  on the host (``shared``), several kernels and two casts on the way (``steps``), a float weight cast to int
  and back, with a NaN (``nan``) and without (``ints``), two methods folding one weight (``methods``), a
  weight in a .ptd (``external``), a channels-last copy of a convolution weight (``channels_last``), a weight
  read by the device both as it is and transposed (``both``: it moves once its transpose folds).

Each NAME.pte comes with NAME.inputs.pt and NAME.expected.pt (eager outputs), in the corpus's format;
``manifest.json`` lists every file with its sha256.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from devconst_backend import DevconstPartitioner  # noqa: E402
from export_examples import clone_spec_patch  # noqa: E402

OUT = HERE.parent / "tests" / "fixtures" / "fold"
SEED = 20261130
MM_OPS = frozenset({"aten.mm", "aten.bmm", "aten.addmm", "aten.convolution"})


def _param(*shape: int, scale: float = 1.0, generator: torch.Generator) -> torch.nn.Parameter:
    return torch.nn.Parameter(torch.randn(*shape, generator=generator) * scale, requires_grad=False)


class Oracle(torch.nn.Module):
    """Every table kernel the exporter emits, and casts between the dtypes the portable kernels switch over."""

    def __init__(self, g: torch.Generator) -> None:
        super().__init__()
        w = torch.randn(4, 6, generator=g) * 300
        w[0, :5] = torch.tensor([float("inf"), -float("inf"), -0.0, 1e-42, 70000.0])  # overflow, subnormal, -0
        w[1, :3] = torch.tensor([0.5, 1.5, 2.5])  # ties: round half to even
        self.w = torch.nn.Parameter(w, requires_grad=False)
        finite = torch.randn(4, 6, generator=g) * 1000
        finite[0, :4] = torch.tensor([-0.0, 2.5, -2.5, 127.9])
        self.finite = torch.nn.Parameter(finite, requires_grad=False)
        self.w4 = _param(2, 3, 4, 5, generator=g)
        self.pos = torch.nn.Parameter(torch.rand(3, 5, generator=g) * 127, requires_grad=False)
        self.f16 = torch.nn.Parameter((torch.randn(3, 5, generator=g) * 100).half(), requires_grad=False)
        self.bf16 = torch.nn.Parameter((torch.randn(3, 5, generator=g) * 100).bfloat16(), requires_grad=False)
        self.register_buffer("ints", torch.randint(-2**40, 2**40, (3, 5), generator=g))
        self.register_buffer("small", torch.randint(-300, 300, (3, 5), generator=g, dtype=torch.int32))
        self.register_buffer("flags", torch.rand(3, 5, generator=g) > 0.5)

    def chains(self) -> list[torch.Tensor]:
        w, f, w4 = self.w, self.finite, self.w4
        return [
            w.permute(1, 0), w.unsqueeze(0).expand(3, 4, 6), w.unsqueeze(1).squeeze(1), w[1:3], w[:, 1:6:2], w[1],
            w.select(1, -1), w.t().unsqueeze(-1), w.permute(1, 0)[2:5].unsqueeze(0),
            w.to(torch.float16), w.to(torch.bfloat16), w.to(torch.float64), w.to(torch.bool),
            f.to(torch.int32), f.to(torch.int16), f.to(torch.int64), self.pos.to(torch.uint8), self.pos.to(torch.int8),
            self.f16.to(torch.float32), self.f16.to(torch.bfloat16), self.bf16.to(torch.float16),
            self.bf16.to(torch.float32), self.ints.to(torch.float32), self.ints.to(torch.int8),
            self.ints.to(torch.float16), self.small.to(torch.int8), self.small.to(torch.float16),
            self.flags.to(torch.float32), self.flags.to(torch.int32), w4.to(memory_format=torch.channels_last),
            w4.contiguous(memory_format=torch.channels_last).to(torch.float16),
            w4.permute(0, 2, 3, 1).contiguous(), w.to(torch.float16).to(torch.float32),
        ]

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(self.chains()) + (x + 1,)


class OracleMul(Oracle):
    """The same chains, each read by a host kernel (a multiplication by an input of ones), not a method output."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        # The portable mul needs one dim order for all its tensors: channels-last chains go back first.
        chains = [c.contiguous() if c.dim() == 4 else c for c in self.chains()]
        return tuple(c * x.to(c.dtype) if c.dtype != torch.bool else c & (x > 0) for c in chains)


class Shared(torch.nn.Module):
    """A transposed weight the device reads (mm) and the host reads too (mul, sum)."""

    def __init__(self, g: torch.Generator) -> None:
        super().__init__()
        self.w = _param(8, 16, generator=g)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        wt = self.w.t()
        return torch.mm(x, wt), (wt * 2.0).sum(dim=0)


class Steps(torch.nn.Module):
    """Several kernels on the way: select, permute, a round trip through float16 into mm; permute,
    unsqueeze, expand into bmm."""

    def __init__(self, g: torch.Generator) -> None:
        super().__init__()
        self.w = _param(3, 8, 16, scale=100.0, generator=g)
        self.v = _param(8, 16, generator=g)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        w = self.w.select(0, 1).t().to(torch.float16).to(torch.float32)
        v = self.v.t().unsqueeze(0).expand(2, 16, 8)
        return torch.mm(x, w), torch.bmm(y, v)


class Ints(torch.nn.Module):
    """A float weight cast to int32 and back before mm (a float-to-int cast: its data decide)."""

    def __init__(self, g: torch.Generator, nan: bool = False) -> None:
        super().__init__()
        w = torch.randn(16, 8, generator=g) * 50
        if nan:
            w[3, 5] = float("nan")
        self.w = torch.nn.Parameter(w, requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.mm(x, self.w.to(torch.int32).to(torch.float32))


class Linear(torch.nn.Module):
    """``x @ w.t()`` for two methods of one program sharing the weight (and for the .ptd case)."""

    def __init__(self, g: torch.Generator) -> None:
        super().__init__()
        self.w = _param(8, 16, generator=g)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.mm(x, self.w.t())


class Both(torch.nn.Module):
    """One weight read by the device as it is (mm) and transposed (permute on the host, then mm): once the
    transpose folds, only device delegates read the weight, so it moves too."""

    def __init__(self, g: torch.Generator) -> None:
        super().__init__()
        self.w = _param(16, 16, generator=g)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.mm(x, self.w.t()), torch.mm(y, self.w)


class ChannelsLast(torch.nn.Module):
    """A convolution (on the device) of a channels-last input with a channels-last copy of its weight."""

    def __init__(self, g: torch.Generator) -> None:
        super().__init__()
        self.w = _param(6, 3, 3, 3, generator=g)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.conv2d(x, self.w.contiguous(memory_format=torch.channels_last), padding=1)


@dataclass(frozen=True)
class Case:
    name: str
    make: Callable[[torch.Generator], torch.nn.Module]
    inputs: Callable[[torch.Generator], tuple[torch.Tensor, ...]]
    styles: tuple[str, ...] = ("copy", "legacy")
    external: bool = False
    methods: tuple[str, ...] = ("forward",)


CASES = (
    Case("oracle", Oracle, lambda g: (torch.randn(2, generator=g),), ("cpu",)),
    Case("oracle_mul", OracleMul, lambda g: (torch.ones(1),), ("cpu",)),
    Case("shared", Shared, lambda g: (torch.randn(4, 16, generator=g),)),
    Case("steps", Steps, lambda g: (torch.randn(4, 16, generator=g), torch.randn(2, 4, 16, generator=g))),
    Case("ints", Ints, lambda g: (torch.randn(4, 16, generator=g),)),
    Case("nan", lambda g: Ints(g, nan=True), lambda g: (torch.randn(4, 16, generator=g),), ("copy",)),
    Case("methods", Linear, lambda g: (torch.randn(4, 16, generator=g),), methods=("forward", "again")),
    Case("external", Linear, lambda g: (torch.randn(4, 16, generator=g),), external=True),
    Case("both", Both, lambda g: (torch.randn(4, 16, generator=g), torch.randn(4, 16, generator=g))),
    Case("channels_last", ChannelsLast,
         lambda g: (torch.randn(1, 3, 6, 6, generator=g).contiguous(memory_format=torch.channels_last),)),
)


def export(case: Case, style: str, out: Path) -> list[Path]:
    """Export one case in one style; returns the files written."""
    from executorch.exir import ExecutorchBackendConfig, to_edge_transform_and_lower

    g = torch.Generator().manual_seed(SEED)
    model = case.make(g).eval()
    calls = [case.inputs(g) for _ in range(2)]
    programs = {name: torch.export.export(model, calls[0], strict=False) for name in case.methods}
    partitioner = None if style == "cpu" else [DevconstPartitioner(MM_OPS, "cuda:0", "outside")]
    edge = to_edge_transform_and_lower(programs, partitioner=partitioner)
    config = ExecutorchBackendConfig(enable_non_cpu_memory_planning=style != "legacy",
                                     external_constants=case.external)
    with clone_spec_patch() if style == "copy" else contextlib.nullcontext():
        program = edge.to_executorch(config)
    name = f"{case.name}_{style}"
    written = [out / f"{name}.pte"]
    written[0].write_bytes(program.buffer)
    if case.external:
        for _key, data in program._tensor_data.items():  # one .ptd: the default external constant tag
            path = out / f"{name}.ptd"
            path.write_bytes(bytes(data))
            written.append(path)
    with torch.no_grad():
        expected = [list(o) if isinstance(o := model(*call), tuple) else [o] for call in calls]
    torch.save({m: calls for m in case.methods}, out / f"{name}.inputs.pt")
    torch.save({m: expected for m in case.methods}, out / f"{name}.expected.pt")
    return written + [out / f"{name}.inputs.pt", out / f"{name}.expected.pt"]


def main(argv: Optional[list[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--only", action="append", help="case name (repeatable)")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    manifest_path = args.out / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {"files": {}}
    for case in CASES:
        if args.only and case.name not in args.only:
            continue
        for style in case.styles:
            for path in export(case, style, args.out):
                manifest["files"][path.name] = {"size": path.stat().st_size,
                                                "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}
                print("wrote", path)
    manifest.update({"generator": "examples/fold_cases.py", "seed": SEED,
                     "versions": {"torch": torch.__version__, "executorch": _executorch_version()}})
    manifest["files"] = dict(sorted(manifest["files"].items()))
    manifest_path.write_text(json.dumps(manifest, indent=1) + "\n")


def _executorch_version() -> str:
    from importlib import metadata

    return metadata.version("executorch")


if __name__ == "__main__":
    main()
