"""ExecuTorch releases (``Runtime``) and the default a rewrite targets.  Which release loads what is the
encodings' to say (``rewriter/encodings``: ``required_runtime`` answers for a file, with a ``RuntimeNeed``).
"""

from __future__ import annotations

import re
from typing import Optional

from pte_devconst.util.record import record


@record(order=True)
class Runtime:
    """An ExecuTorch release, by its minor version (a patch release loads what its minor does)."""

    major: int
    minor: int

    @property
    def value(self) -> str:
        """``1.6``: how options, config files and reports spell it."""
        return f"{self.major}.{self.minor}"

    def __str__(self) -> str:
        return self.value

    @property
    def minimum(self) -> str:
        """``ExecuTorch >= 1.6``."""
        return f"ExecuTorch >= {self.value}"

    @classmethod
    def read(cls, text: str) -> Optional["Runtime"]:
        """``1.5``, ``v1.5``, ``1.5.1`` (any patch) as a release; None when ``text`` is not one."""
        found = re.fullmatch(r"v?(\d{1,4})\.(\d{1,4})(?:\.\d{1,4})*", text.strip().lower())
        return cls(int(found.group(1)), int(found.group(2))) if found else None


# The release a rewrite targets when nobody says: written here and nowhere else.
DEFAULT_RUNTIME = Runtime(1, 6)
