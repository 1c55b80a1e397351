"""Commands that do not execute a model must not import torch (start-up time, and no GPU stack needed).

Nor numpy, which the `flatbuffers` package imports: the project reads and writes flatbuffers with its own
code (`schema/flatbuf.py`, `schema/flatbuf_builder.py`), and importing numpy cost `rewrite` about 70 ms.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conftest import pte_path

FOLD = Path(__file__).parent / "fixtures" / "fold"

PROBE = """
import sys
from pte_devconst.cli.app import main
try:
    main(sys.argv[1:])
except SystemExit as done:
    code = done.code
else:
    code = 0
heavy = sorted(m for m in ("torch", "executorch", "numpy", "flatbuffers") if m in sys.modules)
print("IMPORTED:" + ",".join(heavy), file=sys.stderr)
sys.exit(code)
"""


@pytest.mark.parametrize("args", [
    ["--help"],
    ["inspect", "{a}"],
    ["inspect", "--json", "{a}"],
    ["rewrite", "{a}", "-o", "{out}"],
    ["rewrite", "--dry-run", "{a}"],
    ["diff", "{a}", "{b}"],
    ["check", "{clean}"],
    # a program with chains to fold: analysing them, planning them and not folding them need no torch
    ["inspect", "{fold}"],
    ["check", "--fold", "{fold}"],
    ["rewrite", "{fold}", "-o", "{out}"],
    ["rewrite", "--fold", "--dry-run", "{fold}"],
    ["rewrite", "--fold", "{a}", "-o", "{out}"],  # --fold with nothing to fold
])
def test_command_imports_neither_torch_nor_numpy(args: list[str], tmp_path: Path) -> None:
    values = {"a": str(pte_path("v_a_dtypes_copy")), "b": str(pte_path("v_b_dtypes_legacy")),
              "clean": str(pte_path("v_h_cpu_only")), "fold": str(FOLD / "steps_copy.pte"),
              "out": str(tmp_path / "out.pte")}
    argv = [arg.format(**values) for arg in args]
    done = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, timeout=120)
    assert done.returncode in (0, 1), done.stderr  # check --fold finds the chains: exit 1
    assert "IMPORTED:\n" in done.stderr or done.stderr.rstrip().endswith("IMPORTED:"), done.stderr


WITHOUT_TORCH = """
import sys
sys.modules["torch"] = None  # as if torch were not installed: importing it raises ModuleNotFoundError
from pte_devconst.cli.app import main
main(sys.argv[1:])
"""


@pytest.mark.parametrize("args", [
    ["inspect", "{a}"],
    ["rewrite", "{a}", "-o", "{out}"],
    ["diff", "{a}", "{b}"],
    ["check", "{clean}"],
])
def test_commands_work_where_torch_is_not_installed(args: list[str], tmp_path: Path) -> None:
    """`pip install pte-devconst` does not pull torch (it is the `runner` extra): these commands need none."""
    values = {"a": str(pte_path("v_a_dtypes_copy")), "b": str(pte_path("v_b_dtypes_legacy")),
              "clean": str(pte_path("v_h_cpu_only")), "out": str(tmp_path / "out.pte")}
    done = subprocess.run([sys.executable, "-c", WITHOUT_TORCH, *[a.format(**values) for a in args]],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""


def test_a_fold_imports_torch_only_when_it_computes(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", PROBE, "rewrite", "--fold", str(FOLD / "steps_copy.pte"), "-o",
                           str(tmp_path / "out.pte")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "torch" in done.stderr.rsplit("IMPORTED:", 1)[1], done.stderr


@pytest.mark.parametrize("command", ["run", "validate"])
def test_run_and_validate_say_how_to_install_torch(command: str) -> None:
    path = str(pte_path("v_a_dtypes_copy"))
    args = [command, path] + ([path] if command == "validate" else []) + ["--simulate-devices"]
    done = subprocess.run([sys.executable, "-c", WITHOUT_TORCH, *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == [f"pte-devconst: error: '{command}' runs programs with torch, which is not "
                                        "installed: pip install 'pte-devconst[runner]'"]


def test_torch_is_an_extra_not_a_dependency() -> None:
    import tomllib

    project = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]
    assert not [d for d in project["dependencies"] if d.split(">")[0].split("=")[0].strip() == "torch"]
    assert any(d.startswith("torch") for d in project["optional-dependencies"]["runner"])
