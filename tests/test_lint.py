"""The linter the project uses on itself (``[tool.ruff]`` in pyproject.toml) stays clean on every tracked tree."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TREES = ["schema", "program", "rewriter", "runner", "cli", "pte_devconst", "bench", "examples", "tests"]


def _ruff() -> list[str]:
    found = shutil.which("ruff")
    if found:
        return [found]
    try:
        import ruff  # noqa: F401 - the package ships the binary
    except ImportError:
        pytest.skip("ruff is not installed (it is in the test extra: pip install -e '.[test]')")
    return [sys.executable, "-m", "ruff"]


def test_ruff_is_clean() -> None:
    done = subprocess.run([*_ruff(), "check", "--output-format", "concise", *TREES], cwd=ROOT, capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_lint_catches_what_it_is_for(tmp_path: Path) -> None:
    """Not vacuous: a bare except and a mutable default are reported under the project's configuration."""
    bad = tmp_path / "bad.py"
    bad.write_text("def f(x=[]):\n    try:\n        return x\n    except:\n        pass\n")
    done = subprocess.run([*_ruff(), "check", "--config", str(ROOT / "pyproject.toml"), "--output-format", "concise",
                           str(bad)], capture_output=True, text=True)
    assert done.returncode == 1 and "B006" in done.stdout and "E722" in done.stdout
