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
through unexpanded.  The decisions are ``pte_devconst.api.check``'s; this module renders them.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional, Sequence

import typer

from pte_devconst.cli.app import EXIT_OK, command, global_options
from pte_devconst.cli.output import (DataOption, ProgramsArgument, GateFormat, GateFormatOption, JsonFlag, echo_lines, emit_json, fold_hint,
                                     github_annotation, human_bytes, markdown_table, md_code, md_text, printable,
                                     stdout_console, table)
from pte_devconst.cli.output import EtrecordOption
from pte_devconst.cli.progress import files_progress

if TYPE_CHECKING:  # the analysis is imported when the command runs, not at start-up
    from pte_devconst.api import CheckReport, Finding


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
    if report.passed and not report.stays and not report.filtered:
        return f"{checked} file(s) checked: no constant is copied to a device on every call."
    selected = f" selected by {selection_text(report)}" if selection_text(report) else ""
    parts = ([] if report.findings or not checked else [f"{checked} file(s) checked without findings{selected}"]
             if report.unknown else [f"{checked} file(s) checked: nothing{selected} left that the rewrite can move"])
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
    return (f"Device memory planned: {human_bytes(before)} now, {human_bytes(after)} after a rewrite ({delta})"
            + (f"; a rewrite would grow it in {len(grown)} file(s): {', '.join(grown[:3])}" if grown else "") + ".")


def _quiet_line(f: Finding, what: str) -> str:
    return printable(f"{f.file}: {f.method}: {constant_label(f.name, f.value)} -> {what}")


def render_text(report: CheckReport, quiet: bool = False, verbose: bool = False) -> None:
    console = stdout_console()
    if quiet:  # one unwrapped line per failing or unjudged constant, for grep and editors
        for f in report.findings:
            typer.echo(_quiet_line(f, f"{f.device}: {f.bytes_per_call} B per call"))
        for f in report.stays if report.strict else ():
            typer.echo(_quiet_line(f, f"{f.device}: {f.bytes_per_call} B per call, stays: {f.reason}"))
        for f in report.unknown:
            typer.echo(_quiet_line(f, f"unknown (no .ptd; would move to {f.device})"))
        for f in report.filtered:  # copied per call and not judged: never silence
            typer.echo(_quiet_line(f, f"{f.device}: {f.bytes_per_call} B per call, not judged: {f.reason}"))
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
        console.print(printable(memory), markup=False, soft_wrap=True)


def _markdown_finding_rows(findings: Sequence[Finding]) -> list[list[Any]]:
    return [[md_code(f.file), md_code(f.method), md_code(constant_label(f.name, f.value)), f.device,
             f"{f.bytes_per_call:,}"] for f in findings]


def render_markdown(report: CheckReport) -> None:
    icon = "✅" if report.passed else "❌"
    lines = [f"### {icon} pte-devconst check", "", md_text(_summary(report)), ""]
    memory = _memory_line(report)
    if memory:
        lines += [md_text(memory), ""]
    if report.findings:
        lines += [markdown_table(["file", "method", "constant", "device", "bytes/call"],
                                 _markdown_finding_rows(report.findings)), ""]
    if report.unknown:
        lines += ["**Not judged (no .ptd; pass `--ptd` or put NAME.ptd next to NAME.pte):**", "",
                  markdown_table(["file", "method", "constant", "would move to", "bytes/call"],
                                 _markdown_finding_rows(report.unknown)), ""]
    if report.stays:
        lines += [f"**Copied on every call; the rewrite cannot move them{' (--strict: failing)' if report.strict else ''}:**",
                  "", markdown_table(["file", "method", "value", "device", "bytes/call", "why"],
                                     [row + [md_text(f.reason)] for row, f in
                                      zip(_markdown_finding_rows(report.stays), report.stays)]), ""]
    if report.filtered:
        lines += [f"**Left out by {md_text(selection_text(report))} (copied on every call, not judged):**", "",
                  markdown_table(["file", "method", "value", "device", "bytes/call", "left out by"],
                                 [row + [md_text(f.reason)] for row, f in
                                  zip(_markdown_finding_rows(report.filtered), report.filtered)]), ""]
    if report.errors or report.device_problems:
        lines += ["**Could not check:**", ""] + [f"- {md_text(f.error)}" for f in report.errors] + \
            [f"- {md_text(problem)}" for problem in report.device_problems] + [""]
    if report.warnings:
        lines += ["**Warnings:**", ""] + [f"- {md_text(w)}" for w in report.warnings] + [""]
    notes = [f"- {md_code(f.file)}: {md_text(f.note)}" for f in report.files if f.note]
    if notes:
        lines += ["**Notes:**", ""] + notes + [""]
    hint = fold_hint(report.fold_gain)
    if hint:
        lines += [hint, ""]
    checked = [f for f in report.files if not f.error]
    if checked:
        lines += ["<details><summary>{} file(s) checked</summary>".format(len(checked)), "",
                  markdown_table(["file", "constants", "movable, copied per call", "bytes/call",
                                  "copied per call, cannot move", "bytes/call"],
                                 [[md_code(f.file), f.constants, len(f.findings), f"{f.bytes_per_call:,}",
                                   len(f.stays), f"{f.stays_bytes_per_call:,}"] for f in checked]), "", "</details>"]
    echo_lines(lines)


def render_github(report: CheckReport) -> None:
    """GitHub Actions annotations, one line each (as ``ruff --output-format github``): an error per finding, a
    notice per copy that stays and a warning per constant not judged (with ``--strict`` both are errors too)."""
    lines = []
    for f in report.findings:
        lines.append(github_annotation(
            "error", f"{f.method}: {constant_label(f.name, f.value)} is copied to {f.device} on every call "
            f"({f.bytes_per_call:,} B per call); pte-devconst rewrite --in-place moves it to device memory",
            file=f.file, title="pte-devconst: constant copied on every call"))
    for f in report.stays:
        lines.append(github_annotation(
            "error" if report.strict else "notice",
            f"{f.method}: {constant_label(f.name, f.value)} is copied to {f.device} on every call "
            f"({f.bytes_per_call:,} B per call) and the rewrite cannot move it: {f.reason}",
            file=f.file, title="pte-devconst: constant-derived copy that stays"))
    for file in report.files:
        for f in file.unknown:
            lines.append(github_annotation(
                "error" if report.strict else "warning", f"{f.method}: {constant_label(f.name, f.value)} would move to {f.device} but its data is "
                f"in a .ptd that was not found; {file.note or 'pass --ptd FILE.ptd'}",
                file=f.file, title="pte-devconst: constant not judged"))
        if file.error:
            lines.append(github_annotation("error", file.error, file=file.file or None,
                                           title="pte-devconst: cannot check"))
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
    typer.echo("\n".join(lines))


@command("check")
def check_command(
    ctx: typer.Context,
    files: ProgramsArgument,
    ptd: DataOption = None,
    device: Annotated[Optional[list[str]], typer.Option(
        "--device", help="Only count constants that could move to this device (repeatable, e.g. cuda:0).")] = None,
    min_bytes: Annotated[int, typer.Option("--min-bytes", min=0, help="Ignore constants smaller than this.")] = 0,
    fold: Annotated[bool, typer.Option(
        "--fold", help="Also count what rewrite --fold would move: each chain of host kernels that only move or "
        "cast a constant for device delegates.")] = False,
    strict: Annotated[bool, typer.Option(
        "--strict", help="Also fail on constant-derived values copied on every call that the rewrite cannot move "
        "(read on the host too, transposed on the host, ...) and on external constants not judged for want of "
        "their .ptd.")] = False,
    etrecord: EtrecordOption = None,
    fmt: GateFormatOption = GateFormat.text,
    json_flag: JsonFlag = False,
) -> None:
    """Exit 1 when a program still copies a constant to a device on every call (for CI and pre-commit).

    Exit codes: 0 clean; 1 findings (with --strict any constant-derived copy, also one the rewrite cannot move);
    2 a file could not be checked, or a --device no program uses; 3 only external constants whose .ptd is
    missing. What --device and --min-bytes leave out is reported, never called clean.
    """
    from pte_devconst import api

    options = global_options(ctx)
    devices = api.parse_devices(device or None, "--device")
    paths, _ = api.expand_paths(files)
    with files_progress("checking", [str(p) for p in paths], options.quiet) as advance:
        report = api.check(files, ptd=ptd or None, min_bytes=min_bytes, devices=devices, strict=strict,
                           progress=(lambda done, total, name: advance(done, Path(name).name)) if advance else None,
                           fold=fold, etrecord=etrecord)
    for failed in report.errors:
        typer.echo(printable(f"pte-devconst: error: {failed.error}"), err=True)
    for problem in report.device_problems:
        typer.echo(printable(f"pte-devconst: error: {problem}"), err=True)
    if not options.quiet:
        for warning in report.warnings:
            typer.echo(printable(f"pte-devconst: warning: {warning}"), err=True)
    chosen = GateFormat.json if json_flag else fmt
    if chosen is GateFormat.json:
        emit_json("check", report.to_json())
    elif chosen is GateFormat.markdown:
        render_markdown(report)
    elif chosen is GateFormat.github:
        render_github(report)
    else:
        render_text(report, options.quiet, options.verbose)
    if report.exit_code != EXIT_OK:
        raise typer.Exit(report.exit_code)
