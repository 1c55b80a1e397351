"""examples/ci/pte-devconst.yml and .pre-commit-hooks.yaml, run as GitHub and pre-commit run them, in a scratch
repository laid out like a user's: their own pyproject, a models/ folder with a program that still copies its
weights every call and a clean one, the workflow under .github/workflows/.

GitHub runs a ``run:`` step as ``bash -e {0}``, and with ``shell: bash`` as ``bash --noprofile --norc -eo pipefail
{0}`` ({0}: the script in a file); so does ``run_step``, no pipefail unless the step asks for it.  The install
steps run for real, pointed at this checkout: each job gets a fresh virtual environment, and pip installs the
checkout's wheel into it (offline here: its dependencies, and torch for the fix job, come from the system's
site-packages; ``-m slow`` installs the checkout itself, with everything from the index, into isolated ones).
"""

from __future__ import annotations

import os
import re
import shutil
import site
import subprocess
import sys
from pathlib import Path
from typing import Any, Optional

import pytest
import yaml

from cli_runner import rendered
from conftest import EXAMPLES

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = ROOT / "examples" / "ci" / "pte-devconst.yml"
HOOKS = ROOT / ".pre-commit-hooks.yaml"
GITHUB_SHELLS = {None: ["bash", "-e"], "bash": ["bash", "--noprofile", "--norc", "-eo", "pipefail"]}
COPYING, CLEAN = "detector.pte", "classifier.pte"  # mlp_copy (4 constants copied per call), mlp_cpu (none)


def _workflow() -> dict:
    document = yaml.safe_load(WORKFLOW.read_text())
    assert isinstance(document, dict)
    return document


def _expand(text: str, env: dict[str, str]) -> str:
    """``${{ env.NAME }}`` as GitHub evaluates it; the workflow uses no other expression in what runs."""
    text = re.sub(r"\$\{\{\s*env\.(\w+)\s*\}\}", lambda m: env[m.group(1)], text)
    assert "${{" not in text, text
    return text


def run_step(step: dict, env: dict[str, str], cwd: Path, scripts: Path) -> subprocess.CompletedProcess:
    """One ``run:`` step, exactly as GitHub's runner starts it: the script in a file, the step's shell."""
    scripts.mkdir(exist_ok=True)
    script = scripts / f"step{len(list(scripts.iterdir()))}.sh"
    script.write_text(_expand(step["run"], env))
    command = GITHUB_SHELLS[step.get("shell")] + [str(script)]
    return subprocess.run(command, cwd=cwd, env={**env, **{k: str(v) for k, v in step.get("env", {}).items()}},
                          capture_output=True, text=True, timeout=600)


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=Dev", "-c", "user.email=dev@example.com", *args], cwd=repo, check=True,
                   capture_output=True)


def user_repo(tmp_path: Path) -> Path:
    """A user's project: their pyproject, their code, two shipped programs, and the workflow."""
    repo = tmp_path / "acme-vision"
    (repo / "src" / "acme").mkdir(parents=True)
    (repo / "pyproject.toml").write_text('[project]\nname = "acme-vision"\nversion = "1.0.0"\n'
                                         'dependencies = ["numpy"]\n\n[tool.pte-devconst]\npaths = ["models"]\n')
    (repo / "src" / "acme" / "__init__.py").write_text('"""Acme vision models."""\n')
    (repo / "models").mkdir()
    shutil.copy(EXAMPLES / "mlp_copy.pte", repo / "models" / COPYING)
    shutil.copy(EXAMPLES / "mlp_cpu.pte", repo / "models" / CLEAN)
    (repo / ".github" / "workflows").mkdir(parents=True)
    shutil.copy(WORKFLOW, repo / ".github" / "workflows" / "pte-devconst.yml")
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "models")
    return repo


def _offline_venv(path: Path) -> None:
    """A virtual environment that sees the packages of the environment running the tests and has no pip of its
    own: ``python -m pip`` is then that environment's pip, installing into this one, no index needed.

    ``--system-site-packages`` would show the *base* interpreter's packages instead: from a virtual environment
    (``python3 -m venv v && v/bin/pip install -e ".[test]"``) those lack typer, rich and a recent setuptools, and
    every install here failed.  A ``.pth`` that adds the running environment's site folders (with their own
    ``.pth`` files, as ``site`` adds a system site folder) shows exactly what the tests themselves see.
    """
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    folders = [*site.getsitepackages()] + ([site.getusersitepackages()] if site.ENABLE_USER_SITE else [])
    (own,) = path.glob("lib/python*/site-packages")
    (own / "_running_environment.pth").write_text(
        f"import site; list(map(site.addsitedir, {[f for f in folders if Path(f).is_dir()]!r}))\n")


def _can_build_offline() -> bool:
    """Whether this environment can build the wheel itself (``--no-build-isolation``): pyproject's setuptools, and
    a ``bdist_wheel`` (setuptools 70.1 has its own; older ones need the ``wheel`` package).  A fresh virtual
    environment has pip's setuptools 65 and no wheel: pip then builds in isolation, from the index."""
    from importlib.metadata import PackageNotFoundError, version

    def release(name: str) -> tuple[int, ...]:
        try:
            return tuple(int(part) for part in re.findall(r"\d+", version(name))[:2])
        except PackageNotFoundError:
            return ()

    tools = release("setuptools")
    return tools >= (68,) and (tools >= (70, 1) or release("wheel") != ())


def source_copy(folder: Path) -> Path:
    """The package's sources, copied: building a project writes build/ and *.egg-info into its folder, and a
    test never writes into the checkout."""
    skip = shutil.ignore_patterns(".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache",
                                  ".hypothesis", "tests", "bench", "examples", "docs")
    return Path(shutil.copytree(ROOT, folder / "pte-devconst", ignore=skip))


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This checkout as a wheel, built once (what pip builds from a URL of the repository): offline where this
    environment has the build requirements, else as pip builds any source, in isolation (from the index)."""
    folder = tmp_path_factory.mktemp("wheel")
    builder = folder / "venv"
    _offline_venv(builder)
    offline = _can_build_offline()
    build = subprocess.run([str(builder / "bin" / "python"), "-m", "pip", "wheel", "-q", "--no-deps",
                            *(["--no-index", "--no-build-isolation"] if offline else []), "-w", str(folder),
                            str(source_copy(folder))], capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stdout + build.stderr
    (built,) = folder.glob("pte_devconst-*.whl")
    return built


class Runner:
    """A fresh machine for one job: its own virtual environment, step summary and temp folder."""

    def __init__(self, tmp: Path, repo: Path, event: str, tool: str, isolated: bool = False) -> None:
        tmp.mkdir(parents=True, exist_ok=True)
        self.repo = repo
        self.venv = tmp / "runner-venv"
        self.scripts = tmp / "runner-temp"
        self.summary = tmp / "step-summary.md"
        self.summary.touch()
        if isolated:  # a real machine: pip and the dependencies come from the index
            subprocess.run([sys.executable, "-m", "venv", str(self.venv)], check=True)
            offline: dict[str, str] = {}
        else:
            _offline_venv(self.venv)
            offline = {"PIP_NO_INDEX": "1", "PIP_NO_BUILD_ISOLATION": "0"}
        workflow = _workflow()
        self.base = {
            "PATH": f"{self.venv / 'bin'}{os.pathsep}/usr/bin{os.pathsep}/bin", "HOME": str(tmp),
            "CI": "true", "GITHUB_ACTIONS": "true", "GITHUB_EVENT_NAME": event, "GITHUB_WORKSPACE": str(repo),
            "GITHUB_STEP_SUMMARY": str(self.summary), "RUNNER_TEMP": str(self.scripts),
            "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PYTHONDONTWRITEBYTECODE": "1", **offline,
            **{k: str(v) for k, v in workflow["env"].items()},
            "PTE_DEVCONST": f"file://{tool}",  # the install steps, pointed at this checkout
        }
        self.ran: list[tuple[str, subprocess.CompletedProcess]] = []

    def job(self, name: str) -> Optional[str]:
        """Run a job's steps until one fails; returns the failing step's name (None: the job passed)."""
        job = _workflow()["jobs"][name]
        env = {**self.base, **{k: str(v) for k, v in job.get("env", {}).items()}}
        for step in job["steps"]:
            if "run" in step:
                done = run_step(step, env, self.repo, self.scripts)
                self.ran.append((step["name"], done))
                if done.returncode != 0:
                    return step["name"]
            elif step["uses"].startswith("actions/upload-artifact"):
                path = self.repo / _expand(step["with"]["path"], env)
                assert path.is_dir(), f"nothing to upload at {path}"
                shutil.copytree(path, self.repo.parent / "artifact" / step["with"]["name"])
        return None

    def output(self, step: str) -> str:
        return next(done.stdout for name, done in self.ran if name == step)

    def own_packages(self) -> list[str]:
        return sorted(p.name for p in self.venv.glob("lib/python*/site-packages/*"))


CHECK_STEP = "Check the shipped programs"


def test_the_workflow_is_valid_and_every_piped_step_runs_with_pipefail() -> None:
    workflow = _workflow()
    triggers = workflow.get("on", workflow.get(True))  # YAML 1.1 reads a bare `on` as true
    assert {"pull_request", "workflow_dispatch"} <= set(triggers)
    steps = [step for job in workflow["jobs"].values() for step in job["steps"]]
    assert all(("uses" in step) != ("run" in step) for step in steps)
    for step in steps:
        if "|" in re.sub(r"\|\||\\\n", "", step.get("run", "")):
            assert step.get("shell") == "bash", f"{step['name']}: a pipe without pipefail"
    installs = [step["run"] for step in steps if "pip install" in step.get("run", "")]
    assert installs and all('"pte-devconst' in run and "$PTE_DEVCONST" in run and "-e ." not in run
                            for run in installs)
    assert workflow["env"]["PTE_DEVCONST"].startswith("git+https://github.com/")


@pytest.mark.parametrize("shell, code", [(None, 0), ("bash", 1)])
def test_the_harness_runs_steps_as_github_does(tmp_path: Path, shell: Optional[str], code: int) -> None:
    """Without `shell: bash` GitHub uses `bash -e`: a failure inside a pipe passes unnoticed."""
    step = {"run": "false | tee out.txt\necho after", **({"shell": shell} if shell else {})}
    done = run_step(step, {"PATH": os.environ["PATH"]}, tmp_path, tmp_path / "scripts")
    assert done.returncode == code and ("after" in done.stdout) == (code == 0)


def test_gate_fails_on_the_copying_model(tmp_path: Path, wheel: Path) -> None:
    repo = user_repo(tmp_path)
    gate = Runner(tmp_path / "gate", repo, "pull_request", str(wheel))
    assert gate.job("gate") == CHECK_STEP  # the pull request that ships a copying program fails
    annotations = gate.output(CHECK_STEP).splitlines()
    errors = [line for line in annotations if line.startswith("::error ")]
    (error,) = errors  # one annotation per file: its worst constant and the totals
    assert error.startswith(f"::error file=models/{COPYING},") and "4 constants copied" in error
    assert not any(CLEAN in line for line in annotations)
    assert "torch" not in " ".join(gate.own_packages())  # the gate's install has no torch
    summary = gate.summary.read_text()
    assert "### ❌ pte-devconst check" in summary and f"<code>models/{COPYING}</code>" in rendered(summary)
    assert not list(repo.rglob("*.devconst.pte"))  # the gate writes nothing


@pytest.mark.slow
def test_the_fix_job_fixes_the_copying_model_and_the_gate_then_passes(tmp_path: Path, wheel: Path) -> None:
    """The fix job (rewrite and validate every program, with torch) and the next push's gate: slow-only (10 s on
    two cores, 19 s on shared ones); the gate's failure is the test above, a rewrite in place the pre-commit hook's
    test below."""
    repo = user_repo(tmp_path)
    fix = Runner(tmp_path / "fix", repo, "pull_request", str(wheel))  # needs: gate; if: failure()
    assert fix.job("fix") is None, fix.ran[-1][1].stdout + fix.ran[-1][1].stderr
    fixed = repo.parent / "artifact" / "devconst-models"
    assert sorted(p.name for p in fixed.iterdir()) == sorted([CLEAN, COPYING])
    summary = fix.summary.read_text()
    assert summary.count("### pte-devconst validate") == 2 and "FAIL" not in summary
    assert "### ✅ pte-devconst check" in summary

    for program in fixed.iterdir():  # the user downloads the artifact and commits it
        shutil.copy(program, repo / "models" / program.name)
    _git(repo, "commit", "-q", "-am", "rewritten models")
    again = Runner(tmp_path / "gate-again", repo, "pull_request", str(wheel))  # the next push
    assert again.job("gate") is None
    assert "::error" not in again.output(CHECK_STEP)


@pytest.mark.slow
def test_the_gate_installs_from_the_index_into_a_bare_environment(tmp_path: Path) -> None:
    """The gate on an isolated environment: pip builds this checkout and brings every dependency itself, and
    none is torch.  (The fix job's CPU torch comes from download.pytorch.org, which only a real runner reaches.)"""
    repo = user_repo(tmp_path)
    gate = Runner(tmp_path / "gate", repo, "pull_request", str(source_copy(tmp_path)), isolated=True)
    assert gate.job("gate") == CHECK_STEP
    installed = " ".join(gate.own_packages())
    assert "typer" in installed and "rich" in installed and "torch" not in installed
    subprocess.run([str(gate.venv / "bin" / "pte-devconst"), "rewrite", "--in-place", "-q", "models"], cwd=repo,
                   check=True)
    assert gate.job("gate") is None


# --- pre-commit -----------------------------------------------------------------------------------

def _hooks() -> dict[str, dict[str, Any]]:
    hooks = yaml.safe_load(HOOKS.read_text())
    assert isinstance(hooks, list)
    return {hook["id"]: hook for hook in hooks}


def test_the_hooks_install_without_torch_and_match_programs_only() -> None:
    hooks = _hooks()
    assert set(hooks) == {"pte-devconst-check", "pte-devconst-rewrite"}
    for hook in hooks.values():
        assert hook["language"] == "python" and not hook.get("additional_dependencies")
        files = re.compile(hook["files"])
        assert files.search("models/net.pte") and not files.search("models/net.ptd")
    text = (ROOT / "pyproject.toml").read_text()
    dependencies = text.split("dependencies = [", 1)[1].split("]", 1)[0]
    assert "torch" not in dependencies  # what `pip install .` of the hook repository brings
    assert "rev: v0.1.0" not in HOOKS.read_text()  # no such tag exists


def _entry(hook: dict[str, Any], files: list[str], repo: Path) -> subprocess.CompletedProcess:
    """What pre-commit runs: the entry, then the staged file names its `files` pattern matches."""
    names = [f for f in files if re.search(hook["files"], f)]
    # The script of the environment running the tests (a `pte-devconst` elsewhere on PATH may be another checkout's).
    script = Path(sys.executable).parent / "pte-devconst"
    tool = str(script) if script.exists() else shutil.which("pte-devconst") or "pte-devconst"
    command = [tool, *hook["entry"].split()[1:], *names]
    return subprocess.run(command, cwd=repo, capture_output=True, text=True, timeout=120)


def test_the_fixing_hook_rewrites_in_place_fails_once_then_passes(tmp_path: Path) -> None:
    repo = user_repo(tmp_path)
    staged = [f"models/{COPYING}", f"models/{CLEAN}", "pyproject.toml"]
    hooks = _hooks()
    check = _entry(hooks["pte-devconst-check"], staged, repo)
    assert check.returncode == 1
    # One line per file, then the summary (the tables with -v).
    assert check.stdout.splitlines()[:2] == [
        f"models/{COPYING}: 4 constants copied to a device on every call (3.2 KiB per call); fix: pte-devconst "
        f"rewrite --in-place models/{COPYING}", f"models/{CLEAN}: ok (4 constants)"]
    assert len(check.stdout.splitlines()) == 3
    before = (repo / "models" / CLEAN).read_bytes()
    first = _entry(hooks["pte-devconst-rewrite"], staged, repo)
    assert first.returncode == 1, first.stderr  # it changed a file: the user re-stages it
    assert first.stdout.splitlines() == [
        f"models/{COPYING}: 4 tensors moved to device memory (3.2 KiB fewer host-to-device bytes per call); "
        "rewritten in place", f"models/{CLEAN}: nothing to move"]
    changed = subprocess.run(["git", "status", "--porcelain"], cwd=repo, capture_output=True, text=True).stdout
    assert changed.split() == ["M", f"models/{COPYING}"]  # in place: no NAME.devconst.pte left behind
    assert (repo / "models" / CLEAN).read_bytes() == before
    _git(repo, "add", "-A")
    rewritten = (repo / "models" / COPYING).read_bytes()
    second = _entry(hooks["pte-devconst-rewrite"], staged, repo)
    assert second.returncode == 0, second.stdout + second.stderr
    assert (repo / "models" / COPYING).read_bytes() == rewritten
    assert _entry(hooks["pte-devconst-check"], staged, repo).returncode == 0


@pytest.mark.slow
def test_pre_commit_try_repo_runs_the_hooks(tmp_path: Path) -> None:
    """The real pre-commit, installing this checkout as the hook repository (from the index, into its own
    environment, where torch cannot be installed): the fixing hook fails once ("files were modified by this
    hook"), then passes."""
    own = Path(sys.executable).parent / "pre-commit"  # this environment's, as for the hooks' script
    pre_commit = str(own) if own.exists() else shutil.which("pre-commit") or pytest.skip("pre-commit is not installed")
    repo = user_repo(tmp_path)
    no_torch = tmp_path / "constraints.txt"
    no_torch.write_text("torch<0\n")  # any hook install that asks for torch fails to resolve
    env = {**os.environ, "PRE_COMMIT_HOME": str(tmp_path / "pre-commit-home"), "NO_COLOR": "1",
           "PIP_CONSTRAINT": str(no_torch)}

    def try_repo(hook: str) -> subprocess.CompletedProcess:
        return subprocess.run([pre_commit, "try-repo", str(ROOT), hook, "--all-files"], cwd=repo, env=env,
                              capture_output=True, text=True, timeout=900)

    assert try_repo("pte-devconst-check").returncode == 1
    first = try_repo("pte-devconst-rewrite")
    assert first.returncode == 1 and "files were modified by this hook" in first.stdout, first.stdout
    _git(repo, "add", "-A")
    second = try_repo("pte-devconst-rewrite")
    assert second.returncode == 0, second.stdout
    assert try_repo("pte-devconst-check").returncode == 0


# --- the first run: the README's test command in a virtual environment -----------------------------

def test_helper_environments_see_the_running_environment(tmp_path: Path) -> None:
    """The jobs' offline environments see what the tests see, also when they run in a virtual environment (a
    ``--system-site-packages`` environment saw the base interpreter's packages: no typer, setuptools 65, no wheel,
    and the wheel's build failed with ``invalid command 'bdist_wheel'``)."""
    import sysconfig

    helper = tmp_path / "helper"
    _offline_venv(helper)
    seen = subprocess.run([str(helper / "bin" / "python"), "-c", "import sys; print('\\n'.join(sys.path))"],
                          capture_output=True, text=True, check=True).stdout.splitlines()
    assert sysconfig.get_path("purelib") in seen
    assert str(next(helper.glob("lib/python*/site-packages"))) in seen  # its own first: what pip installs wins
    assert seen.index(str(next(helper.glob("lib/python*/site-packages")))) < seen.index(sysconfig.get_path("purelib"))


def test_the_hooks_read_the_projects_config(tmp_path: Path) -> None:
    """The settings in the repository's pyproject reach the hooks: an accepted finding passes the check, an
    excluded program is neither checked nor rewritten, even though pre-commit names it."""
    repo = user_repo(tmp_path)
    pyproject = repo / "pyproject.toml"
    staged = [f"models/{COPYING}", f"models/{CLEAN}"]
    pyproject.write_text(pyproject.read_text() + "".join(
        f'\n[[tool.pte-devconst.accept]]\nprogram = "models/{COPYING}"\nvalue = {v}\nreason = "host fallback"\n'
        for v in range(4)))
    hooks = _hooks()
    check = _entry(hooks["pte-devconst-check"], staged, repo)
    assert check.returncode == 0, check.stdout
    assert f"models/{COPYING}: ok (4 constants; 4 accepted)" in check.stdout
    pyproject.write_text(pyproject.read_text().split("[[tool")[0] + f'exclude = ["models/{COPYING}"]\n')
    assert _entry(hooks["pte-devconst-check"], staged, repo).returncode == 0
    only = _entry(hooks["pte-devconst-check"], [f"models/{COPYING}"], repo)  # nothing left to check: passes
    assert only.returncode == 0 and only.stdout == "" and "excluded" in only.stderr
    before = (repo / "models" / COPYING).read_bytes()
    rewrite = _entry(hooks["pte-devconst-rewrite"], staged, repo)
    assert rewrite.returncode == 0 and (repo / "models" / COPYING).read_bytes() == before
    assert COPYING not in rewrite.stdout
