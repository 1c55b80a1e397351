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
from dataclasses import replace
import os
from pathlib import Path
from typing import Any, Callable, Optional

from pte_devconst.util.atomic import atomic_output, check_destination
from pte_devconst.util.errors import (DeviceNotUsedError, FormatError, PteDevconstError, ReportedError,
                                      UnsupportedProgramError)
from pte_devconst.schema import model as m
from pte_devconst.schema.limits import over_runtime_limits
from pte_devconst.schema.ptd_file import PtdFile
from pte_devconst.schema.pte_file import PteFile, ProgramBytes
from pte_devconst.schema.pte_writer import (Layout, SegmentContent, background_writeback, layout_pte, pte_bytes,
                                           write_piece, write_pte_to_fd)
from pte_devconst.schema.span import Span
from pte_devconst.util.record import record

from .apply import apply_plan
from .model.analysis import ConstantVerdict
from .load import analyze_opened, opened
from .fold import fold_refusals, need_torch
from .flows import MethodFlows, plan_residents, program_flows
from .names import ProgramNames, named_program
from .plan import (FoldGain, RewriteOptions, RewritePlan, devices_used, input_offsets_kept, make_plan, safe_fold_gain,
                   selection_unused)
from .request import Namer, RewriteRequest, VerifyMode
from .verify import RelayoutUnproven, check_copy, check_rewrite, read_back
from .model.verify_bytes import CheckCost, WriteRecipe
from .rewrite_json import left_in_place, rewrite_json

Progress = Callable[[int, int], None]
Phase = Callable[[str], None]


@record
class RewriteResult:
    input: str
    output: Optional[str]  # None for a dry run
    plan: RewritePlan
    input_size: int
    output_size: Optional[int]
    instructions_removed: int
    verified: Optional[VerifyMode] = None  # how the self-check compared the output (None: dry run)
    fold_gain: Optional[FoldGain] = None  # without --fold: what --fold would add (None: nothing, or --fold given)
    data: Optional[bytes] = None  # the rewritten program, for a program rewritten in memory (output is None)
    names: Optional[ProgramNames] = None  # where the constants' names in the plan came from (an ETRecord)
    flows: tuple[MethodFlows, ...] = ()  # the input's per-call copies, and which the rewrite removes (the picture)
    devices: tuple[str, ...] = ()  # the non-CPU devices the program uses (what --device can select)
    self_check_bytes: int = 0  # what the self-check's byte comparisons read, of both files

    @property
    def changed(self) -> bool:
        return not self.plan.is_empty

    @property
    def not_judged(self) -> tuple[ConstantVerdict, ...]:
        """External constants whose .ptd was not found or given: neither moved nor called clean (``check`` exits 3
        on them; so does ``rewrite``, and it writes nothing when nothing else changed)."""
        return self.plan.analysis.unknown

    @property
    def written(self) -> bool:
        """Whether a file was written: not for a dry run, nor when ``unwritten`` says so."""
        return self.output is not None and not unwritten(self.plan)

    @property
    def in_place(self) -> bool:
        """Whether the output replaced the input."""
        return self.output is not None and self.data is None and Path(self.output) == Path(self.input)

    def left_in_place(self) -> list[ConstantVerdict]:
        """Every constant the rewrite leaves on the host (not eligible, not a folded chain's source)."""
        return [c for method in self.plan.analysis.methods for c in left_in_place(self.plan, method)]

    def to_json(self) -> dict[str, Any]:
        """``rewrite``'s JSON document for this program (cli/report.schema.json)."""
        return rewrite_json(self)


def unwritten(plan: RewritePlan) -> bool:
    """Whether a rewrite writes no file although it is no dry run: nothing to move and external constants not judged
    (their .ptd is missing), where an identical copy would read as "checked, nothing to do"."""
    return plan.is_empty and bool(plan.analysis.unknown)


def plan_file(source: PteFile, ptd: Optional[PtdFile], options: RewriteOptions) -> RewritePlan:
    analysis = analyze_opened(source, ptd, host_placement=options.host_placement)
    plan = make_plan(source.program, analysis, options, fold_refusals(source, ptd, analysis) if options.fold else {})
    if any(entry.recipe is not None for entry in plan.initial_data):
        need_torch()
    if analysis.refusal and not plan.is_empty:
        raise UnsupportedProgramError(f"cannot rewrite: {analysis.refusal}", file=source.path)
    return plan


def rewrite_file(input_path: str | os.PathLike[str] | ProgramBytes,
                 output_path: Optional[str | os.PathLike[str]] = None, *,
                 ptd: Optional[str | os.PathLike[str]] = None, options: RewriteOptions = RewriteOptions(),
                 dry_run: bool = False, in_place: bool = False, progress: Optional[Progress] = None,
                 durable: bool = True, verify: Optional[str | VerifyMode] = None, names: Optional[Namer] = None,
                 phase: Optional[Phase] = None) -> RewriteResult:
    """Rewrite ``input_path`` to ``output_path`` (required unless ``dry_run`` or ``in_place``): ``rewrite`` with
    the request these arguments make, for a library caller that has the paths already (tests, benchmarks)."""
    source = input_path if isinstance(input_path, ProgramBytes) else Path(input_path)
    destination: Optional[Path] = None
    if dry_run or isinstance(source, ProgramBytes):
        destination = None
    elif in_place:
        destination = source
    elif output_path is not None:
        destination = Path(output_path)
    request = RewriteRequest(source, destination, None if ptd is None else Path(ptd), options, dry_run, in_place,
                             durable, VerifyMode.parse(verify), names)
    return rewrite(request, progress, phase)


def rewrite(request: RewriteRequest, progress: Optional[Progress] = None,
            phase: Optional[Phase] = None) -> RewriteResult:
    """Carry out ``request``: plan, then (unless a dry run) write the output atomically and re-read it.

    Paths arrive resolved (``request.ptd`` is the data itself, not a guess): the API layer applies the .ptd rule
    and the default output name (``pte_devconst.paths``).  A file is written through ``atomic_output`` and
    replaces the destination only once its re-read passes the self-check (``request.durable=False`` skips the
    fsyncs: still atomic, not power-failure safe); a program in memory (``ProgramBytes``) is written to an
    anonymous memory file and checked the same way, and ``result.data`` holds it.  ``progress(done, total)`` is
    called as the output is written, ``phase(what)`` as each step starts.
    """
    source_path = request.source if isinstance(request.source, Path) else None
    where = str(request.source)  # a file's name, or the name a program in memory goes by
    refusal = request.refusal()
    if refusal:
        raise PteDevconstError(refusal, file=where if source_path is not None else None)
    full = request.verify is VerifyMode.FULL
    if source_path is not None and not request.dry_run:
        assert request.destination is not None  # request.refusal() says so
        _readable(source_path)
        inputs = [("the .ptd input", request.ptd, "")] if request.ptd is not None else []
        if not request.in_place:
            inputs.insert(0, ("the input", source_path, " (pass --in-place to replace it)"))
        check_destination(request.destination, inputs=inputs)
    _phase(phase, "planning")
    with opened(request.source, request.ptd) as (source, data):
        found = request.names(source) if request.names is not None else None
        plan, program = _plan(source, data, request.options, found)
        used = devices_used(program, plan.analysis)
        unused = selection_unused(used, request.options)
        if unused:  # a mistyped --device would write an identical copy: a silent no-op
            raise DeviceNotUsedError(unused, used=used, file=where)
        removed = sum(len(edit.removed) for edit in plan.methods)
        gain = None if request.options.fold else safe_fold_gain(program, plan.analysis, request.options, plain=plan)
        flows = program_flows(program, plan.analysis, plan_residents(plan))
        if request.dry_run:
            return RewriteResult(where, None, plan, source.size, None, removed, fold_gain=gain, names=found,
                                 flows=flows, devices=used)
        if unwritten(plan) and source_path is not None:
            return RewriteResult(where, str(request.destination), plan, source.size, None, removed, None, gain,
                                 names=found, flows=flows, devices=used)
        destination = request.destination
        cost = CheckCost()

        def write(plan: RewritePlan) -> tuple[int, Optional[bytes]]:
            if source_path is None:
                output = (bytes(request.source) if plan.is_empty
                          else _rewrite_into_memory(source, data, plan, progress, full, phase))
                return len(output), output
            assert destination is not None
            if plan.is_empty:
                return _copy_unchanged(source, destination, progress, request.durable, full, phase, cost), None
            return _write_rewrite(source, data, plan, destination, progress, request.durable, full, phase,
                                  cost), None

        try:
            try:
                size, output = write(plan)
            except RelayoutUnproven as unproven:  # the layout's model missed what the replay sees: keep the offsets
                retry, _ = _plan(source, data, replace(request.options, relayout=False), found)
                why = f"the byte replay found a read it changes ({unproven.reason})"
                plan = input_offsets_kept(program, retry, plan, why)
                size, output = write(plan)
        except ReportedError as error:
            raise error.with_file(where) from None  # e.g. the input shrank while it was copied
        if source_path is None:
            return RewriteResult(where, None, plan, source.size, size, removed, request.verify, gain, output,
                                 found, flows, used)
    return RewriteResult(where, str(destination), plan, source.size, size, removed, request.verify, gain,
                         names=found, flows=flows, devices=used, self_check_bytes=cost.bytes_read)


def _phase(phase: Optional[Phase], what: str) -> None:
    if phase is not None:
        phase(what)


def _plan(source: PteFile, data: Optional[PtdFile], options: RewriteOptions, names: Optional[ProgramNames]
          ) -> tuple[RewritePlan, m.Program]:
    """The one plan of a rewrite, made once, and the program the report shows (its constants named).

    With names (an ETRecord's), the analysis and the plan are made over the program with its constants named, so
    the report shows the names; the output is applied to ``source``'s own program and the plan refers to values
    by index, so the names never reach the file (tests/test_names.py).
    """
    if names is None or not names.count:
        return plan_file(source, data, options), source.program
    view = copy.copy(source)  # the same bytes, a program with names; never closed (``source`` owns the map)
    view.program = named_program(source.program, names)
    return plan_file(view, data, options), view.program


def _laid_out(source: PteFile, data: Optional[PtdFile], plan: RewritePlan
              ) -> tuple[Layout, list[SegmentContent]]:
    """The rewritten program applied and laid out, for a file or for memory alike; refused before anything is
    written when the runtime's verifier would refuse it."""
    program, contents = apply_plan(source, plan, data)
    over = over_runtime_limits(program)
    if over:
        raise UnsupportedProgramError(f"cannot rewrite: the rewritten program would have {over}; nothing was "
                                      "written", file=source.path)
    return layout_pte(program, contents), contents


def _rewrite_into_memory(source: PteFile, data: Optional[PtdFile], plan: RewritePlan, progress: Optional[Progress],
                         full: bool, phase: Optional[Phase]) -> bytes:
    """A program held in memory, rewritten into memory: the output is laid out, written to an anonymous memory
    file, read back and checked exactly as a file would be."""
    layout, contents = _laid_out(source, data, plan)
    _phase(phase, "writing")
    output = pte_bytes(layout, contents, progress)
    _phase(phase, "self-check")
    with PteFile.from_bytes(output, path=f"{source.path} (rewritten)") as written:
        check_rewrite(source, written, plan, ptd=data, recipe=WriteRecipe.of_layout(layout, contents), full=full)
    return output


def _readable(path: Path) -> None:
    """Name an input that cannot be read before the output is looked at (a name too long, a missing file)."""
    try:
        os.stat(path)
    except OSError as error:
        raise FormatError(f"cannot read: {error.strerror or error}", file=str(path)) from None


def _write_rewrite(source: PteFile, data: Optional[PtdFile], plan: RewritePlan, output: Path,
                   progress: Optional[Progress], durable: bool, full: bool,
                   phase: Optional[Callable[[str], None]] = None, cost: Optional[CheckCost] = None) -> int:
    layout, contents = _laid_out(source, data, plan)
    recipe = WriteRecipe.of_layout(layout, contents)

    def check(temp: str) -> None:
        _phase(phase, "self-check")
        with read_back(temp) as written:
            check_rewrite(source, written, plan, ptd=data, recipe=recipe, full=full, cost=cost)

    _phase(phase, "writing")
    with atomic_output(output, check=check, durable=durable, syncing=lambda: _phase(phase, "fsync")) as fd:
        write_pte_to_fd(fd, layout, contents, progress, writeback=durable)
    return layout.file_size


def _copy_unchanged(source: PteFile, output: Path, progress: Optional[Progress], durable: bool, full: bool,
                    phase: Optional[Callable[[str], None]] = None, cost: Optional[CheckCost] = None) -> int:
    """Nothing to move: the output is the input, byte for byte (so a second rewrite is a no-op)."""
    if output.exists() and output.resolve() == Path(source.path).resolve():
        return source.size
    whole = source.piece(Span(0, source.size))
    recipe = WriteRecipe.of_copy(whole)

    def check(temp: str) -> None:
        _phase(phase, "self-check")
        with read_back(temp) as written:
            check_copy(source, written, recipe, full, cost)

    _phase(phase, "copying")
    with atomic_output(output, check=check, durable=durable, syncing=lambda: _phase(phase, "fsync")) as fd:
        with background_writeback(fd, durable) as flush:
            write_piece(fd, whole, flush=flush)
        if progress:
            progress(source.size, source.size)
    return source.size
