"""``pte-devconst run``: execute a method with the torch runner and print outputs and the copy table."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional, Sequence

import typer

from pte_devconst.cli.app import command, global_options
from pte_devconst.cli.formats import Output, Renderers, View, format_option, resolve
from pte_devconst.cli.output import (EtrecordOption, JsonFlag, ProgressOption, markdown_table, markup_safe, md_code,
                                     md_text, printable, stdout_console, table)
from pte_devconst.cli.runner_options import (InputsOption, OpaqueOption, ProfileOption, PtdOption,
                                              SimulateOption, caller_memory_note, delegates_note, opaque_note)
from pte_devconst.util.units import exact_bytes, plural

if TYPE_CHECKING:  # the runner imports torch: only when the command runs
    from pte_devconst.types import RunResult

MAX_CALL_COLUMNS = 6

def copies_text(count: int, nbytes: int, separator: str = ", ") -> str:
    """'5 copies, 3,488 B in all': a count and the bytes of all of them together."""
    if count == 0:
        return "-"
    return f"{plural(count, 'copy')}{separator}{exact_bytes(nbytes)}" + (" in all" if count > 1 else "")


def _phases(result: RunResult) -> list[Any]:
    calls = result.calls
    shown = calls if len(calls) <= MAX_CALL_COLUMNS else calls[:MAX_CALL_COLUMNS - 1] + calls[-1:]
    return [result.load] + [c.copies for c in shown]


def copy_rows(result: RunResult, separator: str = ", ") -> tuple[list[str], list[list[str]]]:
    """The copy table: one row per (direction, cause), one column per phase (load, call 0, ...).

    ``separator`` goes between a cell's count and bytes: a newline keeps terminal columns narrow.
    """
    from pte_devconst.types import CopyTotals

    def _cell(totals: Any) -> str:
        return copies_text(totals.count, totals.nbytes, separator)

    phases = _phases(result)
    keys = sorted({key for phase in phases for key in phase.cells}, key=lambda k: (k[0].value, k[1].value))
    columns = ["copy", "cause"] + [p.phase for p in phases]
    rows = [[d.value.upper(), c.value] + [_cell(p.cells.get((d, c), CopyTotals())) for p in phases] for d, c in keys]
    rows.append(["H2D", "total"] + [_cell(p.h2d) for p in phases])
    rows.append(["H2D", "of which constant-derived"] + [_cell(p.constant_derived_h2d) for p in phases])
    rows.append(["D2H", "total"] + [_cell(p.d2h) for p in phases])
    timing = ["", "wall time"] + [""] + [f"{c.wall_s * 1e3:.3f} ms" for c in result.calls
                                        if c.copies.phase in {p.phase for p in phases}]
    rows.append(timing)
    for call in result.calls:
        if call.profiled is not None and call.copies.phase in {p.phase for p in phases}:
            break
    else:
        return columns, rows
    rows.append(["H2D", "profiler memcpy"] + [""] + [
        copies_text(c.profiled.h2d_count, c.profiled.h2d_bytes, separator) if c.profiled else ""
        for c in result.calls if c.copies.phase in {p.phase for p in phases}])
    return columns, rows


def output_rows(outputs: Sequence[Any], names: Sequence[Optional[str]] = ()) -> list[list[str]]:
    """One row per output; with ``names`` (an ETRecord's) a name column after the position (``-``: none)."""
    from pte_devconst.types import OutputSummary

    rows = []
    for position, value in enumerate(outputs):
        s = OutputSummary.of(value)
        if s.kind != "tensor":
            row = [str(position), s.kind, "", repr(s.value), ""]
        else:
            row = [str(position), s.dtype or "", "[" + ", ".join(map(str, s.shape or ())) + "]", (s.sha256 or "")[:16],
                   f"{s.sum:.6g}" if s.sum is not None else ""]
        if names:
            row.insert(1, (names[position] if position < len(names) else None) or "-")
        rows.append(row)
    return rows


OUTPUT_COLUMNS = ["#", "dtype", "shape", "sha256", "sum"]


def output_columns(names: Sequence[Optional[str]]) -> list[str]:
    """The outputs table's columns: a name column only where some output has a name."""
    return OUTPUT_COLUMNS[:1] + ["name"] + OUTPUT_COLUMNS[1:] if names else OUTPUT_COLUMNS


def names_lines(result: RunResult) -> list[str]:
    """``inputs: tokens, scale`` where the inputs have names, and the names' notes (an ETRecord of another
    program says so here)."""
    lines = []
    if any(result.input_names):
        shown = [name or f"input {i}" for i, name in enumerate(result.input_names)]
        lines.append(f"inputs: {', '.join(shown)}")
    return lines + [f"note: {note}" for note in (result.names or {}).get("notes", ())]


def _notes(result: RunResult) -> list[str]:
    """Lines under the tables: what ran each delegate, caller memory bound, stand-ins, names."""
    return (delegates_note(result.delegates) + caller_memory_note(result.caller_memory)
            + ([opaque_note(result.opaque_backends)] if result.opaque_backends else []) + names_lines(result))


def _devices(result: RunResult) -> str:
    return "simulated devices" if result.simulated else "real devices"


def render_markdown(result: RunResult, view: View) -> list[str]:
    columns, rows = copy_rows(result, ", ")
    last = result.calls[-1]
    note = _notes(result)
    names = result.output_names if any(result.output_names) else ()
    return [f"### {md_code(Path(result.path).name)} method {md_code(result.method)} ({_devices(result)})", "",
            *(f"> {md_text(line)}" for line in note), *([""] if note else []),
            f"Outputs of call {last.index}:", "",
            markdown_table(output_columns(names), output_rows(last.outputs, names)),
            "", "Copies:", "", markdown_table(columns, rows)]


def render_text(result: RunResult, view: View) -> None:
    if view.quiet:
        return
    from rich.text import Text

    columns, rows = copy_rows(result, "\n")
    last = result.calls[-1]
    names = result.output_names if any(result.output_names) else ()
    console = stdout_console()
    console.print(f"[bold]{markup_safe(result.path)}[/] method [bold]{markup_safe(result.method)}[/]: "
                  f"{plural(len(result.calls), 'call')}, {_devices(result)}", soft_wrap=True)
    for line in _notes(result):
        console.print(Text(printable(line)), soft_wrap=True)
    console.print(table(f"outputs (call {last.index})", output_columns(names), output_rows(last.outputs, names),
                        right=["#", "sum"]))
    # Counts and byte figures are the tool's own text, never file data: their line breaks are kept.
    cells = [[Text(cell) if "\n" in cell else cell for cell in row] for row in rows]
    console.print(table("host/device copies", columns, cells, right=columns[2:]))


RUN = Renderers["RunResult"]("run", text=render_text, markdown=render_markdown, json=lambda result: result.to_json())


@command("run")
def run_command(
    ctx: typer.Context,
    file: Annotated[Path, typer.Argument(help="The .pte program to run.", metavar="FILE", show_default=False)],
    ptd: PtdOption = None,
    method: Annotated[Optional[str], typer.Option("--method", "-m", metavar="METHOD",
                                                  help="Method to run (default: forward or the first).")] = None,
    inputs: InputsOption = None,
    calls: Annotated[int, typer.Option("--calls", "-n", metavar="N", min=1,
                                       help="How many calls (inputs cycle through the given ones).")] = 1,
    simulate_devices: SimulateOption = False,
    opaque_delegates: OpaqueOption = False,
    profile: ProfileOption = False,
    etrecord: EtrecordOption = None,
    outputs: Annotated[Optional[Path], typer.Option(
        "-o", "--output", metavar="OUTPUTS.pt", help="Save every call's outputs there (torch.save, {method: "
        "[outputs of each call]}: what validate --expected reads).", show_default=False)] = None,
    fmt: Annotated[Optional[str], format_option(RUN)] = None,
    json_flag: JsonFlag = False,
    progress: ProgressOption = None,
) -> None:
    """Run a program the way the ExecuTorch runtime does and count every host/device copy.

    Without a GPU a program that uses device memory or device delegates needs --simulate-devices. A
    delegate that neither an executor nor the installed ExecuTorch runtime (XNNPACK) executes needs
    --opaque-delegates (its outputs are then stand-ins).
    """
    from pte_devconst import api
    from pte_devconst.cli import preflight
    from pte_devconst.cli.progress import steps_progress

    # Mistakes in the options are reported at once, before torch is imported (seconds).
    preflight.before_running("run", "runner", ((inputs, "inputs"), (ptd, "data (.ptd)"), (etrecord, "ETRecord")))
    preflight.require_program(file)
    preflight.require_devices(file, preflight.analysed(file, ptd), simulate_devices)
    options = global_options(ctx)
    view = View(options.quiet, options.verbose)
    output = Output(RUN, resolve(RUN, fmt, json_flag, view), view)
    with steps_progress(f"running {file.name}", options.quiet, wanted=calls > 1, forced=bool(progress)) as advance:
        result = api.run(file, ptd=ptd, method=method, inputs=inputs, calls=calls, simulate_devices=simulate_devices,
                         opaque_delegates=opaque_delegates, profile=profile, etrecord=etrecord, outputs=outputs,
                         progress=advance)
    output.add(result)
    output.close()
