"""Progress of long work on stderr: rich bars on a terminal, plain lines in a log, nothing with --quiet.

Bars are drawn only when stderr is a terminal.  ``--progress`` (config ``progress = true``) also writes progress
where stderr is no terminal (a CI log): one line per file as its work starts (``rewrite``, ``check``, ``validate``)
or per call (``run``, ``validate``), and one per phase of a rewrite of a file over ``PHASE_LINES_FROM``.  Sizes
are binary (KiB, MiB, GiB), as every report prints them (``util.units.human_bytes``).  A rewrite names its phases
(planning, writing, self-check, fsync), validate each method and call, diff its two reads.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import TYPE_CHECKING, Any, Callable, Iterator, Optional

if TYPE_CHECKING:  # rich.progress is imported only when a bar is drawn
    from rich.console import Console


def _stderr() -> "Console":
    """Bars go to stderr (rich's default console is stdout, which may be a pipe or a JSON document)."""
    from pte_devconst.cli.output import stderr_console

    return stderr_console()


# Below this many bytes a write takes well under a second: no bar.
PROGRESS_THRESHOLD = 64 << 20


# In a log, a rewrite of a file this large gets one line per phase: its writing and self-check take seconds.
PHASE_LINES_FROM = 256 << 20


def progress_wanted(total_bytes: int, quiet: bool) -> bool:
    return not quiet and total_bytes >= PROGRESS_THRESHOLD and sys.stderr.isatty()


def log_wanted(forced: bool, quiet: bool) -> bool:
    """Whether progress goes to stderr as plain lines: asked for (``--progress``), not ``-q``, and stderr is no
    terminal (where it is one, the bars show anyway)."""
    return forced and not quiet and not sys.stderr.isatty()


def log_line(text: str) -> None:
    """One progress line on stderr, flushed at once (a CI log shows it while the work goes on)."""
    print(f"pte-devconst: {text}", file=sys.stderr, flush=True)


def counted(name: str, position: Optional[tuple[int, int]]) -> str:
    """``model.pte (3/50)``: a file and where it stands among those the command works on."""
    return name if position is None else f"{name} ({position[0]}/{position[1]})"


@contextlib.contextmanager
def write_progress(label: str, total_bytes: int, quiet: bool) -> Iterator[Optional[Callable[[int, int], None]]]:
    """Yield a ``progress(done, total)`` callback, or None when no bar should be drawn."""
    if not progress_wanted(total_bytes, quiet):
        yield None
        return
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

    columns = (TextColumn("{task.description}"), BarColumn(), DownloadColumn(binary_units=True), TimeRemainingColumn())
    with Progress(*columns, transient=True, redirect_stdout=False, console=_stderr()) as bar:
        task = bar.add_task(label, total=total_bytes)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=max(total, done))

        yield update


class RewriteBar:
    """A rewrite's bar: ``phase(name)`` relabels it (planning, writing, self-check, fsync), ``progress`` fills it."""

    def __init__(self, bar: Any, task: Any, name: str) -> None:
        self.bar, self.task, self.name = bar, task, name

    def phase(self, what: str) -> None:
        self.bar.update(self.task, description=f"{self.name}: {what}")

    def progress(self, done: int, total: int) -> None:
        self.bar.update(self.task, completed=done, total=max(total, done))


class PhaseLines:
    """A rewrite's phases as lines in a log: one as each phase starts, none per byte written."""

    def __init__(self, label: str) -> None:
        self.label = label

    def phase(self, what: str) -> None:
        log_line(f"{self.label}: {what}")

    def progress(self, done: int, total: int) -> None:
        """Bytes written: a log gets no line for them (the phases say where the work is)."""


@contextlib.contextmanager
def rewrite_progress(name: str, total_bytes: int, quiet: bool, *, forced: bool = False,
                     position: Optional[tuple[int, int]] = None) -> Iterator[Optional[RewriteBar | PhaseLines]]:
    """A ``RewriteBar`` for rewriting a program of ``total_bytes`` on a terminal, ``PhaseLines`` in a log (with
    ``--progress``: a line for the file, then one per phase when it is over ``PHASE_LINES_FROM``), or None."""
    if log_wanted(forced, quiet):
        label = f"rewriting {counted(name, position)}"
        log_line(label)
        yield PhaseLines(label) if total_bytes > PHASE_LINES_FROM else None
        return
    if not progress_wanted(total_bytes, quiet):
        yield None
        return
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

    columns = (TextColumn("{task.description}"), BarColumn(), DownloadColumn(binary_units=True), TimeRemainingColumn())
    with Progress(*columns, transient=True, redirect_stdout=False, console=_stderr()) as bar:
        yield RewriteBar(bar, bar.add_task(f"{name}: starting", total=total_bytes), name)


def _lines(label: str) -> Callable[[int, int, str], None]:
    """Progress as plain lines on stderr, one per step (``--progress`` where stderr is no terminal: a CI log)."""
    def advance(done: int, total: int, what: str) -> None:
        print(f"{label}: {what} ({done + 1}/{total})" if total else f"{label}: {what}", file=sys.stderr, flush=True)
    return advance


@contextlib.contextmanager
def steps_progress(label: str, quiet: bool, wanted: bool = True,
                   forced: bool = False) -> Iterator[Optional[Callable[[int, int, str], None]]]:
    """Yield a ``progress(done, total, what)`` callback for work in counted steps (validate's calls), or None.

    Drawn when stderr is a terminal, not ``--quiet``, and ``wanted`` (the caller's judgement that the work is long);
    ``forced`` (``--progress``) draws it whatever the work, as plain lines where stderr is no terminal.
    """
    if quiet or not (wanted or forced) or not sys.stderr.isatty():
        yield _lines(label) if forced and not quiet and not sys.stderr.isatty() else None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[what]}"),
               TimeElapsedColumn())
    with Progress(*columns, transient=True, redirect_stdout=False, console=_stderr()) as bar:
        task = bar.add_task(label, total=None, what="")

        def advance(done: int, total: int, what: str) -> None:
            bar.update(task, completed=done, total=total, what=what)

        yield advance


# Checking this many files takes about a second even when each is small.
MANY_FILES = 16


@contextlib.contextmanager
def files_progress(label: str, paths: list[str], quiet: bool,
                   forced: bool = False) -> Iterator[Optional[Callable[[int, str], None]]]:
    """Yield an ``advance(done, current_name)`` callback for work over several files (called as each starts,
    ``done`` of them finished), or None.

    A bar is drawn only when stderr is a terminal, not ``--quiet``, and the work is long enough to
    notice: many files, or files that together reach ``PROGRESS_THRESHOLD`` bytes.  With ``forced``
    (``--progress``) and stderr no terminal, each file gets a line as its work starts, whatever the work.
    """
    if log_wanted(forced, quiet):
        def line(done: int, name: str) -> None:
            log_line(f"{label} {counted(name, (done + 1, len(paths)))}")
        yield line
        return
    total_bytes = 0
    for path in paths:
        try:
            total_bytes += os.path.getsize(path)
        except OSError:
            pass
    long_enough = len(paths) >= MANY_FILES or (len(paths) > 1 and total_bytes >= PROGRESS_THRESHOLD)
    if quiet or not long_enough or not sys.stderr.isatty():
        yield None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[name]}"))
    with Progress(*columns, transient=True, redirect_stdout=False, console=_stderr()) as bar:
        task = bar.add_task(label, total=len(paths), name="")

        def advance(done: int, name: str) -> None:
            bar.update(task, completed=done, name=name)

        yield advance
