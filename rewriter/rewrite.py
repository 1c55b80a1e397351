"""The rewrite pipeline: open -> analyze -> plan -> apply -> write (atomically) -> re-read and check.

``rewrite_file`` is what the command line and the Python API call.  Every
step before ``write`` is pure; the output replaces the destination only after
the re-read of the temporary file passes ``check_rewrite``.  A plan with
nothing to move copies the input byte for byte, which makes the rewrite
idempotent.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Optional

from pte_devconst.schema.atomic import atomic_output
from pte_devconst.schema.errors import PteDevconstError, UnsupportedProgramError
from pte_devconst.schema.ptd_file import PtdFile
from pte_devconst.schema.pte_file import PteFile, Span, open_pte
from pte_devconst.schema.pte_writer import layout_pte, write_piece, write_pte_to_fd
from pte_devconst.schema.record import record

from .apply import apply_plan
from .load import analyze_opened, opened
from .plan import RewriteOptions, RewritePlan, make_plan
from .verify import check_rewrite

Progress = Callable[[int, int], None]


@record
class RewriteResult:
    input: str
    output: Optional[str]  # None for a dry run
    plan: RewritePlan
    input_size: int
    output_size: Optional[int]
    instructions_removed: int

    @property
    def changed(self) -> bool:
        return not self.plan.is_empty


def default_output(path: str | os.PathLike[str]) -> Path:
    """``model.pte`` -> ``model.devconst.pte`` next to it."""
    p = Path(path)
    return p.with_name(p.stem + ".devconst" + (p.suffix or ".pte"))


def plan_file(source: PteFile, ptd: Optional[PtdFile], options: RewriteOptions) -> RewritePlan:
    analysis = analyze_opened(source, ptd, host_placement=options.host_placement)
    plan = make_plan(source.program, analysis, options)
    if analysis.refusal and not plan.is_empty:
        raise UnsupportedProgramError(f"cannot rewrite: {analysis.refusal}", file=source.path)
    return plan


def rewrite_file(input_path: str | os.PathLike[str], output_path: Optional[str | os.PathLike[str]] = None, *,
                 ptd: Optional[str | os.PathLike[str]] = None, options: RewriteOptions = RewriteOptions(),
                 dry_run: bool = False, in_place: bool = False, progress: Optional[Progress] = None,
                 durable: bool = True) -> RewriteResult:
    """Rewrite ``input_path``; write ``output_path`` (default ``<stem>.devconst.pte``) unless ``dry_run``.

    ``durable=False`` skips the fsyncs (``atomic_output``): still atomic, not power-failure safe;
    refused with ``in_place``, where the file replaced is the only copy of the model.
    """
    input_path = Path(input_path)
    if in_place and not durable and not dry_run:
        raise PteDevconstError("an in-place rewrite always fsyncs (--no-fsync refused): a power failure must not "
                               "lose the only copy of the model", file=str(input_path))
    if in_place:
        output = input_path
    else:
        output = Path(output_path) if output_path is not None else default_output(input_path)
        if not dry_run and output.exists() and output.resolve() == input_path.resolve():
            raise PteDevconstError("the output would overwrite the input; pass --in-place to allow that",
                                   file=str(input_path))
    with opened(input_path, ptd) as (source, data):
        plan = plan_file(source, data, options)
        removed = sum(len(edit.removed) for edit in plan.methods)
        if dry_run:
            return RewriteResult(str(input_path), None, plan, source.size, None, removed)
        if plan.is_empty:
            size = _copy_unchanged(source, output, progress, durable)
        else:
            program, contents = apply_plan(source, plan)
            layout = layout_pte(program, contents)

            def check(temp: str) -> None:
                with open_pte(temp) as written:
                    check_rewrite(source, written, plan)

            with atomic_output(output, check=check, durable=durable) as fd:
                write_pte_to_fd(fd, layout, contents, progress, writeback=durable)
            size = layout.file_size
    return RewriteResult(str(input_path), str(output), plan, source.size, size, removed)


def _copy_unchanged(source: PteFile, output: Path, progress: Optional[Progress], durable: bool) -> int:
    """Nothing to move: the output is the input, byte for byte (so a second rewrite is a no-op)."""
    if output.exists() and output.resolve() == Path(source.path).resolve():
        return source.size

    def check(temp: str) -> None:
        with open_pte(temp):
            pass

    with atomic_output(output, check=check, durable=durable) as fd:
        write_piece(fd, source.piece(Span(0, source.size)), writeback=durable)
        if progress:
            progress(source.size, source.size)
    return source.size
