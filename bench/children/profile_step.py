"""cProfile one in-process step of the tool: ``python -m bench.children.profile_step [--top N] TARGET ARGS...``.

Targets (``TARGETS``): ``rewrite SRC DST`` (``api.rewrite(..., fsync=False)``: no start-up, no fsync),
``fold SRC DST`` (the same with ``fold=True``, importing torch included) and ``open PATH`` (decode and
check a program, then close it).  Prints pstats' table, top entries by own time.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
from typing import Callable, Optional, Sequence


def rewrite(source: str, destination: str) -> None:
    """A plain rewrite without fsync, in-process (what section 1 profiles)."""
    from pte_devconst import api

    api.rewrite(source, destination, fsync=False)


def fold(source: str, destination: str) -> None:
    """``rewrite --fold`` without fsync, in-process (section 7); computing the folds imports torch."""
    from pte_devconst import api

    api.rewrite(source, destination, fsync=False, fold=True)


def open_close(path: str) -> None:
    """Open (decode and check) a program and close it (section 4's largest step)."""
    from pte_devconst.schema.pte_file import open_pte

    open_pte(path).close()


TARGETS: dict[str, Callable[..., None]] = {"rewrite": rewrite, "fold": fold, "open": open_close}


def profile(target: str, args: Sequence[str], top: int = 14) -> str:
    """Run ``TARGETS[target](*args)`` under cProfile; pstats' text of the ``top`` entries by own time."""
    profiler = cProfile.Profile()
    profiler.runcall(TARGETS[target], *args)
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(top)
    return out.getvalue()


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=14)
    parser.add_argument("target", choices=sorted(TARGETS))
    parser.add_argument("args", nargs="*")
    args = parser.parse_args(argv)
    print(profile(args.target, args.args, args.top))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
