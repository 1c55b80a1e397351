"""ExecuTorch ScalarType <-> torch dtype, and tensor geometry from ``dim_order``."""

from __future__ import annotations

import torch

from pte_devconst.schema import model as m
from pte_devconst.schema.errors import UnsupportedProgramError
from pte_devconst.schema.model import dim_order_strides  # noqa: F401 - re-exported: the runner's geometry

_TORCH_DTYPES: dict[int, torch.dtype] = {
    m.ScalarType.BYTE: torch.uint8,
    m.ScalarType.CHAR: torch.int8,
    m.ScalarType.SHORT: torch.int16,
    m.ScalarType.INT: torch.int32,
    m.ScalarType.LONG: torch.int64,
    m.ScalarType.HALF: torch.float16,
    m.ScalarType.FLOAT: torch.float32,
    m.ScalarType.DOUBLE: torch.float64,
    m.ScalarType.BOOL: torch.bool,
    m.ScalarType.BFLOAT16: torch.bfloat16,
    m.ScalarType.FLOAT8E5M2: torch.float8_e5m2,
    m.ScalarType.FLOAT8E4M3FN: torch.float8_e4m3fn,
    m.ScalarType.FLOAT8E5M2FNUZ: torch.float8_e5m2fnuz,
    m.ScalarType.FLOAT8E4M3FNUZ: torch.float8_e4m3fnuz,
    m.ScalarType.UINT16: torch.uint16,
    m.ScalarType.UINT32: torch.uint32,
    m.ScalarType.UINT64: torch.uint64,
}
_SCALAR_TYPES = {dtype: scalar for scalar, dtype in _TORCH_DTYPES.items()}


def torch_dtype(scalar_type: int, where: str = "") -> torch.dtype:
    """The torch dtype of an ExecuTorch scalar type; quantized/bit types are refused by name."""
    try:
        return _TORCH_DTYPES[scalar_type]
    except KeyError:
        try:
            name = m.ScalarType(scalar_type).name
        except ValueError:
            name = str(scalar_type)
        raise UnsupportedProgramError(f"the runner cannot execute tensors of scalar type {name}",
                                      where=where or None) from None


def scalar_type(dtype: torch.dtype) -> int:
    return _SCALAR_TYPES[dtype]


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


