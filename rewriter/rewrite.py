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

import os
from pathlib import Path
from typing import Callable, Optional

from pte_devconst.paths import default_output
from pte_devconst.schema.atomic import atomic_output, check_destination
from pte_devconst.schema.errors import FormatError, PteDevconstError, UnsupportedProgramError
from pte_devconst.schema.limits import over_runtime_limits
from pte_devconst.schema.ptd_file import PtdFile
from pte_devconst.schema.pte_file import PteFile
from pte_devconst.schema.pte_writer import layout_pte, write_piece, write_pte_to_fd
from pte_devconst.schema.span import Span
from pte_devconst.schema.record import record

from .apply import apply_plan
from .load import analyze_opened, opened
from .plan import RewriteOptions, RewritePlan, make_plan
from .verify import VERIFY_MODES, check_copy, check_rewrite, full_by_default, read_back
from .verify_bytes import WriteRecipe

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

    @property
    def changed(self) -> bool:
        return not self.plan.is_empty


def plan_file(source: PteFile, ptd: Optional[PtdFile], options: RewriteOptions) -> RewritePlan:
    analysis = analyze_opened(source, ptd, host_placement=options.host_placement)
    plan = make_plan(source.program, analysis, options)
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
                 durable: bool = True, verify: Optional[str] = None) -> RewriteResult:
    """Rewrite ``input_path``; write ``output_path`` (default ``<stem>.devconst.pte``) unless ``dry_run``.

    ``durable=False`` skips the fsyncs (``atomic_output``): still atomic, not power-failure safe;
    refused with ``in_place``, where the file replaced is the only copy of the model.
    ``verify="full"`` makes the self-check compare every byte instead of sampling bulk copies.
    """
    input_path = Path(input_path)
    full = full_check(verify)
    if in_place and not durable and not dry_run:
        raise PteDevconstError("an in-place rewrite always fsyncs (--no-fsync refused): a power failure must not "
                               "lose the only copy of the model", file=str(input_path))
    output = input_path if in_place else Path(output_path) if output_path is not None else default_output(input_path)
    if not dry_run:
        _readable(input_path)
        inputs = [("the .ptd input", Path(ptd), "")] if ptd is not None else []
        if not in_place:
            inputs.insert(0, ("the input", input_path, " (pass --in-place to replace it)"))
        check_destination(output, inputs=inputs)
    with opened(input_path, ptd) as (source, data):
        plan = plan_file(source, data, options)
        removed = sum(len(edit.removed) for edit in plan.methods)
        if dry_run:
            return RewriteResult(str(input_path), None, plan, source.size, None, removed)
        try:
            if plan.is_empty:
                size = _copy_unchanged(source, output, progress, durable, full)
            else:
                size = _write_rewrite(source, data, plan, output, progress, durable, full)
        except PteDevconstError as error:
            raise error.with_file(str(input_path)) from None  # e.g. the input shrank while it was copied
    return RewriteResult(str(input_path), str(output), plan, source.size, size, removed, "full" if full else "sampled")


def _readable(path: Path) -> None:
    """Name an input that cannot be read before the output is looked at (a name too long, a missing file)."""
    try:
        os.stat(path)
    except OSError as error:
        raise FormatError(f"cannot read: {error.strerror or error}", file=str(path)) from None


def _write_rewrite(source: PteFile, data: Optional[PtdFile], plan: RewritePlan, output: Path,
                   progress: Optional[Progress], durable: bool, full: bool) -> int:
    program, contents = apply_plan(source, plan)
    over = over_runtime_limits(program)
    if over:
        raise UnsupportedProgramError(f"cannot rewrite: the rewritten program would have {over}; nothing was "
                                      "written", file=source.path)
    layout = layout_pte(program, contents)
    recipe = WriteRecipe.of_layout(layout, contents)

    def check(temp: str) -> None:
        with read_back(temp) as written:
            check_rewrite(source, written, plan, ptd=data, recipe=recipe, full=full)

    with atomic_output(output, check=check, durable=durable) as fd:
        write_pte_to_fd(fd, layout, contents, progress, writeback=durable)
    return layout.file_size


def _copy_unchanged(source: PteFile, output: Path, progress: Optional[Progress], durable: bool, full: bool) -> int:
    """Nothing to move: the output is the input, byte for byte (so a second rewrite is a no-op)."""
    if output.exists() and output.resolve() == Path(source.path).resolve():
        return source.size
    whole = source.piece(Span(0, source.size))
    recipe = WriteRecipe.of_copy(whole)

    def check(temp: str) -> None:
        with read_back(temp) as written:
            check_copy(source, written, recipe, full)

    with atomic_output(output, check=check, durable=durable) as fd:
        write_piece(fd, whole, writeback=durable)
        if progress:
            progress(source.size, source.size)
    return source.size
