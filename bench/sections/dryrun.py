"""Section 2 (target 2): ``inspect`` and ``rewrite --dry-run`` take the same time on 4 GiB as on 4 MiB."""

from __future__ import annotations

import json
from pathlib import Path

from bench.common import SCRIPT, Report, Series, child_module, ratio_series, run_child, verdict
from bench.inputs import Inputs


def in_process(big_4m: Path, big_4g: Path, rounds: int) -> dict[str, Series]:
    """Open + analyse + plan of both files in one child (bench/children/open_plan.py): seconds per round."""
    data = json.loads(run_child(child_module("open_plan", str(rounds), f"4M={big_4m}", f"4G={big_4g}")).stdout)
    return {k: Series(v) for k, v in data.items()}


def run(rounds: int, report: Report, inputs: Inputs) -> None:
    """Target 2: inspect and rewrite --dry-run, 4 GiB vs 4 MiB (same program)."""
    big_4m, big_4g = inputs.big_4m, inputs.big_4g
    cases = {
        "inspect 4M": [SCRIPT, "inspect", "--json", str(big_4m)],
        "inspect 4G": [SCRIPT, "inspect", "--json", str(big_4g)],
        "dry-run 4M": [SCRIPT, "rewrite", "--dry-run", str(big_4m)],
        "dry-run 4G": [SCRIPT, "rewrite", "--dry-run", str(big_4g)],
    }
    walls = {n: Series() for n in cases}
    rss = {n: Series() for n in cases}
    for _r in range(rounds):
        for name, cmd in cases.items():
            sample = run_child(cmd)
            walls[name].values.append(sample.wall)
            rss[name].values.append(sample.rss_kib)
    inproc = in_process(big_4m, big_4g, rounds)
    ri, rd = (ratio_series(walls["inspect 4G"], walls["inspect 4M"]),
              ratio_series(walls["dry-run 4G"], walls["dry-run 4M"]))
    rp = ratio_series(inproc["4G"], inproc["4M"])
    report.summarise("2. inspect 4 GiB / 4 MiB", ri, "x", "<= 1.5x", ri.median <= 1.5, 3)
    report.summarise("2. rewrite --dry-run 4 GiB / 4 MiB", rd, "x", "<= 1.5x", rd.median <= 1.5, 3)
    report.add([
        "## 2. `inspect` and `rewrite --dry-run`: 4 GiB against 4 MiB, same program",
        "",
        f"Inputs: `big_4m.pte` ({big_4m.stat().st_size:,} B) and `big_4g.pte` ({big_4g.stat().st_size:,} B),"
        " both made by `bench/synth.py` from the exported 1 GiB program (2-row and 2048-row tensors)."
        " Page cache warm.",
        "Commands: `pte-devconst inspect --json FILE`, `pte-devconst rewrite --dry-run FILE` (whole process).",
        "",
        "| figure | median (min-max) | target | verdict |",
        "|---|---|---|---|",
        f"| inspect 4 GiB / 4 MiB | {ri.text('x', digits=3)} | <= 1.5x | {verdict(ri.median <= 1.5)} |",
        f"| rewrite --dry-run 4 GiB / 4 MiB | {rd.text('x', digits=3)} | <= 1.5x | {verdict(rd.median <= 1.5)} |",
        f"| open + analyze + plan in-process, 4 GiB / 4 MiB | {rp.text('x', digits=3)} | (context: no start-up) | |",
        "",
        "Absolute (context): "
        + "; ".join(f"{n} {walls[n].text()}, RSS {rss[n].text('MiB', 1 / 1024, 1)}" for n in cases)
        + f"; in-process 4 MiB {inproc['4M'].text()}, 4 GiB {inproc['4G'].text()}.",
        "",
    ])
