"""The bounded part of the mutation fuzz suite that every test run executes.

The full run (``python -m tests.fuzz --cases 20000``, or ``pytest -m fuzz
tests/fuzz`` with ``PTE_FUZZ_CASES``) is described in ``docs/robustness.md``.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from typing import Optional

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pte_devconst.util.errors import PteDevconstError
from pte_devconst.schema.ptd_file import PtdFile
from pte_devconst.schema.pte_file import PteFile

from pte_devconst.schema.decode import decode_flat_tensor, decode_program
from pte_devconst.schema.encode import encode_program

from . import harness, structure
from .differential import check_differential
from .harness import CliHarness, check_library, scratch_folder
from .mutate import Case, _header_info, make_case
from .runner import prepare_differential, run_cases, run_parallel
from .seeds import REPO, Seed, load_seeds, program_seeds, real_model_seeds
from .structure import make_structure_case

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


def test_bounded_etrecord_fuzz() -> None:
    """The ``etrecord`` suite (issue 27): hostile ETRecords through the reader and the names, every 8th also
    through a command with ``--etrecord``; a refused one must end that command in exit 2 with the same line."""
    summary = run_cases(seed=0, indices=range(96), cli_every=8, suite="etrecord")
    assert summary.cases == 96 and summary.cli_cases == 12
    assert summary.failed == 0, summary.report()
    assert summary.outcomes["accepted"] > 5 and summary.outcomes["rejected"] > 40


def test_one_vector_named_by_many_tables_is_read_or_refused_in_one_line() -> None:
    """``list_sharing``'s issue-27 shapes (TensorList and IntList values, kernel arguments and names sharing one
    stored vector or string): small ones read, the others refused by the reader's count of what it hands on."""
    outcomes = []
    for k in range(16):
        seed = program_seeds()[k % len(program_seeds())]
        w = structure.Work(random.Random(f"shared:{k}"), decode_program(seed.data[:_header_info(seed.data)[0]]),
                           None, small=True)
        note = structure.one_vector_many_tables(w)
        if note is None:
            continue
        data, ptd = structure._encode(w, seed)
        outcome = check_library(Case(k, "pte", seed.name, note, data, ptd, "structure"))
        assert outcome.status != "failure", f"{note}: {outcome.detail}"
        outcomes.append(outcome)
    assert any(o.status == "accepted" for o in outcomes)
    assert any("counted at every table that names them" in o.detail for o in outcomes)


@pytest.mark.fuzz
def test_full_fuzz_run(request: pytest.FixtureRequest) -> None:
    """The >= 20,000-case run of every suite with the differential check; selected only with ``-m fuzz``."""
    if "fuzz" not in (request.config.option.markexpr or ""):
        pytest.skip("the full run: pytest -m fuzz tests/fuzz (or python -m tests.fuzz --suite all --differential)")
    cases = int(os.environ.get("PTE_FUZZ_CASES", "20000"))
    summary = run_parallel(seed=0, cases=cases, jobs=os.cpu_count() or 1, cli_every=10, memory_mb=3072,
                           suite="all", differential=True,
                           differential_every=int(os.environ.get("PTE_FUZZ_DIFFERENTIAL_EVERY", "1")))
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


# --- the structure-aware families and the differential check -------------------------------------


@pytest.fixture
def one_torch_thread():  # noqa: ANN201
    """The differential check forks the runtime's children: one torch thread, as in the fuzz workers."""
    torch = pytest.importorskip("torch")
    threads = torch.get_num_threads()
    prepare_differential()
    yield
    torch.set_num_threads(threads)


def _family_case(family: structure.Family, seed: Seed, key: str) -> Optional[Case]:
    """``family`` applied once to ``seed`` (None when it does not apply there)."""
    w = structure.Work(random.Random(key), decode_program(seed.data[:_header_info(seed.data)[0]]),
                       None if seed.ptd is None else decode_flat_tensor(seed.ptd[:_header_info(seed.ptd)[0]]),
                       small=True)
    note = family(w)
    if note is None or "tables" in note:  # the table-limit shape takes a minute through every check
        return None
    data, ptd = structure._encode(w, seed)
    return Case(0, "pte", seed.name, f"{family.__name__}: {note}", data, ptd, "structure")


def _family_cases(family: structure.Family) -> list[Case]:
    """Two cases of a structure-aware family: applied to the first device program and the first CPU program
    (which the real runtime can run) that it fits."""
    cases = []
    for cpu in (False, True):
        found = (_family_case(family, seed, f"smoke:{family.__name__}") for seed in program_seeds()
                 if ("cpu" in seed.name) == cpu)
        case = next((c for c in found if c is not None), None)
        if case is None and family is structure.expanding_fold:  # no corpus program expands: a real model
            found = (_family_case(family, seed, f"smoke:{family.__name__}")
                     for seed in sorted(real_model_seeds(), key=lambda s: len(s.data)) if ("cpu" in seed.name) == cpu)
            case = next((c for c in found if c is not None), None)
        if case is not None:
            cases.append(case)
    return cases


def test_structure_cases_are_deterministic_and_every_family_applies() -> None:
    assert [make_structure_case(3, i) for i in range(6)] == [make_structure_case(3, i) for i in range(6)]
    assert [make_structure_case(3, i, "real") for i in range(4)] \
        == [make_structure_case(3, i, "real") for i in range(4)]
    applied = {case.mutation.split(":")[0] for family, _ in structure.FAMILIES for case in _family_cases(family)}
    assert applied == {f.__name__ for f, _ in structure.FAMILIES}


def test_the_shared_encoding_shares_and_decodes_to_the_same_program() -> None:
    """list_sharing's file-level variant: identical vectors and tables written once, read back unchanged."""
    seed = next(s for s in program_seeds() if "copy" in s.name)
    program = decode_program(seed.data[:_header_info(seed.data)[0]])
    shared = structure._shared_program(program)
    assert decode_program(shared) == program
    assert len(shared) < len(encode_program(program))


@pytest.mark.parametrize("family", [family for family, _ in structure.FAMILIES], ids=lambda f: f.__name__)
def test_every_structure_family_passes_the_library_and_the_differential_check(family: structure.Family,
                                                                              one_torch_thread: None) -> None:
    """A smoke sample: each family once (a test each, so each fits the per-test budget), through the reader and
    through every rewrite's differential check."""
    with scratch_folder() as folder:
        for case in _family_cases(family):
            assert check_library(case).status != "failure", case.label
            outcome = check_differential(case, folder)
            assert outcome.status == "accepted", f"{case.label}: {outcome.detail}"


def test_the_differential_check_reaches_every_judge(one_torch_thread: None) -> None:
    """The judges are reached by the families' cases (so the test above cannot pass by judging nothing): validate
    passed rewrites, and the runtime ran originals and rewrites.  Stops at the first families that reach all."""
    wanted = {"device: validated", "host: bit-identical in the runtime", "runner: agrees with the runtime"}
    stages: set[str] = set()
    with scratch_folder() as folder:
        for family, _ in structure.FAMILIES:
            for case in _family_cases(family):
                stages.update(check_differential(case, folder).stages)
            if wanted <= stages:
                break
    assert wanted <= stages


def test_the_differential_check_reports_a_wrong_rewrite_that_exited_0(monkeypatch: pytest.MonkeyPatch,
                                                                       one_torch_thread: None) -> None:
    """With the copy rules switched off (the shared-memory rule and the static-view rule) and the self-check too
    (it refuses such a file), a static view of a copy's output makes a wrong rewrite (exit 0): the check must call
    it a failure, naming the delegate boundary that differs."""
    from pte_devconst.program.method_context import MethodContext
    from pte_devconst.program.copy_memory import CopyMemory

    seed = next(s for s in program_seeds() if s.name.endswith("v_k_cuda1_copy.pte"))
    found = (_family_case(structure.alias_copy_destination, seed, f"view:{k}") for k in range(40))
    # a view of the device copy of constant 0 or 1 (values 7, 8), read by a second call (not a redirect)
    case = next(c for c in found if c is not None and "call)" in c.mutation
                and any(f" destination {value} " in c.mutation for value in (7, 8)))
    monkeypatch.setattr(CopyMemory, "problem", lambda self, copy, dst, readers, **options: None)
    monkeypatch.setattr(MethodContext, "views_of", lambda self, value: [])
    monkeypatch.setattr("pte_devconst.rewriter.rewrite.check_rewrite", lambda *args, **kwargs: None)
    with scratch_folder() as folder:
        outcome = check_differential(case, folder, runtime=False)
    assert outcome.status == "failure" and "validate failed" in outcome.detail \
        and "delegate boundaries" in outcome.detail


def test_the_runtime_comparison_reports_a_rewrite_that_computes_otherwise(monkeypatch: pytest.MonkeyPatch,
                                                                           one_torch_thread: None) -> None:
    """A host-placement rewrite whose moved constant lost its bytes: the runtime's outputs differ, a failure."""
    from pte_devconst.rewriter import apply as apply_module

    real = apply_module._mutable_content

    def zeroed(source, plan, ptd=None):  # noqa: ANN001, ANN202 - initial data of the right size, all zeros
        content, offsets, index = real(source, plan, ptd)
        content.pieces = [(start, bytes(piece.size if hasattr(piece, "size") else len(piece)))
                          for start, piece in content.pieces]
        return content, offsets, index

    monkeypatch.setattr(apply_module, "_mutable_content", zeroed)
    monkeypatch.setattr("pte_devconst.rewriter.rewrite.check_rewrite", lambda *args, **kwargs: None)
    seed = next(s for s in program_seeds() if s.name.endswith("v_h_cpu_only.pte"))
    case = Case(0, "pte", seed.name, "unchanged", seed.data, None, "structure")
    with scratch_folder() as folder:
        outcome = check_differential(case, folder)
    assert outcome.status == "failure" and "host placement: runtime outputs differ" in outcome.detail


def test_the_runtime_oracle_contains_crashes_and_hangs(monkeypatch: pytest.MonkeyPatch, one_torch_thread: None) -> None:
    """A program that crashes or hangs the runtime ends its child, never the fuzz worker."""
    import os

    from . import oracle

    seed = next(s for s in program_seeds() if s.name.endswith("v_h_cpu_only.pte"))
    monkeypatch.setattr(oracle, "_child", lambda *args: os.abort())
    assert oracle.run_in_runtime(REPO / seed.name, None, {"forward": []}).status == "crash"
    monkeypatch.setattr(oracle, "_child", lambda *args: time.sleep(30))
    started = time.monotonic()
    assert oracle.run_in_runtime(REPO / seed.name, None, {"forward": []}, time_limit=0.5).status == "timeout"
    assert time.monotonic() - started < 5


ABORTING_CHILD = """
import faulthandler, os, sys, types
from pathlib import Path
from tests.fuzz import oracle
faulthandler.enable(file=os.dup(2))  # as pytest enables it: on a copy of stderr
sys.modules["torch"] = types.ModuleType("torch")  # only a child's outputs need it: this child aborts first
oracle.import_runtime = lambda: None
oracle._child = lambda *args: os.abort()
run = oracle.run_in_runtime(Path(sys.argv[1]), None, {"forward": []})
print(run.status, run.detail)
"""


def test_a_crashing_child_reports_to_its_log_not_the_parents_stderr() -> None:
    """A passing test run printed two ``Fatal Python error`` dumps (issue 28): the fault handler pytest enables
    writes to a copy of the parent's stderr, which a forked child inherits.  The child's crash is still found (its
    signal) and its dump is in its own log, quoted in the detail.  (The runtime is not imported: the child aborts.)"""
    seed = next(s for s in program_seeds() if s.name.endswith("v_h_cpu_only.pte"))
    done = subprocess.run([sys.executable, "-c", ABORTING_CHILD, str(REPO / seed.name)],
                          capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert "Fatal Python error" not in done.stderr, done.stderr
    assert done.stdout.startswith("crash killed by SIGABRT") and "Fatal Python error: Aborted" in done.stdout


def test_the_time_bound_judges_the_tools_cpu_not_the_machines_load(monkeypatch: pytest.MonkeyPatch) -> None:
    """A case that waits (a loaded machine: little CPU, much wall time) passes; one that computes past its bound
    fails.  (A 20,000-case run sharing two cores with six jobs failed 27 cases on wall time alone.)"""
    seed = next(s for s in program_seeds() if "copy" in s.name)
    case = Case(0, "pte", seed.name, "unchanged", seed.data, seed.ptd, "classic")

    def waits(pte: PteFile) -> None:
        time.sleep(0.5)

    def computes(pte: PteFile) -> None:
        end = time.process_time() + 0.5
        while time.process_time() < end:
            pass

    monkeypatch.setattr(harness, "_exercise_pte", waits)
    assert check_library(case, bound=0.2).status == "accepted"
    monkeypatch.setattr(harness, "_exercise_pte", computes)
    outcome = check_library(case, bound=0.2)
    assert outcome.status == "failure" and "CPU" in outcome.detail
