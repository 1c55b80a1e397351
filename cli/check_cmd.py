"""``pte-devconst check``: the CI gate. Fails while a program still copies a movable constant on every call.

What a check finds, how loud each kind is and what it does to the exit code are the gate's rules
(``rewriter/gate_rules.py``: one table); this module renders them in every format and writes no
rule id or level of its own.  Exit 0: no file has an eligible constant left; 1: some do (each is listed:
file, method, constant, bytes per call), or with ``--strict`` some file copies any constant-derived value
per call; 2: some file could not be checked (every file is still reported), or a ``--device`` names a device
no program uses; 3: nothing else, but some constant could not be judged (never reported as clean).  What
``--device``/``--min-bytes`` leave out is reported with its bytes per call, never as clean; what stays copied
for a stated reason (read on the host too, transposed on the host, ...) is always reported, as a summary line,
never as "nothing is copied".  A folder holding no program is a warning, not an error (exit 0, as ruff).
The decisions are the gate's (``rewriter/gate.py``, through ``pte_devconst.api.check``).
"""

from __future__ import annotations

import hashlib
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional, Sequence

import typer

from pte_devconst.cli.app import command, global_options, warn_empty
from pte_devconst.cli.config import ConfigOption, IsolatedOption, RuntimeOption
from pte_devconst.cli.formats import (DEFAULT_ANNOTATIONS, Annotation, Format, GithubReport, Output, Renderers, View,
                                      format_option, resolve)
from pte_devconst.cli.markdown import MARKDOWN_LIMIT, Block, fit_blocks
from pte_devconst.cli.output import (DataOption, DeviceOption, EtrecordOption, JsonFlag, MinBytesOption, fold_hint,
                                     github_annotation, markdown_table, md_code, md_text, memory_change, printable,
                                     stdout_console, table, write_report)
from pte_devconst.cli.progress import files_progress
from pte_devconst.program.labels import constant_label
from pte_devconst.util.units import exact_bytes, human_bytes, listing, plural

if TYPE_CHECKING:  # the analysis is imported when the command runs, not at start-up
    from pte_devconst.rewriter.gate import CheckReport, FileCheck, Finding
    from pte_devconst.rewriter.gate_rules import GateRule


def _kind(report: CheckReport, count: int = 1) -> str:
    return plural(count, "tensor" if report.fold else "constant")


def _values(count: int) -> str:
    return plural(count, "constant-derived value")


def _finding_rows(findings: Sequence[Finding]) -> list[list[Any]]:
    return [[f.method, constant_label(f.name, f.value), f.device, human_bytes(f.bytes_per_call)] for f in findings]


def _stays_rows(stays: Sequence[Finding]) -> list[list[Any]]:
    return [[f.method, constant_label(f.name, f.value), f.device, human_bytes(f.bytes_per_call), f.reason]
            for f in stays]


def stays_line(stays: Sequence[Finding], strict: bool, hint: bool = True) -> str:
    """What stays copied on every call and why, in one sentence (never "nothing is copied")."""
    from pte_devconst.rewriter.derived import reasons_in_brief

    total = sum(f.bytes_per_call for f in stays)
    return (f"{_values(len(stays))} still copied to a device on every call that the rewrite cannot move "
            f"({human_bytes(total)} per call): {reasons_in_brief(f.reason for f in stays)}"
            + ("" if strict or not hint else " (--strict fails on them)"))


def selection_text(report: CheckReport) -> str:
    """The options that select what is judged: ``--device cuda:0 and --min-bytes 4096``."""
    options = ([f"--device {','.join(report.devices)}"] if report.devices is not None else []) + \
        ([f"--min-bytes {report.min_bytes}"] if report.min_bytes else [])
    return " and ".join(options)


def filtered_line(filtered: Sequence[Finding], report: CheckReport) -> str:
    """What --device/--min-bytes left out: copied per call all the same, so never passed over in silence."""
    total = sum(f.bytes_per_call for f in filtered)
    return (f"{_values(len(filtered))} copied to a device on every call ({human_bytes(total)} per call) left out by "
            f"{selection_text(report)}, not judged")


def _files(count: int) -> str:
    return plural(count, "file")


def _summary(report: CheckReport) -> str:
    checked = sum(1 for f in report.files if not f.error)
    if report.passed and not report.stays and not report.filtered and not report.accepted:
        return f"{_files(checked)} checked: no constant is copied to a device on every call."
    selected = f" selected by {selection_text(report)}" if selection_text(report) else ""
    parts: list[str] = []
    if checked and not report.findings:
        parts.append(f"{_files(checked)} checked without findings{selected}" if report.unknown
                     else f"{_files(checked)} checked: nothing{selected} left that the rewrite can move")
    if report.findings:
        parts.append(f"{_kind(report, len(report.findings))} in {_files(sum(1 for f in report.files if f.findings))} "
                     f"still copied to a device on every call ({human_bytes(report.bytes_per_call)} per call); fix "
                     f"them with {fix_command(report)}")
    if report.runtime_findings:
        needing = sum(1 for f in report.files if f.runtime_findings)
        parts.append(f"{_files(needing)} {'needs' if needing == 1 else 'need'} a newer ExecuTorch than "
                     f"{report.runtime.value} ({plural(len(report.runtime_findings), 'tensor')} of device initial "
                     f"data); fix them with {fix_command(report)}")
    if report.stays:
        parts.append(stays_line(report.stays, report.strict))
    if report.unknown:
        parts.append(f"{plural(len(report.unknown), 'constant')} in {_files(sum(1 for f in report.files if f.unknown))}"
                     " not judged: their .ptd is missing (NAME.ptd next to NAME.pte, or --ptd)")
    if report.filtered:
        parts.append(filtered_line(report.filtered, report))
    if report.errors:
        parts.append(f"{_files(len(report.errors))} could not be checked")
    if report.unused_devices:
        parts.append(f"no program checked uses {', '.join(report.unused_devices)} (--device): nothing was judged "
                     "for it")
    if report.accepted:
        parts.append(f"{len(report.accepted):,} accepted by the project's config "
                     f"({human_bytes(sum(f.bytes_per_call for f in report.accepted))} per call)")
    return "; ".join(parts) + "."


RUNTIME_FIX_ONCE = "copies it once, on the first call, instead"


def fix_command(report: CheckReport, file: str = "FILE") -> str:
    """The rewrite that fixes a finding, for the runtime the project deploys."""
    runtime = "--runtime 1.5 " if report.runtime.value == "1.5" else ""
    return f"pte-devconst rewrite {runtime}{'--fold ' if report.fold else ''}--in-place {file}"


def runtime_line(report: CheckReport) -> Optional[str]:
    """Which runtime the checked files need: ``Loads in ExecuTorch >= 1.5: 3 files; >= 1.6: 1 file (a.pte)``."""
    needs: dict[str, list[str]] = {}
    for f in report.files:
        if f.runtime_need is not None:
            needs.setdefault(f.runtime_need.runtime.value, []).append(f.file)
    if not needs:
        return None
    parts = [f">= {version}: {_files(len(files))}" + (f" ({listing(files)})" if version == "1.6" else "")
             for version, files in sorted(needs.items())]
    advice = (" (rewrite --runtime 1.5 makes them load in 1.5)" if "1.6" in needs and report.runtime.value == "1.6"
              else "")
    return "Loads in ExecuTorch " + "; ".join(parts) + advice + "."


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


def _quiet_line(f: Finding, what: str) -> str:
    return printable(f"{f.file}: {f.method}: {constant_label(f.name, f.value)} -> {what}")


def render_text(report: CheckReport, view: View) -> None:
    console = stdout_console()
    if view.quiet:  # one unwrapped line per failing or unjudged constant, for grep and editors
        for x in report.findings:
            typer.echo(_quiet_line(x, f"{x.device}: {exact_bytes(x.bytes_per_call)} per call"))
        for x in report.runtime_findings:
            typer.echo(_quiet_line(x, f"{x.device}: device initial data, needs ExecuTorch >= 1.6"))
        for x in report.stays if report.strict else ():
            typer.echo(_quiet_line(x, f"{x.device}: {exact_bytes(x.bytes_per_call)} per call, stays: {x.reason}"))
        for x in report.unknown:
            typer.echo(_quiet_line(x, f"unknown (no .ptd; would move to {x.device})"))
        for x in report.filtered:  # copied per call and not judged: never silence
            typer.echo(_quiet_line(x, f"{x.device}: {exact_bytes(x.bytes_per_call)} per call, not judged: "
                                      f"{x.reason}"))
        return

    def say(line: str) -> None:
        console.print(printable(line), markup=False, soft_wrap=True)

    for f in report.files:
        if f.findings:
            say(f"{f.file}: {_kind(report, len(f.findings))} copied host-to-device on every call")
            console.print(table(None, ["method", "constant", "device", "bytes/call"], _finding_rows(f.findings),
                                right=["bytes/call"]))
        if f.runtime_findings:
            say(f"{f.file}: needs ExecuTorch >= 1.6 (device initial data), the project deploys "
                f"{report.runtime.value}; fix: {fix_command(report, shlex.quote(f.file))}")
            stuck = any(RUNTIME_FIX_ONCE not in x.reason for x in f.runtime_findings)  # some cannot be re-encoded
            console.print(table(None, ["method", "value", "device", "bytes"] + (["why"] if stuck else []),
                                [[x.method, x.value, x.device, human_bytes(x.nbytes)] + ([x.reason] if stuck else [])
                                 for x in f.runtime_findings], right=["bytes"]))
        if f.unknown:
            say(f"{f.file}: {plural(len(f.unknown), 'constant')} not judged (no .ptd); they would move if their "
                "data matched")
            console.print(table(None, ["method", "constant", "device", "bytes/call"], _finding_rows(f.unknown),
                                right=["bytes/call"]))
        if f.stays and (report.strict or view.verbose):
            say(f"{f.file}: {_values(len(f.stays))} copied on every call that the rewrite cannot move")
            console.print(table(None, ["method", "value", "device", "bytes/call", "why"], _stays_rows(f.stays),
                                right=["bytes/call"]))
        elif f.stays:
            say(f"{f.file}: {stays_line(f.stays, False, hint=False)}")
        if f.filtered:
            say(f"{f.file}: {filtered_line(f.filtered, report)}")
            if view.verbose:
                console.print(table(None, ["method", "value", "device", "bytes/call", "left out by"],
                                    _stays_rows(f.filtered), right=["bytes/call"]))
    for f in report.files:
        if f.accepted:
            say(f"{f.file}: {len(f.accepted):,} accepted (the project's config accepts them)")
            console.print(table(None, ["method", "constant", "device", "bytes/call", "accepted because"],
                                [row + [x.accepted] for row, x in zip(_finding_rows(f.accepted), f.accepted)],
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
    """A file's status and totals in a few words (after its name in ``file_line`` and the markdown details)."""
    accepted = f"; {len(f.accepted):,} accepted" if f.accepted else ""
    if f.error:
        return f.error[len(f.file) + 2:] if f.file and f.error.startswith(f"{f.file}: ") else f.error
    if f.findings:
        fix = fix_command(report, shlex.quote(f.file))
        return (f"{_kind(report, len(f.findings))} copied to a device on every call "
                f"({human_bytes(f.bytes_per_call)} per call){accepted}; fix: {fix}")
    if f.runtime_findings:
        return (f"needs ExecuTorch >= 1.6 (device initial data, {plural(len(f.runtime_findings), 'tensor')}); the "
                f"project deploys {report.runtime.value}{accepted}; fix: {fix_command(report, shlex.quote(f.file))}")
    if f.failing:  # --strict: what stays or is not judged
        return (f"{_values(len(f.failing))} copied on every call that the rewrite cannot move or could not judge "
                f"(--strict){accepted}")
    if f.unknown:
        return f"{plural(len(f.unknown), 'constant')} not judged (no .ptd){accepted}"
    stays = f"; {plural(len(f.stays), 'copy', 'copies')} stay for a stated reason" if f.stays else ""
    return f"ok ({plural(f.constants, 'constant')}{stays}{accepted})"


def file_line(report: CheckReport, f: FileCheck) -> str:
    """One file in one line (``--format concise``, what the pre-commit hook prints): its name, status and totals."""
    return printable(f"{f.file}: {file_status(report, f)}" if f.file else file_status(report, f))


def render_concise(report: CheckReport, view: View) -> str:
    return "\n".join([file_line(report, f) for f in report.files] + [printable(_summary(report))])


# ------------------------------------------------------------------------------------------- markdown

STATUS_MARKS = {"ok": "✅ ok", "findings": "❌ copied", "unknown": "❔ not judged", "error": "⛔ error"}


def _markdown_finding_rows(findings: Sequence[Finding]) -> list[list[Any]]:
    return [[md_code(f.method), md_code(constant_label(f.name, f.value)), md_code(f.device),
             exact_bytes(f.bytes_per_call)] for f in findings]


def device_memory_columns(files: Sequence[FileCheck]) -> list[tuple[str, Any]]:
    """The summary's device-memory columns (before, after), where the report carries them."""
    if not any(f.device_memory for f in files):
        return []

    def side(name: str) -> Any:
        return lambda f: (human_bytes(getattr(f.device_memory, name))
                          if f.device_memory and (f.device_memory.before or f.device_memory.after) else "-")
    return [("device memory now", side("before")), ("after a rewrite", side("after"))]


def summary_table(report: CheckReport) -> str:
    """One row per file: status, constants still copied and their bytes per call, accepted, fold gain."""
    extra = device_memory_columns(report.files)
    columns = (["file", "status", "still copied", "bytes/call", "cannot move", "accepted", "fold gain"]
               + [name for name, _ in extra])
    rows = []
    for f in report.files:
        rows.append([md_code(f.file) if f.file else "", STATUS_MARKS.get(str(f.status), str(f.status)),
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


def file_details(report: CheckReport, f: FileCheck) -> Block:
    """A file's details as a collapsed block: its sections, one per rule that found something (the body is cut
    first when too long)."""
    from pte_devconst.rewriter.gate_rules import rule_covering

    head = f"<details><summary><code>{_summary_html(f.file)}</code>: {_summary_html(file_status(report, f))}</summary>"
    body: list[str] = [""]
    if f.error:
        body += [_rule_heading(rule_covering("error"), report, md_text(f.error)), ""]
    if f.findings:
        body += [_rule_heading(rule_covering("findings"), report, "copied to a device on every call; "
                               f"`pte-devconst rewrite{' --fold' if report.fold else ''} --in-place` moves them:"), ""]
        body += markdown_table(["method", "constant", "device", "bytes/call"], _markdown_finding_rows(f.findings),
                               right=["bytes/call"]).split("\n") + [""]
    if f.unknown:
        body += [_rule_heading(rule_covering("unknown"), report, "not judged (no .ptd; pass `--ptd` or put NAME.ptd "
                               "next to NAME.pte):"), ""]
        body += markdown_table(["method", "constant", "would move to", "bytes/call"],
                               _markdown_finding_rows(f.unknown), right=["bytes/call"]).split("\n") + [""]
    if f.stays:
        body += [_rule_heading(rule_covering("stays"), report, "copied on every call; the rewrite cannot move them:"),
                 ""]
        body += markdown_table(["method", "value", "device", "bytes/call", "why"],
                               [row + [md_text(x.reason)] for row, x in zip(_markdown_finding_rows(f.stays), f.stays)],
                               right=["bytes/call"]).split("\n") + [""]
    if f.accepted:
        body += ["**Accepted (the project's config):**", ""]
        body += markdown_table(["rule", "method", "constant", "device", "bytes/call", "accepted because"],
                               [[x.rule, *row, md_text(x.accepted)] for row, x in
                                zip(_markdown_finding_rows(f.accepted), f.accepted)],
                               right=["bytes/call"]).split("\n") + [""]
    if f.filtered:
        body += [_rule_heading(rule_covering("filtered"), report, f"left out by {md_text(selection_text(report))} "
                               "(copied on every call, not judged):"), ""]
        body += markdown_table(["method", "value", "device", "bytes/call", "left out by"],
                               [row + [md_text(x.reason)] for row, x in
                                zip(_markdown_finding_rows(f.filtered), f.filtered)],
                               right=["bytes/call"]).split("\n") + [""]
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
    if report.device_problems:
        tail += ["", "**Could not check:**", ""] + [f"- {md_text(problem)}" for problem in report.device_problems]
    if report.warnings:
        tail += ["", "**Warnings:**", ""] + [f"- {md_text(w)}" for w in report.warnings]
    hint = fold_hint(report.fold_gain)
    if hint:
        tail += ["", hint]
    if report.unused_accepts:
        tail += ["", "**Accepted findings that matched nothing** (remove them from the config):", ""]
        tail += [f"- {md_text(a.origin)}: {md_text(a.describe())}" for a in report.unused_accepts]
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
               if f.error or f.findings or f.unknown or f.stays or f.accepted or f.filtered or f.note]
    budget = limit - sum(len(line) + 1 for line in lines + tail) - 200
    return lines + fit_blocks(details, max(0, budget), limit, "file") + tail


# --------------------------------------------------------------------------------------------- github


def _largest(findings: Sequence[Finding]) -> Finding:
    return max(findings, key=lambda x: x.bytes_per_call)


def _rule_title(rule: GateRule, what: str) -> str:
    return f"pte-devconst {rule.id} {rule.name}: {what}"


def _file_annotation(report: CheckReport, f: FileCheck, rule: GateRule) -> Optional[Annotation]:
    """One file's annotation of one rule: its totals, its largest item and what to do; None for a rule
    annotated once for the whole check."""
    if rule.once:
        return None
    level = rule.level_for(report.strict).github
    weight = (0 if f.error else 1, -sum(x.bytes_per_call for x in f.found(rule)), f.file, rule.id)
    if rule.covers == "error":
        return Annotation(level, github_annotation(level, f.error, file=f.file or None,
                                                   title=_rule_title(rule, "cannot check")), weight)
    found = f.found(rule)
    worst = _largest(found)
    total = sum(x.bytes_per_call for x in found)
    where = f"{worst.method}: {constant_label(worst.name, worst.value)}"
    accepted = f" {len(f.accepted):,} more accepted by the project's config." if f.accepted else ""
    if rule.covers == "findings":
        what = f"{_kind(report, len(found))} copied on every call"
        message = (f"{_kind(report, len(found))} copied to a device on every call ({exact_bytes(total)} per call); "
                   f"the largest: {where}, {exact_bytes(worst.bytes_per_call)} per call to {worst.device}. Fix: "
                   f"pte-devconst rewrite {'--fold ' if report.fold else ''}--in-place {shlex.quote(f.file)}."
                   f"{accepted}")
    elif rule.covers == "stays":
        what = (f"{plural(len(found), 'copy')} that {'stays' if len(found) == 1 else 'stay'}"
                + (" (--strict)" if report.strict else ""))
        message = (f"{_values(len(found))} copied on every call that the rewrite cannot move ({exact_bytes(total)} "
                   f"per call); the largest: {where}{': ' + worst.reason if worst.reason else ''}.{accepted}")
    else:  # not judged
        what = f"{plural(len(found), 'constant')} not judged"
        message = (f"{_values(len(found))} not judged ({exact_bytes(total)} per call); the largest: {where}"
                   f"{': ' + worst.reason if worst.reason else ''}. {f.note or 'Pass --ptd FILE.ptd.'}{accepted}")
    return Annotation(level, github_annotation(level, message, file=f.file, title=_rule_title(rule, what)), weight)


def render_github(report: CheckReport, view: View) -> GithubReport:
    """GitHub Actions annotations: one per file and rule that found something (errors first, then by bytes per
    call), at the rule's level; what the options left out as one notice for the whole check; the devices no
    program uses and the accepted findings that matched nothing; then the summary line.  ``Output`` caps them
    per level (``--max-annotations``)."""
    from pte_devconst.rewriter.gate_rules import rule_covering

    annotations = [a for f in report.files for rule in f.fired()
                   if (a := _file_annotation(report, f, rule)) is not None]
    left_out = rule_covering("filtered")
    unused = [f.file for f in report.files if f.unused_selection]
    if report.filtered or unused:
        message = "; ".join(([f"{filtered_line(report.filtered, report)} (in "
                              f"{_files(sum(1 for f in report.files if f.filtered))})"] if report.filtered else [])
                            + ([f"{_files(len(unused))} use none of the devices selected (--device "
                                f"{', '.join(report.devices or ())}), nothing in them judged: {listing(unused)}"]
                               if unused else []))
        level = left_out.level_for(report.strict).github
        annotations.append(Annotation(level, github_annotation(level, message,
                                                               title=_rule_title(left_out, "left out by the options"))))
    device = rule_covering("device_problems")
    for problem in report.device_problems:
        level = device.level_for(report.strict).github
        annotations.append(Annotation(level, github_annotation(level, problem,
                                                               title=_rule_title(device, "device not used"))))
    accepts = rule_covering("unused_accepts")
    for entry in report.unused_accepts:
        level = accepts.level_for(report.strict).github
        annotations.append(Annotation(level, github_annotation(level, f"{entry.origin}: accepted finding matched "
                                                               f"nothing: {entry.describe()}",
                                                               title=_rule_title(accepts, "unused accept"))))
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


def _sarif_result(report: CheckReport, rules: Sequence[GateRule], rule: GateRule, f: FileCheck
                  ) -> Optional[dict[str, Any]]:
    """One result per (file, rule): the file's constants the rule found (and those the project accepts) in its
    message and properties; None when the rule found nothing here."""
    live = f.found(rule)
    accepted = tuple(x for x in f.accepted if x.rule == rule.id)
    if rule.covers == "error":
        if not f.error:
            return None
        text, properties = f.error, {}
    else:
        if not live and not accepted:
            return None
        shown = live or accepted
        largest = sorted(shown, key=lambda x: -x.bytes_per_call)
        named = listing((f"{constant_label(x.name, x.value)} in {x.method} ({exact_bytes(x.bytes_per_call)} per "
                         f"call to {x.device}{': ' + x.reason if x.reason else ''})" for x in largest),
                        SARIF_CONSTANTS_SHOWN)
        total = sum(x.bytes_per_call for x in live)
        text = (f"{rule.title}: {plural(len(live), 'value')} ({exact_bytes(total)} per call): {named}." if live
                else f"{rule.title}: all {plural(len(accepted), 'value')} accepted by the project's config: {named}.")
        if live and accepted:
            text += f" {len(accepted):,} more accepted by the project's config."
        properties = {"count": len(live), "bytesPerCall": total, "constants": [_constant_json(x) for x in live],
                      "accepted": [_constant_json(x) for x in accepted]}
    result: dict[str, Any] = {
        "ruleId": rule.id, "ruleIndex": list(rules).index(rule), "level": rule.level_for(report.strict).value,
        "message": {"text": printable(text)},
        "locations": [{"physicalLocation": {"artifactLocation": {"uri": _uri(f.file)}}}],
        "partialFingerprints": {"pteDevconst/v1": fingerprint(rule, f.file)},
        "properties": properties,
    }
    if rule.covers != "error" and not live:
        result["suppressions"] = [{"kind": "external", "justification": printable("; ".join(
            sorted({x.accepted for x in accepted})))}]
    return result


def sarif_document(report: CheckReport, view: Optional[View] = None) -> dict[str, Any]:
    """SARIF 2.1.0 for code scanning: one result per file and rule (the constants in its message and properties,
    a stable fingerprint; one whose every constant is accepted is suppressed); what is reported once for the whole
    check (the options' leftovers, devices no program uses, accepts that matched nothing) as notifications."""
    from pte_devconst import __version__
    from pte_devconst.rewriter.gate_rules import RULES, rule_covering

    results = [result for f in report.files for rule in RULES if rule.scope == "file" and not rule.once
               if (result := _sarif_result(report, RULES, rule, f)) is not None]
    notifications = []
    left_out = rule_covering("filtered")
    if report.filtered:
        notifications.append((left_out, filtered_line(report.filtered, report)))
    notifications += [(rule_covering("device_problems"), problem) for problem in report.device_problems]
    notifications += [(rule_covering("unused_accepts"), f"{a.origin}: accepted finding matched nothing: "
                                                        f"{a.describe()}") for a in report.unused_accepts]
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
        check_destination(file)
        chosen.append((fmt, file))
    return chosen


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
    chosen = api.programs(given, ptd or (), exclude=settings.exclude, exclude_root=settings.root, refuse=False)
    warn_empty(chosen.empty_folders, options.quiet)
    if not chosen.items and not chosen.problems and (chosen.excluded or chosen.empty_folders):
        # pre-commit named only excluded programs, or the folders hold none: nothing to check is no failure
        if chosen.excluded and not options.quiet:
            typer.echo(printable(f"nothing to check: every program named is excluded by {settings.path}"), err=True)
        return
    with files_progress("checking", [str(p) for p in chosen.paths], options.quiet) as advance:
        report = api.check(chosen, strict=strict if strict is not None else bool(settings.strict),
                           progress=(lambda done, total, name: advance(done, Path(name).name)) if advance else None,
                           etrecord=etrecord, accept=settings.accept, options=plan_options)
    for failed in report.errors:
        typer.echo(printable(f"pte-devconst: error: {failed.error}"), err=True)
    for problem in report.device_problems:
        typer.echo(printable(f"pte-devconst: error: {problem}"), err=True)
    if not options.quiet:
        for warning in report.warnings:
            typer.echo(printable(f"pte-devconst: warning: {warning}"), err=True)
    for unused in report.unused_accepts:
        typer.echo(printable(f"pte-devconst: warning: {unused.origin}: accepted finding matched nothing "
                             f"({unused.describe()})"), err=True)
    output = Output(CHECK, shown, view)
    output.add(report)
    output.close()
    for fmt_written, file in written:  # the same report, kept in files (the CI gate's summary and SARIF)
        kept = Output(CHECK, fmt_written, view)
        kept.add(report)
        write_report(file, kept.blocks())
    if report.exit_code != 0:
        raise typer.Exit(report.exit_code)
