"""Section 6 (target 6): ``validate`` on the >= 256 MiB examples: per-call time and host-to-device bytes."""

from __future__ import annotations

import json
import subprocess

from bench.common import SCRIPT, Report, Series, fresh, mib, ratio_series, rewrite_cmd, run_child
from bench.inputs import Inputs


def run(rounds: int, report: Report, inputs: Inputs) -> None:
    """Target 6: validate on the >= 256 MiB examples: per-call time and H2D bytes, original vs rewritten."""
    rows = []
    details = []
    calls_n = max(rounds, 2)
    for style, example in inputs.runner.items():
        name = f"mlp_big_{style}"
        out = inputs.out / f"{name}.devconst.pte"
        fresh(out)
        subprocess.run(rewrite_cmd(example.pte, out), check=True, capture_output=True)
        sample = run_child([SCRIPT, "validate", str(example.pte), str(out), "-i", str(example.inputs),
                            "-e", str(example.expected), "--simulate-devices", "--calls", str(calls_n), "--json"])
        data = json.loads(sample.stdout)
        for method in data["methods"]:
            calls = method["calls"]
            h2d_b = Series([c["h2d_bytes"]["before"] for c in calls])
            h2d_a = Series([c["h2d_bytes"]["after"] for c in calls])
            t_b = Series([c["wall_s"]["before"] for c in calls])
            t_a = Series([c["wall_s"]["after"] for c in calls])
            moved = sum(c["nbytes"] for c in method["moved_constants"])
            rows.append(f"| {name} | {moved:,} | {method['load_h2d_bytes']['before']:,} -> "
                        f"{method['load_h2d_bytes']['after']:,} | {int(h2d_b.median):,} -> {int(h2d_a.median):,} |"
                        f" {t_b.text()} -> {t_a.text()} | {ratio_series(t_a, t_b).text('x', digits=2)} |"
                        f" {'passed' if method['passed'] else 'FAILED'} |")
        details.append(f"{name}: validate process {sample.wall:.1f} s, peak RSS {mib(sample.rss_kib):.0f} MiB")
        fresh(out)
    report.add([
        "## 6. Runner: the >= 256 MiB examples, original against rewritten (`validate`)",
        "",
        "Inputs: `examples/export_examples.py --big` (mlp 4096-8192-4096, float32: 256 MiB of weights read by a"
        " `cuda:0` delegate from outside it). Command: `pte-devconst validate ORIG REWRITTEN -i ... -e ..."
        f" --simulate-devices --calls {calls_n} --json`. **No GPU in this run**: devices are simulated in host"
        " memory, so the byte counts are exact and the times are CPU times of the torch runner (a host 'H2D copy' is a"
        " memcpy), not GPU figures.",
        "",
        "| example | moved constant bytes | H2D bytes at load, original -> rewritten | H2D bytes per call (median) |"
        " per-call time, original -> rewritten (median, min-max) | time ratio | validate |",
        "|---|---|---|---|---|---|---|",
        *rows,
        "",
        "Context: " + "; ".join(details) + ".",
        "",
    ])
