"""What every benchmark section shares: running a child and measuring it, summarising rounds, the report.

Every measurement runs in its own process (``run_child``) so that its wall time and peak RSS are its
own: a child's start-up is part of what a user waits for, and a Python parent's memory would otherwise
leak into the figure (see ``run_child``).
"""

from __future__ import annotations

import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PY = sys.executable
SCRIPT = str(Path(PY).with_name("pte-devconst"))  # the console script itself, not a pyenv shim
TIME = shutil.which("time", path="/usr/bin:/bin") or ""


@dataclass
class Sample:
    """One child run: wall seconds, peak RSS in KiB, and what it printed."""

    wall: float
    rss_kib: int
    stdout: str


def run_child(cmd: Sequence[str], *, env: Optional[dict[str, str]] = None, cwd: Optional[Path] = ROOT) -> Sample:
    """Run ``cmd``; wall seconds, its peak RSS (KiB) and its stdout.

    The RSS comes from ``/usr/bin/time -f %M``, as issue 5 asks.  (A Python parent's own
    ``wait4`` rusage would not do: Linux carries the parent's peak RSS into the child's
    ``ru_maxrss`` across fork and exec.)  Without GNU time, ``RUSAGE_CHILDREN`` is the fallback and
    the figure is an upper bound.  ``cwd`` defaults to the repository root, so that ``python -m
    bench.children.x`` finds the ``bench`` package.  Exit status 1 is accepted (``check`` and
    ``validate`` report findings with it); anything else raises with the child's stderr.
    """
    handle, rss_name = tempfile.mkstemp(prefix="bench-rss-")
    os.close(handle)
    rss_file = Path(rss_name)
    try:
        full = [TIME, "-f", "%M", "-o", str(rss_file), *cmd] if TIME else list(cmd)
        start = time.perf_counter()
        proc = subprocess.Popen(full, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=cwd)
        out, err = proc.communicate()
        wall = time.perf_counter() - start
        if proc.returncode not in (0, 1):
            raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}): {err.decode()[-2000:]}")
        if TIME:
            rss = int(rss_file.read_text().split()[-1])
        else:
            rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    finally:
        rss_file.unlink(missing_ok=True)
    return Sample(wall, rss, out.decode())


def child_module(module: str, *args: str) -> list[str]:
    """The command that runs ``bench.children.<module>`` (or another ``bench`` module) with ``args``."""
    name = module if module.startswith("bench.") else f"bench.children.{module}"
    return [PY, "-m", name, *args]


@dataclass
class Series:
    """The values of one figure over the rounds; reported as median (min-max)."""

    values: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    def text(self, unit: str = "s", scale: float = 1.0, digits: int = 3) -> str:
        med, lo, hi = (v * scale for v in (self.median, min(self.values), max(self.values)))
        return f"{med:.{digits}f} {unit} ({lo:.{digits}f}-{hi:.{digits}f})"


def ratio_series(a: Series, b: Series) -> Series:
    """Per-round ratios a/b (rounds are paired, so machine noise partly cancels)."""
    return Series([x / y for x, y in zip(a.values, b.values)])


def fresh(*paths: Path) -> None:
    """Delete outputs and flush earlier writes, so that no timed run pays for the previous one's."""
    for path in paths:
        path.unlink(missing_ok=True)
    os.sync()


def mib(kib: float) -> float:
    return kib / 1024


def rewrite_cmd(src: Path, dst: Path, *extra: str) -> list[str]:
    """The ``pte-devconst -q rewrite SRC -o DST ...`` command line every section times."""
    return [SCRIPT, "-q", "rewrite", str(src), "-o", str(dst), *extra]


def warm(*paths: Path) -> None:
    """Read ``paths`` once, untimed, so that every timed run reads them from the page cache."""
    for path in paths:
        with open(path, "rb") as handle:
            while handle.read(1 << 24):
                pass


def run_rounds(label: str, rounds: int, names: Sequence[str], commands: dict[str, list[str]], dst: Path,
               walls: dict[str, Series], rss: dict[str, Series]) -> None:
    """Run every command once per round, in order (so they alternate), output deleted and synced before each."""
    for r in range(rounds):
        for name in names:
            fresh(dst)
            sample = run_child(commands[name])
            walls[name].values.append(sample.wall)
            rss[name].values.append(sample.rss_kib)
        print(f"  {label} round {r + 1}/{rounds}: " + ", ".join(f"{n} {walls[n].values[-1]:.2f}s" for n in names),
              flush=True)
    fresh(dst)


def verdict(ok: bool) -> str:
    return "met" if ok else "**missed**"


@dataclass
class Report:
    """What the sections write: the markdown lines of their sections, and the summary's rows."""

    lines: list[str] = field(default_factory=list)
    summary: list[tuple[str, str, str, bool]] = field(default_factory=list)  # (target, figure, limit, met)

    def add(self, lines: Sequence[str]) -> None:
        self.lines += lines

    def summarise(self, target: str, series: Series, unit: str, limit: str, ok: bool, digits: int = 2) -> None:
        """One row of the summary table: the figure as median (min-max), its limit and whether it is met."""
        self.summary.append((target, series.text(unit, digits=digits), limit, ok))


def profile(target: str, *args: str, top: int = 14) -> str:
    """cProfile ``bench.children.profile_step``'s ``target`` in a child; its top entries by own time, paths
    shortened."""
    text = run_child(child_module("profile_step", "--top", str(top), target, *args)).stdout
    lines = [line.rstrip() for line in text.splitlines() if line.strip()]
    start = next((i for i, line in enumerate(lines) if "function calls" in line), 0)
    return "\n".join(line.replace(str(ROOT) + "/", "").replace(sys.prefix + "/lib/python3.11/site-packages/", "")
                     for line in lines[start:] if not line.startswith("   Ordered") and "List reduced" not in line)


def machine(folder: Path) -> str:
    """CPUs, memory, the file system holding ``folder``, kernel and Python: the report's first line."""
    cpu = "?"
    with open("/proc/cpuinfo") as handle:
        for line in handle:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    fs = subprocess.run(["df", "-T", str(folder)], capture_output=True, text=True).stdout.splitlines()[-1].split()[1]
    return (f"{os.cpu_count()} CPUs ({cpu}), {mem:.1f} GiB RAM, {fs} file system, Linux {platform.release()},"
            f" Python {platform.python_version()}")


def in_out_main(measure: Callable[[str, str], dict[str, Any]], usage: str,
                argv: Optional[Sequence[str]] = None) -> int:
    """A child's command line that takes IN OUT and prints ``measure(IN, OUT)`` as one JSON line (what
    ``run_child`` reads back)."""
    import json

    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2:
        print(f"usage: {usage}", file=sys.stderr)
        return 2
    print(json.dumps(measure(args[0], args[1])))
    return 0
