"""What a user hits first (issue 19, item 3): a closed pipe, an error that must name its file, a Git LFS
pointer or a .ptd where a program belongs, and PTE_DEVCONST_DEBUG=0."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cli_runner import invoke
from conftest import CORPUS, pte_path

ROOT = Path(__file__).resolve().parents[1]
PROGRAM = pte_path("v_c_shared_host_copy")
INPUTS = CORPUS / "v_c_shared_host_copy.inputs.pt"
# Every command and every format it has: each prints a report on stdout that a closed pipe breaks.
COMMANDS = {"inspect": ["inspect", str(PROGRAM)], "inspect many": ["inspect", str(CORPUS)],
            "rewrite": ["rewrite", "--dry-run", str(PROGRAM)], "diff": ["diff", str(PROGRAM), str(PROGRAM)],
            "check": ["check", str(CORPUS)], "run": ["run", str(PROGRAM), "--simulate-devices"],
            "validate": ["validate", str(PROGRAM), "{rewritten}", "--simulate-devices"]}
CASES = [(name, fmt) for name in COMMANDS for fmt in ("text", "markdown", "json")] + [("check", "github")]


@pytest.fixture(scope="module")
def rewritten(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from pte_devconst import rewrite

    return rewrite(PROGRAM, tmp_path_factory.mktemp("pipe") / "out.pte").output


@pytest.mark.parametrize("name, fmt", CASES, ids=[f"{n}-{f}" for n, f in CASES])
def test_a_closed_pipe_stops_quietly(name: str, fmt: str, rewritten: str) -> None:
    """``... | head``: the reader is gone before anything is written.  Was: "internal error: BrokenPipeError"
    (check, inspect --format markdown, every json) or Python's "Exception ignored" at exit."""
    args = [arg.replace("{rewritten}", str(rewritten)) for arg in COMMANDS[name]]
    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run([sys.executable, "-m", "pte_devconst", *args, "--format", fmt], stdout=write,
                              stderr=subprocess.PIPE, cwd=ROOT, timeout=120, env={**os.environ, "COLUMNS": "80"})
    finally:
        os.close(write)
    assert done.stderr.decode() == "" and done.returncode == 141, (done.returncode, done.stderr.decode())


def _refused_by_the_analysis(monkeypatch: pytest.MonkeyPatch) -> None:
    """The analysis refuses every program (a work budget below nothing): an error raised with no file."""
    import pte_devconst.program.method_context as method_context  # the work budget's home

    monkeypatch.setattr(method_context, "WORK_PER_ITEM", -1_000_000)


@pytest.mark.parametrize("args", [["inspect"], ["rewrite", "--dry-run"], ["rewrite"], ["check"]])
@pytest.mark.parametrize("many", [False, True], ids=["one", "several"])
def test_an_error_line_names_its_file(args: list[str], many: bool, monkeypatch: pytest.MonkeyPatch,
                                      tmp_path: Path) -> None:
    _refused_by_the_analysis(monkeypatch)
    first = Path(shutil.copy(PROGRAM, tmp_path / "first.pte"))
    second = Path(shutil.copy(PROGRAM, tmp_path / "second.pte"))
    result = invoke(*args, first, *([second] if many else []))
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if line.startswith("pte-devconst: error:")]
    assert lines and all("analysis needed more than" in line for line in lines), result.stderr
    assert lines[0].startswith(f"pte-devconst: error: {first}: ")
    if many:
        assert any(line.startswith(f"pte-devconst: error: {second}: ") for line in lines), result.stderr


LFS = (b"version https://git-lfs.github.com/spec/v1\n"
       b"oid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\nsize 12345\n")


@pytest.mark.parametrize("command", ["inspect", "rewrite", "check", "run", "diff", "validate"])
def test_a_git_lfs_pointer_is_named_as_one(command: str, tmp_path: Path) -> None:
    pointer = tmp_path / "model.pte"
    pointer.write_bytes(LFS)
    args = [pointer, PROGRAM] if command in ("diff", "validate") else [pointer]
    result = invoke(command, *args)
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert f"pte-devconst: error: {pointer}: this is a Git LFS pointer" in result.stderr
    assert "git lfs pull" in result.stderr


def test_a_git_lfs_pointer_as_the_data_is_named_as_one(tmp_path: Path) -> None:
    pointer = tmp_path / "data.ptd"
    pointer.write_bytes(LFS)
    result = invoke("inspect", pte_path("v_g_external_copy"), "--ptd", pointer)
    assert result.exit_code == 2 and f"{pointer}: this is a Git LFS pointer" in result.stderr


@pytest.mark.parametrize("command", ["inspect", "rewrite", "check", "run"])
def test_a_ptd_given_as_the_program_says_to_pass_it_with_ptd(command: str) -> None:
    data = CORPUS / "v_g_external_copy.ptd"
    result = invoke(command, data)
    assert result.exit_code == 2
    assert f"{data}: this is a .ptd data file, not a program: pass it with --ptd" in result.stderr


def test_a_program_given_as_the_data_says_so() -> None:
    result = invoke("inspect", pte_path("v_g_external_copy"), "--ptd", PROGRAM)
    assert result.exit_code == 2 and f"{PROGRAM}: this is a .pte program, not a .ptd data file" in result.stderr


@pytest.mark.parametrize("value, on", [("0", False), ("false", False), ("No", False), ("off", False), ("", False),
                                       (" 0 ", False), ("1", True), ("yes", True), ("true", True)])
def test_pte_devconst_debug_0_means_off(value: str, on: bool, tmp_path: Path) -> None:
    bad = tmp_path / "bad.pte"
    bad.write_bytes(b"not a program at all" * 4)
    result = invoke("inspect", bad, env={"PTE_DEVCONST_DEBUG": value})
    assert result.exit_code != 0
    if on:  # --debug: the exception itself, with its traceback
        assert result.exception is not None and "not a .pte file" in str(result.exception)
    else:
        assert result.exit_code == 2 and "pte-devconst: error:" in result.stderr and "Traceback" not in result.output


def test_the_full_check_switch_reads_off_values_as_off(monkeypatch: pytest.MonkeyPatch) -> None:
    from pte_devconst.rewriter.verify import full_by_default

    for value, on in (("0", False), ("false", False), ("off", False), ("1", True), ("yes", True)):
        monkeypatch.setenv("PTE_DEVCONST_FULL_CHECK", value)
        assert full_by_default() is on, value
