"""Progress on long commands: a rewrite names its phases (the self-check and the fsync too), diff and validate
report each step, sizes are binary as everywhere else, and nothing is drawn when stderr is not a terminal."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

from cli_runner import invoke
from conftest import pte_path

from pte_devconst import api
from pte_devconst.cli import progress as progress_module

PTE = Path(__file__).parent / "fixtures" / "names" / "mixed.pte"


def test_rewrite_names_every_phase_in_order(tmp_path: Path) -> None:
    seen: list[str] = []
    api.rewrite(PTE, tmp_path / "a.pte", phase=seen.append)
    assert seen == ["planning", "writing", "fsync", "self-check"]
    seen.clear()
    api.rewrite(PTE, tmp_path / "b.pte", phase=seen.append, fsync=False)
    assert seen == ["planning", "writing", "self-check"]  # no wait for the disk, none named
    seen.clear()
    api.rewrite(PTE.read_bytes(), phase=seen.append)
    assert seen == ["planning", "writing", "self-check"]  # in memory: nothing to sync
    seen.clear()
    clean = pte_path("v_h_cpu_only")
    api.rewrite(clean, tmp_path / "c.pte", phase=seen.append)
    assert seen == ["planning", "copying", "fsync", "self-check"]


def test_diff_reports_each_method(tmp_path: Path) -> None:
    out = tmp_path / "out.pte"
    api.rewrite(PTE, out)
    seen: list[tuple[int, int, str]] = []
    api.diff(PTE, out, progress=lambda done, total, what: seen.append((done, total, what)))
    assert seen == [(0, 2, "method forward"), (1, 2, "named data and segments")]


def _terminal(monkeypatch: pytest.MonkeyPatch) -> io.StringIO:
    """Make the bars think stderr is a terminal and draw into a buffer."""
    from rich.console import Console

    drawn = io.StringIO()
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    monkeypatch.setattr(progress_module, "_stderr",
                        lambda: Console(file=drawn, force_terminal=True, width=120, color_system=None))
    return drawn


def test_the_rewrite_bar_counts_binary_units_and_shows_the_phase(monkeypatch: pytest.MonkeyPatch) -> None:
    drawn = _terminal(monkeypatch)
    with progress_module.rewrite_progress("model.pte", 3 << 30, quiet=False) as bar:
        assert bar is not None
        bar.phase("fsync")
        bar.progress(3 << 29, 3 << 30)
        bar.bar.refresh()
    text = drawn.getvalue()
    assert "model.pte: fsync" in text
    assert "1.5/3.0 GiB" in text and " GB" not in text  # 1.5 GiB of 3 GiB, not 1.6/3.2 GB


def test_the_validate_bar_counts_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    drawn = _terminal(monkeypatch)
    with progress_module.steps_progress("validating m.pte", quiet=False) as advance:
        assert advance is not None
        advance(2, 4, "forward: rewritten, call 1/2")
    assert "2/4" in drawn.getvalue() and "forward: rewritten, call 1/2" in drawn.getvalue()
    with progress_module.steps_progress("x", quiet=True) as advance:
        assert advance is None


def test_nothing_is_drawn_when_stderr_is_not_a_terminal(tmp_path: Path) -> None:
    for command in (["rewrite", PTE, "-o", tmp_path / "o.pte"], ["diff", PTE, PTE]):
        done = invoke(*command)
        assert done.exit_code == 0 and done.stderr == ""
    with progress_module.rewrite_progress("big.pte", 10 << 30, quiet=False) as bar:
        assert bar is None  # pytest's stderr is no terminal
