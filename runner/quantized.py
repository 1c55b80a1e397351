"""ExecuTorch's quantized kernels (``executorch/kernels/quantized``), computed as its C++ computes them.

Weight-only int8 programs call ``quantized_decomposed::dequantize_per_channel.out`` on their weights, and
quantize/dequantize pairs appear around quantized activations.  torch defines these operators only when
ExecuTorch's ``quantized_ops_aot_lib`` (or ``torch.ao``'s Python decompositions) has been loaded, and then
with their own arithmetic; the runner needs neither: every operator below is ours, bound by the schema
ExecuTorch's ``kernels/quantized/quantized.yaml`` declares, and computed in the order and precision of
``kernels/quantized/cpu/op_*.cpp`` (x86 paths):

* **quantize**: ``inv_scale = 1.0f / (float)scale``; ``q = (int32)zero_point + nearbyint((float)(inv_scale *
  value))`` (the sum is a float sum), clamped to ``[quant_min, quant_max]``.  A ``double`` input multiplies
  in double, then rounds to float.
* **dequantize**: ``(q - (int32)zero_point) * (float)scale`` in float, then cast to the output dtype (a
  per-channel dequantize of a 1-d tensor casts ``q - zero_point`` to the output dtype first, as its C++
  does).  Per-channel scales are read as float (a double scale is cast).
* **per token**: the input as a 2-d tensor (every dim but the last), quantized per channel along dim 0.
* **embedding_byte**: ``((float)w - (float)zero_point) * (float)scale`` per row (and per group of columns
  when the scales are 2-d).
* **choose_qparams** (per tensor, and per token in [-128, 127]): float min and max (widened to include 0),
  ``scale = ((double)max - min) / (qmax - qmin)`` with the kernel's checks for a zero or tiny scale, and
  the zero point nudged from the side with the smaller error, as ``calculate_scale_and_zero_point`` does.
* **embedding_2bit / embedding_4bit** (``embeddingxb.cpp``): the packed values unpacked (4-bit high nibble
  first, 2-bit low bits first, offset by 8 or 2), then ``((float)w - (float)zero_point) * (float)scale``.
  The ``.out`` variants read the scales as the output's type; scales of another dtype are refused.
* **add** (``op_add.cpp``): dequantized in double with float scales, summed in float, quantized as above.
* **mixed_mm / mixed_linear** (``vec_quantized_matmul_int8`` / ``_transb_int8`` of ``vec_ops.h``): the
  sums in the kernel's order and types (per group for mixed_linear), one vectorized step per reduction
  index; zero points are refused, as the kernels refuse them.

The reference delegate runs the functional variants (``.default``, ``.tensor``, ``.dtype``) with the same
arithmetic.  These are every operator ExecuTorch 1.5.1's runtime registers from ``kernels/quantized`` (its
``.out`` variants).  The library's other definitions have no runtime kernel: ``choose_qparams_symmetric``
(the 1.5.1 exporter stops at "Missing out variants"), ``add.scalar``, ``add_relu`` and the group-wise
``quantize/dequantize_per_channel_group``; the runner has none of its own either (an unknown operator,
named, unless torch defines it in the process).
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import torch

NAMESPACE = "quantized_decomposed"


def _f32(value: float) -> torch.Tensor:
    """A C++ ``static_cast<float>(double_value)``."""
    return torch.tensor(float(value), dtype=torch.float64).to(torch.float32)


def _along(values: torch.Tensor, dim: int, rank: int) -> torch.Tensor:
    """Per-channel parameters shaped to broadcast along ``dim`` of a rank-``rank`` tensor."""
    shape = [1] * rank
    shape[dim] = -1
    return values.reshape(shape)


def _quantize(input: torch.Tensor, scale: torch.Tensor, zero_point: torch.Tensor, quant_min: int, quant_max: int,
              dtype: torch.dtype) -> torch.Tensor:
    """quantize_val with ``scale`` (double) and ``zero_point`` (int64) broadcast to the input."""
    inv_scale = 1.0 / scale.to(torch.float64).to(torch.float32)  # 1.0f / static_cast<float>(scale), in float
    if input.dtype == torch.float64:
        scaled = (input * inv_scale.to(torch.float64)).to(torch.float32)
    else:
        scaled = input.to(torch.float32) * inv_scale
    # static_cast<int32_t>(zero_point) + std::nearbyint(...): an int plus a float is a float sum.
    qvalue = (zero_point.to(torch.int32).to(torch.float32) + torch.round(scaled)).to(torch.int64)
    return qvalue.clamp(quant_min, quant_max).to(dtype)


def _dequantize(input: torch.Tensor, scale: torch.Tensor, zero_point: Optional[torch.Tensor], out_dtype: torch.dtype,
                cast_first: bool = False) -> torch.Tensor:
    """``(q - (int32)zero_point) * (float)scale`` in float, then the output dtype."""
    shifted = input.to(torch.int32)
    if zero_point is not None:
        shifted = shifted - zero_point.to(torch.int32)
    base = shifted.to(out_dtype).to(torch.float32) if cast_first else shifted.to(torch.float32)
    return (base * scale.to(torch.float32)).to(out_dtype)


def _write(out: torch.Tensor, result: torch.Tensor) -> torch.Tensor:
    if out.shape != result.shape:
        out.resize_(result.shape)
    out.copy_(result)
    return out


# --- the computations, one per operator (functional form) ---------------------------------------------


def quantize_per_tensor(input: torch.Tensor, scale: Any, zero_point: Any, quant_min: int, quant_max: int,
                        dtype: torch.dtype) -> torch.Tensor:
    scale = scale.reshape(()) if isinstance(scale, torch.Tensor) else torch.tensor(float(scale), dtype=torch.float64)
    zero_point = zero_point.reshape(()) if isinstance(zero_point, torch.Tensor) else torch.tensor(int(zero_point))
    return _quantize(input, scale, zero_point, quant_min, quant_max, dtype)


def dequantize_per_tensor(input: torch.Tensor, scale: Any, zero_point: Any, quant_min: int, quant_max: int,
                          dtype: torch.dtype, *, out_dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    scale = _f32(scale.reshape(()).item()) if isinstance(scale, torch.Tensor) else _f32(scale)
    zero_point = zero_point.reshape(()) if isinstance(zero_point, torch.Tensor) else torch.tensor(int(zero_point))
    return _dequantize(input, scale, zero_point, out_dtype or torch.float32)


def quantize_per_channel(input: torch.Tensor, scales: torch.Tensor, zero_points: torch.Tensor, axis: int,
                         quant_min: int, quant_max: int, dtype: torch.dtype) -> torch.Tensor:
    axis = axis % input.dim()
    return _quantize(input, _along(scales, axis, input.dim()), _along(zero_points, axis, input.dim()),
                     quant_min, quant_max, dtype)


def dequantize_per_channel(input: torch.Tensor, scales: torch.Tensor, zero_points: Optional[torch.Tensor], axis: int,
                           quant_min: int, quant_max: int, dtype: torch.dtype, *,
                           out_dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    axis = axis % input.dim()
    scale = _along(scales.to(torch.float32), axis, input.dim())  # get_scale: a double scale is cast to float
    zero = None if zero_points is None else _along(zero_points, axis, input.dim())
    optimized = input.dtype == torch.int8 and out_dtype in (None, torch.float32)
    return _dequantize(input, scale, zero, out_dtype or torch.float32,
                       cast_first=input.dim() == 1 and not optimized)


def quantize_per_token(input: torch.Tensor, scales: torch.Tensor, zero_points: torch.Tensor, quant_min: int,
                       quant_max: int, dtype: torch.dtype) -> torch.Tensor:
    rows = input.reshape(-1, input.shape[-1])
    return quantize_per_channel(rows, scales.reshape(-1), zero_points.reshape(-1), 0, quant_min, quant_max,
                                dtype).reshape(input.shape)


def dequantize_per_token(input: torch.Tensor, scales: torch.Tensor, zero_points: torch.Tensor, quant_min: int,
                         quant_max: int, dtype: torch.dtype, output_dtype: torch.dtype) -> torch.Tensor:
    rows = input.reshape(-1, input.shape[-1])
    return dequantize_per_channel(rows, scales.reshape(-1), zero_points.reshape(-1), 0, quant_min, quant_max, dtype,
                                  out_dtype=output_dtype).reshape(input.shape)


def embedding_byte(weight: torch.Tensor, weight_scales: torch.Tensor, weight_zero_points: Optional[torch.Tensor],
                   weight_quant_min: int, weight_quant_max: int, indices: torch.Tensor, *,
                   dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    index = indices.reshape(-1).to(torch.int64)
    result = _dequantize_rows(weight[index].to(torch.float32), weight_scales, weight_zero_points, index,
                              dtype or weight_scales.dtype)
    return result.reshape(*indices.shape, weight.shape[1])


def _dequantize_rows(rows: torch.Tensor, weight_scales: torch.Tensor, weight_zero_points: Optional[torch.Tensor],
                     index: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The looked-up rows (float32), each value ``(v - (float)zero_point) * (float)scale`` of its row's group
    (groups split a row evenly; 1-d scales: one group), then ``dtype``: the embedding kernels' dequantization."""
    dim = rows.shape[1]
    groups = weight_scales.shape[1] if weight_scales.dim() == 2 else 1
    column_group = torch.arange(dim) // (dim // groups)
    scale = weight_scales.reshape(weight_scales.shape[0], groups)[index][:, column_group].to(torch.float32)
    if weight_zero_points is not None:
        zeros = weight_zero_points.reshape(weight_zero_points.shape[0], groups)
        rows = rows - zeros[index][:, column_group].to(torch.float32)
    return (rows * scale).to(dtype)


def _embedding_xbit(bits: int, weight: torch.Tensor, weight_scales: torch.Tensor,
                    weight_zero_points: Optional[torch.Tensor], indices: torch.Tensor,
                    dtype: Optional[torch.dtype]) -> torch.Tensor:
    """embedding_xbit_per_channel (embeddingxb.cpp): each uint8 of ``weight`` packs ``8 // bits`` values,
    4-bit ones high nibble first, 2-bit ones low bits first, stored offset by 8 (or 2); a value is
    ``((float)(w - offset) - (float)zero_point) * (float)scale``, then the output dtype."""
    if weight.dtype != torch.uint8 or weight.dim() != 2:
        raise ValueError(f"embedding_{bits}bit needs a 2-d uint8 weight, got {weight.dtype}{list(weight.shape)}")
    per_byte = 8 // bits
    shifts = torch.tensor([4, 0] if bits == 4 else [0, 2, 4, 6], dtype=torch.uint8)
    index = indices.reshape(-1).to(torch.int64)
    rows = weight[index]
    values = ((rows.unsqueeze(-1) >> shifts) & ((1 << bits) - 1)).reshape(rows.shape[0], -1)
    values = values.to(torch.int32) - (1 << (bits - 1))
    embedding_dim = weight.shape[1] * per_byte
    groups = weight_scales.shape[1] if weight_scales.dim() == 2 else 1
    if embedding_dim % groups:
        raise ValueError(f"embedding_{bits}bit: {groups} groups do not divide the embedding dim {embedding_dim}")
    result = _dequantize_rows(values.to(torch.float32), weight_scales, weight_zero_points, index,
                              dtype or weight_scales.dtype)
    return result.reshape(*indices.shape, embedding_dim)


def embedding_2bit(weight: torch.Tensor, weight_scales: torch.Tensor, weight_zero_points: Optional[torch.Tensor],
                   weight_quant_min: int, weight_quant_max: int, indices: torch.Tensor,
                   dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    return _embedding_xbit(2, weight, weight_scales, weight_zero_points, indices, dtype)


def embedding_4bit(weight: torch.Tensor, weight_scales: torch.Tensor, weight_zero_points: Optional[torch.Tensor],
                   weight_quant_min: int, weight_quant_max: int, indices: torch.Tensor,
                   dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    return _embedding_xbit(4, weight, weight_scales, weight_zero_points, indices, dtype)


def _check_zero_points(zero_points: Optional[torch.Tensor], scales: torch.Tensor, out: torch.Tensor) -> None:
    """The kernel requires zero points of the output's dtype and reads them as the scales' type."""
    if zero_points is not None and not zero_points.dtype == scales.dtype == out.dtype:
        raise ValueError(f"zero points of {zero_points.dtype} with {scales.dtype} scales and a {out.dtype} "
                         f"output: the kernel requires the output's dtype and reads them as the scales'")


def _embedding_xbit_out(compute: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """embedding_{2,4}bit.out: the kernel reads the scales (and zero points) as the output's C type, so
    scales of another dtype would be reinterpreted bytes; refused instead."""

    def out_variant(weight: torch.Tensor, weight_scales: torch.Tensor, weight_zero_points: Optional[torch.Tensor],
                    weight_quant_min: int, weight_quant_max: int, indices: torch.Tensor, *,
                    out: torch.Tensor) -> torch.Tensor:
        if weight_scales.dtype != out.dtype:
            raise ValueError(f"the .out variant reads {weight_scales.dtype} scales as {out.dtype} (the output's "
                             f"type); the runtime's result would be reinterpreted bytes")
        _check_zero_points(weight_zero_points, weight_scales, out)
        return _write(out, compute(weight, weight_scales, weight_zero_points, weight_quant_min, weight_quant_max,
                                   indices, out.dtype))

    return out_variant


def _embedding_xbit_dtype_out(compute: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    def out_variant(weight: torch.Tensor, weight_scales: torch.Tensor, weight_zero_points: Optional[torch.Tensor],
                    weight_quant_min: int, weight_quant_max: int, indices: torch.Tensor,
                    dtype: Optional[torch.dtype] = None, *, out: torch.Tensor) -> torch.Tensor:
        if dtype is not None and dtype != out.dtype:
            raise ValueError(f"dtype {dtype} differs from the output's {out.dtype}")
        _check_zero_points(weight_zero_points, weight_scales, out)
        return _write(out, compute(weight, weight_scales, weight_zero_points, weight_quant_min, weight_quant_max,
                                   indices, out.dtype))

    return out_variant


def add(a: torch.Tensor, a_scale: float, a_zero_point: int, a_quant_min: int, a_quant_max: int, b: torch.Tensor,
        b_scale: float, b_zero_point: int, b_quant_min: int, b_quant_max: int, out_scale: float,
        out_zero_point: int, out_quant_min: int, out_quant_max: int) -> torch.Tensor:
    """quantized_add_out (op_add.cpp): ``(q - zero_point) * scale`` in double (the scale first rounded to
    float), stored as float; the two summed in float; quantized as quantize_val does (float ``inv_scale``,
    ``nearbyint``, the zero point added as a float), clamped.  No broadcasting: same shape and dtype."""
    if a.shape != b.shape or a.dtype != b.dtype or a.dtype.is_floating_point or a.dtype == torch.bool:
        raise ValueError(f"add needs two integer tensors of one shape and dtype, got {a.dtype}{list(a.shape)} "
                         f"and {b.dtype}{list(b.shape)}")
    for name, low, high in (("a", a_quant_min, a_quant_max), ("b", b_quant_min, b_quant_max),
                            ("out", out_quant_min, out_quant_max)):
        if not 0 <= low <= high <= 255:
            raise ValueError(f"{name}'s quant range [{low}, {high}] is not within [0, 255]")

    def dequantized(q: torch.Tensor, scale: float, zero_point: int) -> torch.Tensor:
        zero = torch.tensor(zero_point, dtype=torch.int64).to(torch.int32).to(torch.int64)  # int32 cast
        return ((q.to(torch.int64) - zero).to(torch.float64) * _f32(scale).to(torch.float64)).to(torch.float32)

    accumulate = dequantized(a, a_scale, a_zero_point) + dequantized(b, b_scale, b_zero_point)
    return _quantize(accumulate, _f32(out_scale).to(torch.float64), torch.tensor(out_zero_point),
                     out_quant_min, out_quant_max, a.dtype)


def _matmul_checks(name: str, input: torch.Tensor, weight: torch.Tensor, weight_scales: torch.Tensor,
                   weight_zero_points: Optional[torch.Tensor]) -> None:
    if input.dim() != 2 or input.dtype not in (torch.float32, torch.float16):
        raise ValueError(f"{name} needs a 2-d float32 or float16 input, got {input.dtype}{list(input.shape)}")
    if weight.dim() != 2 or weight.dtype != torch.int8:
        raise ValueError(f"{name} needs a 2-d int8 weight, got {weight.dtype}{list(weight.shape)}")
    if weight_scales.dtype != input.dtype:
        raise ValueError(f"{name}: scales of {weight_scales.dtype}, the input is {input.dtype}")
    if weight_zero_points is not None:
        raise ValueError(f"{name}: the kernel does not support zero points (\"zero points not supported yet\")")


def mixed_mm(input: torch.Tensor, weight: torch.Tensor, weight_scales: torch.Tensor,
             weight_zero_points: Optional[torch.Tensor]) -> torch.Tensor:
    """quantized_mixed_mm_out (vec_quantized_matmul_int8): ``sum += x[i][k] * (T)w[k][j] * s[k]`` over k in
    order, every operation in the input's type (float16 rounds each step), one vectorized step per k."""
    _matmul_checks("mixed_mm", input, weight, weight_scales, weight_zero_points)
    if weight_scales.dim() != 1 or weight_scales.shape[0] != weight.shape[0] or input.shape[1] != weight.shape[0]:
        raise ValueError(f"mixed_mm: input {list(input.shape)}, weight {list(weight.shape)} and scales "
                         f"{list(weight_scales.shape)} do not fit (x: m*n, w: n*p, s: n)")
    dtype = input.dtype
    w = weight.to(dtype)
    accum = torch.zeros((input.shape[0], weight.shape[1]), dtype=dtype)
    product = torch.empty_like(accum)
    for k in range(input.shape[1]):
        torch.mul(input[:, k:k + 1], w[k], out=product)
        accum.add_(product.mul_(weight_scales[k]))
    return accum


def mixed_linear(input: torch.Tensor, weight: torch.Tensor, weight_scales: torch.Tensor,
                 weight_zero_points: Optional[torch.Tensor], dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    """quantized_mixed_linear_out (vec_quantized_matmul_transb_int8): per group of ``g`` columns ``psum +=
    x[i][k] * (U)w[j][k]`` (the product in the input's type U, the sum in the output's T), then ``sum += psum
    * s[j * ceil(n/g) + k/g]``; the scale is read at that flat index, as the kernel reads it.  ``psum * s``
    mixing the two types is computed in the wider one; ``T += value`` first converts the value to T."""
    _matmul_checks("mixed_linear", input, weight, weight_scales, weight_zero_points)
    m, n = input.shape
    p = weight.shape[0]
    if weight.shape[1] != n or weight_scales.dim() not in (1, 2) or weight_scales.shape[0] != p:
        raise ValueError(f"mixed_linear: input {list(input.shape)}, weight {list(weight.shape)} and scales "
                         f"{list(weight_scales.shape)} do not fit (x: m*n, w: p*n, s: p or p*groups)")
    out_dtype = dtype or input.dtype
    if out_dtype not in (torch.float32, torch.float16, torch.float64):
        raise ValueError(f"mixed_linear: the output must be float32, float16 or float64, got {out_dtype}")
    in_dtype = input.dtype
    wide = torch.promote_types(in_dtype, out_dtype)  # C++'s type for T * U
    g = n if weight_scales.dim() == 1 else -(-n // weight_scales.shape[1])
    n_over_g = -(-n // g)
    flat_scales = weight_scales.reshape(-1)
    columns = weight.t().to(in_dtype).contiguous()  # row k: w[:, k], contiguous for the per-k step
    total = torch.zeros((m, p), dtype=out_dtype)
    psum = torch.empty((m, p), dtype=out_dtype)
    product = torch.empty((m, p), dtype=in_dtype)
    for start in range(0, n, g):
        psum.zero_()
        for k in range(start, min(start + g, n)):
            # x * w in U; ``T += U`` converts the product to T first (c10::Half has only Half += Half).
            torch.mul(input[:, k:k + 1], columns[k], out=product)
            psum.add_(product if in_dtype == out_dtype else product.to(out_dtype))
        scale = flat_scales[torch.arange(p) * n_over_g + start // g].reshape(1, p)
        total.add_((psum.to(wide) * scale.to(wide)).to(out_dtype))
    return total


def _mixed_linear_out(input: torch.Tensor, weight: torch.Tensor, weight_scales: torch.Tensor,
                      weight_zero_points: Optional[torch.Tensor], dtype: Optional[torch.dtype] = None, *,
                      out: torch.Tensor) -> torch.Tensor:
    """The kernel sums in the output's type; ``dtype``, if given, must be it (float32 or float16)."""
    if dtype is not None and (dtype != out.dtype or dtype not in (torch.float32, torch.float16)):
        raise ValueError(f"dtype {dtype} must be float32 or float16 and the output's ({out.dtype})")
    return _write(out, mixed_linear(input, weight, weight_scales, weight_zero_points, out.dtype))


def _mixed_mm_out(input: torch.Tensor, weight: torch.Tensor, weight_scales: torch.Tensor,
                  weight_zero_points: Optional[torch.Tensor], *, out: torch.Tensor) -> torch.Tensor:
    if out.dtype != input.dtype:
        raise ValueError(f"mixed_mm: output {out.dtype}, input {input.dtype}: the kernel needs one dtype")
    return _write(out, mixed_mm(input, weight, weight_scales, weight_zero_points))


_SMALL_SCALE = 6.1e-5  # SMALL_SCALE_THRESHOLD, a float constant


def _float(value: float) -> float:
    """A C++ float: ``value`` rounded to float32 (and back to a Python float, exactly)."""
    return float(_f32(value).item())


def _scale_and_zero_point(low: float, high: float, qmin: int, qmax: int) -> tuple[float, int]:
    """calculate_scale_and_zero_point (op_choose_qparams.cpp): float bounds, a double scale, a nudged zero point."""
    low, high = min(low, 0.0), max(high, 0.0)
    scale = (high - low) / (qmax - qmin)  # static_cast<double>(max) - min, in double
    scale_f = _float(scale)
    if scale_f == 0.0 or torch.isinf(torch.tensor(1.0, dtype=torch.float32) / scale_f).item():
        scale = 0.1
    threshold = _float(_SMALL_SCALE)
    if scale < threshold:
        original = _float(scale)
        scale = threshold
        if low == 0.0:
            high = _float(threshold * (qmax - qmin))
        elif high == 0.0:
            low = _float(-threshold * (qmax - qmin))
        else:
            amplifier = _float(threshold / original)
            low, high = _float(low * amplifier), _float(high * amplifier)
    from_min, from_max = qmin - low / scale, qmax - high / scale
    initial = from_min if abs(qmin) - abs(low / scale) < abs(qmax) - abs(high / scale) else from_max
    if initial < qmin:
        return scale, qmin
    if initial > qmax:
        return scale, qmax
    return scale, int(torch.round(torch.tensor(initial, dtype=torch.float64).to(torch.float32)).item())


def _rows_qparams(rows: torch.Tensor, qmin: int, qmax: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Scale (double) and zero point (int64) of each row of a float tensor, from its float min and max."""
    lows, highs = rows.amin(dim=1).tolist(), rows.amax(dim=1).tolist()
    pairs = [_scale_and_zero_point(low, high, qmin, qmax) for low, high in zip(lows, highs)]
    return (torch.tensor([p[0] for p in pairs], dtype=torch.float64),
            torch.tensor([p[1] for p in pairs], dtype=torch.int64))


def choose_qparams(input: torch.Tensor, quant_min: int, quant_max: int, eps: float, dtype: torch.dtype
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """choose_qparams.tensor: one scale and zero point for the whole tensor (``eps`` unused, as in the kernel)."""
    scale, zero = _rows_qparams(input.reshape(1, -1), quant_min, quant_max)
    return scale, zero


def choose_qparams_per_token_asymmetric(input: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """One scale and zero point per token (every dim but the last), in [-128, 127] whatever ``dtype``."""
    scale, zero = _rows_qparams(input.reshape(-1, input.shape[-1]), -128, 127)
    shape = (*input.shape[:-1], 1)
    return scale.reshape(shape), zero.reshape(shape)


def _qparams_out(compute: Callable[..., tuple[torch.Tensor, torch.Tensor]]) -> Callable[..., Any]:
    def out_variant(*args: Any, scale_out: torch.Tensor, zero_point_out: torch.Tensor
                    ) -> tuple[torch.Tensor, torch.Tensor]:
        scale, zero = compute(*args)
        if scale_out.numel() == scale.numel() and scale_out.dim() != scale.dim():
            scale, zero = scale.reshape(scale_out.shape), zero.reshape(zero_point_out.shape)
        return _write(scale_out, scale), _write(zero_point_out, zero)

    return out_variant


# --- the .out operators of kernels/quantized/quantized.yaml, with their schemas --------------------------


def _out(compute: Callable[..., torch.Tensor], dtype_keyword: Optional[str] = None) -> Callable[..., torch.Tensor]:
    """An out variant: ``compute`` on the arguments, stored into ``out`` (whose dtype is the result's when
    ``dtype_keyword`` names the argument that would otherwise choose it)."""

    def out_variant(*args: Any, out: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        if dtype_keyword is not None:
            kwargs[dtype_keyword] = out.dtype
        return _write(out, compute(*args, **kwargs))

    return out_variant


def _dequantize_per_token_out(input: torch.Tensor, scales: torch.Tensor, zero_points: torch.Tensor, quant_min: int,
                              quant_max: int, dtype: torch.dtype, output_dtype: torch.dtype, *,
                              out: torch.Tensor) -> torch.Tensor:
    return _write(out, dequantize_per_token(input, scales, zero_points, quant_min, quant_max, dtype, out.dtype))


_OUT_SCHEMAS: dict[str, tuple[str, Callable[..., Any]]] = {
    "quantize_per_tensor.out": (
        "(Tensor input, float scale, int zero_point, int quant_min, int quant_max, ScalarType dtype, *, "
        "Tensor(a!) out) -> Tensor(a!)", _out(quantize_per_tensor)),
    "quantize_per_tensor.Tensor_out": (
        "(Tensor input, Tensor scale, Tensor zero_point, int quant_min, int quant_max, ScalarType dtype, *, "
        "Tensor(a!) out) -> Tensor(a!)", _out(quantize_per_tensor)),
    "dequantize_per_tensor.out": (
        "(Tensor input, float scale, int zero_point, int quant_min, int quant_max, ScalarType dtype, *, "
        "ScalarType? out_dtype=None, Tensor(a!) out) -> Tensor(a!)", _out(dequantize_per_tensor, "out_dtype")),
    "dequantize_per_tensor.Tensor_out": (
        "(Tensor input, Tensor scale, Tensor zero_point, int quant_min, int quant_max, ScalarType dtype, *, "
        "ScalarType? out_dtype=None, Tensor(a!) out) -> Tensor(a!)", _out(dequantize_per_tensor, "out_dtype")),
    "quantize_per_channel.out": (
        "(Tensor input, Tensor scales, Tensor zero_points, int axis, int quant_min, int quant_max, "
        "ScalarType dtype, *, Tensor(a!) out) -> Tensor(a!)", _out(quantize_per_channel)),
    "dequantize_per_channel.out": (
        "(Tensor input, Tensor scales, Tensor? zero_points, int axis, int quant_min, int quant_max, "
        "ScalarType dtype, *, ScalarType? out_dtype=None, Tensor(a!) out) -> Tensor(a!)",
        _out(dequantize_per_channel, "out_dtype")),
    "quantize_per_token.out": (
        "(Tensor input, Tensor scales, Tensor zero_points, int quant_min, int quant_max, ScalarType dtype, *, "
        "Tensor(a!) out) -> Tensor(a!)", _out(quantize_per_token)),
    "dequantize_per_token.out": (
        "(Tensor input, Tensor scales, Tensor zero_points, int quant_min, int quant_max, ScalarType dtype, "
        "ScalarType output_dtype, *, Tensor(a!) out) -> Tensor(a!)", _dequantize_per_token_out),
    "choose_qparams.Tensor_out": (
        "(Tensor input, int quant_min, int quant_max, float eps, ScalarType dtype, *, Tensor(a!) scale_out, "
        "Tensor(b!) zero_point_out) -> (Tensor(a!), Tensor(b!))", _qparams_out(choose_qparams)),
    "choose_qparams_per_token_asymmetric.out": (
        "(Tensor input, ScalarType dtype, *, Tensor(a!) scale_out, Tensor(b!) zero_point_out) -> "
        "(Tensor(a!), Tensor(b!))", _qparams_out(choose_qparams_per_token_asymmetric)),
    "embedding_byte.out": (
        "(Tensor weight, Tensor weight_scales, Tensor? weight_zero_points, int weight_quant_min, "
        "int weight_quant_max, Tensor indices, *, Tensor(a!) out) -> Tensor(a!)", _out(embedding_byte, "dtype")),
    "embedding_byte.dtype_out": (
        "(Tensor weight, Tensor weight_scales, Tensor? weight_zero_points, int weight_quant_min, "
        "int weight_quant_max, Tensor indices, *, ScalarType? dtype=None, Tensor(a!) out) -> Tensor(a!)",
        _out(embedding_byte, "dtype")),
    "embedding_2bit.out": (
        "(Tensor weight, Tensor weight_scales, Tensor? weight_zero_points, int weight_quant_min, "
        "int weight_quant_max, Tensor indices, *, Tensor(a!) out) -> Tensor(a!)", _embedding_xbit_out(embedding_2bit)),
    "embedding_2bit.dtype_out": (
        "(Tensor weight, Tensor weight_scales, Tensor? weight_zero_points, int weight_quant_min, "
        "int weight_quant_max, Tensor indices, ScalarType? dtype=None, *, Tensor(a!) out) -> Tensor(a!)",
        _embedding_xbit_dtype_out(embedding_2bit)),
    "embedding_4bit.out": (
        "(Tensor weight, Tensor weight_scales, Tensor? weight_zero_points, int weight_quant_min, "
        "int weight_quant_max, Tensor indices, *, Tensor(a!) out) -> Tensor(a!)", _embedding_xbit_out(embedding_4bit)),
    "embedding_4bit.dtype_out": (
        "(Tensor weight, Tensor weight_scales, Tensor? weight_zero_points, int weight_quant_min, "
        "int weight_quant_max, Tensor indices, ScalarType? dtype=None, *, Tensor(a!) out) -> Tensor(a!)",
        _embedding_xbit_dtype_out(embedding_4bit)),
    "add.out": (
        "(Tensor a, float a_scale, int a_zero_point, int a_quant_min, int a_quant_max, Tensor b, float b_scale, "
        "int b_zero_point, int b_quant_min, int b_quant_max, float out_scale, int out_zero_point, "
        "int out_quant_min, int out_quant_max, *, Tensor(a!) out) -> Tensor(a!)", _out(add)),
    "mixed_mm.out": (
        "(Tensor input, Tensor weight, Tensor weight_scales, Tensor? weight_zero_points, *, Tensor(a!) out) -> "
        "Tensor(a!)", _mixed_mm_out),
    "mixed_linear.out": (
        "(Tensor input, Tensor weight, Tensor weight_scales, Tensor? weight_zero_points, ScalarType? dtype=None, "
        "*, Tensor(a!) out) -> Tensor(a!)", _mixed_linear_out),
}


def out_kernel(qualified_name: str) -> Optional[tuple[Any, Callable[..., Any]]]:
    """(parsed schema, function) of a quantized out operator ``quantized_decomposed::name.overload``, if ours."""
    namespace, _, short = qualified_name.partition("::")
    entry = _OUT_SCHEMAS.get(short) if namespace == NAMESPACE else None
    if entry is None:
        return None
    schema, function = entry
    return torch._C.parse_schema(f"{qualified_name.split('.')[0]}{schema}"), function


# The functional overloads (torch.ao.quantization.fx._decomposed's), as a delegate's graph names them.
FUNCTIONAL: dict[str, Callable[..., Any]] = {
    f"{NAMESPACE}::{name}": function for name, function in dict[str, Callable[..., Any]]({
        "quantize_per_tensor.default": quantize_per_tensor, "quantize_per_tensor.tensor": quantize_per_tensor,
        "quantize_per_tensor.tensor2": quantize_per_tensor,
        "dequantize_per_tensor.default": dequantize_per_tensor, "dequantize_per_tensor.tensor": dequantize_per_tensor,
        "dequantize_per_tensor.tensor2": dequantize_per_tensor,
        "quantize_per_channel.default": quantize_per_channel,
        "dequantize_per_channel.default": dequantize_per_channel,
        "quantize_per_token.default": quantize_per_token, "dequantize_per_token.default": dequantize_per_token,
        "embedding_byte.default": embedding_byte, "embedding_byte.dtype": embedding_byte,
        "choose_qparams.tensor": choose_qparams,
        "choose_qparams_per_token_asymmetric.default": choose_qparams_per_token_asymmetric,
        "embedding_2bit.default": embedding_2bit, "embedding_2bit.dtype": embedding_2bit,
        "embedding_4bit.default": embedding_4bit, "embedding_4bit.dtype": embedding_4bit,
        "add.default": add, "mixed_mm.default": mixed_mm, "mixed_linear.default": mixed_linear,
    }).items()
}
