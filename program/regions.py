"""Where a value's bytes are: how many (``value_nbytes``), on which device (``memory_device``), its region in a
planned buffer, and an index to find regions that overlap.

One definition of each for every consumer (the copy rule, fold's view reads, constant-derived copies, the
per-call transfers, the memory layout and its check, the replay, the reports, the runner): a region is a Tensor
with ``allocation_info`` and at least one byte.  ``IntervalIndex`` finds the regions that overlap one;
``IntervalMap`` says what each byte holds now.  A zero-byte tensor has no region (it overlaps nothing); an unknown
scalar type has no bytes and no region (the reader refuses it before anything asks, so a report that asks anyway
gets 0).
"""

from __future__ import annotations

import bisect
from typing import Generic, Iterator, Mapping, Optional, Sequence, TypeVar

from pte_devconst.schema import model as m
from pte_devconst.util.record import record


@record
class Region:
    """Bytes [start, end) of planned buffer ``memory_id``."""

    memory_id: int
    start: int
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.start

    def overlaps(self, other: "Region") -> bool:
        return self.memory_id == other.memory_id and self.start < other.end and other.start < self.end


def value_nbytes(value: m.EValue) -> int:
    """The bytes of a tensor's data (its upper bound for a dynamic shape); 0 for anything else, and for a scalar
    type the format does not define (``schema/validate.py`` refuses it before anything asks)."""
    if not isinstance(value, m.Tensor):
        return 0
    try:
        return value.nbytes
    except KeyError:
        return 0


def memory_device(value: m.EValue, buffer_devices: Mapping[int, m.Device]) -> m.Device:
    """The device a value's memory is on, as the runtime allocates it: a planned tensor's buffer's device (from
    ``plan.buffer_devices()``: unlisted buffers are the host's, whatever the tensor's own tag says), the host for
    a constant (the loader maps it from the file), the tensor's device tag for an unplanned one (a caller's input);
    the host for anything that is not a tensor."""
    if not isinstance(value, m.Tensor):
        return m.CPU
    if value.allocation_info is not None:
        return buffer_devices.get(value.allocation_info.memory_id, m.CPU)
    return m.CPU if value.is_constant else value.device


RegionKey = tuple[int, int, int]  # a Region's fields, (memory_id, start, end), as a plain tuple


def region_key(value: m.EValue) -> Optional[RegionKey]:
    """``planned_region`` as a plain ``(memory_id, start, end)`` tuple, for the sets and dict keys of loops over
    every instruction (the taint in ``effects``, the data flow, derived values): a tuple hashes and compares in C,
    a ``Region`` (a record) in a Python call, which made those loops some 8 % slower."""
    if not isinstance(value, m.Tensor) or value.allocation_info is None:
        return None
    nbytes = value_nbytes(value)
    if nbytes <= 0:
        return None
    info = value.allocation_info
    return info.memory_id, info.memory_offset, info.memory_offset + nbytes


def planned_region(value: m.EValue) -> Optional[Region]:
    """The region of a planned tensor with bytes, else None."""
    key = region_key(value)
    return None if key is None else Region(*key)


def value_regions(values: Sequence[m.EValue]) -> list[Optional[Region]]:
    """``planned_region`` of every value, computed once."""
    return [planned_region(value) for value in values]


class IntervalIndex:
    """The intervals of one buffer, queried for those overlapping [start, end) in O(log n + k log n).

    A static tree over the intervals sorted by start, each node holding the largest end below it (an
    augmented search tree laid out in an array), so a query visits only subtrees that can hold an overlap.
    """

    __slots__ = ("_starts", "_ends", "_keys", "_max_end")

    def __init__(self, intervals: Sequence[tuple[int, int, int]]) -> None:
        """``intervals``: (start, end, key) triples; keys come back from ``overlapping``."""
        ordered = sorted(intervals)
        self._starts = [i[0] for i in ordered]
        self._ends = [i[1] for i in ordered]
        self._keys = [i[2] for i in ordered]
        self._max_end = [0] * len(ordered)
        self._build(0, len(ordered))

    def _build(self, lo: int, hi: int) -> None:
        # Iterative post-order over the implicit tree: node = (lo + hi) // 2 of [lo, hi).
        stack = [(lo, hi, False)]
        while stack:
            lo, hi, done = stack.pop()
            if lo >= hi:
                continue
            mid = (lo + hi) // 2
            if not done:
                stack.append((lo, hi, True))
                stack.append((lo, mid, False))
                stack.append((mid + 1, hi, False))
                continue
            best = self._ends[mid]
            if lo < mid:
                best = max(best, self._max_end[(lo + mid) // 2])
            if mid + 1 < hi:
                best = max(best, self._max_end[(mid + 1 + hi) // 2])
            self._max_end[mid] = best

    def __len__(self) -> int:
        return len(self._keys)

    def overlapping(self, start: int, end: int) -> Iterator[int]:
        """Keys of the intervals that share a byte with [start, end)."""
        stack = [(0, len(self._keys))]
        starts, ends, keys, max_end = self._starts, self._ends, self._keys, self._max_end
        while stack:
            lo, hi = stack.pop()
            if lo >= hi:
                continue
            mid = (lo + hi) // 2
            if max_end[mid] <= start:
                continue  # nothing below ends after start
            stack.append((lo, mid))
            if starts[mid] < end:
                if start < ends[mid]:
                    yield keys[mid]
                stack.append((mid + 1, hi))


V = TypeVar("V")


class IntervalMap(Generic[V]):
    """What each byte of one storage holds, as segments: segment i is [starts[i], starts[i + 1]) (the last one
    unbounded), holding vals[i].  Reads and writes cost O(log n + the segments they touch)."""

    __slots__ = ("starts", "vals")

    def __init__(self, initial: V) -> None:
        self.starts = [0]
        self.vals: list[V] = [initial]

    def read(self, start: int, end: int) -> list[tuple[int, int, V]]:
        """The segments over [start, end), clipped to it."""
        starts, vals = self.starts, self.vals
        i = bisect.bisect_right(starts, start) - 1
        n = len(starts)
        out = []
        while i < n and starts[i] < end:
            stop = starts[i + 1] if i + 1 < n else end
            out.append((max(starts[i], start), min(stop, end), vals[i]))
            i += 1
        return out

    def _cut(self, at: int) -> int:
        """The index of the segment that starts at ``at`` (split there if needed)."""
        starts = self.starts
        i = bisect.bisect_right(starts, at) - 1
        if starts[i] == at:
            return i
        starts.insert(i + 1, at)
        self.vals.insert(i + 1, self.vals[i])
        return i + 1

    def assign(self, start: int, end: int, value: V) -> None:
        """[start, end) holds ``value``."""
        starts = self.starts
        i = bisect.bisect_right(starts, start) - 1
        if starts[i] == start and i + 1 < len(starts) and starts[i + 1] == end:
            self.vals[i] = value  # the common case: a write of exactly a segment
            return
        i = self._cut(start)
        j = self._cut(end)
        del starts[i + 1:j]
        del self.vals[i + 1:j]
        self.vals[i] = value

    def put(self, pieces: Sequence[tuple[int, int, V]]) -> None:
        """Each (start, end, value) of ``pieces`` (contiguous, in order) holds its value."""
        if len(pieces) == 1:
            self.assign(*pieces[0])
            return
        start, end = pieces[0][0], pieces[-1][1]
        i = self._cut(start)
        j = self._cut(end)
        self.starts[i:j] = [p[0] for p in pieces]
        self.vals[i:j] = [p[2] for p in pieces]
