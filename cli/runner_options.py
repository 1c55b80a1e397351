"""The options and notes ``run`` and ``validate`` share: both run programs with the torch runner.

Kept apart from the command modules so either imports them without importing the other (or the app).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional, Sequence

import typer

PtdOption = Annotated[Optional[Path], typer.Option(
    "--ptd", metavar="FILE", help="The .ptd data file holding the program's external constants [default: NAME.ptd "
    "next to NAME.pte, if there; for NAME.devconst.pte also NAME.ptd].")]
InputsOption = Annotated[Optional[Path], typer.Option(
    "--inputs", "-i", metavar="FILE", help="torch.save file of inputs: {method: [call, ...]}, a list of calls, or "
    "one tuple of tensors (default: deterministic random inputs of the right shapes).")]
ProgressOption = Annotated[bool, typer.Option(
    "--progress", help="Show progress on stderr also where it is no terminal (a CI log: one line per call); on a "
    "terminal it is shown anyway (not with --quiet).")]
SimulateOption = Annotated[bool, typer.Option(
    "--simulate-devices", help="Keep device memory on the host (no GPU needed); every count stays the same.")]
ProfileOption = Annotated[bool, typer.Option(
    "--profile", help="On a real GPU, cross-check copy bytes with torch.profiler memcpy events.")]
OpaqueOption = Annotated[bool, typer.Option(
    "--opaque-delegates", help="Run every delegate as an opaque stand-in: outputs seeded from the inputs' bytes, "
    "not the model's; copies are counted as for a device delegate.")]


def opaque_note(backends: Sequence[str]) -> str:
    return (f"opaque delegates: {', '.join(backends)} ran as stand-ins (seeded from their inputs' bytes); "
            f"outputs that depend on them are not the model's")
