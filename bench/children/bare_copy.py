"""The floor a Python rewrite can reach: a bare ``os.copy_file_range`` loop,
``python -S -m bench.children.bare_copy SRC DST``.

Section 1 times it against ``cp`` to show that what ``rewrite`` adds to the copy is a fixed cost, not a
per-byte one.  Run with ``-S`` (no site packages) so that its start-up is the interpreter's alone.
"""

from __future__ import annotations

import os
import sys
from typing import Optional, Sequence


def copy(source: str, destination: str) -> int:
    """Copy ``source`` to ``destination`` with the kernel's ``copy_file_range`` only; returns the bytes copied."""
    src = os.open(source, os.O_RDONLY)
    try:
        dst = os.open(destination, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            size, done = os.fstat(src).st_size, 0
            while done < size:
                moved = os.copy_file_range(src, dst, size - done, done)
                if moved == 0:
                    raise OSError(f"{source} shrank while being copied")
                done += moved
        finally:
            os.close(dst)
    finally:
        os.close(src)
    return done


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2:
        print("usage: python -S -m bench.children.bare_copy SRC DST", file=sys.stderr)
        return 2
    copy(args[0], args[1])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
