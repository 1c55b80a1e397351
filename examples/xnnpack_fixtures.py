"""Export the runner's real-backend fixtures: XNNPACK programs, alone and mixed with a device delegate.

    python examples/xnnpack_fixtures.py            # -> tests/fixtures/xnnpack/

The runner executes a delegate whose backend the installed ExecuTorch runtime registers (XNNPACK in the
1.5.1 wheel) through that runtime (``runner/runtime_backend.py``); ``tests/test_runtime_backend.py`` checks
it on these programs, each a small MLP (two linear layers, a residual add) exported by the real 1.5.1
exporter:

* ``mlp_cpu.pte``: everything delegated to XNNPACK (weights packed inside the delegate, as named data);
* ``mlp_dynamic_cpu.pte``: the same with a dynamic batch (1 to 8 rows): the runtime resizes its outputs;
* ``mlp_nonstatic_cpu.pte``: ``XnnpackPartitioner(force_non_static_weights_for_f32_linear=True)``: the
  weights stay program constants the delegate reads as arguments;
* ``mlp_device_{copy,legacy}.pte``: the same partition with a ``target_device=cuda:0`` compile spec added
  (``DeviceXnnpackPartitioner``): XNNPACK as a device delegate, whose weights the program copies to
  ``cuda:0`` on every call (what ``rewrite`` removes).  XNNPACK ignores the spec, so its blob is
  ``mlp_nonstatic_cpu.pte``'s and its outputs are that program's, bit for bit;
* ``mlp_mixed_{copy,legacy}.pte``: matrix products delegated to the reference device backend
  (examples/devconst_backend.py) on ``cuda:0``, everything else to XNNPACK on the host.

Each comes with ``NAME.inputs.pt`` (``{"forward": [call inputs]}``) and ``NAME.expected.pt`` (eager
outputs); the CPU programs with ``NAME.runtime.pt``, the real runtime's outputs (calls in order on one loaded
method).
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Any, Optional

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))

from devconst_backend import DevconstPartitioner  # noqa: E402
from real_models import runtime_outputs  # noqa: E402

from pte_devconst.exporting import clone_spec_patch  # noqa: E402

OUT = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "xnnpack"
SEED = 20250317
MM_OPS = frozenset({"aten.mm", "aten.addmm"})


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(16, 32)
        self.down = nn.Linear(32, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.relu(self.up(x))) * 0.5


def device_xnnpack(device: str = "cuda:0", **options: Any) -> Any:
    """An XnnpackPartitioner whose delegates carry a ``target_device`` compile spec (XNNPACK as a device)."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir.backend.compile_spec_schema import CompileSpec

    class DeviceXnnpackPartitioner(XnnpackPartitioner):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__(**options)
            self.delegation_spec.compile_specs.append(CompileSpec("target_device", device.encode("utf-8")))

    return DeviceXnnpackPartitioner()


def export(model: nn.Module, example: tuple, partitioners: list, style: str, dynamic_shapes: Any = None) -> bytes:
    from executorch.exir import ExecutorchBackendConfig, to_edge_transform_and_lower

    with torch.no_grad():
        program = torch.export.export(model, example, dynamic_shapes=dynamic_shapes, strict=False)
    edge = to_edge_transform_and_lower(program, partitioner=partitioners)
    config = ExecutorchBackendConfig(enable_non_cpu_memory_planning=style == "copy")
    with clone_spec_patch() if style == "copy" else contextlib.nullcontext():
        return edge.to_executorch(config).buffer


def build() -> tuple[MLP, list[tuple], list[tuple]]:
    """The model (seeded weights), two calls of 4 rows, and the dynamic program's calls of 8, 3 and 1 rows."""
    torch.manual_seed(SEED)
    g = torch.Generator().manual_seed(SEED)
    calls = [(torch.randn(4, 16, generator=g),) for _ in range(2)]
    return MLP().eval(), calls, [(torch.randn(rows, 16, generator=g),) for rows in (8, 3, 1)]


def main(out: Optional[Path] = None) -> int:
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

    model, calls, dynamic_calls = build()
    out = out or OUT
    out.mkdir(parents=True, exist_ok=True)
    nonstatic = XnnpackPartitioner(force_non_static_weights_for_f32_linear=True)
    programs: dict[str, tuple[bytes, list[tuple]]] = {
        "mlp_cpu": (export(model, calls[0], [XnnpackPartitioner()], "cpu"), calls),
        "mlp_dynamic_cpu": (export(model, dynamic_calls[0], [XnnpackPartitioner()], "cpu",
                                   ({0: torch.export.Dim("rows", min=1, max=8)},)), dynamic_calls),
        "mlp_nonstatic_cpu": (export(model, calls[0], [nonstatic], "cpu"), calls),
    }
    for style in ("copy", "legacy"):
        programs[f"mlp_device_{style}"] = (
            export(model, calls[0], [device_xnnpack(force_non_static_weights_for_f32_linear=True)], style), calls)
        programs[f"mlp_mixed_{style}"] = (
            export(model, calls[0], [DevconstPartitioner(MM_OPS, "cuda:0", "outside"), XnnpackPartitioner()], style),
            calls)
    for name, (data, its_calls) in programs.items():
        path = out / f"{name}.pte"
        path.write_bytes(data)
        torch.save({"forward": its_calls}, out / f"{name}.inputs.pt")
        with torch.no_grad():
            torch.save({"forward": [[model(*call)] for call in its_calls]}, out / f"{name}.expected.pt")
        if name.endswith("_cpu"):
            torch.save({"forward": runtime_outputs(path, its_calls)}, out / f"{name}.runtime.pt")
        print(f"{name}.pte: {len(data)} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
