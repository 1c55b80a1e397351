"""pte-devconst: move constants that only device delegates read into device memory, in existing .pte files.

The Python API (``analyze``, ``rewrite``, ``diff``, ``check``, ``validate``) lives in
``pte_devconst.api`` and is imported on first use, so ``import pte_devconst`` stays
light and never imports torch (only ``validate`` does, when called).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._lazy import lazy_exports

__version__ = "0.1.0"

__all__ = ["__version__", "analyze", "rewrite", "diff", "check", "validate", "CheckReport", "FileCheck", "Finding"]

if TYPE_CHECKING:
    from .api import CheckReport, FileCheck, Finding, analyze, check, diff, rewrite, validate


__getattr__ = lazy_exports(__name__, {name: "api" for name in __all__ if name != "__version__"})


def __dir__() -> list[str]:
    return sorted(list(globals()) + __all__)
