"""The exceptions every layer raises; the command line turns them into one line and exit 2."""

from __future__ import annotations

from typing import Optional


class PteDevconstError(Exception):
    """Base of every error the tool reports to a user (never a bug)."""

    def __init__(self, what: str, *, file: Optional[str] = None, where: Optional[str] = None) -> None:
        super().__init__(what)
        self.what = what
        self.file = file
        self.where = where

    def with_file(self, file: str) -> "PteDevconstError":
        if self.file is None:
            self.file = file
        return self

    def __str__(self) -> str:
        parts = [p for p in (self.file, self.where) if p]
        return ": ".join(parts + [self.what])


class FormatError(PteDevconstError):
    """The bytes are not a well-formed .pte/.ptd (bad header, offset, index, size...)."""


class UnsupportedProgramError(PteDevconstError):
    """A well-formed program this tool refuses to rewrite, with the reason."""


class OutputError(PteDevconstError):
    """Writing the output failed (disk full, permissions); the destination is untouched."""
