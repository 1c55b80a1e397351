"""Feeding the self-check a wrong output: a forced plan, or a corruption after the real apply (shared by the
self-check tests: tests/test_selfcheck.py, tests/test_fold_selfcheck.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional

import pytest

from cli_runner import invoke
from pte_devconst.rewriter import rewrite as rewrite_module
from pte_devconst.rewriter.plan import RewritePlan
from pte_devconst.schema import model as m
from pte_devconst.util.atomic import TEMP_PREFIX
from pte_devconst.schema.ptd_file import PtdFile
from pte_devconst.schema.pte_file import PteFile
from pte_devconst.schema.pte_writer import SegmentContent

OLD_OUTPUT = b"the previous output, which a refused rewrite must leave as it is"


def use_plan(monkeypatch: pytest.MonkeyPatch, plan: RewritePlan) -> None:
    monkeypatch.setattr(rewrite_module, "plan_file", lambda source, data, options: plan)


def corrupt_apply(monkeypatch: pytest.MonkeyPatch,
                   corrupt: Callable[[PteFile, m.Program, list[SegmentContent]], m.Program]) -> None:
    """Run the real apply_plan, then let ``corrupt`` change its program (returned) or segment contents (in place)."""
    from pte_devconst.rewriter.apply import apply_plan as real

    def apply(source: PteFile, plan: RewritePlan, ptd: Optional[PtdFile] = None
              ) -> tuple[m.Program, list[SegmentContent]]:
        program, contents = real(source, plan, ptd)
        return corrupt(source, program, contents), contents

    monkeypatch.setattr(rewrite_module, "apply_plan", apply)


def refused(tmp_path: Path, pte: Path, *fragments: str, ptd: Optional[Path] = None, extra: tuple[str, ...] = ()) -> str:
    """``rewrite pte -o out.pte`` over an existing output: one clean line, output and folder as they were."""
    dest = tmp_path / "out.pte"
    dest.write_bytes(OLD_OUTPUT)
    before = sorted(p.name for p in tmp_path.iterdir())
    result = invoke("rewrite", pte, "-o", dest, *(["--ptd", ptd] if ptd else []), *extra)
    lines = result.stderr.splitlines()
    assert result.exit_code == 2 and len(lines) == 1, (result.exit_code, result.stderr, result.stdout)
    line = lines[0]
    assert line.startswith(f"pte-devconst: error: {dest}: internal error: the rewritten file failed the self-check")
    assert line.endswith("; the destination was left untouched"), line
    for fragment in fragments:
        assert fragment in line, line
    assert dest.read_bytes() == OLD_OUTPUT
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert not any(p.name.startswith(TEMP_PREFIX) for p in tmp_path.iterdir())
    return line
