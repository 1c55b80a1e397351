"""Usage errors through the real entry point: one line, exit 2, like every other error."""

from __future__ import annotations

import json
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


def test_a_command_runs_in_a_group_of_its_own_and_the_group_is_whole_where_it_shows() -> None:
    """Building the click group converts every command's options: a process that runs one command builds only it.
    Whatever lists or completes commands (no command, the group's --help in front of one, an unknown name that
    click suggests near ones for, the shell's completion) gets the whole group."""
    from pte_devconst.cli.app import click_group, invoked_command

    everything = set(click_group().commands)
    assert {"rewrite", "inspect", "check", "diff", "validate"} <= everything
    assert set(click_group("rewrite").commands) == {"rewrite"}
    assert invoked_command(["-q", "rewrite", "m.pte", "-o", "check"]) == "rewrite"
    assert invoked_command(["rewrite", "--help"]) == "rewrite"
    for argv in ([], ["--help"], ["--help", "rewrite"], ["-h", "check"], ["rewrit", "m.pte"], ["--version"]):
        assert invoked_command(argv) is None, argv
    assert invoked_command.__doc__ and "completion" in invoked_command.__doc__
    listing = _run("--help", "rewrite")
    assert listing.returncode == 0 and all(name in listing.stdout for name in everything), listing.stdout
    near = _run("rewrit", "m.pte")
    assert near.returncode == 2 and "Did you mean 'rewrite'?" in near.stderr


def test_the_shells_completion_sees_every_command() -> None:
    env = {**os.environ, "_PTE_DEVCONST_COMPLETE": "complete_bash", "COMP_WORDS": "pte-devconst ", "COMP_CWORD": "1",
           "_TYPER_COMPLETE_ARGS": "pte-devconst "}
    done = subprocess.run([sys.executable, "-c", ENTRY, "rewrite"], capture_output=True, text=True, timeout=120,
                          env=env)
    assert "inspect" in done.stdout and "rewrite" in done.stdout, (done.stdout, done.stderr)


ENTRY_POINT = [sys.executable, "-m", "pte_devconst"]  # what the console script runs: cli.app.entry


def test_the_entry_point_ends_with_the_commands_status_and_its_whole_output(tmp_path) -> None:
    """``entry`` ends the process without Python's teardown: the status and every byte of stdout and stderr must
    be what ``main`` gave, to a pipe and to a file alike."""
    from conftest import pte_path

    copying = str(pte_path("v_a_dtypes_copy"))
    version = subprocess.run([*ENTRY_POINT, "--version"], capture_output=True, text=True, timeout=120)
    assert version.returncode == 0 and version.stdout.startswith("pte-devconst ")
    found = subprocess.run([*ENTRY_POINT, "check", "--format", "json", copying], capture_output=True, text=True,
                           timeout=120)
    assert found.returncode == 1 and json.loads(found.stdout)["command"] == "check", found.stdout[-200:]
    with open(tmp_path / "report.json", "w") as handle:
        to_file = subprocess.run([*ENTRY_POINT, "check", "--format", "json", copying], stdout=handle, timeout=120)
    assert to_file.returncode == 1 and (tmp_path / "report.json").read_text() == found.stdout
    bad = tmp_path / "bad.pte"
    bad.write_bytes(b"not a program")
    refused = subprocess.run([*ENTRY_POINT, "inspect", str(bad)], capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and refused.stdout == "" and len(refused.stderr.splitlines()) == 1
    usage = subprocess.run([*ENTRY_POINT, "rewrite"], capture_output=True, text=True, timeout=120)
    assert usage.returncode == 2 and "Missing argument" in usage.stderr


def test_the_entry_point_leaves_a_process_with_torch_to_pythons_own_exit(monkeypatch) -> None:
    """A process that imported torch exits the usual way (torch's exit handlers run): ``entry`` raises
    SystemExit with the command's status instead of ending the process itself."""
    import types

    from pte_devconst.cli import app as cli_app

    monkeypatch.setitem(sys.modules, "torch", types.ModuleType("torch"))
    monkeypatch.setattr(sys, "argv", ["pte-devconst", "--version"])
    with pytest.raises(SystemExit) as done:
        cli_app.entry()
    assert done.value.code == 0
