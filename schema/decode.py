"""Flatbuffer bytes -> ``model.Program`` (a .pte) or ``ptd_model.FlatTensor`` (a .ptd), every offset checked.

The per-table decoding is generated from ``fbs/*.fbs`` (``generated/decoders.py``);
this module opens the buffer, checks its file identifier, and pauses the
cyclic garbage collector while hundreds of thousands of records are made.
Structural problems raise ``FlatbufferError`` with a path (see ``flatbuf.py``).
``tests/test_schema.py`` holds the result equal to what flatc's generated
accessors read, field for field, on every corpus file.
"""

from __future__ import annotations

from typing import Callable, TypeVar

from . import model as m
from .flatbuf import FlatbufferError, FlatReader, Table, TableLimitError
from pte_devconst.util.gc_pause import gc_paused
from .limits import MAX_TABLES, READ_MAX_TABLES
from .generated.decoders import FLAT_TENSOR_IDENTIFIER, PROGRAM_IDENTIFIER, read_flat_tensor, read_program
from .ptd_model import FlatTensor

__all__ = ["decode_program", "decode_program_counted", "decode_flat_tensor", "decode_root", "FlatbufferError",
           "PROGRAM_IDENTIFIER", "PTD_IDENTIFIER"]

PTD_IDENTIFIER = FLAT_TENSOR_IDENTIFIER
R = TypeVar("R")


def decode_root(flatbuffer: bytes | memoryview, identifier: bytes, read: Callable[[Table], R]) -> tuple[R, int]:
    """(the root table as ``read`` decodes it, the number of tables visited), after checking the identifier.

    The count is the flatbuffers verifier's: the decoder visits every table of the schema, as the verifier
    does, a shared table each time it is reached (``tests/test_verifier_limits.py`` holds it to
    ``schema.limits.count_tables`` and to the runtime's own verifier).
    """
    reader = FlatReader(flatbuffer, max_tables=READ_MAX_TABLES)
    root = reader.root()
    if reader.identifier() != identifier:
        raise FlatbufferError(f"file identifier is {reader.identifier()!r}, not {identifier!r}")
    try:
        return read(root), reader.tables
    except TableLimitError as error:
        error.what = (f"the file refers to more than {error.limit:,} flatbuffer tables (a shared table counting each "
                      f"time it is reached, as ExecuTorch's verifier counts them; it accepts {MAX_TABLES:,}); "
                      "refused before reading further")
        raise


def decode_program(flatbuffer: bytes | memoryview) -> m.Program:
    """Decode a Program flatbuffer (the extended header, if inserted, is skipped by offsets)."""
    return decode_program_counted(flatbuffer)[0]


@gc_paused
def decode_program_counted(flatbuffer: bytes | memoryview) -> tuple[m.Program, int]:
    """``decode_program``, plus the number of tables the flatbuffers verifier would count in it."""
    return decode_root(flatbuffer, PROGRAM_IDENTIFIER, read_program)


@gc_paused
def decode_flat_tensor(flatbuffer: bytes | memoryview) -> FlatTensor:
    """Decode a .ptd's FlatTensor flatbuffer (its header, if inserted, is skipped by offsets)."""
    return decode_root(flatbuffer, FLAT_TENSOR_IDENTIFIER, read_flat_tensor)[0]
