"""Words checked against behaviour (issue 45, point 7): usage lines, --help, summary lines and errors say what the
tool does, once, in plain English."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import pte_devconst
from cli.output import reasons_line, without_trailing_spaces

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "models"
MLP = EXAMPLES / "mlp_copy.pte"


def _cli(*args: object, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pte_devconst", *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "NO_COLOR": "1", "COLUMNS": "80"})


@pytest.mark.parametrize("command, usage", [
    ("diff", "Usage: pte-devconst diff [OPTIONS] BEFORE AFTER"),
    ("run", "Usage: pte-devconst run [OPTIONS] FILE"),
    ("validate", "Usage: pte-devconst validate [OPTIONS] ORIGINAL REWRITTEN..."),
    ("check", "Usage: pte-devconst check [OPTIONS] [FILE...]"),
])
def test_usage_lines_show_metavars_not_braces(command: str, usage: str) -> None:
    assert _cli(command, "--help").stdout.splitlines()[0] == usage


def test_validate_help_lists_the_engines_and_the_runtimes_copies() -> None:
    text = " ".join(_cli("validate", "--help").stdout.split())
    assert "--engine [runner|executorch]" in text
    assert "at load only" not in text and "(at load, or on the first call), and never again" in text
    done = _cli("validate", MLP, MLP, "--engine", "torch")
    assert done.returncode == 2 and "'runner', 'executorch'" in done.stderr


def test_one_program_was_given() -> None:
    done = _cli("validate", MLP)
    assert done.stderr == ("pte-devconst: error: validate takes ORIGINAL REWRITTEN pairs (or two folders), but 1 "
                           "program was given\n")


def test_reasons_are_not_glued_to_a_count() -> None:
    assert reasons_line(["32 bytes is below --min-bytes 64"]) == "32 bytes is below --min-bytes 64"
    assert reasons_line(["legacy style: its delegate copies it itself"] * 12) == \
        "legacy style: its delegate copies it itself"
    assert reasons_line(["transposed on the host", "transposed on the host", "read by host kernel aten::mul.out"]) \
        == "transposed on the host (2); read by host kernel aten::mul.out (1)"
    done = _cli("check", "--min-bytes", "64", MLP)
    summary = " ".join(done.stdout.split())
    assert "(32 B per call): 32 bytes is below --min-bytes 64." in summary, summary


def test_a_bad_file_is_said_once_on_stdout_and_once_on_stderr(tmp_path: Path) -> None:
    bad = tmp_path / "bad.pte"
    bad.write_bytes(b"garbage\n")
    done = _cli("check", bad.name, cwd=tmp_path)
    assert done.returncode == 2
    assert done.stdout.count("file identifier") == 1 and done.stderr.count("file identifier") == 1
    assert done.stdout.splitlines()[-1] == "no file could be checked; cannot-check (PDC004) in 1 file."
    concise = _cli("check", "--format", "concise", bad.name, cwd=tmp_path).stdout.splitlines()
    assert concise[0].startswith("bad.pte: PDC004 cannot-check: header: file identifier")


def test_an_ok_file_says_its_constants_were_examined(tmp_path: Path) -> None:
    out = tmp_path / "c15.pte"
    assert _cli("rewrite", MLP, "--runtime", "1.5", "-o", out, "-q").returncode == 0
    assert _cli("check", "--format", "concise", out.name, cwd=tmp_path).stdout.splitlines()[0] == \
        "c15.pte: ok (4 constants examined)"


def test_nothing_left_to_move_is_never_followed_by_a_rewrite_fix(tmp_path: Path) -> None:
    out = tmp_path / "c16.pte"
    assert _cli("rewrite", MLP, "-o", out, "-q").returncode == 0
    summary = " ".join(_cli("check", "--runtime", "1.5", out, cwd=tmp_path).stdout.split())
    assert "PDC008" in summary and "fix them with pte-devconst rewrite" in summary
    assert "nothing left that the rewrite can move" not in summary


def test_the_apis_device_error_names_its_parameter_and_the_cli_its_option(tmp_path: Path) -> None:
    with pytest.raises(pte_devconst.PteDevconstError) as raised:
        pte_devconst.rewrite(MLP, tmp_path / "out.pte", devices=["cuda:9"])
    assert "--device" not in str(raised.value) and "the devices selected (cuda:9)" in str(raised.value)
    done = _cli("rewrite", MLP, "--device", "cuda:9", "-o", tmp_path / "out.pte")
    assert done.returncode == 2 and "--device cuda:9: the program uses none of the devices selected" in done.stderr


def test_a_report_goes_to_dev_stdout() -> None:
    done = subprocess.run([sys.executable, "-m", "pte_devconst", "check", str(EXAMPLES / "mlp_cpu.pte"), "--report",
                           "json=/dev/stdout"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert '"command": "check"' in done.stdout


def test_plain_lines_have_no_trailing_spaces() -> None:
    assert without_trailing_spaces("title   \nrow  \x1b[0m  \nlast  ") == "title\nrow\x1b[0m\nlast"
    done = _cli("check", EXAMPLES / "mlp_legacy.pte", EXAMPLES / "transformer_legacy.pte")
    assert [line for line in done.stdout.splitlines() if line != line.rstrip()] == []


def test_a_quiet_dry_run_says_the_rewrite_needs_the_runtime_not_the_input() -> None:
    """``rewrite -q --dry-run`` wrote nothing: its one line says what the rewrite would need, never that the input
    (which loads in 1.5) needs 1.6."""
    done = _cli("-q", "rewrite", MLP, "--dry-run")
    assert done.returncode == 0
    assert done.stderr == (f"{MLP}: its rewrite (a dry run: nothing written) needs ExecuTorch >= 1.6 (device "
                           "initial data; for a 1.5 runtime: --runtime 1.5)\n")
