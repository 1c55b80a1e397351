"""``python -m tests.fuzz``: the full mutation fuzz run (library, command line, differential check)."""

from __future__ import annotations

import argparse
import os
import sys
import time

from .harness import check_library, CliHarness, scratch_folder
from .runner import SUITES, case_of, prepare_differential, run_parallel


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__)
    parser.add_argument("--cases", type=int, default=20000, help="cases to run (default 20000)")
    parser.add_argument("--suite", choices=SUITES + ("all",), default="classic",
                        help="classic (byte and field mutations), structure (structure-aware mutations of the "
                             "corpus and examples), real (of the real-model fixtures), etrecord (hostile ETRecords "
                             "for --etrecord), or all of them in turn")
    parser.add_argument("--differential", action="store_true",
                        help="also check every rewrite against its original (validate, the real 1.5.1 runtime)")
    parser.add_argument("--differential-every", type=int, default=1, metavar="N",
                        help="with --differential, check only every N-th case (index %% N == 0); default 1")
    parser.add_argument("--no-runtime", action="store_true",
                        help="differential check without the real runtime (validate only)")
    parser.add_argument("--seed", type=int, default=0, help="run seed; case i is the same for the same seed")
    parser.add_argument("--start", type=int, default=0, help="first case index")
    parser.add_argument("--cli-every", type=int, default=10,
                        help="also run every N-th case through the command line (0: never)")
    parser.add_argument("--commands", default="", help="comma-separated commands to fuzz (default: all registered)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--memory-mb", type=int, default=3072,
                        help="address-space limit per worker, so a huge allocation fails loudly (0: none)")
    parser.add_argument("--only", type=int, help="replay one case and print its outcome")
    parser.add_argument("--family", default="",
                        help="structure and real suites: apply only this family (e.g. aliasing_value_table)")
    parser.add_argument("--show", type=int, default=10, help="failures to print in full")
    args = parser.parse_args(argv)
    if args.family:
        os.environ["PTE_FUZZ_FAMILY"] = args.family  # read by structure._families, inherited by the workers
    commands = set(filter(None, args.commands.split(","))) or None

    if args.only is not None:
        return _replay(args.seed, args.suite, args.only, commands, args.differential, not args.no_runtime)

    began = time.perf_counter()
    summary = run_parallel(args.seed, args.cases, args.jobs, args.cli_every, commands, args.memory_mb, args.start,
                           suite=args.suite, differential=args.differential, runtime=not args.no_runtime,
                           differential_every=args.differential_every)
    print(summary.report(args.show))
    print(f"wall time: {time.perf_counter() - began:.1f} s")
    return 1 if summary.failed else 0


def _replay(seed: int, suite: str, index: int, commands: set[str] | None, differential: bool, runtime: bool) -> int:
    case = case_of(seed, suite, index)
    print(case.label)
    outcome = check_library(case)
    print(f"library: {outcome.status} ({outcome.seconds:.3f} s)\n{outcome.detail}")
    failed = outcome.status == "failure"
    with scratch_folder() as folder:
        cli = CliHarness.create(folder / "cli", commands)
        for pick in range(len(cli.fitting(case))):
            result = cli.check(case, pick)
            failed |= result.status == "failure"
            print(f"cli: {result.status}: {result.detail}")
        if cli.skipped:
            print(f"cli: skipped: {cli.skipped}")
        if differential and case.kind == "pte":
            from .differential import check_differential

            if runtime:
                prepare_differential()
            (folder / "differential").mkdir()
            for opaque in (True, False):
                result = check_differential(case, folder / "differential", opaque=opaque, runtime=runtime)
                failed |= result.status == "failure"
                print(f"differential (opaque delegates: {opaque}): {result.status} ({result.seconds:.3f} s), "
                      f"stages: {', '.join(result.stages)}\n{result.detail}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
