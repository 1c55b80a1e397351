"""Running many cases (in parallel worker processes) and summing up the outcomes.

A run draws its cases from one suite, or from all of them in turn:

* ``classic``: ``mutate.make_case`` (byte, field, huge-size and foreign mutations of the corpus and
  example files; the numbering of the earlier runs in docs/robustness.md);
* ``structure``: ``structure.make_structure_case`` on the corpus and example programs;
* ``real``: the same on the real-model fixtures;
* ``etrecord``: ``etrecord.make_etrecord_case``, hostile ETRecords for ``--etrecord`` (issue 27);
* ``all``: case i of the run is case i // 4 of classic, structure, real and etrecord in turn.

Every case goes through the library check; every ``cli_every``-th through the command line; with
``differential``, every ``.pte`` case through ``differential.check_differential``.
"""

from __future__ import annotations

import collections
import multiprocessing
import os
import resource
from dataclasses import dataclass, field
from typing import Iterable, Optional

from .harness import CliHarness, Outcome, check_library, scratch_folder
from .mutate import Case, make_case

SUITES = ("classic", "structure", "real", "etrecord")


def case_of(seed: int, suite: str, index: int) -> Case:
    """Case ``index`` of ``suite`` (for ``all``: case ``index // 3`` of the suite whose turn it is)."""
    if suite == "all":
        suite, index = SUITES[index % len(SUITES)], index // len(SUITES)
    if suite == "classic":
        return make_case(seed, index)
    if suite == "etrecord":
        from .etrecord import make_etrecord_case

        return make_etrecord_case(seed, index)
    from .structure import make_structure_case

    return make_structure_case(seed, index, suite)


@dataclass
class Summary:
    """Counts per outcome and per differential stage, the failures with their replay command, the slowest case."""

    seed: int
    cases: int = 0
    outcomes: collections.Counter = field(default_factory=collections.Counter)
    cli_cases: int = 0
    cli_outcomes: collections.Counter = field(default_factory=collections.Counter)
    cli_skipped: str = ""
    differential_cases: int = 0
    differential_outcomes: collections.Counter = field(default_factory=collections.Counter)
    stages: collections.Counter = field(default_factory=collections.Counter)
    seconds: collections.Counter = field(default_factory=collections.Counter)  # per check: library, cli, differential
    suites: collections.Counter = field(default_factory=collections.Counter)
    failures: list[tuple[str, int, str, str]] = field(default_factory=list)  # (suite, index, case label, detail)
    slowest: tuple[float, str, int] = (0.0, "", -1)

    @property
    def failed(self) -> int:
        return (self.outcomes["failure"] + self.cli_outcomes["failure"]
                + self.differential_outcomes["failure"])

    def add(self, case: Case, outcome: Outcome, check: str) -> None:
        counts = {"library": self.outcomes, "cli": self.cli_outcomes, "differential": self.differential_outcomes}
        counts[check][outcome.status] += 1
        if check == "library":
            self.cases += 1
            self.suites[case.suite] += 1
        elif check == "cli":
            self.cli_cases += 1
        else:
            self.differential_cases += 1
            self.stages.update(outcome.stages)
        self.seconds[check] += outcome.seconds
        if outcome.status == "failure":
            self.failures.append((case.suite, case.index, f"{check}: {case.label}", outcome.detail))
        if outcome.seconds > self.slowest[0]:
            self.slowest = (outcome.seconds, case.suite, case.index)

    def merge(self, other: "Summary") -> None:
        for name in ("cases", "cli_cases", "differential_cases"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for name in ("outcomes", "cli_outcomes", "differential_outcomes", "stages", "seconds", "suites"):
            getattr(self, name).update(getattr(other, name))
        self.failures += other.failures
        self.cli_skipped = self.cli_skipped or other.cli_skipped
        self.slowest = max(self.slowest, other.slowest)

    def _mean_ms(self, check: str, count: int) -> str:
        return f"{1000 * self.seconds[check] / count:.1f} ms per case" if count else "no cases"

    def report(self, show: int = 5) -> str:
        suites = ", ".join(f"{n} {s}" for s, n in sorted(self.suites.items()))
        lines = [
            f"fuzz seed {self.seed}: {self.cases} library cases ({suites}): "
            f"{self.outcomes['accepted']} accepted, {self.outcomes['rejected']} rejected with a clean error, "
            f"{self.outcomes['failure']} failures ({self._mean_ms('library', self.cases)})",
            f"command line: {self.cli_cases} cases ({self.cli_outcomes['accepted']} exit 0, "
            f"{self.cli_outcomes['rejected']} exit 2 with one error line, {self.cli_outcomes['failure']} failures)"
            + (f"; skipped: {self.cli_skipped}" if self.cli_skipped else ""),
        ]
        if self.differential_cases:
            from .differential import STAGES

            lines.append(f"differential: {self.differential_cases} cases, {self.differential_outcomes['failure']} "
                         f"failures ({self._mean_ms('differential', self.differential_cases)})")
            lines += [f"  {self.stages[stage]:7d}  {stage}" for stage in STAGES if self.stages[stage]]
        lines += [f"slowest case: {self.slowest[1]} {self.slowest[2]} ({self.slowest[0]:.3f} s)",
                  f"total failures: {self.failed}"]
        for suite, index, label, detail in sorted(self.failures)[:show]:
            lines.append(f"--- FAILED {label}\n    replay: python -m tests.fuzz --suite {suite} --seed {self.seed} "
                         f"--only {index}\n" + "\n".join("    " + line for line in detail.splitlines()[-25:]))
        return "\n".join(lines)


@dataclass(frozen=True)
class Checks:
    """What to run on each case besides the library check."""

    cli_every: int = 0  # every N-th case through the command line (0: never)
    cli_commands: Optional[frozenset[str]] = None
    differential: bool = False
    runtime: bool = True  # the real 1.5.1 runtime in the differential check
    differential_every: int = 1  # every N-th .pte case through the differential check


def prepare_differential() -> None:
    """Once per worker: one torch thread (two workers share two cores) and the runtime imported before forking."""
    import torch

    from .oracle import import_runtime

    torch.set_num_threads(1)
    import_runtime()


def run_cases(seed: int, indices: Iterable[int], cli_every: int = 0, cli_commands: Optional[set[str]] = None, *,
              suite: str = "classic", checks: Optional[Checks] = None) -> Summary:
    """Run ``indices`` of ``suite`` in this process (``checks`` overrides ``cli_every`` and ``cli_commands``)."""
    checks = checks or Checks(cli_every, frozenset(cli_commands) if cli_commands else None)
    summary = Summary(seed)
    with scratch_folder() as folder:
        cli = CliHarness.create(folder / "cli", set(checks.cli_commands) if checks.cli_commands else None) \
            if checks.cli_every else None
        if cli is not None and cli.skipped:
            summary.cli_skipped = cli.skipped
        differential = folder / "differential"
        if checks.differential:
            from .differential import check_differential

            differential.mkdir()
            if checks.runtime:
                prepare_differential()
        for index in indices:
            case = case_of(seed, suite, index)
            summary.add(case, check_library(case, folder=folder), "library")
            if cli is not None and cli.templates and index % checks.cli_every == 0:
                summary.add(case, cli.check(case, index // checks.cli_every), "cli")
            if checks.differential and case.kind == "pte" and index % checks.differential_every == 0:
                opaque = index // checks.differential_every % 2 == 0  # half with opaque delegates, half executed
                outcome = check_differential(case, differential, opaque=opaque, runtime=checks.runtime)
                summary.add(case, outcome, "differential")
    return summary


def _worker(job: tuple[int, str, list[int], Checks, int]) -> Summary:
    seed, suite, indices, checks, memory_mb = job
    if memory_mb:
        limit = memory_mb << 20
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    return run_cases(seed, indices, suite=suite, checks=checks)


def run_parallel(seed: int, cases: int, jobs: int, cli_every: int, commands: Optional[set[str]] = None,
                 memory_mb: int = 0, start: int = 0, *, suite: str = "classic", differential: bool = False,
                 runtime: bool = True, differential_every: int = 1) -> Summary:
    """Split ``cases`` cases over ``jobs`` processes (each under an address-space limit of ``memory_mb``)."""
    checks = Checks(cli_every, frozenset(commands) if commands else None, differential, runtime,
                    max(1, differential_every))
    indices = list(range(start, start + cases))
    jobs = max(1, min(jobs, len(indices) // 50 or 1))
    chunks = [(seed, suite, indices[k::jobs * 8], checks, memory_mb) for k in range(jobs * 8)]
    total = Summary(seed)
    if jobs == 1:
        for chunk in chunks:
            total.merge(_worker(chunk))
        return total
    context = multiprocessing.get_context("fork" if os.name == "posix" else "spawn")
    with context.Pool(jobs, maxtasksperchild=4) as pool:
        for part in pool.imap_unordered(_worker, chunks):
            total.merge(part)
    return total
