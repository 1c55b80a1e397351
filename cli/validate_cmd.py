"""``pte-devconst validate``: run an original program and its rewrite and check the rewrite's promises."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer

from pte_devconst.cli.app import EXIT_FINDINGS, OPTIONS, command
from pte_devconst.cli.output import (FORMAT_OPTION, JSON_FLAG, OutputFormat, emit_json, markdown_table,
                                     markup_safe, resolve_format, stdout_console, table, md_code, echo_lines)
from pte_devconst.cli.run_cmd import INPUTS_OPTION, PROFILE_OPTION, PTD_OPTION, SIMULATE_OPTION, exact_bytes
from pte_devconst.schema.errors import PteDevconstError

SUMMARY_COLUMNS = ["", "original", "rewritten"]
CHECK_COLUMNS = ["check", "result", "detail"]


def _ms(values: list[float]) -> str:
    return f"{sum(values) / len(values) * 1e3:.3f} ms" if values else "-"


def summary_rows(mv: Any) -> list[list[str]]:
    steady = mv.calls[1:] or mv.calls  # the first call may warm caches up
    last = mv.calls[-1]
    moved_bytes = sum(c.nbytes for c in mv.moved)
    return [
        ["moved constants", "", f"{len(mv.moved)} ({exact_bytes(moved_bytes)})"],
        ["H2D at load", exact_bytes(mv.load_h2d_before), exact_bytes(mv.load_h2d_after)],
        ["H2D per call", exact_bytes(last.h2d_before), exact_bytes(last.h2d_after)],
        ["D2H per call", exact_bytes(last.d2h_before), exact_bytes(last.d2h_after)],
        ["time per call (mean of calls 1+)", _ms([c.wall_s_before for c in steady]),
         _ms([c.wall_s_after for c in steady])],
    ]


def check_rows(mv: Any, marks: tuple[Any, Any]) -> list[list[Any]]:
    return [[c.name, marks[0] if c.passed else marks[1], c.detail] for c in mv.checks]


def render_text(result: Any) -> None:
    console = stdout_console()
    devices = "simulated devices" if result.simulated else "real devices"
    console.print(f"[bold]{markup_safe(result.original)}[/] vs [bold]{markup_safe(result.rewritten)}[/]: {result.calls} calls each, {devices}", soft_wrap=True)
    for mv in result.methods:
        console.print(table(f"method {mv.method}", SUMMARY_COLUMNS, summary_rows(mv), right=SUMMARY_COLUMNS[1:]))
        from rich.text import Text

        console.print(table(None, CHECK_COLUMNS, check_rows(mv, (Text("pass", style="green"), Text("FAIL", style="red")))))
    console.print("[bold green]PASS[/]" if result.passed else "[bold red]FAIL[/]")


def render_markdown(result: Any) -> None:
    lines = [f"### pte-devconst validate: {md_code(Path(result.original).name)} → {md_code(Path(result.rewritten).name)}", "",
             f"{result.calls} calls each, {'simulated' if result.simulated else 'real'} devices: "
             f"**{'PASS' if result.passed else 'FAIL'}**", ""]
    for mv in result.methods:
        lines += [f"#### method {md_code(mv.method)}", "", markdown_table(SUMMARY_COLUMNS, summary_rows(mv)), "",
                  markdown_table(CHECK_COLUMNS, check_rows(mv, ("✅ pass", "❌ FAIL"))), ""]
    echo_lines(lines)


@command("validate")
def validate_command(
    original: Path = typer.Argument(..., help="The original .pte.", show_default=False),
    rewritten: Path = typer.Argument(..., help="Its rewrite.", show_default=False),
    ptd: Optional[Path] = PTD_OPTION,
    rewritten_ptd: Optional[Path] = typer.Option(None, "--rewritten-ptd", help="The rewrite's .ptd (default: --ptd)."),
    inputs: Optional[Path] = INPUTS_OPTION,
    expected: Optional[Path] = typer.Option(None, "--expected", "-e",
                                            help="torch.save file of expected outputs ({method: [outputs, ...]})."),
    method: Optional[list[str]] = typer.Option(None, "--method", "-m",
                                               help="Method(s) to validate (default: every method with inputs)."),
    calls: int = typer.Option(2, "--calls", "-n", help="Calls per program (at least 2)."),
    rtol: float = typer.Option(1e-4, "--rtol", help="Relative tolerance against --expected (and between the "
                                                    "programs when they run different kernels)."),
    atol: float = typer.Option(1e-5, "--atol", help="Absolute tolerance, as --rtol."),
    simulate_devices: bool = SIMULATE_OPTION,
    profile: bool = PROFILE_OPTION,
    fmt: OutputFormat = FORMAT_OPTION,
    json_flag: bool = JSON_FLAG,
) -> None:
    """Check that a rewrite computes the same outputs and copies each moved constant once, at load only.

    Exit 0 when every check passes, 1 when one fails, 2 on bad input.
    """
    if calls < 2:
        raise PteDevconstError(f"--calls must be at least 2 (got {calls}): one call cannot show per-call copies")
    if rtol < 0 or atol < 0:
        raise PteDevconstError("--rtol and --atol must not be negative")
    from pte_devconst.runner.validate import validate

    result = validate(original, rewritten, ptd=ptd, rewritten_ptd=rewritten_ptd, inputs=inputs, expected=expected,
                      calls=calls, rtol=rtol, atol=atol, simulate_devices=simulate_devices, methods=method or None,
                      profile=profile)
    fmt = resolve_format(fmt, json_flag)
    if fmt is OutputFormat.json:
        emit_json("validate", result.to_json())
    elif fmt is OutputFormat.markdown:
        render_markdown(result)
    elif OPTIONS.quiet:
        typer.echo("PASS" if result.passed else "FAIL")
    else:
        render_text(result)
    if not result.passed:
        raise typer.Exit(EXIT_FINDINGS)
