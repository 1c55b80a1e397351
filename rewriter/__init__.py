"""Analysis -> plan -> apply -> diff: the rewrite of device-read constants, on top of ``pte_devconst.schema``.

Names are imported on first use, so a command that only analyses (``inspect``,
``check``) never loads the writer, and start-up stays short.
"""

from __future__ import annotations

from pte_devconst._lazy import lazy_exports

_EXPORTS = {
    "Analysis": "analysis", "ConstantVerdict": "analysis", "MethodAnalysis": "analysis",
    "analyze_program": "analysis", "RewriteOptions": "plan", "RewritePlan": "plan", "make_plan": "plan",
    "RewriteResult": "rewrite", "analyze_file": "load", "default_output": "rewrite", "rewrite_file": "rewrite",
}

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_exports(__name__, _EXPORTS)
