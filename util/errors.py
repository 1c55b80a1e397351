"""The exceptions every layer raises; the command line turns them into one line and exit 2."""

from __future__ import annotations

from typing import Optional


class ReportedError(Exception):
    """An error reported as one line naming its file and where in it: a user's problem (``PteDevconstError``)
    or one of the tool's own bugs caught by its checks (``InternalError``)."""

    def __init__(self, what: str, *, file: Optional[str] = None, where: Optional[str] = None) -> None:
        super().__init__(what)
        self.what = what
        self.file = file
        self.where = where

    def with_file(self, file: str) -> "ReportedError":
        if self.file is None:
            self.file = file
        return self

    def __str__(self) -> str:
        parts = [p for p in (self.file, self.where) if p]
        return ": ".join(parts + [self.what])


class PteDevconstError(ReportedError):
    """Base of every error the tool reports to a user: bad input, a refused program, an output it cannot write
    (never a bug)."""


class InternalError(ReportedError):
    """A bug in this tool caught by its own checks (the self-check before a write): reported as one line
    starting ``internal error:``, and never a ``PteDevconstError``, which promises the fault is not ours."""


class FormatError(PteDevconstError):
    """The bytes are not a well-formed .pte/.ptd (bad header, offset, index, size...)."""


class UnsupportedProgramError(PteDevconstError):
    """A well-formed program this tool refuses to rewrite, with the reason."""


class OutputError(PteDevconstError):
    """Writing the output failed (disk full, permissions); the destination is untouched."""


class DeviceNotUsedError(PteDevconstError):
    """``--device`` selects only devices the program does not use: nothing would move for the selection, so the
    rewrite writes nothing rather than an identical copy.  ``used`` names the devices it does use."""

    def __init__(self, what: str, *, used: tuple[str, ...] = (), file: Optional[str] = None) -> None:
        super().__init__(what, file=file)
        self.used = used
