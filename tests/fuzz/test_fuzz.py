"""The bounded part of the mutation fuzz suite that every test run executes.

The full run (``python -m tests.fuzz --cases 20000``, or ``pytest -m fuzz
tests/fuzz`` with ``PTE_FUZZ_CASES``) is described in ``docs/robustness.md``.
"""

from __future__ import annotations

import os
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pte_devconst.schema.errors import PteDevconstError
from pte_devconst.schema.ptd_file import PtdFile
from pte_devconst.schema.pte_file import PteFile

from . import harness
from .harness import CliHarness, check_library, scratch_folder
from .mutate import Case, make_case
from .runner import run_cases, run_parallel
from .seeds import load_seeds

BOUNDED_CASES = int(os.environ.get("PTE_FUZZ_CI_CASES", "400"))
BOUNDED_CLI_CASES = 36


def test_cases_are_deterministic_and_cover_every_seed() -> None:
    seeds = load_seeds()
    first = [make_case(7, i) for i in range(len(seeds) * 2)]
    again = [make_case(7, i) for i in range(len(seeds) * 2)]
    assert first == again
    assert {c.seed_name for c in first} == {s.name for s in seeds}
    assert {s.kind for s in seeds} == {"pte", "ptd"}


def test_bounded_library_fuzz() -> None:
    summary = run_cases(seed=0, indices=range(BOUNDED_CASES))
    assert summary.cases == BOUNDED_CASES
    assert summary.failed == 0, summary.report()
    # The mutations must reach both outcomes, or the suite tests nothing.
    assert summary.outcomes["accepted"] > BOUNDED_CASES // 20
    assert summary.outcomes["rejected"] > BOUNDED_CASES // 2


def test_bounded_cli_fuzz() -> None:
    with scratch_folder() as folder:
        cli = CliHarness.create(folder / "cli")
    if cli.skipped:
        pytest.skip(cli.skipped)
    # Case indices that are multiples of 1 so every one runs a command; picks cycle through the templates.
    summary = run_cases(seed=1, indices=range(BOUNDED_CLI_CASES), cli_every=1)
    assert summary.cli_cases == BOUNDED_CLI_CASES
    assert summary.failed == 0, summary.report()


@pytest.mark.fuzz
def test_full_fuzz_run(request: pytest.FixtureRequest) -> None:
    """The >= 20,000-case run; selected only with ``-m fuzz``."""
    if "fuzz" not in (request.config.option.markexpr or ""):
        pytest.skip("the full run: pytest -m fuzz tests/fuzz (or python -m tests.fuzz --cases 20000)")
    cases = int(os.environ.get("PTE_FUZZ_CASES", "20000"))
    summary = run_parallel(seed=0, cases=cases, jobs=os.cpu_count() or 1, cli_every=10, memory_mb=3072)
    print(summary.report())
    assert summary.cases == cases
    assert summary.failed == 0, summary.report()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=300), st.sampled_from([b"ET12", b"FT01"]), st.booleans())
def test_arbitrary_bytes_never_crash(body: bytes, ident: bytes, with_ident: bool) -> None:
    """Whatever the bytes, opening them succeeds or raises a PteDevconstError."""
    data = body[:4] + ident + body[4:] if with_ident else body
    for reader in (PteFile, PtdFile):
        try:
            reader.from_bytes(data).close()
        except PteDevconstError:
            pass


# --- the harness itself must notice the failures it exists for -------------------


def _a_case() -> Case:
    return make_case(0, 0)


def test_harness_reports_a_foreign_exception(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise IndexError("tuple index out of range")

    monkeypatch.setattr(harness.PteFile, "from_bytes", classmethod(lambda cls, data, path="": broken()))
    case = _a_case()
    assert case.kind == "pte"
    outcome = check_library(case)
    assert outcome.status == "failure" and "IndexError" in outcome.detail


def test_harness_reports_a_hang(monkeypatch: pytest.MonkeyPatch) -> None:
    def slow(cls: type, data: bytes, path: str = "") -> None:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:  # a pure-Python loop, as a forged length would cause
            pass

    monkeypatch.setattr(harness.PteFile, "from_bytes", classmethod(slow))
    started = time.monotonic()
    outcome = check_library(_a_case(), bound=0.2)
    assert outcome.status == "failure" and "timeout" in outcome.detail
    assert time.monotonic() - started < 2


def test_harness_reports_a_multiline_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def chatty(cls: type, data: bytes, path: str = "") -> None:
        raise PteDevconstError("first line\nsecond line", file=path)

    monkeypatch.setattr(harness.PteFile, "from_bytes", classmethod(chatty))
    assert check_library(_a_case()).status == "failure"
