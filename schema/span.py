"""Byte ranges, the vocabulary reading and writing share: where bytes are, and where they come from.

``Span`` is a range of one file (what a reader hands out); ``FileRange`` is a
range of an open file by descriptor, and a ``Piece`` (small ``bytes`` or a
``FileRange``) is what a writer streams into its output, the kernel copying a
``FileRange`` without it passing through Python. Kept apart from both so that
reading a file never loads the writer.
"""

from __future__ import annotations

from typing import Union

from .record import record

__all__ = ["Span", "FileRange", "Piece", "piece_size"]


@record
class Span:
    """An absolute byte range of the file."""

    offset: int
    size: int

    @property
    def end(self) -> int:
        return self.offset + self.size


@record
class FileRange:
    """``size`` bytes of an open file (by descriptor) starting at absolute ``offset``."""

    fd: int
    offset: int
    size: int


Piece = Union[bytes, FileRange]


def piece_size(piece: Piece) -> int:
    return len(piece) if isinstance(piece, bytes) else piece.size
