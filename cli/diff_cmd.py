"""``pte-devconst diff``: what changed between two programs (text, markdown for pull requests, JSON for CI)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from pte_devconst.cli.app import command, global_options
from pte_devconst.cli.formats import Output, Renderers, View, format_option, resolve
from pte_devconst.cli.mermaid import diagrams
from pte_devconst.cli.output import (EtrecordOption, JsonFlag, echo_lines, markdown_table, markup_safe, md_code,
                                     md_text, stdout_console, table)
from pte_devconst.types import constant_label, name_cell
from pte_devconst.util.exit_code import ExitCode
from pte_devconst.util.units import human_bytes, plural

if TYPE_CHECKING:  # the rewriter is imported when the command runs, not at start-up
    from pte_devconst.types import MethodDiff, ProgramDiff

ROW_LIMIT = 40  # text output; JSON always has everything


def _ratio(before: int, after: int) -> str:
    if before == after:
        return "="
    if before == 0:
        return "new"
    change = (after - before) / before
    return f"{change:+.1%}" if abs(change) < 0.1 else f"{change:+.0%}"


def _summary_rows(d: ProgramDiff) -> list[list[str]]:
    rows = [["file size", human_bytes(d.file_size_before), human_bytes(d.file_size_after),
             _ratio(d.file_size_before, d.file_size_after)],
            ["program (flatbuffer)", human_bytes(d.program_size_before), human_bytes(d.program_size_after),
             _ratio(d.program_size_before, d.program_size_after)]]
    rows += [[f"segment: {s.role}", human_bytes(s.size_before), human_bytes(s.size_after),
              _ratio(s.size_before, s.size_after)] for s in d.segments]
    rows.append(["H2D bytes/call (est.)", human_bytes(d.h2d_bytes_per_call_before),
                 human_bytes(d.h2d_bytes_per_call_after),
                 _ratio(d.h2d_bytes_per_call_before, d.h2d_bytes_per_call_after)])
    if d.device_bytes_before or d.device_bytes_after:
        rows.append(["device memory planned", human_bytes(d.device_bytes_before), human_bytes(d.device_bytes_after),
                     _ratio(d.device_bytes_before, d.device_bytes_after)])
    before, after = d.runtime_before, d.runtime_after
    assert before is not None and after is not None, "program_diff says what loads each file"
    if before.runtime == after.runtime:
        change = "="
    elif after.loads_in(before.runtime):
        change = f"now loads in {after.runtime.value}"
    else:
        change = f"needs {after.runtime.value} ({after.why})"
    rows.append(["loads in ExecuTorch", f">= {before.runtime.value}", f">= {after.runtime.value}", change])
    for method in d.methods:
        rows.append([f"{method.name}: instructions", str(method.instructions_before), str(method.instructions_after),
                     _ratio(method.instructions_before, method.instructions_after)])
    return rows


TENSOR_COLUMNS = ["v", "name", "before", "after", "bytes", "data"]


def _data_text(change: str, after: object) -> str:
    """``changed`` says which bytes: a planned tensor's initial data or a constant's entry."""
    if change != "changed":
        return change
    return "initial data changed" if getattr(after, "initial_data", False) else "data changed"


def _tensor_rows(method: MethodDiff) -> list[list[Any]]:
    return [[t.value, name_cell(t.name, t.value), t.before.describe() if t.before else "-",
             t.after.describe() if t.after else "-", human_bytes(p.nbytes) if (p := t.after or t.before) else "-",
             _data_text(t.data, t.after)]
            for t in method.tensors]


FOLD_COLUMNS = ["v", "from", "kernels (original #)", "device", "bytes", "H2D/call before"]


def _fold_rows(method: MethodDiff) -> list[list[Any]]:
    return [[f"{f.value} (new)" if f.new_value else f.value, constant_label(f.source_name, f.source),
             ", ".join(f.kernels) or "device copy (shared)", f.device, human_bytes(f.nbytes),
             human_bytes(f.bytes_per_call)] for f in method.folds]


DELEGATE_COLUMNS = ["#", "backend", "change"]


def _delegate_rows(method: MethodDiff) -> list[list[Any]]:
    return [[c.index, c.backend_after or c.backend_before or "", c.change if c.backend_before == c.backend_after
             or c.backend_before is None or c.backend_after is None
             else f"{c.change}: {c.backend_before} -> {c.backend_after}"]
            for c in method.delegates]


NAMED_COLUMNS = ["key", "change", "before", "after"]


def _named_rows(d: ProgramDiff) -> list[list[str]]:
    return [[c.key, c.change, "-" if c.size_before is None else human_bytes(c.size_before),
             "-" if c.size_after is None else human_bytes(c.size_after)] for c in d.named_data]


def _instruction_rows(method: MethodDiff) -> list[list[Any]]:
    return [[i.change, "-" if i.before_index is None else i.before_index,
             "-" if i.after_index is None else i.after_index, i.before or "", i.after or ""]
            for i in method.instructions]


def _limited(rows: list[list[Any]], verbose: bool) -> tuple[list[list[Any]], str]:
    if verbose or len(rows) <= ROW_LIMIT:
        return rows, ""
    return rows[:ROW_LIMIT], f"... and {len(rows) - ROW_LIMIT} more (--verbose or --format json for all)"


def render_text(d: ProgramDiff, view: View) -> None:
    verbose = view.verbose
    console = stdout_console()
    console.print(f"[bold]{markup_safe(d.a)}[/] -> [bold]{markup_safe(d.b)}[/]"
                  + (": identical programs" if d.identical else ""), soft_wrap=True)
    console.print(table(None, ["", "before", "after", "change"], _summary_rows(d), right=["before", "after"]))
    if d.named_data:
        console.print(table("named data", NAMED_COLUMNS, _named_rows(d), right=["before", "after"]))
    for method in d.methods:
        if method.status == "same":
            continue
        console.print(f"\nmethod [bold]{markup_safe(method.name)}[/]: {method.status}")
        if method.tensors:
            rows, more = _limited(_tensor_rows(method), verbose)
            console.print(table("tensors", TENSOR_COLUMNS, rows, right=["v", "bytes"]))
            if more:
                console.print(more)
        if method.folds:
            console.print(table("folded chains", FOLD_COLUMNS, _fold_rows(method), right=["v", "bytes",
                                                                                      "H2D/call before"]))
        if method.delegates:
            console.print(table("delegates", DELEGATE_COLUMNS, _delegate_rows(method), right=["#"]))
        if method.buffers:
            console.print(table("planned buffers", ["id", "device", "before", "after"],
                                [[b.memory_id, b.device_after or b.device_before,
                                  "-" if b.size_before is None else human_bytes(b.size_before),
                                  "-" if b.size_after is None else human_bytes(b.size_after)] for b in method.buffers],
                                right=["id", "before", "after"]))
        if method.instructions:
            rows, more = _limited(_instruction_rows(method), verbose)
            console.print(table("instructions", ["", "old #", "new #", "before", "after"], rows,
                                right=["old #", "new #"]))
            if more:
                console.print(more)
    if d.notes:  # an ETRecord of another program says so
        echo_lines([f"note: {note}" for note in d.notes])


def render_markdown(d: ProgramDiff, view: View) -> list[str]:
    lines = [f"### pte-devconst diff: {md_code(Path(d.a).name)} → {md_code(Path(d.b).name)}", ""]
    if d.identical:
        lines.append("The programs are identical.")
    lines += [markdown_table(["", "before", "after", "change"], _summary_rows(d)), ""]
    if d.data_changes:
        lines += [f"**{plural(d.data_changes, 'tensor')} hold{'s' if d.data_changes == 1 else ''} different bytes.**",
                  ""]
    if d.named_data:
        lines += ["#### named data", "", markdown_table(NAMED_COLUMNS, _named_rows(d)), ""]
    for method in d.methods:
        if method.status == "same":
            continue
        lines += [f"#### method {md_code(method.name)} ({method.status})", ""]
        if method.tensors:
            lines += [f"<details><summary>{plural(len(method.tensors), 'tensor')} changed</summary>", "",
                      markdown_table(["value"] + TENSOR_COLUMNS[1:], _tensor_rows(method)), "",
                      "</details>", ""]
        if method.folds:
            lines += ["Folded chains:", "", markdown_table(FOLD_COLUMNS, _fold_rows(method)), ""]
        if method.delegates:
            lines += [markdown_table(["delegate"] + DELEGATE_COLUMNS[1:], _delegate_rows(method)), ""]
        if method.instructions:
            lines += [f"<details><summary>{plural(len(method.instructions), 'instruction change')}</summary>", "",
                      markdown_table(["change", "old #", "new #", "before", "after"],
                                     [[r[0], r[1], r[2], md_code(r[3]), md_code(r[4])]
                                      for r in _instruction_rows(method)]), "", "</details>", ""]
    if any(f.resident for method in d.flows for f in method.flows):
        lines += diagrams(d.flows, "Constants the first program copies host-to-device on every call, and what the "
                          "second makes of them:")
    return lines + ([""] + [f"> note: {md_text(note)}" for note in d.notes] if d.notes else [])


DIFF = Renderers["ProgramDiff"]("diff", text=render_text, markdown=render_markdown, json=lambda d: d.to_json())


@command("diff")
def diff_command(
    ctx: typer.Context,
    before: Annotated[Path, typer.Argument(help="The original .pte.", metavar="BEFORE", show_default=False)],
    after: Annotated[Path, typer.Argument(help="The changed .pte (any .pte, not only a rewrite).", metavar="AFTER",
                                          show_default=False)],
    etrecord: EtrecordOption = None,
    fmt: Annotated[Optional[str], format_option(DIFF)] = None,
    json_flag: JsonFlag = False,
    exit_code: Annotated[bool, typer.Option(
        "--exit-code", help="Exit 1 when the programs differ, 0 when they are identical (as git diff --exit-code).")]
        = False,
) -> None:
    """Report placement, device, initial data, instruction and segment changes, and per-call copies.

    Exit 0 (with --exit-code: 0 identical programs, 1 different ones); 2 on bad input.
    """
    from pte_devconst import api
    from pte_devconst.cli.progress import PROGRESS_THRESHOLD, steps_progress

    try:
        large = before.stat().st_size + after.stat().st_size >= PROGRESS_THRESHOLD
    except OSError:
        large = False  # api.diff names the file it cannot read
    options = global_options(ctx)
    view = View(options.quiet, options.verbose)
    output = Output(DIFF, resolve(DIFF, fmt, json_flag, view), view)
    with steps_progress(f"comparing {before.name} and {after.name}", options.quiet, large) as progress:
        d = api.diff(before, after, etrecord=etrecord, progress=progress)
    output.add(d)
    output.close()
    if exit_code and not d.identical:
        raise typer.Exit(ExitCode.FINDINGS)
