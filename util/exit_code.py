"""``ExitCode``: the one list of the tool's exit codes, used by the command line, ``check``'s report and the docs.

They follow ruff's convention (0 clean, 1 findings, 2 abnormal end), with 3 for a gate that could not judge
everything and the shell's own codes for an interrupt and a closed pipe (docs/cli.md, "Exit codes").
"""

from __future__ import annotations

import enum

from typing import Sequence

__all__ = ["ExitCode", "worst_exit"]


class ExitCode(enum.IntEnum):
    """What a ``pte-devconst`` command's exit status means (an ``int``: ``raise typer.Exit(ExitCode.ERROR)``)."""

    OK = 0  # clean: nothing left to report
    FINDINGS = 1  # check/validate failed; rewrite --exit-non-zero-on-change changed a program
    ERROR = 2  # abnormal end: bad input, an unreadable file, a write error, a usage error
    UNKNOWN = 3  # nothing failed, but not everything was judged: check's constants whose .ptd is missing,
    # validate's programs between which nothing moved
    REPORT_LOST = 74  # the work was done, but its report could not be written to stdout (closed, full): EX_IOERR
    INTERRUPTED = 130  # 128 + SIGINT: Ctrl-C
    BROKEN_PIPE = 141  # 128 + SIGPIPE: the reader of stdout went away (``... | head``)


# From least to most severe: a command that judged several things exits with the most severe of their codes (an
# error beats findings, findings beat what could not be judged).
_SEVERITY = (ExitCode.OK, ExitCode.UNKNOWN, ExitCode.FINDINGS, ExitCode.ERROR)


def worst_exit(codes: Sequence[ExitCode]) -> ExitCode:
    """The most severe of ``codes`` (OK for none)."""
    return max(codes, key=_SEVERITY.index, default=ExitCode.OK)
