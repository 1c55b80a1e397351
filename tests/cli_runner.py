"""Running the command line in-process through typer's test runner (shared by the tests/test_cli*.py files)."""

from __future__ import annotations

import json
from typing import Any, Optional

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
