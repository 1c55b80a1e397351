"""Standard output that is closed (``>&-``), full (``> /dev/full``) or fails otherwise: the command finishes its work,
and says once, at the end, that its report was lost (docs/cli.md, "Exit codes").

``guard_stdout`` puts, in place of ``sys.stdout``, a text stream over file descriptor 1 whose lowest layer keeps the
first error a write meets and drops what follows, so that no report write ever raises into a command half-way
through its work (a rewrite still writes, checks and renames its output; ``check`` still reaches its verdict).
A reader that went away (``| head``) is not such an error: BrokenPipeError goes on up, as every command expects
(``app.stop_on_broken_pipe``: quiet, exit 141).  When stdout was closed before the process started (Python then sets
``sys.stdout`` to None), the first write is the error ``EBADF``; a command that writes nothing (``rewrite -q``) ends
without a word.
"""

from __future__ import annotations

import errno
import io
import os
import sys
from typing import Optional


class _Descriptor(io.RawIOBase):
    """File descriptor 1 (None: closed at start), remembering the first write error instead of raising it."""

    def __init__(self, fd: Optional[int]) -> None:
        super().__init__()
        self.fd = fd
        self.error: Optional[OSError] = None

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        if self.fd is None:
            raise OSError(errno.EBADF, os.strerror(errno.EBADF))
        return self.fd

    def isatty(self) -> bool:
        try:
            return self.fd is not None and os.isatty(self.fd)
        except OSError:
            return False

    def write(self, data: "bytes | bytearray | memoryview") -> int:  # type: ignore[override]
        size = len(memoryview(data).cast("B"))
        if self.error is not None:
            return size
        if self.fd is None:
            self.error = OSError(errno.EBADF, os.strerror(errno.EBADF))
            return size
        view = memoryview(data).cast("B")
        try:
            while view:
                view = view[os.write(self.fd, view):]
        except BrokenPipeError:
            raise
        except OSError as error:
            self.error = error
        return size


_guard: Optional[_Descriptor] = None


def guard_stdout() -> None:
    """Replace ``sys.stdout`` with the guarded stream (same encoding, error handler and line buffering); once."""
    global _guard
    if _guard is not None:
        return
    old = sys.stdout
    fd: Optional[int] = None
    if old is not None:
        try:
            fd = old.fileno()
        except (OSError, ValueError, AttributeError):  # not a real file (a test runner's buffer): leave it alone
            return
        old.flush()
    raw = _Descriptor(fd)
    encoding = getattr(old, "encoding", None) or "utf-8"
    errors = getattr(old, "errors", None) or "strict"
    line_buffering = bool(getattr(old, "line_buffering", False)) or raw.isatty()
    sys.stdout = io.TextIOWrapper(io.BufferedWriter(raw), encoding=encoding, errors=errors,
                                  line_buffering=line_buffering, write_through=False)
    _guard = raw


def stdout_lost() -> Optional[str]:
    """Flush the guarded stream; the one line naming what failed when a report could not be written, else None."""
    if _guard is None:
        return None
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        raise
    except (OSError, ValueError):
        pass
    error = _guard.error
    if error is None:
        return None
    return f"cannot write to standard output: {error.strerror or error}"
