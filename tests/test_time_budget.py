"""The default suite's per-test time budget (time_budget.py) fails a slow unmarked test and nothing else."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import time_budget
from time_budget import BUDGET_ENV

SUITE = '''
import time
import pytest

def test_quick():
    pass

def test_over_budget():
    time.sleep(0.25)

@pytest.fixture
def slow_setup():
    time.sleep(0.25)

def test_over_budget_in_setup(slow_setup):
    pass

@pytest.mark.slow
def test_marked_slow():
    time.sleep(0.25)
'''


class _Outcomes:
    """A plugin that keeps each test's final outcome and failure text."""

    def __init__(self) -> None:
        self.outcomes: dict[str, tuple[str, str]] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "call" or report.outcome != "passed":
            self.outcomes[report.nodeid.split("::")[-1]] = (report.outcome, str(report.longrepr or ""))


def test_an_unmarked_test_over_the_budget_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "test_timed.py").write_text(SUITE)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    slow: long\n")
    monkeypatch.chdir(tmp_path)
    seen = _Outcomes()
    saved = os.environ.get(BUDGET_ENV)
    os.environ[BUDGET_ENV] = "0.1"  # for the inner run only: this test is judged by the outer budget after it returns
    try:
        pytest.main(["-q", "-p", "no:cacheprovider", str(tmp_path)], plugins=[time_budget, seen])
    finally:
        if saved is None:
            del os.environ[BUDGET_ENV]
        else:
            os.environ[BUDGET_ENV] = saved
    assert {name: outcome for name, (outcome, _) in seen.outcomes.items()} == {
        "test_quick": "passed", "test_over_budget": "failed", "test_over_budget_in_setup": "failed",
        "test_marked_slow": "passed"}
    assert "over the default suite's per-test budget of 0.1 s" in seen.outcomes["test_over_budget"][1]


# "1,943 tests", "1,846 pass", "148 skip", "ran in 336 s": a statement of the suite's size or time.
SUITE_FIGURE = r"\b\d[\d,]*\s+(?:tests?|passed|pass|skip(?:ped)?)\b|\bran in \d+ s\b"


def test_the_suites_size_and_time_are_stated_in_one_place() -> None:
    """The README's test section holds the suite's size and time; pyproject.toml and the docs point there (issue 28:
    the README, pyproject.toml and the last run gave three different counts)."""
    import re

    root = Path(__file__).resolve().parents[1]
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
