"""Opening a .pte: header, program and lazily read segments over one memory map.

``PteFile.open`` reads only the flatbuffer part of the file (a few KB to a few
MB) and checks it completely; tensor data, delegate blobs and named data stay
on disk and are only touched when a caller asks for a slice of them.  A
10 GB program therefore opens in the time it takes to read its flatbuffer.
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from . import model as m
from .decode import decode_program
from .errors import FormatError
from .flatbuf import FlatbufferError
from .header import MIN_PTE_SIZE, ExtendedHeader, read_pte_header
from .pte_writer import FileRange, Piece, SegmentContent
from .validate import check_program


@dataclass(frozen=True, slots=True)
class Span:
    """An absolute byte range of the file."""

    offset: int
    size: int

    @property
    def end(self) -> int:
        return self.offset + self.size


def map_file(path: str | os.PathLike[str]) -> tuple[memoryview, Optional[mmap.mmap], int]:
    """(read-only view of the whole file, its mmap or None for an empty file, an open fd).

    Only regular files: a directory, pipe or device raises ``OSError`` instead of
    blocking (``O_NONBLOCK`` keeps opening a FIFO from waiting for a writer) or
    being mapped as something else.
    """
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0))
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise IsADirectoryError(errno.EISDIR, "it is a directory")
        if not stat.S_ISREG(info.st_mode):
            raise OSError(errno.EINVAL, "not a regular file (a pipe, socket or device)")
        size = info.st_size
        if size == 0:
            return memoryview(b""), None, fd
        mapped = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
        return memoryview(mapped), mapped, fd
    except BaseException:
        os.close(fd)
        raise


def release_map(view: memoryview, mapped: Optional[mmap.mmap]) -> None:
    """Release a view made by ``map_file`` and unmap it, or leave the unmapping to the last live slice.

    Slices of the map may outlive the file object (a caller keeping ``tensor_bytes``,
    or the traceback of the error that made opening fail); ``mmap.close`` then raises
    ``BufferError``.  The map is freed when the last slice goes, so that is no error.
    """
    if mapped is None:
        return
    with contextlib.suppress(BufferError):
        view.release()
    with contextlib.suppress(BufferError):
        mapped.close()


class PteFile:
    """A parsed, checked, read-only .pte.  Use as a context manager or call ``close``."""

    def __init__(self, data: memoryview, *, path: str = "<bytes>", mapped: Optional[mmap.mmap] = None,
                 fd: int = -1) -> None:
        self.path = path
        self.data = data
        self.size = len(data)
        self._mapped = mapped
        self._fd = fd
        try:
            self.header: Optional[ExtendedHeader] = read_pte_header(data[:48], self.size)
            if self.size < MIN_PTE_SIZE:
                raise FormatError(f"{self.size} bytes is smaller than the {MIN_PTE_SIZE} bytes every .pte has",
                                  where="header")
            self.flatbuffer_size = self.header.program_size if self.header else self.size
            try:
                self.program: m.Program = decode_program(data[: self.flatbuffer_size])
            except FlatbufferError as error:
                raise FormatError(error.what, where=error.where or "flatbuffer") from None
            check_program(self.program, self.header.segment_data_size if self.header else None)
        except FormatError as error:
            self.close()
            raise error.with_file(path)

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> "PteFile":
        try:
            view, mapped, fd = map_file(path)
        except OSError as error:
            raise FormatError(f"cannot read: {error.strerror or error}", file=str(path)) from None
        return cls(view, path=str(path), mapped=mapped, fd=fd)

    @classmethod
    def from_bytes(cls, data: bytes, path: str = "<bytes>") -> "PteFile":
        return cls(memoryview(data), path=path)

    def close(self) -> None:
        mapped, self._mapped = self._mapped, None
        release_map(self.data, mapped)
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)

    def piece(self, span: Span) -> "Piece":
        """The bytes of ``span`` for the writer: a file range (streamed by the kernel) or, for in-memory input, bytes."""
        if span.end > self.size:
            raise FormatError(f"[{span.offset}, {span.end}) lies past the end of the file ({self.size} bytes)",
                              file=self.path)
        return FileRange(self._fd, span.offset, span.size) if self._fd >= 0 else bytes(self.data[span.offset:span.end])

    def __enter__(self) -> "PteFile":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- where things are -------------------------------------------------

    @property
    def segment_base(self) -> int:
        return self.header.segment_base_offset if self.header else 0

    def segment_span(self, index: int) -> Span:
        seg = (self.program.segments or ())[index]
        return Span(self.segment_base + seg.offset, seg.size)

    def _subsegment_span(self, sub: m.SubsegmentOffsets, idx: int, nbytes: int) -> Span:
        seg = self.segment_span(sub.segment_index)
        return Span(seg.offset + (sub.offsets or ())[idx], nbytes)

    def constant_span(self, data_buffer_idx: int, nbytes: int) -> Span:
        """Where constant entry ``data_buffer_idx`` (nbytes long) lies in the file."""
        return self._subsegment_span(self.program.constant_segment, data_buffer_idx, nbytes)

    def mutable_span(self, data_buffer_idx: int, nbytes: int) -> Span:
        """Where initial-data entry ``data_buffer_idx`` lies (the runtime always uses list entry 0)."""
        return self._subsegment_span((self.program.mutable_data_segments or ())[0], data_buffer_idx, nbytes)

    def tensor_span(self, tensor: m.Tensor) -> Optional[Span]:
        """The bytes a constant or initial-state tensor ships in this file; None if external or none."""
        if tensor.is_external or tensor.data_buffer_idx == 0:
            return None
        if tensor.allocation_info is not None:
            return self.mutable_span(tensor.data_buffer_idx, tensor.nbytes)
        if self.program.constant_buffer and len((self.program.constant_segment or m.SubsegmentOffsets()).offsets or ()) <= 1:
            return None  # deprecated inline constant_buffer: use inline_constant()
        return self.constant_span(tensor.data_buffer_idx, tensor.nbytes)

    def tensor_bytes(self, tensor: m.Tensor) -> Optional[memoryview]:
        """The bytes ``tensor_span`` names, or the deprecated inline constant; None if external or none."""
        if tensor.is_external or tensor.data_buffer_idx == 0:
            return None
        span = self.tensor_span(tensor)
        if span is not None:
            return self.read(span)
        if tensor.allocation_info is None:  # tensor_span said: an inline constant_buffer entry
            return memoryview(self.program.constant_buffer[tensor.data_buffer_idx].storage or b"")[: tensor.nbytes]
        return None

    def delegate_span(self, delegate: m.BackendDelegate) -> Optional[Span]:
        ref = delegate.processed
        if ref is None or ref.location != m.DataLocation.SEGMENT:
            return None
        return self.segment_span(ref.index)

    def delegate_blob(self, delegate: m.BackendDelegate) -> memoryview:
        span = self.delegate_span(delegate)
        if span is not None:
            return self.read(span)
        return memoryview(self.program.backend_delegate_data[delegate.processed.index].data or b"")

    def named_data(self, key: str) -> Optional[memoryview]:
        for entry in self.program.named_data or ():
            if entry.key == key:
                return self.read(self.segment_span(entry.segment_index))
        return None

    def read(self, span: Span) -> memoryview:
        if span.end > self.size:
            raise FormatError(f"[{span.offset}, {span.end}) lies past the end of the file ({self.size} bytes)",
                              file=self.path)
        return self.data[span.offset: span.end]


def open_pte(path: str | os.PathLike[str]) -> PteFile:
    """Open and fully check a .pte; raises ``FormatError`` naming the file and the problem."""
    return PteFile.open(Path(path))


def unchanged_segments(source: PteFile) -> list[SegmentContent]:
    """Every segment of ``source`` as it is, for a round trip or a rewrite that keeps them."""
    return [SegmentContent(seg.size, [(0, source.piece(source.segment_span(i)))] if seg.size else [])
            for i, seg in enumerate(source.program.segments or ())]
