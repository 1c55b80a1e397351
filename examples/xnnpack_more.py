"""Export the XNNPACK-as-device programs of tests/fixtures/xnnpack_more: external constants (a .ptd) and float16.

    python examples/xnnpack_more.py [OUT_DIR]        # default: tests/fixtures/xnnpack_more

Two linears (16 -> 32 -> 8) delegated to XNNPACK tagged ``cuda:0`` (``xnnpack_device.device_partitioner``: linear
weights stay outside the delegate), in copy style:

* ``ext_copy``: ``ExecutorchBackendConfig(external_constants=True)``: the weights live in ``ext_copy.ptd``, which
  a rewrite keeps (its moved constants are loaded from the .ptd by their keys);
* ``fp16_copy``: the model and inputs in float16.

(A bfloat16 version delegates nothing: XNNPACK in 1.5.1 leaves bfloat16 linears on the host, so nothing moves.)
Each comes with NAME.inputs.pt (``{"forward": [3 calls]}``).  ``tests/test_executorch_engine.py`` runs them.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import torch

from xnnpack_device import device_partitioner

from pte_devconst.exporting import clone_spec_patch

OUT = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "xnnpack_more"


class TwoLinears(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(16, 32)
        self.b = torch.nn.Linear(32, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.relu(self.a(x)))


def export(out: Path, name: str, *, external: bool = False, dtype: Optional[torch.dtype] = None) -> None:
    from executorch.exir import ExecutorchBackendConfig, to_edge_transform_and_lower

    torch.manual_seed(0)
    model = TwoLinears().eval().to(dtype or torch.float32)
    example = (torch.randn(4, 16).to(dtype or torch.float32),)
    exported = torch.export.export(model, example, strict=False)
    edge = to_edge_transform_and_lower(exported, partitioner=[device_partitioner()])
    config = ExecutorchBackendConfig(enable_non_cpu_memory_planning=True, external_constants=external)
    with torch.no_grad(), clone_spec_patch():
        program = edge.to_executorch(config)
    (out / f"{name}.pte").write_bytes(program.buffer)
    if external:
        program.write_tensor_data_to_file(str(out))
        (out / "_default_external_constant.ptd").rename(out / f"{name}.ptd")
    generator = torch.Generator().manual_seed(1)
    calls = [(torch.randn(4, 16, generator=generator).to(dtype or torch.float32),) for _ in range(3)]
    torch.save({"forward": calls}, out / f"{name}.inputs.pt")


def main() -> int:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else OUT
    out.mkdir(parents=True, exist_ok=True)
    export(out, "ext_copy", external=True)
    export(out, "fp16_copy", dtype=torch.float16)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
