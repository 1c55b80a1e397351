"""examples/ci (GitHub Actions) and .pre-commit-hooks.yaml: valid YAML whose commands really work."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = ROOT / "examples" / "ci" / "pte-devconst.yml"
HOOKS = ROOT / ".pre-commit-hooks.yaml"
CORPUS = ROOT / "tests" / "fixtures" / "corpus"


def _workflow() -> dict:
    document = yaml.safe_load(WORKFLOW.read_text())
    assert isinstance(document, dict)
    return document


def test_workflow_is_valid_github_actions_yaml() -> None:
    workflow = _workflow()
    triggers = workflow.get("on", workflow.get(True))  # YAML 1.1 reads a bare `on` as true
    assert "pull_request" in triggers
    job = workflow["jobs"]["devconst"]
    assert job["runs-on"]
    steps = job["steps"]
    assert all(("uses" in step) != ("run" in step) for step in steps)
    commands = " ".join(step.get("run", "") for step in steps)
    for command in ("pte-devconst rewrite", "pte-devconst diff", "pte-devconst check"):
        assert command in commands
    assert commands.count("$GITHUB_STEP_SUMMARY") >= 3 and "--format markdown" in commands
    assert (ROOT / workflow["env"]["MODEL"]).is_file(), "the workflow's model must exist in the repository"


def test_workflow_steps_run_and_publish_a_markdown_summary(tmp_path: Path) -> None:
    """Run every pte-devconst step as Actions would (bash -e, pipefail where asked), in a copy of the repo."""
    workflow = _workflow()
    shutil.copytree(ROOT / "examples" / "models", tmp_path / "examples" / "models")
    summary = tmp_path / "summary.md"
    env = {**os.environ, **{k: str(v) for k, v in workflow["env"].items()}, "GITHUB_STEP_SUMMARY": str(summary),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    ran = []
    for step in workflow["jobs"]["devconst"]["steps"]:
        script = step.get("run", "")
        if "pte-devconst" not in script or "pip install" in script:
            continue
        result = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", script], cwd=tmp_path, env=env,
                                capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, f"{step['name']}: {result.stderr}"
        ran.append(step["name"])
    assert len(ran) >= 4
    text = summary.read_text()
    for heading in ("pte-devconst rewrite", "pte-devconst diff", "pte-devconst validate", "pte-devconst check"):
        assert re.search(rf"^### .*{heading}", text, re.MULTILINE), heading
    assert "|---|" in text and "\x1b[" not in text  # markdown tables, no terminal colour codes
    assert (tmp_path / workflow["env"]["OUT"]).is_file() and (tmp_path / "rewrite.json").is_file()


def _hook() -> dict:
    hooks = yaml.safe_load(HOOKS.read_text())
    assert isinstance(hooks, list) and len(hooks) == 1
    return hooks[0]


def test_pre_commit_hook_offers_check() -> None:
    hook = _hook()
    assert hook["id"] == "pte-devconst-check" and hook["language"] == "python"
    assert hook["entry"].split()[:2] == ["pte-devconst", "check"]
    files = re.compile(hook["files"])
    assert files.search("models/net.pte") and not files.search("models/net.ptd")


@pytest.mark.parametrize("names, code", [(["v_h_cpu_only"], 0), (["v_h_cpu_only", "v_a_dtypes_copy"], 1)])
def test_pre_commit_entry_fails_on_a_program_that_still_copies(names: list[str], code: int) -> None:
    """pre-commit appends the staged file names to the entry: exactly that command line."""
    entry = _hook()["entry"].split()
    command = [shutil.which(entry[0]) or entry[0], *entry[1:], *(str(CORPUS / f"{n}.pte") for n in names)]
    if not shutil.which(entry[0]):
        command = [sys.executable, "-m", "pte_devconst", *entry[1:], *command[len(entry):]]
    assert subprocess.run(command, capture_output=True, timeout=120).returncode == code
