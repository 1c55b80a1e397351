"""The gate's rules as data: one table (id, name, level, strict-only, what it covers, and the words of a result)
that every reader of a ``check`` asks: a file's status and the exit code, each finding's diagnostic
(``gate/check.py``: ``Diagnostic``, its title, message and fix made from the row), and through those the JSON,
SARIF, GitHub annotations, markdown and text (``cli/check_cmd.py``: one emitter per format, no branch per rule).

A new kind of finding is one row here and the ``FileCheck`` (or ``CheckReport``) field it covers; no rule id,
level or wording of a rule is written anywhere else.  ``tests/test_gate_rules.py`` holds every reader to the table,
``tests/test_check_formats.py`` every format to every rule's own words.
"""

from __future__ import annotations

from typing import Optional

from pte_devconst.rewriter.encodings import encodings
from pte_devconst.util.record import record
from pte_devconst.util.exit_code import ExitCode
from pte_devconst.util.named_enum import NamedEnum

__all__ = ["FILE_RULES", "GateRule", "Level", "REPORT_RULES", "RULES", "Scope", "rule_covering"]


class Level(NamedEnum):
    """How loud a rule is, in SARIF's words (GitHub's annotations say ``notice`` for ``note``)."""

    ERROR = "error"
    WARNING = "warning"
    NOTE = "note"

    @property
    def github(self) -> str:
        """The GitHub Actions workflow command of this level (``::error``, ``::warning``, ``::notice``)."""
        return "notice" if self is Level.NOTE else self.value


class Scope(NamedEnum):
    """Where a rule's results live: on one file (``FileCheck``) or on the whole check (``CheckReport``)."""

    FILE = "file"
    REPORT = "report"


@record
class GateRule:
    """One rule of the gate.

    ``covers`` names the field of ``FileCheck`` (scope file) or ``CheckReport`` (scope report) that holds what
    the rule found.  A ``strict_only`` rule fails the gate only with ``--strict``; without it, it is reported at
    its ``advisory`` level and exit code.
    """

    id: str
    name: str
    covers: str
    scope: Scope
    level: Level
    exit_code: ExitCode
    strict_only: bool
    advisory: Level
    advisory_exit: ExitCode
    title: str  # what one result says, in a few words (SARIF's short description, markdown's section heading)
    help: str  # what to do about it
    once: bool = False  # annotated once for the whole check, not per file (it restates the user's own options)
    # The words of one file's result (``gate.Diagnostic``): "{count} {noun}s {what}"; {runtime} is the project's
    # release, {selection} the options that left things out.  Empty for a rule whose result is a message of its own
    # (an error, a device no program uses, an accept that matched nothing).
    noun: str = ""
    what: str = ""
    per_call: bool = True  # its items' bytes are copied on every call (else: bytes the file holds)
    # What fixes it, for a file: {rewrite} is the rewrite that fixes it for the project's runtime; "" none.
    fix: str = ""

    def level_for(self, strict: bool) -> Level:
        return self.level if strict or not self.strict_only else self.advisory

    def exit_for(self, strict: bool) -> ExitCode:
        return self.exit_code if strict or not self.strict_only else self.advisory_exit

    def fails(self, strict: bool) -> bool:
        """Whether what this rule finds fails the gate (exit 1)."""
        return self.exit_for(strict) is ExitCode.FINDINGS

    def to_json(self, strict: bool) -> dict[str, object]:
        return {"id": self.id, "name": self.name, "covers": self.covers, "scope": self.scope.value,
                "level": self.level_for(strict).value, "strict_only": self.strict_only,
                "exit_code": int(self.exit_for(strict)), "once": self.once, "title": self.title}


def _rule(id: str, name: str, covers: str, level: Level, exit_code: ExitCode, title: str, help: str, *,
          scope: Scope = Scope.FILE, advisory: Optional[Level] = None, advisory_exit: Optional[ExitCode] = None,
          once: bool = False, noun: str = "", what: str = "", per_call: bool = True, fix: str = "") -> GateRule:
    strict_only = advisory is not None
    return GateRule(id, name, covers, scope, level, exit_code, strict_only, advisory or level,
                    advisory_exit if advisory_exit is not None else exit_code, title, help, once, noun, what,
                    per_call, fix)


# The runtime words of the rules' help come from the registered encodings (``rewriter/encodings``): the oldest,
# which a project on an older runtime rewrites with, and the newest, what the default writes.
_OLDEST, _NEWEST = encodings()[0], encodings()[-1]

RULES: tuple[GateRule, ...] = (
    _rule("PDC001", "copied-every-call", "findings", Level.ERROR, ExitCode.FINDINGS,
          "A constant read only by a device delegate is copied host-to-device on every call",
          f"pte-devconst rewrite --in-place FILE keeps it in device memory, copied once ({_OLDEST.option} for a "
          f"project that ships ExecuTorch {_OLDEST.runtime.value}).",
          noun="{constant}", what="copied to a device on every call", fix="{rewrite}"),
    _rule("PDC002", "copy-stays", "stays", Level.ERROR, ExitCode.FINDINGS,
          "A constant-derived value is copied to a device on every call and the rewrite cannot move it",
          "The reason says why (read on the host too, transposed on the host, ...); --strict fails on it.",
          advisory=Level.NOTE, advisory_exit=ExitCode.OK,
          noun="constant-derived value", what="copied on every call that the rewrite cannot move"),
    _rule("PDC003", "not-judged", "unknown", Level.ERROR, ExitCode.FINDINGS,
          "A constant-derived value could not be judged: an external constant whose .ptd is missing (or a fold "
          "that needs torch to judge)",
          "Put NAME.ptd next to NAME.pte or pass --ptd FILE.ptd (install torch for the folds); --strict fails on it.",
          advisory=Level.WARNING, advisory_exit=ExitCode.UNKNOWN,
          noun="constant", what="not judged", fix="put {stem}.ptd next to it or pass --ptd FILE.ptd"),
    _rule("PDC004", "cannot-check", "error", Level.ERROR, ExitCode.ERROR,
          "The file could not be checked", "The message says what is wrong with it."),
    _rule("PDC005", "device-not-used", "device_problems", Level.ERROR, ExitCode.ERROR,
          "A --device names a device no program checked uses: nothing was judged for it",
          "Correct the --device option (or the config's device), or drop it.", scope=Scope.REPORT),
    _rule("PDC006", "left-out", "filtered", Level.NOTE, ExitCode.OK,
          "Copied to a device on every call but left out by --device or --min-bytes, not judged",
          "Widen --device or lower --min-bytes to judge it.", once=True,
          noun="constant-derived value", what="copied to a device on every call left out by {selection}, not judged"),
    _rule("PDC007", "unused-accept", "unused_accepts", Level.WARNING, ExitCode.OK,
          "An accepted finding of the project's config matched nothing",
          "Remove the entry from [[tool.pte-devconst.accept]].", scope=Scope.REPORT),
    _rule("PDC008", "needs-newer-runtime", "runtime_findings", Level.ERROR, ExitCode.FINDINGS,
          "A tensor only a newer ExecuTorch runtime than the project's loads "
          f"({_OLDEST.refuses} needs {_NEWEST.runtime.value})",
          f"pte-devconst rewrite {_OLDEST.option} --in-place FILE copies it once, {_OLDEST.when}, instead: a "
          f"{_OLDEST.runtime.value} runtime loads that.",
          noun="tensor", what="only a newer ExecuTorch than {runtime} loads", per_call=False, fix="{rewrite}"),
)

FILE_RULES = tuple(rule for rule in RULES if rule.scope is Scope.FILE)
REPORT_RULES = tuple(rule for rule in RULES if rule.scope is Scope.REPORT)

def rule_covering(field: str) -> GateRule:
    """The rule whose results are in ``field`` (``findings``, ``stays``, ...)."""
    for rule in RULES:
        if rule.covers == field:
            return rule
    raise KeyError(field)
