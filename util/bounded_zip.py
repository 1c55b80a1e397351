"""Reading entries of a zip that someone else wrote: bounded, and every failure one ``ZipReadError``.

``zipfile`` trusts what an archive declares and fails in many ways: an entry may declare 250 MiB inflated from
250 KiB (a zip bomb), use a compression method it does not know (``NotImplementedError``), be encrypted
(``RuntimeError``), hold a corrupt deflate stream (``zlib.error``), end early (``EOFError``) or fail its CRC
(``BadZipFile``).  ``read_entry`` refuses an entry before inflating it when it is encrypted, uses another method
than stored or deflate, declares more than the caller's limit, or inflates more than ``MAX_RATIO`` times its
compressed size; it reads at most the declared size (``zipfile`` stops there and checks the CRC), and turns every
other failure into ``ZipReadError`` with the reason, one line.

``stored_span`` and ``Window`` read a stored entry in place: an archive inside an archive (``torch.save``'s zip
inside an ETRecord) opens on a window of the outer file, so seeking in it costs nothing (Python 3.11's
``ZipExtFile.seek`` reads everything up to the new position, again after every backwards seek).
"""

from __future__ import annotations

import struct
import zipfile
from typing import Protocol

# Inflated over compressed size, past RATIO_FLOOR: deflate of a real serialized program reaches about 35 (an
# ExecuTorch 1.5.1 ETRecord of 200 parameters, docs/robustness.md); a run of one byte reaches 1,032.
MAX_RATIO = 256
RATIO_FLOOR = 1 << 20  # a small entry may inflate any amount: it costs nothing
_LOCAL_HEADER = struct.Struct("<4s22xHH")  # signature, then (past 22 bytes) the name's and extra field's lengths


class ZipReadError(ValueError):
    """An entry this reader will not read, or one that failed to read (``str`` is the reason, one line)."""


class Seekable(Protocol):
    def seek(self, offset: int, whence: int = 0, /) -> int: ...

    def read(self, n: int = -1, /) -> bytes: ...

    def tell(self) -> int: ...


def _why(error: BaseException) -> str:
    kind = type(error)
    name = kind.__name__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__name__}"
    text = " ".join(str(error).split())
    return f"{name}: {text}" if text else name


def open_zip(file: Seekable) -> zipfile.ZipFile:
    """The archive in ``file`` (its central directory read); ``ZipReadError`` when it is none."""
    try:
        return zipfile.ZipFile(file)
    except Exception as error:  # noqa: BLE001 - BadZipFile, OSError, ValueError, struct.error, EOFError...
        raise ZipReadError(_why(error)) from None


def _check_method(info: zipfile.ZipInfo, methods: tuple[int, ...]) -> None:
    if info.flag_bits & 0x1:
        raise ZipReadError("encrypted (this tool reads no encrypted entry)")
    if info.compress_type not in methods:
        raise ZipReadError(f"compressed with method {info.compress_type} (this tool reads stored and deflate "
                           "entries)" if methods != (zipfile.ZIP_STORED,) else
                           f"compressed with method {info.compress_type} (this tool seeks in an archive inside "
                           "another, so it reads only a stored one, as torch.save and the ETRecord writer store "
                           "them)")


def check_entry(info: zipfile.ZipInfo, limit: int) -> None:
    """Refuse, before reading it, an entry that is encrypted, compressed another way than deflate, declared
    larger than ``limit`` bytes, or that would inflate more than ``MAX_RATIO`` times its compressed size."""
    _check_method(info, (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED))
    if info.file_size > limit:
        raise ZipReadError(f"declares {info.file_size:,} bytes, more than the {limit:,} this tool reads there")
    if info.compress_type == zipfile.ZIP_STORED and info.compress_size != info.file_size:
        raise ZipReadError(f"stored, yet declares {info.file_size:,} bytes in {info.compress_size:,}")
    if info.file_size > RATIO_FLOOR and info.file_size > MAX_RATIO * info.compress_size:
        raise ZipReadError(f"inflates {info.compress_size:,} bytes to {info.file_size:,} (a ratio of "
                           f"{info.file_size // max(info.compress_size, 1):,}, more than the {MAX_RATIO} this "
                           "tool reads)")


def read_entry(archive: zipfile.ZipFile, info: zipfile.ZipInfo, limit: int) -> bytes:
    """The bytes of entry ``info``, within ``check_entry``'s bounds; any failure is ``ZipReadError``."""
    check_entry(info, limit)
    try:
        with archive.open(info) as stream:
            data = stream.read(info.file_size + 1)
            if len(data) != info.file_size:
                raise ZipReadError(f"holds {len(data):,} bytes where it declares {info.file_size:,}")
            return data
    except ZipReadError:
        raise
    except Exception as error:  # noqa: BLE001 - zlib.error, BadZipFile (CRC), EOFError, OSError, RuntimeError...
        raise ZipReadError(_why(error)) from None


def stored_span(archive: zipfile.ZipFile, info: zipfile.ZipInfo, file: Seekable, size: int) -> int:
    """Where the bytes of stored entry ``info`` start in ``file`` (``size`` bytes, the archive's own), checked to
    lie inside it; ``ZipReadError`` for an entry that is not stored or whose local header is not one."""
    _check_method(info, (zipfile.ZIP_STORED,))
    check_entry(info, size)
    try:
        file.seek(info.header_offset)
        header = file.read(_LOCAL_HEADER.size)
    except Exception as error:  # noqa: BLE001 - the file's own read errors
        raise ZipReadError(_why(error)) from None
    if len(header) != _LOCAL_HEADER.size or header[:4] != b"PK\x03\x04":
        raise ZipReadError(f"no local file header at offset {info.header_offset:,}")
    _, name_length, extra_length = _LOCAL_HEADER.unpack(header)
    start: int = info.header_offset + _LOCAL_HEADER.size + name_length + extra_length
    if start + info.file_size > size:
        raise ZipReadError(f"its {info.file_size:,} bytes at offset {start:,} run past the archive's end ({size:,})")
    return start


class Window:
    """Bytes ``[start, start + size)`` of a seekable file, as a read-only file of its own (``zipfile`` reads an
    archive inside an archive through it)."""

    def __init__(self, file: Seekable, start: int, size: int) -> None:
        self.file, self.start, self.size, self.position = file, start, size, 0

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0, /) -> int:
        base = {0: 0, 1: self.position, 2: self.size}.get(whence)
        if base is None:
            raise ValueError(f"whence {whence}")
        self.position = min(max(base + offset, 0), self.size)
        return self.position

    def tell(self) -> int:
        return self.position

    def read(self, n: int = -1, /) -> bytes:
        left = self.size - self.position
        n = left if n is None or n < 0 else min(n, left)
        if n <= 0:
            return b""
        self.file.seek(self.start + self.position)
        data = self.file.read(n)
        self.position += len(data)
        return data
