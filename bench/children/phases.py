"""Where one rewrite's time goes, step by step: ``python -m bench.children.phases SRC DST ROUNDS [--no-fsync]``.

In-process ``api.rewrite(SRC, DST, phase=...)`` after one warm-up round: the rewrite names each step as it
starts through its public ``phase`` callback (``planning``: open, analyse, plan; ``writing``: the writer's copy,
or ``copying`` when nothing moves; ``fsync``; ``self-check``: re-open the written file and prove it), so each step
is the time from its mark to the next (the last to the return), with no patching.  Bytes read by each step: the
growth of the process's ``rchar`` (``/proc/self/io``: every read system call).  The command's start-up is the
section's figure: the whole process's wall time less this total.  Prints JSON: ``[{"planning": s, "writing": s,
"fsync": s, "self-check": s, "total": s, "read": {step: bytes}, "checked": bytes, "changed": bool}, ...]``
(``checked``: the self-check's own count of the bytes it compared, ``RewriteResult.self_check_bytes``).
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any, Optional, Sequence

STEPS = ("planning", "writing", "fsync", "self-check")


def read_chars() -> int:
    """Bytes this process has read by system calls so far (``rchar`` of /proc/self/io)."""
    with open("/proc/self/io") as handle:
        for line in handle:
            if line.startswith("rchar:"):
                return int(line.split()[1])
    raise OSError("/proc/self/io has no rchar line")


def one_rewrite(source: str, destination: str, *, fsync: bool = True, verify: Optional[str] = None
                ) -> dict[str, Any]:
    """One rewrite: seconds and bytes read per step, its total, and the self-check's compared bytes."""
    from pte_devconst import api

    marks: list[tuple[str, float, int]] = []
    if os.path.exists(destination):
        os.unlink(destination)
    own = -read_chars() + read_chars()  # what one reading of /proc/self/io adds to rchar
    start, start_read = time.perf_counter(), read_chars()
    result = api.rewrite(source, destination, fsync=fsync, verify=verify,
                         phase=lambda name: marks.append((name, time.perf_counter(), read_chars())))
    end, end_read = time.perf_counter(), read_chars()
    points = [("planning", start, start_read)] + [m for m in marks if m[0] != "planning"] + [("end", end, end_read)]
    steps: dict[str, Any] = {step: 0.0 for step in STEPS}
    read: dict[str, int] = {step: 0 for step in STEPS}
    for (name, at, at_read), (_, after, after_read) in zip(points, points[1:]):
        step = "writing" if name == "copying" else name
        steps[step] = steps.get(step, 0.0) + after - at
        read[step] = read.get(step, 0) + max(0, after_read - at_read - own)
    return {**steps, "total": end - start, "read": read, "checked": result.self_check_bytes, "changed": result.changed}


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    fsync = "--no-fsync" not in args
    args = [a for a in args if a != "--no-fsync"]
    if len(args) != 3 or not args[2].isdigit():
        print("usage: python -m bench.children.phases SRC DST ROUNDS [--no-fsync]", file=sys.stderr)
        return 2
    source, destination, rounds = args
    found = [one_rewrite(source, destination, fsync=fsync) for _ in range(int(rounds) + 1)][1:]
    print(json.dumps(found))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
