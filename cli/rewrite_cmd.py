"""``pte-devconst rewrite``: move device-read constants into device memory with initial data.

One program (``-o`` names its output) or several (files, patterns, folders): each is written to its
``NAME.devconst.pte``, or replaced with ``--in-place``, and each result is reported.
"""

from __future__ import annotations

import enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import typer

from pte_devconst.cli.app import EXIT_ERROR, EXIT_FINDINGS, OPTIONS, command, for_each_program
from pte_devconst.cli.output import (echo_lines, FORMAT_OPTION, JSON_FLAG, OutputFormat, emit_json, human_bytes, markdown_table,
                                     markup_safe, resolve_format, stdout_console, table, md_code, md_text)
from pte_devconst.cli.progress import write_progress
from pte_devconst.schema.errors import PteDevconstError

class VerifyMode(str, enum.Enum):
    sampled = "sampled"
    full = "full"


if TYPE_CHECKING:  # the rewriter is imported when the command runs, not at start-up
    from pte_devconst.rewriter.rewrite import RewriteResult
    from pte_devconst.schema.model import Device


def parse_devices(values: Optional[list[str]]) -> "Optional[frozenset[Device]]":
    """``--device`` values (repeatable, comma-separated) -> devices; None when not given."""
    from pte_devconst.api import parse_devices as api_parse_devices

    return api_parse_devices(values or None, "--device")


def result_payload(result: RewriteResult) -> dict[str, Any]:
    """The JSON document of a rewrite (also used by ``check`` and the Python API's callers)."""
    plan = result.plan
    methods = []
    for edit in plan.methods:
        method = plan.analysis.method(edit.name)
        methods.append({
            "name": edit.name,
            "style": method.style,
            "moved": [{"value": p.value, "name": p.name, "device": p.device, "nbytes": p.nbytes,
                       "memory_id": p.memory_id, "offset": p.offset, "initial_data_index": p.initial_data_index,
                       "external_key": p.external_key, "copies_per_call_removed": p.copies_per_call,
                       "bytes_per_call_saved": p.bytes_per_call} for p in edit.placements],
            "buffers": edit.buffers,
            "instructions_removed": [{"chain": c, "instruction": k} for c, k in edit.removed],
            "instruction_map": [{"chain": c, "map": list(mapping)} for c, mapping in enumerate(edit.instruction_maps)
                                if any(new != old for old, new in enumerate(mapping))],
            "not_moved": [{"value": v.value, "name": v.name, "nbytes": v.nbytes, "verdict": v.verdict,
                           "details": list(v.details)} for v in method.constants if not v.eligible],
            "h2d_bytes_per_call_before": method.h2d_bytes_per_call,
            "h2d_bytes_per_call_after": method.h2d_bytes_per_call - edit.bytes_per_call_saved,
        })
    return {
        "input": result.input, "output": result.output, "dry_run": result.output is None, "changed": result.changed,
        "verified": result.verified,
        "input_size": result.input_size, "output_size": result.output_size,
        "constants_moved": len(plan.placements), "bytes_per_call_saved": plan.bytes_per_call_saved,
        "instructions_removed": result.instructions_removed,
        "constant_entries_dropped": list(plan.dropped_constants),
        "initial_data_entries_added": len(plan.initial_data),
        "skipped": [{"method": s.verdict.method, "value": s.verdict.value, "name": s.verdict.name, "reason": s.reason}
                    for s in plan.skipped],
        "methods": methods,
    }


def _moved_rows(result: RewriteResult) -> list[list[Any]]:
    rows = []
    for edit in result.plan.methods:
        per_device: dict[str, list] = {}
        for p in edit.placements:
            entry = per_device.setdefault(str(p.device), [0, 0, 0])
            entry[0] += 1
            entry[1] += p.nbytes
            entry[2] += p.bytes_per_call
        for device, (count, nbytes, per_call) in sorted(per_device.items()):
            rows.append([edit.name, device, count, human_bytes(nbytes), human_bytes(per_call)])
    return rows


def _in_place(result: RewriteResult) -> bool:
    return result.output is not None and Path(result.output) == Path(result.input)


def _not_moved_rows(result: RewriteResult) -> list[list[Any]]:
    """The "left in place" rows: every constant not moved, and why (its verdict, or the option that skipped it)."""
    plan = result.plan
    rows = [[c.method, c.value, c.name, c.nbytes, "; ".join(c.reasons)]
            for method in plan.analysis.methods for c in method.constants if not c.eligible]
    return rows + [[s.verdict.method, s.verdict.value, s.verdict.name, s.verdict.nbytes, s.reason]
                   for s in plan.skipped]


def render_text(result: RewriteResult) -> None:
    console = stdout_console()
    plan = result.plan
    verb = "would move" if result.output is None else "moved"
    if plan.is_empty:
        console.print(f"{markup_safe(result.input)}: nothing to move; " +
                      ("no file written (dry run)." if result.output is None else "left as it is." if _in_place(result)
                       else f"{markup_safe(result.output)} is an identical copy."), soft_wrap=True)
    else:
        console.print(table(f"constants {verb} to device memory", ["method", "device", "constants", "bytes",
                                                                    "H2D saved/call"],
                            _moved_rows(result), right=["constants", "bytes", "H2D saved/call"]))
        growth = [[e.name, b.memory_id, str(b.device), human_bytes(b.old_size), human_bytes(b.new_size),
                   "new" if b.added else "grown"] for e in plan.methods for b in e.buffers]
        console.print(table("planned buffers", ["method", "id", "device", "before", "after", ""], growth,
                            right=["id", "before", "after"]))
        console.print(f"{result.instructions_removed} copy instruction(s) removed; "
                      f"{len(plan.dropped_constants)} constant entr(ies) dropped, "
                      f"{len(plan.initial_data)} initial-data entr(ies) added; "
                      f"{human_bytes(plan.bytes_per_call_saved)} fewer host-to-device bytes per call.")
    not_moved = [[m, v, name, human_bytes(nbytes), why] for m, v, name, nbytes, why in _not_moved_rows(result)]
    if not_moved and not OPTIONS.quiet:
        console.print(table("left in place", ["method", "v", "name", "bytes", "why"], not_moved,
                            right=["v", "bytes"]))
    if result.output is not None and not plan.is_empty:
        checked = "re-read and checked (every byte)" if result.verified == "full" else "re-read and checked"
        console.print(f"wrote [bold]{markup_safe(result.output)}[/] ({human_bytes(result.output_size or 0)}; input "
                      f"{human_bytes(result.input_size)}), {checked}.", soft_wrap=True)


def render_markdown(result: RewriteResult) -> None:
    plan = result.plan
    dry = result.output is None
    lines = [f"### pte-devconst rewrite: {md_code(Path(result.input).name)}{' (dry run)' if dry else ''}", ""]
    if plan.is_empty:
        lines.append("Nothing to move." + (" No file written (dry run)." if dry else " Left as it is." if _in_place(result)
                                           else f" {md_code(result.output)} is an identical copy."))
    else:
        lines += [markdown_table(["method", "device", "constants", "bytes", "H2D saved/call"], _moved_rows(result)), "",
                  f"**{human_bytes(plan.bytes_per_call_saved)}** fewer host-to-device bytes per call; "
                  f"{result.instructions_removed} copy instruction(s) {'would be ' if dry else ''}removed."]
        lines += ["", "Dry run: no file written." if dry else
                  f"Wrote {md_code(result.output)} ({human_bytes(result.output_size or 0)}; input "
                  f"{human_bytes(result.input_size)}), re-read and checked"
                  + (" (every byte)." if result.verified == "full" else ".")]
    not_moved = _not_moved_rows(result)
    if not_moved:
        lines += ["", "**Left in place:**", "",
                  markdown_table(["method", "value", "name", "bytes", "why"],
                                 [[md_code(m), v, md_code(name), f"{nbytes:,}", md_text(why)]
                                  for m, v, name, nbytes, why in not_moved])]
    echo_lines(lines)


def rewrite_inputs(files: list[str], in_place: bool) -> tuple[list[Any], list[str]]:
    """The programs to rewrite (``Path``) and problems (``str``) in argument order, and what was left out.

    Several inputs without ``--in-place`` never include another input's default output: ``models/*.pte``
    after a first run matches ``net.devconst.pte`` too, which is ``net.pte``'s rewrite, not a program to
    rewrite again.
    """
    from pte_devconst.paths import default_output, expand, identity

    items = expand(files)
    if in_place or len(items) < 2:
        return items, []
    outputs = {identity(default_output(i)) for i in items if isinstance(i, Path)}
    kept = [i for i in items if not isinstance(i, Path) or identity(i) not in outputs]
    left_out = [f"{i}: skipped, it is the rewrite of another input" for i in items if i not in kept]
    return kept, left_out


@command("rewrite")
def rewrite_command(
    files: list[str] = typer.Argument(..., help="The .pte program(s) to rewrite: files, glob patterns "
                                      "('**/*.pte') or directories (never modified unless --in-place).",
                                      show_default=False),
    output: Optional[Path] = typer.Option(None, "-o", "--output", help="Output file [default: NAME.devconst.pte]; "
                                          "one input only."),
    ptd: Optional[list[str]] = typer.Option(None, "--ptd", help="The .ptd of a program's external constants "
                                            "(repeatable; paired as check pairs them) [default: NAME.ptd next to "
                                            "NAME.pte, if there; for NAME.devconst.pte also NAME.ptd]."),
    device: Optional[list[str]] = typer.Option(None, "--device", help="Only move constants to this device "
                                               "(repeatable, e.g. cuda:0)."),
    min_bytes: int = typer.Option(0, "--min-bytes", min=0, help="Leave constants smaller than this in place."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the plan; write nothing."),
    in_place: bool = typer.Option(False, "--in-place", help="Replace the input file(s) (atomically)."),
    fsync: bool = typer.Option(True, "--fsync/--no-fsync", help="Wait until the output is on disk before "
                               "replacing the destination. --no-fsync is faster on large files and still "
                               "atomic, but a power failure soon after may lose the output (not with "
                               "--in-place)."),
    verify: Optional[VerifyMode] = typer.Option(None, "--verify", case_sensitive=False, show_default=False,
                                                help="How the written file is checked before it replaces the "
                                                "destination: sampled (structure and every byte the tool "
                                                "writes itself in full; bulk data copied by the kernel from a "
                                                "proven source range in sampled windows) or full (every byte). "
                                                "[default: sampled; full when PTE_DEVCONST_FULL_CHECK=1]"),
    exit_on_change: bool = typer.Option(False, "--exit-non-zero-on-change", help="Exit 1 when a program was "
                                        "rewritten (with --dry-run: would be), as a fixing pre-commit hook does "
                                        "so that the user re-stages the file."),
    fmt: OutputFormat = FORMAT_OPTION,
    json_flag: bool = JSON_FLAG,
) -> None:
    """Find constants read only by delegates on one device and move them into device memory with initial data.

    Several programs are rewritten one by one, each to its NAME.devconst.pte (or in place); a program that
    fails is reported on stderr, the others are still rewritten, and the exit code is 2.
    """
    if in_place and output is not None:
        raise PteDevconstError("--in-place and --output exclude each other")
    from pte_devconst.paths import names_one_file, paired_or_refused
    from pte_devconst.rewriter.plan import RewriteOptions

    options = RewriteOptions(devices=parse_devices(device), min_bytes=min_bytes)
    fmt = resolve_format(fmt, json_flag)
    if len(files) == 1 and names_one_file(files[0]):  # one program: its result alone, its errors as they are
        file = Path(files[0])
        result = _rewrite_one(file, output, paired_or_refused([file], ptd or ()).get(file), options, dry_run,
                              in_place, fsync, verify)
        if fmt is OutputFormat.json:
            emit_json("rewrite", result_payload(result))
        elif fmt is OutputFormat.markdown:
            render_markdown(result)
        elif not OPTIONS.quiet:
            render_text(result)
        if exit_on_change and result.changed:
            raise typer.Exit(EXIT_FINDINGS)
        return
    items, left_out = rewrite_inputs(files, in_place)
    programs = [i for i in items if isinstance(i, Path)]
    if output is not None:
        raise PteDevconstError(f"--output names one output, but {len(programs)} program(s) were given; rewrite "
                               "several to their default names (NAME.devconst.pte) or with --in-place")
    pairs = paired_or_refused(programs, ptd or ())

    def show(result: RewriteResult) -> None:
        if fmt is OutputFormat.markdown:
            render_markdown(result)
            typer.echo("")
        elif fmt is OutputFormat.text and not OPTIONS.quiet:  # which input each result is about, then it
            stdout_console().print(f"[bold]{markup_safe(result.input)}[/]"
                                   + (" (dry run)" if result.output is None else ""), soft_wrap=True)
            render_text(result)

    results, failed = for_each_program(
        items, lambda item: _rewrite_one(item, None, pairs.get(item), options, dry_run, in_place, fsync, verify),
        show)
    if fmt is OutputFormat.json:
        emit_json("rewrite", {"results": [result_payload(r) for r in results], "skipped_inputs": left_out})
    elif left_out and not OPTIONS.quiet:
        echo_lines(left_out)
    if failed:
        raise typer.Exit(EXIT_ERROR)
    if exit_on_change and any(r.changed for r in results):
        raise typer.Exit(EXIT_FINDINGS)


def _rewrite_one(file: Path, output: Optional[Path], ptd: Optional[Path], options: Any, dry_run: bool,
                 in_place: bool, fsync: bool, verify: Optional[VerifyMode]) -> RewriteResult:
    from pte_devconst.rewriter.rewrite import rewrite_file

    try:
        size = file.stat().st_size
    except OSError:  # missing, or a name the OS refuses: rewrite_file reports it in one line
        size = 0
    with write_progress(f"writing {file.name}", size, OPTIONS.quiet) as progress:
        return rewrite_file(file, output, ptd=ptd, options=options, dry_run=dry_run, in_place=in_place,
                            progress=progress, durable=fsync, verify=verify.value if verify else None)
