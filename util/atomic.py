"""Atomic replacement of an output file: temp file in the destination folder, fsync, check, rename.

Killing the process at any moment leaves either the old destination or none;
a failed write (disk full, RLIMIT_FSIZE, permissions) or check removes the
temporary file and raises with the destination untouched.  Only a regular file
or a new path is ever replaced (never a device, FIFO, socket or directory), and
a replaced file keeps its owner, group, permission bits and extended attributes
(its POSIX ACL among them), as ``sed -i`` does; where one cannot be kept (not
permitted, not supported where the new file is written), nothing is replaced.
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import signal
import stat
import tempfile
from pathlib import Path
from typing import Callable, Iterator, Optional, Sequence

from .errors import OutputError, PteDevconstError, ReportedError

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


def _file_kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def _existing(dest: Path) -> Optional[os.stat_result]:
    """What ``dest`` names now (through symlinks), None for a new path; an unusable name is an ``OutputError``."""
    try:
        return os.stat(dest)
    except FileNotFoundError:
        return None  # a new path (or a dangling symlink, which the rename replaces)
    except OSError as error:
        raise OutputError(f"cannot write there: {_describe(error)}", file=str(dest)) from None


def check_destination(destination: str | os.PathLike[str], *,
                      inputs: Sequence[tuple[str, str | os.PathLike[str], str]] = ()) -> None:
    """Refuse, before any work, a destination that is not a regular file or a new path, or that is an input.

    ``inputs`` are (description, path, hint) triples; the comparison is by device and inode after following
    symlinks, so no spelling (relative, absolute, ``./``, a symlink, a hard link) gets past it.
    """
    dest = Path(destination)
    info = _existing(dest)
    if info is None:
        return
    if not stat.S_ISREG(info.st_mode):
        raise OutputError(f"the output is {_file_kind(info.st_mode)}, not a regular file; refusing to replace it "
                          "(name a regular file or a new path)", file=str(dest))
    for description, path, hint in inputs:
        with contextlib.suppress(OSError):
            other = os.stat(path)
            if (other.st_dev, other.st_ino) == (info.st_dev, info.st_ino):
                raise OutputError(f"the output is {description} {path}; refusing to overwrite it{hint}",
                                  file=str(dest))


def _keep_metadata(fd: int, dest: Path, mode: Optional[int]) -> None:
    """Give the temporary file the owner, group and permission bits of the file it replaces (else the defaults).

    ``mode`` defaults to the replaced file's permission bits, else 0o644; an explicit ``mode`` (and the
    default for a new file) is less the umask.  Changing the owner needs privilege: when it is not
    permitted, nothing is replaced, rather than silently handing the file to the current user.
    """
    replaced = _existing(dest)
    if replaced is not None and not stat.S_ISREG(replaced.st_mode):
        raise OutputError(f"the output became {_file_kind(replaced.st_mode)} while it was written; refusing to "
                          "replace it; the destination was left untouched", file=str(dest))
    if replaced is not None:
        mine = os.fstat(fd)
        if (mine.st_uid, mine.st_gid) != (replaced.st_uid, replaced.st_gid):
            try:
                os.fchown(fd, replaced.st_uid, replaced.st_gid)
            except PermissionError:
                raise OutputError(f"cannot keep its owner and group (uid {replaced.st_uid}, gid "
                                  f"{replaced.st_gid}): not permitted for this user; the destination was left "
                                  "untouched (run as its owner or as root, or write a new file)",
                                  file=str(dest)) from None
    if mode is None and replaced is not None:
        permissions = stat.S_IMODE(replaced.st_mode)
    else:
        permissions = (0o644 if mode is None else mode) & ~_umask()
    os.fchmod(fd, permissions)  # after fchown, which may clear the set-id bits
    if replaced is not None:
        _keep_xattrs(fd, dest)  # after fchmod: an ACL's mask entry and the group bits are one setting


def _keep_xattrs(fd: int, dest: Path) -> None:
    """Copy every extended attribute of the file ``dest`` names onto the temporary file, or refuse.

    The POSIX ACL lives in the ``system.posix_acl_access`` attribute: a model that an ACL lets another account
    read would otherwise become unreadable to it after the rename. ``user.*``, ``security.*`` and ``trusted.*``
    attributes (labels, checksums, a backup tool's marks) are kept the same way. An attribute the new file
    already has with the same value (a security label the system gave it) is left alone; one that cannot be
    set stops the replacement, as for an owner that cannot be kept.
    """
    try:
        names = os.listxattr(dest)
    except OSError as error:
        if error.errno in (errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOENT):
            return  # no extended attributes on that file system (or the file went away: nothing to keep)
        raise OutputError(f"cannot read its extended attributes: {_describe(error)}; the destination was left "
                          "untouched", file=str(dest)) from None
    for name in names:
        try:
            value = os.getxattr(dest, name)
        except OSError as error:
            if error.errno == errno.ENODATA:
                continue  # removed since it was listed
            raise OutputError(f"cannot read its extended attribute {name}: {_describe(error)}; the destination "
                              "was left untouched", file=str(dest)) from None
        try:
            if os.getxattr(fd, name) == value:
                continue
        except OSError:
            pass
        try:
            os.setxattr(fd, name, value)
        except OSError as error:
            raise OutputError(f"cannot keep its extended attribute {name} ({_describe(error)}); the destination "
                              "was left untouched (run as its owner or as root, or write a new file)",
                              file=str(dest)) from None


def _untouched(error: ReportedError, dest: Path, temp: str, *, about_output: bool) -> ReportedError:
    """Name what the user asked for (never the vanished temporary file) and say that it was left untouched.

    ``about_output``: a check's error without a file is about the written file, so it is named after the
    destination; a writing error without one (the input ended early) is left for the caller to name.
    """
    if error.file == temp:
        inner = ": ".join(part for part in (error.where, error.what) if part)
        error.file, error.where = str(dest), None
        error.what = f"the written file failed its check ({inner}); the destination was left untouched"
    elif "left untouched" not in error.what:
        if error.file is None and about_output or error.file == str(dest):
            error.file = str(dest)
            error.what += "; the destination was left untouched"
        else:
            error.what += f"; the destination {dest} was left untouched"
    return error


@contextlib.contextmanager
def atomic_output(destination: str | os.PathLike[str], *, check: Optional[Callable[[str], None]] = None,
                  mode: Optional[int] = None, durable: bool = True,
                  syncing: Optional[Callable[[], None]] = None) -> Iterator[int]:
    """Yield a writable fd; on normal exit fsync it, run ``check(temp_path)``, then rename over ``destination``.

    ``mode`` defaults to the permissions of the file being replaced, else 0o644 (less the umask).
    ``durable=False`` skips the two fsyncs (file and folder): the replacement is still atomic for every
    process (none sees a partial file, a killed writer leaves the old destination), but a power failure
    soon after may lose the new file's data. On a large file that saves the wait for the disk.
    ``syncing()`` is called as the wait for the disk starts (a progress display names it).
    """
    with _termination_removes_temp():
        with _atomic_output(Path(destination), check, mode, durable, syncing) as fd:
            yield fd


@contextlib.contextmanager
def _atomic_output(dest: Path, check: Optional[Callable[[str], None]], mode: Optional[int],
                   durable: bool, syncing: Optional[Callable[[], None]] = None) -> Iterator[int]:
    existing = _existing(dest)
    if existing is not None and not stat.S_ISREG(existing.st_mode):
        raise OutputError(f"the output is {_file_kind(existing.st_mode)}, not a regular file; refusing to replace "
                          "it (name a regular file or a new path)", file=str(dest))
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
                _keep_metadata(fd, dest, mode)
                if durable:
                    if syncing is not None:
                        syncing()
                    os.fsync(fd)
            except OSError as error:
                raise OutputError(f"writing failed: {_describe(error)}; the destination was left untouched",
                                  file=str(dest)) from None
            except PteDevconstError as error:  # e.g. the input ended early while it was copied
                raise _untouched(error, dest, temp, about_output=False)
        os.close(fd)
        fd = -1
        if check is not None:
            try:
                check(temp)
            except ReportedError as error:  # a user's problem or the self-check's (InternalError)
                raise _untouched(error, dest, temp, about_output=True)
        try:
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


def write_all(fd: int, data: bytes | bytearray | memoryview) -> None:
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


PAGE = mmap.PAGESIZE  # the head split is to the page boundary of this machine's pages (4 KiB on x86-64)
COPY_CALL = 1 << 30  # bytes asked of one copy_file_range or sendfile call


def _next_call(offset: int, dst_pos: int, remaining: int) -> int:
    """How many bytes the next ``copy_file_range`` call asks for: where source and destination share their
    offset within a page but start mid-page, just the bytes up to the page boundary, so that every later call
    copies whole pages (about a fifth faster on ext4: docs/performance.md)."""
    head = -offset % PAGE
    if head and head == -dst_pos % PAGE and remaining > head:
        return head
    return min(remaining, COPY_CALL)


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
                n = os.copy_file_range(src_fd, dst_fd, _next_call(offset, dst_pos, remaining), offset, dst_pos)
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
                n = os.sendfile(dst_fd, src_fd, offset, min(remaining, COPY_CALL))
                if n == 0:
                    break
                offset, remaining = offset + n, remaining - n
        except OSError as error:
            if error.errno not in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
                raise
    while remaining:
        chunk = os.pread(src_fd, min(remaining, 1 << 20), offset)
        if not chunk:
            raise PteDevconstError(f"the input ended {remaining:,} bytes early while it was copied: it changed "
                                   "during the rewrite")
        write_all(dst_fd, chunk)
        offset, remaining = offset + len(chunk), remaining - len(chunk)
