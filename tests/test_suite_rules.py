"""Rules about the default suite itself: no wall-clock limit on a test, CI runs the README's command, and the
suite's size and time are stated in one place (issue 45: a per-test budget failed a correct test on a busy
machine, and the README's test command then never reached the type check)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import conftest

ROOT = Path(__file__).resolve().parents[1]

SUITE = '''
import time

def test_slow_but_right():
    time.sleep(0.3)
'''


class _Outcomes:
    """A plugin that keeps each test's final outcome."""

    def __init__(self) -> None:
        self.outcomes: dict[str, str] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "call" or report.outcome != "passed":
            self.outcomes[report.nodeid.split("::")[-1]] = report.outcome


def test_a_slow_default_test_is_never_failed_for_its_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The suite's own plugins (conftest.py) judge a test by its result, never by how long a busy machine took."""
    (tmp_path / "test_timed.py").write_text(SUITE)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    slow: long\n")
    monkeypatch.chdir(tmp_path)
    for name in ("PTE_DEVCONST_TEST_BUDGET_S", "PYTEST_TIMEOUT"):  # what a budget would read: as tight as can be
        monkeypatch.setenv(name, "0.01")
    seen = _Outcomes()
    pytest.main(["-q", "-p", "no:cacheprovider", str(tmp_path)], plugins=[conftest, seen])
    assert seen.outcomes == {"test_slow_but_right": "passed"}
    hooks = [name for name in vars(conftest) if name.startswith("pytest_runtest")]
    assert hooks == [], f"conftest.py hooks into each test's run: {hooks}"
    assert not (ROOT / "tests" / "time_budget.py").exists()


def test_ci_runs_exactly_the_readme_test_command() -> None:
    """.ci/run runs the README's test command as one line, the type check included (not a variant of it)."""
    readme = (ROOT / "README.md").read_text()
    command = next(line for line in readme.splitlines()
                   if line.startswith("python3 -m pip install") and '".[test]"' in line)
    assert command.endswith("&& python3 tests/typecheck.py"), command
    steps = [line for line in (ROOT / ".ci" / "run").read_text().splitlines()
             if line.strip() and not line.lstrip().startswith("#") and not line.startswith(("set ", "cd "))]
    assert steps == [command]
    assert os.access(ROOT / ".ci" / "run", os.X_OK)


# "1,943 tests", "1,846 pass", "148 skip", "ran in 336 s": a statement of the suite's size or time.
SUITE_FIGURE = r"\b\d[\d,]*\s+(?:tests?|passed|pass|skip(?:ped)?)\b|\bran in \d+ s\b"


def test_the_suites_size_and_time_are_stated_in_one_place() -> None:
    """The README's test section holds the suite's size and time; pyproject.toml and the docs point there (issue 28:
    the README, pyproject.toml and the last run gave three different counts)."""
    import re

    root = ROOT
    readme = (root / "README.md").read_text()
    section = readme.split("## Tests, fuzzing and benchmarks", 1)[1].split("\n## ", 1)[0]
    assert len(re.findall(r"\b\d[\d,]* tests\b", section)) == 1  # the count, once
    elsewhere = {"README.md (outside its test section)": readme.replace(section, ""),
                 **{str(path.relative_to(root)): path.read_text()
                    for path in [root / "pyproject.toml", root / ".ci" / "run", *sorted(root.glob("docs/*.md"))]}}
    # a line about another selection (77 GPU tests) may count, and validate's own summary line ("2 passed") is no suite
    other_runs = re.compile(r"-m (?:gpu|slow|fuzz)\b|pairs? validated:")
    stated = {name: found for name, text in elsewhere.items()
              if (found := [hit for line in text.splitlines() if not other_runs.search(line)
                            for hit in re.findall(SUITE_FIGURE, line)])}
    assert stated == {}
    assert "README.md" in (root / "pyproject.toml").read_text().split("[tool.pytest.ini_options]", 1)[1][:400]


# A wall clock read in a test of the default suite: time.perf_counter(), time.monotonic(), time.time().  Bounded-work
# tests measure CPU time (time.process_time(), or a child's rusage), which a busy machine does not inflate.
WALL_CLOCK = ("time.perf_counter()", "time.monotonic()", "time.time()")


def test_no_default_test_bounds_the_wall_clock() -> None:
    """No test asserts on wall time: three did (a fold's analysis under 5 s, a forged .ptd and a 4 GiB hole opened
    under 1 s), and test_bounded_work's commands under 60 s of wall time; they now bound CPU time.  A test may read
    a wall clock only to wait for something (a deadline on a child), never in an assertion."""
    import re

    found = []
    for path in sorted((ROOT / "tests").glob("test_*.py")):
        text = path.read_text()
        clocked = {name for name, clock in re.findall(r"(\w+) = (time\.(?:perf_counter|monotonic|time)\(\))", text)}
        for number, line in enumerate(text.splitlines(), 1):
            if line.lstrip().startswith("assert") and (any(c in line for c in WALL_CLOCK) or any(
                    re.search(rf"\b{name}\b", line) for name in clocked)):
                found.append(f"{path.name}:{number}: {line.strip()}")
    assert found == []
