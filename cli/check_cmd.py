"""``pte-devconst check``: the CI gate. Fails while a program still copies a movable constant on every call.

Exit 0: no file has an eligible constant left; 1: some do (each is listed:
file, method, constant, bytes per call), or with ``--strict`` some file copies
any constant-derived value per call; 2: some file could not be checked (every
file is still reported), or a ``--device`` names a device no program uses; 3:
nothing else, but some external constant could not be judged because its .ptd
is missing (never reported as clean).  What ``--device``/``--min-bytes`` leave
out is reported with its bytes per call, never as clean.
What stays copied for a stated reason (read on the host too, transposed on the
host, ...) is always reported, as a summary line, never as "nothing is copied".
Patterns are expanded here too, for shells and CI runners that pass them
through unexpanded.  The decisions are the gate's (``rewriter/gate.py``, through
``pte_devconst.api.check``); this module renders them.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional, Sequence

import typer

from pte_devconst.cli.app import command, global_options
from pte_devconst.cli.config import ConfigOption, IsolatedOption
from pte_devconst.cli.output import (DataOption, GateFormat, GateFormatOption, JsonFlag, echo_lines, emit_json,
                                     fold_hint, github_annotation, human_bytes, markdown_table, md_code, md_text,
                                     printable,
                                     stdout_console, table)
from pte_devconst.cli.output import EtrecordOption
from pte_devconst.cli.progress import files_progress
from pte_devconst.util.exit_code import ExitCode

if TYPE_CHECKING:  # the analysis is imported when the command runs, not at start-up
    from pte_devconst.rewriter.gate import CheckReport, FileCheck, Finding


def constant_label(name: str, value: int) -> str:
    """``w (v3)``, or ``value 3`` for a constant without a name."""
    return name if name == f"value {value}" else f"{name} (v{value})"


def _finding_rows(findings: tuple[Finding, ...]) -> list[list[Any]]:
    return [[f.method, constant_label(f.name, f.value), f.device, human_bytes(f.bytes_per_call)] for f in findings]


def _stays_rows(stays: tuple[Finding, ...]) -> list[list[Any]]:
    return [[f.method, constant_label(f.name, f.value), f.device, human_bytes(f.bytes_per_call), f.reason]
            for f in stays]


def stays_line(stays: Sequence[Finding], strict: bool, hint: bool = True) -> str:
    """What stays copied on every call and why, in one sentence (never "nothing is copied")."""
    from pte_devconst.rewriter.derived import reasons_in_brief

    total = sum(f.bytes_per_call for f in stays)
    return (f"{len(stays)} constant-derived value(s) still copied to a device on every call that the rewrite "
            f"cannot move ({human_bytes(total)} per call): {reasons_in_brief(f.reason for f in stays)}"
            + ("" if strict or not hint else " (--strict fails on them)"))


def selection_text(report: CheckReport) -> str:
    """The options that select what is judged: ``--device cuda:0 and --min-bytes 4096``."""
    options = ([f"--device {','.join(report.devices)}"] if report.devices is not None else []) + \
        ([f"--min-bytes {report.min_bytes}"] if report.min_bytes else [])
    return " and ".join(options)


def filtered_line(filtered: Sequence[Finding], report: CheckReport) -> str:
    """What --device/--min-bytes left out: copied per call all the same, so never passed over in silence."""
    total = sum(f.bytes_per_call for f in filtered)
    return (f"{len(filtered)} constant-derived value(s) copied to a device on every call ({human_bytes(total)} per "
            f"call) left out by {selection_text(report)}, not judged")


def _summary(report: CheckReport) -> str:
    checked = sum(1 for f in report.files if not f.error)
    if report.passed and not report.stays and not report.filtered and not report.accepted:
        return f"{checked} file(s) checked: no constant is copied to a device on every call."
    selected = f" selected by {selection_text(report)}" if selection_text(report) else ""
    parts: list[str] = []
    if checked and not report.findings:
        parts.append(f"{checked} file(s) checked without findings{selected}" if report.unknown
                     else f"{checked} file(s) checked: nothing{selected} left that the rewrite can move")
    if report.findings:
        parts.append(f"{len(report.findings)} {'tensor' if report.fold else 'constant'}(s) in "
                     f"{sum(1 for f in report.files if f.findings)} file(s) still copied to a device on every "
                     f"call ({human_bytes(report.bytes_per_call)} per call); fix them with pte-devconst rewrite "
                     + ("--fold " if report.fold else "") + "--in-place FILE")
    if report.stays:
        parts.append(stays_line(report.stays, report.strict))
    if report.unknown:
        parts.append(f"{len(report.unknown)} external constant(s) in {sum(1 for f in report.files if f.unknown)} "
                     "file(s) not judged: their .ptd is missing (NAME.ptd next to NAME.pte, or --ptd)")
    if report.filtered:
        parts.append(filtered_line(report.filtered, report))
    if report.errors:
        parts.append(f"{len(report.errors)} file(s) could not be checked")
    if report.unused_devices:
        parts.append(f"no program checked uses {', '.join(report.unused_devices)} (--device): nothing was judged "
                     "for it")
    if report.accepted:
        parts.append(f"{len(report.accepted)} accepted by the project's config "
                     f"({human_bytes(sum(f.bytes_per_call for f in report.accepted))} per call)")
    return "; ".join(parts) + "."


def _memory_line(report: CheckReport) -> Optional[str]:
    """Planned device memory over the checked files, now and after a rewrite (None: no file plans any)."""
    memories = [f.device_memory for f in report.files if f.device_memory is not None]
    before, after = sum(m.before for m in memories), sum(m.after for m in memories)
    if not memories or not (before or after):
        return None
    change = after - before
    delta = "unchanged" if change == 0 else f"{'+' if change > 0 else '-'}{human_bytes(abs(change))}"
    grown = [f.file for f in report.files if f.device_memory is not None and f.device_memory.warning()]
    kept = [f.file for f in report.files if f.device_memory is not None and f.device_memory.kept_offsets]
    return (f"Device memory planned: {human_bytes(before)} now, {human_bytes(after)} after a rewrite ({delta})"
            + (f"; a rewrite would grow it in {len(grown)} file(s): {', '.join(grown[:3])}" if grown else "")
            + (f"; laying it out again ran out of its work budget in {len(kept)} file(s), which keep the input's "
               f"offsets with the constants appended: {', '.join(kept[:3])}" if kept else "") + ".")


def _quiet_line(f: Finding, what: str) -> str:
    return printable(f"{f.file}: {f.method}: {constant_label(f.name, f.value)} -> {what}")


def render_text(report: CheckReport, quiet: bool = False, verbose: bool = False) -> None:
    console = stdout_console()
    if quiet:  # one unwrapped line per failing or unjudged constant, for grep and editors
        for x in report.findings:
            typer.echo(_quiet_line(x, f"{x.device}: {x.bytes_per_call} B per call"))
        for x in report.stays if report.strict else ():
            typer.echo(_quiet_line(x, f"{x.device}: {x.bytes_per_call} B per call, stays: {x.reason}"))
        for x in report.unknown:
            typer.echo(_quiet_line(x, f"unknown (no .ptd; would move to {x.device})"))
        for x in report.filtered:  # copied per call and not judged: never silence
            typer.echo(_quiet_line(x, f"{x.device}: {x.bytes_per_call} B per call, not judged: {x.reason}"))
        return
    for f in report.files:
        if f.findings:
            console.print(printable(f"{f.file}: {len(f.findings)} {'tensor' if report.fold else 'constant'}(s) copied "
                                    "host-to-device on every call"),
                          markup=False, soft_wrap=True)
            console.print(table(None, ["method", "constant", "device", "bytes/call"], _finding_rows(f.findings),
                                right=["bytes/call"]))
        if f.unknown:
            console.print(printable(f"{f.file}: {len(f.unknown)} external constant(s) not judged (no .ptd); "
                                    "they would move if their data matched"), markup=False, soft_wrap=True)
            console.print(table(None, ["method", "constant", "device", "bytes/call"], _finding_rows(f.unknown),
                                right=["bytes/call"]))
        if f.stays and (report.strict or verbose):
            console.print(printable(f"{f.file}: {len(f.stays)} constant-derived value(s) copied on every call that "
                                    "the rewrite cannot move"), markup=False, soft_wrap=True)
            console.print(table(None, ["method", "value", "device", "bytes/call", "why"], _stays_rows(f.stays),
                                right=["bytes/call"]))
        elif f.stays:
            console.print(printable(f"{f.file}: {stays_line(f.stays, False, hint=False)}"), markup=False,
                          soft_wrap=True)
        if f.filtered:
            console.print(printable(f"{f.file}: {filtered_line(f.filtered, report)}"), markup=False, soft_wrap=True)
            if verbose:
                console.print(table(None, ["method", "value", "device", "bytes/call", "left out by"],
                                    _stays_rows(f.filtered), right=["bytes/call"]))
    for f in report.files:
        if f.accepted:
            console.print(printable(f"{f.file}: {len(f.accepted)} accepted (the project's config accepts them)"),
                          markup=False, soft_wrap=True)
            console.print(table(None, ["method", "constant", "device", "bytes/call", "accepted because"],
                                [row + [x.accepted] for row, x in zip(_finding_rows(f.accepted), f.accepted)],
                                right=["bytes/call"]))
    if verbose:
        for f in report.files:
            if f.status == "ok":
                console.print(printable(f"ok  {f.file} ({f.constants} constant(s) examined"
                                        + (f", data {f.ptd}" if f.ptd else "") + ")"), markup=False, soft_wrap=True)
    for f in report.files:
        if f.note:
            console.print(printable(f"note: {f.file}: {f.note}"), markup=False, soft_wrap=True)
    console.print(printable(_summary(report)), markup=False, style="green" if report.passed else "red")
    hint = fold_hint(report.fold_gain)
    if hint:
        console.print(hint, markup=False)
    memory = _memory_line(report)
    if memory:
        console.print(printable(memory), markup=False)


def _kind(report: CheckReport) -> str:
    return "tensor" if report.fold else "constant"


def file_status(report: CheckReport, f: FileCheck) -> str:
    """A file's status and totals in a few words (after its name in ``file_line`` and the markdown details)."""
    accepted = f"; {len(f.accepted)} accepted" if f.accepted else ""
    if f.error:
        return f.error[len(f.file) + 2:] if f.file and f.error.startswith(f"{f.file}: ") else f.error
    if f.findings:
        fix = f"pte-devconst rewrite {'--fold ' if report.fold else ''}--in-place {shlex.quote(f.file)}"
        return (f"{len(f.findings)} {_kind(report)}(s) copied to a device on every call "
                f"({human_bytes(f.bytes_per_call)} per call){accepted}; fix: {fix}")
    if f.failing:  # --strict: what stays or is not judged
        return (f"{len(f.failing)} constant-derived value(s) copied on every call that the rewrite cannot move or "
                f"could not judge (--strict){accepted}")
    if f.unknown:
        return f"{len(f.unknown)} external constant(s) not judged (no .ptd){accepted}"
    stays = f"; {len(f.stays)} copy(ies) stay for a stated reason" if f.stays else ""
    return f"ok ({f.constants} constant(s){stays}{accepted})"


def file_line(report: CheckReport, f: FileCheck) -> str:
    """One file in one line (``--format concise``, what the pre-commit hook prints): its name, status and totals."""
    return printable(f"{f.file}: {file_status(report, f)}" if f.file else file_status(report, f))


def render_concise(report: CheckReport) -> None:
    lines = [file_line(report, f) for f in report.files]
    lines.append(printable(_summary(report)))
    typer.echo("\n".join(lines))


# ------------------------------------------------------------------------------------------- markdown

# GitHub refuses a pull-request comment (and an issue body) over 65,536 characters; the step summary takes 1 MiB.
MARKDOWN_LIMIT = 65_536
STATUS_MARKS = {"ok": "✅ ok", "findings": "❌ copied", "unknown": "❔ not judged", "error": "⛔ error"}


def _markdown_finding_rows(findings: Sequence[Finding]) -> list[list[Any]]:
    return [[md_code(f.method), md_code(constant_label(f.name, f.value)), md_code(f.device),
             f"{f.bytes_per_call:,} B"] for f in findings]


def device_memory_columns(files: Sequence[FileCheck]) -> list[tuple[str, Any]]:
    """The summary's device-memory columns (before, after), where the report carries them: the hook for
    ``FileCheck.device_memory`` (bytes of device memory before and after the rewrite); none until it does."""
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
                     human_bytes(f.foldable_bytes_per_call) + f" ({f.foldable})" if f.foldable else "-"]
                    + [render(f) for _, render in extra])
    return markdown_table(columns, rows, right=["still copied", "bytes/call", "cannot move", "accepted",
                                                "fold gain", *(name for name, _ in extra)])


def _summary_html(text: str) -> str:
    """File-derived text for an HTML ``<summary>`` (markdown is not read there): printable and HTML-escaped."""
    import html

    return html.escape(printable(text), quote=True)


def file_details(report: CheckReport, f: FileCheck) -> tuple[str, list[str], str]:
    """A file's details as a collapsed block: (opening, body lines, closing), the body cut first when too long."""
    head = f"<details><summary><code>{_summary_html(f.file)}</code>: {_summary_html(file_status(report, f))}</summary>"
    body: list[str] = [""]
    if f.error:
        body += [md_text(f.error), ""]
    if f.findings:
        body += [f"**Copied to a device on every call; `pte-devconst rewrite{' --fold' if report.fold else ''} "
                 "--in-place` moves them:**", ""]
        body += markdown_table(["method", "constant", "device", "bytes/call"], _markdown_finding_rows(f.findings),
                               right=["bytes/call"]).split("\n") + [""]
    if f.unknown:
        body += ["**Not judged (no .ptd; pass `--ptd` or put NAME.ptd next to NAME.pte):**", ""]
        body += markdown_table(["method", "constant", "would move to", "bytes/call"],
                               _markdown_finding_rows(f.unknown), right=["bytes/call"]).split("\n") + [""]
    if f.stays:
        strict_note = " (--strict: failing)" if report.strict else ""
        body += [f"**Copied on every call; the rewrite cannot move them{strict_note}:**", ""]
        body += markdown_table(["method", "value", "device", "bytes/call", "why"],
                               [row + [md_text(x.reason)] for row, x in zip(_markdown_finding_rows(f.stays), f.stays)],
                               right=["bytes/call"]).split("\n") + [""]
    if f.accepted:
        body += ["**Accepted (the project's config):**", ""]
        body += markdown_table(["method", "constant", "device", "bytes/call", "accepted because"],
                               [row + [md_text(x.accepted)] for row, x in
                                zip(_markdown_finding_rows(f.accepted), f.accepted)],
                               right=["bytes/call"]).split("\n") + [""]
    if f.filtered:
        body += [f"**Left out by {md_text(selection_text(report))} (copied on every call, not judged):**", ""]
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
        body += [f"{f.constants:,} constant(s) examined" + (f", data {md_code(f.ptd)}" if f.ptd else "") + ".", ""]
    return head, body, "</details>"


def _size(block: tuple[str, list[str], str]) -> int:
    head, body, tail = block
    return len(head) + 1 + sum(len(line) + 1 for line in body) + len(tail) + 1


CUT_NOTE = "*… {chars:,} characters ({lines:,} lines) of these details cut to keep the report under {limit:,}; " \
           "`--format json` has them all.*"


LEAST_BODY = 600  # a block cut shorter than this says too little: fewer blocks are shown instead


def fit_blocks(blocks: list[tuple[str, list[str], str]], budget: int) -> list[str]:
    """The blocks' lines within ``budget`` characters: while they do not fit, the longest bodies are cut to one
    length (the largest that fits), each at a line, with a line saying how much was cut; when even the bare blocks
    do not fit, the last ones are left out, with a line saying how many."""
    note_room = len(CUT_NOTE) + 40
    bodies = [sum(len(line) + 1 for line in body) for _, body, _ in blocks]
    bare = [_size((head, [], tail)) for head, _, tail in blocks]

    def total(kept: int, cap: int) -> int:
        return sum(b + min(n, cap) + (note_room if n > cap else 0) for b, n in zip(bare[:kept], bodies[:kept]))

    lines: list[str] = []
    kept, used = 0, 0
    for b, n in zip(bare, bodies):  # as many blocks as fit with a useful part of each body (else the last go)
        need = b + min(n, LEAST_BODY) + (note_room if n > LEAST_BODY else 0)
        if used + need > budget:
            break
        kept, used = kept + 1, used + need
    low, high = 0, max(bodies[:kept], default=0)
    while low < high:  # the largest length every body is cut to that fits
        middle = (low + high + 1) // 2
        low, high = (middle, high) if total(kept, middle) <= budget else (low, middle - 1)
    cap = low
    for (head, body, tail), size in zip(blocks[:kept], bodies[:kept]):
        lines.append(head)
        if size <= cap:
            lines += body
        else:
            used, shown = 0, []
            for line in body:
                if used + len(line) + 1 > cap:
                    break
                shown.append(line)
                used += len(line) + 1
            while shown and body[len(shown)].startswith("|--"):
                shown.pop()  # a table's header without its rows reads as a broken table
            cut = body[len(shown):]
            lines += shown + ["", CUT_NOTE.format(chars=sum(len(x) + 1 for x in cut), lines=len(cut),
                                                  limit=MARKDOWN_LIMIT), ""]
        lines.append(tail)
    if kept < len(blocks):
        lines += ["", f"*… the details of {len(blocks) - kept:,} more file(s) left out to keep the report under "
                      f"{MARKDOWN_LIMIT:,} characters; `--format json` has them all.*"]
    return lines


def render_markdown(report: CheckReport, limit: int = MARKDOWN_LIMIT) -> str:
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
    lines = head + shown + (["", f"*… {left:,} more file(s) not listed; `--format json` lists them all.*"]
                            if left else []) + [""]
    details = [file_details(report, f) for f in report.files
               if f.error or f.findings or f.unknown or f.stays or f.accepted or f.filtered or f.note]
    budget = limit - sum(len(line) + 1 for line in lines + tail) - 200
    lines += fit_blocks(details, max(0, budget)) + tail
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------- github

DEFAULT_ANNOTATIONS = 10  # GitHub shows 10 error annotations per step; more are dropped


def _worst(f: FileCheck) -> Optional[Finding]:
    return max(f.failing or f.unknown, key=lambda x: x.bytes_per_call, default=None)


def _annotation(report: CheckReport, f: FileCheck) -> Optional[str]:
    """One file's annotation: its worst finding and its totals; None for a file without findings."""
    if f.error:
        return github_annotation("error", f.error, file=f.file or None, title="pte-devconst: cannot check")
    worst = _worst(f)
    if worst is None:
        return None
    accepted = f" {len(f.accepted)} more accepted by the project's config." if f.accepted else ""
    where = f"{worst.method}: {constant_label(worst.name, worst.value)}"
    if f.findings:
        message = (f"{len(f.findings)} {_kind(report)}(s) copied to a device on every call "
                   f"({f.bytes_per_call:,} B per call); the largest: {where}, {worst.bytes_per_call:,} B per call to "
                   f"{worst.device}. Fix: pte-devconst rewrite {'--fold ' if report.fold else ''}--in-place "
                   f"{shlex.quote(f.file)}.{accepted}")
        return github_annotation("error", message, file=f.file,
                                 title=f"pte-devconst: {len(f.findings)} {_kind(report)}(s) copied on every call")
    if f.failing:  # --strict
        message = (f"{len(f.failing)} constant-derived value(s) copied on every call that the rewrite cannot move or "
                   f"could not judge ({sum(x.bytes_per_call for x in f.failing):,} B per call); the largest: {where}"
                   f"{': ' + worst.reason if worst.reason else ''}.{accepted}")
        return github_annotation("error", message, file=f.file, title="pte-devconst: copies that stay (--strict)")
    message = (f"{len(f.unknown)} external constant(s) not judged: their .ptd was not found; the largest: {where} "
               f"({worst.bytes_per_call:,} B per call). {f.note or 'Pass --ptd FILE.ptd.'}{accepted}")
    return github_annotation("warning", message, file=f.file, title="pte-devconst: constants not judged")


def render_github(report: CheckReport, max_annotations: int = DEFAULT_ANNOTATIONS) -> str:
    """GitHub Actions annotations: one per file with findings (the worst finding and the totals), errors first
    then by bytes per call, at most ``max_annotations`` (0: all); then the summary line."""
    files = sorted(report.files, key=lambda f: (not f.error, -f.bytes_per_call, f.file))
    annotations = [a for a in (_annotation(report, f) for f in files) if a is not None]
    shown = annotations if max_annotations == 0 else annotations[:max_annotations]
    lines = shown
    if len(annotations) > len(shown):
        lines.append(f"{len(annotations) - len(shown)} more file(s) with findings not annotated "
                     f"(--max-annotations {len(annotations)} shows them all)")
    for a in report.unused_accepts:
        lines.append(github_annotation("warning", f"accepted finding matched nothing: {a.describe()}",
                                       title="pte-devconst: unused accept"))
    for file in report.files:  # what the options left out, and devices not used: never silent
        if file.filtered:
            lines.append(github_annotation("warning", filtered_line(file.filtered, report), file=file.file,
                                           title="pte-devconst: left out by the options"))
        if file.unused_selection:
            lines.append(github_annotation(
                "warning", f"uses none of the devices selected (--device {', '.join(file.device_selection or ())}); "
                f"it uses {', '.join(file.devices) or 'no device'}: nothing in it was judged", file=file.file,
                title="pte-devconst: device not used"))
    for problem in report.device_problems:
        lines.append(github_annotation("error", problem, title="pte-devconst: device not used"))
    lines.append(printable(_summary(report)))
    hint = fold_hint(report.fold_gain)
    if hint:
        lines.append(hint)
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------- sarif

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
SARIF_RULES = {
    "PDC001": ("copied-every-call", "A constant read only by a device delegate is copied host-to-device on every "
               "call", "pte-devconst rewrite --in-place FILE moves it to device memory, copied once at load."),
    "PDC002": ("copy-stays", "A constant-derived value is copied to a device on every call and the rewrite cannot "
               "move it", "The reason says why (read on the host too, transposed on the host, ...)."),
    "PDC003": ("not-judged", "An external constant could not be judged: its .ptd is missing",
               "Put NAME.ptd next to NAME.pte or pass --ptd FILE.ptd."),
    "PDC004": ("cannot-check", "The file could not be checked", "The message says what is wrong with it."),
}


def _uri(path: str) -> str:
    from urllib.parse import quote

    return quote(Path(path).as_posix()) if path else "."


def _sarif_result(rule: str, level: str, text: str, file: str, finding: Optional[Finding] = None) -> dict[str, Any]:
    result: dict[str, Any] = {
        "ruleId": rule, "ruleIndex": list(SARIF_RULES).index(rule), "level": level,
        "message": {"text": printable(text)},
        "locations": [{"physicalLocation": {"artifactLocation": {"uri": _uri(file)}}}],
    }
    if finding is not None:
        result["partialFingerprints"] = {"constant/v1": f"{finding.method}/{finding.name}"}
        result["properties"] = {"method": finding.method, "value": finding.value, "name": finding.name,
                                "device": finding.device, "bytesPerCall": finding.bytes_per_call}
        if finding.accepted:
            result["suppressions"] = [{"kind": "external", "justification": finding.accepted}]
    return result


def sarif_document(report: CheckReport) -> dict[str, Any]:
    """SARIF 2.1.0 for code scanning: one result per finding (accepted ones as suppressed) and per unreadable file."""
    from pte_devconst import __version__

    results = []
    for f in report.files:
        if f.error:
            results.append(_sarif_result("PDC004", "error", f.error, f.file))
        for x in f.findings:
            results.append(_sarif_result("PDC001", "error", f"{x.method}: {constant_label(x.name, x.value)} is "
                                         f"copied to {x.device} on every call ({x.bytes_per_call:,} B per call)",
                                         f.file, x))
        for x in f.stays:
            results.append(_sarif_result("PDC002", "error" if report.strict else "note",
                                         f"{x.method}: {constant_label(x.name, x.value)} is copied to {x.device} on "
                                         f"every call ({x.bytes_per_call:,} B per call): {x.reason}", f.file, x))
        for x in f.unknown:
            results.append(_sarif_result("PDC003", "error" if report.strict else "warning",
                                         f"{x.method}: {constant_label(x.name, x.value)} would move to {x.device} "
                                         "but its .ptd was not found", f.file, x))
        for x in f.accepted:
            rule = "PDC002" if x.reason else "PDC001"
            results.append(_sarif_result(rule, "error", f"{x.method}: {constant_label(x.name, x.value)} is copied "
                                         f"to {x.device} on every call ({x.bytes_per_call:,} B per call); accepted: "
                                         f"{x.accepted}", f.file, x))
    rules = [{"id": rule, "name": name, "shortDescription": {"text": short}, "fullDescription": {"text": short},
              "help": {"text": help_text}, "defaultConfiguration": {"level": "error"}}
             for rule, (name, short, help_text) in SARIF_RULES.items()]
    return {"$schema": SARIF_SCHEMA, "version": "2.1.0", "runs": [{
        "tool": {"driver": {"name": "pte-devconst", "version": __version__, "semanticVersion": __version__,
                            "informationUri": "https://github.com/pte-devconst/pte-devconst", "rules": rules}},
        "results": results,
        "invocations": [{"executionSuccessful": report.exit_code is not ExitCode.ERROR,
                         "exitCode": int(report.exit_code)}],
    }]}


# -------------------------------------------------------------------------------------------- command

@command("check")
def check_command(
    ctx: typer.Context,
    files: Annotated[Optional[list[str]], typer.Argument(
        help="Programs: .pte files, glob patterns ('**/*.pte') or directories [default: paths of the config "
        "file].", show_default=False)] = None,
    ptd: DataOption = None,
    device: Annotated[Optional[list[str]], typer.Option(
        "--device", help="Only count constants that could move to this device (repeatable, e.g. cuda:0).")] = None,
    min_bytes: Annotated[Optional[int], typer.Option("--min-bytes", min=0, show_default=False,
                                                     help="Ignore constants smaller than this [default: 0].")] = None,
    fold: Annotated[Optional[bool], typer.Option(
        "--fold/--no-fold", show_default=False,
        help="Also count what rewrite --fold would move: each chain of host kernels that only move or "
        "cast a constant for device delegates [default: no].")] = None,
    strict: Annotated[Optional[bool], typer.Option(
        "--strict/--no-strict", show_default=False,
        help="Also fail on constant-derived values copied on every call that the rewrite cannot move "
        "(read on the host too, transposed on the host, ...) and on external constants not judged for want of "
        "their .ptd [default: no].")] = None,
    etrecord: EtrecordOption = None,
    fmt: GateFormatOption = None,
    json_flag: JsonFlag = False,
    max_annotations: Annotated[int, typer.Option(
        "--max-annotations", min=0, help="--format github: annotate at most this many files, the worst first "
        "(0: all).")] = DEFAULT_ANNOTATIONS,
    config: ConfigOption = None,
    isolated: IsolatedOption = False,
) -> None:
    """Exit 1 when a program still copies a constant to a device on every call (for CI and pre-commit).

    Exit codes: 0 clean; 1 findings (with --strict any constant-derived copy, also one the rewrite cannot move);
    2 a file could not be checked, or a --device no program uses; 3 only external constants whose .ptd is
    missing. What --device and --min-bytes leave out is reported, never called clean.  Settings come from
    [tool.pte-devconst] in pyproject.toml (see docs/cli.md); the command line overrides them.
    """
    from pte_devconst import api
    from pte_devconst.cli.config import load

    options = global_options(ctx)
    settings = load(config, isolated)
    given = settings.programs(files, ctx)
    # Resolved once: the plan's options (devices parsed) and the programs, each paired with its data.
    plan_options = settings.plan_options(device, min_bytes, fold)
    chosen = api.programs(given, ptd or (), exclude=settings.exclude, exclude_root=settings.root, refuse=False)
    if chosen.excluded and not chosen.items and not chosen.problems:  # pre-commit named only excluded programs
        if not options.quiet:
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
    if json_flag:
        shown = GateFormat.json
    elif fmt is not None:
        shown = fmt
    elif settings.output_format:
        shown = GateFormat(settings.output_format)
    else:
        shown = GateFormat.text
    if shown is GateFormat.json:
        emit_json("check", report.to_json())
    elif shown is GateFormat.sarif:
        import json

        typer.echo(json.dumps(sarif_document(report), indent=2))
    elif shown is GateFormat.markdown:
        echo_lines([render_markdown(report)])
    elif shown is GateFormat.github:
        typer.echo(render_github(report, max_annotations))
    elif shown is GateFormat.concise and not options.verbose:  # -v: the tables
        render_concise(report)
    else:
        render_text(report, options.quiet, options.verbose)
    if report.exit_code is not ExitCode.OK:
        raise typer.Exit(report.exit_code)
