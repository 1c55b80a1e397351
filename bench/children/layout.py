"""The device-memory layout's cost at growing size: ``python -m bench.children.layout ROUNDS N...``.

Section 9: for each N, ``plan_layout`` (program/layout.py) on two buffers of N device values, timed in CPU
seconds (``ROUNDS`` times after a dropped warm-up round):

* ``live N``: the seed's shape with N weights the host also reads (bench/synth.py ``seed_program(N + 1,
  host_reads=N)``): their N per-call device copies are all live at once at the delegate call, and the one weight
  only the delegate reads moves, so a rewrite lays the device buffer out again.  The storage groups are those the
  rewrite's plan lays out (the edited method, the moved copy's destination unplanned).
* ``short N``: N values of 16 B to 64 KiB, each live for 1 to 30 of 2N program positions, as activations are.

Prints JSON: ``{"live N": {"seconds": [...], "groups": G, "steps": S, "size": B, "bound": B}, ...}``; ``steps`` is
the layout's work in its budget's units (``LayoutWork``).
"""

from __future__ import annotations

import json
import random
import sys
import time
from typing import Any, Optional, Sequence


def live_groups(n: int) -> list[Any]:
    """The storage groups of the device buffer a rewrite of ``seed_program(n + 1, host_reads=n)`` lays out."""
    from bench.synth import seed_program
    from pte_devconst.program.effects import MethodEffects
    from pte_devconst.program.memory import storage_groups
    from pte_devconst.rewriter.model.analysis import analyze_program
    from pte_devconst.rewriter.edit import edit_method
    from pte_devconst.rewriter.plan import RewriteOptions, make_plan

    program, _ = seed_program(n + 1, host_reads=n)
    edit = make_plan(program, analyze_program(program), RewriteOptions(relayout=False)).methods[0]
    (memory_id,) = {p.memory_id for p in edit.placements}
    edited = edit_method(program.execution_plan[0], edit)
    return storage_groups(MethodEffects(edited), [memory_id])[memory_id]


def short_groups(n: int, seed: int = 0) -> list[Any]:
    """``n`` groups of random sizes, each live for a few positions of ``2 n``."""
    from pte_devconst.program.memory import Lifetime, StorageGroup
    from pte_devconst.program.regions import Region

    rng = random.Random(seed)
    groups = []
    for k in range(n):
        first = rng.randrange(2 * n)
        size = 16 << rng.randrange(13)
        groups.append(StorageGroup((k,), (0,), Region(2, 0, size), Lifetime(first, first + rng.randrange(30)), False))
    return groups


def measure(sizes: Sequence[int], rounds: int) -> dict[str, Any]:
    """Seconds, steps and result of ``plan_layout`` on both shapes at every size (see the module's docstring)."""
    from pte_devconst.program.layout import LayoutWork, plan_layout

    out: dict[str, Any] = {}
    for n in sizes:
        for shape, groups in (("live", live_groups(n)), ("short", short_groups(n))):
            entry: dict[str, Any] = {"seconds": [], "groups": len(groups)}
            for r in range(rounds + 1):
                work = LayoutWork.for_groups(len(groups))
                t0 = time.process_time()
                layout = plan_layout(2, groups, work)
                seconds = time.process_time() - t0
                assert layout is not None, "the layout ran out of its budget"
                if r:
                    entry["seconds"].append(seconds)
                entry.update(steps=work.limit - work.left, size=layout.size, bound=layout.bound)
            out[f"{shape} {n}"] = entry
    return out


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 2 or not all(a.isdigit() for a in args):
        print("usage: python -m bench.children.layout ROUNDS N...", file=sys.stderr)
        return 2
    print(json.dumps(measure([int(a) for a in args[1:]], int(args[0]))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
