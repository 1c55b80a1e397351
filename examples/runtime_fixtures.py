"""Export the runner's runtime-arithmetic fixtures with the real ExecuTorch 1.5.1 exporter.

    python examples/runtime_fixtures.py            # -> tests/fixtures/runtime_ops/

Small one-purpose programs on which the runner once disagreed with ExecuTorch's runtime
(``tests/test_runner_runtime_ops.py`` compares the two live, bit for bit):

* ``portable_{bf16,f16}.pte``: convolutions (grouped, strided, dilated, 1-d, transposed), ``addmm`` (a
  linear layer's broadcast bias; a full ``self`` with alpha and beta) and batch norm in half precision,
  where the portable kernels round every product and partial sum; ``portable_{f32_conv,f64}.pte``: the
  same in float32 and float64, where the portable kernels' in-order sums differ from ATen's blocked ones in
  the last bits; ``portable_f32.pte``: batch norm in float32 (its portable formula differs from ATen's in
  the last bit);
* ``quantized.pte``: ExecuTorch's quantized kernels (``quantized_decomposed::*.out``): a weight-only int8
  linear layer, per-tensor and per-channel quantize/dequantize (int8 and uint8, zero points, a float16
  output), ``embedding_byte`` with grouped scales, ``choose_qparams`` per tensor and per token with the
  quantize/dequantize that use them; ``quantized_all_legacy.pte``: the same model wholly
  delegated to the reference backend, whose graph calls the functional quantized operators;
  ``quantized_more.pte`` (and ``quantized_more_all_legacy.pte``): the rest of the library the runtime
  registers: ``mixed_mm``, ``mixed_linear``, ``add``, ``embedding_2bit``, ``embedding_4bit``;
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


def _trace_only_fakes() -> None:
    """Shapes for the quantized operators ExecuTorch defines without a Python kernel (``add``, ``mixed_mm``,
    ``mixed_linear``: only their .out variants run, in the runtime), so that export can trace them."""
    fakes = {
        "add": lambda a, *args: torch.empty_like(a),
        "mixed_mm": lambda x, w, s, z: x.new_empty((x.shape[0], w.shape[1])),
        "mixed_linear": lambda x, w, s, z, dtype=None: x.new_empty((x.shape[0], w.shape[0]), dtype=dtype or x.dtype),
    }
    for name, fake in fakes.items():
        with contextlib.suppress(RuntimeError):  # already registered (a second call in one process)
            torch.library.register_fake(f"quantized_decomposed::{name}", fake)


class QuantizedMore(nn.Module):
    """The rest of ExecuTorch's quantized library: int8-weight ``mixed_mm`` and ``mixed_linear`` (float32 and
    float16, per-row and grouped scales, mixed input/output types, a group count that does not divide the
    row, where the kernel reads the scales at its own flat index), ``add`` of quantized uint8 and int8
    tensors (scales that put many results on a rounding tie), 4-bit and 2-bit embeddings (zero points,
    grouped and per-row scales, float16 parameters, int32 indices)."""

    def __init__(self, g: torch.Generator) -> None:
        super().__init__()

        def ints(*shape: int) -> torch.Tensor:
            return torch.randint(-128, 128, shape, generator=g, dtype=torch.int8)

        def scales(*shape: int) -> torch.Tensor:
            return torch.rand(*shape, generator=g) / 20 + 0.005

        self.register_buffer("mm_w", ints(32, 12))
        self.register_buffer("mm_s", scales(32))
        self.register_buffer("mm_s_h", scales(32).half())
        self.register_buffer("lin_w", ints(12, 32))
        self.register_buffer("lin_s", scales(12, 4))
        self.register_buffer("lin_s_h", scales(12, 4).half())
        self.register_buffer("lin_s_row", scales(12))
        self.register_buffer("odd_w", ints(5, 6))
        self.register_buffer("odd_s", scales(5, 4))  # 6 columns in 4 groups: the kernel's g = 2, 3 groups
        self.register_buffer("e4", torch.randint(0, 256, (10, 4), generator=g, dtype=torch.uint8))
        self.register_buffer("e4_s", scales(10, 2))
        self.register_buffer("e4_z", torch.randint(-3, 3, (10, 2), generator=g).float())
        self.register_buffer("e2", torch.randint(0, 256, (10, 4), generator=g, dtype=torch.uint8))
        self.register_buffer("e2_s", scales(10))
        self.register_buffer("e2_s_h", scales(10, 4).half())

    def forward(self, x: torch.Tensor, a: torch.Tensor, b: torch.Tensor, a8: torch.Tensor, b8: torch.Tensor,
                tokens: torch.Tensor) -> tuple[torch.Tensor, ...]:
        qd = torch.ops.quantized_decomposed
        xh = x.half()
        return (qd.mixed_mm(x, self.mm_w, self.mm_s, None), qd.mixed_mm(xh, self.mm_w, self.mm_s_h, None),
                qd.mixed_linear(x, self.lin_w, self.lin_s, None), qd.mixed_linear(x, self.lin_w, self.lin_s_row, None),
                qd.mixed_linear(x[:, :6].contiguous(), self.odd_w, self.odd_s, None),
                qd.mixed_linear(xh, self.lin_w, self.lin_s_h, None, torch.float32),
                qd.mixed_linear(x, self.lin_w, self.lin_s, None, torch.float16),
                qd.mixed_linear(xh, self.lin_w, self.lin_s_h, None),
                qd.add(a, 0.05, 3, 0, 255, b, 0.07, 10, 0, 255, 0.09, 5, 0, 255),
                qd.add(a8, 0.5, 3, 0, 127, b8, 0.25, 10, 0, 127, 0.5, 20, 0, 127),
                qd.embedding_4bit(self.e4, self.e4_s, self.e4_z, -8, 7, tokens),
                qd.embedding_2bit(self.e2, self.e2_s, None, -2, 1, tokens),
                qd.embedding_2bit.dtype(self.e2, self.e2_s_h, None, -2, 1, tokens, dtype=torch.float32),
                qd.embedding_4bit.dtype(self.e4, self.e4_s.half(), self.e4_z.half(), -8, 7, tokens.int(),
                                        dtype=torch.float16))


def quantized_more_inputs(g: torch.Generator) -> tuple[torch.Tensor, ...]:
    def quantized(dtype: torch.dtype, high: int) -> torch.Tensor:
        return torch.randint(0, high, (3, 5), generator=g, dtype=dtype)

    return (torch.randn(4, 32, generator=g) * 3, quantized(torch.uint8, 256), quantized(torch.uint8, 256),
            quantized(torch.int8, 128), quantized(torch.int8, 128), torch.randint(0, 10, (2, 3), generator=g))


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
    import executorch.exir.passes._quant_patterns_and_replacements  # noqa: F401 - the rest of the library
    import torch.ao.quantization.fx._decomposed  # noqa: F401 - defines quantized_decomposed for export

    _trace_only_fakes()

    out = out or OUT
    out.mkdir(parents=True, exist_ok=True)
    written: dict[str, Any] = {}
    for name, dtype in (("bf16", torch.bfloat16), ("f16", torch.float16), ("f32_conv", torch.float32),
                        ("f64", torch.float64)):
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
    more = QuantizedMore(g)
    example = quantized_more_inputs(g)
    written["quantized_more"] = export(more, example)
    written["quantized_more_all_legacy"] = export(more, example, partition=True)
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
