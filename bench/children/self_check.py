"""The writer's copy and the self-check timed apart: ``python -m bench.children.self_check SRC DST ROUNDS``.

For ``--verify sampled`` (the default) and ``full``, alternating, ``ROUNDS`` times after one warm-up round:
one in-process rewrite without fsync (no start-up, no wait for the disk), timed step by step as
bench/children/phases.py times it: the copy is the ``writing`` step, the check the ``self-check`` step
(re-opening and decoding the written file included), and the bytes the check read the growth of ``rchar``
during it.  Prints JSON: ``{"sampled": [{"copy": s, "check": s, "read": bytes}, ...], "full": [...]}``.
"""

from __future__ import annotations

import json
import sys
from typing import Optional, Sequence

from bench.children.phases import one_rewrite

MODES = ("sampled", "full")


def measure(source: str, destination: str, rounds: int) -> dict[str, list[dict[str, float]]]:
    """``rounds`` rewrites per mode, modes alternating, after one warm-up round that is dropped."""
    out: dict[str, list[dict[str, float]]] = {mode: [] for mode in MODES}
    for r in range(rounds + 1):
        for mode in MODES:
            steps = one_rewrite(source, destination, fsync=False, verify=mode)
            if not steps["changed"]:
                raise RuntimeError(f"{source}: the rewrite moved nothing; the benchmark needs a program with "
                                   "eligible constants")
            if r:
                out[mode].append({"copy": steps["writing"], "check": steps["self-check"],
                                  "read": steps["read"]["self-check"]})
    return out


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 3 or not args[2].isdigit():
        print("usage: python -m bench.children.self_check SRC DST ROUNDS", file=sys.stderr)
        return 2
    print(json.dumps(measure(args[0], args[1], int(args[2]))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
