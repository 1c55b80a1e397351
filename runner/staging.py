"""Programs the runner writes for the ExecuTorch runtime to load from a file, never from bytes in memory.

The runtime maps a program it loads from a path (``MmapDataLoader``): its constants and blobs stay file pages,
and nothing is held twice.  Handed bytes instead, both processes hold a copy, and the pipe between them a third
(``validate --engine executorch`` of a 256 MiB program peaked at five times its size that way).  So a flipped
program (``executorch_engine.flip``) or a program around one delegate (``one_delegate.py``) is written by the
project's writer into a temporary file (segments copied by the kernel, as ``rewrite`` copies them), the child
loads it by path, and the file is unlinked as soon as the child holds it open.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from typing import Iterator, Sequence

from pte_devconst.schema import model as m
from pte_devconst.schema.pte_writer import SegmentContent, layout_pte, write_pte_to_fd


@contextlib.contextmanager
def staged_program(program: m.Program, contents: Sequence[SegmentContent]) -> Iterator[str]:
    """The path of a temporary file holding ``program`` with ``contents``; removed when the block ends."""
    fd, path = tempfile.mkstemp(prefix="pte-devconst-", suffix=".pte")
    try:
        try:
            write_pte_to_fd(fd, layout_pte(program, contents), contents, writeback=False)
        finally:
            os.close(fd)
        yield path
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)
