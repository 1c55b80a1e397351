"""What moved between two versions of one method: the values the second plans with initial data that the first
did not (``diff`` counts them; ``validate`` checks each is copied once at load and never per call)."""

from __future__ import annotations

from typing import NamedTuple

from pte_devconst.schema import model as m


class MovedValue(NamedTuple):
    """A value planned with initial data in the rewritten method: a moved constant, or a folded value."""

    value: int
    device: m.Device  # the device of its planned buffer (the CPU under host placement)
    folded: bool  # computed by the host (or new) in the original, not a constant there


def moved_values(before: m.ExecutionPlan, after: m.ExecutionPlan, *, devices_only: bool = True) -> list[MovedValue]:
    """Values ``after`` plans with initial data that ``before`` had as constants (moved) or as tensors without
    initial data, or not at all (folded).  ``devices_only``: only those in a buffer on a non-CPU device."""
    values_before = before.values or ()
    devices = after.buffer_devices()  # once per method: a lookup per value is quadratic on a long device list
    moved = []
    for index, value in enumerate(after.values or ()):
        if not (isinstance(value, m.Tensor) and value.has_initial_data) or value.allocation_info is None:
            continue
        device = devices.get(value.allocation_info.memory_id, m.CPU)
        old = values_before[index] if index < len(values_before) else None
        if devices_only and device.is_cpu or isinstance(old, m.Tensor) and old.has_initial_data:
            continue
        if isinstance(old, m.Tensor) and old.is_constant:
            moved.append(MovedValue(index, device, False))
        elif old is None or isinstance(old, m.Tensor):
            moved.append(MovedValue(index, device, True))
    return moved
