"""What moved between two versions of one method: the values the second keeps in device memory for the whole
method that the first did not (``diff`` counts them; ``validate`` checks each is copied to its device once and
never per call).

Two encodings keep a value in device memory (``program/runtime.py``): planned device memory with initial data
(1.6: filled at load), or planned device memory a first-call prologue fills from a host constant (1.5:
``program/prologue.py``).  A moved value is named by the value of the first version whose bytes it holds (the
constant itself), with ``holder``, the value that holds them in the second.
"""

from __future__ import annotations


from typing import Callable

from pte_devconst.schema import model as m
from pte_devconst.util.record import record

from .prologue import first_call_copies


@record
class Arrival:
    """How a moved value reaches its device in the second version, as the file says: once, in one phase of a run
    (``"load"``, ``"call 0"``), by the loader's initial data (the copy names the value itself) or by a copy kernel
    the method runs (the copy names the holder as its destination).  ``validate`` checks each value against its
    arrival without knowing which encoding wrote it."""

    when: str  # "at load", "on the first call": what reports say
    phase: str  # the phase of a run whose copies bring it
    by_kernel: bool  # a copy kernel into the holder, not the loader's initial data


AT_LOAD = Arrival("at load", "load", False)  # device initial data (program/runtime.py)
ON_FIRST_CALL = Arrival("on the first call", "call 0", True)  # a first-call prologue's copy (program/prologue.py)


@record
class MovedValue:
    """A value the rewritten method keeps in device memory: a moved constant, or a folded value."""

    value: int  # the constant (moved) or the value (folded) in the first version
    device: m.Device  # the device of its planned buffer (the CPU under host placement)
    folded: bool  # computed by the host (or new) in the original, not a constant there
    holder: int = -1  # the value holding its bytes in the second version (-1: ``value`` itself)
    arrival: Arrival = AT_LOAD  # how its bytes reach the holder
    reencoded: bool = False  # held with initial data in the first version too: only the encoding changed

    @property
    def held_by(self) -> int:
        return self.value if self.holder < 0 else self.holder


# What moved between two versions of a method, as one reader says (``validate`` takes one: the API's asks each
# registered encoding, ``rewriter/encodings: moved_by_encodings``; alone, the runner reads both built-in ones).
MovedReader = Callable[[m.ExecutionPlan, m.ExecutionPlan], list[MovedValue]]


def moved_values(before: m.ExecutionPlan, after: m.ExecutionPlan, *, devices_only: bool = True) -> list[MovedValue]:
    """Values ``after`` keeps in device memory that ``before`` had as constants (moved) or as tensors without
    initial data, or not at all (folded); and 1.6 constants that ``after`` re-encodes as first-call copies.
    ``devices_only``: only those in a buffer on a non-CPU device."""
    return resident_values(before, after, devices_only=devices_only) \
        + first_call_values(before, after, devices_only=devices_only)


def resident_values(before: m.ExecutionPlan, after: m.ExecutionPlan, *, devices_only: bool = True
                    ) -> list[MovedValue]:
    """``moved_values``'s planned device memory with initial data (arriving ``AT_LOAD``)."""
    values_before = before.values or ()
    values_after = after.values or ()
    devices = after.buffer_devices()  # once per method: a lookup per value is quadratic on a long device list
    moved = []
    for index, value in enumerate(values_after):
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


def first_call_values(before: m.ExecutionPlan, after: m.ExecutionPlan, *, devices_only: bool = True
                      ) -> list[MovedValue]:
    """``moved_values``'s destinations of a first-call prologue's copies (arriving ``ON_FIRST_CALL``)."""
    values_before = before.values or ()
    values_after = after.values or ()
    devices = after.buffer_devices()
    moved = []
    already = first_call_copies(before)
    for dst, (src, _) in sorted(first_call_copies(after).items()):
        target = values_after[dst] if 0 <= dst < len(values_after) else None
        if not isinstance(target, m.Tensor) or target.allocation_info is None or already.get(dst, (-1,))[0] == src:
            continue
        device = devices.get(target.allocation_info.memory_id, m.CPU)
        if devices_only and device.is_cpu:
            continue
        old_src = values_before[src] if 0 <= src < len(values_before) else None
        old_dst = values_before[dst] if dst < len(values_before) else None
        if isinstance(old_dst, m.Tensor) and old_dst.has_initial_data:
            moved.append(MovedValue(dst, device, False, dst, ON_FIRST_CALL, True))
        elif isinstance(old_src, m.Tensor) and old_src.is_constant:
            moved.append(MovedValue(src, device, False, dst, ON_FIRST_CALL))
        else:
            moved.append(MovedValue(dst, device, True, dst, ON_FIRST_CALL))
    return moved
