"""``check``, the gate: its model (``Finding``, ``FileCheck``, ``CheckReport``) and its rules.

A program's findings are the placements (and, with fold, the folds) of the very plan ``rewrite`` would make:
one plan per program, made once, from which everything the report says is read: what moves (the findings),
what the options left out (``--device``/``--min-bytes``: the plan's skipped constants and chains, reported as
``filtered``, never as clean), the external constants not judged for want of their .ptd, the constant-derived
copies that stay with their reason, the fold hint and the device memory.  The project's accepted findings move
to ``accepted``; the status and the exit code (``ExitCode``) follow from what is left.

The API resolves the command line into a ``CheckRequest`` (programs paired with their data, options, the
accepted findings); ``check_programs`` judges it and never raises for a bad file: each becomes a ``FileCheck``
with ``error`` set.  Where to add a check to the gate: ``check_program`` (what a file reports) and
``FileCheck.status``/``CheckReport.exit_code`` (what fails).
"""

from __future__ import annotations

import fnmatch
import shlex
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Optional, Sequence, Union

from pte_devconst.program.labels import value_name
from pte_devconst.schema.pte_file import ProgramBytes
from pte_devconst.util.errors import PteDevconstError
from pte_devconst.util.exit_code import ExitCode, worst_exit
from pte_devconst.util.record import record
from pte_devconst.program.labels import constant_label
from pte_devconst.util.units import exact_bytes, plural
from pte_devconst.util.globs import matches_glob
from pte_devconst.util.named_enum import NamedEnum

from pte_devconst.program.layout import DeviceMemory
from pte_devconst.rewriter.model.analysis import Analysis
from pte_devconst.rewriter.derived import DerivedCopy, DerivedStatus, derived_copies, reasons_in_brief
from pte_devconst.rewriter.encodings import DEFAULT_RUNTIME, Runtime, RuntimeNeed, required_runtime
from pte_devconst.rewriter.fold import NOT_JUDGED, FoldChain, fold_refusals, torch_found
from pte_devconst.rewriter.load import analyze_opened, opened
from pte_devconst.rewriter.names import name_opened
from pte_devconst.rewriter.plan import (FoldGain, RewriteOptions, RewritePlan, devices_used, make_plan,
                                        safe_fold_gain, skip_reason)
from pte_devconst.rewriter.request import Namer

from .rules import FILE_RULES, REPORT_RULES, RULES, GateRule, Level, Scope, rule_covering

__all__ = ["Acceptance", "CheckReport", "CheckRequest", "CheckStatus", "CheckTarget", "Diagnostic", "FileCheck",
           "Finding",
           "check_programs", "device_memory_json", "findings_json"]


@record
class Finding:
    """A constant-derived value copied host-to-device on every call.

    In ``FileCheck.findings`` a constant the rewrite can move; in ``FileCheck.unknown`` an external constant
    that could move if its .ptd showed matching data; in ``FileCheck.stays`` a copy the rewrite cannot
    remove, with ``reason`` saying why (read on the host too, transposed on the host, ...).
    """

    file: str
    method: str
    value: int
    name: str
    device: str
    nbytes: int
    copies_per_call: int
    reason: str = ""  # why it stays copied (``FileCheck.stays``); empty for a finding
    accepted: str = ""  # in ``FileCheck.accepted``: the reason the project gave for accepting it
    rule: str = ""  # in ``FileCheck.accepted``: the id of the rule that found it (rules.RULES)

    @property
    def bytes_per_call(self) -> int:
        return self.nbytes * self.copies_per_call

    @property
    def weight(self) -> int:
        """What a report measures it by: its bytes per call when it is copied per call, else the bytes it holds (a
        tensor a runtime cannot load)."""
        return self.bytes_per_call if self.copies_per_call else self.nbytes


@record
class Acceptance:
    """A finding a project accepts, with its reason (``[[tool.pte-devconst.accept]]``): ``check`` reports it as
    accepted instead of failing on it.

    ``program`` is a glob (``models/*.pte``) relative to ``root`` (the config file's folder); ``method`` one method
    (None: any); ``constant`` a name or a shell-style pattern of names (``encoder.weight``, ``layers.*.bias``:
    ``*`` matches any characters, dots too) or ``value`` an index (``value 3``), at least one of them.
    """

    program: str
    reason: str
    method: Optional[str] = None
    constant: Optional[str] = None
    value: Optional[int] = None
    root: Optional[str] = None
    origin: str = ""  # where it was written (``pyproject.toml: accept[2]``), for the warning when it matches nothing

    def matches(self, finding: Finding) -> bool:
        return ((self.method is None or self.method == finding.method)
                and (self.constant is None or fnmatch.fnmatchcase(finding.name, self.constant))
                and (self.value is None or self.value == finding.value)
                and matches_glob(finding.file, self.program, self.root))

    def describe(self) -> str:
        what = [f"program {self.program!r}"] + ([f"method {self.method!r}"] if self.method is not None else [])
        what += [f"constant {self.constant!r}"] if self.constant is not None else []
        what += [f"value {self.value}"] if self.value is not None else []
        return ", ".join(what)


class CheckStatus(NamedEnum):
    """One file's result in ``check``, in a word (the JSON's ``status``): its rules' most severe exit code."""

    OK = "ok"
    FINDINGS = "findings"  # what fails the gate
    UNKNOWN = "unknown"  # only external constants that could not be judged
    ERROR = "error"  # the file could not be read

    @classmethod
    def of(cls, code: ExitCode) -> "CheckStatus":
        return {ExitCode.ERROR: cls.ERROR, ExitCode.FINDINGS: cls.FINDINGS,
                ExitCode.UNKNOWN: cls.UNKNOWN}.get(code, cls.OK)


@record
class FileCheck:
    """One file's result: its findings, the constants it could not judge, or the error that kept it from being read."""

    file: str
    ptd: Optional[str]
    constants: int  # constants examined
    findings: tuple[Finding, ...]
    error: Optional[str] = None
    note: Optional[str] = None  # e.g. why `rewrite` would refuse this program
    unknown: tuple[Finding, ...] = ()  # external constants whose .ptd was not found or given
    foldable: int = 0  # without fold=True: tensors `rewrite --fold` would move beyond a plain rewrite
    foldable_bytes_per_call: int = 0
    stays: tuple[Finding, ...] = ()  # constant-derived copies the rewrite cannot remove, each with its reason
    strict: bool = False  # stays count as findings
    # What --device/--min-bytes left out: findings, unknown and stays the check would report without them, each
    # with the option that left it out as its reason (copied per call all the same: never "clean").
    filtered: tuple[Finding, ...] = ()
    devices: tuple[str, ...] = ()  # the non-CPU devices the program uses (delegates, planned buffers, copies)
    device_selection: Optional[tuple[str, ...]] = None  # --device, when given
    device_memory: Optional[DeviceMemory] = None  # planned device memory now and after the rewrite
    accepted: tuple[Finding, ...] = ()  # findings (or stays, or unknown) the project accepts, each with its reason
    runtime_need: Optional[RuntimeNeed] = None  # the oldest runtime that loads the file as it is
    # each tensor the project's runtime (--runtime) cannot load (``RuntimeNeed.tensors``), with its fix
    runtime_findings: tuple[Finding, ...] = ()

    @property
    def filtered_bytes_per_call(self) -> int:
        return sum(f.bytes_per_call for f in self.filtered)

    @property
    def unused_selection(self) -> bool:
        """--device names only devices this program does not use: nothing in it was judged."""
        return (self.error is None and self.device_selection is not None
                and not set(self.device_selection) & set(self.devices))

    def found(self, rule: GateRule) -> tuple[Finding, ...]:
        """What ``rule`` (a file rule of ``rules.RULES``) found in this file; nothing for ``cannot-check``,
        whose result is ``error``."""
        found = getattr(self, rule.covers)
        return found if isinstance(found, tuple) else ()

    def count(self, rule: GateRule) -> int:
        """How many results ``rule`` has in this file (an error is one)."""
        found = getattr(self, rule.covers)
        return len(found) if isinstance(found, tuple) else int(bool(found))

    def fired(self) -> tuple[GateRule, ...]:
        """The file rules that found something here, in the table's order."""
        return tuple(rule for rule in FILE_RULES if getattr(self, rule.covers))

    @property
    def failing(self) -> tuple[Finding, ...]:
        """What fails the gate (exit 1), by the rules' table: the findings; with ``strict`` every constant-derived
        per-call copy, also what stays and what was not judged (copied per call either way)."""
        return tuple(x for rule in FILE_RULES if rule.fails(self.strict) for x in self.found(rule))

    @property
    def exit_code(self) -> ExitCode:
        """The most severe exit code of the rules that found something in this file."""
        return worst_exit([rule.exit_for(self.strict) for rule in self.fired()])

    @property
    def status(self) -> CheckStatus:
        return CheckStatus.of(self.exit_code)

    @property
    def bytes_per_call(self) -> int:
        """Bytes per call of the findings: what a rewrite saves."""
        return sum(f.bytes_per_call for f in self.findings)

    @property
    def stays_bytes_per_call(self) -> int:
        return sum(f.bytes_per_call for f in self.stays)


@record
class CheckReport:
    files: tuple[FileCheck, ...]
    min_bytes: int
    fold: bool = False  # findings include what rewrite --fold would move
    strict: bool = False
    devices: Optional[tuple[str, ...]] = None  # --device, when given
    unused_accepts: tuple[Acceptance, ...] = ()  # accepted findings that matched nothing (a warning, as ruff's RUF100)
    runtime: Runtime = DEFAULT_RUNTIME  # the release the project deploys: its fix commands and its runtime rule

    @property
    def runtime_findings(self) -> tuple[Finding, ...]:
        """Tensors that only a newer runtime than ``runtime`` loads, over all files."""
        return tuple(f for file in self.files for f in file.runtime_findings)

    @property
    def findings(self) -> tuple[Finding, ...]:
        return tuple(f for file in self.files for f in file.findings)

    @property
    def filtered(self) -> tuple[Finding, ...]:
        """What --device/--min-bytes left out, over all files (``FileCheck.filtered``)."""
        return tuple(f for file in self.files for f in file.filtered)

    @property
    def filtered_bytes_per_call(self) -> int:
        return sum(f.bytes_per_call for f in self.filtered)

    @property
    def used_devices(self) -> tuple[str, ...]:
        """The non-CPU devices the programs that could be read use."""
        return tuple(sorted({d for f in self.files if not f.error for d in f.devices}))

    @property
    def unused_devices(self) -> tuple[str, ...]:
        """Devices given with --device that no program checked uses (a typo in CI): an error, as nothing was
        judged for them.  Empty when no program could be read (those errors say enough)."""
        if self.devices is None or all(f.error for f in self.files):
            return ()
        used = self.used_devices
        return tuple(d for d in self.devices if d not in used)

    @property
    def device_problems(self) -> tuple[str, ...]:
        """One line per device no program uses (exit 2)."""
        used = self.used_devices
        return tuple(f"--device {d}: no program checked uses this device (they use "
                     f"{', '.join(used) or 'no device'}): nothing was judged for it" for d in self.unused_devices)

    @property
    def warnings(self) -> tuple[str, ...]:
        """One line per program that uses none of the devices given with --device: nothing in it was judged."""
        return tuple(f"{f.file}: uses none of the devices selected (--device {', '.join(f.device_selection or ())}); "
                     f"it uses {', '.join(f.devices) or 'no device'}: nothing in it was judged"
                     for f in self.files if f.unused_selection)

    @property
    def accepted(self) -> tuple[Finding, ...]:
        return tuple(f for file in self.files for f in file.accepted)

    @property
    def unknown(self) -> tuple[Finding, ...]:
        return tuple(f for file in self.files for f in file.unknown)

    @property
    def stays(self) -> tuple[Finding, ...]:
        return tuple(f for file in self.files for f in file.stays)

    @property
    def failing(self) -> tuple[Finding, ...]:
        return tuple(f for file in self.files for f in file.failing)

    @property
    def errors(self) -> tuple[FileCheck, ...]:
        return tuple(file for file in self.files if file.error)

    @property
    def passed(self) -> bool:
        return self.exit_code is ExitCode.OK

    @property
    def exit_code(self) -> ExitCode:
        """The most severe exit code of every rule that found something (``rules.RULES``): ERROR some file
        could not be checked, or a ``--device`` no program uses (a gate that judged nothing must not pass);
        FINDINGS some file still copies an eligible constant per call (with ``strict``: any constant-derived
        value, judged or not); UNKNOWN nothing else, but some constant could not be judged; else OK."""
        codes = [file.exit_code for file in self.files]
        codes += [rule.exit_for(self.strict) for rule in REPORT_RULES if getattr(self, rule.covers)]
        return worst_exit(codes)

    def count(self, rule: GateRule) -> int:
        """How many results ``rule`` has in this check (accepted ones not counted)."""
        if rule.scope is Scope.REPORT:
            return len(getattr(self, rule.covers))
        return sum(f.count(rule) for f in self.files)

    @property
    def bytes_per_call(self) -> int:
        return sum(f.bytes_per_call for f in self.findings)

    @property
    def foldable(self) -> int:
        """Without ``fold=True``: how many more tensors ``rewrite --fold`` would move, over all files."""
        return sum(f.foldable for f in self.files)

    @property
    def foldable_bytes_per_call(self) -> int:
        return sum(f.foldable_bytes_per_call for f in self.files)

    @property
    def stays_bytes_per_call(self) -> int:
        return sum(f.bytes_per_call for f in self.stays)

    @property
    def fold_gain(self) -> Optional[FoldGain]:
        """Without ``fold=True``: what ``rewrite --fold`` would move beyond a plain rewrite (None: nothing more)."""
        return FoldGain(self.foldable, self.foldable_bytes_per_call) if self.foldable else None

    def diagnostics(self) -> tuple["Diagnostic", ...]:
        """Every result of the check as data: one per file and rule that found something (the table's order), then
        what is reported once for the whole check.  Every output format renders these, the same way for every rule
        (``cli/check_cmd.py``)."""
        found: list[Diagnostic] = []
        for f in self.files:
            found += [d for rule in FILE_RULES if not rule.once
                      if (d := _file_diagnostic(self, f, rule)) is not None]
        for rule in FILE_RULES:
            if rule.once:
                items = tuple(x for f in self.files for x in f.found(rule))
                if items:
                    found.append(_items_diagnostic(self, rule, "", items, ()))
        for rule in REPORT_RULES:
            for entry in getattr(self, rule.covers):
                text = entry if isinstance(entry, str) else \
                    f"{entry.origin}: accepted finding matched nothing: {entry.describe()}"
                found.append(Diagnostic(rule, rule.level_for(self.strict), "", rule.name.replace("-", " "), text))
        return tuple(found)

    def to_json(self) -> dict[str, Any]:
        """``check``'s JSON document (cli/report.schema.json)."""
        return {
            "fold_hint": ({"tensors": self.foldable, "bytes_per_call": self.foldable_bytes_per_call}
                          if self.foldable else None),
            "passed": self.passed,
            "exit_code": int(self.exit_code),
            "fold": self.fold,
            "strict": self.strict,
            "runtime": self.runtime.value,
            "runtime_findings": len(self.runtime_findings),
            "min_bytes": self.min_bytes,
            "findings": len(self.findings),
            "bytes_per_call": self.bytes_per_call,
            "errors": len(self.errors),
            "unknown": len(self.unknown),
            "stays": len(self.stays),
            "stays_bytes_per_call": self.stays_bytes_per_call,
            "filtered": len(self.filtered),
            "filtered_bytes_per_call": self.filtered_bytes_per_call,
            "devices": None if self.devices is None else list(self.devices),
            "device_problems": list(self.device_problems),
            "warnings": list(self.warnings),
            "accepted": len(self.accepted),
            "rules": [{**rule.to_json(self.strict), "results": self.count(rule)} for rule in RULES],
            "diagnostics": [d.to_json() for d in self.diagnostics()],
            "unused_accepts": [{"program": a.program, "method": a.method, "constant": a.constant, "value": a.value,
                                "reason": a.reason, "origin": a.origin} for a in self.unused_accepts],
            "files": [{
                "file": f.file, "ptd": f.ptd, "status": f.status, "constants": f.constants,
                "bytes_per_call": f.bytes_per_call, "error": f.error, "note": f.note,
                "findings": findings_json(f.findings, "findings"), "unknown": findings_json(f.unknown, "unknown"),
                "stays": findings_json(f.stays, "stays", reasons=True), "stays_bytes_per_call": f.stays_bytes_per_call,
                "device_memory": device_memory_json(f.device_memory),
                "filtered": findings_json(f.filtered, "filtered", reasons=True),
                "filtered_bytes_per_call": f.filtered_bytes_per_call, "devices": list(f.devices),
                "accepted": [{**item, "accepted": x.accepted, "reason": x.reason}
                             for item, x in zip(findings_json(f.accepted), f.accepted)],
                "runtime_need": f.runtime_need.to_json() if f.runtime_need is not None else None,
                "runtime_findings": findings_json(f.runtime_findings, reasons=True),
            } for f in self.files],
        }


@record
class Diagnostic:
    """One rule's result on one file (``file``; "" for one on the whole check), as data: its rule and level, a
    title and a message in the rule's own words (``rules.RULES``: noun, what, fix), the findings it covers
    (and those of the same rule the project accepts), their bytes and the fix.  Every format renders any
    diagnostic the same way, whatever its rule."""

    rule: GateRule
    level: Level
    file: str
    title: str  # "4 constants copied to a device on every call"
    message: str  # the whole sentence: totals, the largest item (and its reason), the fix
    items: tuple[Finding, ...] = ()
    accepted: tuple[Finding, ...] = ()
    bytes: int = 0  # per call when the rule's items are copied per call, else the bytes the file holds
    fix: str = ""  # a command or what to do; "" when the rule has none

    noun: str = ""  # what each item is, in the check's words ("constant", "tensor")
    what: str = ""  # what the rule says of the items ("copied to a device on every call")

    @property
    def per_call(self) -> bool:
        return self.rule.per_call

    def titled(self, count: int) -> str:
        """The title for ``count`` items of this rule (a summary over several files)."""
        return f"{plural(count, self.noun)} {self.what}" if self.noun else self.title

    def fix_for(self, file: str) -> str:
        """The fix with ``file`` in place of this diagnostic's file."""
        return self.fix.replace(shlex.quote(self.file), file) if self.file else self.fix

    def to_json(self) -> dict[str, Any]:
        return {"rule": self.rule.id, "name": self.rule.name, "level": self.level.value, "file": self.file,
                "title": self.title, "message": self.message, "count": len(self.items),
                "accepted": len(self.accepted), "bytes": self.bytes, "per_call": self.per_call, "fix": self.fix}


def _words(template: str, report: CheckReport) -> str:
    """A rule's words with the check's own values: the project's runtime, the options that left things out, and
    what a moved item is called (a tensor when folds count)."""
    selection = " and ".join(([f"--device {','.join(report.devices)}"] if report.devices is not None else [])
                             + ([f"--min-bytes {report.min_bytes}"] if report.min_bytes else []))
    return template.format(runtime=report.runtime.value, selection=selection or "the options",
                           constant="tensor" if report.fold else "constant")


def _file_diagnostic(report: CheckReport, f: FileCheck, rule: GateRule) -> Optional[Diagnostic]:
    """What ``rule`` found in ``f``, or None."""
    if rule.covers == "error":  # the rule whose result is the file's error message
        if not f.error:
            return None
        text = f.error[len(f.file) + 2:] if f.file and f.error.startswith(f"{f.file}: ") else f.error
        return Diagnostic(rule, rule.level_for(report.strict), f.file, rule.name.replace("-", " "), text)
    items = f.found(rule)
    accepted = tuple(x for x in f.accepted if x.rule == rule.id)
    if not items and not accepted:
        return None
    return _items_diagnostic(report, rule, f.file, items, accepted)


def _items_diagnostic(report: CheckReport, rule: GateRule, file: str, items: tuple[Finding, ...],
                      accepted: tuple[Finding, ...]) -> Diagnostic:
    from pte_devconst.rewriter.words import fix_command

    noun, what = _words(rule.noun or "{constant}", report), _words(rule.what, report)
    if not file:  # a result on the whole check: how many files it spans
        what += f" (in {plural(len({x.file for x in items}), 'file')})"
    total = sum(x.weight for x in items)
    title = f"{plural(len(items), noun)} {what}" if items else f"all {plural(len(accepted), noun)} accepted"
    stem = Path(file).stem if file else "NAME"
    fix = rule.fix.format(rewrite=fix_command(report.runtime, report.fold, file or "FILE"), stem=stem) \
        if rule.fix else ""
    shown = items or accepted
    worst = max(shown, key=lambda x: x.weight)
    reason = f": {worst.reason}" if worst.reason else ""
    measure = " per call" if rule.per_call else ""
    message = (f"{title} ({exact_bytes(total)}{measure}); the largest: {worst.method}: "
               f"{constant_label(worst.name, worst.value)}, {exact_bytes(worst.weight)}{measure} "
               f"{'to' if rule.per_call else 'on'} {worst.device}{reason}.")
    reasons = [x.reason for x in items if x.reason]
    if len(set(reasons)) > 1:  # what the largest's reason leaves out
        message += f" Why: {reasons_in_brief(reasons)}."
    if fix:
        message += f" Fix: {fix}."
    if rule.strict_only and not report.strict and items:
        message += " --strict fails on them."
    if accepted:
        message += f" {len(accepted):,} {'more ' if items else ''}accepted by the project's config."
    return Diagnostic(rule, rule.level_for(report.strict), file, title, message, items, accepted, total, fix, noun,
                      what)


def device_memory_json(memory: Optional[DeviceMemory]) -> Optional[dict[str, Any]]:
    """The ``device_memory`` object of a report (cli/report.schema.json), or None."""
    if memory is None:
        return None
    return {"before": memory.before, "after": memory.after, "bound": memory.bound,
            "without_relayout": memory.appended, "warning": memory.warning(), "kept_offsets": list(memory.kept_offsets)}


def findings_json(findings: tuple[Finding, ...], covers: Optional[str] = None, reasons: bool = False
                  ) -> list[dict[str, Any]]:
    """Findings as the JSON lists them, each with its rule's id: the rule covering the field ``covers`` (None:
    each finding's own, as accepted ones carry it)."""
    rule = rule_covering(covers).id if covers is not None else None
    return [{"rule": rule or x.rule, "method": x.method, "value": x.value, "name": x.name, "device": x.device,
             "nbytes": x.nbytes, "copies_per_call": x.copies_per_call, "bytes_per_call": x.bytes_per_call,
             **({"reason": x.reason} if reasons else {})} for x in findings]


# --------------------------------------------------------------------------------------------- the rules


@record
class CheckTarget:
    """One program to judge, with its data (decided by the API's .ptd rule) and how to give it data it lacks."""

    program: Union[Path, ProgramBytes]
    ptd: Optional[Path] = None
    ptd_hint: str = "pass ptd=FILE.ptd"  # for a file: "put NAME.ptd next to it or pass --ptd FILE.ptd"


@record
class CheckProblem:
    """An argument that names no program to judge (a pattern that matched nothing, a --ptd that pairs with
    nothing): a ``FileCheck`` with an error, in its place among the results."""

    file: str
    text: str
    ptd: Optional[str] = None


@record
class CheckRequest:
    """What one ``check`` judges, resolved once: the programs (and problems) in order, and how to judge them."""

    items: tuple[Union[CheckTarget, CheckProblem], ...]
    options: RewriteOptions
    strict: bool = False
    accept: tuple[Acceptance, ...] = ()
    names: Optional[Namer] = None


def check_programs(request: CheckRequest, progress: Optional[Callable[[int, int, str], None]] = None
                   ) -> CheckReport:
    """Judge every program of ``request``; never raises for a bad file (its ``FileCheck.error`` says why).

    ``progress(done, total, name)`` is called as each program read from a file starts (``done`` of ``total``
    finished: a log names the file being judged, a bar counts those done).
    """
    results: list[FileCheck] = []
    used: set[int] = set()
    files = sum(1 for i in request.items if isinstance(i, CheckTarget) and isinstance(i.program, Path))
    done = 0
    for item in request.items:
        if isinstance(item, CheckProblem):
            results.append(FileCheck(item.file, item.ptd, 0, (), item.text))
            continue
        name, data = str(item.program), str(item.ptd) if item.ptd else None
        if isinstance(item.program, Path) and progress is not None:
            progress(done, files, name)
        try:
            results.append(_accepting(check_program(item, request), request.accept, used))
        except PteDevconstError as error:
            text = " ".join(str(error).split())
            results.append(FileCheck(name, data, 0, (), text if name in text or not isinstance(item.program, Path)
                                     else f"{name}: {text}"))
        except OSError as error:
            results.append(FileCheck(name, data, 0, (), f"{name}: {error.strerror or error}"))
        if isinstance(item.program, Path):
            done += 1
    if not results:
        results.append(FileCheck("", None, 0, (), "no files given"))
    options = request.options
    return CheckReport(tuple(results), options.min_bytes, options.fold, request.strict, devices=_selected(options),
                       unused_accepts=tuple(a for index, a in enumerate(request.accept) if index not in used),
                       runtime=options.runtime)


def check_program(target: CheckTarget, request: CheckRequest) -> FileCheck:
    """One program's findings: the placements (and, with fold, folds) of the very plan ``rewrite`` would make,
    made once; what ``--device``/``--min-bytes`` leave out is read from the same plan (``FileCheck.filtered``)."""
    options, file = request.options, str(target.program)
    with opened(target.program, target.ptd) as (source, data):
        if source.load_refusal:
            raise PteDevconstError(source.load_refusal, file=file)
        names = name_opened(source, request.names)
        analysis = analyze_opened(source, data)
        program = source.program
        derived = derived_copies(program, analysis)
        # As rewrite --fold plans: chains whose data it refuses (a NaN cast to int) do not fold.  Without torch
        # no fold computes at all, so the gate counts every chain (rewrite --fold asks for torch first).
        refusals = fold_refusals(source, data, analysis, judge=torch_found()) if options.fold else {}
    # The very plan rewrite makes; its refusal (a buffer past the reader's limit) is this file's error.
    plan = make_plan(program, analysis, options, refusals)
    judged = _judged(file, plan, analysis, derived, options)
    # Chains whose data needs torch to judge (a float-to-int cast): not judged, never a silent answer either way.
    unjudged = {key for key, why in refusals.items() if why == NOT_JUDGED}
    chains = [chain for method in analysis.methods for chain in (method.folds.chains if method.folds else ())
              if (chain.plan_index, chain.result) in unjudged]
    unknown = judged.unknown + [Finding(file, chain.method, chain.result, _chain_name(chain), str(chain.device),
                                        chain.nbytes, chain.copies_per_call, NOT_JUDGED) for chain in chains]
    not_judged = {(chain.method, chain.result) for chain in chains}
    stays = [f for f in judged.stays if (f.method, f.value) not in not_judged]
    gain = None if options.fold else safe_fold_gain(program, analysis, options, plain=plan)
    notes = list(analysis.notes) + list(names.notes if names else ())
    if analysis.refusal and judged.findings:
        notes.append(f"rewrite would refuse this program: {analysis.refusal}")
    external = [f for f in unknown if f.reason != NOT_JUDGED]
    if external:
        notes.append(f"{plural(len(external), 'external constant')} not judged: their data is in a .ptd; "
                     f"{target.ptd_hint}")
    if chains:
        notes.append(f"{plural(len(chains), 'folded chain')} not judged: {NOT_JUDGED.removeprefix('not judged: ')}")
    need = required_runtime(program)
    return FileCheck(file, str(target.ptd) if target.ptd else None, sum(len(m.constants) for m in analysis.methods),
                     tuple(judged.findings), None, "; ".join(notes) or None, tuple(unknown),
                     gain.tensors if gain else 0, gain.bytes_per_call if gain else 0, tuple(stays), request.strict,
                     tuple(judged.filtered), devices_used(program, analysis), _selected(options), plan.memory,
                     runtime_need=need, runtime_findings=_runtime_findings(file, need, plan, options))


def _runtime_findings(file: str, need: RuntimeNeed, plan: RewritePlan, options: RewriteOptions
                      ) -> tuple[Finding, ...]:
    """Every tensor of a file that the project's runtime (``options.runtime``) cannot load, each with what to do
    about it (the words: ``rewriter/words.py``)."""
    from pte_devconst.rewriter.words import runtime_reason

    if need.loads_in(options.runtime):
        return ()
    unconverted = {(u.method, u.value): u.reason for u in plan.unconverted}
    found = []
    for tensor in need.tensors:
        reason = runtime_reason(options.encoding, unconverted.get((tensor.method, tensor.value)))
        found.append(Finding(file, tensor.method, tensor.value, f"value {tensor.value}", str(tensor.device),
                             tensor.nbytes, 0, reason))
    return tuple(found)


def _selected(options: RewriteOptions) -> Optional[tuple[str, ...]]:
    """The devices ``--device`` selects, as reports spell them (None: every device)."""
    return None if options.devices is None else tuple(sorted(str(d) for d in options.devices))


@record
class _Judged:
    findings: list[Finding]
    unknown: list[Finding]
    stays: list[Finding]
    filtered: list[Finding]  # what the options left out, each with the option that did


def _chain_name(chain: FoldChain) -> str:
    """``permute_copy of encoder.weight``: a folded chain as a finding names it."""
    return f"{chain.kernels} of {value_name(chain.source_tensor.fqn, chain.source)}"


def _judged(file: str, plan: RewritePlan, analysis: Analysis, derived: Sequence[DerivedCopy],
            options: RewriteOptions) -> _Judged:
    """The findings, unknown constants and copies that stay, of ``plan``, as ``options`` select them; and what
    the selection left out, from the same plan: the constants and chains it skipped for ``--device`` or
    ``--min-bytes`` (``plan.skipped``, ``plan.fold_skipped``, with ``skip_reason``'s words) and the unknown
    constants and copies that stay that ``skip_reason`` leaves out."""
    eligible = {(c.plan_index, c.value) for c in analysis.eligible}
    # a constant an encoding already copies once is no per-call copy (a plan only changes its encoding)
    found = [(p, Finding(file, p.method, p.value, p.name, str(p.device), p.nbytes, p.copies_per_call))
             for p in plan.placements if p.copies_per_call]
    released = [(p, f) for p, f in found if (p.plan_index, p.value) not in eligible]  # moved once their kernels fold
    findings = [f for p, f in found if (p.plan_index, p.value) in eligible]
    findings += [Finding(file, f.method, f.value, _chain_name(f.chain), str(f.device), f.nbytes,
                         f.chain.copies_per_call) for f in plan.folds]
    findings += [f for _, f in released]
    filtered = [Finding(file, s.verdict.method, s.verdict.value, s.verdict.name, str(s.verdict.device),
                        s.verdict.nbytes, s.verdict.copies_per_call, s.reason) for s in plan.skipped]
    # the chains skipped for --device/--min-bytes (the others were refused for their data)
    left_out = [(s.chain, s.reason) for s in plan.fold_skipped
                if s.reason == skip_reason(s.chain.device, s.chain.nbytes, options) is not None]
    filtered += [Finding(file, c.method, c.result, _chain_name(c), str(c.device), c.nbytes, c.copies_per_call,
                         reason) for c, reason in left_out]
    # What folding moves (or would, but for the options) no longer stays: the chains' results and the constants
    # released by them.
    covered = {(f.plan_index, f.chain.result) for f in plan.folds} | {(p.plan_index, p.value) for p, _ in released}
    covered |= {(c.plan_index, c.result) for c, _ in left_out}
    covered |= {(s.verdict.plan_index, s.verdict.value) for s in plan.skipped}
    unknown: list[Finding] = []
    for method in analysis.methods:
        for v in method.constants:
            if v.unknown:
                why = skip_reason(v.pending_device, v.nbytes, options)
                (filtered if why else unknown).append(Finding(file, v.method, v.value, v.name, str(v.pending_device),
                                                              v.nbytes, v.copies_per_call, why or ""))
    stays: list[Finding] = [Finding(file, s.verdict.method, s.verdict.value, s.verdict.name, str(s.verdict.device),
                                    s.verdict.nbytes, s.verdict.copies_per_call, s.reason)
                            for s in plan.kept_for_runtime]
    covered |= {(s.verdict.plan_index, s.verdict.value) for s in plan.kept_for_runtime}
    for copy in derived:
        if copy.status is DerivedStatus.STAYS and (copy.plan_index, copy.value) not in covered:
            why = skip_reason(copy.device, copy.nbytes, options)
            stays_or_left = filtered if why else stays
            stays_or_left.append(Finding(file, copy.method, copy.value, copy.name, str(copy.device), copy.nbytes,
                                         copy.copies_per_call, why or copy.reason))
    return _Judged(findings, unknown, stays, filtered)


def _accepting(checked: FileCheck, accept: Sequence[Acceptance], used: set[int]) -> FileCheck:
    """``checked`` with what ``accept`` matches moved to ``accepted`` (the first matching entry's reason); the
    indices of the entries that matched are added to ``used``."""
    if not accept:
        return checked
    taken: list[Finding] = []

    def keep(covers: str) -> tuple[Finding, ...]:
        kept = []
        rule = rule_covering(covers).id
        for finding in getattr(checked, covers):
            index = next((k for k, a in enumerate(accept) if a.matches(finding)), None)
            if index is None:
                kept.append(finding)
            else:
                used.add(index)
                taken.append(replace(finding, accepted=accept[index].reason, rule=rule))
        return tuple(kept)

    findings, stays, unknown = keep("findings"), keep("stays"), keep("unknown")
    return replace(checked, findings=findings, stays=stays, unknown=unknown, accepted=tuple(taken))
