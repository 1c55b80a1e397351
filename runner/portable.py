"""ExecuTorch's portable kernels where their arithmetic differs from ATen's: sums in the kernel's order.

ExecuTorch's Python runtime (1.5.1) runs ``convolution``, ``addmm`` and batch norm with the portable kernels
(``kernels/portable/cpu/op_convolution.cpp``, ``op_addmm.cpp`` with ``vec_ops.h``,
``op_native_batch_norm.cpp``).  They compute in the tensor's own C++ type ``CTYPE`` and sum each dot
product one term at a time, in their loop order.  For ``bfloat16`` and ``float16`` every product and every
partial sum is rounded to that type (``c10::BFloat16``'s operators compute in float and round the result),
where ATen accumulates a whole dot product in float and rounds once: on a one-op program the two differ by
up to 0.25 in bfloat16.  For ``float32`` and ``float64`` ATen's blocked sums differ in the last bits.  The
functions here reproduce the portable loops with torch ops in the same dtype and order, so each step rounds
exactly as the C++ does (no fused multiply-add: the runtime's x86 build has none):

* ``sum += a * b`` over the reduction index in the kernel's order (one vectorized step per index, over all
  outputs at once, in cache-sized blocks of outputs: the order of a reduction matters, the order of
  independent outputs does not);
* scalars (``alpha``, ``beta``, ``invstd``) are ``CTYPE`` values made from a double as C++ makes them
  (double -> float -> ``CTYPE``).

Every floating dtype takes these paths (integer convolutions and addmm keep ATen's kernels).  The cost, with
one thread: a real-size float32 convolution takes 0.1-0.5 s (ATen's: 2-30 ms; the runtime's own portable
kernel: about 2.5 s on the same layers), a 8x4096 by 4096x4096 addmm 0.3 s (ATen's: 0.05 s).
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

import torch
import torch.nn.functional as F

HALF_TYPES = (torch.bfloat16, torch.float16)
_BLOCK_ELEMENTS = 1 << 16  # partial sums per block of a convolution: 256 KiB of float32
_FLOAT_TYPES = (torch.float32, torch.float64) + HALF_TYPES


def _ctype_scalar(value: float, dtype: torch.dtype) -> torch.Tensor:
    """A C++ ``CTYPE x = double_value``: the double rounds to float first for the half types."""
    scalar = torch.tensor(float(value), dtype=torch.float64)
    if dtype in HALF_TYPES:
        scalar = scalar.to(torch.float32)
    return scalar.to(dtype)


def _write(out: torch.Tensor, result: torch.Tensor) -> torch.Tensor:
    """Store a result into an out tensor, resizing it as torch's out= kernels do (the runner checks the size)."""
    if out.shape != result.shape:
        out.resize_(result.shape)
    out.copy_(result)
    return out


# --- convolution (op_convolution.cpp) ------------------------------------------------------------------


def _conv_direct(x: torch.Tensor, w: torch.Tensor, bias: Optional[torch.Tensor], stride: Sequence[int],
                 padding: Sequence[int], dilation: Sequence[int], groups: int, out_hw: tuple[int, int]
                 ) -> torch.Tensor:
    """conv2d_impl, not transposed: per output, ``accum += in * w`` over (in_c, w_y, w_x), then the bias."""
    n, c, _, _ = x.shape
    oc, cg, kh, kw = w.shape
    k = cg * kh * kw
    # im2col orders a column's rows as (channel, kernel y, kernel x): the kernel's loop order.  The copy is
    # exact (float32 holds every bfloat16/float16 value); padded positions hold 0.
    cols = F.unfold(x.float() if x.dtype in HALF_TYPES else x, (kh, kw), dilation=tuple(dilation),
                    padding=tuple(padding), stride=tuple(stride))
    cols = cols.to(x.dtype).reshape(n, groups, 1, k, -1)
    weights = w.reshape(groups, oc // groups, k, 1)
    valid = None
    if not bool(torch.isfinite(w).all()):
        # The kernel skips padded positions; 0 * inf would be NaN where it adds nothing.
        ones = torch.ones((1, c, x.shape[2], x.shape[3]))
        valid = F.unfold(ones, (kh, kw), dilation=tuple(dilation), padding=tuple(padding),
                         stride=tuple(stride)).reshape(1, groups, 1, k, -1) != 0
    positions = cols.shape[-1]
    accum = torch.zeros((n, groups, oc // groups, positions), dtype=x.dtype)
    # Blocks of output positions small enough that their sums stay in cache for all k steps (each output's
    # order is unchanged: blocks are independent outputs).
    block = max(16, _BLOCK_ELEMENTS // max(1, n * oc))
    steps = weights.permute(2, 0, 1, 3).contiguous()  # (k, groups, oc per group, 1): step index first
    for start in range(0, positions, block):
        end = min(start + block, positions)
        sums = accum[..., start:end]
        window = cols[..., start:end].permute(3, 0, 1, 2, 4).contiguous()  # (k, n, groups, 1, block)
        product = torch.empty(sums.shape, dtype=x.dtype)
        for index in range(k):
            torch.mul(window[index], steps[index], out=product)
            if valid is None:
                sums.add_(product)
            else:
                sums.copy_(torch.where(valid[:, :, :, index, start:end], sums + product, sums))
    accum = accum.reshape(n, oc, -1)
    if bias is not None:
        accum = accum + bias.to(x.dtype).reshape(1, oc, 1)
    return accum.reshape(n, oc, *out_hw)


def _conv_transposed(x: torch.Tensor, w: torch.Tensor, bias: Optional[torch.Tensor], stride: Sequence[int],
                     padding: Sequence[int], dilation: Sequence[int], groups: int, out_hw: tuple[int, int]
                     ) -> torch.Tensor:
    """conv2d_impl, transposed: ``out += in * w`` over (in_y, in_x, in_c, w_y, w_x), from the bias (or 0).

    For one output element, in_y falls as w_y rises, so its terms arrive in the order w_y descending, w_x
    descending, in_c ascending: the same order for every output, which lets one step cover all of them.
    """
    n, c, in_h, in_w = x.shape
    _, ocg, kh, kw = w.shape  # weight: (in channels, out channels per group, kh, kw)
    oc, cg = ocg * groups, c // groups
    out = torch.zeros((n, oc, *out_hw), dtype=x.dtype)
    if bias is not None:
        out += bias.to(x.dtype).reshape(1, oc, 1, 1)
    (sy, sx), (py, px), (dy, dx) = stride, padding, dilation
    for ky in reversed(range(kh)):
        ys = [(iy, sy * iy + dy * ky - py) for iy in range(in_h)]
        ys = [(iy, oy) for iy, oy in ys if 0 <= oy < out_hw[0]]
        for kx in reversed(range(kw)):
            xs = [(ix, sx * ix + dx * kx - px) for ix in range(in_w)]
            xs = [(ix, ox) for ix, ox in xs if 0 <= ox < out_hw[1]]
            if not ys or not xs:
                continue
            iy0, oy0, ix0, ox0 = ys[0][0], ys[0][1], xs[0][0], xs[0][1]
            iy_slice, ix_slice = slice(iy0, ys[-1][0] + 1), slice(ix0, xs[-1][0] + 1)
            oy_slice, ox_slice = slice(oy0, ys[-1][1] + 1, sy), slice(ox0, xs[-1][1] + 1, sx)
            for group in range(groups):
                target = out[:, group * ocg:(group + 1) * ocg, oy_slice, ox_slice]
                for in_c in range(group * cg, (group + 1) * cg):
                    value = x[:, in_c, iy_slice, ix_slice].unsqueeze(1)
                    target.add_(value * w[in_c, :, ky, kx].reshape(1, ocg, 1, 1))
    return out


def _pair(values: Sequence[int], default: int) -> tuple[int, int]:
    pair = tuple(values)
    return (pair[0], pair[-1] if len(pair) > 1 else pair[0]) if pair else (default, default)


def _output_size(x: Sequence[int], w: Sequence[int], stride: Sequence[int], padding: Sequence[int],
                 dilation: Sequence[int], transposed: bool, output_padding: Sequence[int], groups: int
                 ) -> tuple[int, int]:
    """The output's height and width as get_convolution_out_target_size computes them, after the checks
    that make the loops' shapes consistent (ATen's meta kernel would cost seconds on its first call)."""
    channels = w[0] if transposed else w[1] * groups
    if min(*stride, *dilation) < 1 or min(padding) < 0:
        raise ValueError(f"convolution stride {list(stride)}, padding {list(padding)}, dilation {list(dilation)}")
    if groups < 1 or x[1] != channels or (x[1] if transposed else w[0]) % groups:
        raise ValueError(f"convolution of input {list(x)} with weight {list(w)} in {groups} groups: the "
                         f"channels do not match")
    sizes = []
    for dim in range(2):
        extent = dilation[dim] * (w[2 + dim] - 1)
        if transposed:
            size = (x[2 + dim] - 1) * stride[dim] - 2 * padding[dim] + extent + output_padding[dim] + 1
        else:
            size = (x[2 + dim] + 2 * padding[dim] - extent - 1) // stride[dim] + 1
        if size < 1:
            raise ValueError(f"convolution of input {list(x)} with weight {list(w)}: an empty output")
        sizes.append(size)
    return sizes[0], sizes[1]


def convolution_out(input: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor], stride: Sequence[int],
                    padding: Sequence[int], dilation: Sequence[int], transposed: bool, output_padding: Sequence[int],
                    groups: int, *, out: torch.Tensor) -> torch.Tensor:
    """aten::convolution.out as the portable kernel computes it for floating types (ATen's for the others)."""
    if input.dtype not in _FLOAT_TYPES or input.dim() not in (3, 4):
        aten: torch.Tensor = torch.ops.aten.convolution.out(input, weight, bias, stride, padding, dilation,
                                                            transposed, output_padding, groups, out=out)
        return aten
    one_d = input.dim() == 3
    x, w = (input.unsqueeze(2), weight.unsqueeze(2)) if one_d else (input, weight)
    if one_d:  # a 1-d convolution is a 2-d one of height 1 (convolution_wrapper's unsqueeze)
        stride, padding = (1, _pair(stride, 1)[0]), (0, _pair(padding, 0)[0])
        dilation = (1, _pair(dilation, 1)[0])
    else:  # val_at: one value stands for both dims; no padding is 0
        stride, padding, dilation = _pair(stride, 1), _pair(padding, 0), _pair(dilation, 1)
    output_padding = (0, _pair(output_padding, 0)[0]) if one_d else _pair(output_padding, 0)
    out_hw = _output_size(x.shape, w.shape, stride, padding, dilation, transposed, output_padding, groups)
    compute = _conv_transposed if transposed else _conv_direct
    result = compute(x, w, bias, stride, padding, dilation, groups, out_hw)
    return _write(out, result.squeeze(2) if one_d else result)


# --- addmm (op_addmm.cpp, vec_ops.h) -------------------------------------------------------------------


def _matmul_in_order(mat1: torch.Tensor, mat2: torch.Tensor) -> torch.Tensor:
    """vec_matmul: ``sum += x[i][k] * y[k][j]`` for k in order, in the tensors' dtype."""
    rows, columns = mat1.shape[0], mat2.shape[1]
    accum = torch.zeros((rows, columns), dtype=mat1.dtype)
    block = max(16, _BLOCK_ELEMENTS // max(1, rows))  # columns whose sums stay in cache for all k steps
    for start in range(0, columns, block):
        sums = accum[:, start:start + block]
        right = mat2[:, start:start + block]  # each row's piece is contiguous in a row-major mat2
        product = torch.empty(sums.shape, dtype=mat1.dtype)
        for k in range(mat1.shape[1]):
            torch.mul(mat1[:, k:k + 1], right[k:k + 1, :], out=product)
            sums.add_(product)
    return accum


def addmm_out(self: torch.Tensor, mat1: torch.Tensor, mat2: torch.Tensor, *, beta: Any = 1, alpha: Any = 1,
              out: torch.Tensor) -> torch.Tensor:
    """aten::addmm.out as the portable kernel computes it for floating types (ATen's for the others).

    ``vec_addmm`` (no broadcasting) and ``vec_matmul`` then an elementwise function (``self`` broadcast to the
    output) both store ``sum * alpha + self * beta``, each operation rounded to the dtype.
    """
    if mat1.dtype not in _FLOAT_TYPES:
        aten: torch.Tensor = torch.ops.aten.addmm.out(self, mat1, mat2, beta=beta, alpha=alpha, out=out)
        return aten
    dtype = mat1.dtype
    product = _matmul_in_order(mat1, mat2)
    result = product * _ctype_scalar(alpha, dtype) + self.to(dtype) * _ctype_scalar(beta, dtype)
    return _write(out, result)


# --- batch norm (op_native_batch_norm.cpp) -------------------------------------------------------------


def batch_norm_no_training_out(input: torch.Tensor, weight: Optional[torch.Tensor], bias: Optional[torch.Tensor],
                               running_mean: torch.Tensor, running_var: torch.Tensor, momentum: float, eps: float,
                               *, out0: torch.Tensor, out1: torch.Tensor, out2: torch.Tensor
                               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """_native_batch_norm_legit_no_training.out as the portable kernel computes it, for floating dtypes.

    Per channel ``invstd = 1.0 / std::sqrt(var + eps)`` in double, stored as ``CTYPE``; per element
    ``(in - mean) * invstd * weight + bias``, each operation rounded to ``CTYPE``.  ``mean_out`` and
    ``invstd_out`` are resized to 0 elements, as the kernel does.
    """
    dtype = input.dtype
    if dtype not in _FLOAT_TYPES or input.dim() < 1:
        outs: tuple[torch.Tensor, torch.Tensor, torch.Tensor] = torch.ops.aten._native_batch_norm_legit_no_training.out(
            input, weight, bias, running_mean, running_var, momentum, eps, out0=out0, out1=out1, out2=out2)
        return outs
    channels = input.shape[1] if input.dim() >= 2 else input.shape[0]
    shape = [1] * input.dim()
    shape[1 if input.dim() >= 2 else 0] = channels
    invstd = 1.0 / torch.sqrt(running_var.to(torch.float64) + float(eps))
    if dtype in HALF_TYPES:
        invstd = invstd.to(torch.float32)
    invstd = invstd.to(dtype).reshape(shape)
    result = (input - running_mean.to(dtype).reshape(shape)) * invstd
    if weight is not None:
        result = result * weight.to(dtype).reshape(shape)
    # With no bias the kernel still adds its bias_val = 0 (which turns -0.0 into 0.0).
    result = result + (bias.to(dtype).reshape(shape) if bias is not None else torch.zeros((), dtype=dtype))
    _write(out0, result)
    out1.resize_((0,))
    out2.resize_((0,))
    return out0, out1, out2


# The operators whose portable arithmetic the runner reproduces, by qualified name.
PORTABLE_KERNELS: dict[str, Callable[..., Any]] = {
    "aten::convolution.out": convolution_out,
    "aten::addmm.out": addmm_out,
    "aten::_native_batch_norm_legit_no_training.out": batch_norm_no_training_out,
}
