"""Bytes moved, and calls made, by each I/O system call in one rewrite: ``python -m bench.children.syscalls SRC DST``.

Section 1 shows that the tensor data goes through ``os.copy_file_range`` (in the kernel), not through
Python's reads and writes, and how many calls each step makes.  Prints JSON: bytes per ``os`` function
used, ``calls`` (how many times each was called), and ``output`` (the file's size).
"""

from __future__ import annotations

import contextlib
import os
from typing import Any, Callable, Iterator, Optional, Sequence

from bench.common import in_out_main

# How many bytes each call moved, from its arguments and result.
SIZES: dict[str, Callable[[tuple[Any, ...], Any], int]] = {
    "copy_file_range": lambda args, result: result,
    "sendfile": lambda args, result: result,
    "write": lambda args, result: result,
    "pread": lambda args, result: len(result),
    "preadv": lambda args, result: result,
    "read": lambda args, result: len(result),
    "posix_fadvise": lambda args, result: 0,  # starts writeback (schema/pte_writer.py): calls, no bytes
    "fsync": lambda args, result: 0,
}


@contextlib.contextmanager
def counting_os_io(counts: dict[str, int], calls: Optional[dict[str, int]] = None) -> Iterator[None]:
    """Count into ``counts`` the bytes each ``os`` I/O function in ``SIZES`` moves (and into ``calls`` how often
    it is called), while the block runs.

    This wraps functions of the ``os`` module (not of this package): no counter of bytes *per system call*
    exists to ask instead (/proc/self/io adds them all up), and the tool calls these through ``os``.
    The originals are restored on exit.
    """
    originals = {name: getattr(os, name) for name in SIZES}

    def counted(name: str) -> Callable[..., Any]:
        real, size_of = originals[name], SIZES[name]

        def call(*args: Any, **kwargs: Any) -> Any:
            result = real(*args, **kwargs)
            counts[name] = counts.get(name, 0) + size_of(args, result)
            if calls is not None:
                calls[name] = calls.get(name, 0) + 1
            return result
        return call

    try:
        for name in SIZES:
            setattr(os, name, counted(name))
        yield
    finally:
        for name, real in originals.items():
            setattr(os, name, real)


def measure(source: str, destination: str) -> dict[str, Any]:
    """One default rewrite (fsync included) of ``source``: bytes per ``os`` function, ``calls`` per function,
    and ``output``."""
    from pte_devconst import api

    counts: dict[str, Any] = {}
    calls: dict[str, int] = {}
    with counting_os_io(counts, calls):
        result = api.rewrite(source, destination)
    counts = {name: moved for name, moved in counts.items() if moved}
    counts["calls"] = calls
    counts["output"] = result.output_size
    return counts


def main(argv: Optional[Sequence[str]] = None) -> int:
    return in_out_main(measure, "python -m bench.children.syscalls SRC DST", argv)


if __name__ == "__main__":
    raise SystemExit(main())
