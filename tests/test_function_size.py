"""No function over 80 lines where the house is read most: the command line, the API and the rewrite (issue 46).

A command of more than a screen resolves, runs and renders in one body, which is what makes the next change hard to
place; the limit holds the three places a newcomer reads first.  Lines are counted from ``def`` to the function's
last line (its decorators left out), nested functions within their parent.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Iterator

import pytest
from test_layers import ROOT

LIMIT = 80
# Where the limit holds: folders (every module under them) and single modules.
HELD = ("cli", "rewriter", "pte_devconst/api.py")


def long_functions(source: str, limit: int = LIMIT) -> Iterator[tuple[str, int]]:
    """(name, lines) of each function of ``source`` longer than ``limit`` lines."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            lines = (node.end_lineno or node.lineno) - node.lineno + 1
            if lines > limit:
                yield node.name, lines


def held_modules() -> Iterator[Path]:
    for place in HELD:
        path = ROOT / place
        yield from sorted(path.rglob("*.py")) if path.is_dir() else (path,)


def test_no_function_of_the_cli_the_api_or_the_rewrite_is_over_the_limit() -> None:
    found = [f"{path.relative_to(ROOT)}: {name} ({lines} lines)"
             for path in held_modules() for name, lines in long_functions(path.read_text())]
    assert not found, "\n".join(found)


def test_the_held_places_exist() -> None:
    assert all((ROOT / place).exists() for place in HELD)
    assert sum(1 for _ in held_modules()) > 20


@pytest.mark.parametrize("body, caught", [(LIMIT - 1, False), (LIMIT, True)])
def test_a_long_function_is_caught(body: int, caught: bool) -> None:
    source = "def command():\n" + "    x = 1\n" * body
    assert bool(list(long_functions(source))) is caught
