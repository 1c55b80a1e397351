"""The writer's copy and the self-check timed apart: ``python -m bench.children.self_check SRC DST ROUNDS``.

For ``--verify sampled`` (the default) and ``full``, alternating, ``ROUNDS`` times after one warm-up round:
``api.rewrite(SRC, DST, fsync=False, verify=MODE, phase=...)`` in-process (no start-up, no fsync).  The
rewrite names each step as it starts through its public ``phase`` callback, so the copy is the
``writing`` step and the check the ``self-check`` step (re-opening and decoding the written file
included), with no patching.  Bytes read by the check: the growth of the process's ``rchar``
(``/proc/self/io``: every read system call, ``preadv`` of both files here) during the self-check.
Prints JSON: ``{"sampled": [{"copy": s, "check": s, "read": bytes}, ...], "full": [...]}``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Optional, Sequence

MODES = ("sampled", "full")


def read_chars() -> int:
    """Bytes this process has read by system calls so far (``rchar`` of /proc/self/io)."""
    with open("/proc/self/io") as handle:
        for line in handle:
            if line.startswith("rchar:"):
                return int(line.split()[1])
    raise OSError("/proc/self/io has no rchar line")


def one_rewrite(source: str, destination: str, mode: str) -> dict[str, float]:
    """One rewrite without fsync: the seconds of its copy and of its self-check, and the bytes the check read."""
    from pte_devconst import api

    marks: dict[str, tuple[float, int]] = {}

    def phase(name: str) -> None:
        marks[name] = (time.perf_counter(), read_chars())

    if os.path.exists(destination):
        os.unlink(destination)
    before = read_chars()
    own = read_chars() - before  # what reading /proc/self/io itself adds to rchar (counted once below)
    api.rewrite(source, destination, fsync=False, verify=mode, phase=phase)
    end, end_read = time.perf_counter(), read_chars() - own
    if "writing" not in marks or "self-check" not in marks:
        raise RuntimeError(f"{source}: the rewrite moved nothing (steps {sorted(marks)}); the benchmark needs a "
                           "program with eligible constants")
    (write_at, _), (check_at, check_read) = marks["writing"], marks["self-check"]
    return {"copy": check_at - write_at, "check": end - check_at, "read": end_read - check_read}


def measure(source: str, destination: str, rounds: int) -> dict[str, list[dict[str, float]]]:
    """``rounds`` rewrites per mode, modes alternating, after one warm-up round that is dropped."""
    out: dict[str, list[dict[str, float]]] = {mode: [] for mode in MODES}
    for r in range(rounds + 1):
        for mode in MODES:
            figures = one_rewrite(source, destination, mode)
            if r:
                out[mode].append(figures)
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
