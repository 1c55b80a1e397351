"""Analysis -> plan -> apply -> verify: the rewrite of device-read constants, on top of ``pte_devconst.program``.

Names are imported on first use, so a command that only analyses (``inspect``, ``check``) never loads the writer,
and start-up stays short.  The commands that only read programs have rooms of their own above this one
(``gate/``: ``check``; ``compare/``: ``diff``; ``inventory/``: ``inspect``'s summary); nothing here imports them.
Paths arrive resolved from the API layer (the .ptd rule and default output name live in ``pte_devconst.paths``);
nothing here imports it.

``request`` holds what a command asks (``RewriteRequest``, ``VerifyMode``), resolved once by the API.

Imports kept inside functions for start-up speed, in this package: ``fold.compute`` (torch) in
``apply``, ``verify`` and ``fold.refusals``, only when a chain folds or a cast must be checked;
``importlib.util`` in ``fold.refusals.torch_found``, which looks for torch without importing it.  The modules
import each other one way (``tests/test_structure.py``): ``analysis -> fold -> method_context``.
"""

from __future__ import annotations

from pte_devconst._lazy import lazy_exports

_EXPORTS = {
    "Analysis": "model.analysis", "ConstantVerdict": "model.analysis", "MethodAnalysis": "model.analysis",
    "analyze_program": "model.analysis", "RewriteOptions": "plan", "RewritePlan": "plan", "make_plan": "plan",
    "RewriteResult": "rewrite", "analyze_file": "load", "rewrite_file": "rewrite", "RewriteRequest": "request",
    "VerifyMode": "request",
}

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_exports(__name__, _EXPORTS)
