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


# --- --progress in a CI log: a line per file (and per phase of a large rewrite), none with -q (issue 38) -------

def _zoo(tmp_path: Path, count: int) -> Path:
    """A folder of ``count`` programs, as a model zoo a CI step goes over."""
    folder = tmp_path / "assets" / "models" / "vision"
    folder.mkdir(parents=True)
    for index in range(count):
        (folder / f"m{index:02d}.pte").write_bytes(PTE.read_bytes())
    return folder


@pytest.mark.parametrize("command", ["rewrite", "check"])
def test_progress_writes_a_line_per_file_where_stderr_is_no_terminal(tmp_path: Path, command: str) -> None:
    """Was: rewrite and check had no --progress; a CI step over a model zoo printed nothing for minutes."""
    folder = _zoo(tmp_path, 6)
    verb = "rewriting" if command == "rewrite" else "checking"
    extra = ["--dry-run"] if command == "rewrite" else []
    done = invoke(command, folder, "--progress", "--format", "concise", *extra)
    assert done.exit_code in (0, 1), done.output
    lines = [line for line in done.stderr.splitlines() if verb in line]
    assert lines == [f"pte-devconst: {verb} {folder / f'm{i:02d}.pte'} ({i + 1}/6)" for i in range(6)]
    assert verb not in done.stdout  # the report stays clean: progress is stderr's
    quiet = invoke(command, folder, "--progress", "-q", *extra)
    assert verb not in quiet.stderr  # -q: nothing
    plain = invoke(command, folder, *extra)
    assert verb not in plain.stderr  # not asked for, no terminal: nothing


@pytest.mark.parametrize("command", ["rewrite", "check"])
def test_the_config_key_turns_progress_on_and_the_command_line_off(tmp_path: Path, command: str) -> None:
    folder = _zoo(tmp_path, 2)
    config = tmp_path / "pyproject.toml"
    config.write_text('[tool.pte-devconst]\nprogress = true\n')
    extra = ["--dry-run"] if command == "rewrite" else []
    verb = "rewriting" if command == "rewrite" else "checking"
    on = invoke(command, folder, "--config", config, *extra)
    assert sum(verb in line for line in on.stderr.splitlines()) == 2, on.stderr
    off = invoke(command, folder, "--config", config, "--no-progress", *extra)
    assert verb not in off.stderr
    config.write_text('[tool.pte-devconst]\nprogress = "yes"\n')
    wrong = invoke(command, folder, "--config", config, *extra)
    assert wrong.exit_code == 2 and wrong.stderr.splitlines() == [
        f"pte-devconst: error: {config}: [tool.pte-devconst] progress: must be true or false, not 'yes'"]


def test_a_large_rewrite_gets_a_line_per_phase(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Over PHASE_LINES_FROM (256 MiB; lowered here to the fixture's size) each phase gets its line: a 1 GiB
    rewrite's writing and self-check take seconds, and a log shows which one runs."""
    monkeypatch.setattr(progress_module, "PHASE_LINES_FROM", PTE.stat().st_size - 1)
    done = invoke("rewrite", PTE, "-o", tmp_path / "out.pte", "--progress")
    assert done.exit_code == 0, done.output
    assert done.stderr.splitlines() == [f"pte-devconst: rewriting {PTE}"] + [
        f"pte-devconst: rewriting {PTE}: {phase}" for phase in ("planning", "writing", "fsync", "self-check")]
    monkeypatch.setattr(progress_module, "PHASE_LINES_FROM", PTE.stat().st_size)
    small = invoke("rewrite", PTE, "-o", tmp_path / "small.pte", "--progress")
    assert small.stderr.splitlines() == [f"pte-devconst: rewriting {PTE}"]  # one line for a file under it


def test_a_ci_step_over_fifty_programs_logs_each(tmp_path: Path) -> None:
    """The issue's measure, as CI runs it: a child process, CI=true, stderr a pipe, a folder of 50 programs."""
    import os
    import subprocess

    folder = _zoo(tmp_path, 50)
    env = {**os.environ, "CI": "true"}
    for command, verb in (("check", "checking"), ("rewrite", "rewriting")):
        done = subprocess.run([sys.executable, "-m", "pte_devconst", command, str(folder), "--progress",
                               "--format", "concise"], capture_output=True, text=True, env=env,
                              stdin=subprocess.DEVNULL, timeout=300)
        assert done.returncode in (0, 1), done.stderr
        lines = [line for line in done.stderr.splitlines() if line.startswith(f"pte-devconst: {verb} ")]
        assert len(lines) == 50 and lines[-1].endswith("(50/50)"), done.stderr[-500:]
