"""Export the runner's runtime-arithmetic fixtures with the real ExecuTorch 1.5.1 exporter.

    python examples/runtime_fixtures.py            # -> tests/fixtures/runtime_ops/

Small one-purpose programs on which the runner once disagreed with ExecuTorch's runtime
(``tests/test_runner_runtime_ops.py`` compares the two live, bit for bit):

* ``portable_{bf16,f16}.pte``: convolutions (grouped, strided, dilated, 1-d, transposed), ``addmm`` (a
  linear layer's broadcast bias; a full ``self`` with alpha and beta) and batch norm in half precision,
  where the portable kernels round every product and partial sum; ``portable_f32.pte``: batch norm in
  float32 (its portable formula differs from ATen's in the last bit);
* ``quantized.pte``: ExecuTorch's quantized kernels (``quantized_decomposed::*.out``): a weight-only int8
  linear layer, per-tensor and per-channel quantize/dequantize (int8 and uint8, zero points, a float16
  output), ``embedding_byte`` with grouped scales, ``choose_qparams`` per tensor and per token with the
  quantize/dequantize that use them; ``quantized_all_legacy.pte``: the same model wholly
  delegated to the reference backend, whose graph calls the functional quantized operators;
* ``caller_outputs.pte``: exported with ``MemoryPlanningPass(alloc_graph_output=False)``, so its outputs
  are the caller's buffers; ``caller_outputs_all_legacy.pte``: the same, delegated to a device (legacy
  style: the delegate writes the caller's buffers.  In copy style 1.5.1's exporter leaves the delegate's
  device outputs unplanned, a program no runtime can run);
* ``loose_bound_mm_legacy.pte``: a dynamic shape whose planned bound no call reaches (``h - h % 4`` rows of
  an input of ``h <= 30`` rows, planned for 30), read by a device delegate: ``inspect``'s per-call figure is
  a bound there, not the bytes of the largest call (``tests/test_estimate_vs_runner.py``).
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
from export_examples import clone_spec_patch  # noqa: E402

OUT = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "runtime_ops"
SEED = 20241201


class Portable(nn.Module):
    """Every layout of the three portable kernels whose half-precision arithmetic ATen does not share."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(8, 12, 3, stride=2, padding=2, dilation=2, groups=4)
        self.conv1d = nn.Conv1d(4, 6, 5, padding=1, bias=False)
        self.deconv = nn.ConvTranspose2d(8, 4, 3, stride=2, padding=1, output_padding=1, groups=2)
        self.linear = nn.Linear(48, 10)
        self.bn = nn.BatchNorm2d(12)

    def forward(self, image: torch.Tensor, signal: torch.Tensor, rows: torch.Tensor, full: torch.Tensor,
                mat: torch.Tensor) -> tuple[torch.Tensor, ...]:
        features = self.conv(image)
        return (features, self.bn(features), self.conv1d(signal), self.deconv(image), self.linear(rows),
                torch.addmm(full, rows, mat, beta=0.3, alpha=1.7))


def portable_inputs(dtype: torch.dtype, g: torch.Generator) -> tuple[torch.Tensor, ...]:
    return tuple(t.to(dtype) for t in (torch.randn(2, 8, 9, 11, generator=g), torch.randn(2, 4, 20, generator=g),
                                       torch.randn(3, 48, generator=g), torch.randn(3, 5, generator=g),
                                       torch.randn(48, 5, generator=g)))


class BatchNorm(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.bn = nn.BatchNorm2d(8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn(x)


def _randomize(model: nn.Module, g: torch.Generator) -> nn.Module:
    """Random weights and batch-norm statistics (a fresh BatchNorm is an identity)."""
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=g))
        for module in model.modules():
            if isinstance(module, nn.BatchNorm2d):
                module.running_mean.copy_(torch.randn(module.num_features, generator=g))
                module.running_var.copy_(torch.rand(module.num_features, generator=g) * 2 + 0.1)
    return model.eval()


class Quantized(nn.Module):
    """ExecuTorch's quantized operators as weight-only and activation quantization leave them in a graph."""

    def __init__(self, g: torch.Generator) -> None:
        super().__init__()
        weight = torch.randn(16, 32, generator=g)
        scale = weight.abs().amax(1) / 127
        self.register_buffer("wq", torch.clamp(torch.round(weight / scale[:, None]), -128, 127).to(torch.int8))
        self.register_buffer("w_scale", scale)
        self.register_buffer("w_zero", torch.zeros(16, dtype=torch.int64))
        self.bias = nn.Parameter(torch.randn(16, generator=g))
        self.register_buffer("c_scale", torch.rand(16, generator=g, dtype=torch.float64) / 10 + 0.01)
        self.register_buffer("c_zero", torch.randint(100, 150, (16,), generator=g))
        self.register_buffer("u8", torch.randint(0, 256, (8,), generator=g, dtype=torch.uint8))
        self.register_buffer("u8_scale", torch.rand(8, generator=g) / 10 + 0.01)
        self.register_buffer("u8_zero", torch.randint(100, 150, (8,), generator=g))
        self.register_buffer("table", torch.randint(-128, 128, (10, 8), generator=g, dtype=torch.int8))
        self.register_buffer("table_scale", torch.rand(10, 2, generator=g) / 10 + 0.01)
        self.register_buffer("table_zero", torch.randint(-3, 3, (10, 2), generator=g).float())

    def forward(self, x: torch.Tensor, tokens: torch.Tensor) -> tuple[torch.Tensor, ...]:
        qd = torch.ops.quantized_decomposed
        weight = qd.dequantize_per_channel(self.wq, self.w_scale, self.w_zero, 0, -128, 127, torch.int8)
        y = torch.nn.functional.linear(x, weight, self.bias)
        q = qd.quantize_per_tensor(y * 3, 0.173, 7, -128, 127, torch.int8)
        qc = qd.quantize_per_channel(y.t() * 5, self.c_scale, self.c_zero, 0, 0, 255, torch.uint8)
        # Dynamic quantization: parameters chosen per call, for the tensor and per token (of the input, which
        # both runtimes hold bit for bit; y's float32 sums differ from ATen's in the last bits).
        scale, zero = qd.choose_qparams(x, -128, 127, 1e-7, torch.int8)
        qt = qd.quantize_per_tensor(x, scale, zero, -128, 127, torch.int8)
        token_scale, token_zero = qd.choose_qparams_per_token_asymmetric(x, torch.int8)
        qk = qd.quantize_per_token(x, token_scale, token_zero, -128, 127, torch.int8)
        return (weight, q, qd.dequantize_per_tensor(q, 0.173, 7, -128, 127, torch.int8), qc,
                qd.dequantize_per_channel(qc, self.c_scale.float(), self.c_zero, 0, 0, 255, torch.uint8),
                qd.dequantize_per_channel(self.u8, self.u8_scale, self.u8_zero, 0, 0, 255, torch.uint8,
                                          out_dtype=torch.float16),
                qd.embedding_byte(self.table, self.table_scale, self.table_zero, -128, 127, tokens),
                scale, zero, qd.dequantize_per_tensor(qt, scale, zero, -128, 127, torch.int8), token_scale,
                token_zero, qd.dequantize_per_token(qk, token_scale, token_zero, -128, 127, torch.int8,
                                                    torch.float32))


def quantized_inputs(g: torch.Generator) -> tuple[torch.Tensor, ...]:
    return torch.randn(4, 32, generator=g), torch.randint(0, 10, (2, 3), generator=g)


class CallerOutputs(nn.Module):
    """Outputs computed exactly by any kernel (adds, products by 2, relu), one of them a view's copy."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        s = x + y
        return s.relu(), s * 2, (x * y).t().contiguous()


def caller_inputs(g: torch.Generator) -> tuple[torch.Tensor, ...]:
    return torch.randn(3, 8, generator=g), torch.randn(3, 8, generator=g)


class LooseBound(nn.Module):
    """Whole windows of 4 rows: ``h - h % 4`` rows, whose interval bound (30 for ``h <= 30``) no call reaches."""

    def __init__(self, g: torch.Generator) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(16, 16, generator=g) / 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.shape[1]
        return x[:, : rows - rows % 4] @ self.weight


def export(model: nn.Module, example: tuple, *, partition: bool = False, copy_style: bool = False,
           alloc_graph_output: bool = True, dynamic_shapes: Any = None, ops: Optional[frozenset] = None) -> bytes:
    from executorch.exir import EdgeCompileConfig, ExecutorchBackendConfig, to_edge_transform_and_lower
    from executorch.exir.passes import MemoryPlanningPass

    with torch.no_grad():
        program = torch.export.export(model, example, dynamic_shapes=dynamic_shapes, strict=False)
    edge = to_edge_transform_and_lower(program, partitioner=[DevconstPartitioner(ops, "cuda:0", "outside")]
                                       if partition else None,
                                       compile_config=EdgeCompileConfig(_check_ir_validity=False))
    config = ExecutorchBackendConfig(enable_non_cpu_memory_planning=copy_style,
                                     memory_planning_pass=MemoryPlanningPass(alloc_graph_output=alloc_graph_output))
    with clone_spec_patch() if copy_style else contextlib.nullcontext():
        return edge.to_executorch(config).buffer


def main(out: Optional[Path] = None) -> int:
    import executorch.kernels.quantized  # noqa: F401 - the .out variants the emitter needs
    import torch.ao.quantization.fx._decomposed  # noqa: F401 - defines quantized_decomposed for export

    out = out or OUT
    out.mkdir(parents=True, exist_ok=True)
    written: dict[str, Any] = {}
    for name, dtype in (("bf16", torch.bfloat16), ("f16", torch.float16)):
        g = torch.Generator().manual_seed(SEED)
        model = _randomize(Portable(), g).to(dtype)
        written[f"portable_{name}"] = export(model, portable_inputs(dtype, g))
    g = torch.Generator().manual_seed(SEED)
    written["portable_f32"] = export(_randomize(BatchNorm(), g), (torch.randn(2, 8, 5, 5, generator=g),))
    g = torch.Generator().manual_seed(SEED)
    quantized = Quantized(g)
    example = quantized_inputs(g)
    written["quantized"] = export(quantized, example)
    written["quantized_all_legacy"] = export(quantized, example, partition=True)
    g = torch.Generator().manual_seed(SEED)
    example = caller_inputs(g)
    written["caller_outputs"] = export(CallerOutputs(), example, alloc_graph_output=False)
    written["caller_outputs_all_legacy"] = export(CallerOutputs(), example, partition=True,
                                                  alloc_graph_output=False)
    g = torch.Generator().manual_seed(SEED)
    written["loose_bound_mm_legacy"] = export(
        LooseBound(g), (torch.randn(1, 10, 16, generator=g),), partition=True,
        dynamic_shapes=({1: torch.export.Dim.AUTO(min=4, max=30)},), ops=frozenset({"aten.mm", "aten.bmm"}))
    for name, data in written.items():
        (out / f"{name}.pte").write_bytes(data)
        print(f"{name}.pte: {len(data)} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
