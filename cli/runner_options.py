"""The options and notes ``run`` and ``validate`` share: both run programs with the torch runner.

Kept apart from the command modules so either imports them without importing the other (or the app).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional, Sequence

import typer

from pte_devconst.util.units import exact_bytes

PtdOption = Annotated[Optional[Path], typer.Option(
    "--ptd", metavar="FILE", help="The .ptd data file holding the program's external constants [default: NAME.ptd "
    "next to NAME.pte, if there; for NAME.devconst.pte also NAME.ptd].")]
InputsOption = Annotated[Optional[Path], typer.Option(
    "--inputs", "-i", metavar="FILE", help="torch.save file of inputs: {method: [call, ...]}, a list of calls, or "
    "one tuple of tensors (default: deterministic random inputs of the right shapes).")]
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


DELEGATE_INDICES_SHOWN = 8


def delegates_note(delegates: Sequence[Any], label: str = "delegates") -> list[str]:
    """``delegates: XnnpackBackend (cpu) #0, #2: ExecuTorch runtime; CudaBackend (cuda:0) #1: stand-in``: what
    ran each delegate, grouped by backend, device and execution (none for a program without delegates)."""
    groups: dict[tuple[str, str, str, str], list[int]] = {}
    for run in delegates:
        groups.setdefault((run.backend_id, run.device, str(run.execution), run.why), []).append(run.index)
    parts = []
    for (backend, device, execution, why), indices in groups.items():
        shown = ", ".join(f"#{i}" for i in indices[:DELEGATE_INDICES_SHOWN])
        if len(indices) > DELEGATE_INDICES_SHOWN:
            shown += f" and {len(indices) - DELEGATE_INDICES_SHOWN} more"
        parts.append(f"{backend} ({device}) {shown}: {execution}" + (f" ({why})" if why else ""))
    return [f"{label}: {'; '.join(parts)}"] if parts else []


def caller_memory_note(bound: Sequence[Any]) -> list[str]:
    """A line for the delegate outputs the program leaves unplanned and the runner binds (none otherwise)."""
    from pte_devconst.types import CallerRole

    outputs = [c for c in bound if c.role is CallerRole.DELEGATE_OUTPUT]
    if not outputs:
        return []
    values = ", ".join(f"{c.value} (delegate #{c.delegate}, {c.device})" for c in outputs[:DELEGATE_INDICES_SHOWN])
    more = f" and {len(outputs) - DELEGATE_INDICES_SHOWN} more" if len(outputs) > DELEGATE_INDICES_SHOWN else ""
    return [f"caller memory: the program leaves delegate outputs unplanned, bound at load on their delegate's "
            f"device as a caller would: {'values' if len(outputs) > 1 else 'value'} {values}{more}, "
            f"{exact_bytes(sum(c.nbytes for c in outputs))}"]
