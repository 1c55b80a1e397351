"""Device memory, in one module: where a rewrite puts the values it makes resident, whether a buffer is laid out
again, the layout algorithm, its independent check, and what the program's device memory adds up to.

A newcomer changing how device memory is laid out changes this module (and its tests, ``tests/test_layout.py``);
``rewriter/plan.py`` only decides what moves and records what this module answers.  The lifetimes the layout
runs on are ``memory.py``'s model (``storage_groups``: which values share bytes, and when each group lives).

**Policy.**

* *What gets a region, in which buffer* (``AppendedRegions``): every value a rewrite makes resident on a device
  (a moved constant, a folded value, a constant re-encoded for the 1.5 runtime) goes to its method's first planned
  buffer on that device, a new buffer when the method has none (appended to its buffer list, its device entry
  added by the edit), at the next aligned offset past the buffer's end.
* *Alignment*: ``TENSOR_ALIGNMENT`` (the format's 16 bytes, ``schema/header.py``), through ``aligned`` and
  ``is_aligned`` only: every region placed here, every group of a layout, and the self-check's test of a moved
  value's region.
* *Append or lay out again* (``relayout``): each buffer that receives values is laid out again by lifetimes, as
  ExecuTorch's planner would, when that needs less than appending; it keeps the input's offsets with the values
  appended when it does not (a program whose planner already packed tightly), and when the layout runs out of its
  work budget (``LayoutWork``, proportional to the buffer's groups): a bounded cost, never a refusal.
* *What it adds up to* (``device_memory``): the planned device memory before and after, the least any layout
  needs (``bound``), and what appending alone would take.

**Layout** (``plan_layout``): resident groups first, packed, then every other group by the smallest of a few
greedy fits (ExecuTorch's planner, ``exir/memory_planning.py``, also keeps the smallest of its algorithms): two
O(n log n) sweeps by first use (the lowest free gap; shared objects freed by last use), and, while a share of
the layout's work budget lasts, ExecuTorch's ``greedy`` by size and a lowest-offset fit by size.  Each group is
aligned (``aligned``).  The budget is proportional to the groups; past it the caller keeps the input's offsets.  Dead
values are left unplanned (``allocation_info`` None: the runtime gives such a tensor no data, and nothing reads
it).

**Check** (``layout_problems``): an independent proof of a buffer's layout: no resident group shares a byte
with anything, and no two groups whose lifetimes meet share a byte (a sweep over lifetimes with the live
regions kept sorted, so each new group is compared with its neighbours only).
"""

from __future__ import annotations

import bisect
import heapq
from collections import defaultdict
from dataclasses import replace
from typing import Iterable, Mapping, Optional, Sequence

from pte_devconst.schema import model as m
from pte_devconst.schema.header import TENSOR_ALIGNMENT, align_up
from pte_devconst.schema.model import CPU, Device
from pte_devconst.schema.validate import MAX_TENSOR_BYTES
from pte_devconst.util.errors import UnsupportedProgramError
from pte_devconst.util.gc_pause import gc_paused
from pte_devconst.util.record import record

from .effects import MethodEffects
from .memory import Lifetime, StorageGroup, storage_groups


@record
class BufferLayout:
    """A new layout of one planned buffer: where each member value starts, and the buffer's size."""

    memory_id: int
    size: int
    offsets: dict[int, Optional[int]]  # value -> new memory_offset (None: unplanned, dead)
    resident_bytes: int
    peak_bytes: int  # the largest sum of non-resident group sizes live at one position

    @property
    def bound(self) -> int:
        """What any layout needs at least: the resident bytes plus the peak of what else is live at once."""
        return self.resident_bytes + self.peak_bytes


def aligned(size: int) -> int:
    """``size`` (or an offset) rounded up to the tensor alignment: where the next region may start."""
    return align_up(size, TENSOR_ALIGNMENT)


def is_aligned(offset: int) -> bool:
    """Whether a region may start at ``offset`` (the self-check's test of a value the rewrite placed)."""
    return offset % TENSOR_ALIGNMENT == 0


def peak_live_bytes(groups: Sequence[StorageGroup]) -> int:
    """The largest sum of (aligned) extents of non-resident groups alive at one program position."""
    keys: list[int] = []  # position * 2, + 1 for an allocation: frees sort before allocations at one position
    sizes: list[int] = []
    for group in groups:
        if group.lifetime is not None and not group.resident:
            size = aligned(group.extent.nbytes)
            keys += (group.lifetime.first << 1 | 1, (group.lifetime.last + 1) << 1)
            sizes += (size, -size)
    live = peak = 0
    for event in sorted(range(len(keys)), key=keys.__getitem__):  # integer keys: a third of sorting tuples
        live += sizes[event]
        if live > peak:
            peak = live
    return peak


# A buffer's layout may take this many steps per storage group (and at least LAYOUT_WORK_FLOOR).  A step is one
# operation of O(log n) at most: the two sweeps take about a dozen per group (tree and heap operations, amortized).
LAYOUT_WORK_PER_GROUP = 256
LAYOUT_WORK_FLOOR = 1 << 16
# Of those, what the fits by size may take (they compare a group with every placed group whose lifetime it meets:
# quadratic when everything is live at once, where the sweeps are as tight).
SIZE_ORDER_WORK_PER_GROUP = 64

_Fit = tuple[list[int], int]  # a fit of the non-resident groups: each one's base (relative), and the total size


class _OutOfWork(Exception):
    """A layout, or one fit of it, used up its steps."""


class LayoutWork:
    """The steps one buffer's layout may still take; ``spend`` raises (inside this module) past the limit."""

    __slots__ = ("limit", "left")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.left = limit

    @classmethod
    def for_groups(cls, groups: int) -> "LayoutWork":
        """The budget of a buffer with ``groups`` storage groups: proportional to them."""
        return cls(LAYOUT_WORK_PER_GROUP * groups + LAYOUT_WORK_FLOOR)

    def spend(self, steps: int) -> None:
        self.left -= steps
        if self.left < 0:
            raise _OutOfWork


@gc_paused
def plan_layout(memory_id: int, groups: Sequence[StorageGroup],
                work: Optional[LayoutWork] = None) -> Optional[BufferLayout]:
    """Greedy over lifetimes (module docstring); deterministic for a given program.  None when ``work`` (default:
    ``LayoutWork.for_groups``) runs out before the sweeps finish: the caller keeps the input's offsets.  Run with
    the cyclic collector paused (``util/gc_pause.py``): the fits allocate a few acyclic tuples per group, and each
    collection they trigger walks every live object (a tenth of the time at 100,000 values, growing with size).

    Four fits of the non-resident groups, the smallest kept (the first of equals).  Two sweeps by first use, each
    O(n log n), always: the lowest free gap that holds the group, and *shared objects* freed by last use (a heap).
    Two greedy fits largest group first, side by side while their share of ``work`` lasts (a step per placed group
    a group meets: quadratic when everything is live at once, where the sweeps are as tight): into the first
    shared object none of whose groups it meets (ExecuTorch's ``greedy``), and at the lowest aligned offset clear
    of every placed group it meets (the tightest when sizes and lifetimes vary).  Those run only when the sweeps
    miss the bound (the peak of what is live at once), which no layout can beat.
    """
    work = work if work is not None else LayoutWork.for_groups(len(groups))
    offsets: dict[int, Optional[int]] = {}
    cursor = 0

    def place(group: StorageGroup, base: int) -> None:
        at = base + group.extent.start % TENSOR_ALIGNMENT
        for index, start in zip(group.members, group.starts):
            offsets[index] = at + (start - group.extent.start)

    live = [g for g in groups if g.lifetime is not None]
    for group in sorted((g for g in live if g.resident), key=lambda g: g.members[0]):
        place(group, cursor)
        cursor = aligned(cursor + _block(group))
    resident_bytes = cursor
    others = _largest_first([g for g in live if not g.resident])
    needs, lives = [_block(g) for g in others], [_life(g) for g in others]
    try:
        work.spend(len(groups))
        order = _by_first_use(needs, lives)
        fits: list[_Fit] = [_gap_fit(needs, lives, work, order), _object_fit(needs, lives, work, order)]
    except _OutOfWork:
        return None
    peak = peak_live_bytes(groups)
    if min(size for _, size in fits) > peak:  # the sweeps miss the bound: try the fits by size, within a share
        share = LayoutWork(min(work.left, SIZE_ORDER_WORK_PER_GROUP * len(others) + LAYOUT_WORK_FLOOR))
        by_size = _size_ordered_fits(needs, lives, share)
        work.left -= share.limit - max(share.left, 0)
        if by_size is not None:
            offsets_fit, objects_fit = by_size
            fits = [objects_fit, offsets_fit] + fits
    bases, size = min(fits, key=lambda fit: fit[1])
    for group, base in zip(others, bases):
        place(group, resident_bytes + base)
    for group in groups:
        if group.lifetime is None:
            for index in group.members:
                offsets[index] = None
    return BufferLayout(memory_id, resident_bytes + size, offsets, resident_bytes, peak)


def _block(group: StorageGroup) -> int:
    """The bytes a group takes from an aligned base: its extent, after its start's offset within 16 bytes."""
    return group.extent.nbytes + group.extent.start % TENSOR_ALIGNMENT


def _largest_first(groups: list[StorageGroup]) -> list[StorageGroup]:
    """Live groups by size, largest first, then by first use and first member: one integer key per group."""
    blocks = [_block(g) for g in groups]
    firsts = [_life(g).first + 1 for g in groups]
    span_block, span_first = max(blocks, default=0) + 1, max(firsts, default=0) + 1
    span_member = max((g.members[0] for g in groups), default=0) + 1
    keys = [((span_block - 1 - block) * span_first + first) * span_member + g.members[0]
            for g, block, first in zip(groups, blocks, firsts)]
    return [groups[k] for k in sorted(range(len(groups)), key=keys.__getitem__)]


def _life(group: StorageGroup) -> Lifetime:
    assert group.lifetime is not None, "only live groups are laid out"
    return group.lifetime


def _by_first_use(needs: Sequence[int], lives: Sequence[Lifetime]) -> list[int]:
    """Indexes of the groups in sweep order: by first use, the larger first at one position (then by index).

    One integer key per group (a stable sort keeps the index order): a tenth of sorting by tuples at 100,000."""
    span = max(needs, default=0) + 1
    keys = [(life.first + 1) * span + span - 1 - need for need, life in zip(needs, lives)]
    return sorted(range(len(needs)), key=keys.__getitem__)


_EMPTY = 1 << 80  # above any offset or rank


class _LeastTree:
    """The least value held in each of ``slots`` slots (``_EMPTY``: none), and the least at or after a slot, in
    O(log slots) each (a segment tree in an array); every operation is a step of ``work``."""

    __slots__ = ("leaves", "least", "work")

    def __init__(self, slots: int, work: LayoutWork) -> None:
        leaves = 1
        while leaves < slots:
            leaves *= 2
        self.leaves = leaves
        self.least = [_EMPTY] * (2 * leaves)
        self.work = work

    def set(self, slot: int, value: int) -> None:
        self.work.spend(1)
        least = self.least
        node = slot + self.leaves
        least[node] = value
        node >>= 1
        while node:
            left, right = least[2 * node], least[2 * node + 1]
            low = left if left < right else right
            if least[node] == low:
                break
            least[node] = low
            node >>= 1

    def first(self, slot: int) -> int:
        """The least value in slots ``slot`` and after (``_EMPTY``: none)."""
        self.work.spend(1)
        least = self.least
        low, high, best = slot + self.leaves, 2 * self.leaves, _EMPTY
        while low < high:
            if low & 1:
                if least[low] < best:
                    best = least[low]
                low += 1
            if high & 1:
                high -= 1
                if least[high] < best:
                    best = least[high]
            low >>= 1
            high >>= 1
        return best


def _gap_fit(needs: Sequence[int], lives: Sequence[Lifetime], work: LayoutWork,
             order: Optional[Sequence[int]] = None) -> tuple[list[int], int]:
    """Bases (relative) and total size, sweeping by first use: a group takes the lowest free gap that holds it
    (else the free space below the top, grown), gaps freed by last use and merged with their neighbours.

    The gaps are filed by the largest need (of the groups' sizes) each holds, each slot of a ``_LeastTree``
    holding its lowest gap: the lowest gap holding a need is the least start at or after that need's slot.
    """
    sizes = sorted(set(needs))
    slot_of_need = {need: slot for slot, need in enumerate(sizes)}
    tree = _LeastTree(len(sizes), work)
    starts: list[list[int]] = [[] for _ in sizes]  # per slot, a heap of gap starts (stale ones dropped at its top)
    gap_end: dict[int, int] = {}  # start -> end of each free gap below the top
    gap_start: dict[int, int] = {}  # end -> start
    busy: list[tuple[int, int, int]] = []  # (last use, base, end) of the placed groups still live
    bases = [0] * len(needs)
    top = 0

    def slot(start: int, end: int) -> int:
        """The slot of the largest need a gap holds (-1: none)."""
        return bisect.bisect_right(sizes, end - start) - 1

    def add_gap(start: int, end: int) -> None:
        gap_end[start], gap_start[end] = end, start
        at = slot(start, end)
        if at >= 0:
            heapq.heappush(starts[at], start)
            if starts[at][0] == start:
                tree.set(at, start)

    def drop_gap(start: int) -> None:
        end = gap_end.pop(start)
        del gap_start[end]
        at = slot(start, end)
        if at < 0:
            return
        heap = starts[at]
        while heap and (heap[0] not in gap_end or slot(heap[0], gap_end[heap[0]]) != at):
            work.spend(1)
            heapq.heappop(heap)
        tree.set(at, heap[0] if heap else _EMPTY)

    for k in order if order is not None else _by_first_use(needs, lives):
        life, need = lives[k], needs[k]
        work.spend(1)
        while busy and busy[0][0] < life.first:  # free what is dead, merged with the gaps beside it
            _, start, end = heapq.heappop(busy)
            if start in gap_start:
                left = gap_start[start]
                drop_gap(left)
                start = left
            if end in gap_end:
                right = gap_end[end]
                drop_gap(end)
                end = right
            add_gap(start, end)
        start = tree.first(slot_of_need[need])
        if start != _EMPTY:
            end = gap_end[start]
        elif top in gap_start:  # the free space below the top, grown
            start, end = gap_start[top], top
        else:
            start = end = top
        if start in gap_end:
            drop_gap(start)
        placed = aligned(start + need)
        if placed < end:
            add_gap(placed, end)
        top = max(top, placed)
        bases[k] = start
        heapq.heappush(busy, (life.last, start, placed))
    return bases, top


def _object_fit(needs: Sequence[int], lives: Sequence[Lifetime], work: LayoutWork,
                order: Optional[Sequence[int]] = None) -> tuple[list[int], int]:
    """Bases (relative) and total size in *shared objects*, sweeping by first use: a group takes the smallest free
    object that holds it, else the largest free one (grown to it), else a new one; an object is free again after
    the last use of the group in it (a heap by last use).  The objects follow one another."""
    sizes = sorted({aligned(need) for need in needs})
    rank = {size: r for r, size in enumerate(sizes)}
    smallest = _LeastTree(len(sizes), work)  # slot r: r while an object of size rank r is free
    largest = _LeastTree(len(sizes), work)  # slot r: -r while an object of size rank r is free
    free: list[list[int]] = [[] for _ in sizes]  # free objects by size rank
    busy: list[tuple[int, int]] = []  # (last use, object)
    object_size: list[int] = []
    chosen = [0] * len(needs)

    def release(obj: int) -> None:
        r = rank[object_size[obj]]
        free[r].append(obj)
        if len(free[r]) == 1:
            smallest.set(r, r)
            largest.set(r, -r)

    def take(r: int) -> int:
        obj = free[r].pop()
        if not free[r]:
            smallest.set(r, _EMPTY)
            largest.set(r, _EMPTY)
        return obj

    for k in order if order is not None else _by_first_use(needs, lives):
        life, need = lives[k], aligned(needs[k])
        work.spend(1)
        while busy and busy[0][0] < life.first:
            release(heapq.heappop(busy)[1])
        fitting = smallest.first(rank[need])
        if fitting != _EMPTY:
            obj = take(fitting)
        else:
            biggest = largest.first(0)
            if biggest != _EMPTY:
                obj = take(-biggest)
                object_size[obj] = need
            else:
                obj = len(object_size)
                object_size.append(need)
        chosen[k] = obj
        heapq.heappush(busy, (life.last, obj))
    starts, cursor = [], 0
    for size in object_size:
        starts.append(cursor)
        cursor += size
    return [starts[obj] for obj in chosen], cursor


class _PlacedByLifetime:
    """Placed groups (their indexes), found by the lifetimes they meet in O(log positions + found): a segment tree
    over program positions holding each group at the nodes that cover its lifetime (those containing a position)
    and at the nodes above its first use (those first used within a range)."""

    __slots__ = ("leaves", "covering", "starting")

    def __init__(self, positions: int) -> None:
        leaves = 1
        while leaves < positions:
            leaves *= 2
        self.leaves = leaves
        self.covering: dict[int, list[int]] = defaultdict(list)
        self.starting: dict[int, list[int]] = defaultdict(list)

    def add(self, first: int, last: int, item: int) -> None:
        covering, starting = self.covering, self.starting
        low, high = first + self.leaves, last + self.leaves + 1
        while low < high:
            if low & 1:
                covering[low].append(item)
                low += 1
            if high & 1:
                high -= 1
                covering[high].append(item)
            low >>= 1
            high >>= 1
        node = first + self.leaves
        while node:
            starting[node].append(item)
            node >>= 1

    def meeting(self, first: int, last: int) -> list[int]:
        """Every placed item whose lifetime meets [first, last]: those alive at ``first``, then those first used
        after it, up to ``last``."""
        covering, starting = self.covering.get, self.starting.get
        found: list[int] = []
        node = first + self.leaves
        while node:
            found.extend(covering(node, ()))
            node >>= 1
        low, high = first + 1 + self.leaves, last + 1 + self.leaves
        while low < high:
            if low & 1:
                found.extend(starting(low, ()))
                low += 1
            if high & 1:
                high -= 1
                found.extend(starting(high, ()))
            low >>= 1
            high >>= 1
        return found


def _size_ordered_fits(needs: Sequence[int], lives: Sequence[Lifetime], work: LayoutWork
                       ) -> Optional[tuple[_Fit, _Fit]]:
    """Two greedy fits, each group in the order given (largest first), side by side over one index of the placed
    groups by lifetime: at the lowest aligned offset clear of the placed groups it meets (the tightest when sizes
    and lifetimes vary), and into the first shared object none of whose groups it meets (ExecuTorch's
    ``greedy``).  None when ``work`` runs out (a step per placed group met), as it does when most groups meet
    most others."""
    if not needs:
        return ([], 0), ([], 0)
    placed = _PlacedByLifetime(max(life.last for life in lives) + 2)  # positions from -1, shifted by one
    bases: list[int] = []
    ends: list[int] = []  # aligned
    top = 0
    objects: list[int] = []  # each group's shared object
    sizes: list[int] = []  # per object: its largest group's (aligned) need
    try:
        for k, (need, life) in enumerate(zip(needs, lives)):
            met = placed.meeting(life.first + 1, life.last + 1)
            work.spend(len(met) + 1)
            candidate = 0
            for base, end in sorted((bases[j], ends[j]) for j in met):
                if candidate + need <= base:
                    break
                if end > candidate:
                    candidate = end
            bases.append(candidate)
            ends.append(aligned(candidate + need))
            top = max(top, ends[k])
            busy = {objects[j] for j in met}
            number = 0
            while number in busy:
                number += 1
            if number == len(sizes):
                sizes.append(aligned(need))
            else:
                sizes[number] = max(sizes[number], aligned(need))
            objects.append(number)
            placed.add(life.first + 1, life.last + 1, k)
    except _OutOfWork:
        return None
    starts, cursor = [], 0
    for size in sizes:
        starts.append(cursor)
        cursor += size
    return (bases, top), ([starts[number] for number in objects], cursor)


def layout_problems(groups: Sequence[StorageGroup], size: int) -> list[str]:
    """Why this buffer's layout is wrong, checked from the groups alone (empty when it is right)."""
    problems: list[str] = []
    placed = [g for g in groups if g.lifetime is not None]
    for group in placed:
        if group.extent.end > size:
            problems.append(f"value {group.members[0]} [{group.extent.start}, {group.extent.end}) overruns the "
                            f"buffer's {size:,} bytes")
    resident = sorted((g.extent.start, g.extent.end, g.members[0]) for g in placed if g.resident)
    for (_s1, e1, v1), (s2, e2, v2) in zip(resident, resident[1:]):
        if s2 < e1:
            problems.append(f"resident values {v1} and {v2} share bytes [{s2}, {min(e1, e2)})")
    starts = [r[0] for r in resident]
    for group in groups:
        if group.resident:
            continue
        at = bisect.bisect_left(starts, group.extent.end)  # residents are disjoint: only the one before can meet it
        if at > 0 and resident[at - 1][1] > group.extent.start:
            problems.append(f"value {group.members[0]} shares bytes with resident value {resident[at - 1][2]}")
            return problems
    # Non-resident groups whose lifetimes meet: sweep by first use; live extents kept sorted by start.
    order = sorted((g for g in placed if not g.resident), key=lambda g: g.lifetime.first)  # type: ignore[union-attr]
    live_starts: list[tuple[int, int, int]] = []  # (start, end, value), pairwise disjoint while the check holds
    expiry: list[tuple[int, int, int, int]] = []  # (last, start, end, value)
    for group in order:
        life = group.lifetime
        assert life is not None
        while expiry and expiry[0][0] < life.first:
            _, s, e, v = heapq.heappop(expiry)
            del live_starts[bisect.bisect_left(live_starts, (s, e, v))]
        item = (group.extent.start, group.extent.end, group.members[0])
        at = bisect.bisect_left(live_starts, item)
        for neighbour in live_starts[max(0, at - 1):at + 1]:
            if neighbour[0] < item[1] and item[0] < neighbour[1]:
                problems.append(f"values {neighbour[2]} and {item[2]} are live at once and share bytes "
                                f"[{max(item[0], neighbour[0])}, {min(item[1], neighbour[1])})")
                return problems
        live_starts.insert(at, item)
        heapq.heappush(expiry, (life.last, *item))
    return problems


# --- policy: what gets a region, in which buffer; append or lay out again; what it adds up to -------------------

@record
class BufferGrowth:
    """A planned buffer the rewrite changes: its size before and after, and how it was laid out."""

    memory_id: int
    device: Device
    old_size: int
    new_size: int
    added: bool  # a new buffer (and non_const_buffer_device entry) was created
    relaid: bool = False  # laid out again by lifetimes (``relayout``); else the input's offsets + appended
    resident_bytes: int = 0  # what must live for the whole method (moved constants, state), when relaid
    peak_bytes: int = 0  # the most that everything else needs at once, when relaid
    appended_size: int = 0  # what keeping the input's offsets and appending the constants would need
    kept_offsets: str = ""  # why the layout was given up for the input's offsets (work budget; failed byte replay)

    @property
    def bound(self) -> int:
        """The least any layout of this buffer needs (resident + peak), when relaid; else 0."""
        return self.resident_bytes + self.peak_bytes if self.relaid else 0


class AppendedRegions:
    """Regions for the values one method's rewrite makes resident, before any re-layout: each in the method's
    first planned buffer on its device (a new one appended when it has none), at the next aligned offset past
    the buffer's end (the module docstring's policy)."""

    def __init__(self, plan: m.ExecutionPlan, label: str) -> None:
        self.label = label
        self.sizes = list(plan.non_const_buffer_sizes or (0,))
        self._old_sizes = tuple(self.sizes)
        listed = plan.buffer_devices()
        self.first: dict[Device, int] = {}
        for memory_id in range(len(self.sizes) - 1, 0, -1):
            self.first[listed.get(memory_id, CPU)] = memory_id
        self.added: set[int] = set()
        self._cursors: dict[int, int] = {}

    def buffer_for(self, device: Device) -> int:
        """The method's first buffer on ``device``, or a new one appended (the edit adds its device entry)."""
        found = self.first.get(device)
        if found is not None:
            return found
        self.sizes.append(0)
        memory_id = len(self.sizes) - 1
        self.first[device] = memory_id
        self.added.add(memory_id)
        return memory_id

    def device_of(self, memory_id: int) -> Device:
        for device, first in self.first.items():
            if first == memory_id:
                return device
        return CPU

    def region(self, device: Device, nbytes: int) -> tuple[int, int]:
        """(memory id, offset) of a new resident value of ``nbytes`` on ``device``."""
        memory_id = self.buffer_for(device)
        offset = self._cursors.get(memory_id, aligned(self.sizes[memory_id]))
        self._cursors[memory_id] = offset + aligned(nbytes)
        return memory_id, offset

    def growth(self) -> tuple[BufferGrowth, ...]:
        """The buffers the regions grow (or add), each no larger than the reader accepts."""
        growth = []
        for memory_id, cursor in sorted(self._cursors.items()):
            old = self._old_sizes[memory_id] if memory_id < len(self._old_sizes) else 0
            new_size = max(cursor, old)
            if new_size > MAX_TENSOR_BYTES:
                raise UnsupportedProgramError(f"method {self.label}: planned buffer {memory_id} would grow to "
                                              f"{new_size:,} bytes, past what the reader accepts (2^62)")
            growth.append(BufferGrowth(memory_id, self.device_of(memory_id), old, new_size, memory_id in self.added))
        return tuple(growth)


class Relayout:
    """What ``relayout`` decided for one method: each buffer's growth (relaid or kept), the planned values whose
    place changes, and where a resident value the plan placed goes now (``placed``)."""

    def __init__(self, buffers: tuple[BufferGrowth, ...], relocations: tuple[tuple[int, int, Optional[int]], ...],
                 offsets: dict[int, int]) -> None:
        self.buffers = buffers
        self.relocations = relocations  # (value, memory id, new offset or None: unplanned)
        self._offsets = offsets
        self._sizes = {g.memory_id: g.new_size for g in buffers if g.relaid}

    @property
    def changed(self) -> bool:
        """Whether any buffer was relaid or any value moved (else only the growth records say more)."""
        return bool(self.relocations) or any(g.relaid for g in self.buffers)

    def placed(self, value: int, memory_id: int, offset: int) -> int:
        """The relaid offset of a value the plan placed at ``offset``; a zero-byte value (no region to lay out)
        goes to the buffer's start."""
        if value in self._offsets:
            return self._offsets[value]
        return 0 if memory_id in self._sizes and offset > self._sizes[memory_id] else offset


def relayout(edited: m.ExecutionPlan, buffers: Sequence[BufferGrowth], targets: Iterable[int]) -> Relayout:
    """Each buffer of ``targets`` laid out again by lifetimes where that needs less than ``buffers`` (appended).

    ``edited`` is the method the rewrite will write, with the values it makes resident appended: laid out as
    ExecuTorch's planner would (``plan_layout``), resident values first, everything else by its lifetime, the
    removed copies' destinations unplanned.  A buffer keeps the input's offsets with the values appended when that
    is not larger, and when its layout runs out of its work budget (``LayoutWork``): a bounded cost.
    """
    targets = set(targets)
    groups = storage_groups(MethodEffects(edited), targets)
    budgets = {memory_id: LayoutWork.for_groups(len(groups.get(memory_id, []))) for memory_id in targets}
    layouts = {memory_id: plan_layout(memory_id, groups.get(memory_id, []), budgets[memory_id])
               for memory_id in targets}
    growth = []
    relocations: list[tuple[int, int, Optional[int]]] = []
    new_offset: dict[int, int] = {}
    values = edited.values or ()
    for g in buffers:
        layout = layouts.get(g.memory_id)
        if layout is None and g.memory_id in budgets:
            growth.append(replace(g, appended_size=g.new_size, kept_offsets=(
                f"it ran out of its work budget: laying out its {len(groups.get(g.memory_id, [])):,} tensor "
                f"group(s) needed more than {budgets[g.memory_id].limit:,} steps")))
            continue
        if layout is None or layout.size >= g.new_size:
            growth.append(replace(g, appended_size=g.new_size))
            continue
        growth.append(replace(g, new_size=layout.size, relaid=True, resident_bytes=layout.resident_bytes,
                              peak_bytes=layout.peak_bytes, appended_size=g.new_size))
        for index, offset in sorted(layout.offsets.items()):
            info = values[index].allocation_info  # type: ignore[union-attr]
            new_offset[index] = offset  # type: ignore[assignment]
            if offset is None or info is None or info.memory_offset != offset:
                relocations.append((index, g.memory_id, offset))
        for index, value in enumerate(values):  # zero-byte tensors have no region: keep them inside the buffer
            if isinstance(value, m.Tensor) and value.allocation_info is not None and index not in layout.offsets \
                    and value.allocation_info.memory_id == g.memory_id \
                    and value.allocation_info.memory_offset > layout.size:
                relocations.append((index, g.memory_id, 0))
    return Relayout(tuple(growth), tuple(relocations), new_offset)


@record
class DeviceMemory:
    """The device memory a program plans (planned buffers on a non-CPU device, summed over its methods),
    before the rewrite and after it.

    ``bound`` is the least any layout of the rewritten program needs (per relaid buffer: what stays resident
    plus the peak of everything else live at once; other buffers as written); ``appended`` is what keeping the
    input's offsets and appending the constants would need (the rewrite takes the smaller layout).
    """

    before: int = 0
    after: int = 0
    bound: int = 0
    appended: int = 0
    added: int = 0  # bytes of device buffers the rewrite adds (legacy style: the method planned none there)
    kept_offsets: tuple[str, ...] = ()  # "method M, buffer B: why", for each device buffer whose layout was given up

    def note(self) -> Optional[str]:
        """That a layout was given up for the input's offsets (the constants appended), when one was."""
        if not self.kept_offsets:
            return None
        return ("device memory kept the input's offsets, the constants appended, where laying it out again was "
                "given up: " + "; ".join(self.kept_offsets))

    @property
    def grown(self) -> int:
        return self.after - self.before

    def warning(self) -> Optional[str]:
        """Why the rewritten program needs more device memory than the input, when it does."""
        if self.after <= self.before:
            return None
        head = (f"the rewritten program plans {self.grown:,} B more device memory "
                f"({self.before:,} B -> {self.after:,} B)")
        if self.added >= self.grown:
            return (f"{head}: the moved constants now live in planned device memory for the whole method; before, "
                    "the delegates copied them into device memory of their own on every call (legacy style), "
                    "which the program did not plan")
        return (f"{head}: the moved constants stay resident for the whole method, while the input's per-call "
                "copies shared memory with other tensors by lifetime")


def planned_device_bytes(program: m.Program) -> int:
    """The bytes of every planned buffer on a non-CPU device, summed over the program's methods."""
    total = 0
    for plan in program.execution_plan or ():
        devices = plan.buffer_devices()
        total += sum(size for memory_id, size in enumerate(plan.non_const_buffer_sizes or ())
                     if memory_id in devices and not devices[memory_id].is_cpu)
    return total


def device_memory(program: m.Program, edits: Mapping[int, tuple[str, Sequence[BufferGrowth]]] = {}
                  ) -> DeviceMemory:
    """``DeviceMemory`` of ``program``, and of the program its methods' buffer changes make of it (``edits``:
    plan index -> (the method's label, its ``BufferGrowth``))."""
    before = planned_device_bytes(program)
    after = bound = appended = added = 0
    kept: list[str] = []
    for index, plan in enumerate(program.execution_plan or ()):
        devices = plan.buffer_devices()
        sizes = list(plan.non_const_buffer_sizes or ())
        label, changed = edits.get(index, ("", ()))
        growth = {g.memory_id: g for g in changed}
        for memory_id in sorted(set(range(len(sizes))) | set(growth)):
            g = growth.get(memory_id)
            device = g.device if g is not None else devices.get(memory_id, CPU)
            if device.is_cpu:
                continue
            size = g.new_size if g is not None else sizes[memory_id]
            after += size
            added += size if g is not None and g.added else 0
            bound += g.bound if g is not None and g.relaid else size
            appended += g.appended_size if g is not None and g.appended_size else size
            if g is not None and g.kept_offsets:
                kept.append(f"method {label}, buffer {memory_id}: {g.kept_offsets}")
    return DeviceMemory(before, after, bound, appended, added, tuple(kept))
