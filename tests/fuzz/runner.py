"""Running many cases (in parallel worker processes) and summing up the outcomes."""

from __future__ import annotations

import collections
import multiprocessing
import os
import resource
from dataclasses import dataclass, field
from typing import Iterable, Optional

from .harness import CliHarness, Outcome, check_library, scratch_folder
from .mutate import make_case


@dataclass
class Summary:
    """Counts per outcome, the failures with their replay command, and the slowest case."""

    seed: int
    cases: int = 0
    outcomes: collections.Counter = field(default_factory=collections.Counter)
    cli_cases: int = 0
    cli_outcomes: collections.Counter = field(default_factory=collections.Counter)
    cli_skipped: str = ""
    failures: list[tuple[int, str, str]] = field(default_factory=list)  # (index, case label, detail)
    slowest: tuple[float, int] = (0.0, -1)

    @property
    def failed(self) -> int:
        return self.outcomes["failure"] + self.cli_outcomes["failure"]

    def add(self, index: int, label: str, outcome: Outcome, cli: bool) -> None:
        (self.cli_outcomes if cli else self.outcomes)[outcome.status] += 1
        if cli:
            self.cli_cases += 1
        else:
            self.cases += 1
        if outcome.status == "failure":
            self.failures.append((index, label, outcome.detail))
        if outcome.seconds > self.slowest[0]:
            self.slowest = (outcome.seconds, index)

    def merge(self, other: "Summary") -> None:
        self.cases += other.cases
        self.cli_cases += other.cli_cases
        self.outcomes.update(other.outcomes)
        self.cli_outcomes.update(other.cli_outcomes)
        self.failures += other.failures
        self.cli_skipped = self.cli_skipped or other.cli_skipped
        self.slowest = max(self.slowest, other.slowest)

    def report(self, show: int = 5) -> str:
        lines = [
            f"fuzz seed {self.seed}: {self.cases} library cases "
            f"({self.outcomes['accepted']} accepted, {self.outcomes['rejected']} rejected with a clean error, "
            f"{self.outcomes['failure']} failures)",
            f"command line: {self.cli_cases} cases ({self.cli_outcomes['accepted']} exit 0, "
            f"{self.cli_outcomes['rejected']} exit 2 with one error line, {self.cli_outcomes['failure']} failures)"
            + (f"; skipped: {self.cli_skipped}" if self.cli_skipped else ""),
            f"slowest case: {self.slowest[1]} ({self.slowest[0]:.3f} s)",
            f"total failures: {self.failed}",
        ]
        for index, label, detail in sorted(self.failures)[:show]:
            lines.append(f"--- FAILED {label}\n    replay: python -m tests.fuzz --seed {self.seed} --only {index}\n"
                         + "\n".join("    " + line for line in detail.splitlines()[-25:]))
        return "\n".join(lines)


def run_cases(seed: int, indices: Iterable[int], cli_every: int = 0, cli_commands: Optional[set[str]] = None,
              ) -> Summary:
    """Run ``indices`` in this process; every ``cli_every``-th case also goes through the command line."""
    summary = Summary(seed)
    with scratch_folder() as folder:
        cli = CliHarness.create(folder / "cli", cli_commands) if cli_every else None
        if cli is not None and cli.skipped:
            summary.cli_skipped = cli.skipped
        for index in indices:
            case = make_case(seed, index)
            summary.add(index, case.label, check_library(case, folder=folder), cli=False)
            if cli is not None and cli.templates and index % cli_every == 0:
                summary.add(index, case.label, cli.check(case, index // cli_every), cli=True)
    return summary


def _worker(job: tuple[int, list[int], int, Optional[set[str]], int]) -> Summary:
    seed, indices, cli_every, commands, memory_mb = job
    if memory_mb:
        limit = memory_mb << 20
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    return run_cases(seed, indices, cli_every, commands)


def run_parallel(seed: int, cases: int, jobs: int, cli_every: int, commands: Optional[set[str]] = None,
                 memory_mb: int = 0, start: int = 0) -> Summary:
    """Split ``cases`` cases over ``jobs`` processes (each under an address-space limit of ``memory_mb``)."""
    indices = list(range(start, start + cases))
    jobs = max(1, min(jobs, len(indices) // 50 or 1))
    chunks = [(seed, indices[k::jobs * 8], cli_every, commands, memory_mb) for k in range(jobs * 8)]
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
