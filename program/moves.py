"""What moved between two versions of one method: the values the second keeps in device memory for the whole
method that the first did not (``diff`` counts them; ``validate`` checks each is copied to its device once and
never per call).

The file says how a value's bytes reach device memory that holds them for the whole method, in two ways only:
the loader fills planned memory with its initial data (at load), or a copy kernel the method runs once fills it
(on the first call: a run-once region's copy of a host constant, ``program/once.py``).  Which encoding wrote a
file is the encodings' to say (``rewriter/encodings: moved_by_encodings``, each reading its own); ``moved_values``
reads both ways from the format's and the runtime's semantics alone.  A moved value is named by the value of the
first version whose bytes it holds (the constant itself), with ``holder``, the value that holds them in the
second.
"""

from __future__ import annotations


from typing import Callable, Mapping

from pte_devconst.schema import model as m
from pte_devconst.util.record import record

from .once import copies_made_once


@record
class Arrival:
    """How a moved value reaches its device in the second version, as the file says: once, in one phase of a run
    (``"load"``, ``"call 0"``), by the loader's initial data (the copy names the value itself) or by a copy kernel
    the method runs (the copy names the holder as its destination).  ``validate`` checks each value against its
    arrival without knowing which encoding wrote it."""

    when: str  # "at load", "on the first call": what reports say
    phase: str  # the phase of a run whose copies bring it
    by_kernel: bool  # a copy kernel into the holder, not the loader's initial data
    # What reports call one copy that brings it ("run-once copy"), and what they call a value kept without one
    # ("initial data"): the encoding that wrote the file gives its own words (``Encoding.moved``).
    copy: str = "run-once copy"
    kept: str = "initial data"


AT_LOAD = Arrival("at load", "load", False)  # planned memory the loader fills with its initial data
COPIED_ONCE = Arrival("on the first call", "call 0", True)  # a copy kernel that runs once (program/once.py)


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
# registered encoding, ``rewriter/encodings: moved_by_encodings``; alone, the runner reads ``moved_values``).
MovedReader = Callable[[m.ExecutionPlan, m.ExecutionPlan], list[MovedValue]]


def moved_values(before: m.ExecutionPlan, after: m.ExecutionPlan, *, devices_only: bool = True) -> list[MovedValue]:
    """Values ``after`` keeps in device memory that ``before`` had as constants (moved) or as tensors without
    initial data, or not at all (folded), filled at load or by a copy made once; and tensors with initial data in
    ``before`` that ``after`` copies once instead.  ``devices_only``: only those in a buffer on a non-CPU device."""
    return loaded_values(before, after, devices_only=devices_only) \
        + copied_values(before, after, copies_made_once(before), copies_made_once(after), devices_only=devices_only)


def loaded_values(before: m.ExecutionPlan, after: m.ExecutionPlan, *, devices_only: bool = True,
                  arrival: Arrival = AT_LOAD) -> list[MovedValue]:
    """``moved_values``'s planned device memory with initial data (arriving by ``arrival``: at load)."""
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
            moved.append(MovedValue(index, device, False, arrival=arrival))
        elif old is None or isinstance(old, m.Tensor):
            moved.append(MovedValue(index, device, True, arrival=arrival))
    return moved


def copied_values(before: m.ExecutionPlan, after: m.ExecutionPlan, copies_before: Mapping[int, tuple[int, int]],
                  copies_after: Mapping[int, tuple[int, int]], *, devices_only: bool = True,
                  arrival: Arrival = COPIED_ONCE) -> list[MovedValue]:
    """The destinations of ``copies_after`` (destination -> (source, instruction): copies ``after`` makes once)
    that ``copies_before`` did not fill from the same source (arriving by ``arrival``)."""
    values_before = before.values or ()
    values_after = after.values or ()
    devices = after.buffer_devices()
    moved = []
    for dst, (src, _) in sorted(copies_after.items()):
        target = values_after[dst] if 0 <= dst < len(values_after) else None
        if not isinstance(target, m.Tensor) or target.allocation_info is None \
                or copies_before.get(dst, (-1,))[0] == src:
            continue
        device = devices.get(target.allocation_info.memory_id, m.CPU)
        if devices_only and device.is_cpu:
            continue
        old_src = values_before[src] if 0 <= src < len(values_before) else None
        old_dst = values_before[dst] if dst < len(values_before) else None
        if isinstance(old_dst, m.Tensor) and old_dst.has_initial_data:
            moved.append(MovedValue(dst, device, False, dst, arrival, True))
        elif isinstance(old_src, m.Tensor) and old_src.is_constant:
            moved.append(MovedValue(src, device, False, dst, arrival))
        else:
            moved.append(MovedValue(dst, device, True, dst, arrival))
    return moved
