"""Section 8 (issue 18): the seed's shape at 10k and 100k constants, and device memory after a rewrite."""

from __future__ import annotations

import json

from bench.common import Report, Series, child_module, fresh, ratio_series, rewrite_cmd, run_child, verdict
from bench.inputs import Inputs


def run(rounds: int, report: Report, inputs: Inputs) -> None:
    """Issue 18: the seed's shape at 10k and 100k constants (copy and legacy), and device memory after a rewrite."""
    seed = inputs.seed
    paths = [str(p) for p in seed.values()] + [str(inputs.big_1g)]
    data = json.loads(run_child(child_module("bench.seed", str(rounds), *paths)).stdout)
    rows = []
    for style in ("copy", "legacy"):
        small, large = data[str(seed[f"{style} 10k"])], data[str(seed[f"{style} 100k"])]
        for part in ("analyze", "total"):
            ratio = ratio_series(Series(large[part]), Series(small[part]))
            label = "analyze_program" if part == "analyze" else "open + analyze + plan"
            rows.append(f"| {style} style, {label}: 100k / 10k constants | {ratio.text('x', digits=2)} | <= 12x | "
                        f"{verdict(ratio.median <= 12)} |")
            report.summarise(f"8. seed shape ({style}), 100k / 10k constants, {label}", ratio, "x", "<= 12x",
                             ratio.median <= 12)
    dst = inputs.out / "seed.pte"
    command = {}
    for key in ("copy 10k", "copy 100k"):
        fresh(dst)
        command[key] = run_child(rewrite_cmd(seed[key], dst)).wall
    fresh(dst)
    memory_rows = []
    for key, path in [*seed.items(), ("1 GiB export (512 constants)", inputs.big_1g)]:
        d = data[str(path)]
        target = max(d["before"], 1.10 * d["bound"])
        memory_rows.append(f"| {key} | {d['moved']:,} / {d['eligible']:,} | {d['before']:,} | {d['after']:,} | "
                           f"{d['bound']:,} | {d['appended']:,} | {verdict(d['after'] <= target)} |")
    big = data[str(inputs.big_1g)]
    report.summarise("8. device memory after / before, 1 GiB export", Series([big["after"] / big["before"]]), "x",
                     "<= max(1, 1.1 x bound / before)", big["after"] <= max(big["before"], 1.10 * big["bound"]))
    report.add([
        "## 8. The seed's shape at real size, and device memory after a rewrite",
        "",
        "Inputs: `bench/synth.py seed_program` (this project's writer): N float32 weights of 4x4 read only by one"
        " `cuda:0` delegate call, through an `_h2d_copy.out` each into its own device region (copy style) or"
        " directly (legacy style); and the 1 GiB ExecuTorch export of section 1. In-process timings in one child"
        " (first round discarded).",
        "",
        "| figure | median (min-max) | target | verdict |",
        "|---|---|---|---|",
        *rows,
        "",
        "Whole `rewrite` command (context): " + "; ".join(f"{k} {v:.2f} s" for k, v in command.items()) + ".",
        "",
        "Planned device memory (bytes, all methods): before the rewrite, after it (buffers relaid by lifetimes),"
        " the bound (resident bytes + the peak of everything else live at once) and what keeping the input's"
        " offsets and appending the constants would need (the rewrite before this layout). Target: after <="
        " max(before, 1.10 x bound).",
        "",
        "| program | moved / eligible | before | after | bound | appending | verdict |",
        "|---|---|---|---|---|---|---|",
        *memory_rows,
        "",
        "Legacy style plans no device memory before (the delegate copies each weight itself on every call), so"
        " after = the resident weights, and `rewrite` says so in a warning.",
        "",
    ])
