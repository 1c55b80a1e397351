"""ExecuTorch ScalarType <-> torch dtype, and tensor geometry from ``dim_order``."""

from __future__ import annotations

import torch

from pte_devconst.schema import model as m
from pte_devconst.util.errors import UnsupportedProgramError
from pte_devconst.schema.scalar_types import SCALAR_TYPES, scalar_type_name
from pte_devconst.schema.model import dim_order_strides as dim_order_strides  # noqa: F401 - re-exported: the runner's geometry

# Quantized and bit types have torch dtypes but no arithmetic the runner could run; they are refused by name.
_NOT_COMPUTED = frozenset({m.ScalarType.QINT8, m.ScalarType.QUINT8, m.ScalarType.QINT32, m.ScalarType.QUINT4X2,
                           m.ScalarType.QUINT2X4, m.ScalarType.BITS16})
# torch names its dtypes as ExecuTorch's table does (``float32`` -> ``torch.float32``).
_TORCH_DTYPES: dict[int, torch.dtype] = {scalar: getattr(torch, info.name) for scalar, info in SCALAR_TYPES.items()
                                         if scalar not in _NOT_COMPUTED}
_SCALAR_TYPES = {dtype: scalar for scalar, dtype in _TORCH_DTYPES.items()}


def torch_dtype(scalar_type: int, where: str = "") -> torch.dtype:
    """The torch dtype of an ExecuTorch scalar type; quantized/bit types are refused by name."""
    try:
        return _TORCH_DTYPES[scalar_type]
    except KeyError:
        raise UnsupportedProgramError("the runner cannot execute tensors of scalar type "
                                      f"{scalar_type_name(scalar_type)}", where=where or None) from None


def scalar_type(dtype: torch.dtype) -> int:
    return _SCALAR_TYPES[dtype]


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


