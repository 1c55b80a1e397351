"""Byte ranges, the vocabulary reading and writing share: where bytes are, and where they come from.

``Span`` is a range of one file (what a reader hands out); ``FileRange`` is a
range of an open file by descriptor, and a ``Piece`` (small ``bytes`` or a
``FileRange``, or a ``ComputedPiece`` made only when the writer reaches it) is what
a writer streams into its output, the kernel copying a ``FileRange`` without it
passing through Python. Kept apart from both so that
reading a file never loads the writer.
"""

from __future__ import annotations

from typing import Callable, Union

from pte_devconst.util.record import record


__all__ = ["Span", "FileRange", "ComputedPiece", "Piece", "piece_size"]


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


@record
class ComputedPiece:
    """``size`` bytes the tool computes while it writes (a folded tensor): ``produce()`` makes them when the
    writer reaches them, so only one such piece is in memory at a time."""

    size: int
    produce: Callable[[], Union[bytes, bytearray, memoryview]]
    what: str = "computed bytes"


Piece = Union[bytes, FileRange, ComputedPiece]


def piece_size(piece: Piece) -> int:
    return len(piece) if isinstance(piece, bytes) else piece.size
