"""``python -m tests.fuzz``: the full mutation fuzz run (library and command line)."""

from __future__ import annotations

import argparse
import os
import sys
import time

from .harness import check_library, CliHarness, scratch_folder
from .mutate import make_case
from .runner import run_parallel


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__)
    parser.add_argument("--cases", type=int, default=20000, help="library-level cases (default 20000)")
    parser.add_argument("--seed", type=int, default=0, help="run seed; case i is the same for the same seed")
    parser.add_argument("--start", type=int, default=0, help="first case index")
    parser.add_argument("--cli-every", type=int, default=10,
                        help="also run every N-th case through the command line (0: never)")
    parser.add_argument("--commands", default="", help="comma-separated commands to fuzz (default: all registered)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--memory-mb", type=int, default=3072,
                        help="address-space limit per worker, so a huge allocation fails loudly (0: none)")
    parser.add_argument("--only", type=int, help="replay one case and print its outcome")
    parser.add_argument("--show", type=int, default=10, help="failures to print in full")
    args = parser.parse_args(argv)
    commands = set(filter(None, args.commands.split(","))) or None

    if args.only is not None:
        case = make_case(args.seed, args.only)
        print(case.label)
        outcome = check_library(case)
        print(f"library: {outcome.status} ({outcome.seconds:.3f} s)\n{outcome.detail}")
        with scratch_folder() as folder:
            cli = CliHarness.create(folder, commands)
            for pick in range(len(cli.fitting(case))):
                result = cli.check(case, pick)
                print(f"cli: {result.status}: {result.detail}")
            if cli.skipped:
                print(f"cli: skipped: {cli.skipped}")
        return 1 if outcome.status == "failure" else 0

    began = time.perf_counter()
    summary = run_parallel(args.seed, args.cases, args.jobs, args.cli_every, commands, args.memory_mb, args.start)
    print(summary.report(args.show))
    print(f"wall time: {time.perf_counter() - began:.1f} s")
    return 1 if summary.failed else 0


if __name__ == "__main__":
    sys.exit(main())
