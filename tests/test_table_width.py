"""Tables fit the terminal without breaking a token: at 80 and 60 columns every line fits, and a cell wraps at a
space or after a separator, never inside a name, a device or a number (rich alone folded ``eligible:cuda:0`` into
``eligible:cuda:`` / ``0`` and ``_h2d_copy.out`` into ``_h2d_copy.ou`` / ``t``)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import EXAMPLES
from pte_devconst.cli.output import atoms, fit_widths, wrap_cell

BROKEN = re.compile(r"eligible:cuda:(?!\d)|cuda:\s*$|_h2d_copy\.ou\b|_h2d_cop(?!y)|_h2d_co(?!p)|\d\.$")


def _cli(args: list[str], columns: int) -> str:
    done = subprocess.run([sys.executable, "-m", "pte_devconst", *args], capture_output=True, text=True, timeout=120,
                          env={"COLUMNS": str(columns), "NO_COLOR": "1", "PATH": "/usr/bin:/bin"})
    assert done.returncode in (0, 1), done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def rewritten(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("width")
    original = Path(shutil.copy(EXAMPLES / "transformer_copy.pte", folder / "transformer_copy.pte"))
    subprocess.run([sys.executable, "-m", "pte_devconst", "rewrite", "-q", str(original)], check=True,
                   capture_output=True)
    return original, folder / "transformer_copy.devconst.pte"


@pytest.mark.parametrize("columns", [80, 60])
def test_tables_fit_and_break_no_token(rewritten: tuple[Path, Path], columns: int) -> None:
    original, after = rewritten
    outputs = {"inspect": _cli(["inspect", str(original)], columns),
               "diff": _cli(["diff", str(original), str(after)], columns),
               "check": _cli(["check", "-v", str(original)], columns)}
    for command, text in outputs.items():
        # Table lines (the first line of inspect and diff names the files and is left to the terminal to wrap).
        table_lines = [line for line in text.splitlines() if str(original.parent) not in line]
        assert table_lines
        assert max(len(line) for line in table_lines) <= columns, command
        assert not [line for line in table_lines if BROKEN.search(line)], (command, text)
    constants = outputs["inspect"].count("cuda:0")
    assert constants >= 13  # each of the 13 eligible constants' verdict names its device whole
    assert "value 0" not in outputs["inspect"]  # an unnamed constant's index is shown once, in the v column


def test_atoms_wrap_at_separators_only() -> None:
    assert atoms("eligible:cuda:0") == ["eligible:", "cuda:0"]
    assert atoms("#1 _h2d_copy.out") == ["#1 ", "_h2d_copy.", "out"]
    assert atoms("12.0 KiB") == ["12.0 ", "KiB"]
    assert wrap_cell("#12 _h2d_copy.out", 10) == "#12\n_h2d_copy.\nout"
    assert wrap_cell("eligible:cuda:0", 9) == "eligible:\ncuda:0"
    assert wrap_cell("abcdefgh", 3) == "abc\ndef\ngh"  # only when no width fits the piece


def test_widths_shrink_the_widest_column_down_to_its_longest_piece() -> None:
    assert fit_widths([10, 20], [5, 8], 30) == [10, 20]
    assert fit_widths([10, 20], [5, 8], 20) == [10, 10]
    assert fit_widths([10, 20], [5, 8], 13) == [5, 8]
    assert sum(fit_widths([10, 20], [5, 8], 10)) == 10  # folds only when nothing else fits
