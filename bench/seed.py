"""The seed's shape at real size (issue 18): N weights feeding one ``cuda:0`` delegate, copy and legacy style.

``measure(paths, rounds)`` runs in a child process (``python -m bench.seed PATH...``) and prints JSON: per file,
the in-process seconds of open, analyze and plan (first round discarded), the counts, and the planned device
memory before and after a rewrite.  ``bench/run.py`` section 8 compares 100k with 10k constants and reports the
device memory of every big program, the 1 GiB export included.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any, Optional, Sequence


def measure(paths: Sequence[str], rounds: int) -> dict[str, Any]:
    """Per path: seconds of open, analyze, plan and total (``rounds`` after a dropped one), counts, device memory."""
    from pte_devconst.rewriter.model.analysis import analyze_program
    from pte_devconst.rewriter.plan import RewriteOptions, make_plan
    from pte_devconst.schema.pte_file import open_pte

    out: dict[str, Any] = {}
    for r in range(rounds + 1):
        for path in paths:
            t0 = time.perf_counter()
            source = open_pte(path)
            t1 = time.perf_counter()
            analysis = analyze_program(source.program)
            t2 = time.perf_counter()
            plan = make_plan(source.program, analysis, RewriteOptions())
            t3 = time.perf_counter()
            entry = out.setdefault(path, {"open": [], "analyze": [], "plan": [], "total": []})
            if r:
                for part, value in (("open", t1 - t0), ("analyze", t2 - t1), ("plan", t3 - t2), ("total", t3 - t0)):
                    entry[part].append(value)
            memory = plan.memory
            entry.update(values=len(source.program.execution_plan[0].values or ()), eligible=len(analysis.eligible),
                         moved=len(plan.placements), before=memory.before, after=memory.after, bound=memory.bound,
                         appended=memory.appended)
            source.close()
    return out


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    rounds = int(args.pop(0)) if args and args[0].isdigit() else 3
    if not args:
        print("usage: python -m bench.seed [ROUNDS] PATH...", file=sys.stderr)
        return 2
    print(json.dumps(measure(args, rounds)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
