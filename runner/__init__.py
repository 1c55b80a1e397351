"""Executing .pte programs with torch the way the ExecuTorch runtime does, counting every device copy.

``run_program`` runs one method and reports outputs and copies; ``validate``
compares an original program with its rewrite.  This package imports torch;
it never imports the rewriter (both stand on ``pte_devconst.schema``).

Imports kept inside functions for start-up speed, in this package: ``torch.profiler`` in
``profiling.profile_call`` (only with ``--profile``); the built-in executors (``demo_backend``,
``reference_backend``) and ``opaque`` in ``delegates``, loaded when a delegate first needs one; ``executorch``
in ``runtime_backend``, imported only for a delegate no executor takes (to ask its runtime for the backend).
"""

from .copies import Cause, CopyEvent, CopyLedger, CopyTotals, Direction, PhaseCopies
from .delegates import (ENTRY_POINT_GROUP, DelegateArg, DelegateContext, DelegateExecutor, DelegateInitContext,
                        DelegateRun, Execution, register_executor)
from .method import LoadedMethod, LoadedProgram
from .run import CallResult, OutputSummary, RunResult, run_program
from .values import RunnerError

__all__ = [
    "Cause", "CopyEvent", "CopyLedger", "CopyTotals", "Direction", "PhaseCopies",
    "ENTRY_POINT_GROUP", "DelegateArg", "DelegateContext", "DelegateExecutor", "DelegateInitContext",
    "DelegateRun", "Execution", "register_executor", "LoadedMethod", "LoadedProgram", "CallResult", "OutputSummary",
    "RunResult", "run_program", "RunnerError",
]
