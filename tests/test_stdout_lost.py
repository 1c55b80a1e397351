"""Standard output closed (``>&-``), full (``> /dev/full``) or gone (``| head -c 1``): one line on stderr naming what
failed, or nothing; never a traceback, never "internal error"; the work still done and the exit code saying so
(docs/cli.md, "Exit codes": 74 when the work was done but its report was lost, 141 quietly for a reader gone).

Each case runs the real console script in a child process, since only a real file descriptor 1 can be closed or
full (a test runner's captured stream cannot).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Optional

import pytest

from conftest import EXAMPLES

MLP = EXAMPLES / "mlp_copy.pte"
DEEP = Path(__file__).parent / "fixtures" / "xnnpack_device" / "deep_copy.pte"
REPORT_LOST, BROKEN_PIPE = 74, 141


def _run(args: list[str], stdout: str) -> tuple[int, str, bytes]:
    """``pte-devconst ARGS`` with stdout ``closed``, ``full`` or a pipe read for one byte (``gone``): (exit code,
    stderr, what stdout's reader got)."""
    command = [sys.executable, "-m", "pte_devconst", *args]
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "100"}
    if stdout == "gone":
        child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        assert child.stdout is not None and child.stderr is not None
        got = child.stdout.read(1)
        child.stdout.close()
        err = child.stderr.read().decode()
        return child.wait(timeout=120), err, got
    if stdout == "full":
        with open("/dev/full", "wb") as full:
            done = subprocess.run(command, stdout=full, stderr=subprocess.PIPE, env=env, timeout=120)
    else:
        done = subprocess.run(command, stderr=subprocess.PIPE, env=env, timeout=120,
                              preexec_fn=lambda: os.close(1))  # noqa: PLW1509 - the child only closes its fd 1
    return done.returncode, done.stderr.decode(), b""


def _one_line_or_silent(err: str, reason: Optional[str]) -> None:
    assert "Traceback" not in err and "internal error" not in err, err
    lines = [line for line in err.splitlines() if "cannot write to standard output" in line]
    if reason is None:
        assert not lines, err
    else:
        assert lines == [f"pte-devconst: error: cannot write to standard output: {reason}"], err


needs_full = pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full here")


def test_check_json_to_a_closed_stdout_is_one_line(tmp_path: Path) -> None:
    code, err, _ = _run(["check", str(MLP), "--format", "json"], "closed")
    _one_line_or_silent(err, "Bad file descriptor")
    assert code == 1  # the gate's verdict (findings) stands: its report is what was lost


def test_a_quiet_rewrite_to_a_closed_stdout_writes_checks_and_exits_0(tmp_path: Path) -> None:
    out = tmp_path / "out.pte"
    code, err, _ = _run(["rewrite", str(MLP), "-o", str(out), "-q"], "closed")
    _one_line_or_silent(err, None)  # nothing was to be written to stdout
    assert code == 0 and out.exists()


def test_a_rewrite_whose_report_is_lost_still_writes_its_output_and_says_so(tmp_path: Path) -> None:
    out = tmp_path / "out.pte"
    code, err, _ = _run(["rewrite", str(MLP), "-o", str(out)], "closed")
    _one_line_or_silent(err, "Bad file descriptor")
    assert code == REPORT_LOST and out.exists()  # not 2: the output was written and checked
    assert _run(["check", str(out), "--format", "json"], "closed")[0] == REPORT_LOST  # a clean gate, report lost


@needs_full
@pytest.mark.parametrize("args", [["inspect", str(MLP)], ["check", str(MLP), "--format", "json"],
                                  ["diff", str(MLP), str(MLP)]], ids=["inspect", "check", "diff"])
def test_a_full_stdout_is_one_line(args: list[str]) -> None:
    code, err, _ = _run(args, "full")
    _one_line_or_silent(err, "No space left on device")
    assert code in (1, REPORT_LOST)


@needs_full
def test_a_rewrite_to_a_full_stdout_writes_its_output(tmp_path: Path) -> None:
    out = tmp_path / "out.pte"
    code, err, _ = _run(["rewrite", str(MLP), "-o", str(out)], "full")
    _one_line_or_silent(err, "No space left on device")
    assert code == REPORT_LOST and out.exists()


@pytest.mark.parametrize("args", [["inspect", str(DEEP)], ["check", str(DEEP), "--format", "json"],
                                  ["diff", str(DEEP), str(DEEP)]], ids=["inspect", "check", "diff"])
def test_a_reader_gone_after_one_byte_is_silent(args: list[str]) -> None:
    code, err, got = _run(args, "gone")
    assert len(got) == 1
    _one_line_or_silent(err, None)
    assert not err.strip(), err
    assert code in (0, 1, BROKEN_PIPE)  # the report fitted the pipe, or the reader's leaving was seen: quiet


@needs_full
def test_validates_report_to_a_full_stdout_is_one_line(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    rewritten = tmp_path / "out.pte"
    assert _run(["rewrite", str(MLP), "-o", str(rewritten), "-q"], "closed")[0] == 0
    inputs = MLP.with_name("mlp_copy.inputs.pt")
    code, err, _ = _run(["validate", str(MLP), str(rewritten), "--simulate-devices", "--inputs", str(inputs)], "full")
    _one_line_or_silent(err, "No space left on device")
    assert code == REPORT_LOST
