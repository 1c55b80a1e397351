"""``pte-devconst check``: the CI gate. Fails while a program still copies a movable constant on every call.

Exit 0: no file has an eligible constant left; 1: some do (each is listed:
file, method, constant, bytes per call); 2: some file could not be checked
(every file is still reported); 3: nothing else, but some external constant
could not be judged because its .ptd is missing (never reported as clean).
Patterns are expanded here too, for shells and CI runners that pass them
through unexpanded.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Sequence

import typer

from pte_devconst.cli.app import EXIT_OK, OPTIONS, command
from pte_devconst.cli.output import (echo_lines, printable, FORMAT_OPTION, JSON_FLAG, OutputFormat, emit_json, fold_hint, human_bytes, markdown_table,
                                     resolve_format, stdout_console, table, md_code, md_text)
from pte_devconst.cli.progress import files_progress

if TYPE_CHECKING:  # the analysis is imported when the command runs, not at start-up
    from pte_devconst.api import CheckReport, Finding


def _finding_payload(findings: tuple[Finding, ...]) -> list[dict[str, Any]]:
    return [{"method": x.method, "value": x.value, "name": x.name, "device": x.device, "nbytes": x.nbytes,
             "copies_per_call": x.copies_per_call, "bytes_per_call": x.bytes_per_call} for x in findings]


def check_payload(report: CheckReport) -> dict[str, Any]:
    """The JSON document of a check (see cli/report.schema.json)."""
    return {
        "fold_hint": ({"tensors": report.foldable, "bytes_per_call": report.foldable_bytes_per_call}
                      if report.foldable else None),
        "passed": report.passed,
        "exit_code": report.exit_code,
        "fold": report.fold,
        "min_bytes": report.min_bytes,
        "findings": len(report.findings),
        "bytes_per_call": report.bytes_per_call,
        "errors": len(report.errors),
        "unknown": len(report.unknown),
        "files": [{
            "file": f.file, "ptd": f.ptd, "status": f.status, "constants": f.constants,
            "bytes_per_call": f.bytes_per_call, "error": f.error, "note": f.note,
            "findings": _finding_payload(f.findings), "unknown": _finding_payload(f.unknown),
        } for f in report.files],
    }


def constant_label(name: str, value: int) -> str:
    """``w (v3)``, or ``value 3`` for a constant without a name."""
    return name if name == f"value {value}" else f"{name} (v{value})"


def _finding_rows(findings: tuple[Finding, ...]) -> list[list[Any]]:
    return [[f.method, constant_label(f.name, f.value), f.device, human_bytes(f.bytes_per_call)] for f in findings]


def _summary(report: CheckReport) -> str:
    checked = sum(1 for f in report.files if not f.error)
    if report.passed:
        return f"{checked} file(s) checked: no constant is copied to a device on every call."
    parts = [] if report.findings else [f"{checked} file(s) checked without findings"]
    if report.findings:
        parts.append(f"{len(report.findings)} {'tensor' if report.fold else 'constant'}(s) in "
                     f"{sum(1 for f in report.files if f.findings)} file(s) still copied to a device on every "
                     f"call ({human_bytes(report.bytes_per_call)} per call); run pte-devconst rewrite"
                     + (" --fold" if report.fold else ""))
    if report.unknown:
        parts.append(f"{len(report.unknown)} external constant(s) in {sum(1 for f in report.files if f.unknown)} "
                     "file(s) not judged: their .ptd is missing (NAME.ptd next to NAME.pte, or --ptd)")
    if report.errors:
        parts.append(f"{len(report.errors)} file(s) could not be checked")
    return "; ".join(parts) + "."


def render_text(report: CheckReport) -> None:
    console = stdout_console()
    if report.findings:
        if OPTIONS.quiet:
            for f in report.findings:  # one unwrapped line each, for grep and editors
                typer.echo(printable(f"{f.file}: {f.method}: {constant_label(f.name, f.value)} -> {f.device}: "
                                     f"{f.bytes_per_call} B per call"))
        else:
            for f in report.files:
                if f.findings:
                    console.print(printable(f"{f.file}: {len(f.findings)} constant(s) copied host-to-device on every call"),
                                  markup=False, soft_wrap=True)
                    console.print(table(None, ["method", "constant", "device", "bytes/call"],
                                        _finding_rows(f.findings), right=["bytes/call"]))
    if report.unknown:
        if OPTIONS.quiet:
            for f in report.unknown:
                typer.echo(printable(f"{f.file}: {f.method}: {constant_label(f.name, f.value)} -> unknown "
                                     f"(no .ptd; would move to {f.device})"))
        else:
            for f in report.files:
                if f.unknown:
                    console.print(printable(f"{f.file}: {len(f.unknown)} external constant(s) not judged (no .ptd); "
                                            "they would move if their data matched"),
                                  markup=False, soft_wrap=True)
                    console.print(table(None, ["method", "constant", "device", "bytes/call"],
                                        _finding_rows(f.unknown), right=["bytes/call"]))
    if OPTIONS.verbose:
        for f in report.files:
            if f.status == "ok":
                console.print(printable(f"ok  {f.file} ({f.constants} constant(s) examined"
                                        + (f", data {f.ptd}" if f.ptd else "") + ")"), markup=False, soft_wrap=True)
    if not OPTIONS.quiet:
        for f in report.files:
            if f.note:
                console.print(printable(f"note: {f.file}: {f.note}"), markup=False, soft_wrap=True)
        console.print(_summary(report), markup=False, style="green" if report.passed else "red")
        hint = _fold_hint(report)
        if hint:
            console.print(hint, markup=False)


def _fold_hint(report: CheckReport) -> Optional[str]:
    from pte_devconst.rewriter.plan import FoldGain

    return fold_hint(FoldGain(report.foldable, report.foldable_bytes_per_call))


def _markdown_finding_rows(findings: Sequence[Finding]) -> list[list[Any]]:
    return [[md_code(f.file), md_code(f.method), md_code(constant_label(f.name, f.value)), f.device,
             f"{f.bytes_per_call:,}"] for f in findings]


def render_markdown(report: CheckReport) -> None:
    icon = "✅" if report.passed else "❌"
    lines = [f"### {icon} pte-devconst check", "", _summary(report), ""]
    if report.findings:
        lines += [markdown_table(["file", "method", "constant", "device", "bytes/call"],
                                 _markdown_finding_rows(report.findings)), ""]
    if report.unknown:
        lines += ["**Not judged (no .ptd; pass `--ptd` or put NAME.ptd next to NAME.pte):**", "",
                  markdown_table(["file", "method", "constant", "would move to", "bytes/call"],
                                 _markdown_finding_rows(report.unknown)), ""]
    if report.errors:
        lines += ["**Could not check:**", ""] + [f"- {md_text(f.error)}" for f in report.errors] + [""]
    notes = [f"- {md_code(f.file)}: {md_text(f.note)}" for f in report.files if f.note]
    if notes:
        lines += ["**Notes:**", ""] + notes + [""]
    hint = _fold_hint(report)
    if hint:
        lines += [hint, ""]
    checked = [f for f in report.files if not f.error]
    if checked:
        lines += ["<details><summary>{} file(s) checked</summary>".format(len(checked)), "",
                  markdown_table(["file", "constants", "left on the host, copied per call", "bytes/call"],
                                 [[md_code(f.file), f.constants, len(f.findings), f"{f.bytes_per_call:,}"]
                                  for f in checked]), "", "</details>"]
    echo_lines(lines)


@command("check")
def check_command(
    files: list[str] = typer.Argument(..., help="Programs to check: .pte files, glob patterns ('**/*.pte') "
                                      "or directories.", show_default=False),
    ptd: Optional[list[str]] = typer.Option(None, "--ptd", help="The .ptd of a program's external constants "
                                            "(repeatable): DATA.ptd pairs with the program at the same path "
                                            "(or the only program); PROGRAM.pte=DATA.ptd pairs explicitly. "
                                            "Default: NAME.ptd next to NAME.pte."),
    device: Optional[list[str]] = typer.Option(None, "--device", help="Only count constants that could move "
                                               "to this device (repeatable, e.g. cuda:0)."),
    min_bytes: int = typer.Option(0, "--min-bytes", min=0, help="Ignore constants smaller than this."),
    fold: bool = typer.Option(False, "--fold", help="Also count what rewrite --fold would move: each chain of "
                              "host kernels that only move or cast a constant for device delegates."),
    fmt: OutputFormat = FORMAT_OPTION,
    json_flag: bool = JSON_FLAG,
) -> None:
    """Exit 1 when a program still copies a constant to a device on every call (for CI and pre-commit)."""
    from pte_devconst.api import check, expand_paths, parse_devices

    devices = parse_devices(device or None, "--device")
    paths, _ = expand_paths(files)
    with files_progress("checking", [str(p) for p in paths], OPTIONS.quiet) as advance:
        report = check(files, ptd=ptd or None, min_bytes=min_bytes, devices=devices,
                       progress=(lambda done, total, name: advance(done, Path(name).name)) if advance else None,
                       fold=fold)
    for failed in report.errors:
        typer.echo(printable(f"pte-devconst: error: {failed.error}"), err=True)
    fmt = resolve_format(fmt, json_flag)
    if fmt is OutputFormat.json:
        emit_json("check", check_payload(report))
    elif fmt is OutputFormat.markdown:
        render_markdown(report)
    else:
        render_text(report)
    if report.exit_code != EXIT_OK:
        raise typer.Exit(report.exit_code)
