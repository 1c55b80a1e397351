"""Writing a .ptd (flat_tensor) data file, laid out as ExecuTorch lays it out (``ptd_file.py`` reads one).

The flatbuffer, then the 40-byte ``FH01`` header inserted after its first 8
bytes, then one segment per entry at a multiple of 128 (and of the entry
alignment), streamed with ``pte_writer.write_segments`` so that a ``FileRange``
is copied by the kernel.
"""

from __future__ import annotations

import math
import os
from typing import Optional, Sequence

from . import model as m
from pte_devconst.util.atomic import atomic_output, write_all
from .encode import encode_flat_tensor
from .header import PTD_HEADER_PADDED, SEGMENT_ALIGNMENT, PtdHeader, align_up
from .ptd_model import FlatTensor, PtdNamedData, TensorLayout
from .pte_writer import SegmentContent, background_writeback, insert_header, write_segments
from .span import Piece, piece_size

__all__ = ["write_ptd"]


def write_ptd(destination: str | os.PathLike[str], entries: Sequence[tuple[str, Optional[TensorLayout], Piece]],
              alignment: int = 16) -> None:
    """Atomically write a .ptd holding one segment per entry (key, layout, data), as ExecuTorch lays it out."""
    cursor = 0
    segments, named = [], []
    seg_align = math.lcm(SEGMENT_ALIGNMENT, alignment)
    for index, (key, layout, piece) in enumerate(entries):
        start = align_up(cursor, seg_align)
        segments.append(m.DataSegment(start, piece_size(piece)))
        named.append(PtdNamedData(key, index, layout))
        cursor = start + piece_size(piece)
    plain = encode_flat_tensor(FlatTensor(0, tuple(segments), tuple(named)))
    base = align_up(PTD_HEADER_PADDED + len(plain), SEGMENT_ALIGNMENT)
    header = PtdHeader(PTD_HEADER_PADDED, len(plain), base, cursor)
    flatbuffer = insert_header(plain, header.pack(), PTD_HEADER_PADDED)
    with atomic_output(destination) as fd:
        write_all(fd, flatbuffer)
        with background_writeback(fd, True) as flush:  # atomic_output fsyncs: start writeback as the data goes
            write_segments(fd, len(flatbuffer), base, segments, [SegmentContent.of(piece) for _, _, piece in entries],
                           flush=flush)
