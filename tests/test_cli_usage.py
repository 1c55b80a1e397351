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


def test_an_option_value_that_looks_like_a_global_flag_stays_with_its_option(tmp_path) -> None:
    """``-o -v`` writes to a file named ``-v``: the value is not hoisted as --verbose (it was: "Option '-o'
    requires an argument")."""
    from conftest import pte_path

    from pte_devconst.cli.app import hoist_global_flags

    assert hoist_global_flags(["rewrite", "m.pte", "--dry-run", "-o", "-v"]) == ["rewrite", "m.pte", "--dry-run",
                                                                                "-o", "-v"]
    assert hoist_global_flags(["check", "m.pte", "--ptd", "-q", "-v"]) == ["-v", "check", "m.pte", "--ptd", "-q"]
    done = subprocess.run([sys.executable, "-m", "pte_devconst", "rewrite", str(pte_path("v_a_dtypes_copy")), "-o",
                           "-v", "-q"], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0 and (tmp_path / "-v").exists(), done.stderr


def test_no_arguments_print_the_usage_and_exit_2() -> None:
    done = _run()
    assert done.returncode == 2 and done.stdout.startswith("Usage: ") and "Commands" in done.stdout, done.stderr
    assert done.stderr == ""


def test_an_error_a_command_raises_through_click_is_one_line() -> None:
    """ClickException (not a UsageError) keeps its own exit code: here typer's bad --format choice (a UsageError
    subclass, exit 2) and a missing file for a Path that must exist are both reported in one line."""
    done = _run("inspect", "x.pte", "--format", "yaml")
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "yaml" in done.stderr


def test_the_cli_uses_only_typers_public_api_and_keeps_no_option_state() -> None:
    """No import of typer's vendored click (``typer._click``) or of click itself, and no module-level ``OPTIONS``:
    the global options travel in typer's context (cli/app.py)."""
    import re
    from pathlib import Path

    import pte_devconst.cli.app as app

    private = re.compile(r"^\s*(from|import)\s+(typer\._click|typer\.core|typer\.main|click)\b", re.M)
    sources = {path.name: path.read_text() for path in (Path(app.__file__).parent).glob("*.py")}
    assert len(sources) > 5 and not [name for name, text in sources.items() if private.search(text)]
    assert private.search("from typer._click import exceptions") and private.search("    import click")
    assert not hasattr(app, "OPTIONS")
    assert app.UsageError.__module__.endswith("exceptions") and issubclass(app.UsageError, app.ClickException)


def test_global_options_do_not_leak_from_one_invocation_to_the_next(tmp_path) -> None:
    """Two runs in one process: the first one's --quiet must not silence the second (no module state)."""
    from cli_runner import invoke
    from conftest import pte_path

    pte = pte_path("v_a_dtypes_copy")
    quiet = invoke("-q", "rewrite", pte, "--dry-run")
    loud = invoke("rewrite", pte, "--dry-run")
    assert quiet.exit_code == loud.exit_code == 0
    assert quiet.stdout == "" and "would move to device memory" in loud.stdout
