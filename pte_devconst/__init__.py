"""pte-devconst: move constants that only device delegates read into device memory, in existing .pte files.

The Python API (``analyze``, ``inspect``, ``rewrite``, ``diff``, ``check``, ``run``, ``validate``), the records
they return and the errors they raise (``PteDevconstError`` and its subclasses) are importable from here; each is
imported on first use, so ``import pte_devconst`` stays light and never imports torch (only ``run`` and
``validate`` do, when called, and ``RunResult`` and ``ValidationResult``, their records, when imported).

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

__version__ = "0.4.0"  # the one place: pyproject.toml's version, --version and every report read it

# The public API: the functions, the records they return and the errors they raise.  Everything here is imported
# on first use; none of it imports torch.
__all__ = [
    "__version__",
    # functions (pte_devconst.api)
    "analyze", "inspect", "rewrite", "diff", "check", "run", "validate",
    # what they return
    "ProgramSummary", "InspectReport", "RewriteResult", "ProgramDiff", "CheckReport", "FileCheck", "Finding",
    # what they raise: PteDevconstError for a user's problem (bad input, a refused program, an unwritable output),
    # InternalError for a bug of this tool that its own checks caught
    "PteDevconstError", "FormatError", "UnsupportedProgramError", "OutputError", "InternalError",
]

if TYPE_CHECKING:
    from .api import (CheckReport, FileCheck, Finding, InspectReport, analyze, check, diff, inspect, rewrite, run,
                      validate)
    from .compare.diff import ProgramDiff
    from .inventory.summary import ProgramSummary
    from .rewriter.rewrite import RewriteResult
    # run's and validate's results load torch: importable by name, kept out of __all__ so that
    # ``from pte_devconst import *`` works without the runner extra.
    from .runner.run import RunResult as RunResult
    from .runner.verdict import ValidationResult as ValidationResult
    from .util.errors import FormatError, InternalError, OutputError, PteDevconstError, UnsupportedProgramError

_ERRORS = ("PteDevconstError", "FormatError", "UnsupportedProgramError", "OutputError", "InternalError")
__getattr__ = lazy_exports(__name__, {
    **{name: "api" for name in __all__ if name != "__version__"},
    **{name: "util.errors" for name in _ERRORS},
    "ProgramSummary": "inventory.summary", "ProgramDiff": "compare.diff", "RewriteResult": "rewriter.rewrite",
    "RunResult": "runner.run", "ValidationResult": "runner.verdict",
})


def __dir__() -> list[str]:
    return sorted(list(globals()) + __all__ + ["RunResult", "ValidationResult"])
