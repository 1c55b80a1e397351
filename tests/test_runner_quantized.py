"""Calls of ExecuTorch's quantized kernels that its runtime refuses (or would answer with bytes read as
another type) are refused by the runner with one line naming the operator, never computed some other way.
The arithmetic itself is compared with the real runtime in ``test_runner_runtime_ops.py``."""

from __future__ import annotations

import pytest
import torch

from pte_devconst.runner.quantized import out_kernel


def _call(name: str, *args: object, **kwargs: object) -> torch.Tensor:
    found = out_kernel(f"quantized_decomposed::{name}")
    assert found is not None, name
    return found[1](*args, **kwargs)


def test_mixed_matmuls_refuse_zero_points_as_the_kernel_does() -> None:
    x, scales = torch.randn(2, 4), torch.rand(4)
    with pytest.raises(ValueError, match="zero points"):
        _call("mixed_mm.out", x, torch.ones(4, 3, dtype=torch.int8), scales, torch.zeros(4), out=torch.empty(2, 3))
    with pytest.raises(ValueError, match="zero points"):
        _call("mixed_linear.out", x, torch.ones(3, 4, dtype=torch.int8), torch.rand(3), torch.zeros(3),
              out=torch.empty(2, 3))


def test_mixed_linear_refuses_a_dtype_other_than_the_outputs() -> None:
    with pytest.raises(ValueError, match="dtype"):
        _call("mixed_linear.out", torch.randn(2, 4), torch.ones(3, 4, dtype=torch.int8), torch.rand(3), None,
              torch.float16, out=torch.empty(2, 3))


@pytest.mark.parametrize("bits", [2, 4])
def test_sub_byte_embedding_out_refuses_scales_of_another_dtype_than_its_output(bits: int) -> None:
    """The .out kernel reads the scales as the output's C type: float16 scales into a float32 output (what
    the exporter emits for embedding_{2,4}bit without dtype on float16 scales) would be reinterpreted bytes."""
    weight = torch.zeros(4, 2, dtype=torch.uint8)
    out = torch.empty(3, 8 // bits * 2)
    with pytest.raises(ValueError, match="reinterpreted"):
        _call(f"embedding_{bits}bit.out", weight, torch.rand(4).half(), None, 0, 0, torch.tensor([0, 1, 2]), out=out)
    # the same call with float32 scales computes (2-bit and 4-bit values of a zero byte: -2 and -8)
    result = _call(f"embedding_{bits}bit.out", weight, torch.ones(4), None, 0, 0, torch.tensor([0, 1, 2]), out=out)
    assert torch.equal(result, torch.full((3, 8 // bits * 2), -float(1 << (bits - 1))))


def test_quantized_add_refuses_quant_ranges_outside_uint8() -> None:
    a = torch.zeros(3, dtype=torch.int8)
    with pytest.raises(ValueError, match=r"\[-128, 127\]"):
        _call("add.out", a, 0.1, 0, -128, 127, a, 0.1, 0, 0, 255, 0.1, 0, 0, 255, out=torch.empty_like(a))


def test_sub_byte_embedding_refuses_zero_points_the_kernel_would_misread() -> None:
    """dtype_out reads zero points as the scales' type and requires them in the output's: float32 zero
    points with float16 scales would be reinterpreted."""
    weight, indices = torch.zeros(4, 2, dtype=torch.uint8), torch.tensor([0, 3])
    with pytest.raises(ValueError, match="zero points"):
        _call("embedding_4bit.dtype_out", weight, torch.ones(4).half(), torch.zeros(4), 0, 0, indices,
              torch.float32, out=torch.empty(2, 4))
    result = _call("embedding_4bit.dtype_out", weight, torch.ones(4), torch.ones(4), 0, 0, indices,
                   torch.float32, out=torch.empty(2, 4))
    assert torch.equal(result, torch.full((2, 4), -9.0))  # (0 - 8 - 1) * 1
