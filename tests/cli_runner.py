"""Running the command line in-process through typer's test runner (shared by the tests/test_cli*.py files)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from typing import Any, NamedTuple, Optional

from typer.testing import CliRunner, Result

from pte_devconst.cli.app import app


def invoke(*args: Any, env: Optional[dict[str, str]] = None) -> Result:
    """``pte-devconst ARGS...``; stdout and stderr are kept apart (``result.stdout``, ``result.stderr``)."""
    return CliRunner().invoke(app, [str(a) for a in args], env=env)


def invoke_json(*args: Any) -> tuple[int, dict]:
    """Run a command with ``--format json`` and parse its stdout."""
    result = invoke(*args, "--format", "json")
    assert result.stdout.strip(), f"no JSON (exit {result.exit_code}): {result.stderr}"
    return result.exit_code, json.loads(result.stdout)


def rendered(markdown: str) -> str:
    """Markdown as GitHub shows it (CommonMark with tables), as HTML: what a pull-request comment displays."""
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark").enable("table").render(markdown)


# A child that runs the command line under ``ulimit -v 3000000`` (the figure of the robustness issues) and
# reports its exit, output, wall and CPU time and peak memory (that child's alone: it is the only one it waits for).
_LIMITED = """
import resource, subprocess, sys, time
def limit():
    resource.setrlimit(resource.RLIMIT_AS, (3_000_000 * 1024, 3_000_000 * 1024))
start = time.monotonic()
done = subprocess.run([sys.executable, "-m", "pte_devconst"] + sys.argv[1:], capture_output=True, text=True,
                      preexec_fn=limit, timeout=600)
used = resource.getrusage(resource.RUSAGE_CHILDREN)
print(repr((done.returncode, done.stdout, done.stderr, time.monotonic() - start, used.ru_utime + used.ru_stime,
            used.ru_maxrss)))
"""


class Limited(NamedTuple):
    """How ``limited`` ended: exit code, output, wall and CPU seconds, peak memory (KiB)."""

    code: int
    stdout: str
    stderr: str
    wall: float
    cpu: float  # what the tool used, however many other processes share the cores
    peak_kib: int


def limited(*args: Any) -> Limited:
    """``pte-devconst ARGS`` in a child process limited to 3 GB of address space: how it ended."""
    out = subprocess.run([sys.executable, "-c", _LIMITED, *map(str, args)], capture_output=True, text=True,
                         timeout=700)
    assert out.returncode == 0, out.stderr
    return Limited(*ast.literal_eval(out.stdout.strip().splitlines()[-1]))
