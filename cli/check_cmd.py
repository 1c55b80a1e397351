"""``pte-devconst check``: the CI gate. Fails while a program still copies a movable constant on every call.

What a check finds, how loud each kind is and what it does to the exit code are the gate's rules
(``gate/rules.py``: one table); this module renders them in every format and writes no
rule id or level of its own.  Exit 0: no file has an eligible constant left; 1: some do (each is listed:
file, method, constant, bytes per call), or with ``--strict`` some file copies any constant-derived value
per call; 2: some file could not be checked (every file is still reported), or a ``--device`` names a device
no program uses; 3: nothing else, but some constant could not be judged (never reported as clean).  What
``--device``/``--min-bytes`` leave out is reported with its bytes per call, never as clean; what stays copied
for a stated reason (read on the host too, transposed on the host, ...) is always reported, as a summary line,
never as "nothing is copied".  A folder holding no program is a warning, not an error (exit 0, as ruff).
The decisions are the gate's (``gate/check.py``, through ``pte_devconst.api.check``).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Callable, Optional, Sequence

import typer

from pte_devconst.cli.app import command, global_options, warn_empty
from pte_devconst.cli.config import ConfigOption, IsolatedOption, RuntimeOption
from pte_devconst.cli.formats import (DEFAULT_ANNOTATIONS, Annotation, Format, GithubReport, Output, Renderers, View,
                                      format_option, resolve)
from pte_devconst.cli.markdown import MARKDOWN_LIMIT, Block, fit_blocks
from pte_devconst.cli.output import (DataOption, DeviceOption, EtrecordOption, JsonFlag, MinBytesOption,
                                     ProgressOption, fold_hint, github_annotation, markdown_table, md_code, md_text,
                                     is_stream, memory_change, printable, reasons_line, stdout_console,
                                     table, write_report)
from pte_devconst.cli.progress import files_progress
from pte_devconst.types import constant_label
from pte_devconst.util.exit_code import ExitCode
from pte_devconst.util.units import exact_bytes, human_bytes, listing, plural

if TYPE_CHECKING:  # the analysis is imported when the command runs, not at start-up
    from pte_devconst.types import Acceptance, CheckReport, Diagnostic, FileCheck, Finding, GateRule, Runtime


# Every format renders the check's diagnostics (``CheckReport.diagnostics``: one per file and rule, in the rule's
# own words), the same way for every rule: no renderer here branches on a rule.


def _files(count: int) -> str:
    return plural(count, "file")


def _measure(d: Diagnostic) -> str:
    return "bytes/call" if d.per_call else "bytes"


def _item_cells(d: Diagnostic, code: Callable[[str], str] = lambda text: text,
                text: Callable[[str], str] = lambda text: text) -> tuple[list[str], list[list[str]]]:
    """A diagnostic's items as table columns and rows (a "why" column when the items' reasons differ; one reason
    shared by all is ``_shared_reason``'s)."""
    why = any(x.reason for x in d.items) and not _shared_reason(d)
    columns = ["method", "value", "device", _measure(d)] + (["why"] if why else [])
    rows = [[code(x.method), code(constant_label(x.name, x.value)), code(x.device), human_bytes(x.weight)]
            + ([text(x.reason)] if why else []) for x in d.items]
    return columns, rows


def _shared_reason(d: Diagnostic) -> str:
    """The one reason every item of ``d`` has, when there are several ("" when they differ or have none)."""
    reasons = {x.reason for x in d.items}
    return reasons.pop() if len(reasons) == 1 and len(d.items) > 1 else ""


def _summary(report: CheckReport) -> str:
    """The check in one sentence: what each rule found over all files (in its own words), with its fix."""
    checked = sum(1 for f in report.files if not f.error)
    diagnostics = _diagnostics(report)[0]
    if not diagnostics and not report.accepted:
        return f"{_files(checked)} checked: no constant is copied to a device on every call."
    # "nothing left to move" only of files that were checked, and where no rule's fix is a rewrite
    movable = report.findings or any(d.fix for d in diagnostics if d.items)
    parts = [f"{_files(checked)} checked" if checked else "no file could be checked"]
    if checked and not movable:
        parts[0] += ": nothing left that the rewrite can move"
    by_rule: dict[str, list[Diagnostic]] = {}
    for d in diagnostics:
        by_rule.setdefault(d.rule.id, []).append(d)
    for group in by_rule.values():
        rule, items = group[0].rule, [x for d in group for x in d.items]
        if items:
            files = len({d.file for d in group if d.file})
            part = (f"{rule.id} {group[0].titled(len(items))}" + (f" in {_files(files)}" if files else "")
                    + f" ({human_bytes(sum(d.bytes for d in group))}{' per call' if rule.per_call else ''})")
            reasons = [x.reason for x in items if x.reason]
            if reasons and not group[0].fix:  # why they stay (a rule with a fix says what to do instead)
                part += f": {reasons_line(reasons)}"
            if group[0].fix:
                part += f"; fix them with {group[0].fix_for('FILE')}"
            if rule.strict_only and not report.strict:
                part += " (--strict fails on them)"
            parts.append(part)
        elif not group[0].accepted:  # its messages were printed above (and on stderr): named here, not repeated
            files = len({d.file for d in group if d.file})
            parts.append(f"{rule.name} ({rule.id})" + (f" in {_files(files)}" if files else ""))
    if report.accepted:
        parts.append(f"{len(report.accepted):,} accepted by the project's config "
                     f"({human_bytes(sum(f.bytes_per_call for f in report.accepted))} per call)")
    return "; ".join(parts) + "."


def runtime_line(report: CheckReport) -> Optional[str]:
    """Which runtime the checked files need: ``Loads in ExecuTorch >= 1.5: 3 files; >= 1.6: 1 file (a.pte)``, and how
    to make them load in an older one (``rewriter/words.py``)."""
    from pte_devconst.types import encodings, older_advice

    needs: dict[Runtime, list[str]] = {}
    newest = None
    for f in report.files:
        if f.runtime_need is not None:
            needs.setdefault(f.runtime_need.runtime, []).append(f.file)
            if newest is None or f.runtime_need.runtime > newest.runtime:
                newest = f.runtime_need
    if newest is None:
        return None
    oldest = encodings()[0].runtime
    parts = [f">= {runtime.value}: {_files(len(files))}" + (f" ({listing(files)})" if runtime > oldest else "")
             for runtime, files in sorted(needs.items())]
    advice = older_advice(newest, "rewrite ") if oldest < newest.runtime <= report.runtime else ""
    return "Loads in ExecuTorch " + "; ".join(parts) + (f" ({advice})" if advice else "") + "."


def _memory_line(report: CheckReport) -> Optional[str]:
    """Planned device memory over the checked files, now and after a rewrite (None: no file plans any)."""
    memories = [f.device_memory for f in report.files if f.device_memory is not None]
    before, after = sum(m.before for m in memories), sum(m.after for m in memories)
    if not memories or not (before or after):
        return None
    grown = [f.file for f in report.files if f.device_memory is not None and f.device_memory.warning()]
    kept = [f.file for f in report.files if f.device_memory is not None and f.device_memory.kept_offsets]
    return (f"Device memory planned: {human_bytes(before)} now, {human_bytes(after)} after a rewrite "
            f"({memory_change(before, after)})"
            + (f"; a rewrite would grow it in {_files(len(grown))}: {listing(grown)}" if grown else "")
            + (f"; laying it out again ran out of its work budget in {_files(len(kept))}, which keep the input's "
               f"offsets with the constants appended: {listing(kept)}" if kept else "") + ".")


_RENDERED: list[tuple[CheckReport, tuple[Diagnostic, ...], dict[str, list[Diagnostic]]]] = []


def _diagnostics(report: CheckReport) -> tuple[tuple[Diagnostic, ...], dict[str, list[Diagnostic]]]:
    """The report's diagnostics, and those of each file: made once per report rendered (a check of thousands of
    files renders each file's line from them)."""
    if not _RENDERED or _RENDERED[0][0] is not report:
        diagnostics = report.diagnostics()
        by_file: dict[str, list[Diagnostic]] = {}
        for d in diagnostics:
            if d.file and not d.rule.once:
                by_file.setdefault(d.file, []).append(d)
        _RENDERED[:] = [(report, diagnostics, by_file)]
    return _RENDERED[0][1], _RENDERED[0][2]


def _of_file(report: CheckReport, f: FileCheck) -> list[Diagnostic]:
    return _diagnostics(report)[1].get(f.file, [])


def _headline(d: Diagnostic) -> str:
    """``<id> copied-every-call: 4 constants copied to a device on every call (3.2 KiB per call); fix: ...``."""
    totals = f" ({human_bytes(d.bytes)}{' per call' if d.per_call else ''})" if d.items else ""
    return f"{d.rule.id} {d.rule.name}: {d.title}{totals}" + (f"; fix: {d.fix}" if d.fix else "")


# ---------------------------------------------------------------------------------------------------- text


def render_text(report: CheckReport, view: View) -> None:
    console = stdout_console()
    diagnostics = _diagnostics(report)[0]
    if view.quiet:  # one unwrapped line per item a rule reports (not the notes --strict would fail), for grep
        for d in diagnostics:
            if d.rule.strict_only and not report.strict and d.rule.exit_for(False) is ExitCode.OK:
                continue
            for x in d.items:
                reason = f": {x.reason}" if x.reason else ""
                typer.echo(printable(f"{x.file}: {x.method}: {constant_label(x.name, x.value)} -> {d.rule.id} "
                                     f"{x.device}: {exact_bytes(x.weight)}{' per call' if d.per_call else ''}"
                                     f"{reason}"))
        return

    def say(line: str) -> None:
        console.print(printable(line), markup=False, soft_wrap=True)

    for d in diagnostics:
        where = f"{d.file}: " if d.file else ""
        if d.items and (d.rule.fails(report.strict) or view.verbose):  # what fails: the headline and every item
            say(f"{where}{_headline(d)}")
            columns, rows = _item_cells(d)
            console.print(table(None, columns, rows, right=[_measure(d)]))
            if _shared_reason(d):
                say(f"  why: {_shared_reason(d)}")
        elif d.items or not d.accepted:  # the rest: the rule's message, in one line
            say(f"{where}{d.rule.id} {d.rule.name}: {d.message}")
    for f in report.files:
        if f.accepted:
            say(f"{f.file}: {len(f.accepted):,} accepted (the project's config accepts them)")
            console.print(table(None, ["rule", "method", "constant", "device", "bytes/call", "accepted because"],
                                [[x.rule, x.method, constant_label(x.name, x.value), x.device,
                                  human_bytes(x.bytes_per_call), x.accepted] for x in f.accepted],
                                right=["bytes/call"]))
    if view.verbose:
        for f in report.files:
            if f.status == "ok":
                say(f"ok  {f.file} ({plural(f.constants, 'constant')} examined" + (f", data {f.ptd}" if f.ptd else "")
                    + ")")
    for f in report.files:
        if f.note:
            say(f"note: {f.file}: {f.note}")
    console.print(printable(_summary(report)), markup=False, style="green" if report.passed else "red")
    hint = fold_hint(report.fold_gain)
    if hint:
        console.print(hint, markup=False)
    memory = _memory_line(report)
    if memory:
        console.print(printable(memory), markup=False)
    runtime = runtime_line(report)
    if runtime:
        console.print(printable(runtime), markup=False)


def file_status(report: CheckReport, f: FileCheck) -> str:
    """A file's status and what each rule found there, in one line (after its name in ``file_line`` and the
    markdown details)."""
    accepted = f"; {len(f.accepted):,} accepted" if f.accepted else ""
    if f.error:  # the rule that says so, and its message (the error without the file's name)
        said = [f"{d.rule.id} {d.rule.name}: {d.message}" for d in _of_file(report, f) if not d.items]
        if said:
            return "; ".join(said)
        return f.error[len(f.file) + 2:] if f.file and f.error.startswith(f"{f.file}: ") else f.error
    found = [d for d in _of_file(report, f) if d.items]
    failing = [_brief(d) for d in found if d.rule.exit_for(report.strict) is not ExitCode.OK]
    notes = [_brief(d) for d in found if d.rule.exit_for(report.strict) is ExitCode.OK]
    if not failing:
        return f"ok ({'; '.join([plural(f.constants, 'constant') + ' examined'] + notes)}{accepted})"
    return "; ".join(failing + notes) + accepted


def _brief(d: Diagnostic) -> str:
    """``<id> 4 constants copied to a device on every call (3.2 KiB per call); fix: ...``: a result in a line."""
    totals = f" ({human_bytes(d.bytes)}{' per call' if d.per_call else ''})" if d.items else ""
    return f"{d.rule.id} {d.title}{totals}" + (f"; fix: {d.fix}" if d.fix else "")


def file_line(report: CheckReport, f: FileCheck) -> str:
    """One file in one line (``--format concise``, what the pre-commit hook prints): its name, status and totals."""
    return printable(f"{f.file}: {file_status(report, f)}" if f.file else file_status(report, f))


def render_concise(report: CheckReport, view: View) -> str:
    once = [_headline(d) + (f": {d.message}" if not d.items else "") for d in _diagnostics(report)[0]
            if d.rule.once or not d.file]
    return "\n".join([file_line(report, f) for f in report.files] + [printable(x) for x in once]
                     + [printable(_summary(report))])


# ------------------------------------------------------------------------------------------- markdown

STATUS_MARKS = {"ok": "✅ ok", "findings": "❌", "unknown": "❔", "error": "⛔"}


def device_memory_columns(files: Sequence[FileCheck]) -> list[tuple[str, Callable[[FileCheck], str]]]:
    """The summary's device-memory columns (before, after), where the report carries them."""
    if not any(f.device_memory for f in files):
        return []

    def side(name: str) -> Callable[[FileCheck], str]:
        return lambda f: (human_bytes(getattr(f.device_memory, name))
                          if f.device_memory and (f.device_memory.before or f.device_memory.after) else "-")
    return [("device memory now", side("before")), ("after a rewrite", side("after"))]


def _status_cell(report: CheckReport, f: FileCheck) -> str:
    """The file's status and the rules that fail it: ``❌ <id> needs-newer-runtime``."""
    failing = [d.rule for d in _of_file(report, f)
               if d.rule.exit_for(report.strict) is not ExitCode.OK and (d.items or not d.accepted)]
    mark = STATUS_MARKS.get(str(f.status), str(f.status))
    return mark if not failing else f"{mark} " + ", ".join(f"{r.id} {r.name}" for r in failing)


def summary_table(report: CheckReport) -> str:
    """One row per file: status and failing rules, constants still copied and their bytes per call, accepted, fold
    gain."""
    extra = device_memory_columns(report.files)
    columns = (["file", "status", "still copied", "bytes/call", "cannot move", "accepted", "fold gain"]
               + [name for name, _ in extra])
    rows = []
    for f in report.files:
        rows.append([md_code(f.file) if f.file else "", _status_cell(report, f),
                     f"{len(f.findings):,}", human_bytes(f.bytes_per_call), f"{len(f.stays):,}",
                     f"{len(f.accepted):,}",
                     f"{human_bytes(f.foldable_bytes_per_call)} ({f.foldable:,})" if f.foldable else "-"]
                    + [render(f) for _, render in extra])
    return markdown_table(columns, rows, right=["still copied", "bytes/call", "cannot move", "accepted",
                                                "fold gain", *(name for name, _ in extra)])


def _summary_html(text: str) -> str:
    """File-derived text for an HTML ``<summary>`` (markdown is not read there): printable and HTML-escaped."""
    import html

    return html.escape(printable(text), quote=True)


def _rule_heading(rule: GateRule, report: CheckReport, what: str) -> str:
    """A details section's heading: the rule's id and name (its level in this run), then what it lists."""
    return f"**{rule.id} {rule.name}** ({rule.level_for(report.strict)}): {what}"


def _section(report: CheckReport, d: Diagnostic) -> list[str]:
    """One diagnostic as a markdown section: its heading (the rule, its title, its fix) and its items."""
    fix = ""
    if d.fix:
        fix = f"; fix: {md_code(d.fix)}" if d.fix.startswith("pte-devconst ") else f"; {md_text(d.fix)}"
    if not d.items:
        return [_rule_heading(d.rule, report, md_text(d.message)), ""]
    lines = [_rule_heading(d.rule, report, md_text(d.title) + fix + ":"), ""]
    columns, rows = _item_cells(d, md_code, md_text)
    shared = [f"Why: {md_text(_shared_reason(d))}", ""] if _shared_reason(d) else []
    return lines + markdown_table(columns, rows, right=[_measure(d)]).split("\n") + [""] + shared


def file_details(report: CheckReport, f: FileCheck) -> Block:
    """A file's details as a collapsed block: its sections, one per rule that found something (the body is cut
    first when too long)."""
    head = f"<details><summary><code>{_summary_html(f.file)}</code>: {_summary_html(file_status(report, f))}</summary>"
    body: list[str] = [""]
    for d in _of_file(report, f):
        if d.items or not d.accepted:
            body += _section(report, d)
    if f.accepted:
        body += ["**Accepted (the project's config):**", ""]
        body += markdown_table(["rule", "method", "constant", "device", "bytes/call", "accepted because"],
                               [[x.rule, md_code(x.method), md_code(constant_label(x.name, x.value)),
                                 md_code(x.device), exact_bytes(x.bytes_per_call), md_text(x.accepted)]
                                for x in f.accepted], right=["bytes/call"]).split("\n") + [""]
    if f.device_memory is not None and f.device_memory.warning():
        body += [f"Device memory: {md_text(f.device_memory.warning())}", ""]
    if f.device_memory is not None and f.device_memory.note():
        body += [f"Device memory: {md_text(f.device_memory.note())}", ""]
    if f.note:
        body += [f"Note: {md_text(f.note)}", ""]
    if not f.error:
        body += [f"{plural(f.constants, 'constant')} examined" + (f", data {md_code(f.ptd)}" if f.ptd else "") + ".",
                 ""]
    return Block((head,), tuple(body), ("</details>",))


def render_markdown(report: CheckReport, view: Optional[View] = None, limit: int = MARKDOWN_LIMIT) -> list[str]:
    """The summary first (a sentence and one row per file), then each file's details, collapsed; never over
    ``limit`` characters, however many files (the longest details are cut first)."""
    icon = "✅" if report.passed else "❌"
    head = [f"### {icon} pte-devconst check", "", md_text(_summary(report)), ""]
    memory = _memory_line(report)
    if memory:
        head += [md_text(memory), ""]
    table_lines = summary_table(report).split("\n")
    tail: list[str] = []
    whole = [d for d in _diagnostics(report)[0] if d.rule.once or not d.file]
    for d in whole:
        tail += [""] + _section(report, d)
    hint = fold_hint(report.fold_gain)
    if hint:
        tail += ["", hint]
    reserve = sum(len(line) + 1 for line in head + tail) + 400
    # The summary table keeps as many rows as fit in half of what is left (a row per file, thousands at most).
    room = (limit - reserve) // 2
    shown, used = table_lines[:2], sum(len(line) + 1 for line in table_lines[:2])
    for line in table_lines[2:]:
        if used + len(line) + 1 > room:
            break
        shown.append(line)
        used += len(line) + 1
    left = len(table_lines) - len(shown)
    lines = head + shown + (["", f"*… and {_files(left)} more not listed; `--format json` lists them all.*"]
                            if left else []) + [""]
    details = [file_details(report, f) for f in report.files
               if _of_file(report, f) or f.accepted or f.note]
    budget = limit - sum(len(line) + 1 for line in lines + tail) - 200
    return lines + fit_blocks(details, max(0, budget), limit, "file") + tail


# --------------------------------------------------------------------------------------------- github


def _annotation(report: CheckReport, d: Diagnostic) -> Annotation:
    """One diagnostic as a GitHub annotation at its level: the rule and its title as the annotation's title, the
    message as its text; the worst first (errors, then by bytes)."""
    level = d.level.github
    weight = (d.rule.exit_for(report.strict) is not ExitCode.ERROR, -d.bytes, d.file, d.rule.id)
    title = f"pte-devconst {d.rule.id} {d.rule.name}: {d.title}"
    return Annotation(level, github_annotation(level, d.message, file=d.file or None, title=title), weight)


def render_github(report: CheckReport, view: View) -> GithubReport:
    """GitHub Actions annotations: one per diagnostic (a file and a rule, or the whole check), at the rule's level;
    ``Output`` caps them per level (``--max-annotations``); then the summary line."""
    annotations = [_annotation(report, d) for d in _diagnostics(report)[0] if d.items or not d.accepted]
    lines = [printable(_summary(report))]
    hint = fold_hint(report.fold_gain)
    if hint:
        lines.append(hint)
    return GithubReport(annotations, lines)


# ---------------------------------------------------------------------------------------------- sarif

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
SARIF_CONSTANTS_SHOWN = 5  # in a result's message; its properties list every one


def _uri(path: str) -> str:
    from urllib.parse import quote

    return quote(Path(path).as_posix()) if path else "."


def fingerprint(rule: GateRule, file: str) -> str:
    """A result's stable identity across runs: its rule and its file, never its counts (GitHub then keeps one alert
    per file and rule as the findings change)."""
    return hashlib.sha256(f"{rule.id}\0{_uri(file)}".encode()).hexdigest()[:32]


def _constant_json(x: Finding) -> dict[str, Any]:
    item: dict[str, Any] = {"method": x.method, "value": x.value, "name": x.name, "device": x.device,
                            "bytesPerCall": x.bytes_per_call}
    if x.reason:
        item["reason"] = x.reason
    if x.accepted:
        item["accepted"] = x.accepted
    return item


def _sarif_result(report: CheckReport, rules: Sequence[GateRule], d: Diagnostic) -> dict[str, Any]:
    """One diagnostic on a file as a SARIF result: the rule's title and the diagnostic's message, the items it
    names in its properties; one whose every item is accepted is suppressed."""
    largest = sorted(d.items or d.accepted, key=lambda x: -x.weight)
    named = listing((f"{constant_label(x.name, x.value)} in {x.method} ({exact_bytes(x.weight)}"
                     f"{' per call' if d.per_call else ''} {'to' if d.per_call else 'on'} {x.device}"
                     f"{': ' + x.reason if x.reason else ''})" for x in largest), SARIF_CONSTANTS_SHOWN)
    text = f"{d.rule.title}: {d.message}" + (f" Items: {named}." if largest else "")
    properties: dict[str, Any] = {"count": len(d.items), "bytes": d.bytes, "perCall": d.per_call, "fix": d.fix,
                                  "constants": [_constant_json(x) for x in d.items],
                                  "accepted": [_constant_json(x) for x in d.accepted]}
    if d.per_call:
        properties["bytesPerCall"] = d.bytes
    result: dict[str, Any] = {
        "ruleId": d.rule.id, "ruleIndex": list(rules).index(d.rule), "level": d.level.value,
        "message": {"text": printable(text)},
        "locations": [{"physicalLocation": {"artifactLocation": {"uri": _uri(d.file)}}}],
        "partialFingerprints": {"pteDevconst/v1": fingerprint(d.rule, d.file)},
        "properties": properties,
    }
    if d.accepted and not d.items:
        result["suppressions"] = [{"kind": "external", "justification": printable("; ".join(
            sorted({x.accepted for x in d.accepted})))}]
    return result


def sarif_document(report: CheckReport, view: Optional[View] = None) -> dict[str, Any]:
    """SARIF 2.1.0 for code scanning: one result per diagnostic on a file (a stable fingerprint per file and rule);
    what is reported once for the whole check as notifications."""
    from pte_devconst import __version__
    from pte_devconst.types import RULES

    diagnostics = _diagnostics(report)[0]
    results = [_sarif_result(report, RULES, d) for d in diagnostics if d.file and not d.rule.once]
    notifications = [(d.rule, d.message) for d in diagnostics if d.rule.once or not d.file]
    rules = [{"id": rule.id, "name": rule.name, "shortDescription": {"text": rule.title},
              "fullDescription": {"text": rule.title}, "help": {"text": rule.help},
              "defaultConfiguration": {"level": rule.level_for(report.strict).value},
              "properties": {"strictOnly": rule.strict_only, "covers": rule.covers}} for rule in RULES]
    return {"$schema": SARIF_SCHEMA, "version": "2.1.0", "runs": [{
        "tool": {"driver": {"name": "pte-devconst", "version": __version__, "semanticVersion": __version__,
                            "informationUri": "https://github.com/pte-devconst/pte-devconst", "rules": rules}},
        "results": results,
        "invocations": [{"executionSuccessful": report.exit_code != 2, "exitCode": int(report.exit_code),
                         "toolExecutionNotifications": [
                             {"descriptor": {"id": rule.id, "index": list(RULES).index(rule)},
                              "level": rule.level_for(report.strict).value, "message": {"text": printable(text)}}
                             for rule, text in notifications]}],
    }]}


CHECK = Renderers["CheckReport"](
    "check", text=render_text, markdown=render_markdown, json=lambda report: report.to_json(),
    concise=render_concise, github=render_github, sarif=sarif_document, what="file")


# -------------------------------------------------------------------------------------------- command

# ---------------------------------------------------------------------------------- reports in files

FILE_FORMATS = (Format.MARKDOWN, Format.JSON, Format.SARIF)  # what --report writes; text is a terminal's
ReportOption = Annotated[Optional[list[str]], typer.Option(
    "--report", metavar="FORMAT=FILE", show_default=False,
    help="Also write the report as FORMAT (markdown, json or sarif) to FILE, from the same check (repeatable): "
    "e.g. --format github --report markdown=summary.md --report sarif=check.sarif checks once for all three.")]


def report_files(entries: Optional[Sequence[str]]) -> list[tuple[Format, str]]:
    """``--report FORMAT=FILE`` entries, checked before any program is read: a typo costs no check, and a FILE that
    cannot be replaced (a folder, a device) is refused up front."""
    chosen: list[tuple[Format, str]] = []
    if not entries:
        return chosen
    from pte_devconst.util.atomic import check_destination  # a writer: loaded only when a report is written

    names = ", ".join(f.value for f in FILE_FORMATS)
    for entry in entries:
        name, equals, file = entry.partition("=")
        fmt = next((f for f in FILE_FORMATS if f.value == name.strip().lower()), None)
        if not equals or not file or fmt is None:
            raise typer.BadParameter(f"{entry!r}: expected FORMAT=FILE, FORMAT one of {names}", param_hint="--report")
        if any(file == other for _, other in chosen):
            raise typer.BadParameter(f"{file!r} is named twice", param_hint="--report")
        if not is_stream(file):  # /dev/stdout or a pipe is written as it is; a file is replaced atomically
            check_destination(file)
        chosen.append((fmt, file))
    return chosen


VALUES_SHOWN = 8


def what_would_match(report: CheckReport, unused: Acceptance, named: bool) -> str:
    """What the warning for an accepted finding that matched nothing adds: why, and what would match.

    Constants have names only with an ETRecord (``--etrecord`` or ``etrecord`` in the config): without one, a
    ``constant = "NAME"`` entry can match nothing, and ``value = N`` (the index ``check`` lists) always can.
    """
    from pte_devconst.util.globs import matches_glob

    files = [f for f in report.files if matches_glob(f.file, unused.program, unused.root)]
    if not files:
        return f": no program checked matches {unused.program!r}"
    found = [x for f in files for x in (*f.findings, *f.unknown, *f.stays, *f.runtime_findings, *f.accepted)
             if unused.method is None or x.method == unused.method]
    values = sorted({x.value for x in found})
    by_index = (f"value = N, one of {listing([str(v) for v in values], VALUES_SHOWN)}" if values
                else "nothing is copied per call there")
    if unused.constant is not None and not named:
        return (": constants have names only with an ETRecord (pass --etrecord FILE, or set etrecord = \"FILE\" in "
                f"[tool.pte-devconst]); or accept by index: {by_index}")
    if unused.constant is not None:
        names = sorted({x.name for x in found if x.name})
        shown = f"names there: {listing(names, VALUES_SHOWN)}" if names else "no finding there has a name"
        return f": {shown}; or accept by index: {by_index}"
    return f": {by_index}"


@command("check")
def check_command(
    ctx: typer.Context,
    files: Annotated[Optional[list[str]], typer.Argument(
        help="Programs: .pte files, glob patterns ('**/*.pte') or directories [default: paths of the config "
        "file].", metavar="FILE...", show_default=False)] = None,
    ptd: DataOption = None,
    device: DeviceOption = None,
    min_bytes: MinBytesOption = None,
    fold: Annotated[Optional[bool], typer.Option(
        "--fold/--no-fold", show_default=False,
        help="Also count what rewrite --fold would move: each chain of host kernels that only move or "
        "cast a constant for device delegates [default: no].")] = None,
    strict: Annotated[Optional[bool], typer.Option(
        "--strict/--no-strict", show_default=False,
        help="Also fail on constant-derived values copied on every call that the rewrite cannot move "
        "(read on the host too, transposed on the host, ...) and on external constants not judged for want of "
        "their .ptd [default: no].")] = None,
    runtime: RuntimeOption = None,
    etrecord: EtrecordOption = None,
    fmt: Annotated[Optional[str], format_option(CHECK, "output-format of the config file, else text")] = None,
    json_flag: JsonFlag = False,
    max_annotations: Annotated[int, typer.Option(
        "--max-annotations", metavar="N", min=0, help="--format github: at most this many annotations of each "
        "level (error, warning, notice), the worst first (0: all); GitHub shows 10 of each per step.")]
        = DEFAULT_ANNOTATIONS,
    reports: ReportOption = None,
    progress: ProgressOption = None,
    config: ConfigOption = None,
    isolated: IsolatedOption = False,
) -> None:
    """Exit 1 when a program still copies a constant to a device on every call (for CI and pre-commit).

    Exit codes: 0 clean (also a folder without programs: a warning); 1 findings (with --strict any
    constant-derived copy, also one the rewrite cannot move); 2 a file could not be checked, or a --device no
    program uses; 3 only constants not judged (an external constant whose .ptd is missing). What --device and
    --min-bytes leave out is reported, never called clean.  Settings come from [tool.pte-devconst] in
    pyproject.toml (see docs/cli.md); the command line overrides them.
    """
    from pte_devconst import api
    from pte_devconst.cli.config import load

    options = global_options(ctx)
    settings = load(config, isolated)
    given = settings.programs(files, ctx)
    view = View(options.quiet, options.verbose, max_annotations)
    shown = resolve(CHECK, fmt, json_flag, view, settings.output_format)
    # Resolved once: the plan's options (devices parsed) and the programs, each paired with its data.
    plan_options = settings.plan_options(device, min_bytes, fold, runtime=runtime)
    written = report_files(reports)  # checked before any program is read
    names = settings.etrecord_path(etrecord)
    chosen = api.programs(given, ptd or (), exclude=settings.exclude, exclude_root=settings.root, refuse=False)
    warn_empty(chosen.empty_folders, options.quiet)
    if not chosen.items and not chosen.problems and (chosen.excluded or chosen.empty_folders):
        # pre-commit named only excluded programs, or the folders hold none: nothing to check is no failure
        if chosen.excluded and not options.quiet:
            typer.echo(printable(f"nothing to check: every program named is excluded by {settings.path}"), err=True)
        return
    logged = progress if progress is not None else bool(settings.progress)  # lines in a CI log too
    with files_progress("checking", [str(p) for p in chosen.paths], options.quiet, logged) as advance:
        report = api.check(chosen, strict=strict if strict is not None else bool(settings.strict),
                           progress=(lambda done, total, name: advance(done, name)) if advance else None,
                           etrecord=names, accept=settings.accept, options=plan_options)
    say_problems(report, options.quiet, named=names is not None)
    show_report(report, shown, view, written)
    if report.exit_code != 0:
        raise typer.Exit(report.exit_code)


def say_problems(report: CheckReport, quiet: bool, named: bool) -> None:
    """What the check says on stderr before its report: a --device no program uses (a bad option value: one line,
    no report, exit 2), each file it could not check, its warnings (not with --quiet), and each accepted finding
    that matched nothing (``named``: the constants have names, from an ETRecord)."""
    if report.device_problems:
        typer.echo(printable(f"pte-devconst: error: {'; '.join(report.device_problems)}"), err=True)
        raise typer.Exit(ExitCode.ERROR)
    for failed in report.errors:
        typer.echo(printable(f"pte-devconst: error: {failed.error}"), err=True)
    if not quiet:
        for warning in report.warnings:
            typer.echo(printable(f"pte-devconst: warning: {warning}"), err=True)
    for unused in report.unused_accepts:
        typer.echo(printable(f"pte-devconst: warning: {unused.origin}: accepted finding matched nothing "
                             f"({unused.describe()}){what_would_match(report, unused, named)}"),
                   err=True)


def show_report(report: CheckReport, shown: Format, view: View, written: Sequence[tuple[Format, str]]) -> None:
    """The report in the chosen format, then the same report in each ``--report FORMAT=FILE`` (the CI gate's
    summary and SARIF, from one check)."""
    output = Output(CHECK, shown, view)
    output.add(report)
    output.close()
    for fmt_written, file in written:
        kept = Output(CHECK, fmt_written, view)
        kept.add(report)
        write_report(file, kept.blocks())
