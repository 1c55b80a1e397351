"""Names in CI: the ETRecord as a config key (``etrecord`` in ``[tool.pte-devconst]``), read by ``check`` and
``rewrite`` (so by the hooks and the workflow), and an accepted finding by name that matches nothing says what
would (issue 45)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

NAMES = Path(__file__).resolve().parent / "fixtures" / "names"  # mixed.pte: proj.weight (v1), proj.bias (v2)

ACCEPT_BY_NAME = '''
[[tool.pte-devconst.accept]]
program = "models/mixed.pte"
constant = "proj.weight"
reason = "small enough"
'''


def _repo(tmp_path: Path, table: str) -> Path:
    root = tmp_path / "acme app"
    (root / "models" / "nested").mkdir(parents=True)
    shutil.copy(NAMES / "mixed.pte", root / "models" / "mixed.pte")
    shutil.copy(NAMES / "mixed.etrecord", root / "models" / "nested" / "mixed.etrecord")
    (root / ".git").mkdir()
    (root / "pyproject.toml").write_text('[tool.pte-devconst]\npaths = ["models"]\n' + table)
    return root


def _cli(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pte_devconst", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120, env={"NO_COLOR": "1", "COLUMNS": "200", "PATH": "/usr/bin:/bin"})


def test_the_configs_etrecord_names_the_constants_an_accept_names(tmp_path: Path) -> None:
    root = _repo(tmp_path, 'etrecord = "models/nested/mixed.etrecord"\n' + ACCEPT_BY_NAME)
    for cwd in (root, root / "models"):  # relative to the config file, from any folder below it
        done = _cli(cwd, "check", "--json")
        report = json.loads(done.stdout)
        assert done.stderr == "", done.stderr
        assert [(a["name"], a["accepted"]) for f in report["files"] for a in f["accepted"]] == [
            ("proj.weight", "small enough")]
    rewrite = _cli(root, "rewrite", "--dry-run", "-v")
    assert rewrite.returncode == 0 and "proj.weight" in rewrite.stdout, rewrite.stdout + rewrite.stderr


def test_the_command_lines_etrecord_wins_and_a_wrong_key_is_one_line(tmp_path: Path) -> None:
    root = _repo(tmp_path, 'etrecord = "nowhere.etrecord"\n' + ACCEPT_BY_NAME)
    done = _cli(root, "check", "--etrecord", "models/nested/mixed.etrecord", "--format", "concise")
    assert "1 accepted" in done.stdout and done.stderr == "", done.stderr
    assert _cli(root, "check").returncode == 2  # the config's ETRecord is read: a missing one is an error
    bad = _repo(tmp_path / "bad", "etrecord = 3\n")
    done = _cli(bad, "check")
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1 and "etrecord: must be" in done.stderr


def test_an_accept_by_name_without_an_etrecord_says_what_would_match(tmp_path: Path) -> None:
    root = _repo(tmp_path, ACCEPT_BY_NAME)
    done = _cli(root, "check")
    (warning,) = [line for line in done.stderr.splitlines() if "matched nothing" in line]
    assert warning.endswith("constant 'proj.weight'): constants have names only with an ETRecord (pass --etrecord "
                            "FILE, or set etrecord = \"FILE\" in [tool.pte-devconst]); or accept by index: value = N, "
                            "one of 1, 2"), warning


def test_an_accept_by_a_name_that_is_not_there_lists_the_names_there(tmp_path: Path) -> None:
    root = _repo(tmp_path, 'etrecord = "models/nested/mixed.etrecord"\n' + ACCEPT_BY_NAME.replace(
        "proj.weight", "proj.wieght"))
    (warning,) = [line for line in _cli(root, "check").stderr.splitlines() if "matched nothing" in line]
    assert warning.endswith(": names there: proj.bias, proj.weight; or accept by index: value = N, one of 1, 2"), \
        warning
