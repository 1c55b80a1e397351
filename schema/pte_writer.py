"""Laying out and writing a .pte: flatbuffer, extended header, aligned segments.

A caller describes each segment as a list of pieces (small ``bytes`` or a
``FileRange`` of an input file, see ``span.py``) at offsets inside the segment; this module
assigns segment offsets (each at a multiple of lcm(128, its alignment)),
encodes the program with those offsets, inserts the extended header, and
streams the pieces into place with ``copy_range`` so that tensor data never
passes through Python objects.
"""

from __future__ import annotations

import contextlib
import math
import os
from dataclasses import replace
from typing import TYPE_CHECKING, Callable, Iterator, Optional, Sequence

from . import model as m
from pte_devconst.util.atomic import atomic_output, copy_range, write_all, write_zeros
from .encode import encode_program
from pte_devconst.util.errors import PteDevconstError
from .header import (EXTENDED_HEADER_PADDED, MIN_PTE_SIZE, SEGMENT_ALIGNMENT, ExtendedHeader, align_up)
from pte_devconst.util.record import record
from .span import ComputedPiece, FileRange, Piece, piece_size

if TYPE_CHECKING:
    from .pte_file import PteFile

__all__ = ["FileRange", "ComputedPiece", "ComputedSizeError", "Piece", "SegmentContent", "Layout", "layout_pte",
           "write_pte", "write_pte_to_fd", "write_segments", "write_piece", "insert_header", "insert_extended_header",
           "plan_segments", "SegmentPlan", "copy_phase", "COPY_ALIGNMENT", "BULK_SEGMENT",
           "unchanged_segments"]

Progress = Callable[[int, int], None]


class SegmentContent:
    """What goes into one segment: pieces at offsets (ascending, non-overlapping), zero-filled between.

    Working state (util/record.py): a caller appends pieces and sets the size as it lays the segment out."""

    __slots__ = ("size", "pieces", "alignment")

    def __init__(self, size: int, pieces: Optional[list[tuple[int, Piece]]] = None, alignment: int = 1) -> None:
        self.size = size
        self.pieces: list[tuple[int, Piece]] = [] if pieces is None else pieces
        self.alignment = alignment

    @classmethod
    def of(cls, piece: Piece, alignment: int = 1) -> "SegmentContent":
        return cls(piece_size(piece), [(0, piece)], alignment)


class ComputedSizeError(PteDevconstError):
    """A computed piece produced another number of bytes than it promised (a bug in the tool)."""


@record
class Layout:
    """Where everything lands in the output file."""

    flatbuffer: bytes  # header already inserted
    header: Optional[ExtendedHeader]
    segment_base: int
    segments: tuple[m.DataSegment, ...]

    @property
    def file_size(self) -> int:
        if not self.segments or self.header is None:
            return max(len(self.flatbuffer), MIN_PTE_SIZE)
        return self.segment_base + self.header.segment_data_size


def insert_header(flatbuffer: bytes, packed: bytes, padded: int) -> bytes:
    """Insert a packed header, zero-padded to ``padded`` bytes, after byte 8, and shift the root offset past it.

    Both formats do this: a .pte's extended header (``eh00``) and a .ptd's (``FH01``).
    """
    root = int.from_bytes(flatbuffer[0:4], "little") + padded
    return root.to_bytes(4, "little") + flatbuffer[4:8] + packed + bytes(padded - len(packed)) + flatbuffer[8:]


def insert_extended_header(flatbuffer: bytes, header: ExtendedHeader) -> bytes:
    """Insert the padded extended header after byte 8 and shift the root offset past it."""
    return insert_header(flatbuffer, header.pack(), EXTENDED_HEADER_PADDED)


# The kernel copies a file range about a fifth faster when its source and destination lie at the same offset
# modulo 64 KiB (the page cache's large folios then line up) and each call starts on a page boundary
# (docs/performance.md, "Copying at the page cache's alignment"). A segment holding at least ``BULK_SEGMENT`` bytes
# of such ranges is placed so that most of them keep their input's alignment; smaller ones are packed as the
# exporter packs them, so a small program's layout never changes for it.
COPY_ALIGNMENT = 64 << 10
BULK_SEGMENT = 16 << 20


def copy_phase(content: SegmentContent) -> Optional[int]:
    """Where the segment should start, modulo ``COPY_ALIGNMENT``, for most of its kernel-copied bytes to land at
    their source's alignment (None: under ``BULK_SEGMENT`` such bytes, nothing worth padding for).

    A piece at ``offset`` in the segment copied from ``source`` lines up when the segment starts at
    ``source - offset`` (modulo the alignment); only phases a ``SEGMENT_ALIGNMENT``-aligned start can take count.
    """
    bytes_at: dict[int, int] = {}
    for offset, piece in content.pieces:
        if isinstance(piece, FileRange):
            phase = (piece.offset - offset) % COPY_ALIGNMENT
            if phase % SEGMENT_ALIGNMENT == 0:
                bytes_at[phase] = bytes_at.get(phase, 0) + piece.size
    if not bytes_at:
        return None
    phase, most = max(bytes_at.items(), key=lambda item: (item[1], -item[0]))
    return phase if most >= BULK_SEGMENT else None


@record
class SegmentPlan:
    """Segment offsets relative to the segment base, and the base's phase that makes them line up (None: any)."""

    segments: tuple[m.DataSegment, ...]
    base_phase: Optional[int]

    def base(self, program_size: int) -> int:
        """The segment base: the first ``SEGMENT_ALIGNMENT`` boundary after the program, moved on to
        ``base_phase`` (modulo ``COPY_ALIGNMENT``) when the bulk asks for it."""
        base = align_up(program_size, SEGMENT_ALIGNMENT)
        if self.base_phase is None:
            return base
        return base + (self.base_phase - base) % COPY_ALIGNMENT


def plan_segments(contents: Sequence[SegmentContent]) -> SegmentPlan:
    """Offsets relative to the segment base; an empty segment does not advance the cursor.

    The first segment with bulk (``copy_phase``) sets the base's phase; every later one is moved on (by less than
    ``COPY_ALIGNMENT``) to its own phase relative to the first, where its alignment allows.
    """
    cursor = 0
    segments = []
    anchor: Optional[tuple[int, int]] = None  # the first bulk segment: (its phase, its offset)
    for content in contents:
        alignment = math.lcm(SEGMENT_ALIGNMENT, max(content.alignment, 1))
        start = align_up(cursor, alignment)
        phase = copy_phase(content)
        if phase is not None and anchor is None:
            anchor = (phase, start)
        elif phase is not None and anchor is not None and COPY_ALIGNMENT % alignment == 0:
            # the base puts the anchor's start at the anchor's phase: this one's at its own, relative to it
            wanted = (anchor[1] + phase - anchor[0]) % COPY_ALIGNMENT
            if wanted % alignment == 0:
                start += (wanted - start) % COPY_ALIGNMENT
        segments.append(m.DataSegment(start, content.size))
        cursor = start + content.size
    return SegmentPlan(tuple(segments), None if anchor is None else (anchor[0] - anchor[1]) % COPY_ALIGNMENT)


def layout_pte(program: m.Program, contents: Sequence[SegmentContent]) -> Layout:
    """Encode ``program`` with ``segments`` replaced by the layout of ``contents``."""
    plan = plan_segments(contents)
    segments = plan.segments
    data_size = max((s.offset + s.size for s in segments), default=0)
    program = replace(program, segments=segments if program.segments is not None or segments else program.segments)
    plain = encode_program(program)
    if data_size == 0:
        return Layout(plain, None, 0, segments)
    program_size = len(plain) + EXTENDED_HEADER_PADDED
    header = ExtendedHeader(program_size, plan.base(program_size), data_size)
    return Layout(insert_extended_header(plain, header), header, header.segment_base_offset, segments)


def write_pte_to_fd(fd: int, layout: Layout, contents: Sequence[SegmentContent],
                    progress: Optional[Progress] = None, *, writeback: bool = True) -> None:
    """Write a laid-out program and its segments sequentially to ``fd``.

    ``writeback`` starts writing to disk as the copy goes, for a caller that will fsync (see below), from a
    second thread (``Writeback``) so that the copy never waits for it.
    """
    total = layout.file_size
    write_all(fd, layout.flatbuffer)
    position = len(layout.flatbuffer)
    if layout.header is None:
        write_zeros(fd, total - position)  # the runtime reads 64 head bytes even from tiny files
        if progress:
            progress(total, total)
        return
    with background_writeback(fd, writeback) as flush:
        write_segments(fd, position, layout.segment_base, layout.segments, contents, progress, total, flush=flush)


def pte_bytes(layout: Layout, contents: Sequence[SegmentContent], progress: Optional[Progress] = None) -> bytes:
    """The laid-out program's bytes, written by ``write_pte_to_fd`` into an anonymous memory file (no disk) and
    read back: a program held in memory is written exactly as a file is."""
    fd = os.memfd_create("pte-devconst") if hasattr(os, "memfd_create") else None
    if fd is None:  # no memfd (not Linux): an unnamed temporary file, removed as it is closed
        import tempfile

        handle = tempfile.TemporaryFile()
        fd = os.dup(handle.fileno())
        handle.close()
    try:
        write_pte_to_fd(fd, layout, contents, progress, writeback=False)
        size = os.lseek(fd, 0, os.SEEK_END)
        output = bytearray(size)
        view, done = memoryview(output), 0
        while done < size:
            got = os.preadv(fd, [view[done:]], done)
            if got <= 0:
                raise PteDevconstError("internal error: a written program could not be read back from memory")
            done += got
        return bytes(output)
    finally:
        os.close(fd)


# Every this many bytes the writer asks the kernel to start writing the output to disk, so that the
# final fsync (atomic_output) overlaps the copy instead of following it: measured on a 1 GiB rewrite
# (bench/RESULTS.md), this removes most of the ~0.5 s fsync wait.
WRITEBACK_CHUNK = 32 << 20


def start_writeback(fd: int, offset: int, size: int) -> None:
    """Start (not wait for) writing ``fd``'s dirty pages in [offset, offset + size) to disk; best effort.

    Linux's ``POSIX_FADV_DONTNEED`` queues asynchronous writeback of dirty pages and drops only pages
    that are already clean, so the data just written stays cached for the re-read check.
    """
    if size > 0 and hasattr(os, "posix_fadvise"):
        with contextlib.suppress(OSError):
            os.posix_fadvise(fd, offset, size, os.POSIX_FADV_DONTNEED)


Flush = Callable[[int, int], None]  # start writing back (offset, size) of the output


class Writeback:
    """Starts the kernel's writeback of written ranges from a second thread, in the order they are given.

    Starting writeback submits the range's dirty pages to the disk, which takes the caller as long as the disk's
    queue makes it (about a third of a 1 GiB rewrite's copy, bench/RESULTS.md); from this thread it overlaps the
    copy of the next range instead (``os.posix_fadvise`` and ``os.copy_file_range`` release the GIL).
    """

    def __init__(self, fd: int) -> None:
        import queue
        import threading

        self.fd = fd
        self.ranges: "queue.SimpleQueue[Optional[tuple[int, int]]]" = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._run, name="pte-devconst writeback", daemon=True)
        self.thread.start()

    def __call__(self, offset: int, size: int) -> None:
        self.ranges.put((offset, size))

    def _run(self) -> None:
        while (item := self.ranges.get()) is not None:
            start_writeback(self.fd, *item)

    def close(self) -> None:
        """Wait until every range given has been handed to the kernel (the fd must stay open until then)."""
        self.ranges.put(None)
        self.thread.join()


@contextlib.contextmanager
def background_writeback(fd: int, wanted: bool) -> Iterator[Optional[Flush]]:
    """A ``Writeback`` for ``fd`` while the block writes (None when no writeback is wanted), closed after it."""
    if not wanted:
        yield None
        return
    worker = Writeback(fd)
    try:
        yield worker
    finally:
        worker.close()


def write_piece(fd: int, piece: Piece, *, flush: Optional[Flush] = None) -> int:
    """Append one piece at ``fd``'s position; file ranges are copied by the kernel. Returns its size.

    With ``flush`` (``background_writeback``'s, for a caller that will fsync), a file range longer than
    ``WRITEBACK_CHUNK`` is copied in chunks, starting writeback of each.
    """
    if isinstance(piece, bytes):
        write_all(fd, piece)
        return len(piece)
    if isinstance(piece, ComputedPiece):
        data = piece.produce()
        if len(data) != piece.size:
            raise ComputedSizeError(f"internal error: {piece.what}: {len(data)} bytes computed, {piece.size} laid out")
        write_all(fd, data)
        return piece.size
    if flush is None or piece.size <= WRITEBACK_CHUNK:
        copy_range(piece.fd, piece.offset, piece.size, fd)
        return piece.size
    position = os.lseek(fd, 0, os.SEEK_CUR)
    for done in range(0, piece.size, WRITEBACK_CHUNK):
        step = min(WRITEBACK_CHUNK, piece.size - done)
        copy_range(piece.fd, piece.offset + done, step, fd)
        flush(position + done, step)
    return piece.size


def write_segments(fd: int, position: int, base: int, segments: Sequence[m.DataSegment],
                   contents: Sequence[SegmentContent], progress: Optional[Progress] = None,
                   total: int = 0, *, flush: Optional[Flush] = None) -> None:
    """Stream each segment's pieces to ``base + segment.offset``, zero-filling every gap (with ``flush``,
    starting writeback as the data goes)."""
    flushed = position  # writeback has been started for everything before this offset
    for segment, content in zip(segments, contents):
        if segment.size == 0:
            continue
        start = base + segment.offset
        write_zeros(fd, start - position)
        position = start
        for offset, piece in content.pieces:
            write_zeros(fd, start + offset - position)
            position = start + offset + write_piece(fd, piece, flush=flush)
            if flush is None or isinstance(piece, FileRange) and piece.size > WRITEBACK_CHUNK:
                flushed = position  # write_piece started it chunk by chunk (or nobody will fsync)
            elif position - flushed >= WRITEBACK_CHUNK:
                flush(flushed, position - flushed)
                flushed = position
            if progress:
                progress(position, total)
        write_zeros(fd, start + segment.size - position)
        position = start + segment.size
    # The headers count the data up to the last segment's end, an empty one's alignment gap included.
    end = base + max((s.offset + s.size for s in segments), default=0)
    if end > position:
        write_zeros(fd, end - position)
        position = end
    if progress:
        progress(position, max(total, position))


def write_pte(destination: str | os.PathLike[str], program: m.Program, contents: Sequence[SegmentContent], *,
              check: Optional[Callable[[str], None]] = None, progress: Optional[Progress] = None) -> Layout:
    """Atomically write a .pte at ``destination``; ``check(temp_path)`` runs before the rename."""
    layout = layout_pte(program, contents)
    with atomic_output(destination, check=check) as fd:
        write_pte_to_fd(fd, layout, contents, progress)
    return layout


def unchanged_segments(source: PteFile) -> list[SegmentContent]:
    """Every segment of ``source`` as it is, for a round trip or a rewrite that keeps them."""
    return [SegmentContent(seg.size, [(0, source.piece(source.segment_span(i)))] if seg.size else [])
            for i, seg in enumerate(source.program.segments or ())]
