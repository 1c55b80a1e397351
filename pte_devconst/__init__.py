"""pte-devconst: move constants that only device delegates read into device memory, in existing .pte files.

The Python API (``analyze``, ``inspect``, ``rewrite``, ``diff``, ``check``, ``run``, ``validate``) lives in
``pte_devconst.api`` and is imported on first use, so ``import pte_devconst`` stays
light and never imports torch (only ``run`` and ``validate`` do, when called).

Layers (tests/test_layers.py): ``util`` <- ``schema`` <- ``program`` <- ``rewriter``, ``runner`` <- this
package (``api``, ``paths``) <- ``cli``.  ``paths`` decides which files a command names and which .ptd goes
with each program (``paths.programs``); the API resolves them into one request per program and passes it
down, so no lower layer guesses a file.

Imports kept inside functions, in this package: ``api`` is imported on first use (above); in it, only the
runner (torch: ``run``, ``validate``) and the writer (``rewriter.rewrite``: ``inspect``/``check`` never load
it, tests/test_read_only.py) are imported when called.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._lazy import lazy_exports

__version__ = "0.1.0"  # the one place: pyproject.toml's version, --version and every report read it

__all__ = ["__version__", "analyze", "inspect", "rewrite", "diff", "check", "run", "validate", "CheckReport",
           "FileCheck", "Finding", "InspectReport"]

if TYPE_CHECKING:
    from .api import (CheckReport, FileCheck, Finding, InspectReport, analyze, check, diff, inspect, rewrite, run,
                      validate)


__getattr__ = lazy_exports(__name__, {name: "api" for name in __all__ if name != "__version__"})


def __dir__() -> list[str]:
    return sorted(list(globals()) + __all__)
