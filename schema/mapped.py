"""A read-only file mapped into memory: the plumbing ``PteFile`` and ``PtdFile`` share.

Opening maps the whole file (touching no page), keeps its descriptor for the
writer's kernel-side copies, and refuses anything but a regular file, so a
pipe or a directory is a clear error instead of a hang.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import mmap
import os
import stat
from typing import Optional, TypeVar

from pte_devconst.util.errors import FormatError
from .span import FileRange, Piece, Span

F = TypeVar("F", bound="MappedFile")

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


class MappedFile:
    """Bytes of a file (or of memory) with the descriptor behind them; closes both once."""

    def __init__(self, data: memoryview, *, path: str = "<bytes>", mapped: Optional[mmap.mmap] = None,
                 fd: int = -1) -> None:
        self.path = path
        self.data = data
        self.size = len(data)
        self._mapped = mapped
        self._fd = fd

    @classmethod
    def open(cls: type[F], path: str | os.PathLike[str]) -> F:
        try:
            view, mapped, fd = map_file(path)
        except OSError as error:
            raise FormatError(f"cannot read: {error.strerror or error}", file=str(path)) from None
        return cls(view, path=str(path), mapped=mapped, fd=fd)

    @property
    def fd(self) -> int:
        """The open file's descriptor, or -1 for bytes held in memory."""
        return self._fd

    @classmethod
    def from_bytes(cls: type[F], data: bytes, path: str = "<bytes>") -> F:
        return cls(memoryview(data), path=path)

    def close(self) -> None:
        mapped, self._mapped = self._mapped, None
        release_map(self.data, mapped)
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)

    def __enter__(self: F) -> F:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def read(self, span: Span) -> memoryview:
        if span.end > self.size:
            raise FormatError(f"[{span.offset}, {span.end}) lies past the end of the file ({self.size} bytes)",
                              file=self.path)
        return self.data[span.offset: span.end]

    def read_into(self, offset: int, view: memoryview) -> int:
        """Fill ``view`` with the file's bytes at ``offset``; returns how many there were.

        ``preadv`` on the descriptor, so no page of the memory map becomes resident (reading a large
        range through the map would count it in this process's memory); from memory for in-memory input.
        """
        if self._fd >= 0:
            return os.preadv(self._fd, [view], offset)
        chunk = self.data[offset: offset + len(view)]
        view[: len(chunk)] = chunk
        return len(chunk)

    def sha256(self, span: Span, block: int = 1 << 20) -> str:
        """SHA-256 of ``span``'s bytes, read in ``block``-sized pieces with ``read_into`` into one reused buffer.

        Never through the memory map: hashing a mapped range makes every page of it resident in this process
        (``diff`` of a 240 MiB program and its rewrite peaked near 500 MiB), whereas this keeps one block.
        """
        if span.end > self.size:
            raise FormatError(f"[{span.offset}, {span.end}) lies past the end of the file ({self.size} bytes)",
                              file=self.path)
        digest = hashlib.sha256()
        buffer = memoryview(bytearray(min(block, span.size)))
        offset, left = span.offset, span.size
        while left:
            view = buffer[: min(left, len(buffer))]
            got = self.read_into(offset, view)
            if got <= 0:
                raise FormatError(f"[{offset}, {span.end}) could not be read: the file shrank while it was read",
                                  file=self.path)
            digest.update(view[:got])
            offset, left = offset + got, left - got
        return digest.hexdigest()

    def piece(self, span: Span) -> Piece:
        """The bytes of ``span`` for the writer: a file range (streamed by the kernel) or, for in-memory input,
        bytes."""
        if span.end > self.size:
            raise FormatError(f"[{span.offset}, {span.end}) lies past the end of the file ({self.size} bytes)",
                              file=self.path)
        return FileRange(self._fd, span.offset, span.size) if self._fd >= 0 else bytes(self.data[span.offset:span.end])
