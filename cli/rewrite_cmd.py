"""``pte-devconst rewrite``: move device-read constants into device memory with initial data.

One program (``-o`` names its output) or several (files, patterns, folders): each is written to its
``NAME.devconst.pte``, or replaced with ``--in-place``, and each result is reported.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Callable, Optional

import typer

from pte_devconst.cli.app import command, for_each_program, global_options, warn_empty
from pte_devconst.cli.config import ConfigOption, IsolatedOption, RuntimeOption, load as load_config
from pte_devconst.cli.formats import Format, Output, Renderers, View, format_option, resolve
from pte_devconst.cli.mermaid import diagrams
from pte_devconst.cli.output import (DataOption, DeviceOption, EtrecordOption, JsonFlag, MinBytesOption, ProgressOption,
                                     device_memory_line, echo_lines, fold_hint, markdown_table, markup_safe, md_code,
                                     md_text, names_notes, printable, stderr_console, stdout_console, table)
from pte_devconst.cli.progress import rewrite_progress
from pte_devconst.types import VerifyMode, constant_label, name_cell, value_name
from pte_devconst.util.errors import DeviceNotUsedError, PteDevconstError
from pte_devconst.util.exit_code import ExitCode, worst_exit
from pte_devconst.util.units import exact_bytes, human_bytes, listing, plural

if TYPE_CHECKING:  # the rewriter is imported when the command runs, not at start-up
    from pte_devconst.paths import Programs
    from pte_devconst.types import BufferGrowth, RewriteOptions, RewritePlan, RewriteRequest, RewriteResult


def fold_rows(result: RewriteResult) -> list[list[Any]]:
    """One row per folded chain: method, the device-resident value, its constant, kernels, device, bytes."""
    rows = []
    for fold in result.plan.folds:
        chain = fold.chain
        value = f"{fold.value} (new)" if fold.appended else str(fold.value)
        kernels = chain.kernels if chain.steps else "device copy (shared)"
        rows.append([fold.method, value,
                     constant_label(value_name(chain.source_tensor.fqn, chain.source), chain.source), kernels,
                     str(chain.device), human_bytes(fold.nbytes), human_bytes(fold.bytes_per_call)])
    return rows


FOLD_COLUMNS = ["method", "v", "from", "kernels", "device", "bytes", "H2D saved/call"]


def cost_line(plan: RewritePlan) -> str:
    """What folding costs: device memory for the whole method, and the bytes the file gains."""
    parts = []
    for duplicates, what in ((False, ("folded value", "")),
                             (True, ("device copy", " of constants the host also reads"))):
        count, device, file = plan.fold_cost(duplicates)
        if count:
            parts.append(f"{plural(count, what[0])}{what[1]}: {human_bytes(device)} of device memory for the whole "
                         f"method, {human_bytes(file)} more in the file")
    line = "; ".join(parts) + f"; {human_bytes(plan.dropped_bytes)} of constants dropped"
    kept = sum(1 for f in plan.folds if f.chain.stays and not f.duplicate)
    if kept:
        line += f"; {plural(kept, 'folded value')} from constants the host still reads (which stay)"
    return line + "."


def _moved_rows(result: RewriteResult) -> list[list[Any]]:
    rows = []
    for edit in result.plan.methods:
        per_device: dict[str, list[int]] = {}
        for p in edit.placements:
            entry = per_device.setdefault(str(p.device), [0, 0, 0])
            entry[0] += 1
            entry[1] += p.nbytes
            entry[2] += p.bytes_per_call
        for device, (count, nbytes, per_call) in sorted(per_device.items()):
            rows.append([edit.name, device, count, human_bytes(nbytes), human_bytes(per_call)])
    return rows


def _not_moved_rows(result: RewriteResult) -> list[list[Any]]:
    """The "left in place" rows: every constant not moved, and why (its verdict, or the option that skipped it),
    and every chain that could fold but did not."""
    plan = result.plan
    rows = [[c.method, c.value, name_cell(c.name, c.value), c.nbytes, "; ".join(c.reasons)]
            for c in result.left_in_place()]
    rows += [[s.verdict.method, s.verdict.value, name_cell(s.verdict.name, s.verdict.value), s.verdict.nbytes, s.reason]
             for s in plan.skipped + plan.kept_for_runtime]
    if plan.unconverted:
        from pte_devconst.types import needs_phrase

        need = needs_phrase(plan.output_need)
        rows += [[u.method, u.value, name_cell(u.name, u.value), u.nbytes, f"stays as it is (needs {need}): "
                  f"{u.reason}"] for u in plan.unconverted]
    return rows + [[s.chain.method, s.chain.result, f"{s.chain.kernels or 'copy'} of "
                    f"{constant_label(value_name(s.chain.source_tensor.fqn, s.chain.source), s.chain.source)}",
                    s.chain.nbytes, s.reason]
                   for s in plan.fold_skipped]


# Above this many rows, the constants of one method left in place for the same reason are one row (how many, their
# bytes): a legacy-style model rewritten for 1.5 would otherwise list each of its weights with the same sentence.
GROUP_ABOVE = 40


def grouped_rows(rows: list[list[Any]]) -> tuple[list[list[Any]], int]:
    """``rows`` (method, value, name, bytes, why) with those of one method and one reason made one row when there
    are more than ``GROUP_ABOVE``, in the order each reason first appears; and how many constants were grouped."""
    if len(rows) <= GROUP_ABOVE:
        return rows, 0
    groups: dict[tuple[str, str], list[list[Any]]] = {}
    for row in rows:
        groups.setdefault((row[0], row[4]), []).append(row)
    found: list[list[Any]] = []
    grouped = 0
    for (method, why), members in groups.items():
        if len(members) == 1:
            found.append(members[0])
            continue
        grouped += len(members)
        found.append([method, "", plural(len(members), "constant"), sum(row[3] for row in members), why])
    return found, grouped


def grouped_note(grouped: int) -> str:
    return (f"{plural(grouped, 'constant')} left in place for a reason they share are counted in one row per method "
            "and reason (--format json lists each)")


MOVED_COLUMNS = ["method", "v", "name", "device", "bytes", "H2D saved/call"]


def moved_constant_rows(result: RewriteResult) -> list[list[Any]]:
    """One row per moved constant, with its name (the per-device totals say how much; this says which)."""
    return [[p.method, p.value, name_cell(p.name, p.value), str(p.device), p.nbytes, p.bytes_per_call]
            for edit in result.plan.methods for p in edit.placements]


def render_text(result: RewriteResult, view: View) -> None:
    """The text report of one rewrite (``--quiet`` prints none)."""
    if view.quiet:
        return
    verbose = view.verbose
    console = stdout_console()
    plan = result.plan
    verb = "would move" if result.output is None else "moved"
    if plan.is_empty:
        if result.output is None:
            outcome = "no file written (dry run)."
        elif not result.written:
            outcome = f"no file written: {markup_safe(not_judged_text(result))}."
        elif result.in_place:
            outcome = "left as it is."
        else:
            outcome = f"{markup_safe(result.output)} is an identical copy."
        console.print(f"{markup_safe(result.input)}: nothing to move; " + outcome, soft_wrap=True)
    else:
        if plan.placements:
            console.print(table(f"constants {verb} to device memory", ["method", "device", "constants", "bytes",
                                                                        "H2D saved/call"],
                                _moved_rows(result), right=["constants", "bytes", "H2D saved/call"]))
            if verbose:
                console.print(table(None, MOVED_COLUMNS, [[*row[:4], human_bytes(row[4]), human_bytes(row[5])]
                                                          for row in moved_constant_rows(result)],
                                    right=["v", "bytes", "H2D saved/call"]))
        if plan.folds:
            console.print(table(f"chains {'that would fold' if result.output is None else 'folded'} into device "
                                "memory", FOLD_COLUMNS, fold_rows(result), right=["v", "bytes", "H2D saved/call"]))
        growth = [[e.name, b.memory_id, str(b.device), human_bytes(b.old_size), human_bytes(b.new_size),
                   _buffer_change(b)]
                  for e in plan.methods for b in e.buffers]
        console.print(table("planned buffers", ["method", "id", "device", "before", "after", ""], growth,
                            right=["id", "before", "after"]))
        console.print(changes_line(result))
        memory = device_memory_line(plan.memory)
        if memory:
            console.print(memory + ".", markup=False)
        warning = plan.memory.warning()
        if warning:
            stderr_console().print(f"warning: {warning}", markup=False, soft_wrap=True)
        note = plan.memory.note()
        if note:
            console.print(printable(f"note: {note}"), markup=False, soft_wrap=True)
        if plan.folds:
            console.print(cost_line(plan))
    rows, grouped = grouped_rows(_not_moved_rows(result))
    not_moved = [[m, v, name, human_bytes(nbytes), why] for m, v, name, nbytes, why in rows]
    if not_moved:
        console.print(table("left in place", ["method", "v", "name", "bytes", "why"], not_moved,
                            right=["v", "bytes"]))
    if grouped:
        console.print(grouped_note(grouped), markup=False, soft_wrap=True)
    hint = fold_hint(result.fold_gain)
    if hint:
        console.print(hint, markup=False)
    for note in names_notes(result.names):  # an ETRecord of another program, constants it could not name
        console.print(printable(f"note: {note}"), markup=False, soft_wrap=True)
    if result.output is not None and not plan.is_empty:
        checked = ("re-read and checked (every byte)" if result.verified is VerifyMode.FULL
                   else "re-read and checked")
        console.print(f"wrote [bold]{markup_safe(result.output)}[/] ({human_bytes(result.output_size or 0)}; input "
                      f"{human_bytes(result.input_size)}), {checked}; {markup_safe(runtime_clause(plan))}.",
                      soft_wrap=True)
    elif not plan.is_empty:
        console.print(f"the output would need {markup_safe(runtime_clause(plan).removeprefix('needs '))}.",
                      soft_wrap=True)


def changes_line(result: RewriteResult) -> str:
    """What the rewrite changed in the file, in one line: instructions, constant and initial-data entries, and the
    bytes per call it saves (an encoding's own copies in its words: ``EncodingPayload.copies_phrase``)."""
    from pte_devconst.types import conversion_phrase

    plan = result.plan
    saved = f"{human_bytes(plan.bytes_per_call_saved)} fewer host-to-device bytes per call."
    written = [edit.payload for edit in plan.methods if edit.payload.copies]
    converted = conversion_phrase(plan)
    if written:  # the encoding's own copies, in its words
        parts = [written[0].copies_phrase(sum(payload.copies for payload in written))]
        if plan.constant_entries:
            parts.append(f"{plural(len(plan.constant_entries), 'constant entry', 'constant entries')} added")
    else:
        parts = [f"{plural(result.instructions_removed, _removed_kind(plan))} removed",
                 f"{plural(len(plan.dropped_constants), 'constant entry')} dropped, "
                 f"{plural(len(plan.initial_data), 'initial-data entry')} added"]
    return "; ".join(parts + ([converted] if converted else [])) + "; " + saved


def runtime_clause(plan: RewritePlan) -> str:
    """``needs ExecuTorch >= 1.6 (...; for a 1.5 runtime: --runtime 1.5)``: what loads the output, and how to get
    another encoding, in the encodings' words (``rewriter/words.py``)."""
    from pte_devconst.types import output_clause

    return output_clause(plan)


def needs_line(result: RewriteResult) -> str:
    """The one line ``--quiet`` still prints when the project's config does not name the runtime it deploys."""
    if result.output:
        return f"{result.output}: {runtime_clause(result.plan)}"
    return f"{result.input}: its rewrite (a dry run: nothing written) {runtime_clause(result.plan)}"


def _removed_kind(plan: RewritePlan) -> str:
    """What the rewrite removes: copies, and with folds the host kernels that only served them."""
    return "copy and host kernel instruction" if plan.folds else "copy instruction"


def _buffer_change(buffer: BufferGrowth) -> str:
    """The last column of the planned-buffers table: how the rewrite changed that buffer."""
    if buffer.added:
        return "new"
    if buffer.relaid:
        return "relaid"
    if buffer.kept_offsets:
        return "kept offsets (layout budget)" if "work budget" in buffer.kept_offsets else "kept offsets (replay)"
    return "grown" if buffer.new_size > buffer.old_size else "same"


def not_judged_text(result: RewriteResult) -> str:
    """``2 external constants not judged (their .ptd was not found: put ext.ptd next to it or pass --ptd FILE.ptd):
    a.weight, a.bias``: what a rewrite could not judge, as ``check`` calls it (exit 3)."""
    from pte_devconst.paths import ptd_hint

    missing = result.not_judged
    return (f"{plural(len(missing), 'external constant')} not judged (their .ptd was not found: "
            f"{ptd_hint(result.input)}): {listing([c.name for c in missing], 6)}")


def concise_line(result: RewriteResult, view: Optional[View] = None) -> str:
    """One program in one line (``--format concise``, what the pre-commit hook prints)."""
    plan = result.plan
    unjudged = f"; {not_judged_text(result)}" if result.not_judged else ""
    if plan.is_empty:
        where = "; no file written" if result.output is not None and not result.written else ""
        return printable(f"{result.input}: nothing to move{where}{unjudged}")
    from pte_devconst.types import conversion_phrase

    if result.output is None:
        where = "dry run, nothing written"
    elif result.in_place:
        where = "rewritten in place"
    else:
        where = f"wrote {result.output}"
    moved = plan.newly_moved
    parts = [f"{plural(moved, 'tensor')} moved to device memory ({human_bytes(plan.bytes_per_call_saved)} fewer "
             "host-to-device bytes per call)"] if moved or not plan.converted else []
    parts += [conversion_phrase(plan)] if plan.converted else []
    return printable(f"{result.input}: {'; '.join(parts)}; {where}; {runtime_clause(plan)}{unjudged}")


def render_markdown(result: RewriteResult, view: View) -> list[str]:
    plan = result.plan
    dry = result.output is None
    lines = [f"### pte-devconst rewrite: {md_code(Path(result.input).name)}{' (dry run)' if dry else ''}", ""]
    if plan.is_empty:
        if dry:
            outcome = " No file written (dry run)."
        elif not result.written:
            outcome = f" No file written: {md_text(not_judged_text(result))}."
        elif result.in_place:
            outcome = " Left as it is."
        else:
            outcome = f" {md_code(result.output)} is an identical copy."
        lines.append("Nothing to move." + outcome)
    else:
        if plan.placements:
            moved = moved_constant_rows(result)
            lines += [markdown_table(["method", "device", "constants", "bytes", "H2D saved/call"], _moved_rows(result)),
                      "", f"<details><summary>{plural(len(moved), 'constant')} {'would move' if dry else 'moved'}"
                      "</summary>",
                      "", markdown_table(["method", "value", "name", "device", "bytes", "H2D saved/call"],
                                         [[md_code(r[0]), r[1], md_code(r[2]) if r[2] != "-" else "-", r[3],
                                           exact_bytes(r[4]), exact_bytes(r[5])] for r in moved]), "", "</details>",
                      ""]
        if plan.folds:
            lines += ["Folded chains:", "", markdown_table(FOLD_COLUMNS, fold_rows(result)), "", cost_line(plan), ""]
        lines += [f"**{human_bytes(plan.bytes_per_call_saved)}** fewer host-to-device bytes per call; "
                  f"{plural(result.instructions_removed, _removed_kind(plan))} "
                  f"{'would be ' if dry else ''}removed."]
        memory = device_memory_line(plan.memory)
        if memory:
            lines += ["", memory[0].upper() + memory[1:] + "."]
        if plan.memory.warning():
            lines += ["", f"**Warning:** {md_text(plan.memory.warning())}"]
        if plan.memory.note():
            lines += ["", f"**Note:** {md_text(plan.memory.note())}"]
        lines += ["", "Dry run: no file written." if dry else
                  f"Wrote {md_code(result.output)} ({human_bytes(result.output_size or 0)}; input "
                  f"{human_bytes(result.input_size)}), re-read and checked"
                  + (" (every byte)." if result.verified is VerifyMode.FULL else ".")]
    lines += [line for note in names_notes(result.names) for line in ("", f"> note: {md_text(note)}")]
    not_moved, grouped = grouped_rows(_not_moved_rows(result))
    if not_moved:
        lines += ["", "**Left in place:**", "",
                  markdown_table(["method", "value", "name", "bytes", "why"],
                                 [[md_code(m), v, md_code(name) if name != "-" and v != "" else name,
                                   exact_bytes(nbytes), md_text(why)] for m, v, name, nbytes, why in not_moved])]
    if grouped:
        lines += ["", md_text(grouped_note(grouped)) + "."]
    if result.changed:
        lines += [""] + diagrams(result.flows, "Constants copied host-to-device on every call, before and after "
                                 "the rewrite:")
    hint = fold_hint(result.fold_gain)
    if hint:
        lines += ["", hint]
    return lines


def _heading(result: RewriteResult) -> str:
    """Which input a result is about, above its text when several programs are rewritten."""
    return f"{result.input}" + (" (dry run)" if result.output is None else "")


REWRITE = Renderers["RewriteResult"]("rewrite", text=render_text, markdown=render_markdown,
                                     json=lambda result: result.to_json(), concise=concise_line, heading=_heading)


@command("rewrite")
def rewrite_command(
    ctx: typer.Context,
    files: Annotated[Optional[list[str]], typer.Argument(
        help="The .pte program(s) to rewrite: files, glob patterns ('**/*.pte') or directories (never modified "
        "unless --in-place) [default: paths of the config file].", metavar="FILE...", show_default=False)] = None,
    output: Annotated[Optional[Path], typer.Option(
        "-o", "--output", metavar="FILE", help="Output file [default: NAME.devconst.pte]; one input only.")] = None,
    ptd: DataOption = None,
    device: DeviceOption = None,
    min_bytes: MinBytesOption = None,
    fold: Annotated[Optional[bool], typer.Option(
        "--fold/--no-fold", show_default=False,
        help="Also fold chains of host kernels that only move or cast a constant (permute_copy, "
        "view_copy, _to_copy, ...) before device delegates read it: compute the result once, offline, and store "
        "it as device-resident initial data [default: no].")] = None,
    duplicate_shared: Annotated[bool, typer.Option(
        "--duplicate-shared", help="Give device delegates that read a constant the host also reads their own "
        "device-resident copy (the file and the device each hold one more copy of it).")] = False,
    runtime: RuntimeOption = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the plan; write nothing.")] = False,
    in_place: Annotated[bool, typer.Option("--in-place", help="Replace the input files (atomically).")] = False,
    fsync: Annotated[bool, typer.Option(
        "--fsync/--no-fsync", help="Wait until the output is on disk before replacing the destination. "
        "--no-fsync is faster on large files and still atomic, but a power failure soon after may lose the "
        "output (not with --in-place).")] = True,
    verify: Annotated[Optional[VerifyMode], typer.Option(
        "--verify", case_sensitive=False, show_default=False, metavar="[sampled|full]",
        help="How the written file is checked before it replaces the destination: sampled (structure and every "
        "byte the tool writes itself in full; bulk data copied by the kernel from a proven source range in "
        "sampled windows) or full (every byte). [default: sampled; full when PTE_DEVCONST_FULL_CHECK=1]")] = None,
    exit_on_change: Annotated[bool, typer.Option(
        "--exit-non-zero-on-change", help="Exit 1 when a program was rewritten (with --dry-run: would be), as a "
        "fixing pre-commit hook does so that the user re-stages the file.")] = False,
    etrecord: EtrecordOption = None,
    fmt: Annotated[Optional[str], format_option(REWRITE)] = None,
    json_flag: JsonFlag = False,
    progress: ProgressOption = None,
    config: ConfigOption = None,
    isolated: IsolatedOption = False,
) -> None:
    """Find constants read only by delegates on one device and move them into device memory with initial data.

    With --fold, also compute the host's transposes, views and casts of constants that device delegates read,
    once, and store their results in device memory the same way.  Several programs are rewritten one by one,
    each to its NAME.devconst.pte (or in place); a program that fails is reported on stderr, the others are
    still rewritten, and the exit code is 2.  External constants whose .ptd is missing cannot be judged: they
    are listed, the exit code is 3 (as check's), and a program with nothing else to move is not written.  A
    --device that the program uses none of is an error (nothing is written); with several programs, one that
    uses none of them is skipped with a warning, and a --device no program uses is an error.
    """
    from pte_devconst import api

    options = global_options(ctx)
    settings = load_config(config, isolated)
    given = settings.programs(files, ctx)
    view = View(options.quiet, options.verbose)
    shown = Output(REWRITE, resolve(REWRITE, fmt, json_flag, view), view)
    # Resolved once for every program: the plan's options (devices parsed), the names' source, the verify mode.
    plan_options = settings.plan_options(device, min_bytes, fold, duplicate_shared, runtime)
    request = functools.partial(api.rewrite_request, paired=True, dry_run=dry_run, in_place=in_place, fsync=fsync,
                                verify=verify, options=plan_options,
                                names=api.names_from(settings.etrecord_path(etrecord)))
    rewrites = Rewrites(request, plan_options, shown, options.quiet, options.debug,
                        logged=progress if progress is not None else bool(settings.progress),  # lines in a CI log too
                        chosen_runtime=runtime is not None or settings.runtime is not None)
    # as ruff's --force-exclude, the config's exclude also leaves out files named on the command line
    chosen = api.programs(given, ptd or (), skip_rewrites=not in_place, exclude=settings.exclude,
                          exclude_root=settings.root)
    warn_empty(chosen.empty_folders, options.quiet)
    if not chosen.items:  # only excluded programs, or folders without any: nothing to do is no failure
        shown.several = True
        shown.close(skipped_inputs=list(chosen.left_out))
        return
    code = (rewrite_single if chosen.single else rewrite_several)(rewrites, chosen, output, exit_on_change)
    if code is not ExitCode.OK:
        raise typer.Exit(code)


class Rewrites:
    """The programs of one ``rewrite`` command, rewritten one at a time with what the command resolved once
    (``request``: ``api.rewrite_request`` with every setting but the program, its destination and its data), each
    with its progress, and shown in ``shown``; ``used`` gathers the devices each program uses."""

    __slots__ = ("request", "plan_options", "shown", "quiet", "debug", "logged", "chosen_runtime", "positions", "used")

    def __init__(self, request: Callable[..., RewriteRequest], plan_options: RewriteOptions,
                 shown: Output[RewriteResult], quiet: bool, debug: bool, *, logged: bool, chosen_runtime: bool
                 ) -> None:
        self.request = request
        self.plan_options = plan_options
        self.shown = shown
        self.quiet = quiet
        self.debug = debug
        self.logged = logged  # progress lines also where stderr is no terminal
        self.chosen_runtime = chosen_runtime  # else the summary says what loads the output
        self.positions: dict[Path, tuple[int, int]] = {}  # each program's place among several (progress lines)
        self.used: list[tuple[str, ...]] = []

    def one(self, file: Path, destination: Optional[Path], data: Optional[Path]) -> RewriteResult:
        """Rewrite ``file``; a ``--device`` it uses none of is an error in the command line's words."""
        from pte_devconst import api

        request = self.request(file, destination, ptd=data)
        with rewrite_progress(str(file), _size(file), self.quiet, forced=self.logged,
                              position=self.positions.get(file)) as bar:
            try:
                return api.rewrite_program(request, progress=bar.progress if bar else None,
                                           phase=bar.phase if bar else None)
            except DeviceNotUsedError as error:  # the API's words name its parameter; here, the option
                raise as_option(error, self.plan_options) from None

    def one_of_several(self, item: Path, data: Optional[Path]) -> Optional[RewriteResult]:
        """Rewrite one of several programs: one that uses none of the devices is skipped with a warning (another
        may use them)."""
        try:
            result = self.one(item, None, data)
        except DeviceNotUsedError as error:
            self.used.append(error.used)
            if not self.quiet:
                typer.echo(printable(f"pte-devconst: warning: {error}"), err=True)
            return None
        self.used.append(result.devices)
        return result

    def show(self, result: Optional[RewriteResult]) -> None:
        if result is not None:
            self.shown.add(result)
            self.say_needs(result)

    def say_needs(self, result: RewriteResult) -> None:
        """-q prints no report, but still what loads the output, unless the project's config chose the runtime."""
        if self.quiet and self.shown.fmt is Format.TEXT and not self.chosen_runtime and result.changed:
            typer.echo(printable(needs_line(result)), err=True)


def rewrite_single(rewrites: Rewrites, chosen: Programs, output: Optional[Path], exit_on_change: bool) -> ExitCode:
    """One program: its result alone, its errors as they are."""
    (file,) = chosen.paths
    result = rewrites.one(file, output, chosen.data.get(file))
    rewrites.shown.add(result)
    rewrites.shown.close()
    rewrites.say_needs(result)
    unused_devices(rewrites.plan_options, [result.devices])
    return outcome_code([result], exit_on_change)


def rewrite_several(rewrites: Rewrites, chosen: Programs, output: Optional[Path], exit_on_change: bool) -> ExitCode:
    """Several programs, each to its default name (or in place): one that fails is one line on stderr and the
    others are still rewritten (exit 2)."""
    if output is not None:
        raise PteDevconstError(f"--output names one output, but {plural(len(chosen.paths), 'program')} were given; "
                               "rewrite several to their default names (NAME.devconst.pte) or with --in-place")
    shown = rewrites.shown
    shown.several = True
    rewrites.positions.update((path, (index + 1, len(chosen.paths))) for index, path in enumerate(chosen.paths))
    results, failed = for_each_program(chosen.items, lambda item: rewrites.one_of_several(item, chosen.data.get(item)),
                                       rewrites.show, rewrites.debug)
    shown.close(skipped_inputs=list(chosen.left_out))
    if chosen.left_out and not rewrites.quiet and shown.fmt in (Format.TEXT, Format.CONCISE):
        echo_lines(chosen.left_out)
    unused_devices(rewrites.plan_options, rewrites.used)
    if failed:
        return ExitCode.ERROR
    return outcome_code([r for r in results if r is not None], exit_on_change)


def outcome_code(results: list[RewriteResult], exit_on_change: bool) -> ExitCode:
    """1 when ``--exit-non-zero-on-change`` and a program changed; else 3 when a program's external constants could
    not be judged (as ``check``: its .ptd was not found, so "nothing to move" is not known); else 0."""
    codes = [ExitCode.OK]
    for result in results:
        if exit_on_change and result.changed:
            codes.append(ExitCode.FINDINGS)
        elif result.not_judged:
            codes.append(ExitCode.UNKNOWN)
    return worst_exit(codes)


def unused_devices(plan_options: RewriteOptions, used: list[tuple[str, ...]]) -> None:
    """A ``--device`` that no program rewritten uses is an error (exit 2), as in ``check``: a typo must not pass."""
    if plan_options.devices is None:
        return
    seen = {device for devices in used for device in devices}
    missing = sorted(str(d) for d in plan_options.devices if str(d) not in seen)
    for device in missing:
        typer.echo(f"pte-devconst: error: --device {device}: no program rewritten uses this device (they use "
                   f"{', '.join(sorted(seen)) or 'no device'}): nothing moved to it", err=True)
    if missing:
        raise typer.Exit(ExitCode.ERROR)


def as_option(error: DeviceNotUsedError, plan_options: RewriteOptions) -> DeviceNotUsedError:
    """The API's "the devices selected (cuda:9) are none the program uses" in the command line's words."""
    selected = ",".join(sorted(str(d) for d in plan_options.devices or ()))
    return DeviceNotUsedError(f"--device {selected}: the program uses none of the devices selected (it uses "
                              f"{', '.join(error.used) or 'no device'}): nothing would move, so nothing was written",
                              used=error.used, file=error.file)


def _size(file: Path) -> int:
    """The input's size, for the progress bar (0 when missing: the rewrite reports that in one line)."""
    try:
        return file.stat().st_size
    except OSError:
        return 0
