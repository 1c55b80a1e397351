"""``[tool.pte-devconst]`` in pyproject.toml, as a user meets it: the CLI run in a scratch repository (a
subprocess in a temporary folder) finds the table from a subfolder, the command line overrides it, accepted
findings are reported as such in every format, and a bad key is one line naming the file and the key (exit 2)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import EXAMPLES

COPYING, CLEAN = "detector.pte", "classifier.pte"  # mlp_copy: 4 unnamed constants copied per call; mlp_cpu: none
BYTES = {0: 2048, 1: 128, 2: 1024, 3: 32}  # mlp_copy's constants, bytes per call


def repo(tmp_path: Path, table: str, *, git: bool = True) -> Path:
    root = tmp_path / "acme"
    (root / "models").mkdir(parents=True)
    (root / "src").mkdir()
    shutil.copy(EXAMPLES / "mlp_copy.pte", root / "models" / COPYING)
    shutil.copy(EXAMPLES / "mlp_cpu.pte", root / "models" / CLEAN)
    (root / "pyproject.toml").write_text('[project]\nname = "acme"\nversion = "1.0"\n\n' + table)
    if git:
        (root / ".git").mkdir()  # the repository's root, as far as the search is concerned
    return root


def cli(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pte_devconst", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120, env={"NO_COLOR": "1", "COLUMNS": "200", "PATH": "/usr/bin:/bin"})


ACCEPT = '''[tool.pte-devconst]
paths = ["models"]
min-bytes = 64

[[tool.pte-devconst.accept]]
program = "models/detector.pte"
method = "forward"
value = 0
reason = "the first layer runs on the host in the next release"
'''


def test_found_from_a_subfolder_paths_min_bytes_and_accepted(tmp_path: Path) -> None:
    root = repo(tmp_path, ACCEPT)
    done = cli(root / "src", "check", "--json")  # no files: the config's paths, relative to the pyproject
    assert done.returncode == 1, done.stderr
    doc = json.loads(done.stdout)
    assert doc["min_bytes"] == 64 and doc["accepted"] == 1 and doc["findings"] == 2  # values 1 and 2 (3 is 32 B)
    assert sorted(Path(f["file"]).name for f in doc["files"]) == [CLEAN, COPYING]
    (detector,) = [f for f in doc["files"] if f["file"].endswith(COPYING)]
    assert [(a["value"], a["accepted"]) for a in detector["accepted"]] == [
        (0, "the first layer runs on the host in the next release")]
    assert sorted(f["value"] for f in detector["findings"]) == [1, 2]
    assert done.stderr == ""  # every accept matched


def test_accepted_findings_pass_and_show_in_every_format(tmp_path: Path) -> None:
    entries = "".join(f'\n[[tool.pte-devconst.accept]]\nprogram = "models/*.pte"\nconstant = "value {v}"\n'
                      f'reason = "kept for the CPU fallback"\n' for v in BYTES)
    root = repo(tmp_path, '[tool.pte-devconst]\npaths = ["models"]\n' + entries)
    text = cli(root, "check")
    assert text.returncode == 0, text.stdout + text.stderr
    assert "4 accepted" in text.stdout and "kept for the CPU fallback" in text.stdout
    concise = cli(root, "check", "--output-format", "concise")
    assert concise.returncode == 0 and f"models/{COPYING}: ok (4 constants examined; 4 accepted)" in concise.stdout
    markdown = cli(root, "check", "-f", "markdown").stdout
    assert "**Accepted (the project's config):**" in markdown and markdown.count("kept for the CPU fallback") == 4
    assert f"| <code>models/{COPYING}</code> | ✅ ok | 0 | 0 B | 0 | 4 |" in markdown
    github = cli(root, "check", "--format", "github").stdout
    assert "::error" not in github and "4 accepted by the project's config" in github
    sarif = json.loads(cli(root, "check", "--format", "sarif").stdout)
    (result,) = sarif["runs"][0]["results"]  # one per file and rule: the four constants in its properties
    assert result["ruleId"] == "PDC001" and len(result["properties"]["accepted"]) == 4
    assert result["suppressions"] == [{"kind": "external", "justification": "kept for the CPU fallback"}]


def test_an_accepted_constant_is_a_pattern_and_paths_are_the_configs(tmp_path: Path) -> None:
    """``constant = "*"`` accepts every finding of the program (a shell pattern of names, as a user writes it),
    and the program's path is the config's, also when check runs from a subfolder."""
    root = repo(tmp_path, '[tool.pte-devconst]\npaths = ["models"]\n\n[[tool.pte-devconst.accept]]\n'
                          f'program = "models/{COPYING}"\nconstant = "*"\nreason = "tracked"\n')
    (root / "src" / "deep").mkdir(parents=True)
    for where in (root, root / "src" / "deep"):
        done = subprocess.run([sys.executable, "-m", "pte_devconst", "check", "--format", "concise"], cwd=where,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0 and "matched nothing" not in done.stderr, done.stdout + done.stderr
        assert "4 accepted" in done.stdout
    narrow = repo(tmp_path / "narrow", '[tool.pte-devconst]\npaths = ["models"]\n\n[[tool.pte-devconst.accept]]\n'
                                       f'program = "models/{COPYING}"\nconstant = "value 1?"\nreason = "no"\n')
    assert cli(narrow, "check", "-f", "concise").returncode == 1  # a pattern that matches no finding accepts none


def test_the_command_line_overrides_the_config(tmp_path: Path) -> None:
    root = repo(tmp_path, '[tool.pte-devconst]\npaths = ["models"]\nmin-bytes = 1000000\noutput-format = "json"\n')
    passing = cli(root, "check")
    assert passing.returncode == 0 and json.loads(passing.stdout)["min_bytes"] == 1000000  # the config's format
    failing = cli(root, "check", "--min-bytes", "0", "--format", "concise")
    assert failing.returncode == 1 and failing.stdout.startswith("models/")
    only = cli(root, "check", f"models/{CLEAN}", "--min-bytes", "0", "-f", "concise")  # files given: paths unused
    assert only.returncode == 0 and COPYING not in only.stdout
    strict = repo(tmp_path / "strict", '[tool.pte-devconst]\nstrict = true\nfold = true\n')
    assert json.loads(cli(strict, "check", "models", "--json").stdout)["strict"] is True
    doc = json.loads(cli(strict, "check", "models", "--json", "--no-strict", "--no-fold").stdout)
    assert doc["strict"] is False and doc["fold"] is False


def test_isolated_and_config_file(tmp_path: Path) -> None:
    root = repo(tmp_path, '[tool.pte-devconst]\npaths = ["models"]\nmin-bytes = 1000000\n')
    isolated = cli(root, "check", "--isolated")
    assert isolated.returncode == 2 and "Missing argument 'FILE...'" in isolated.stderr  # no config: no paths
    assert cli(root, "check", "models", "--isolated").returncode == 1  # nor its min-bytes
    other = root / "ci" / "gate.toml"  # a file of its own is read at its top level, relative to its folder
    other.parent.mkdir()
    other.write_text('paths = ["../models"]\nexclude = ["../models/detector.pte"]\n')
    chosen = cli(root, "check", "--config", str(other), "-f", "concise")
    assert chosen.returncode == 0, chosen.stdout + chosen.stderr
    assert CLEAN in chosen.stdout and COPYING not in chosen.stdout  # excluded, even though under paths


def test_the_search_stops_at_the_repository_root(tmp_path: Path) -> None:
    outer = tmp_path / "pyproject.toml"  # above the checkout: never read
    outer.write_text('[tool.pte-devconst]\nmin-bytes = 1000000\n')
    root = repo(tmp_path, "")  # its own pyproject has no table
    assert cli(root / "src", "check", "../models").returncode == 1  # the outer min-bytes would pass it
    no_git = repo(tmp_path / "plain", "", git=False)  # without .git the search goes on up, as ruff's does
    (tmp_path / "plain" / "pyproject.toml").write_text('[tool.pte-devconst]\nmin-bytes = 1000000\n')
    assert cli(no_git / "src", "check", "../models").returncode == 0


@pytest.mark.parametrize("table, where", [
    ('[tool.pte-devconst]\nmin_bytes = 1\n', "[tool.pte-devconst] min_bytes: unknown key"),
    ('[tool.pte-devconst]\nstrict = "yes"\n', "[tool.pte-devconst] strict: must be true or false"),
    ('[tool.pte-devconst]\noutput-format = "xml"\n', "[tool.pte-devconst] output-format: must be one of"),
    ('[[tool.pte-devconst.accept]]\nprogram = "m.pte"\nvalue = 1\n', "accept[0].reason: required"),
    ('[[tool.pte-devconst.accept]]\nprogram = "m.pte"\nreason = "x"\n', "accept[0]: name the constant"),
    ('[[tool.pte-devconst.accept]]\nprogram = "m.pte"\nvalue = 1\nreason = "x"\nline = 3\n',
     "accept[0].line: unknown key"),
    ('[tool.pte-devconst\n', "not valid TOML"),
    ('[tool.pte-devconst]\ndevice = "cpu"\n', "device: constants only move to non-CPU devices"),
])
def test_a_bad_config_is_one_line_naming_the_file_and_the_key(tmp_path: Path, table: str, where: str) -> None:
    root = repo(tmp_path, table)
    done = cli(root, "check", "models")
    assert done.returncode == 2 and done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"pte-devconst: error: {root / 'pyproject.toml'}: ") and where in line, line


def test_an_accept_that_matches_nothing_is_a_warning(tmp_path: Path) -> None:
    root = repo(tmp_path, '[tool.pte-devconst]\n[[tool.pte-devconst.accept]]\nprogram = "models/gone.pte"\n'
                          'constant = "w"\nreason = "was slow"\n')
    done = cli(root, "check", f"models/{CLEAN}")
    assert done.returncode == 0  # a warning, as ruff's unused noqa: the gate's verdict does not change
    assert done.stderr.splitlines() == [f"pte-devconst: warning: {root / 'pyproject.toml'}: accept[0]: accepted "
                                        "finding matched nothing (program 'models/gone.pte', constant 'w'): no program "
                                        "checked matches 'models/gone.pte'"]
    assert json.loads(cli(root, "check", f"models/{CLEAN}", "--json").stdout)["unused_accepts"][0]["reason"] == \
        "was slow"
