"""``pte-devconst validate``: run an original program and its rewrite and check the rewrite's promises."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from pte_devconst.cli.app import command, global_options
from pte_devconst.util.exit_code import ExitCode
from pte_devconst.cli.output import (EtrecordOption, FormatOption, JsonFlag, OutputFormat, echo_lines, emit_json,
                                     markdown_table, markup_safe, md_code, md_text, printable, resolve_format,
                                     stdout_console, table)
from pte_devconst.cli.run_cmd import (InputsOption, ProfileOption, PtdOption, SimulateOption, caller_memory_note,
                                      delegates_note, exact_bytes, opaque_note)

SUMMARY_COLUMNS = ["", "original", "rewritten"]
CHECK_COLUMNS = ["check", "result", "detail"]
MAX_DIFFERENCE_LINES = 10
MOVED_NAMES_SHOWN = 8


def _ms(values: list[float]) -> str:
    return f"{sum(values) / len(values) * 1e3:.3f} ms" if values else "-"


def summary_rows(mv: Any) -> list[list[str]]:
    steady = mv.calls[1:] or mv.calls  # the first call may warm caches up
    last = mv.calls[-1]
    moved = [c for c in mv.moved if not c.folded]
    folded = [c for c in mv.moved if c.folded]
    rows = [["moved constants", "", f"{len(moved)} ({exact_bytes(sum(c.nbytes for c in moved))})"]]
    if folded:
        rows.append(["folded values", "", f"{len(folded)} ({exact_bytes(sum(c.nbytes for c in folded))})"])
    return rows + [
        ["H2D at load", exact_bytes(mv.load_h2d_before), exact_bytes(mv.load_h2d_after)],
        ["H2D on the first call", exact_bytes(mv.calls[0].h2d_before), exact_bytes(mv.calls[0].h2d_after)],
        ["H2D per call", exact_bytes(last.h2d_before), exact_bytes(last.h2d_after)],
        ["  of which constant-derived", exact_bytes(last.derived_before), exact_bytes(last.derived_after)],
        ["D2H per call", exact_bytes(last.d2h_before), exact_bytes(last.d2h_after)],
        ["time per call (mean of calls 1+)", _ms([c.wall_s_before for c in steady]),
         _ms([c.wall_s_after for c in steady])],
    ] + profiler_rows(last)


def profiler_rows(last: Any) -> list[list[str]]:
    """The profiler's own per-call H2D/D2H bytes (--profile on a GPU), next to the ledger's rows."""
    if last.profiled_before is None and last.profiled_after is None:
        return []

    def cell(profiled: Any, direction: str) -> str:
        return "-" if profiled is None else exact_bytes(getattr(profiled, f"{direction}_bytes"))

    return [[f"{label} per call (profiler)", cell(last.profiled_before, key), cell(last.profiled_after, key)]
            for label, key in (("H2D", "h2d"), ("D2H", "d2h"))]


def check_rows(mv: Any, marks: dict[str, Any]) -> list[list[Any]]:
    return [[c.name, marks[c.status.value], c.detail] for c in mv.checks]


def notes(mv: Any) -> list[str]:
    """Lines under a method's tables: which delegates ran opaque, and each boundary difference (capped)."""
    lines = []
    named = [f"{c.name} (v{c.value})" for c in mv.moved if c.name]
    if named:  # the names an ETRecord gave them; the JSON lists every one
        more = len(named) - MOVED_NAMES_SHOWN
        lines.append(f"moved: {', '.join(named[:MOVED_NAMES_SHOWN])}" + (f" and {more} more" if more > 0 else ""))
    before, after = mv.original.delegates, mv.rewritten.delegates
    if before == after:
        lines += delegates_note(before)
    else:
        lines += delegates_note(before, "delegates (original)") + delegates_note(after, "delegates (rewritten)")
    lines += caller_memory_note(mv.rewritten.caller_memory)
    if mv.opaque_backends:
        lines.append(opaque_note(mv.opaque_backends))
    differences = mv.difference_lines()
    lines += differences[:MAX_DIFFERENCE_LINES]
    if len(differences) > MAX_DIFFERENCE_LINES:
        lines.append(f"... and {len(differences) - MAX_DIFFERENCE_LINES} more boundary differences (--format json "
                     f"lists up to 100)")
    return lines


def skipped_lines(result: Any) -> list[str]:
    return [f"method {name} not validated: {why}" for name, why in result.skipped_methods]


def render_text(result: Any) -> None:
    from rich.text import Text

    console = stdout_console()
    devices = "simulated devices" if result.simulated else "real devices"
    console.print(f"[bold]{markup_safe(result.original)}[/] vs [bold]{markup_safe(result.rewritten)}[/]: "
                  f"{result.calls} calls each, {devices}", soft_wrap=True)
    marks = {"pass": Text("pass", style="green"), "fail": Text("FAIL", style="red"),
             "skipped": Text("skipped", style="yellow")}
    for mv in result.methods:
        console.print(table(f"method {mv.method}", SUMMARY_COLUMNS, summary_rows(mv), right=SUMMARY_COLUMNS[1:]))
        console.print(table(None, CHECK_COLUMNS, check_rows(mv, marks)))
        for line in notes(mv):
            console.print(Text(printable(line)), soft_wrap=True)
    for line in skipped_lines(result):
        console.print(Text(printable(line)), soft_wrap=True)
    console.print("[bold green]PASS[/]" if result.passed else "[bold red]FAIL[/]")


def render_markdown(result: Any) -> None:
    lines = [f"### pte-devconst validate: {md_code(Path(result.original).name)} → "
             f"{md_code(Path(result.rewritten).name)}", "",
             f"{result.calls} calls each, {'simulated' if result.simulated else 'real'} devices: "
             f"**{'PASS' if result.passed else 'FAIL'}**", ""]
    lines += [f"> **warning:** {md_text(w)}" for w in result.warnings] + ([""] if result.warnings else [])
    marks = {"pass": "✅ pass", "fail": "❌ FAIL", "skipped": "⏭️ skipped"}
    for mv in result.methods:
        lines += [f"#### method {md_code(mv.method)}", "", markdown_table(SUMMARY_COLUMNS, summary_rows(mv)), "",
                  markdown_table(CHECK_COLUMNS, check_rows(mv, marks)), ""]
        lines += [f"* {md_text(line)}" for line in notes(mv)] + ([""] if notes(mv) else [])
    lines += [f"* {md_text(line)}" for line in skipped_lines(result)]
    echo_lines(lines)


def warn(result: Any) -> None:
    for warning in result.warnings:
        typer.echo(f"pte-devconst: warning: {printable(warning)}", err=True)


@command("validate")
def validate_command(
    ctx: typer.Context,
    original: Annotated[Path, typer.Argument(help="The original .pte.", show_default=False)],
    rewritten: Annotated[Path, typer.Argument(help="Its rewrite.", show_default=False)],
    ptd: PtdOption = None,
    rewritten_ptd: Annotated[Optional[Path], typer.Option(
        "--rewritten-ptd", help="The rewrite's .ptd [default: its NAME.ptd if there, else the original's "
        "data].")] = None,
    inputs: InputsOption = None,
    expected: Annotated[Optional[Path], typer.Option(
        "--expected", "-e", help="torch.save file of expected outputs ({method: [outputs, ...]}).")] = None,
    method: Annotated[Optional[list[str]], typer.Option(
        "--method", "-m", help="Method(s) to validate (default: every method with inputs).")] = None,
    calls: Annotated[int, typer.Option("--calls", "-n", help="Calls per program (at least 2).")] = 2,
    rtol: Annotated[Optional[float], typer.Option(
        "--rtol", show_default=False, help="Relative tolerance for floating outputs against --expected (and between "
        "the programs when they run different kernels); integer and bool outputs always compare exactly "
        "[default: torch.testing.assert_close's for the output's dtype: float32 1.3e-6, float16 1e-3, bfloat16 "
        "1.6e-2, float64 1e-7].")] = None,
    atol: Annotated[Optional[float], typer.Option(
        "--atol", show_default=False, help="Absolute tolerance, as --rtol [default: 1e-5; float64 1e-7].")] = None,
    simulate_devices: SimulateOption = False,
    opaque_delegates: Annotated[bool, typer.Option(
        "--opaque-delegates", help="Run every delegate as an opaque stand-in (seeded outputs from its inputs' "
        "bytes), not only those nothing here executes: fast, and enough for a CI gate.")] = False,
    profile: ProfileOption = False,
    etrecord: EtrecordOption = None,
    fmt: FormatOption = OutputFormat.text,
    json_flag: JsonFlag = False,
) -> None:
    """Check that a rewrite computes the same outputs, gives every delegate call the same bytes, and copies
    each moved constant once, at load only.

    Delegates that neither an executor nor the installed ExecuTorch runtime (XNNPACK) executes run as opaque
    stand-ins. Exit 0 when every check passes, 1 when one fails, 2 on bad input.
    """
    from pte_devconst import api
    from pte_devconst.cli.progress import steps_progress

    quiet = global_options(ctx).quiet
    with steps_progress(f"validating {original.name}", quiet) as progress:  # loading torch alone takes seconds
        result = api.validate(original, rewritten, ptd=ptd, rewritten_ptd=rewritten_ptd, inputs=inputs,
                              expected=expected, calls=calls, rtol=rtol, atol=atol, simulate_devices=simulate_devices,
                              methods=method or None, profile=profile, opaque_delegates=opaque_delegates,
                              progress=progress, etrecord=etrecord)
    fmt = resolve_format(fmt, json_flag)
    if not quiet:
        warn(result)
    if fmt is OutputFormat.json:
        emit_json("validate", result.to_json())
    elif fmt is OutputFormat.markdown:
        render_markdown(result)
    elif quiet:
        typer.echo("PASS" if result.passed else "FAIL")
    else:
        render_text(result)
    if not result.passed:
        raise typer.Exit(ExitCode.FINDINGS)
