"""Copy accounting: every host-to-device and device-to-host copy the runner makes, with its cause.

The ledger is the measurement this project is about, so it is deliberately
plain: a list of events, each tagged with the phase it happened in ("load" or
call number), the direction, the cause, the bytes, the device, and the program
value it copied from (when one exists), so that ``validate`` can attribute
per-call copies to individual constants.  Nothing here imports torch.
"""

from __future__ import annotations

from dataclasses import field
from enum import Enum
from typing import Any, Iterable, Optional

from pte_devconst.util.record import record


class Direction(str, Enum):
    H2D = "h2d"
    D2H = "d2h"


class Cause(str, Enum):
    """Why a copy happened; the names are what tables and JSON show."""

    LOAD_INITIAL_DATA = "initial data at load"
    DELEGATE_INIT = "delegate constants at init"
    H2D_KERNEL = "_h2d_copy kernel"
    D2H_KERNEL = "_d2h_copy kernel"
    DELEGATE_HOST_INPUT = "delegate copies host input"
    DELEGATE_HOST_OUTPUT = "delegate writes host output"
    DELEGATE_DEVICE_INPUT = "host delegate copies device input"
    METHOD_INPUT = "method input"
    METHOD_OUTPUT = "method output"


LOAD = "load"


@record
class CopyEvent:
    phase: str  # LOAD or "call N"
    method: str
    direction: Direction
    cause: Cause
    nbytes: int
    device: str  # the non-CPU side, e.g. "cuda:0"
    source_value: Optional[int] = None  # value index the bytes came from, when a program value
    # whether those bytes were computed from the program's constants alone (runner/derivation.py); None: not known
    constant_derived: Optional[bool] = None
    destination_value: Optional[int] = None  # value index the bytes went to (a copy kernel's out)


@record
class CopyTotals:
    """Count and bytes of one (direction, cause) cell."""

    count: int = 0
    nbytes: int = 0

    def __add__(self, other: "CopyTotals") -> "CopyTotals":
        return CopyTotals(self.count + other.count, self.nbytes + other.nbytes)


@record
class PhaseCopies:
    """All copies of one phase (the load, or one call), summed by direction and cause."""

    phase: str
    cells: dict[tuple[Direction, Cause], CopyTotals] = field(default_factory=dict)
    constant_derived_h2d: CopyTotals = CopyTotals()  # the H2D copies of bytes computed from constants alone

    @classmethod
    def of(cls, phase: str, events: Iterable[CopyEvent]) -> "PhaseCopies":
        cells: dict[tuple[Direction, Cause], CopyTotals] = {}
        derived = CopyTotals()
        for event in events:
            key = (event.direction, event.cause)
            cells[key] = cells.get(key, CopyTotals()) + CopyTotals(1, event.nbytes)
            if event.direction is Direction.H2D and event.constant_derived:
                derived = derived + CopyTotals(1, event.nbytes)
        return cls(phase, cells, derived)

    def total(self, direction: Direction) -> CopyTotals:
        result = CopyTotals()
        for (d, _), cell in self.cells.items():
            if d == direction:
                result = result + cell
        return result

    @property
    def h2d(self) -> CopyTotals:
        return self.total(Direction.H2D)

    @property
    def d2h(self) -> CopyTotals:
        return self.total(Direction.D2H)

    def to_json(self) -> dict[str, Any]:
        return {
            "phase": self.phase,
            "h2d": {"count": self.h2d.count, "bytes": self.h2d.nbytes},
            "d2h": {"count": self.d2h.count, "bytes": self.d2h.nbytes},
            "h2d_constant_derived": {"count": self.constant_derived_h2d.count,
                                     "bytes": self.constant_derived_h2d.nbytes},
            "by_cause": [
                {"direction": d.value, "cause": c.value, "count": t.count, "bytes": t.nbytes}
                for (d, c), t in sorted(self.cells.items(), key=lambda kv: (kv[0][0].value, kv[0][1].value))
            ],
        }


class CopyLedger:
    """Collects copy events; the runner sets ``phase`` before the load and before each call."""

    def __init__(self) -> None:
        self.events: list[CopyEvent] = []
        self.phase = LOAD
        self.method = ""

    def record(self, direction: Direction, cause: Cause, nbytes: int, device: str,
               source_value: Optional[int] = None, constant_derived: Optional[bool] = None,
               destination_value: Optional[int] = None) -> None:
        self.events.append(CopyEvent(self.phase, self.method, direction, cause, int(nbytes), device, source_value,
                                     constant_derived, destination_value))

    def of_phase(self, phase: str, method: Optional[str] = None) -> list[CopyEvent]:
        return [e for e in self.events if e.phase == phase and (method is None or e.method == method)]
