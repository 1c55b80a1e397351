"""runner/portable.py's convolution sizes its output itself (ATen's meta kernel costs seconds on its first
call): the sizes equal ATen's for every layout, and shapes ATen refuses are refused with one error."""

from __future__ import annotations

import itertools

import pytest
import torch

from pte_devconst.runner.portable import convolution_out


def _aten_shape(x: torch.Tensor, w: torch.Tensor, stride: list[int], padding: list[int], dilation: list[int],
                transposed: bool, output_padding: list[int], groups: int) -> torch.Size:
    return torch.ops.aten.convolution.default(x, w, None, stride, padding, dilation, transposed, output_padding,
                                              groups).shape


@pytest.mark.parametrize("transposed", [False, True])
def test_convolution_output_sizes_equal_atens(transposed: bool) -> None:
    g = torch.Generator().manual_seed(3)
    for stride, padding, dilation, groups in itertools.product((1, 2, 3), (0, 1, 2), (1, 2), (1, 2)):
        x = torch.randn(1, 4, 9, 7, generator=g)
        w = torch.randn((4, 3, 3, 2) if transposed else (6, 4 // groups, 3, 2), generator=g)
        output_padding = [stride - 1, 0] if transposed else [0, 0]
        args = ([stride, stride], [padding, padding], [dilation, dilation], transposed, output_padding, groups)
        try:
            want = _aten_shape(x, w, *args)
        except RuntimeError:
            with pytest.raises(ValueError):
                convolution_out(x, w, None, *args, out=torch.empty(0))
            continue
        assert convolution_out(x, w, None, *args, out=torch.empty(0)).shape == want, args


def test_convolution_refuses_channels_that_do_not_match() -> None:
    with pytest.raises(ValueError, match="channels"):
        convolution_out(torch.randn(1, 4, 5, 5), torch.randn(2, 3, 3, 3), None, [1], [0], [1], False, [0], 1,
                        out=torch.empty(0))
    with pytest.raises(ValueError, match="empty output"):
        convolution_out(torch.randn(1, 3, 2, 2), torch.randn(2, 3, 3, 3), None, [1], [0], [1], False, [0], 1,
                        out=torch.empty(0))
