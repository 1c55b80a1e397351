"""ExecuTorch's scalar types: torch's name for each number of the ``ScalarType`` enum and the bytes of one
element (what a tensor's size in bytes is computed from).  Nothing here imports torch: the runner derives its
torch dtypes from ``SCALAR_TYPES`` (program/dtypes.py).
"""

from __future__ import annotations

from typing import Mapping

from pte_devconst.schema.generated.enums import ScalarType
from pte_devconst.util.record import record

__all__ = ["ScalarTypeInfo", "SCALAR_TYPES", "KNOWN_SCALAR_TYPES", "element_size", "scalar_type_name"]


# --- scalar types -----------------------------------------------------------------------------------------------
@record
class ScalarTypeInfo:
    """What ExecuTorch says of a scalar type: torch's name for it and the bytes of one element."""

    name: str
    element_size: int


SCALAR_TYPES: Mapping[int, ScalarTypeInfo] = {
    ScalarType.BYTE: ScalarTypeInfo("uint8", 1),
    ScalarType.CHAR: ScalarTypeInfo("int8", 1),
    ScalarType.SHORT: ScalarTypeInfo("int16", 2),
    ScalarType.INT: ScalarTypeInfo("int32", 4),
    ScalarType.LONG: ScalarTypeInfo("int64", 8),
    ScalarType.HALF: ScalarTypeInfo("float16", 2),
    ScalarType.FLOAT: ScalarTypeInfo("float32", 4),
    ScalarType.DOUBLE: ScalarTypeInfo("float64", 8),
    ScalarType.BOOL: ScalarTypeInfo("bool", 1),
    ScalarType.QINT8: ScalarTypeInfo("qint8", 1),
    ScalarType.QUINT8: ScalarTypeInfo("quint8", 1),
    ScalarType.QINT32: ScalarTypeInfo("qint32", 4),
    ScalarType.BFLOAT16: ScalarTypeInfo("bfloat16", 2),
    ScalarType.QUINT4X2: ScalarTypeInfo("quint4x2", 1),
    ScalarType.QUINT2X4: ScalarTypeInfo("quint2x4", 1),
    ScalarType.BITS16: ScalarTypeInfo("bits16", 2),
    ScalarType.FLOAT8E5M2: ScalarTypeInfo("float8_e5m2", 1),
    ScalarType.FLOAT8E4M3FN: ScalarTypeInfo("float8_e4m3fn", 1),
    ScalarType.FLOAT8E5M2FNUZ: ScalarTypeInfo("float8_e5m2fnuz", 1),
    ScalarType.FLOAT8E4M3FNUZ: ScalarTypeInfo("float8_e4m3fnuz", 1),
    ScalarType.UINT16: ScalarTypeInfo("uint16", 2),
    ScalarType.UINT32: ScalarTypeInfo("uint32", 4),
    ScalarType.UINT64: ScalarTypeInfo("uint64", 8),
}
KNOWN_SCALAR_TYPES = frozenset(SCALAR_TYPES)
_ELEMENT_SIZE = {int(scalar): info.element_size for scalar, info in SCALAR_TYPES.items()}  # the hot lookup


def element_size(scalar_type: int) -> int:
    """Bytes per element; raises KeyError for a type the format does not define."""
    return _ELEMENT_SIZE[scalar_type]


def scalar_type_name(scalar_type: int) -> str:
    """torch's name for a scalar type (``float32``); ``scalar_type_N`` for a number the format does not define."""
    info = SCALAR_TYPES.get(scalar_type)
    return info.name if info is not None else f"scalar_type_{scalar_type}"
