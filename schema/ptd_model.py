"""Immutable mirror of the .ptd schema (schema/fbs/flat_tensor.fbs)."""

from __future__ import annotations

import math
from typing import Optional

from .model import DataSegment, element_size
from .record import record


@record
class TensorLayout:
    scalar_type: int = 0
    sizes: Optional[tuple[int, ...]] = ()
    dim_order: Optional[tuple[int, ...]] = ()

    @property
    def nbytes(self) -> int:
        return math.prod(self.sizes or ()) * element_size(self.scalar_type)


@record
class PtdNamedData:
    key: Optional[str] = None
    segment_index: int = 0
    tensor_layout: Optional[TensorLayout] = None


@record
class FlatTensor:
    version: int = 0
    segments: Optional[tuple[DataSegment, ...]] = ()
    named_data: Optional[tuple[PtdNamedData, ...]] = ()
