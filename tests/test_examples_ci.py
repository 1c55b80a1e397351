"""examples/ci/pte-devconst.yml and .pre-commit-hooks.yaml, run as GitHub and pre-commit run them, in scratch
repositories laid out like users': their own pyproject naming the programs' folders (one ``models/``; a nested
``assets/models``; several folders with spaces in their names), a program that still copies its weights every
call and a clean one, the workflow under .github/workflows/.

GitHub runs a ``run:`` step as ``bash -e {0}``, and with ``shell: bash`` as ``bash --noprofile --norc -eo pipefail
{0}`` ({0}: the script in a file); so does ``run_step``, no pipefail unless the step asks for it.  Jobs run in
their ``needs`` order with their ``if:`` conditions (``Workflow``: a small evaluator of the expressions the
workflow uses), each on a fresh runner with its own ``RUNNER_TEMP`` (with a space in its path) and step summary;
artifacts pass between jobs as ``upload-artifact``/``download-artifact`` pass them, and ``upload-sarif`` checks
the SARIF file it would send.  The install steps run for real, pointed at this checkout: each job gets a fresh
virtual environment, and pip installs the checkout's wheel into it (offline here: its dependencies, and torch
for the fix job, come from the system's site-packages; ``-m slow`` installs the checkout itself, with
everything from the index, into isolated ones).
"""

from __future__ import annotations

import json
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

from cli_runner import invoke_json, rendered
from conftest import EXAMPLES
from test_layers import PACKAGES

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = ROOT / "examples" / "ci" / "pte-devconst.yml"
HOOKS = ROOT / ".pre-commit-hooks.yaml"
GITHUB_SHELLS = {None: ["bash", "-e"], "bash": ["bash", "--noprofile", "--norc", "-eo", "pipefail"]}
COPYING, CLEAN = "detector.pte", "classifier.pte"  # mlp_copy (4 constants copied per call), mlp_cpu (none)
REPOSITORY = "acme/acme-vision"


def _workflow() -> dict:
    document = yaml.safe_load(WORKFLOW.read_text())
    assert isinstance(document, dict)
    return document


def _expand(text: str, env: dict[str, str]) -> str:
    """``${{ env.NAME }}`` and ``${{ runner.temp }}`` as GitHub evaluates them; the workflow uses no other
    expression in what runs."""
    text = re.sub(r"\$\{\{\s*env\.(\w+)\s*\}\}", lambda m: env[m.group(1)], text)
    text = re.sub(r"\$\{\{\s*runner\.temp\s*\}\}", lambda m: env["RUNNER_TEMP"], text)
    assert "${{" not in text, text
    return text


_TOKEN = re.compile(r"\s*(?:(?P<op>\|\||&&|==|!=|!|\(|\))|(?P<str>'(?:[^']|'')*')|(?P<call>[A-Za-z_]\w*)\(\)"
                    r"|(?P<name>[A-Za-z_][\w.-]*))")


def evaluate(expression: str, context: dict[str, Any], statuses: dict[str, bool]) -> bool:
    """A GitHub ``if:`` expression, for the subset the workflow uses: ``&&``, ``||``, ``!``, parentheses, ``==``
    and ``!=`` (case-insensitive, a missing value is ''), context paths (``vars.X``, ``github.event_name``,
    ``needs.gate.result``) and the status functions.  Without a status function GitHub adds ``success() &&``."""
    text = expression.strip()
    if text.startswith("${{") and text.endswith("}}"):
        text = text[3:-2]
    python, position = [], 0
    while position < len(text.rstrip()):
        match = _TOKEN.match(text, position)
        assert match and match.end() > position, f"cannot read {text[position:]!r}"
        position = match.end()
        if match["op"]:
            python.append({"||": " or ", "&&": " and ", "!": " not "}.get(match["op"], match["op"]))
        elif match["str"]:
            python.append(repr(match["str"][1:-1].replace("''", "'").lower()))
        elif match["call"]:
            python.append(repr(statuses[match["call"]]))
        else:
            value: Any = context
            for part in match["name"].split("."):
                value = value.get(part) if isinstance(value, dict) else None
            python.append(repr("" if value is None else str(value).lower()))
    source = "".join(python)
    if not any(call in text for call in statuses):
        source = f"{statuses['success']!r} and ({source})"
    return bool(eval(source, {"__builtins__": {}}, {}))  # noqa: S307 - tokens from the workflow, read above


def run_step(step: dict, env: dict[str, str], cwd: Path, scripts: Path) -> subprocess.CompletedProcess:
    """One ``run:`` step, exactly as GitHub's runner starts it: the script in a file, the step's shell."""
    scripts.mkdir(exist_ok=True)
    script = scripts / f"step{len(list(scripts.glob('step*.sh')))}.sh"
    script.write_text(_expand(step["run"], env))
    command = GITHUB_SHELLS[step.get("shell")] + [str(script)]
    return subprocess.run(command, cwd=cwd, env={**env, **{k: str(v) for k, v in step.get("env", {}).items()}},
                          capture_output=True, text=True, timeout=600)


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=Dev", "-c", "user.email=dev@example.com", *args], cwd=repo, check=True,
                   capture_output=True)


# Where a user's repository keeps its programs: the folders its pyproject names, and the programs in each; those
# named in COPYING_NAMES are mlp_copy (4 constants copied per call), the others mlp_cpu (none).
COPYING_NAMES = {COPYING, "face detector.pte"}
LAYOUTS: dict[str, dict[str, list[str]]] = {
    "flat": {"models": [COPYING, CLEAN]},
    # issue 28: with MODELS=assets/models the fix job's cp -R put the originals in original/models/
    "nested, several, spaces": {"assets/vision models": [COPYING, CLEAN], "more models": ["face classifier.pte"]},
    "several copying": {"assets/models": [COPYING], "more models": ["face detector.pte", CLEAN]},
}


def user_repo(tmp_path: Path, layout: str = "flat") -> Path:
    """A user's project: their pyproject naming the programs' folders, their code, the programs, the workflow."""
    folders = LAYOUTS[layout]
    repo = tmp_path / "acme-vision"
    (repo / "src" / "acme").mkdir(parents=True)
    paths = ", ".join(f'"{folder}"' for folder in folders)
    (repo / "pyproject.toml").write_text('[project]\nname = "acme-vision"\nversion = "1.0.0"\n'
                                         f'dependencies = ["numpy"]\n\n[tool.pte-devconst]\npaths = [{paths}]\n')
    (repo / "src" / "acme" / "__init__.py").write_text('"""Acme vision models."""\n')
    for folder, programs in folders.items():
        (repo / folder).mkdir(parents=True)
        for name in programs:
            shutil.copy(EXAMPLES / ("mlp_copy.pte" if name in COPYING_NAMES else "mlp_cpu.pte"), repo / folder / name)
    (repo / ".github" / "workflows").mkdir(parents=True)
    shutil.copy(WORKFLOW, repo / ".github" / "workflows" / "pte-devconst.yml")
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "models")
    return repo


def copying_programs(layout: str) -> list[str]:
    """The programs of ``layout`` that copy constants every call, as paths in the repository."""
    return sorted(f"{folder}/{name}" for folder, names in LAYOUTS[layout].items() for name in names
                  if name in COPYING_NAMES)


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
    """A fresh machine for one job: its own virtual environment, step summary and temp folder (a space in its
    path, as a self-hosted runner's may have)."""

    def __init__(self, tmp: Path, repo: Path, event: str, tool: str, isolated: bool = False) -> None:
        tmp.mkdir(parents=True, exist_ok=True)
        self.repo = repo
        self.venv = tmp / "runner-venv"
        self.temp = tmp / "runner temp"
        self.temp.mkdir()
        self.summary = tmp / "step-summary.md"
        self.summary.touch()
        if isolated:  # a real machine: pip and the dependencies come from the index
            subprocess.run([sys.executable, "-m", "venv", str(self.venv)], check=True)
            offline: dict[str, str] = {}
        else:
            _offline_venv(self.venv)
            # Offline, every dependency is already visible from the running environment, and pip could fetch
            # none it found wanting: it installs the package alone (torch 2.13 wants setuptools>=77, and a
            # virtual environment may hold ensurepip's 65 first).  The isolated runs resolve for real.
            offline = {"PIP_NO_INDEX": "1", "PIP_NO_BUILD_ISOLATION": "0", "PIP_NO_DEPS": "1"}
        workflow = _workflow()
        self.base = {
            "PATH": f"{self.venv / 'bin'}{os.pathsep}/usr/bin{os.pathsep}/bin", "HOME": str(tmp),
            "CI": "true", "GITHUB_ACTIONS": "true", "GITHUB_EVENT_NAME": event, "GITHUB_WORKSPACE": str(repo),
            "GITHUB_REPOSITORY": REPOSITORY,
            "GITHUB_STEP_SUMMARY": str(self.summary), "RUNNER_TEMP": str(self.temp),
            "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PYTHONDONTWRITEBYTECODE": "1", **offline,
            **{k: str(v) for k, v in workflow["env"].items()},
            "PTE_DEVCONST": f"file://{tool}",  # the install steps, pointed at this checkout
        }
        self.ran: list[tuple[str, subprocess.CompletedProcess]] = []
        self.skipped: list[str] = []
        self.uploaded_sarif: list[dict[str, Any]] = []

    @property
    def artifacts(self) -> Path:
        """Where the run's artifacts are kept, shared by its jobs."""
        return self.repo.parent / "artifact"

    def job(self, name: str, context: Optional[dict[str, Any]] = None) -> Optional[str]:
        """Run a job's steps as GitHub does: after a failing step only those whose ``if:`` asks for it (``always()``,
        ``failure()``); returns the first failing step's name (None: the job passed)."""
        job = _workflow()["jobs"][name]
        env = {**self.base, **{k: str(v) for k, v in job.get("env", {}).items()}}
        failed: Optional[str] = None
        for step in job["steps"]:
            label = step.get("name", step.get("uses", "run"))
            statuses = {"always": True, "success": failed is None, "failure": failed is not None, "cancelled": False}
            if not evaluate(str(step.get("if", "success()")), context or {}, statuses):
                self.skipped.append(label)
                continue
            if "run" in step:
                done = run_step(step, env, self.repo, self.temp)
                self.ran.append((label, done))
                ok = done.returncode == 0
            else:
                ok = self.action(step, env)
            if not ok and failed is None:
                failed = label
        return failed

    def action(self, step: dict[str, Any], env: dict[str, str]) -> bool:
        """A ``uses:`` step: the checkout and Python are the scratch repository and the runner's venv already; the
        artifact actions move files as GitHub's do; upload-sarif checks what it would send."""
        uses, given = step["uses"], {k: _expand(str(v), env) for k, v in step.get("with", {}).items()}
        if uses.startswith(("actions/checkout@", "actions/setup-python@")):
            return True
        if uses.startswith("actions/upload-artifact@"):
            path = self.repo / given["path"]  # an absolute path stays itself
            target = self.artifacts / given["name"]
            if not path.exists():
                return given.get("if-no-files-found") == "ignore"
            if path.is_dir():
                shutil.copytree(path, target)
            else:
                target.mkdir(parents=True)
                shutil.copy(path, target / path.name)
            return True
        if uses.startswith("actions/download-artifact@"):
            source = self.artifacts / given["name"]
            if not source.is_dir():
                return False  # "Unable to download artifact(s)"
            shutil.copytree(source, self.repo / given["path"], dirs_exist_ok=True)
            return True
        if uses.startswith("github/codeql-action/upload-sarif@"):
            sarif = Path(given["sarif_file"])
            if not sarif.is_file():
                return False
            document = json.loads(sarif.read_text(encoding="utf-8"))
            assert document["version"] == "2.1.0" and given.get("category")
            self.uploaded_sarif.append(document)
            return True
        raise AssertionError(f"the harness does not know {uses}")

    def output(self, step: str) -> str:
        return next(done.stdout for name, done in self.ran if name == step)

    def own_packages(self) -> list[str]:
        return sorted(p.name for p in self.venv.glob("lib/python*/site-packages/*"))


class Workflow:
    """One run of the workflow for one event: its jobs in ``needs`` order, each on a fresh ``Runner`` when its
    ``if:`` holds, as GitHub schedules them."""

    def __init__(self, tmp: Path, repo: Path, event: str, tool: str, variables: Optional[dict[str, str]] = None,
                 fork: bool = False) -> None:
        self.tmp, self.repo, self.event, self.tool = tmp, repo, event, tool
        head = "someone/acme-vision" if fork else REPOSITORY
        self.context: dict[str, Any] = {
            "vars": dict(variables or {}), "needs": {},
            "github": {"event_name": event, "repository": REPOSITORY,
                       "event": {"pull_request": {"head": {"repo": {"full_name": head}}}} if event == "pull_request"
                       else {}}}
        self.runners: dict[str, Runner] = {}
        self.results: dict[str, str] = {}

    def run(self) -> dict[str, str]:
        """Every job's result: success, failure or skipped."""
        jobs = _workflow()["jobs"]
        pending = list(jobs)
        while pending:
            name = next(n for n in pending if all(d in self.results for d in self._needs(jobs[n])))
            pending.remove(name)
            needs = self._needs(jobs[name])
            needed = [self.results[d] for d in needs]
            statuses = {"always": True, "cancelled": False, "failure": "failure" in needed,
                        "success": all(r == "success" for r in needed)}
            context = {**self.context, "needs": {d: {"result": self.results[d]} for d in needs}}
            if not evaluate(str(jobs[name].get("if", "success()")), context, statuses):
                self.results[name] = "skipped"
                continue
            runner = Runner(self.tmp / name, self.repo, self.event, self.tool)
            self.runners[name] = runner
            self.results[name] = "success" if runner.job(name, context) is None else "failure"
        return self.results

    @staticmethod
    def _needs(job: dict[str, Any]) -> list[str]:
        needs = job.get("needs", [])
        return [needs] if isinstance(needs, str) else list(needs)


CHECK_STEP = "Check the shipped programs"


def _steps(job: str) -> list[dict[str, Any]]:
    steps = _workflow()["jobs"][job]["steps"]
    assert isinstance(steps, list)
    return steps


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


def test_the_install_is_pinned_to_this_release() -> None:
    """A tag or commit, never a branch (issue 28: ``@main`` moved under every user); the tag is this version's,
    which CHANGELOG.md lists, and the comment above it says how to move it."""
    from pte_devconst import __version__

    workflow = _workflow()
    source = workflow["env"]["PTE_DEVCONST"]
    assert source == f"git+https://github.com/pte-devconst/pte-devconst@v{__version__}"
    text = WORKFLOW.read_text()
    above = text[:text.index("  PTE_DEVCONST:")].rsplit("env:", 1)[1]
    assert "To move it" in above and "commit SHA" in above and "never to a branch" in above
    assert f"## [{__version__}]" in (ROOT / "CHANGELOG.md").read_text()
    assert f"rev: v{__version__}" in HOOKS.read_text()


def test_the_workflow_asks_for_least_privilege() -> None:
    """Every job reads the repository; only code scanning, which is optional, writes (security events)."""
    workflow = _workflow()
    assert workflow["permissions"] == {"contents": "read"}
    for name, job in workflow["jobs"].items():
        granted = job.get("permissions", workflow["permissions"])
        writes = {scope for scope, level in granted.items() if level == "write"}
        assert writes == ({"security-events"} if name == "code-scanning" else set()), name


def test_the_workflow_names_no_folder() -> None:
    """What to check is the project's own setting ([tool.pte-devconst] paths), so no step names a folder: nested
    folders, several of them and spaces in names need nothing in the workflow (issue 28: MODELS=assets/models
    broke the fix job)."""
    assert "MODELS" not in _workflow()["env"] and "MODELS" not in WORKFLOW.read_text().split("\nname:", 1)[1]


def test_the_gate_checks_once() -> None:
    """One `pte-devconst check` in the gate: the annotations, the summary and the SARIF are its reports."""
    runs = " ".join(step.get("run", "") for step in _steps("gate"))
    assert runs.count("pte-devconst check") == 1
    assert "--report markdown=" in runs and "--report sarif=" in runs


@pytest.mark.parametrize("variables, event, fork, runs", [
    ({}, "pull_request", False, False),
    ({"PTE_DEVCONST_SARIF": "false"}, "push", False, False),
    ({"PTE_DEVCONST_SARIF": "true"}, "push", False, True),
    ({"PTE_DEVCONST_SARIF": "true"}, "pull_request", False, True),
    ({"PTE_DEVCONST_SARIF": "true"}, "pull_request", True, False),  # a fork's token cannot write security events
])
def test_code_scanning_runs_only_when_asked(variables: dict[str, str], event: str, fork: bool, runs: bool) -> None:
    workflow = Workflow(Path("/nonexistent"), Path("/nonexistent"), event, "", variables, fork)
    keep = next(step for step in _steps("gate") if step.get("uses", "").startswith("actions/upload-artifact"))
    for gate in ("success", "failure"):  # a failing gate is when the alerts matter
        context = {**workflow.context, "needs": {"gate": {"result": gate}}}
        statuses = {"always": True, "cancelled": False, "failure": gate == "failure", "success": gate == "success"}
        assert evaluate(_workflow()["jobs"]["code-scanning"]["if"], context, statuses) is runs
        assert evaluate(keep["if"], workflow.context, statuses) is (variables.get("PTE_DEVCONST_SARIF") == "true")


@pytest.mark.parametrize("shell, code", [(None, 0), ("bash", 1)])
def test_the_harness_runs_steps_as_github_does(tmp_path: Path, shell: Optional[str], code: int) -> None:
    """Without `shell: bash` GitHub uses `bash -e`: a failure inside a pipe passes unnoticed."""
    step = {"run": "false | tee out.txt\necho after", **({"shell": shell} if shell else {})}
    done = run_step(step, {"PATH": os.environ["PATH"]}, tmp_path, tmp_path / "scripts")
    assert done.returncode == code and ("after" in done.stdout) == (code == 0)


def test_the_harness_reads_conditions_as_github_does() -> None:
    statuses = {"always": True, "cancelled": False, "failure": True, "success": False}
    context = {"vars": {"X": "True"}, "github": {"event_name": "push"}}
    assert evaluate("always() && vars.X == 'true'", context, statuses)  # compared case-insensitively
    assert not evaluate("vars.X == 'true'", context, statuses)  # success() && ...: not after a failure
    assert not evaluate("always() && vars.MISSING == 'true'", context, statuses)
    assert evaluate("failure() || github.event_name == 'workflow_dispatch'", context, statuses)
    assert evaluate("always() && !(github.event_name == 'pull_request')", context, statuses)
    assert evaluate("${{ !cancelled() && vars.X == 'true' }}", context, statuses)  # after a failure too
    assert not evaluate("${{ !cancelled() }}", context, {**statuses, "cancelled": True})


def test_the_wheel_ships_its_license_its_types_and_its_schemas(wheel: Path) -> None:
    """What a user installs: the license the metadata names, py.typed (PEP 561: their type checker reads the API's
    annotations), the report schema and the .fbs files, and a version that is this one."""
    import zipfile

    from pte_devconst import __version__

    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        (metadata,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        text = archive.read(metadata).decode()
        licenses = [n for n in names if n.split("/")[-1] == "LICENSE"]
        assert licenses and "BSD 3-Clause License" in archive.read(licenses[0]).decode()
    assert "BSD-3-Clause" in text and f"Version: {__version__}" in text
    assert "pte_devconst/py.typed" in names
    assert "pte_devconst/cli/report.schema.json" in names and any(n.endswith("program.fbs") for n in names)
    assert not any(n.startswith(("tests/", "examples/", "bench/", "cli/", "schema/")) for n in names)
    # Every module of the source tree is in the wheel (0.2.0's first wheel lacked rewriter/encodings/: the tests'
    # environments saw the editable checkout, a user's install failed on its first import).
    mapped = {folder: package.replace(".", "/") for folder, package in PACKAGES.items()}
    modules = {f"{mapped[path.relative_to(ROOT).parts[0]]}/{'/'.join(path.relative_to(ROOT).parts[1:])}"
               for folder in mapped for path in (ROOT / folder).rglob("*.py") if "__pycache__" not in path.parts}
    assert modules - set(names) == set()


USER_SCRIPT = '''\
from pte_devconst import CheckReport, PteDevconstError, analyze, check


def eligible(path: str) -> int:
    try:
        return analyze(path).eligible_constants
    except PteDevconstError as error:
        print(error.file)
        return 0


report: CheckReport = check(["model.pte"])
wrong: str = analyze("model.pte").eligible_constants
'''


@pytest.mark.slow
def test_a_users_type_checker_sees_the_api(tmp_path: Path, wheel: Path) -> None:
    """mypy --strict on a user's script, with the wheel installed: the API's types are read (a str assigned an int
    count is an error), not "missing library stubs or py.typed marker" (issue 28: the whole API was Any).  Slow:
    mypy reads the whole package, 20 s of CPU; the default suite checks py.typed is in the wheel."""
    pytest.importorskip("mypy")
    venv = tmp_path / "user-venv"
    _offline_venv(venv)
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                    str(wheel)], check=True, capture_output=True, timeout=300)
    script = tmp_path / "export_and_check.py"
    script.write_text(USER_SCRIPT)
    done = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--python-executable",
                           str(venv / "bin" / "python"), str(script)], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path)
    assert "py.typed" not in done.stdout and "import-untyped" not in done.stdout, done.stdout
    errors = [line for line in done.stdout.splitlines() if ": error:" in line]
    assert len(errors) == 1 and f"{script.name}:13:" in errors[0], done.stdout
    assert 'expression has type "int", variable has type "str"' in errors[0]


def _failure(runner: Runner) -> str:
    label, done = next(((label, done) for label, done in runner.ran if done.returncode), runner.ran[-1])
    return f"{label}:\n{done.stdout}\n{done.stderr}"


MIXED = "nested, several, spaces"


def test_gate_fails_on_the_copying_model(tmp_path: Path, wheel: Path) -> None:
    """The gate in a repository with nested folders, several of them and spaces in names: one annotation for the
    copying program, the summary, and the same check's SARIF for the code-scanning job, which uploads it."""
    repo = user_repo(tmp_path, MIXED)
    (copying,) = copying_programs(MIXED)
    run = Workflow(tmp_path / "run", repo, "pull_request", str(wheel), {"PTE_DEVCONST_SARIF": "true"})
    gate = Runner(tmp_path / "gate", repo, "pull_request", str(wheel))
    assert gate.job("gate", run.context) == CHECK_STEP  # the pull request that ships a copying program fails
    annotations = gate.output(CHECK_STEP).splitlines()
    errors = [line for line in annotations if line.startswith("::error ")]
    (error,) = errors  # one annotation per file: its worst constant and the totals
    assert error.startswith(f"::error file={copying},") and "4 constants copied" in error
    assert not any(CLEAN in line or "classifier" in line for line in annotations)
    assert "torch" not in " ".join(gate.own_packages())  # the gate's install has no torch
    summary = gate.summary.read_text()
    assert "### ❌ pte-devconst check" in summary and f"<code>{copying}</code>" in rendered(summary)
    assert "face classifier.pte" in summary  # the second folder was checked too
    assert not list(repo.rglob("*.devconst.pte"))  # the gate writes nothing
    (sarif,) = (gate.artifacts / "pte-devconst-sarif").iterdir()  # kept: the repository asked for code scanning
    results = json.loads(sarif.read_text())["runs"][0]["results"]
    uris = {r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in results}
    assert uris == {copying.replace(" ", "%20")}
    scanning = Runner(tmp_path / "code-scanning", repo, "pull_request", str(wheel))
    assert scanning.job("code-scanning", run.context) is None
    assert scanning.uploaded_sarif[0]["runs"][0]["results"] == results


def _fixed(repo: Path, fix: Runner, layout: str) -> Path:
    """The fix job's artifact, checked: the rewrites of the copying programs at their paths in the repository,
    each validated, and checked in their places."""
    fixed = repo.parent / "artifact" / "devconst-models"
    assert sorted(p.relative_to(fixed).as_posix() for p in fixed.rglob("*") if p.is_file()) == copying_programs(layout)
    summary = fix.summary.read_text()
    assert summary.count("### pte-devconst validate") == len(copying_programs(layout)) and "FAIL" not in summary
    assert "### ✅ pte-devconst check" in summary
    return fixed


def test_the_fix_job_works_in_any_layout(tmp_path: Path, wheel: Path) -> None:
    """The fix job with programs in nested folders, in several folders, with spaces in their names (issue 28: with
    MODELS=assets/models it copied the originals to original/models/ and validated original/assets/models/...,
    "cannot read"): it rewrites and validates the copying program, drops the identical copies, checks the rewrite
    in its place and uploads it at its path."""
    repo = user_repo(tmp_path, MIXED)
    fix = Runner(tmp_path / "fix", repo, "pull_request", str(wheel))  # needs: gate; if: failure()
    assert fix.job("fix") is None, _failure(fix)
    _fixed(repo, fix, MIXED)


def test_the_fix_job_converts_a_file_the_projects_runtime_cannot_load(tmp_path: Path, wheel: Path) -> None:
    """Issue 35: a project that ships ExecuTorch 1.5 (``runtime = "1.5"``) holds a 1.6 rewrite.  The gate fails it
    (PDC008, the rule's own words), and the fix job converts it, validates the conversion against it, checks the
    converted file in its place and uploads it; the fix job stopped at validate before conversions were proven."""
    repo = user_repo(tmp_path)
    pyproject = repo / "pyproject.toml"
    pyproject.write_text(pyproject.read_text() + 'runtime = "1.5"\n')
    shutil.copy(EXAMPLES / "mlp_copy.devconst.pte", repo / "models" / COPYING)  # the 1.6 encoding
    _git(repo, "commit", "-q", "-am", "a 1.6 rewrite")
    gate = Runner(tmp_path / "gate", repo, "pull_request", str(wheel))
    assert gate.job("gate") == CHECK_STEP
    (error,) = [line for line in gate.output(CHECK_STEP).splitlines() if line.startswith("::error ")]
    assert f"file=models/{COPYING}" in error and "PDC008" in error and "--ptd" not in error
    fix = Runner(tmp_path / "fix", repo, "pull_request", str(wheel))
    assert fix.job("fix") is None, _failure(fix)
    fixed = _fixed(repo, fix, "flat")
    converted = fixed / "models" / COPYING
    code, doc = invoke_json("check", converted, "--runtime", "1.5")
    assert code == 0, doc  # a 1.5 runtime loads it, and nothing is copied per call
    assert converted.read_bytes() != (EXAMPLES / "mlp_copy.devconst.pte").read_bytes()


@pytest.mark.slow
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_a_pull_request_fixed_by_the_artifact_then_passes(tmp_path: Path, wheel: Path, layout: str) -> None:
    """The whole loop, jobs scheduled as GitHub schedules them: the pull request's gate fails, code scanning is
    skipped (not asked for), the fix job's artifact unzipped at the repository's root and committed makes the next
    push's gate pass (and the fix job is skipped)."""
    repo = user_repo(tmp_path, layout)
    run = Workflow(tmp_path / "run", repo, "pull_request", str(wheel))
    assert run.run() == {"gate": "failure", "code-scanning": "skipped", "fix": "success"}, _failure(run.runners["fix"])
    assert run.runners["gate"].skipped == ["Keep the SARIF report for code scanning"]  # none wanted: none kept
    shutil.copytree(_fixed(repo, run.runners["fix"], layout), repo, dirs_exist_ok=True)
    _git(repo, "commit", "-q", "-am", "rewritten models")
    assert not subprocess.run(["git", "status", "--porcelain"], cwd=repo, capture_output=True, text=True).stdout
    again = Workflow(tmp_path / "next push", repo, "push", str(wheel))
    assert again.run() == {"gate": "success", "code-scanning": "skipped", "fix": "skipped"}
    assert "::error" not in again.runners["gate"].output(CHECK_STEP)


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


def _entry(hook: dict[str, Any], files: list[str], repo: Path) -> subprocess.CompletedProcess:
    """What pre-commit runs: the entry, then the staged file names its `files` pattern matches."""
    names = [f for f in files if re.search(hook["files"], f)]
    # The script of the environment running the tests (a `pte-devconst` elsewhere on PATH may be another checkout's).
    script = Path(sys.executable).parent / "pte-devconst"
    tool = str(script) if script.exists() else shutil.which("pte-devconst") or "pte-devconst"
    command = [tool, *hook["entry"].split()[1:], *names]
    return subprocess.run(command, cwd=repo, capture_output=True, text=True, timeout=120)


def test_the_fixing_hook_rewrites_in_place_fails_once_then_passes(tmp_path: Path) -> None:
    """The hooks as pre-commit runs them, in a repository with nested folders, several of them and spaces in
    names (pre-commit passes each staged name as one argument)."""
    repo = user_repo(tmp_path, MIXED)
    (copying,) = copying_programs(MIXED)
    clean, other = f"assets/vision models/{CLEAN}", "more models/face classifier.pte"
    staged = [copying, clean, other, "pyproject.toml"]
    hooks = _hooks()
    check = _entry(hooks["pte-devconst-check"], staged, repo)
    assert check.returncode == 1
    # One line per file, then the summary (the tables with -v).
    assert check.stdout.splitlines()[:3] == [
        f"{copying}: PDC001 4 constants copied to a device on every call (3.2 KiB per call); fix: pte-devconst "
        f"rewrite --in-place '{copying}'", f"{clean}: ok (4 constants examined)", f"{other}: ok (4 constants examined)"]
    assert len(check.stdout.splitlines()) == 4
    before = (repo / clean).read_bytes()
    first = _entry(hooks["pte-devconst-rewrite"], staged, repo)
    assert first.returncode == 1, first.stderr  # it changed a file: the user re-stages it
    assert first.stdout.splitlines() == [
        f"{copying}: 4 tensors moved to device memory (3.2 KiB fewer host-to-device bytes per call); "
        "rewritten in place; needs ExecuTorch >= 1.6 (device initial data; for a 1.5 runtime: --runtime 1.5)",
        f"{clean}: nothing to move", f"{other}: nothing to move"]
    changed = subprocess.run(["git", "status", "--porcelain", "-z"], cwd=repo, capture_output=True, text=True).stdout
    assert changed.split("\0") == [f" M {copying}", ""]  # in place: no NAME.devconst.pte left behind
    assert (repo / clean).read_bytes() == before
    _git(repo, "add", "-A")
    rewritten = (repo / copying).read_bytes()
    second = _entry(hooks["pte-devconst-rewrite"], staged, repo)
    assert second.returncode == 0, second.stdout + second.stderr
    assert (repo / copying).read_bytes() == rewritten
    assert _entry(hooks["pte-devconst-check"], staged, repo).returncode == 0


@pytest.mark.slow
def test_pre_commit_try_repo_runs_the_hooks(tmp_path: Path) -> None:
    """The real pre-commit, installing this checkout as the hook repository (from the index, into its own
    environment, where torch cannot be installed): the fixing hook fails once ("files were modified by this
    hook"), then passes."""
    own = Path(sys.executable).parent / "pre-commit"  # this environment's, as for the hooks' script
    pre_commit = str(own) if own.exists() else shutil.which("pre-commit") or pytest.skip("pre-commit is not installed")
    repo = user_repo(tmp_path, MIXED)  # nested folders, several of them, spaces in names
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
    changed = subprocess.run(["git", "diff", "--name-only", "-z"], cwd=repo, capture_output=True, text=True).stdout
    assert changed.split("\0")[:-1] == copying_programs(MIXED)  # the program with spaces in its path, in place
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
    assert f"models/{COPYING}: ok (4 constants examined; 4 accepted)" in check.stdout
    pyproject.write_text(pyproject.read_text().split("[[tool")[0] + f'exclude = ["models/{COPYING}"]\n')
    assert _entry(hooks["pte-devconst-check"], staged, repo).returncode == 0
    only = _entry(hooks["pte-devconst-check"], [f"models/{COPYING}"], repo)  # nothing left to check: passes
    assert only.returncode == 0 and only.stdout == "" and "excluded" in only.stderr
    before = (repo / "models" / COPYING).read_bytes()
    rewrite = _entry(hooks["pte-devconst-rewrite"], staged, repo)
    assert rewrite.returncode == 0 and (repo / "models" / COPYING).read_bytes() == before
    assert COPYING not in rewrite.stdout
