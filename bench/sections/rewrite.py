"""Section 1 (target 1): ``rewrite`` against ``cp`` at 1 GiB and 4 GiB, its peak memory, and where its time goes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.common import (PY, Report, Series, child_module, fresh, profile, ratio_series, rewrite_cmd, run_child,
                          run_rounds, verdict, warm)
from bench.inputs import Inputs

NAMES = ["cp 1G", "cp+sync 1G", "python copy_file_range 1G", "rewrite 1G", "rewrite --no-fsync 1G",
         "rewrite --no-fsync --verify full 1G", "cp 100M", "cp+sync 100M", "rewrite 100M", "rewrite --no-fsync 100M",
         "cp 4G", "rewrite 4G", "rewrite --no-fsync 4G", "rewrite --no-fsync --verify full 4G"]
STEPS = ("planning", "writing", "fsync", "self-check")


def commands(big_1g: Path, big_100m: Path, big_4g: Path, dst: Path) -> dict[str, list[str]]:
    """The compared command lines, by the names of ``NAMES``."""
    return {
        "cp 100M": ["cp", str(big_100m), str(dst)],
        "cp+sync 100M": ["sh", "-c", f"cp '{big_100m}' '{dst}' && sync '{dst}'"],
        "rewrite 100M": rewrite_cmd(big_100m, dst),
        "rewrite --no-fsync 100M": rewrite_cmd(big_100m, dst, "--no-fsync"),
        "cp 1G": ["cp", str(big_1g), str(dst)],
        "cp+sync 1G": ["sh", "-c", f"cp '{big_1g}' '{dst}' && sync '{dst}'"],
        "python copy_file_range 1G": [PY, "-S", "-m", "bench.children.bare_copy", str(big_1g), str(dst)],
        "rewrite 1G": rewrite_cmd(big_1g, dst),
        "rewrite --no-fsync 1G": rewrite_cmd(big_1g, dst, "--no-fsync"),
        "rewrite --no-fsync --verify full 1G": rewrite_cmd(big_1g, dst, "--no-fsync", "--verify", "full"),
        "cp 4G": ["cp", str(big_4g), str(dst)],
        "rewrite 4G": rewrite_cmd(big_4g, dst),
        "rewrite --no-fsync 4G": rewrite_cmd(big_4g, dst, "--no-fsync"),
        "rewrite --no-fsync --verify full 4G": rewrite_cmd(big_4g, dst, "--no-fsync", "--verify", "full"),
    }


def self_check_cost(src: Path, dst: Path, rounds: int) -> dict[str, dict[str, Any]]:
    """The writer's copy and the self-check timed apart in one child (bench/children/self_check.py), per mode."""
    data = json.loads(run_child(child_module("self_check", str(src), str(dst), str(rounds))).stdout)
    result = {}
    for mode, samples in data.items():
        copy, check = Series([x["copy"] for x in samples]), Series([x["check"] for x in samples])
        result[mode] = {"copy": copy, "check": check, "check_over_copy": ratio_series(check, copy),
                        "read": samples[-1]["read"]}
    return result


def bytes_by_syscall(src: Path, dst: Path) -> str:
    """One rewrite in a child with the bytes and calls of each I/O system call counted (bench/children/syscalls.py)."""
    counts = json.loads(run_child(child_module("syscalls", str(src), str(dst))).stdout)
    total, calls = counts.pop("output"), counts.pop("calls")
    parts = [f"`os.{k}` {v:,} B in {calls.get(k, 0):,} calls ({100 * v / total:.2f}% of the output)"
             for k, v in sorted(counts.items())]
    parts += [f"`os.{k}` {n:,} calls" for k, n in sorted(calls.items()) if k not in counts]
    return ", ".join(parts) + f"; output {total:,} B"


def step_times(src: Path, dst: Path, rounds: int) -> dict[str, Any]:
    """The in-process steps of a default rewrite (bench/children/phases.py): a series per step and the total, and
    the bytes each step read (of the last round)."""
    samples = json.loads(run_child(child_module("phases", str(src), str(dst), str(rounds))).stdout)
    found: dict[str, Any] = {step: Series([x[step] for x in samples]) for step in (*STEPS, "total")}
    found["read"], found["checked"] = samples[-1]["read"], samples[-1]["checked"]
    return found


def whole_process_syscalls(src: Path, dst: Path) -> str:
    """System calls of one whole ``rewrite`` process by count (``strace -f -c``; counts only: strace slows every
    call, so its times are not the command's), or why there are none."""
    import shutil
    import tempfile

    if shutil.which("strace") is None:
        return "not counted: strace is not installed"
    with tempfile.NamedTemporaryFile(suffix=".txt") as out:
        run_child(["strace", "--follow-forks", "--summary-only", "-o", out.name, *rewrite_cmd(src, dst)])
        rows = [line.split() for line in Path(out.name).read_text().splitlines()[2:] if line and line[0] != "-"]
    counted = [(row[-1], int(row[3])) for row in rows if len(row) >= 5 and row[3].isdigit()]
    total = next((n for name, n in counted if name == "total"), sum(n for _, n in counted))
    top = sorted(((n, name) for name, n in counted if name != "total"), reverse=True)[:8]
    return f"{total:,} system calls, the most frequent " + ", ".join(f"`{name}` {n:,}" for n, name in top)


def run(rounds: int, report: Report, inputs: Inputs) -> None:
    """Target 1: rewrite vs cp, 1 GiB and 4 GiB; peak RSS; bytes moved by copy_file_range."""
    big_1g, big_100m, big_4g = inputs.big_1g, inputs.big_100m, inputs.big_4g
    walls = {n: Series() for n in NAMES}
    rss = {n: Series() for n in NAMES}
    dst = inputs.out / "rewrite.pte"
    warm(big_1g, big_100m, big_4g)  # every run then reads from memory
    run_rounds("rewrite", rounds, NAMES, commands(big_1g, big_100m, big_4g, dst), dst, walls, rss)
    check = {size: self_check_cost(path, dst, rounds) for size, path in (("1 GiB", big_1g), ("4 GiB", big_4g))}
    fresh(dst)
    steps = {size: step_times(path, dst, rounds) for size, path in (("1 GiB", big_1g), ("100 MiB", big_100m))}
    fresh(dst)
    moved = bytes_by_syscall(big_1g, dst)
    fresh(dst)
    traced = whole_process_syscalls(big_1g, dst)
    fresh(dst)
    profiled = profile("rewrite", str(big_1g), str(dst))
    fresh(dst)
    r1, r1s, r4 = (ratio_series(walls["rewrite 1G"], walls["cp 1G"]),
                   ratio_series(walls["rewrite 1G"], walls["cp+sync 1G"]),
                   ratio_series(walls["rewrite 4G"], walls["cp 4G"]))
    n1, n4 = (ratio_series(walls["rewrite --no-fsync 1G"], walls["cp 1G"]),
              ratio_series(walls["rewrite --no-fsync 4G"], walls["cp 4G"]))
    h1s, h1 = (ratio_series(walls["rewrite 100M"], walls["cp+sync 100M"]),
               ratio_series(walls["rewrite --no-fsync 100M"], walls["cp 100M"]))
    f1 = ratio_series(walls["rewrite --no-fsync --verify full 1G"], walls["cp 1G"])
    f4 = ratio_series(walls["rewrite --no-fsync --verify full 4G"], walls["cp 4G"])
    rss_ratio = Series([a / b for a, b in zip(rss["rewrite 4G"].values, rss["rewrite 1G"].values)])
    report.summarise("1. rewrite --no-fsync / cp, 1 GiB (neither waits for the disk)", n1, "x", "<= 1.3x",
                     n1.median <= 1.3)
    report.summarise("1. rewrite / (cp + sync), 1 GiB (both wait for the disk; fsync is rewrite's default)", r1s, "x",
                     "<= 1.3x", r1s.median <= 1.3)
    report.summarise("1. rewrite / cp, 1 GiB (fsync against none: see section 1)", r1, "x", "<= 1.3x", r1.median <= 1.3)
    report.summarise("1. rewrite / (cp + sync), 100 MiB (context: the fixed cost dominates)", h1s, "x", "<= 1.3x",
                     h1s.median <= 1.3)
    report.summarise("1. rewrite --no-fsync / cp, 4 GiB (context)", n4, "x", "<= 1.3x", n4.median <= 1.3)
    report.summarise("1. rewrite --no-fsync --verify full / cp, 1 GiB (context: every byte compared)", f1, "x",
                     "<= 1.3x", f1.median <= 1.3)
    sampled_share = check["1 GiB"]["sampled"]["check_over_copy"]
    report.summarise("1. default self-check / the copy it checks, 1 GiB (in-process)", sampled_share, "x", "<= 0.5x",
                     sampled_share.median <= 0.5)
    checked = Series([steps["1 GiB"]["checked"] / (1 << 20)])
    report.summarise("1. bytes the default self-check reads, 1 GiB (both files)", checked, "MiB", "a few MiB",
                     checked.median <= 8, 1)
    report.summarise("1. peak RSS of rewrite, 4 GiB", Series([v / 1024 for v in rss["rewrite 4G"].values]), "MiB",
                     "<= 256 MiB", max(rss["rewrite 1G"].values + rss["rewrite 4G"].values) <= 256 * 1024, 1)
    report.summarise("1. RSS 4 GiB / 1 GiB", rss_ratio, "x", "within 10%", abs(rss_ratio.median - 1) <= 0.10, 3)
    size1, size4 = big_1g.stat().st_size, big_4g.stat().st_size
    report.add([
        "## 1. `rewrite` against `cp`, and its peak memory",
        "",
        f"Input: `bench/cache/big_1g.pte` ({size1:,} B, exported by ExecuTorch 1.5.1: 512 float32 parameters of"
        " 512x1024, each read only by a `cuda:0` delegate through `_h2d_copy.out`, so 512 eligible constants) and"
        f" `big_4g.pte` ({size4:,} B, the same program with 2048-row tensors, written by `bench/synth.py`).",
        f"Command: `{' '.join(rewrite_cmd(Path('IN'), Path('OUT')))}` against `cp IN OUT`"
        " (and `cp IN OUT && sync OUT`, the same durability as the rewrite, which fsyncs before renaming);"
        " output deleted and `sync` run before each run.",
        "",
        "| figure | median (min-max) | target | verdict |",
        "|---|---|---|---|",
        f"| rewrite --no-fsync / cp, 1 GiB | {n1.text('x', digits=2)} | <= 1.3x | {verdict(n1.median <= 1.3)} |",
        f"| rewrite / (cp + sync), 1 GiB | {r1s.text('x', digits=2)} | <= 1.3x | {verdict(r1s.median <= 1.3)} |",
        f"| rewrite / cp, 1 GiB | {r1.text('x', digits=2)} | <= 1.3x | {verdict(r1.median <= 1.3)} |",
        f"| rewrite / (cp + sync), 100 MiB | {h1s.text('x', digits=2)} | (context) | |",
        f"| rewrite --no-fsync / cp, 100 MiB | {h1.text('x', digits=2)} | (context) | |",
        f"| rewrite --no-fsync / cp, 4 GiB | {n4.text('x', digits=2)} | (context) | |",
        f"| rewrite / cp, 4 GiB | {r4.text('x', digits=2)} | (context) | |",
        f"| rewrite --no-fsync --verify full / cp, 1 GiB | {f1.text('x', digits=2)} | (context) | |",
        f"| rewrite --no-fsync --verify full / cp, 4 GiB | {f4.text('x', digits=2)} | (context) | |",
        f"| peak RSS, rewrite 1 GiB | {rss['rewrite 1G'].text('MiB', 1 / 1024, 1)} | <= 256 MiB"
        f" | {verdict(max(rss['rewrite 1G'].values) <= 256 * 1024)} |",
        f"| peak RSS, rewrite 4 GiB | {rss['rewrite 4G'].text('MiB', 1 / 1024, 1)} | <= 256 MiB"
        f" | {verdict(max(rss['rewrite 4G'].values) <= 256 * 1024)} |",
        f"| RSS 4 GiB / RSS 1 GiB | {rss_ratio.text('x', digits=3)} | within 10%"
        f" | {verdict(abs(rss_ratio.median - 1) <= 0.10)} |",
        "",
        "Absolute wall times (context): " + "; ".join(f"{n} {walls[n].text()}" for n in NAMES) + ".",
        "",
        f"Bulk data path (one instrumented in-process rewrite of the 1 GiB file): {moved}.",
        f" The whole `rewrite` process of the 1 GiB file (start-up included): {traced}.",
        "",
        "### Where the fixed cost goes",
        "",
        "In-process `api.rewrite(IN, OUT)` as the command runs it (fsync on, default self-check), page cache warm,"
        " each step timed from the rewrite's own `phase` marks (bench/children/phases.py): planning (open the"
        " input, decode it, analyse, plan), writing (lay out and encode the new program, the kernel's copy of the"
        " bulk, writeback started every 32 MiB), fsync (what is left of the writeback), self-check (re-open and"
        " decode the output, compare structure, replay every read, compare bytes). Start-up is the whole"
        " command's median wall time less the in-process total: interpreter, imports, argument parsing, and"
        " the report. Bytes read per step: growth of `rchar` (the kernel counts `copy_file_range`'s source as"
        " read).",
        "",
        "| input | whole command | start-up | planning | writing | fsync | self-check | cp + sync |",
        "|---|---|---|---|---|---|---|---|",
        *[f"| {size} | {walls[f'rewrite {key}'].median:.3f} s | "
          f"{max(0.0, walls[f'rewrite {key}'].median - found['total'].median):.3f} s | "
          + " | ".join(f"{found[step].median:.3f} s" for step in STEPS)
          + f" | {walls[f'cp+sync {key}'].median:.3f} s |"
          for (size, found), key in zip(steps.items(), ("1G", "100M"))],
        "",
        "Bytes read, 1 GiB: " + ", ".join(f"{step} {steps['1 GiB']['read'][step]:,} B" for step in STEPS)
        + f"; the self-check's own count of the bytes it compared: {steps['1 GiB']['checked']:,} B"
        " (JSON `self_check_bytes_read`).",
        "",
        "### The self-check's cost, default and `--verify full`",
        "",
        "Before the output replaces the destination, the self-check re-opens it and proves it is the input with"
        " exactly the plan's changes: every table compared structurally, every referenced byte range compared with the"
        " input range it came from (docs/design.md). By default a bulk range that the writer's recipe proves was"
        " kernel-copied from the right input range is compared in four 1 KiB windows (both ends and two at seeded"
        " places), whatever its size; everything else, every byte the tool wrote itself included, in full."
        " `--verify full` compares every byte, and the padding. In-process"
        " `api.rewrite(..., fsync=False)` (no start-up, no fsync), page cache warm, timed by its `phase` callback:"
        " the copy is the `writing` step (the writer's `write_pte_to_fd`), the check the `self-check` step"
        " (`check_rewrite`, re-opening and decoding the written file included); bytes read are what the process"
        " read during the check (`rchar` of /proc/self/io: the check's `preadv`s of both files):",
        "",
        "| input | mode | copy | self-check | check / copy | bytes read by the check |",
        "|---|---|---|---|---|---|",
        *[f"| {size} | {mode} | {c['copy'].text()} | {c['check'].text()} | {c['check_over_copy'].text('x', digits=2)} |"
          f" {c['read']:,} |" for size, modes in check.items() for mode, c in modes.items()],
        "",
        "Why two comparisons: by default `rewrite` fsyncs its output before renaming it over the destination"
        " (issue 6 asks for that: a power failure must not leave a renamed but empty file), so it waits for the disk"
        " to take 1 GiB, which `cp` never does: `cp` returns when the data is in the page cache"
        f" ({walls['cp 1G'].median:.2f} s), and `cp` + `sync` takes {walls['cp+sync 1G'].median:.2f} s. No amount of"
        " speed in the tool closes that gap, so the target is measured at equal durability both ways:"
        " `rewrite --no-fsync` against `cp` (the output is still replaced atomically and self-checked, only not"
        " flushed), and the default `rewrite` against `cp` + `sync`."
        " What the rewrite adds to the copy is fixed, not per byte: a bare `copy_file_range` loop in Python"
        " (`bench/children/bare_copy.py`) copies"
        f" the 1 GiB file in {walls['python copy_file_range 1G'].median:.2f} s"
        f" ({walls['python copy_file_range 1G'].median / walls['cp 1G'].median:.2f}x `cp`), and `rewrite --no-fsync`"
        f" takes {walls['rewrite --no-fsync 1G'].median - walls['python copy_file_range 1G'].median:.2f} s more: the"
        " command line's start-up (section 5: about the baseline's 0.15-0.2 s of importing typer and rich), decoding"
        " the program and encoding the new one (about a thousand tensors), and the self-check, which re-opens the"
        " written file, decodes it again and compares it with the input (the subsection above). Against a"
        f" {walls['cp 1G'].median:.2f} s copy that fixed cost is the whole miss at 1 GiB; at 4 GiB it is amortised"
        f" ({n4.median:.2f}x without fsync). Closing it at 1 GiB would need a command that starts without typer and"
        " rich, or no self-check: neither is worth it.",
        "",
        "Where the time goes (cProfile of one in-process `api.rewrite(..., fsync=False)` of the 1 GiB file, so"
        " without start-up and fsync; top entries by own time):",
        "",
        "```",
        profiled,
        "```",
        "",
    ])
