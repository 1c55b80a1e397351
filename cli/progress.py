"""A rich progress bar for long writes, shown only when stderr is a terminal and not --quiet."""

from __future__ import annotations

import contextlib
import sys
from typing import Callable, Iterator, Optional

from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

# Below this many bytes a write takes well under a second: no bar.
PROGRESS_THRESHOLD = 64 << 20


def progress_wanted(total_bytes: int, quiet: bool) -> bool:
    return not quiet and total_bytes >= PROGRESS_THRESHOLD and sys.stderr.isatty()


@contextlib.contextmanager
def write_progress(label: str, total_bytes: int, quiet: bool) -> Iterator[Optional[Callable[[int, int], None]]]:
    """Yield a ``progress(done, total)`` callback, or None when no bar should be drawn."""
    if not progress_wanted(total_bytes, quiet):
        yield None
        return
    columns = (TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TimeRemainingColumn())
    with Progress(*columns, transient=True, redirect_stdout=False) as bar:
        task = bar.add_task(label, total=total_bytes)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=max(total, done))

        yield update
