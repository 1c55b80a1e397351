"""The command line in-process, for what a timer cannot see: ``python -m bench.children.cli_probe MODE ARGS...``.

Modes: ``run ARGS...`` runs ``pte-devconst ARGS...`` (under ``python -X importtime`` section 5 reads what it
imports); ``baseline`` imports typer, rich and flatbuffers, the baseline's imports, through this same module
(so that what running a module costs cancels out of the comparison); ``torch ARGS...`` runs the command and
then prints ``TORCH=True`` or ``TORCH=False`` on stderr: whether torch was imported.
"""

from __future__ import annotations

import sys
from typing import Optional, Sequence


def run_cli(args: Sequence[str]) -> int:
    """Run ``pte-devconst ARGS`` in this process; its exit status."""
    from pte_devconst.cli.app import main

    try:
        main(list(args))
    except SystemExit as stop:
        return stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    return 0


def baseline() -> None:
    """What ``python -c 'import typer, rich, flatbuffers'`` imports (section 5's baseline)."""
    import flatbuffers  # noqa: F401
    import rich  # noqa: F401
    import typer  # noqa: F401


def imports_torch(args: Sequence[str]) -> bool:
    """Whether running ``pte-devconst ARGS`` imported torch."""
    run_cli(args)
    return "torch" in sys.modules


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    mode = args.pop(0) if args else ""
    if mode == "run":
        return run_cli(args)
    if mode == "baseline":
        baseline()
        return 0
    if mode == "torch":
        found = imports_torch(args)
        sys.stdout.flush()
        print(f"TORCH={found}", file=sys.stderr)
        return 0
    print("usage: python -m bench.children.cli_probe {run,baseline,torch} ARGS...", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
