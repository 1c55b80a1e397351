"""The API's public types and the words its reports are written in: what a renderer of its results may import.

The command line renders what the API returns and imports nothing below it (tests/test_layers.py): the records it
renders and the few helpers that phrase them (a constant's label, a runtime's advice) are named here, each loaded
from its home on first use (PEP 562), so ``import pte_devconst.types`` costs nothing and never imports torch (the
runner's records do, when a command that runs a model asks for them).  A name is added here when a renderer needs
it; its home stays the one place that defines it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pte_devconst._lazy import lazy_exports

if TYPE_CHECKING:
    from pte_devconst.compare.diff import MethodDiff, ProgramDiff
    from pte_devconst.gate.check import Acceptance, CheckReport, Diagnostic, FileCheck, Finding
    from pte_devconst.gate.rules import RULES, GateRule
    from pte_devconst.inventory.summary import MethodSummary, PerCallCopySummary, ProgramSummary, ValueSummary
    from pte_devconst.program.labels import constant_label, name_cell, value_name
    from pte_devconst.program.layout import BufferGrowth, DeviceMemory
    from pte_devconst.program.runtime import DEFAULT_RUNTIME, Runtime
    from pte_devconst.rewriter.derived import reason_kind
    from pte_devconst.rewriter.encodings import Encoding, RuntimeNeed, encodings
    from pte_devconst.rewriter.flows import Flow, MethodFlows
    from pte_devconst.rewriter.names import ProgramNames
    from pte_devconst.rewriter.plan import FoldGain, RewriteOptions, RewritePlan
    from pte_devconst.rewriter.request import RewriteRequest, VerifyMode
    from pte_devconst.rewriter.rewrite import RewriteResult
    from pte_devconst.rewriter.words import conversion_phrase, loads_line, needs_phrase, older_advice, output_clause
    from pte_devconst.runner.copies import CopyTotals
    from pte_devconst.runner.memory import CallerRole
    from pte_devconst.runner.run import OutputSummary, RunResult
    from pte_devconst.runner.verdict import EngineFacts, MethodValidation, ValidationResult, Verdict

# name -> the module (under pte_devconst) that defines it
_HOMES = {
    "MethodDiff": "compare.diff", "ProgramDiff": "compare.diff",
    "Acceptance": "gate.check", "CheckReport": "gate.check", "Diagnostic": "gate.check", "FileCheck": "gate.check",
    "Finding": "gate.check", "RULES": "gate.rules", "GateRule": "gate.rules",
    "MethodSummary": "inventory.summary", "PerCallCopySummary": "inventory.summary",
    "ProgramSummary": "inventory.summary", "ValueSummary": "inventory.summary",
    "constant_label": "program.labels", "name_cell": "program.labels", "value_name": "program.labels",
    "BufferGrowth": "program.layout", "DeviceMemory": "program.layout",
    "DEFAULT_RUNTIME": "program.runtime", "Runtime": "program.runtime", "RuntimeNeed": "rewriter.encodings",
    "reason_kind": "rewriter.derived", "Encoding": "rewriter.encodings", "encodings": "rewriter.encodings",
    "Flow": "rewriter.flows", "MethodFlows": "rewriter.flows", "ProgramNames": "rewriter.names",
    "FoldGain": "rewriter.plan", "RewriteOptions": "rewriter.plan", "RewritePlan": "rewriter.plan",
    "RewriteRequest": "rewriter.request", "VerifyMode": "rewriter.request", "RewriteResult": "rewriter.rewrite",
    "conversion_phrase": "rewriter.words", "loads_line": "rewriter.words", "needs_phrase": "rewriter.words",
    "older_advice": "rewriter.words", "output_clause": "rewriter.words",
    "CopyTotals": "runner.copies", "CallerRole": "runner.memory",
    "OutputSummary": "runner.run", "RunResult": "runner.run",
    "EngineFacts": "runner.verdict", "MethodValidation": "runner.verdict",
    "ValidationResult": "runner.verdict", "Verdict": "runner.verdict",
}

__all__ = ["Acceptance", "BufferGrowth", "CallerRole", "CheckReport", "CopyTotals", "DEFAULT_RUNTIME", "DeviceMemory",
           "Diagnostic", "Encoding", "EngineFacts", "FileCheck", "Finding", "Flow", "FoldGain", "GateRule",
           "MethodDiff", "MethodFlows", "MethodSummary", "MethodValidation", "OutputSummary",
           "PerCallCopySummary", "ProgramDiff", "ProgramNames", "ProgramSummary", "RULES", "RewriteOptions",
           "RewritePlan", "RewriteRequest", "RewriteResult", "RunResult", "Runtime", "RuntimeNeed", "ValidationResult",
           "ValueSummary", "Verdict", "VerifyMode", "constant_label", "conversion_phrase", "encodings", "loads_line",
           "name_cell", "needs_phrase", "older_advice", "output_clause", "reason_kind", "value_name"]
__getattr__ = lazy_exports("pte_devconst", _HOMES)


def __dir__() -> list[str]:
    return __all__
