"""``pte-devconst inspect``: what is in a .pte, at a glance."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer

from pte_devconst.cli.app import command
from pte_devconst.cli.output import (echo_lines, FORMAT_OPTION, JSON_FLAG, OutputFormat, emit_json, fold_hint, human_bytes,
                                     markdown_table, markup_safe, md_code, md_text, printable, resolve_format, shape_text,
                                     stdout_console, table)
from pte_devconst.schema.record import record

if TYPE_CHECKING:  # the rewriter is imported when the command runs, not at start-up
    from pte_devconst.rewriter.inventory import MethodSummary, ProgramSummary
    from pte_devconst.rewriter.plan import FoldGain


def _io(values) -> str:
    parts = []
    for v in values:
        parts.append(f"{v.dtype}{shape_text(v.shape)}" + (f"@{v.device}" if v.device not in (None, "cpu") else "")
                     if v.kind == "tensor" else v.kind)
    return ", ".join(parts) or "-"


def _short(reader: str) -> str:
    """``#1 et_copy::_h2d_copy.out`` -> ``#1 _h2d_copy.out``: namespaces cost columns a terminal lacks."""
    return " ".join(part.split("::")[-1] for part in reader.split(" "))


READERS_SHOWN = 8


def _readers_cell(readers: tuple[str, ...], shorten: bool) -> str:
    """The first few distinct readers and how many more: a constant in 80,000 list slots is one line, not 80,000
    (``--json`` lists them all)."""
    distinct = list(dict.fromkeys(readers[:READERS_SHOWN * 64]))[:READERS_SHOWN]
    shown = [_short(r) if shorten else r for r in distinct]
    rest = len(readers) - sum(readers.count(r) for r in distinct) if len(readers) > len(distinct) else 0
    return "; ".join(shown + ([f"and {rest:,} more"] if rest > 0 else [])) or "-"


def _method_tables(method: MethodSummary):
    yield table(None, ["method", "style", "values", "instructions", "H2D/call (est.)"],
                [[method.name, method.style, method.values, method.instructions,
                  human_bytes(method.h2d_bytes_per_call)]], right=["values", "instructions", "H2D/call (est.)"])
    yield table(None, ["inputs", "outputs"], [[_io(method.inputs), _io(method.outputs)]])
    if method.delegates:
        yield table("delegates", ["#", "backend", "device", "size", "calls at"],
                    [[d.index, d.backend_id, d.device + (" (unreadable target_device)" if d.device_error else ""),
                      human_bytes(d.nbytes), ", ".join(map(str, d.call_sites))]
                     for d in method.delegates], right=["#", "size"])
    if method.buffers:
        yield table("planned buffers", ["id", "device", "size", "tensors"],
                    [[b.memory_id, b.device, human_bytes(b.nbytes), b.tensors] for b in method.buffers],
                    right=["id", "size", "tensors"])
    if method.constants:
        yield table("constants", ["v", "name", "dtype", "shape", "bytes", "read by", "verdict"],
                    [[c.value, c.name, c.dtype, shape_text(c.shape), human_bytes(c.nbytes), _readers_cell(c.readers, True),
                      c.verdict] for c in method.constants], right=["v", "bytes"])
    if method.folds:
        yield table("chains of host kernels from constants to device readers (rewrite --fold)", FOLD_COLUMNS,
                    fold_rows(method), right=["v", "bytes", "per call"])
    if method.initial_data:
        yield table("planned with initial data", ["v", "name", "bytes", "buffer", "offset", "device", "from"],
                    [[i.value, i.name, human_bytes(i.nbytes), i.memory_id, i.offset, i.device, i.source]
                     for i in method.initial_data], right=["v", "bytes", "buffer", "offset"])


FOLD_COLUMNS = ["v", "from", "kernels", "read by", "bytes", "per call", "status"]


def fold_rows(method: MethodSummary) -> list[list[object]]:
    return [[f.value, f.source_name, ", ".join(f.kernels) or "(none: a shared constant)",
             f"delegate{'s' if len(f.delegates) > 1 else ''} {', '.join(map(str, f.delegates))} on {f.device}",
             human_bytes(f.nbytes), human_bytes(f.bytes_per_call), f.status] for f in method.folds]


@record
class InspectReport:
    """What ``inspect`` shows beyond the summary: the data used, and what the runtime would make of the file."""

    summary: ProgramSummary
    ptd: Optional[str]
    unknown_constants: int
    load_refusal: Optional[str]
    notes: tuple[str, ...]
    fold_gain: Optional[FoldGain] = None  # what rewrite --fold would move beyond a plain rewrite


def _warnings(report: InspectReport) -> list[str]:
    lines = [f"warning: {report.load_refusal}"] if report.load_refusal else []
    return lines + [f"note: {note}" for note in report.notes]


def _unknown_hint(report: InspectReport) -> str:
    return (f"{report.unknown_constants} external constant(s) not judged: their data is in a .ptd that was not "
            f"found; put {Path(report.summary.path).with_suffix('.ptd').name} next to it or pass --ptd FILE.ptd.")


def render_text(report: InspectReport) -> None:
    summary = report.summary
    console = stdout_console()
    console.print(f"[bold]{markup_safe(summary.path)}[/]: {human_bytes(summary.file_size)}, program "
                  f"{human_bytes(summary.program_size)}, schema version {summary.schema_version}, "
                  f"{len(summary.methods)} method(s)", soft_wrap=True)
    if report.ptd:
        console.print(printable(f"data: {report.ptd}"), markup=False, soft_wrap=True)
    for line in _warnings(report):
        console.print(printable(line), markup=False, soft_wrap=True)
    if summary.segments:
        console.print(table("segments", ["#", "holds", "offset", "size"],
                            [[s.index, s.role, s.offset, human_bytes(s.nbytes)] for s in summary.segments],
                            right=["#", "offset", "size"]))
    for method in summary.methods:
        console.print()
        for t in _method_tables(method):
            console.print(t)
    console.print()
    if summary.eligible_constants:
        console.print(f"{summary.eligible_constants} constant(s) could move to device memory, saving "
                      f"{human_bytes(summary.eligible_bytes_per_call)} of host-to-device copies per call: "
                      "run [bold]pte-devconst rewrite[/].")
    elif not report.unknown_constants:
        console.print("No constant is copied to a device on every call.")
    if report.unknown_constants:
        console.print(printable(_unknown_hint(report)), markup=False)
    hint = fold_hint(report.fold_gain)
    if hint:
        console.print(hint, markup=False)


def render_markdown(report: InspectReport) -> None:
    summary = report.summary
    out = [f"### {md_code(Path(summary.path).name)}", "",
           f"{human_bytes(summary.file_size)}, {len(summary.methods)} method(s), "
           f"{summary.eligible_constants} constant(s) eligible for device memory "
           f"({human_bytes(summary.eligible_bytes_per_call)} per call)"
           + (f", data {md_code(report.ptd)}." if report.ptd else "."), ""]
    out += [f"> {line}" for line in _warnings(report) + ([_unknown_hint(report)] if report.unknown_constants else [])]
    if out[-1].startswith(">"):
        out.append("")
    for method in summary.methods:
        out += [f"#### method {md_code(method.name)} ({method.style} style, ~{human_bytes(method.h2d_bytes_per_call)} "
                "host-to-device per call)", ""]
        if method.constants:
            out += [markdown_table(["value", "name", "dtype", "shape", "bytes", "read by", "verdict"],
                                   [[c.value, md_code(c.name), c.dtype, shape_text(c.shape), c.nbytes,
                                     _readers_cell(c.readers, False), c.verdict] for c in method.constants]), ""]
        if method.folds:
            out += ["Chains of host kernels from constants to device readers (`rewrite --fold`):", "",
                    markdown_table(FOLD_COLUMNS, fold_rows(method)), ""]
    hint = fold_hint(report.fold_gain)
    if hint:
        out.append(hint)
    echo_lines(out)


@command("inspect")
def inspect_command(
    file: Path = typer.Argument(..., help="The .pte file.", show_default=False),
    ptd: Optional[Path] = typer.Option(None, "--ptd", help="The .ptd data file of its external constants "
                                       "[default: NAME.ptd next to NAME.pte, if there]."),
    fmt: OutputFormat = FORMAT_OPTION,
    json_flag: bool = JSON_FLAG,
) -> None:
    """Show methods, delegates, planned buffers, constants (and who reads them) and segments.

    External constants are judged with the .ptd given, else NAME.ptd next to NAME.pte; without either
    they are shown as unknown.
    """
    from pte_devconst.rewriter.inventory import summarize
    from pte_devconst.rewriter.load import analyze_opened, opened
    from pte_devconst.rewriter.plan import safe_fold_gain

    with opened(file, ptd) as (source, data):
        analysis = analyze_opened(source, data)
        report = InspectReport(summarize(source, analysis), data.path if data else None, len(analysis.unknown),
                               source.load_refusal, analysis.notes, safe_fold_gain(source.program, analysis))
    fmt = resolve_format(fmt, json_flag)
    if fmt is OutputFormat.json:
        gain = report.fold_gain
        emit_json("inspect", {"file": report.summary, "ptd": report.ptd, "unknown_constants": report.unknown_constants,
                              "load_refusal": report.load_refusal, "notes": list(report.notes),
                              "fold_hint": None if gain is None else {"tensors": gain.tensors,
                                                                      "bytes_per_call": gain.bytes_per_call}})
    elif fmt is OutputFormat.markdown:
        render_markdown(report)
    else:
        render_text(report)
