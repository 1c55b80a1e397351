"""Open, analyse and plan a program in-process, timed: ``python -m bench.children.open_plan ROUNDS KEY=PATH...``.

Section 2's figure without start-up: ``plan_file`` on each program, the programs alternating, ``ROUNDS``
times after a warm-up round that is dropped.  Prints JSON: seconds per KEY.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Optional, Sequence


def measure(paths: dict[str, str], rounds: int) -> dict[str, list[float]]:
    """Seconds of open + analyse + plan of every ``paths`` value, per key, ``rounds`` times."""
    from pte_devconst.rewriter.plan import RewriteOptions
    from pte_devconst.rewriter.rewrite import plan_file
    from pte_devconst.schema.pte_file import open_pte

    out: dict[str, list[float]] = {key: [] for key in paths}
    for r in range(rounds + 1):
        for key, path in paths.items():
            start = time.perf_counter()
            with open_pte(path) as source:
                plan_file(source, None, RewriteOptions())
            if r:
                out[key].append(time.perf_counter() - start)
    return out


def parse_paths(pairs: Sequence[str]) -> dict[str, str]:
    """``KEY=PATH`` arguments as a dict, in order."""
    paths = {}
    for pair in pairs:
        key, sep, path = pair.partition("=")
        if not sep or not key or not path:
            raise ValueError(f"expected KEY=PATH, got {pair!r}")
        paths[key] = path
    return paths


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 2 or not args[0].isdigit():
        print("usage: python -m bench.children.open_plan ROUNDS KEY=PATH...", file=sys.stderr)
        return 2
    print(json.dumps(measure(parse_paths(args[1:]), int(args[0]))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
