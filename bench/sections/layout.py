"""Section 9 (issue 26): the device-memory layout's cost at 1k, 10k and 100k values is near-linear."""

from __future__ import annotations

import json

from bench.common import Report, Series, child_module, ratio_series, run_child, verdict
from bench.inputs import Inputs

SHAPES = {"live": ("all live at once", "device copies of weights the host also reads"),
          "short": ("short lifetimes", "random sizes, each live for a few positions")}


def run(rounds: int, report: Report, inputs: Inputs) -> None:
    """Issue 26: plan_layout at 1k, 10k and 100k device values, two shapes, ratios side by side."""
    sizes = inputs.layout_sizes
    data = json.loads(run_child(child_module("layout", str(rounds), *map(str, sizes))).stdout)
    small, middle, large = sizes
    rows = []
    for shape, (name, what) in SHAPES.items():
        entries = [data[f"{shape} {n}"] for n in sizes]
        series = [Series(e["seconds"]) for e in entries]
        low, high = ratio_series(series[1], series[0]), ratio_series(series[2], series[1])
        steps = entries[2]["steps"] / entries[1]["steps"]
        fits = all(e["size"] <= 1.10 * e["bound"] for e in entries)
        times = " / ".join(s.text("ms", 1000, 1) for s in series)
        rows.append(f"| {name} ({what}) | {times} | {low.text('x', digits=1)} | {high.text('x', digits=1)} | "
                    f"{steps:.1f}x | <= 12x | {verdict(high.median <= 12)} |")
        rows.append("| ... layout size / bound | "
                    + " / ".join(f"{e['size'] / e['bound']:.3f}" for e in entries)
                    + f" | | | | <= 1.10 | {verdict(fits)} |")
        report.summarise(f"9. layout, {large:,} / {middle:,} values, {name}", high, "x", "<= 12x",
                         high.median <= 12)
    report.add([
        "## 9. The device-memory layout scales near-linearly",
        "",
        f"`plan_layout` (program/layout.py) on one device buffer of {small:,}, {middle:,} and {large:,} values, in"
        " CPU seconds in one child (`bench/children/layout.py`; first round discarded): the device copies of N"
        " weights the host also reads, all live at once at one delegate call (`bench/synth.py seed_program(N + 1,"
        " host_reads=N)`, the storage groups a rewrite lays out), and N values of random sizes with short"
        " lifetimes. Before issue 26 (each group compared with every shared object), `check` of the first shape"
        " took 10.5 / 43.9 / 152 s of CPU at 8k / 16k / 32k values on this machine, the layout most of it; after,"
        " 2.7 / 6.1 / 14.0 s, the layout 0.23 s of the 32k one (tests/test_layout.py times it).",
        "",
        f"| shape | CPU ms at {small:,} / {middle:,} / {large:,} | {middle:,} / {small:,} | {large:,} / {middle:,}"
        f" | steps {large:,} / {middle:,} | target | verdict |",
        "|---|---|---|---|---|---|---|",
        *rows,
        "",
        "Steps are the layout's work in its budget's units (`LayoutWork`, 256 per value): the two sweeps by first"
        " use take a few tree and heap operations per value; the two greedy fits by size run only when the sweeps"
        " miss the bound (all live at once, they reach it), each within a share of the budget.",
        "",
    ])
