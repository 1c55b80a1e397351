"""``model.Program`` -> flatbuffer bytes (and ``ptd_model.FlatTensor`` for .ptd files).

The per-table encoding is generated from ``fbs/*.fbs`` (``generated/encoders.py``)
and follows the ExecuTorch 1.5.1 writer's conventions (``pte-format.md`` §2): a
scalar equal to its default is left out, a table, vector or string is written
exactly when it is not ``None`` (so "absent" and "empty" survive a round trip),
a ``force_align`` vector is aligned as the schema says, and a ``None`` inside a
vector of tables is written as an empty table (a union wrapper's NONE). Children
are written before their parent in field order, as the flatc-generated builder
path writes them, so the output is byte for byte what that path produces
(``tests/test_encode.py`` checks it against ``tests/flatc_reference.py``).
"""

from __future__ import annotations

from typing import Any, Callable

from . import model as m
from .flatbuf_builder import Builder
from pte_devconst.util.gc_pause import gc_paused
from .generated.encoders import FLAT_TENSOR_IDENTIFIER, PROGRAM_IDENTIFIER, write_flat_tensor, write_program
from .ptd_model import FlatTensor

__all__ = ["encode_program", "encode_flat_tensor", "encode_root"]


def encode_root(root: Any, identifier: bytes, write: Callable[[Builder, Any], int], size_hint: int = 1024) -> bytes:
    """``root`` written by ``write`` as a finished flatbuffer with ``identifier`` (``size_hint``: initial buffer)."""
    builder = Builder(size_hint)
    return builder.finish(write(builder, root), identifier)


@gc_paused
def encode_program(program: m.Program, size_hint: int = 1024) -> bytes:
    """The Program as a plain flatbuffer with identifier ``ET12`` (no extended header)."""
    return encode_root(program, PROGRAM_IDENTIFIER, write_program, size_hint)


@gc_paused
def encode_flat_tensor(flat_tensor: FlatTensor) -> bytes:
    """A .ptd FlatTensor as a plain flatbuffer with identifier ``FT01``."""
    return encode_root(flat_tensor, FLAT_TENSOR_IDENTIFIER, write_flat_tensor)
