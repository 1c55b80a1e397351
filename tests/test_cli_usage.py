"""Usage errors through the real entry point: one line, exit 2, like every other error."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

ENTRY = "from pte_devconst.cli.app import main; main()"


def _run(*args: str, columns: int = 200) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": str(columns)}
    return subprocess.run([sys.executable, "-c", ENTRY, *args], capture_output=True, text=True, timeout=120, env=env)


@pytest.mark.parametrize("args, fragment", [
    (("rewrite", "model.pte", "--no-such-flag"), "No such option: --no-such-flag"),
    (("bogus",), "No such command 'bogus'"),
    (("rewrite",), "Missing argument"),
    (("rewrite", "--min-bytes", "-5", "model.pte"), "--min-bytes"),
])
def test_usage_error_is_one_line_with_exit_2(args: tuple[str, ...], fragment: str) -> None:
    done = _run(*args)
    assert done.returncode == 2
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("pte-devconst: error: ") and fragment in lines[0], done.stderr
    assert "--help" in lines[0] and "Traceback" not in done.stderr


def test_help_shows_brackets_literally() -> None:
    done = _run("rewrite", "--help")
    assert done.returncode == 0
    assert "[default: NAME.devconst.pte]" in done.stdout


def test_global_flags_work_after_the_command(tmp_path) -> None:
    from conftest import pte_path

    out = tmp_path / "out.pte"
    quiet = _run("rewrite", str(pte_path("v_a_dtypes_copy")), "-o", str(out), "-q")
    assert quiet.returncode == 0 and quiet.stdout == "" and out.exists()
    bad = tmp_path / "bad.pte"
    bad.write_bytes(b"not a program")
    debug = _run("inspect", str(bad), "--debug")
    assert debug.returncode != 0 and "Traceback" in debug.stderr and "FormatError" in debug.stderr
