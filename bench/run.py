"""Run every performance comparison of issue 5 side by side and write bench/RESULTS.md.

    python -m bench                    # everything, 5 rounds (about 15 minutes on 2 cores)
    python -m bench --rounds 7 --only rewrite,startup
    python -m bench --list             # the sections
    python -m bench --tiny             # every section on inputs of a few KiB: checks that it runs (seconds)

Inputs are built once and cached under bench/cache/ (git-ignored; bench/inputs.py): the 1 GiB program with
the real ExecuTorch 1.5.1 exporter (bench/export_big.py), its 4 MiB and 4 GiB variants and the analysis
programs with this project's writer (bench/synth.py), and the runner's big examples
(examples/export_examples.py --big).  Every measurement runs in a child process (wall clock around
it; peak RSS from ``/usr/bin/time -f %M``; bench/common.py), the compared commands alternate
within each round, and each figure is the median of the rounds with min-max.  Before every
timed file-writing run, outputs are deleted and ``sync`` flushes earlier writes, untimed.
Each section is a module of bench/sections/, each in-process measurement a module of bench/children/.
"""

from __future__ import annotations

import argparse
import datetime
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Optional, Sequence

from bench.common import HERE, Report, machine, verdict
from bench.inputs import CACHE, Inputs, prepare
from bench.sections import SECTIONS


def run_sections(names: Sequence[str], rounds: int, inputs: Inputs) -> Report:
    """Run the named sections in order on ``inputs``; their report (the outputs folder is removed after)."""
    report = Report()
    inputs.out.mkdir(parents=True, exist_ok=True)
    try:
        for name in names:
            print(f"[{name}] {SECTIONS[name].__doc__}", flush=True)
            SECTIONS[name](rounds, report, inputs)
    finally:
        shutil.rmtree(inputs.out, ignore_errors=True)
    return report


def render(report: Report, command: str, started: datetime.datetime, finished: datetime.datetime, folder: Path) -> str:
    """bench/RESULTS.md's text: the heading, the machine, the command, the summary table, then every section."""
    head = [
        "# pte-devconst performance results (issue 5)",
        "",
        f"Date: {started:%Y-%m-%d %H:%M} (took {(finished - started).total_seconds() / 60:.1f} min)."
        f" Machine: {machine(folder)}.",
        f"Command: `{command}`. Each figure: median of the rounds (min-max); ratios are taken per round, since the"
        " compared commands run back to back in every round. Ratios first; absolute times are context. See"
        " docs/performance.md for how the tool gets there and what each figure means.",
        "",
        "## Summary",
        "",
        "| target | figure: median (min-max) | limit | verdict |",
        "|---|---|---|---|",
        *[f"| {t} | {f} | {lim} | {verdict(ok)} |" for t, f, lim, ok in report.summary],
        "",
        "Section 6 (runner) has byte counts, not a pass/fail target; it was measured with simulated devices (no GPU).",
        "",
    ]
    return "\n".join(head + report.lines) + "\n"


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="rounds per comparison (median of these; default 5)")
    parser.add_argument("--only", default=",".join(SECTIONS), help="comma-separated sections (default: all)")
    parser.add_argument("--list", action="store_true", help="list the sections and exit")
    parser.add_argument("--results", type=Path, default=None,
                        help="where to write the report (default bench/RESULTS.md; with --tiny, a temporary folder)")
    parser.add_argument("--tiny", action="store_true",
                        help="inputs of a few KiB built in a temporary folder, no warm-up: checks that every section"
                             " runs, in seconds; its figures mean nothing")
    args = parser.parse_args(argv)
    if args.list:
        for name, function in SECTIONS.items():
            print(f"{name:12} {function.__doc__}")
        return 0
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    chosen = [s for s in args.only.split(",") if s]
    unknown = set(chosen) - set(SECTIONS)
    if unknown:
        parser.error(f"unknown sections: {', '.join(sorted(unknown))}")
    command = (f"python -m bench --rounds {args.rounds}"
               + (f" --only {args.only}" if args.only != ",".join(SECTIONS) else ""))
    if args.tiny:
        with tempfile.TemporaryDirectory(prefix="bench-tiny-") as folder:
            started = datetime.datetime.now()
            report = run_sections(chosen, args.rounds, Inputs.tiny(Path(folder)))
            text = render(report, command + " --tiny", started, datetime.datetime.now(), Path(folder))
        results = args.results or Path(tempfile.mkdtemp(prefix="bench-tiny-results-")) / "RESULTS.md"
    else:
        free = shutil.disk_usage(CACHE.parent).free / 2**30
        if free < 12:
            print(f"warning: only {free:.1f} GiB free; the 4 GiB cases need about 10 GiB", file=sys.stderr)
        inputs = Inputs.cached()
        prepare(inputs, set(chosen))
        started = datetime.datetime.now()
        report = run_sections(chosen, args.rounds, inputs)
        text = render(report, command, started, datetime.datetime.now(), CACHE)
        results = args.results or HERE / "RESULTS.md"
    results.write_text(text)
    print(f"wrote {results}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
