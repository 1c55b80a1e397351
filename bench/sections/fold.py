"""Section 7 (target 7): ``rewrite --fold`` of 1 GiB of transposed weights against a plain rewrite."""

from __future__ import annotations

import subprocess

from bench.common import PY, Report, Series, fresh, profile, ratio_series, rewrite_cmd, run_rounds, verdict, warm
from bench.inputs import Inputs

NAMES = ["plain rewrite", "rewrite --fold", "plain rewrite --no-fsync", "rewrite --fold --no-fsync",
         "rewrite --fold, 1.5 KiB of folds", "python -c 'import torch'"]
LARGEST = 16 << 20  # 2048 x 2048 float32: every folded tensor here
BLOCK = 4 << 20  # fold.compute.BLOCK_BYTES


def run(rounds: int, report: Report, inputs: Inputs) -> None:
    """Target 7: rewrite --fold of 1 GiB of transposed weights against a plain rewrite: time and peak memory."""
    big_t, dst = inputs.big_t, inputs.out / "fold.pte"
    commands = {"plain rewrite": rewrite_cmd(big_t, dst), "rewrite --fold": rewrite_cmd(big_t, dst, "--fold"),
                "plain rewrite --no-fsync": rewrite_cmd(big_t, dst, "--no-fsync"),
                "rewrite --fold --no-fsync": rewrite_cmd(big_t, dst, "--fold", "--no-fsync"),
                "rewrite --fold, 1.5 KiB of folds": rewrite_cmd(inputs.fold_tiny, dst, "--fold"),
                "python -c 'import torch'": [PY, "-c", "import torch"]}  # the measured command itself, as it reads
    walls = {n: Series() for n in NAMES}
    rss = {n: Series() for n in NAMES}
    warm(big_t)
    run_rounds("fold", rounds, NAMES, commands, dst, walls, rss)
    subprocess.run(rewrite_cmd(big_t, dst, "--fold", "--no-fsync"), check=True)
    with_fold = dst.stat().st_size
    fresh(dst)
    profiled = profile("fold", str(big_t), str(dst))
    fresh(dst)
    # Both fold runs import torch and the same code; what differs is the data: 64 tensors of 16 MiB, or 1.5 KiB.
    growth = Series([(f - t) * 1024 for f, t in zip(rss["rewrite --fold"].values,
                                                    rss["rewrite --fold, 1.5 KiB of folds"].values)])
    ratio = ratio_series(walls["rewrite --fold --no-fsync"], walls["plain rewrite --no-fsync"])
    ok = max(growth.values) <= LARGEST + BLOCK + (8 << 20)
    report.summarise("7. --fold peak RSS, 1 GiB of folds over 1.5 KiB of folds (largest folded tensor: 16 MiB)",
                     Series([v / 2**20 for v in growth.values]), "MiB", "<= 16 MiB + a 4 MiB read block", ok, 1)
    report.add([
        "## 7. `rewrite --fold`: 1 GiB of transposed weights",
        "",
        f"Input: `bench/cache/big_transposed_1g.pte` ({big_t.stat().st_size:,} B, exported by ExecuTorch 1.5.1 with"
        " `python -m bench.export_big OUT --transposed`): `x = x @ w.t()` for 64 float32 weights of 2048x2048, only"
        " the matmuls on the `cuda:0` reference backend, so each weight is transposed on the host (`permute_copy`)"
        " and copied to the device on every call: 1 GiB per call that a plain rewrite cannot move (it finds nothing"
        " and copies the file) and `--fold` computes once. The fold's output is"
        f" {with_fold:,} B: the transposed weights as initial data, the original weights dropped.",
        "Each figure: median (min-max) of the rounds; peak RSS from `/usr/bin/time -f %M`; output deleted and"
        " `sync` run before each run, page cache warm.",
        "",
        "| command | wall | peak RSS |",
        "|---|---|---|",
        *[f"| `{n}` | {walls[n].text()} | {rss[n].text('MiB', 1 / 1024, 1)} |" for n in NAMES],
        "",
        "| figure | median (min-max) | target | verdict |",
        "|---|---|---|---|",
        f"| --fold / plain, both --no-fsync | {ratio.text('x', digits=2)} | (context) | |",
        f"| --fold peak RSS, 1 GiB of folds - 1.5 KiB of folds | {growth.text('MiB', 1 / 2**20, 1)} | <= largest"
        f" folded tensor (16 MiB) + read block (4 MiB) | {verdict(ok)} |",
        "",
        "What the time is: importing torch (see its row), computing each transposed weight (torch's strided copy"
        " from 4 MiB blocks read with `preadv`), writing it, and the self-check, which recomputes every folded value"
        " from the input independently of the writer's path and compares every byte (never sampled). Memory: one"
        " folded tensor and one read block at a time, in the writer and in the check, whatever the number of folds;"
        " importing torch (its row) is a fixed cost on top, which a rewrite that folds nothing never pays (section 5).",
        "",
        "Where the time goes (cProfile of one in-process `api.rewrite(..., fold=True, fsync=False)`,"
        " importing torch included; top entries by own time):",
        "",
        "```",
        profiled,
        "```",
        "",
    ])
