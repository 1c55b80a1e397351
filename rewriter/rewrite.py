"""The rewrite pipeline: open -> analyze -> plan -> apply -> write (atomically) -> re-read and check.

``rewrite_file`` is what the command line and the Python API call.  Every
step before ``write`` is pure; the output replaces the destination only after
the re-read of the temporary file passes ``check_rewrite`` (the whole output
against the input and the plan, see verify.py).  A plan with nothing to move
copies the input byte for byte, which makes the rewrite idempotent.  Before any
work, an output that is not a regular file or a new path, or that is one of the
inputs however it is spelled, is refused.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Callable, Optional

from pte_devconst.util.atomic import atomic_output, check_destination
from pte_devconst.util.errors import FormatError, PteDevconstError, ReportedError, UnsupportedProgramError
from pte_devconst.schema.limits import over_runtime_limits
from pte_devconst.schema.ptd_file import PtdFile
from pte_devconst.schema.pte_file import PteFile, ProgramBytes
from pte_devconst.schema.pte_writer import layout_pte, write_piece, write_pte_to_fd
from pte_devconst.schema.span import Span
from pte_devconst.util.record import record

from .apply import apply_plan
from .analysis import ConstantVerdict
from .load import analyze_opened, opened
from .fold import fold_refusals, need_torch
from .flows import MethodFlows, plan_residents, program_flows
from .names import ProgramNames, named_program
from .plan import FoldGain, RewriteOptions, RewritePlan, make_plan, safe_fold_gain
from .verify import VERIFY_MODES, check_copy, check_rewrite, full_by_default, read_back
from .verify_bytes import WriteRecipe
from .rewrite_json import left_in_place, rewrite_json

Progress = Callable[[int, int], None]


@record
class RewriteResult:
    input: str
    output: Optional[str]  # None for a dry run
    plan: RewritePlan
    input_size: int
    output_size: Optional[int]
    instructions_removed: int
    verified: Optional[str] = None  # how the self-check compared the output: "sampled" or "full" (None: dry run)
    fold_gain: Optional[FoldGain] = None  # without --fold: what --fold would add (None: nothing, or --fold given)
    data: Optional[bytes] = None  # the rewritten program, for a program rewritten in memory (output is None)
    names: Optional[ProgramNames] = None  # where the constants' names in the plan came from (an ETRecord)
    flows: tuple[MethodFlows, ...] = ()  # the input's per-call copies, and which the rewrite removes (the picture)

    @property
    def changed(self) -> bool:
        return not self.plan.is_empty

    @property
    def in_place(self) -> bool:
        """Whether the output replaced the input."""
        return self.output is not None and self.data is None and Path(self.output) == Path(self.input)

    def left_in_place(self) -> list[ConstantVerdict]:
        """Every constant the rewrite leaves on the host (not eligible, not a folded chain's source)."""
        return [c for method in self.plan.analysis.methods for c in left_in_place(self.plan, method)]

    def to_json(self) -> dict:
        """``rewrite``'s JSON document for this program (cli/report.schema.json)."""
        return rewrite_json(self)


def plan_file(source: PteFile, ptd: Optional[PtdFile], options: RewriteOptions) -> RewritePlan:
    analysis = analyze_opened(source, ptd, host_placement=options.host_placement)
    plan = make_plan(source.program, analysis, options, fold_refusals(source, ptd, analysis) if options.fold else {})
    if any(entry.recipe is not None for entry in plan.initial_data):
        need_torch()
    if analysis.refusal and not plan.is_empty:
        raise UnsupportedProgramError(f"cannot rewrite: {analysis.refusal}", file=source.path)
    return plan


def full_check(verify: Optional[str]) -> bool:
    """``verify`` ("sampled" or "full"; None: full when PTE_DEVCONST_FULL_CHECK is set) -> compare every byte?"""
    if verify is None:
        return full_by_default()
    if verify not in VERIFY_MODES:
        raise PteDevconstError(f"verify must be one of {', '.join(VERIFY_MODES)}, got {verify!r}")
    return verify == "full"


def rewrite_file(input_path: str | os.PathLike[str], output_path: Optional[str | os.PathLike[str]] = None, *,
                 ptd: Optional[str | os.PathLike[str]] = None, options: RewriteOptions = RewriteOptions(),
                 dry_run: bool = False, in_place: bool = False, progress: Optional[Progress] = None,
                 durable: bool = True, verify: Optional[str] = None,
                 names: Optional[Callable[[PteFile], Optional[ProgramNames]]] = None,
                 phase: Optional[Callable[[str], None]] = None) -> RewriteResult:
    """Rewrite ``input_path``; write ``output_path`` (required unless ``dry_run`` or ``in_place``).

    Paths arrive resolved (``ptd`` is the data itself, not a guess): the API layer applies the .ptd rule and
    the default output name (``pte_devconst.paths``).

    ``durable=False`` skips the fsyncs (``atomic_output``): still atomic, not power-failure safe;
    refused with ``in_place``, where the file replaced is the only copy of the model.
    ``verify="full"`` makes the self-check compare every byte instead of sampling bulk copies.
    A program in memory (``ProgramBytes``) is rewritten in memory: ``result.data`` is the output, checked like a
    file, and nothing touches the disk.  ``names(source)`` names the constants in the result's plan (an
    ETRecord's names: the report shows them, the output is the same).  ``phase(what)`` names each step as it starts.
    """
    if isinstance(input_path, ProgramBytes):
        return _rewrite_in_memory(input_path, ptd, options, dry_run, progress, verify, names, phase)
    input_path = Path(input_path)
    full = full_check(verify)
    if in_place and not durable and not dry_run:
        raise PteDevconstError("an in-place rewrite always fsyncs (--no-fsync refused): a power failure must not "
                               "lose the only copy of the model", file=str(input_path))
    if output_path is None and not (in_place or dry_run):
        raise PteDevconstError("no output given (pass an output path, in_place or dry_run)", file=str(input_path))
    output = input_path if in_place or output_path is None else Path(output_path)
    if not dry_run:
        _readable(input_path)
        inputs = [("the .ptd input", Path(ptd), "")] if ptd is not None else []
        if not in_place:
            inputs.insert(0, ("the input", input_path, " (pass --in-place to replace it)"))
        check_destination(output, inputs=inputs)
    _phase(phase, "planning")
    with opened(input_path, ptd) as (source, data):
        plan = plan_file(source, data, options)
        removed = sum(len(edit.removed) for edit in plan.methods)
        gain = None if options.fold else safe_fold_gain(source.program, plan.analysis, options, plain=plan)
        shown, found, flows = _named_plan(source, data, plan, options, names)
        if dry_run:
            return RewriteResult(str(input_path), None, shown, source.size, None, removed, fold_gain=gain, names=found,
                                 flows=flows)
        try:
            if plan.is_empty:
                size = _copy_unchanged(source, output, progress, durable, full, phase)
            else:
                size = _write_rewrite(source, data, plan, output, progress, durable, full, phase)
        except ReportedError as error:
            raise error.with_file(str(input_path)) from None  # e.g. the input shrank while it was copied
    return RewriteResult(str(input_path), str(output), shown, source.size, size, removed, "full" if full else "sampled",
                         gain, names=found, flows=flows)


def _phase(phase: Optional[Callable[[str], None]], what: str) -> None:
    if phase is not None:
        phase(what)


def _named_plan(source: PteFile, data: Optional[PtdFile], plan: RewritePlan, options: RewriteOptions,
                names: Optional[Callable[[PteFile], Optional[ProgramNames]]]
                ) -> tuple[RewritePlan, Optional[ProgramNames], tuple[MethodFlows, ...]]:
    """The plan as the report shows it, its names and its picture: made again over the program with its
    constants named (the plan that is written is ``plan``, over the program as it is, so the names never reach
    the output)."""
    found = names(source) if names is not None else None
    shown, program = plan, source.program
    if found is not None and found.count:
        view = copy.copy(source)  # the same bytes, a program with names; never closed (``source`` owns the map)
        view.program = program = named_program(source.program, found)
        shown = plan_file(view, data, options)
    return shown, found, program_flows(program, shown.analysis, plan_residents(shown))


def _rewrite_in_memory(program: ProgramBytes, ptd: Optional[str | os.PathLike[str]], options: RewriteOptions,
                       dry_run: bool, progress: Optional[Progress], verify: Optional[str],
                       names: Optional[Callable[[PteFile], Optional[ProgramNames]]],
                       phase: Optional[Callable[[str], None]]) -> RewriteResult:
    """Rewrite a program held in memory into memory: the output is laid out, written to an anonymous memory
    file, read back and checked exactly as a file would be; ``result.data`` holds it."""
    full = full_check(verify)
    _phase(phase, "planning")
    with opened(program, ptd) as (source, data):
        plan = plan_file(source, data, options)
        removed = sum(len(edit.removed) for edit in plan.methods)
        gain = None if options.fold else safe_fold_gain(source.program, plan.analysis, options, plain=plan)
        shown, found, flows = _named_plan(source, data, plan, options, names)
        if dry_run:
            return RewriteResult(program.name, None, shown, source.size, None, removed, fold_gain=gain, names=found,
                                 flows=flows)
        if plan.is_empty:
            output = bytes(program)
        else:
            program_out, contents = apply_plan(source, plan, data)
            over = over_runtime_limits(program_out)
            if over:
                raise UnsupportedProgramError(f"cannot rewrite: the rewritten program would have {over}",
                                              file=source.path)
            layout = layout_pte(program_out, contents)
            _phase(phase, "writing")
            output = _to_memory(layout, contents, progress)
            _phase(phase, "self-check")
            with PteFile.from_bytes(output, path=f"{program.name} (rewritten)") as written:
                check_rewrite(source, written, plan, ptd=data, recipe=WriteRecipe.of_layout(layout, contents),
                              full=full)
    return RewriteResult(program.name, None, shown, source.size, len(output), removed,
                         "full" if full else "sampled", gain, output, found, flows)


def _to_memory(layout, contents, progress: Optional[Progress]) -> bytes:  # type: ignore[no-untyped-def]
    """The laid-out program's bytes, written by the file writer into an anonymous memory file (no disk)."""
    fd = os.memfd_create("pte-devconst-rewrite") if hasattr(os, "memfd_create") else None
    if fd is None:  # no memfd (not Linux): an unnamed temporary file, removed as it is closed
        import tempfile

        handle = tempfile.TemporaryFile()
        fd = os.dup(handle.fileno())
        handle.close()
    try:
        write_pte_to_fd(fd, layout, contents, progress, writeback=False)
        size = os.lseek(fd, 0, os.SEEK_END)
        output = bytearray(size)
        view, done = memoryview(output), 0
        while done < size:
            got = os.preadv(fd, [view[done:]], done)
            if got <= 0:
                raise PteDevconstError("internal error: the rewritten program could not be read back from memory")
            done += got
        return bytes(output)
    finally:
        os.close(fd)


def _readable(path: Path) -> None:
    """Name an input that cannot be read before the output is looked at (a name too long, a missing file)."""
    try:
        os.stat(path)
    except OSError as error:
        raise FormatError(f"cannot read: {error.strerror or error}", file=str(path)) from None


def _write_rewrite(source: PteFile, data: Optional[PtdFile], plan: RewritePlan, output: Path,
                   progress: Optional[Progress], durable: bool, full: bool,
                   phase: Optional[Callable[[str], None]] = None) -> int:
    program, contents = apply_plan(source, plan, data)
    over = over_runtime_limits(program)
    if over:
        raise UnsupportedProgramError(f"cannot rewrite: the rewritten program would have {over}; nothing was "
                                      "written", file=source.path)
    layout = layout_pte(program, contents)
    recipe = WriteRecipe.of_layout(layout, contents)

    def check(temp: str) -> None:
        _phase(phase, "self-check")
        with read_back(temp) as written:
            check_rewrite(source, written, plan, ptd=data, recipe=recipe, full=full)

    _phase(phase, "writing")
    with atomic_output(output, check=check, durable=durable, syncing=lambda: _phase(phase, "fsync")) as fd:
        write_pte_to_fd(fd, layout, contents, progress, writeback=durable)
    return layout.file_size


def _copy_unchanged(source: PteFile, output: Path, progress: Optional[Progress], durable: bool, full: bool,
                    phase: Optional[Callable[[str], None]] = None) -> int:
    """Nothing to move: the output is the input, byte for byte (so a second rewrite is a no-op)."""
    if output.exists() and output.resolve() == Path(source.path).resolve():
        return source.size
    whole = source.piece(Span(0, source.size))
    recipe = WriteRecipe.of_copy(whole)

    def check(temp: str) -> None:
        _phase(phase, "self-check")
        with read_back(temp) as written:
            check_copy(source, written, recipe, full)

    _phase(phase, "copying")
    with atomic_output(output, check=check, durable=durable, syncing=lambda: _phase(phase, "fsync")) as fd:
        write_piece(fd, whole, writeback=durable)
        if progress:
            progress(source.size, source.size)
    return source.size
