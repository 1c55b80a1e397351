"""Where inspect's per-call host-to-device figure and the runner's measured copies differ, value by value.

    python examples/h2d_by_value.py MODEL.pte [MODEL.inputs.pt] [--method forward] [--ptd MODEL.ptd]

For one call (the first of the inputs file, or random inputs at the declared shapes), prints each program
value that the static figure (``program/transfers.py``) or the runner (``--simulate-devices``, delegates
without an executor run opaque) copies host-to-device, with both byte counts, and marks the values where
they differ (``bound``: a dynamic tensor counted at its planned upper bound).  ``tests/test_estimate_vs_runner.py``
holds the totals equal on every committed program; this is the tool for a program where they are not.
"""

from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

import torch

from pte_devconst.runner import run_program
from pte_devconst.runner.delegates import OpaquePolicy
from pte_devconst.schema.pte_file import open_pte
from pte_devconst.program.transfers import per_call_transfers


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pte")
    parser.add_argument("inputs", nargs="?")
    parser.add_argument("--method", default="forward")
    parser.add_argument("--ptd")
    args = parser.parse_args(argv)
    with open_pte(args.pte) as pte:
        plan = pte.program.plan(args.method)
        static: dict[int, tuple[int, bool, str]] = {}
        for t in per_call_transfers(plan):
            nbytes, bound, kinds = static.get(t.value, (0, False, ""))
            static[t.value] = (nbytes + t.nbytes, bound or t.bound, ",".join(filter(None, (kinds, t.kind.value))))
        sizes = {i: v.sizes for i, v in enumerate(plan.values or ()) if hasattr(v, "sizes")}
    inputs = None
    if args.inputs:
        loaded = torch.load(args.inputs, weights_only=False)
        calls = loaded.get(args.method, next(iter(loaded.values()))) if isinstance(loaded, dict) else loaded
        inputs = [calls[0]] if isinstance(calls, list) else calls
    result = run_program(args.pte, ptd_path=args.ptd, method=args.method, inputs=inputs, calls=1,
                         simulate_devices=True, opaque=OpaquePolicy.MISSING)
    measured: dict[Optional[int], int] = {}
    for event in result.events:
        if event.phase != "load" and event.direction.value == "h2d":
            measured[event.source_value] = measured.get(event.source_value, 0) + event.nbytes
    total_static, total_measured = sum(v[0] for v in static.values()), sum(measured.values())
    print(f"{args.pte} {args.method}: static {total_static} B, measured {total_measured} B, "
          f"difference {total_measured - total_static} B")
    print(f"{'value':>6} {'sizes':<20} {'static':>10} {'measured':>10}  kind")
    for value in sorted(set(static) | set(measured), key=lambda v: (v is None, v or 0)):
        nbytes, bound, kinds = static.get(value, (0, False, ""))
        got = measured.get(value, 0)
        mark = "" if got == nbytes else ("  <- bound" if bound and got < nbytes else "  <- differs")
        print(f"{value!s:>6} {str(list(sizes.get(value, ()))):<20} {nbytes:>10} {got:>10}  {kinds}{mark}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
