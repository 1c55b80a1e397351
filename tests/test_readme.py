"""The README's walk-through, set-up commands and API example really run and print what it shows.

Console blocks (```console) hold ``$ command`` lines followed by their output; a command expected
to fail ends in a ``# exits N`` comment.  They run in a temporary copy of examples/ and the corpus,
with COLUMNS=80 and NO_COLOR=1.  Outputs are compared byte for byte (no line of plain output ends in a
space); only a step that shows timings (``validate``'s time per call) is compared with its figures masked and its
table rules folded.  After an intended change of output, refresh the README with

    PTE_DEVCONST_UPDATE_README=1 python3 -m pytest -q tests/test_readme.py
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
UPDATE = bool(os.environ.get("PTE_DEVCONST_UPDATE_README"))
FENCE = re.compile(r"^```(\w*)\n(.*?)^```\n", re.MULTILINE | re.DOTALL)
EXITS = re.compile(r"\s+#\s*exits\s+(\d+)\s*$")


@dataclass
class Step:
    command: str
    exit_code: int
    expected: list[str]


def _blocks(kind: str) -> list[re.Match]:
    return [m for m in FENCE.finditer(README.read_text()) if m.group(1) == kind]


def _steps(body: str) -> list[Step]:
    steps: list[Step] = []
    lines = body.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        assert line.startswith("$ "), f"console block line without a prompt: {line!r}"
        command = line[2:]
        while command.endswith("\\"):
            i += 1
            command = command[:-1] + lines[i].strip()
        code = EXITS.search(command)
        i += 1
        output = []
        while i < len(lines) and not lines[i].startswith("$ "):
            output.append(lines[i])
            i += 1
        steps.append(Step(EXITS.sub("", command), int(code.group(1)) if code else 0, output))
    return steps


TIMING = re.compile(r"\d ms\b|wall")


def _normal(lines: list[str]) -> list[str]:
    """Fold what legitimately varies where timings are shown (their digits move table rules and padding); any other
    output is compared as it is, byte for byte."""
    if not any(TIMING.search(line) for line in lines):
        return lines
    result = []
    for line in lines:
        line = re.sub(r"[━─═]+", "─", line.rstrip())
        line = re.sub(r" +", " ", line)
        if TIMING.search(line):
            line = re.sub(r"\d+(\.\d+)?", "N", line)
        result.append(line)
    return result


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A scratch copy of what the walk-through reads (examples and the corpus), so it writes nothing here."""
    root = tmp_path_factory.mktemp("readme")
    shutil.copytree(ROOT / "examples" / "models", root / "examples" / "models")
    shutil.copytree(ROOT / "tests" / "fixtures" / "corpus", root / "tests" / "fixtures" / "corpus")
    shutil.copytree(ROOT / "tests" / "fixtures" / "fold", root / "tests" / "fixtures" / "fold")
    return root


def _env() -> dict[str, str]:
    return {**os.environ, "COLUMNS": "80", "NO_COLOR": "1", "TERM": "dumb",
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}


def _shell(command: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", command], cwd=cwd, env=_env(), capture_output=True, text=True, timeout=600)


def test_readme_has_a_walk_through() -> None:
    steps = [s for block in _blocks("console") for s in _steps(block.group(2))]
    commands = " ".join(s.command for s in steps)
    for needed in ("pte-devconst inspect", "pte-devconst rewrite", "pte-devconst diff", "pte-devconst validate",
                   "pte-devconst check", "--simulate-devices"):
        assert needed in commands
    assert any(s.exit_code == 1 for s in steps), "the walk-through shows check failing before the rewrite"


def test_walk_through_runs_and_prints_what_the_readme_shows(sandbox: Path) -> None:
    text = README.read_text()
    updated = text
    problems = []
    for block in _blocks("console"):
        rendered = []
        for step in _steps(block.group(2)):
            result = _shell(step.command, sandbox)
            printed = (result.stdout + result.stderr).rstrip("\n")
            actual = printed.split("\n") if printed else []
            padded = [line for line in actual if line != line.rstrip()]
            if padded:
                problems.append(f"{step.command}: plain output with trailing spaces: {padded!r}")
            suffix = f"  # exits {step.exit_code}" if step.exit_code else ""
            rendered += [f"$ {step.command}{suffix}"] + actual
            if result.returncode != step.exit_code:
                problems.append(f"{step.command}: exit {result.returncode}, README says {step.exit_code}\n"
                                f"{result.stderr[-2000:]}")
            elif _normal(actual) != _normal(step.expected):
                problems.append(f"{step.command}: output differs from the README:\n" + "\n".join(actual))
        updated = updated.replace(block.group(0), "```console\n" + "\n".join(rendered) + "\n```\n", 1)
    if UPDATE and updated != text:
        README.write_text(updated)
        return
    assert not problems, ("\n\n".join(problems) + "\n(refresh with PTE_DEVCONST_UPDATE_README=1 if intended)")


def test_setup_commands(sandbox: Path) -> None:
    """Two commands do all set-up: the test one is exactly .ci/run's; the main job's tool part runs."""
    commands = [line for block in _blocks("bash") for line in block.group(2).splitlines()
                if line.startswith("python3 -m pip install")]
    assert len(commands) == 2, commands
    ci_lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()
                if line.startswith("python3 ")]
    test_command = " && ".join(ci_lines)
    assert test_command in commands, f"README's test command must be {test_command!r}"
    main_job = next(c for c in commands if c != test_command)
    install, *tool = main_job.split(" && ")
    assert '"torch==2.13.0"' in install, "pin torch: unpinned pulls a multi-GB CUDA build"
    assert '-e ".[runner]"' in install, "validate needs the runner extra"
    assert [t.split()[:2] for t in tool][:3] == [["pte-devconst", "rewrite"], ["pte-devconst", "diff"],
                                                 ["pte-devconst", "validate"]]
    result = _shell(" && ".join(tool), sandbox)
    assert result.returncode == 0, result.stderr
    assert "PASS" in result.stdout


def test_api_example_runs_and_prints_what_the_readme_shows(sandbox: Path) -> None:
    text = README.read_text()
    blocks = list(FENCE.finditer(text))
    index = next(i for i, m in enumerate(blocks) if m.group(1) == "python" and "from pte_devconst import" in m.group(2))
    code, shown = blocks[index], blocks[index + 1]
    assert shown.group(1) == "text", "the API example is followed by its output in a ```text block"
    result = subprocess.run([sys.executable, "-c", code.group(2)], cwd=sandbox, env=_env(), capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    if UPDATE:
        README.write_text(text.replace(shown.group(0), "```text\n" + result.stdout + "```\n", 1))
        return
    assert _normal(result.stdout.splitlines()) == _normal(shown.group(2).splitlines())
