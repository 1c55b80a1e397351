"""The steps of planning a rewrite, timed apart: ``python -m bench.children.analysis ROUNDS KEY=PATH...``.

Section 4: for each program (alternating, ``ROUNDS`` times after a dropped warm-up round) the seconds of
``open_pte`` (decode + check), ``analyze_program`` and ``make_plan``, and its size (values, instructions,
eligible constants).  Prints JSON: ``{"KEY open": [...], "KEY analyze": [...], "KEY plan": [...],
"KEY total": [...], "KEY meta": [values, instructions, eligible]}``.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any, Optional, Sequence

from bench.children.open_plan import parse_paths


def measure(paths: dict[str, str], rounds: int) -> dict[str, Any]:
    """Seconds per step and size of every program in ``paths`` (see the module's docstring)."""
    from pte_devconst.rewriter.model.analysis import analyze_program
    from pte_devconst.rewriter.plan import RewriteOptions, make_plan
    from pte_devconst.schema.pte_file import open_pte

    out: dict[str, Any] = {}
    for r in range(rounds + 1):
        for key, path in paths.items():
            t0 = time.perf_counter()
            source = open_pte(path)
            t1 = time.perf_counter()
            analysis = analyze_program(source.program)
            t2 = time.perf_counter()
            make_plan(source.program, analysis, RewriteOptions())
            t3 = time.perf_counter()
            plan = source.program.execution_plan[0]
            meta = (len(plan.values or ()), len(plan.chains[0].instructions or ()), len(analysis.eligible))
            source.close()
            if r:
                for part, value in (("open", t1 - t0), ("analyze", t2 - t1), ("plan", t3 - t2), ("total", t3 - t0)):
                    out.setdefault(f"{key} {part}", []).append(value)
            out[f"{key} meta"] = meta
    return out


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 2 or not args[0].isdigit():
        print("usage: python -m bench.children.analysis ROUNDS KEY=PATH...", file=sys.stderr)
        return 2
    print(json.dumps(measure(parse_paths(args[1:]), int(args[0]))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
