"""Atomic replacement of an output file: temp file in the destination folder, fsync, check, rename.

Killing the process at any moment leaves either the old destination or none;
a failed write (disk full, RLIMIT_FSIZE, permissions) removes the temporary
file and raises ``OutputError`` with the destination untouched.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import stat
import tempfile
from pathlib import Path
from typing import Callable, Iterator, Optional

from .errors import OutputError, PteDevconstError

TEMP_PREFIX = ".pte-devconst-"


def _describe(error: OSError) -> str:
    if error.errno == errno.ENOSPC:
        return "no space left on the device"
    if error.errno == errno.EFBIG:
        return "file too large (file-size limit reached)"
    return error.strerror or str(error)


@contextlib.contextmanager
def _sigxfsz_as_error() -> Iterator[None]:
    """Under RLIMIT_FSIZE the kernel sends SIGXFSZ (fatal by default); make it an EFBIG OSError instead."""
    if not hasattr(signal, "SIGXFSZ"):
        yield
        return
    try:
        previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGXFSZ, previous)


class _Terminated(BaseException):
    """SIGTERM/SIGHUP arrived while writing (BaseException: nothing may swallow it on the way out)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


@contextlib.contextmanager
def _termination_removes_temp() -> Iterator[None]:
    """Turn SIGTERM/SIGHUP into an unwinding exception, so the temporary file is removed; then die of it.

    Only where the signal still has its default action (an application's own
    handler is left alone) and only in the main thread.  After the clean-up the
    process re-raises the signal with the default action, so the parent sees
    the usual "killed by SIGTERM" status.
    """
    installed: dict[int, object] = {}

    def handler(signum: int, frame: object) -> None:
        raise _Terminated(signum)

    for signum in (getattr(signal, "SIGTERM", None), getattr(signal, "SIGHUP", None)):
        if signum is None:
            continue
        try:
            if signal.getsignal(signum) == signal.SIG_DFL:
                installed[signum] = signal.signal(signum, handler)
        except ValueError:  # not the main thread
            break
    try:
        yield
    except _Terminated as stop:
        for signum, previous in installed.items():
            signal.signal(signum, previous)  # type: ignore[arg-type]
        installed.clear()
        os.kill(os.getpid(), stop.signum)
        raise  # only if the default action did not end the process
    finally:
        for signum, previous in installed.items():
            signal.signal(signum, previous)  # type: ignore[arg-type]


def _permissions(dest: Path, mode: Optional[int]) -> int:
    """``mode`` less the umask; by default an existing destination's own permission bits (--in-place keeps them)."""
    if mode is None:
        with contextlib.suppress(OSError):
            info = os.stat(dest)
            if stat.S_ISREG(info.st_mode):
                return stat.S_IMODE(info.st_mode)
        mode = 0o644
    return mode & ~_umask()


@contextlib.contextmanager
def atomic_output(destination: str | os.PathLike[str], *, check: Optional[Callable[[str], None]] = None,
                  mode: Optional[int] = None, durable: bool = True) -> Iterator[int]:
    """Yield a writable fd; on normal exit fsync it, run ``check(temp_path)``, then rename over ``destination``.

    ``mode`` defaults to the permissions of the file being replaced, else 0o644 (less the umask).
    ``durable=False`` skips the two fsyncs (file and folder): the replacement is still atomic for every
    process (none sees a partial file, a killed writer leaves the old destination), but a power failure
    soon after may lose the new file's data. On a large file that saves the wait for the disk.
    """
    with _termination_removes_temp():
        with _atomic_output(Path(destination), check, mode, durable) as fd:
            yield fd


@contextlib.contextmanager
def _atomic_output(dest: Path, check: Optional[Callable[[str], None]], mode: Optional[int],
                   durable: bool) -> Iterator[int]:
    folder = dest.parent if str(dest.parent) else Path(".")
    try:
        fd, temp = tempfile.mkstemp(prefix=TEMP_PREFIX, suffix=".tmp", dir=folder)
    except OSError as error:
        raise OutputError(f"cannot create a file in {folder}: {_describe(error)}", file=str(dest)) from None
    done = False
    try:
        with _sigxfsz_as_error():
            try:
                yield fd
                if durable:
                    os.fsync(fd)
            except OSError as error:
                raise OutputError(f"writing failed: {_describe(error)}; the destination was left untouched",
                                  file=str(dest)) from None
        os.close(fd)
        fd = -1
        if check is not None:
            try:
                check(temp)
            except PteDevconstError as error:
                if error.file == temp:  # name what the user asked for, not a temporary file that is gone
                    inner = ": ".join(part for part in (error.where, error.what) if part)
                    error.file, error.where = str(dest), None
                    error.what = f"the written file failed its check ({inner}); the destination was left untouched"
                raise
        try:
            os.chmod(temp, _permissions(dest, mode))
            os.replace(temp, dest)
        except OSError as error:
            raise OutputError(f"cannot replace the destination: {_describe(error)}", file=str(dest)) from None
        done = True
        if durable:
            _fsync_folder(folder)
    finally:
        if fd >= 0:
            os.close(fd)
        if not done:
            with contextlib.suppress(OSError):
                os.unlink(temp)


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


def _fsync_folder(folder: Path) -> None:
    with contextlib.suppress(OSError):
        handle = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(handle)
        finally:
            os.close(handle)


def write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


ZERO_CHUNK = bytes(1 << 16)


def write_zeros(fd: int, count: int) -> None:
    while count > 0:
        step = min(count, len(ZERO_CHUNK))
        write_all(fd, ZERO_CHUNK[:step])
        count -= step


def copy_range(src_fd: int, offset: int, count: int, dst_fd: int) -> None:
    """Copy ``count`` bytes from ``src_fd`` at ``offset`` to ``dst_fd``'s position, in the kernel when possible.

    ``os.copy_file_range`` (reflinks or in-kernel copy) first, then ``os.sendfile``,
    then a bounded read/write loop; the bytes never become Python objects on the
    first two paths.
    """
    dst_pos = os.lseek(dst_fd, 0, os.SEEK_CUR)
    remaining = count
    if hasattr(os, "copy_file_range"):
        try:
            while remaining:
                n = os.copy_file_range(src_fd, dst_fd, min(remaining, 1 << 30), offset, dst_pos)
                if n == 0:
                    break
                offset, dst_pos, remaining = offset + n, dst_pos + n, remaining - n
            os.lseek(dst_fd, dst_pos, os.SEEK_SET)
        except OSError as error:
            if error.errno not in (errno.EXDEV, errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EBADF):
                raise
    if remaining and hasattr(os, "sendfile"):
        try:
            while remaining:
                n = os.sendfile(dst_fd, src_fd, offset, min(remaining, 1 << 30))
                if n == 0:
                    break
                offset, remaining = offset + n, remaining - n
        except OSError as error:
            if error.errno not in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
                raise
    while remaining:
        chunk = os.pread(src_fd, min(remaining, 1 << 20), offset)
        if not chunk:
            raise PteDevconstError(f"source ended {remaining} bytes early while copying")
        write_all(dst_fd, chunk)
        offset, remaining = offset + len(chunk), remaining - len(chunk)
