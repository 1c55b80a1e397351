"""``NamedEnum``: the base of the closed sets of names the reports show (a reader's kind, a method's style, ...).

A member is a ``str``, so it compares equal to its value, renders in a table and
serializes to JSON as that value; ``str()`` and ``format()`` give the value on
every Python version (a plain ``(str, Enum)`` gives ``Class.MEMBER`` from ``str()``, and from
``format()`` and f-strings too from 3.11 on), so an f-string of a member reads as its value.
"""

from __future__ import annotations

import enum

__all__ = ["NamedEnum"]


class NamedEnum(str, enum.Enum):
    """A closed set of names that print, format and serialize as their value."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)
