"""A per-test time budget for the default suite: a test that is not marked ``slow`` fails past it.

The default suite is what every change runs, so a test that quietly grows to tens of seconds (a
"sparse" file that writes 4 GiB did) costs everyone.  A test's setup and call together must stay
under ``PTE_DEVCONST_TEST_BUDGET_S`` seconds (``DEFAULT_BUDGET_S``; 0 turns the guard off); past it
the test fails with its time and the way out: make it cheaper, or mark it ``slow``.

The budget is generous on purpose: the slowest default test (the README walk-through) takes 3.6 s on the
two-core machine, 6.8 s while three other test suites share it (load average 4), and the guard must not
fail a test because other processes share the cores.
"""

from __future__ import annotations

import os
from typing import Iterator

import pytest

BUDGET_ENV = "PTE_DEVCONST_TEST_BUDGET_S"
DEFAULT_BUDGET_S = 30.0
_SPENT = pytest.StashKey[float]()


def budget_s() -> float:
    return float(os.environ.get(BUDGET_ENV, DEFAULT_BUDGET_S))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    if call.when == "teardown" or "slow" in item.keywords or report.skipped:
        return
    spent = item.stash.get(_SPENT, 0.0) + report.duration
    item.stash[_SPENT] = spent
    budget = budget_s()
    if call.when == "call" and report.passed and budget > 0 and spent > budget:
        report.outcome = "failed"
        report.longrepr = (f"{item.nodeid} took {spent:.1f} s (setup and call), over the default suite's per-test "
                           f"budget of {budget:g} s ({BUDGET_ENV}): make it cheaper or mark it @pytest.mark.slow")
