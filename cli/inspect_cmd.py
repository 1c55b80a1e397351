"""``pte-devconst inspect``: what is in a .pte, at a glance (one or several programs: files, patterns, folders)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Iterable, Iterator, Optional

import typer

from pte_devconst.cli.app import command, for_each_program, global_options, warn_empty
from pte_devconst.cli.formats import Output, Renderers, View, format_option, resolve
from pte_devconst.cli.mermaid import diagrams
from pte_devconst.cli.output import (DataOption, EtrecordOption, FitTable, JsonFlag, ProgramsArgument, fold_hint,
                                     markdown_table, markup_safe, md_code, md_name, md_text, memory_change,
                                     no_programs_given, printable, reasons_line, shape_text, stdout_console, table)
from pte_devconst.types import constant_label, name_cell
from pte_devconst.util.exit_code import ExitCode
from pte_devconst.util.units import exact_bytes, human_bytes, listing, plural

if TYPE_CHECKING:  # the rewriter is imported when the command runs, not at start-up
    from pte_devconst.api import InspectReport
    from pte_devconst.types import MethodSummary, PerCallCopySummary, RuntimeNeed, ValueSummary


def _io(values: Iterable[ValueSummary]) -> str:
    """``tokens (v93): int64[1, 4], float32[]``: each input or output, with its name and value index where it has
    a name (an ETRecord's), else its type alone."""
    parts = []
    for v in values:
        kind = (f"{v.dtype}{shape_text(v.shape)}" + (f"@{v.device}" if v.device not in (None, "cpu") else "")
                if v.kind == "tensor" else v.kind)
        parts.append(f"{v.name} (v{v.index}): {kind}" if v.name else kind)
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
    return listing(shown, len(shown), len(shown) + rest, "; ") if rest > 0 else "; ".join(shown) or "-"


def _per_call(method: MethodSummary) -> str:
    """The per-call figure; ``<=`` when dynamic tensors count at bounds a call may not reach."""
    return ("<= " if method.h2d_per_call_is_bound else "") + human_bytes(method.h2d_bytes_per_call)


def _method_tables(method: MethodSummary) -> Iterator[FitTable]:
    yield table(None, ["method", "style", "values", "instructions", "H2D/call (est.)"],
                [[method.name, method.style, method.values, method.instructions,
                  _per_call(method)]], right=["values", "instructions", "H2D/call (est.)"])
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
                    ([c.value, name_cell(c.name, c.value), c.dtype, shape_text(c.shape), human_bytes(c.nbytes),
                      _readers_cell(c.readers, True), c.verdict] for c in method.constants), right=["v", "bytes"])
    if method.folds:
        yield table("chains of host kernels from constants to device readers (rewrite --fold)", FOLD_COLUMNS,
                    fold_rows(method), right=["v", "bytes", "per call"])
    if method.initial_data:
        yield table("planned with initial data", ["v", "name", "bytes", "buffer", "offset", "device", "from"],
                    [[i.value, name_cell(i.name, i.value), human_bytes(i.nbytes), i.memory_id, i.offset, i.device,
                      i.source]
                     for i in method.initial_data], right=["v", "bytes", "buffer", "offset"])
    stays = _stays(method)
    if stays:
        yield table("constant-derived copies on every call that the rewrite cannot move",
                    ["v", "name", "device", "bytes/call", "why"],
                    [[c.value, name_cell(c.name, c.value), c.device, human_bytes(c.bytes_per_call), c.reason]
                     for c in stays],
                    right=["v", "bytes/call"])


def _stays(method: MethodSummary) -> list[PerCallCopySummary]:
    return [c for c in method.per_call_copies if c.status == "stays"]


FOLD_COLUMNS = ["v", "from", "kernels", "read by", "bytes", "per call", "status"]


def fold_rows(method: MethodSummary) -> list[list[object]]:
    return [[f.value, constant_label(f.source_name, f.source), ", ".join(f.kernels) or "(none: a shared constant)",
             f"delegate{'s' if len(f.delegates) > 1 else ''} {', '.join(map(str, f.delegates))} on {f.device}",
             human_bytes(f.nbytes), human_bytes(f.bytes_per_call), f.status] for f in method.folds]


def _warnings(report: InspectReport) -> list[str]:
    lines = [f"warning: {report.load_refusal}"] if report.load_refusal else []
    return lines + [f"note: {note}" for note in report.notes]


def _unknown_hint(report: InspectReport) -> str:
    return (f"{plural(report.unknown_constants, 'external constant')} not judged: their data is in a .ptd that was "
            f"not found; {report.ptd_hint}.")


def closing_lines(report: InspectReport) -> list[str]:
    """The verdict at the end: what the rewrite can move, what stays copied per call and why, what was not judged.

    "No constant is copied" only when that is true.  One line each, so another hint can join them.
    """
    summary = report.summary
    lines = []
    if summary.eligible_constants:
        lines.append(f"{plural(summary.eligible_constants, 'constant')} could move to device memory, saving "
                     f"{human_bytes(summary.eligible_bytes_per_call)} of host-to-device copies per call: "
                     "run pte-devconst rewrite.")
    if summary.stays:
        lines.append(f"{plural(len(summary.stays), 'constant-derived value')} "
                     f"{'stays' if len(summary.stays) == 1 else 'stay'} copied to a device on every call "
                     f"({human_bytes(summary.stays_bytes_per_call)} per call); the rewrite cannot move them: "
                     f"{reasons_line(c.reason for c in summary.stays)}.")
    if report.unknown_constants:
        lines.append(_unknown_hint(report))
    hint = fold_hint(report.fold_gain)
    if hint:
        lines.append(hint)
    lines = lines or ["No constant is copied to a device on every call."]
    memory = report.device_memory
    if memory is not None:
        after = ("the same after a rewrite" if memory.after == memory.before else
                 f"{human_bytes(memory.after)} after a rewrite ({memory_change(memory.before, memory.after)})")
        lines.append(f"Device memory planned: {human_bytes(memory.before)}; {after}.")
    once = [m for m in summary.methods if m.first_call_h2d_bytes]
    if once:
        lines.append(f"{human_bytes(sum(m.first_call_h2d_bytes for m in once))} of constants copied to a device once, "
                     "on the first call (a region of the method that runs once).")
    lines.append(runtime_line(summary.runtime_need))
    return lines


def runtime_line(need: Optional[RuntimeNeed]) -> str:
    """``Loads in ExecuTorch >= 1.6 (...: 4 tensors); ...``: the runtime a file needs, and how to get another
    encoding, in the encodings' words (``rewriter/words.py``)."""
    from pte_devconst.types import loads_line

    assert need is not None, "summarize says what loads the file"
    return loads_line(need)


def render_text(report: InspectReport, view: View) -> None:
    summary = report.summary
    console = stdout_console()
    console.print(f"[bold]{markup_safe(summary.path)}[/]: {human_bytes(summary.file_size)}, program "
                  f"{human_bytes(summary.program_size)}, schema version {summary.schema_version}, "
                  f"{plural(len(summary.methods), 'method')}", soft_wrap=True)
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
    for line in closing_lines(report):
        console.print(printable(line), markup=False)


def render_markdown(report: InspectReport, view: View) -> list[str]:
    summary = report.summary
    out = [f"### {md_code(Path(summary.path).name)}", "",
           f"{human_bytes(summary.file_size)}, {plural(len(summary.methods), 'method')}, "
           f"{plural(summary.eligible_constants, 'constant')} eligible for device memory "
           f"({human_bytes(summary.eligible_bytes_per_call)} per call)"
           + (f", data {md_code(report.ptd)}." if report.ptd else "."), ""]
    out += [f"> {md_text(line)}" for line in _warnings(report) + closing_lines(report)]
    out.append("")
    for method in summary.methods:
        out += [f"#### method {md_code(method.name)} ({method.style} style, {_per_call(method)} "
                "host-to-device per call)", ""]
        if any(v.name for v in method.inputs + method.outputs):  # the names an ETRecord gave them
            out += [f"Inputs: {md_text(_io(method.inputs))}; outputs: {md_text(_io(method.outputs))}.", ""]
        if method.constants:
            out += [markdown_table(["value", "name", "dtype", "shape", "bytes", "read by", "verdict"],
                                   ([c.value, md_name(c.name, c.value), c.dtype, shape_text(c.shape),
                                     exact_bytes(c.nbytes), _readers_cell(c.readers, False), c.verdict]
                                    for c in method.constants)), ""]
        if method.folds:
            out += ["Chains of host kernels from constants to device readers (`rewrite --fold`):", "",
                    markdown_table(FOLD_COLUMNS, fold_rows(method)), ""]
        stays = _stays(method)
        if stays:
            out += ["Copied on every call; the rewrite cannot move them:", "",
                    markdown_table(["value", "name", "device", "bytes/call", "why"],
                                   [[c.value, md_name(c.name, c.value), c.device, exact_bytes(c.bytes_per_call),
                                     c.reason] for c in stays]), ""]
    return out + diagrams(report.flows, "Constants copied host-to-device on every call:")


INSPECT = Renderers["InspectReport"]("inspect", text=render_text, markdown=render_markdown,
                                     json=lambda report: report.to_json(), several="reports")


@command("inspect")
def inspect_command(
    ctx: typer.Context,
    files: ProgramsArgument = None,
    ptd: DataOption = None,
    etrecord: EtrecordOption = None,
    fmt: Annotated[Optional[str], format_option(INSPECT)] = None,
    json_flag: JsonFlag = False,
) -> None:
    """Show methods, delegates, planned buffers, constants (and who reads them) and segments.

    External constants are judged with the .ptd given, else NAME.ptd next to NAME.pte; without either
    they are shown as unknown. Several programs are shown one after another; a file that cannot be read
    is reported on stderr and the others are still shown (exit 2).
    """
    from pte_devconst import api

    if not files:
        raise no_programs_given(ctx)
    options = global_options(ctx)
    view = View(options.quiet, options.verbose)
    output = Output(INSPECT, resolve(INSPECT, fmt, json_flag, view), view)
    chosen = api.programs(files, ptd or ())
    names = api.names_from(etrecord)  # read once for every program
    warn_empty(chosen.empty_folders, options.quiet)

    def inspect_one(file: Path) -> InspectReport:
        return api.inspect(file, chosen.data.get(file), paired=True, names=names)

    if chosen.single:  # one program: its report alone, its errors as they are
        (file,) = chosen.paths
        output.add(inspect_one(file))
        output.close()
        return
    output.several = True
    _, failed = for_each_program(chosen.items, inspect_one, output.add, options.debug)
    output.close()
    if failed:
        raise typer.Exit(ExitCode.ERROR)
