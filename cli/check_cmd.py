"""``pte-devconst check``: the CI gate. Fails while a program still copies a movable constant on every call.

Exit 0: no file has an eligible constant left; 1: some do (each is listed:
file, method, constant, bytes per call), or with ``--strict`` some file copies
any constant-derived value per call; 2: some file could not be checked (every
file is still reported); 3: nothing else, but some external constant could
not be judged because its .ptd is missing (never reported as clean).
What stays copied for a stated reason (read on the host too, transposed on the
host, ...) is always reported, as a summary line, never as "nothing is copied".
Patterns are expanded here too, for shells and CI runners that pass them
through unexpanded.  The decisions are ``pte_devconst.api.check``'s; this module renders them.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Sequence

import typer

from pte_devconst.cli.app import EXIT_OK, OPTIONS, command
from pte_devconst.cli.output import (GATE_FORMAT_OPTION, JSON_FLAG, GateFormat, echo_lines, emit_json,
                                     github_annotation, human_bytes, markdown_table, md_code, md_text, printable,
                                     stdout_console, table)
from pte_devconst.cli.progress import files_progress

if TYPE_CHECKING:  # the analysis is imported when the command runs, not at start-up
    from pte_devconst.api import CheckReport, Finding


def _finding_payload(findings: tuple[Finding, ...], reasons: bool = False) -> list[dict[str, Any]]:
    return [{"method": x.method, "value": x.value, "name": x.name, "device": x.device, "nbytes": x.nbytes,
             "copies_per_call": x.copies_per_call, "bytes_per_call": x.bytes_per_call,
             **({"reason": x.reason} if reasons else {})} for x in findings]


def check_payload(report: CheckReport) -> dict[str, Any]:
    """The JSON document of a check (see cli/report.schema.json)."""
    return {
        "passed": report.passed,
        "exit_code": report.exit_code,
        "strict": report.strict,
        "min_bytes": report.min_bytes,
        "findings": len(report.findings),
        "bytes_per_call": report.bytes_per_call,
        "errors": len(report.errors),
        "unknown": len(report.unknown),
        "stays": len(report.stays),
        "stays_bytes_per_call": report.stays_bytes_per_call,
        "files": [{
            "file": f.file, "ptd": f.ptd, "status": f.status, "constants": f.constants,
            "bytes_per_call": f.bytes_per_call, "error": f.error, "note": f.note,
            "findings": _finding_payload(f.findings), "unknown": _finding_payload(f.unknown),
            "stays": _finding_payload(f.stays, reasons=True), "stays_bytes_per_call": f.stays_bytes_per_call,
        } for f in report.files],
    }


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


def _summary(report: CheckReport) -> str:
    checked = sum(1 for f in report.files if not f.error)
    if report.passed and not report.stays:
        return f"{checked} file(s) checked: no constant is copied to a device on every call."
    parts = ([] if report.findings else [f"{checked} file(s) checked without findings"] if report.unknown
             else [f"{checked} file(s) checked: nothing left that the rewrite can move"])
    if report.findings:
        parts.append(f"{len(report.findings)} constant(s) in "
                     f"{sum(1 for f in report.files if f.findings)} file(s) still copied to a device on every "
                     f"call ({human_bytes(report.bytes_per_call)} per call); fix them with pte-devconst rewrite "
                     "--in-place FILE")
    if report.stays:
        parts.append(stays_line(report.stays, report.strict))
    if report.unknown:
        parts.append(f"{len(report.unknown)} external constant(s) in {sum(1 for f in report.files if f.unknown)} "
                     "file(s) not judged: their .ptd is missing (NAME.ptd next to NAME.pte, or --ptd)")
    if report.errors:
        parts.append(f"{len(report.errors)} file(s) could not be checked")
    return "; ".join(parts) + "."


def _quiet_line(f: Finding, what: str) -> str:
    return printable(f"{f.file}: {f.method}: {constant_label(f.name, f.value)} -> {what}")


def render_text(report: CheckReport) -> None:
    console = stdout_console()
    if OPTIONS.quiet:  # one unwrapped line per failing or unjudged constant, for grep and editors
        for f in report.findings:
            typer.echo(_quiet_line(f, f"{f.device}: {f.bytes_per_call} B per call"))
        for f in report.stays if report.strict else ():
            typer.echo(_quiet_line(f, f"{f.device}: {f.bytes_per_call} B per call, stays: {f.reason}"))
        for f in report.unknown:
            typer.echo(_quiet_line(f, f"unknown (no .ptd; would move to {f.device})"))
        return
    for f in report.files:
        if f.findings:
            console.print(printable(f"{f.file}: {len(f.findings)} constant(s) copied host-to-device on every call"),
                          markup=False, soft_wrap=True)
            console.print(table(None, ["method", "constant", "device", "bytes/call"], _finding_rows(f.findings),
                                right=["bytes/call"]))
        if f.unknown:
            console.print(printable(f"{f.file}: {len(f.unknown)} external constant(s) not judged (no .ptd); "
                                    "they would move if their data matched"), markup=False, soft_wrap=True)
            console.print(table(None, ["method", "constant", "device", "bytes/call"], _finding_rows(f.unknown),
                                right=["bytes/call"]))
        if f.stays and (report.strict or OPTIONS.verbose):
            console.print(printable(f"{f.file}: {len(f.stays)} constant-derived value(s) copied on every call that "
                                    "the rewrite cannot move"), markup=False, soft_wrap=True)
            console.print(table(None, ["method", "value", "device", "bytes/call", "why"], _stays_rows(f.stays),
                                right=["bytes/call"]))
        elif f.stays:
            console.print(printable(f"{f.file}: {stays_line(f.stays, False, hint=False)}"), markup=False,
                          soft_wrap=True)
    if OPTIONS.verbose:
        for f in report.files:
            if f.status == "ok":
                console.print(printable(f"ok  {f.file} ({f.constants} constant(s) examined"
                                        + (f", data {f.ptd}" if f.ptd else "") + ")"), markup=False, soft_wrap=True)
    for f in report.files:
        if f.note:
            console.print(printable(f"note: {f.file}: {f.note}"), markup=False, soft_wrap=True)
    console.print(printable(_summary(report)), markup=False, style="green" if report.passed else "red")


def _markdown_finding_rows(findings: Sequence[Finding]) -> list[list[Any]]:
    return [[md_code(f.file), md_code(f.method), md_code(constant_label(f.name, f.value)), f.device,
             f"{f.bytes_per_call:,}"] for f in findings]


def render_markdown(report: CheckReport) -> None:
    icon = "✅" if report.passed else "❌"
    lines = [f"### {icon} pte-devconst check", "", md_text(_summary(report)), ""]
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
    if report.errors:
        lines += ["**Could not check:**", ""] + [f"- {md_text(f.error)}" for f in report.errors] + [""]
    notes = [f"- {md_code(f.file)}: {md_text(f.note)}" for f in report.files if f.note]
    if notes:
        lines += ["**Notes:**", ""] + notes + [""]
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
    lines.append(printable(_summary(report)))
    typer.echo("\n".join(lines))


@command("check")
def check_command(
    files: list[str] = typer.Argument(..., help="Programs to check: .pte files, glob patterns ('**/*.pte') "
                                      "or directories.", show_default=False),
    ptd: Optional[list[str]] = typer.Option(None, "--ptd", help="The .ptd of a program's external constants "
                                            "(repeatable): DATA.ptd pairs with the program at the same path "
                                            "(or the only program); PROGRAM.pte=DATA.ptd pairs explicitly. "
                                            "Default: NAME.ptd next to NAME.pte (for NAME.devconst.pte also NAME.ptd)."),
    device: Optional[list[str]] = typer.Option(None, "--device", help="Only count constants that could move "
                                               "to this device (repeatable, e.g. cuda:0)."),
    min_bytes: int = typer.Option(0, "--min-bytes", min=0, help="Ignore constants smaller than this."),
    strict: bool = typer.Option(False, "--strict", help="Also fail on constant-derived values copied on every "
                                "call that the rewrite cannot move (read on the host too, transposed on the "
                                "host, ...) and on external constants not judged for want of their .ptd."),
    fmt: GateFormat = GATE_FORMAT_OPTION,
    json_flag: bool = JSON_FLAG,
) -> None:
    """Exit 1 when a program still copies a constant to a device on every call (for CI and pre-commit).

    Exit codes: 0 clean; 1 findings (with --strict any constant-derived copy, also one the rewrite cannot move);
    2 a file could not be checked; 3 only external constants whose .ptd is missing.
    """
    from pte_devconst.api import check, expand_paths, parse_devices

    devices = parse_devices(device or None, "--device")
    paths, _ = expand_paths(files)
    with files_progress("checking", [str(p) for p in paths], OPTIONS.quiet) as advance:
        report = check(files, ptd=ptd or None, min_bytes=min_bytes, devices=devices, strict=strict,
                       progress=(lambda done, total, name: advance(done, Path(name).name)) if advance else None)
    for failed in report.errors:
        typer.echo(printable(f"pte-devconst: error: {failed.error}"), err=True)
    chosen = GateFormat.json if json_flag else fmt
    if chosen is GateFormat.json:
        emit_json("check", check_payload(report))
    elif chosen is GateFormat.markdown:
        render_markdown(report)
    elif chosen is GateFormat.github:
        render_github(report)
    else:
        render_text(report)
    if report.exit_code != EXIT_OK:
        raise typer.Exit(report.exit_code)
