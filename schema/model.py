"""Immutable Python mirror of the ExecuTorch program schema (schema/fbs/program.fbs).

One frozen record per flatbuffer table, with the same field names, order and
defaults, generated from the ``.fbs`` (``generated/program_model.py``, see
``regenerate.py``). A field is ``None`` exactly when the table, vector or string
is absent from the file; that distinction survives a round trip because the
ExecuTorch writer emits "absent" and "empty" differently.

Two conveniences depart from the wire format (``codegen.RULES``): ``EValue``
and ``Instruction`` (tables that only wrap a union) are flattened to the union
member itself, and ``AllocationDetails`` holds one 64-bit ``memory_offset``
instead of the low/high halves. Helpers beyond the fields (``Tensor.nbytes``,
``Device``, ``element_size``) are hand-written in ``model_methods.py``.

Nothing here reads or writes bytes: see ``decode.py`` and ``encode.py``.
"""

from __future__ import annotations

from dataclasses import replace

from .generated.enums import *  # noqa: F403
from .generated.enums import __all__ as _enums
from .generated.program_model import *  # noqa: F403
from .generated.program_model import __all__ as _records
from .model_methods import CPU, KNOWN_SCALAR_TYPES, Device, LayoutKey, dim_order_strides, element_size

__all__ = [*_enums, *_records, "Device", "CPU", "element_size", "dim_order_strides", "KNOWN_SCALAR_TYPES",
           "LayoutKey", "replace"]
