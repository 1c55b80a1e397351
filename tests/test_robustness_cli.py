"""The command line never modifies its inputs, and every failure is one actionable stderr line.

Every corpus file goes through ``inspect``, ``rewrite --dry-run``, ``rewrite -o``
and ``diff`` with its inputs' bytes and modification times recorded before and
compared after; the awkward destinations (the input itself, a directory, a
missing folder) are clean errors that leave everything as it was.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from conftest import CASES, CORPUS
from pte_devconst.cli.app import app
from pte_devconst.util.atomic import TEMP_PREFIX
from pte_devconst.schema.pte_file import open_pte

MAIN = "from pte_devconst.cli.app import main; main()"


def _state(paths: list[Path]) -> dict[Path, tuple[str, int]]:
    return {p: (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns) for p in paths}


def _invoke(*args: str) -> Result:
    result = CliRunner().invoke(app, list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result


def _one_line(result: Result, *fragments: str) -> str:
    stderr = result.stderr
    lines = stderr.splitlines()
    assert result.exit_code == 2 and len(lines) == 1, (result.exit_code, stderr)
    assert lines[0].startswith("pte-devconst: error: ") and "internal error" not in stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize("name", CASES)
def test_commands_never_modify_their_inputs(name: str, tmp_path: Path) -> None:
    pte = tmp_path / f"{name}.pte"
    shutil.copyfile(CORPUS / f"{name}.pte", pte)
    inputs = [pte]
    ptd_args: list[str] = []
    if (CORPUS / f"{name}.ptd").exists():
        ptd = tmp_path / f"{name}.ptd"
        shutil.copyfile(CORPUS / f"{name}.ptd", ptd)
        inputs.append(ptd)
        ptd_args = ["--ptd", str(ptd)]
    before = _state(inputs)
    out = tmp_path / "out.pte"
    for args in (["inspect", *ptd_args, str(pte)], ["inspect", "--json", str(pte)],
                 ["rewrite", "--dry-run", *ptd_args, str(pte)], ["rewrite", *ptd_args, str(pte), "-o", str(out)]):
        result = _invoke(*args)
        assert result.exit_code == 0, (args, result.stderr)
    result = _invoke("diff", str(pte), str(out))
    assert result.exit_code == 0, result.stderr
    assert _state(inputs) == before
    with open_pte(out):
        pass
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(TEMP_PREFIX)]


@pytest.fixture
def work(tmp_path: Path) -> Path:
    pte = tmp_path / "model.pte"
    shutil.copyfile(CORPUS / "v_a_dtypes_copy.pte", pte)
    return pte


def test_output_onto_the_input_needs_in_place(work: Path) -> None:
    before = _state([work])
    _one_line(_invoke("rewrite", str(work), "-o", str(work)), str(work), "--in-place")
    assert _state([work]) == before


def test_output_that_is_a_directory(work: Path) -> None:
    folder = work.parent / "folder.pte"
    folder.mkdir()
    (folder / "keep").write_bytes(b"x")
    _one_line(_invoke("rewrite", str(work), "-o", str(folder)), str(folder))
    assert sorted(p.name for p in folder.iterdir()) == ["keep"]
    assert sorted(p.name for p in work.parent.iterdir()) == ["folder.pte", "model.pte"]


def test_output_in_a_missing_folder(work: Path) -> None:
    target = work.parent / "missing" / "out.pte"
    _one_line(_invoke("rewrite", str(work), "-o", str(target)), str(target))
    assert not target.parent.exists()


def test_in_place_replaces_atomically(work: Path) -> None:
    before = _state([work])
    result = _invoke("rewrite", "--in-place", str(work))
    assert result.exit_code == 0, result.stderr
    assert _state([work]) != before
    with open_pte(work):
        pass
    assert sorted(p.name for p in work.parent.iterdir()) == ["model.pte"]


@pytest.mark.parametrize("command", ["inspect", "rewrite"])
def test_bad_file_one_line_and_debug_traceback(command: str, tmp_path: Path) -> None:
    """A real process: one stderr line and exit 2; ``--debug`` shows the traceback instead."""
    bad = tmp_path / "bad.pte"
    bad.write_bytes((CORPUS / "v_a_dtypes_copy.pte").read_bytes()[:500])
    plain = subprocess.run([sys.executable, "-c", MAIN, command, str(bad)], capture_output=True, text=True,
                           timeout=120)
    assert plain.returncode == 2
    lines = plain.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"pte-devconst: error: {bad}: "), plain.stderr
    debug = subprocess.run([sys.executable, "-c", MAIN, "--debug", command, str(bad)], capture_output=True,
                           text=True, timeout=120)
    assert debug.returncode != 0 and "Traceback" in debug.stderr and "FormatError" in debug.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.pte"]


def _forged(tmp_path: Path, corpus_name: str, edit_plan, out_name: str) -> Path:
    """A corpus program with its first plan changed by ``edit_plan``, written with its original segments."""
    from dataclasses import replace

    from pte_devconst.schema.pte_file import PteFile
    try:
        from fuzz.mutate import assemble_pte
    except ImportError:
        from tests.fuzz.mutate import assemble_pte
    data = (CORPUS / f"{corpus_name}.pte").read_bytes()
    with PteFile.from_bytes(data) as pte:
        program = pte.program
    forged = replace(program, execution_plan=(edit_plan(program.execution_plan[0]),))
    path = tmp_path / out_name
    path.write_bytes(assemble_pte(forged, data))
    return path


def _huge_arena(tmp_path: Path, size: int) -> Path:
    from dataclasses import replace

    return _forged(tmp_path, "v_h_cpu_only", lambda plan: replace(plan, non_const_buffer_sizes=(0, size)), "huge.pte")


def test_run_with_a_huge_declared_buffer_is_a_clean_error(tmp_path: Path) -> None:
    """A 1 PiB planned buffer is within the format's bounds but not the machine's: one clean line."""
    result = _invoke("run", str(_huge_arena(tmp_path, 1 << 50)))
    _one_line(result, "huge.pte")


def _with_hostile_names(tmp_path: Path, method: str, backend: str) -> Path:
    from dataclasses import replace

    def rename(plan):
        return replace(plan, name=method, delegates=(replace(plan.delegates[0], id=backend),))

    return _forged(tmp_path, "v_b_dtypes_legacy", rename, "names.pte")


@pytest.mark.parametrize("command", ["inspect", "rewrite --dry-run", "check"])
def test_names_that_look_like_markup_are_printed_verbatim(command: str, tmp_path: Path) -> None:
    path = _with_hostile_names(tmp_path, "[/]forward", "[/red]Backend")
    result = _invoke(*command.split(), str(path))
    assert result.exit_code in (0, 1), result.stderr
    if command == "inspect":  # the one that lists every delegate by its id
        assert "[/red]Backend" in result.stdout


@pytest.mark.parametrize("command", ["inspect", "rewrite --dry-run", "check"])
def test_control_characters_in_names_are_escaped(command: str, tmp_path: Path) -> None:
    path = _with_hostile_names(tmp_path, "forward\x1b]0;title\x07", "Backend\x1b[2J")
    result = _invoke(*command.split(), str(path))
    assert result.exit_code in (0, 1) and "\x1b" not in result.stdout + result.stderr
