"""How long each planned value's bytes must live, a layout of a planned buffer by those lifetimes, and its check.

**Lifetimes.**  Program positions run over all chains in order (``effects.MethodEffects``).  A value lives from
its first use to its last; a method input from before the first instruction, a method output to after the
last; a value used in a chain that jumps backwards for that whole chain (a loop may run it again).  Forward jumps
(``torch.cond``'s branches) need nothing more: every path visits positions in increasing order, so a value's
bytes are needed only between its first and last use in program order.  A *static view* (a value
no instruction writes that is no input, constant or initial data, planned where another value was last
written, loaded as initial data or set as an input) reads its holder's bytes, so it and its holder form one
*storage group* that keeps its relative layout.  So does a delegate argument planned exactly on the region
another value last wrote, whatever the data flow's split says of it: it may be such a view, read again (only
the delegate's blob knows; only its last argument, when no earlier instruction mentions it, is an output for
sure).  A ``MoveCall`` makes its destination the same tensor as its source (the runtime
copies the EValue, and the binding outlives the call): the two are one group too, and the destination's uses
are the group's.  A group lives for the hull of its members' lifetimes.  A group is **resident** (alive for the whole
method, across calls) when it holds initial data (a moved or folded constant, a mutable buffer), when a
first-call prologue copies a constant into it (``prologue.py``), or when its first use in a call is a read: it
carries state from the last call.  A group nothing uses is **dead**: it needs
no bytes.

**Layout** (``plan_layout``): resident groups first, packed, then every other group by the smallest of a few
greedy fits (ExecuTorch's planner, ``exir/memory_planning.py``, also keeps the smallest of its algorithms): two
O(n log n) sweeps by first use (the lowest free gap; shared objects freed by last use), and, while a share of
the layout's work budget lasts, ExecuTorch's ``greedy`` by size and a lowest-offset fit by size.  Each group is
16-byte aligned.  The budget is proportional to the groups; past it the caller keeps the input's offsets.  Dead
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
from typing import Iterable, NamedTuple, Optional, Sequence

from pte_devconst.schema import model as m
from pte_devconst.schema.header import TENSOR_ALIGNMENT, align_up
from pte_devconst.util.gc_pause import gc_paused

from .effects import MethodEffects
from .prologue import first_call_copies
from .regions import IntervalMap, Region, planned_region


def planned_device_bytes(program: m.Program) -> int:
    """The bytes of every planned buffer on a non-CPU device, summed over the program's methods."""
    total = 0
    for plan in program.execution_plan or ():
        devices = plan.buffer_devices()
        total += sum(size for memory_id, size in enumerate(plan.non_const_buffer_sizes or ())
                     if memory_id in devices and not devices[memory_id].is_cpu)
    return total


class Lifetime(NamedTuple):
    """Program positions [first, last] (inclusive); -1 is before the first instruction, ``end`` after the last."""

    first: int
    last: int

    def meets(self, other: "Lifetime") -> bool:
        return self.first <= other.last and other.first <= self.last


class StorageGroup(NamedTuple):
    """Values that must keep their relative layout (a holder and its static views), and when they live."""

    members: tuple[int, ...]
    starts: tuple[int, ...]  # each member's memory_offset, parallel to ``members``
    extent: Region  # the hull of the members' regions
    lifetime: Optional[Lifetime]  # None: dead (nothing uses it)
    resident: bool


class _Union:
    def __init__(self) -> None:
        self.parent: dict[int, int] = {}

    def find(self, x: int) -> int:
        root = x
        while self.parent.get(root, root) != root:
            root = self.parent[root]
        while self.parent.get(x, x) != root:
            self.parent[x], x = root, self.parent[x]
        return root

    def union(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)


def static_views(effects: MethodEffects) -> set[int]:
    """Planned tensors no instruction writes that are no input, constant or initial data: the emitter's elided
    static views, which read whatever was last written at their place."""
    written = effects.written_anywhere()
    return {i for i, v in enumerate(effects.values)
            if isinstance(v, m.Tensor) and v.allocation_info is not None and i not in written
            and i not in effects.inputs and not v.is_constant and not v.has_initial_data}


def held_before_any_instruction(effects: MethodEffects) -> list[int]:
    """Planned values whose bytes are there before the first instruction: initial data (loaded once, in value
    order), then the method inputs (set before each call)."""
    planned = [isinstance(v, m.Tensor) and v.allocation_info is not None for v in effects.values]
    loaded = [i for i, v in enumerate(effects.values) if isinstance(v, m.Tensor) and v.has_initial_data]
    return loaded + [i for i in effects.inputs if planned[i]]


def outputs_that_may_be_views(effects: MethodEffects) -> dict[int, tuple[int, ...]]:
    """Per program position of a delegate call: the arguments its split calls outputs that may yet be static views
    the delegate reads (all but a last argument no earlier instruction mentions, an output for sure)."""
    return {effects.position((s.chain, s.instruction)): s.args[s.n_inputs:len(s.args) - s.sure_outputs]
            for s in effects.sites}


def move_aliases(effects: MethodEffects) -> list[tuple[int, int]]:
    """(source, destination) of every MoveCall: one tensor under two names from then on, across calls too."""
    return [(a, b) for a, b in effects.moves if 0 <= a < len(effects.values) and 0 <= b < len(effects.values)]


def view_reads(effects: MethodEffects) -> dict[int, list[tuple[int, tuple[int, int]]]]:
    """Reads through static views: written value -> [(view, (chain, instruction))] while it holds the memory.

    Following the instructions in order, a view read at (buffer, offset) reads the value last written there
    (initial data holds its place from load, a method input from the start of a call).  A method output that is
    a view is read after the last instruction: reading step (-1, -1).  A delegate argument the split calls an
    output, planned exactly on its holder's region, counts as a view read of the holder too (the module
    docstring).
    """
    views = static_views(effects)
    found: dict[int, list[tuple[int, tuple[int, int]]]] = defaultdict(list)
    values = effects.values

    def place(index: int) -> tuple[int, int]:
        value = values[index]
        info = value.allocation_info if isinstance(value, m.Tensor) else None
        assert info is not None, "called for planned tensors only (inputs, writes, static views)"
        return info.memory_id, info.memory_offset

    planned = {i for i, v in enumerate(values) if isinstance(v, m.Tensor) and v.allocation_info is not None}
    regions = {i: r for i in planned if (r := planned_region(values[i])) is not None}
    holder: dict[tuple[int, int], int] = {}
    owner: dict[int, IntervalMap[int]] = defaultdict(lambda: IntervalMap(-1))  # buffer -> who wrote each byte last

    def wrote(index: int) -> None:
        holder[place(index)] = index
        region = regions.get(index)
        if region is not None:
            owner[region.memory_id].assign(region.start, region.end, index)

    for index in held_before_any_instruction(effects):
        wrote(index)
    outputs_at = outputs_that_may_be_views(effects)
    for position, (step, read, written) in enumerate(zip(effects.steps, effects.reads, effects.writes)):
        for index in read:
            if index in views and place(index) in holder:
                found[holder[place(index)]].append((index, (step.chain, step.instruction)))
        for index in outputs_at.get(position, ()):
            region = regions.get(index)
            pieces = owner[region.memory_id].read(region.start, region.end) if region is not None else ()
            if len(pieces) == 1 and pieces[0][2] not in (-1, index) and regions.get(pieces[0][2]) == region:
                found[pieces[0][2]].append((index, (step.chain, step.instruction)))
        for index in written:
            if index in planned:
                wrote(index)
    for index in effects.outputs:
        if index in views and place(index) in holder:
            found[holder[place(index)]].append((index, (-1, -1)))
    return found


def storage_groups(effects: MethodEffects, memory_ids: Iterable[int],
                   resident: frozenset[int] = frozenset()) -> dict[int, list[StorageGroup]]:
    """The storage groups of the given planned buffers, keyed by memory id (module docstring).

    ``resident`` names values that must live for the whole method besides those with initial data and the
    destinations of a first-call prologue's copies (``program/prologue.py``: written on the first call only,
    read on every call).
    """
    resident = resident | frozenset(first_call_copies(effects.plan))
    wanted = set(memory_ids)
    values = effects.values
    regions = {i: r for i, v in enumerate(values) if (r := planned_region(v)) is not None and r.memory_id in wanted}
    end = len(effects.steps)
    uses = effects.uses()
    union = _Union()
    for holder, reads in view_reads(effects).items():  # a static view keeps its holder's bytes
        if holder in regions:
            for view, _ in reads:
                if view in regions:
                    union.union(view, holder)
    for source, destination in move_aliases(effects):  # one tensor under two names: one group
        union.union(source, destination)
    aliases: dict[int, list[int]] = defaultdict(list)
    for index in list(union.parent):
        aliases[union.find(index)].append(index)
    spans = effects.chain_span
    chain_of = []
    for c, (first, stop) in enumerate(spans):
        chain_of.extend([c] * (stop - first))
    outputs = set(effects.outputs)
    members: dict[tuple[int, int], list[int]] = defaultdict(list)  # (root, buffer) -> its members there
    for index in regions:
        members[(union.find(index), regions[index].memory_id)].append(index)
    groups: dict[int, list[StorageGroup]] = defaultdict(list)
    for (root, _), indices in members.items():
        first, last = end + 1, -2
        first_use: Optional[tuple[int, bool]] = None  # (position, writes) of the group's first use
        keeps_state = False
        for index in dict.fromkeys([*indices, *aliases.get(root, ())]):
            value = values[index]
            if isinstance(value, m.Tensor) and (value.has_initial_data or value.is_constant) or index in resident:
                keeps_state = True
            value_uses = uses[index]
            if index in effects.inputs:
                first = -1
                first_use = (-1, True) if first_use is None or first_use > (-1, True) else first_use
            if value_uses:
                u0 = value_uses[0]
                head = (u0.position, u0.writes)  # a read sorts before a write at one position
                if first_use is None or head < first_use:
                    first_use = head
                lo, hi = u0.position, value_uses[-1].position
                for c in {chain_of[lo], chain_of[hi]}:
                    if c in effects.chains_with_loops:
                        lo, hi = min(lo, spans[c][0]), max(hi, spans[c][1] - 1)
                first, last = min(first, lo), max(last, hi)
            if index in outputs:
                last = end
                first = min(first, end)
        if first_use is not None and not first_use[1]:
            keeps_state = True  # read before anything writes it in a call
        starts = [regions[i].start for i in indices]
        ends = [regions[i].end for i in indices]
        memory_id = regions[indices[0]].memory_id
        extent = Region(memory_id, min(starts), max(ends))
        if keeps_state:
            lifetime: Optional[Lifetime] = Lifetime(-1, end)
        elif last < first:
            lifetime = None
        else:
            lifetime = Lifetime(first, last)
        indices.sort()
        groups[memory_id].append(StorageGroup(tuple(indices), tuple(regions[i].start for i in indices), extent,
                                              lifetime, keeps_state))
    for memory_id in groups:
        groups[memory_id].sort(key=lambda g: g.members[0])
    return groups


class BufferLayout(NamedTuple):
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


def _aligned(size: int) -> int:
    return align_up(size, TENSOR_ALIGNMENT)


def peak_live_bytes(groups: Sequence[StorageGroup]) -> int:
    """The largest sum of (aligned) extents of non-resident groups alive at one program position."""
    keys: list[int] = []  # position * 2, + 1 for an allocation: frees sort before allocations at one position
    sizes: list[int] = []
    for group in groups:
        if group.lifetime is not None and not group.resident:
            size = _aligned(group.extent.nbytes)
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
        cursor = _aligned(cursor + _block(group))
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
        placed = _aligned(start + need)
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
    sizes = sorted({_aligned(need) for need in needs})
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
        life, need = lives[k], _aligned(needs[k])
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
            ends.append(_aligned(candidate + need))
            top = max(top, ends[k])
            busy = {objects[j] for j in met}
            number = 0
            while number in busy:
                number += 1
            if number == len(sizes):
                sizes.append(_aligned(need))
            else:
                sizes[number] = max(sizes[number], _aligned(need))
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
