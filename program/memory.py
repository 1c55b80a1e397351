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

**Layout** (``plan_layout``), as ExecuTorch's own planner does (``exir/memory_planning.py``, greedy by size):
resident groups first, packed, then every other group, largest first, into the first *shared object* whose
groups' lifetimes it does not meet (a new object when none fits); the objects follow the resident bytes, each
16-byte aligned.  Dead values are left unplanned (``allocation_info`` None: the runtime gives such a tensor
no data, and nothing reads it).

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
    events: list[tuple[int, int]] = []
    for group in groups:
        if group.lifetime is not None and not group.resident:
            size = _aligned(group.extent.nbytes)
            events.append((group.lifetime.first, size))
            events.append((group.lifetime.last + 1, -size))
    events.sort(key=lambda e: (e[0], e[1]))  # frees before allocations at one position
    live = peak = 0
    for _, delta in events:
        live += delta
        peak = max(peak, live)
    return peak


OFFSET_FIT_LIMIT = 4096  # groups up to which the offset-level fit runs (it compares each with those placed)


def plan_layout(memory_id: int, groups: Sequence[StorageGroup]) -> BufferLayout:
    """Greedy by size over lifetimes (module docstring); deterministic for a given program.

    Two greedy fits of the non-resident groups, the smaller kept: into *shared objects* (ExecuTorch's
    ``greedy``: each group joins the first object none of whose groups it meets, O(n x objects)), and, up to
    ``OFFSET_FIT_LIMIT`` groups, at the lowest offset free of every placed group it meets (tighter when sizes
    differ, O(n^2)).
    """
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
    others = sorted((g for g in live if not g.resident),
                    key=lambda g: (-_block(g), g.lifetime.first, g.members[0]))  # type: ignore[union-attr]
    fits = [_shared_object_fit(others)]
    if len(others) <= OFFSET_FIT_LIMIT:
        fits.append(_offset_fit(others))
    bases, size = min(fits, key=lambda fit: fit[1])
    for group, base in zip(others, bases):
        place(group, resident_bytes + base)
    for group in groups:
        if group.lifetime is None:
            for index in group.members:
                offsets[index] = None
    return BufferLayout(memory_id, resident_bytes + size, offsets, resident_bytes, peak_live_bytes(groups))


def _block(group: StorageGroup) -> int:
    """The bytes a group takes from an aligned base: its extent, after its start's offset within 16 bytes."""
    return group.extent.nbytes + group.extent.start % TENSOR_ALIGNMENT


def _shared_object_fit(groups: Sequence[StorageGroup]) -> tuple[list[int], int]:
    """Bases (relative) and total size: each group in the first shared object whose lifetimes it does not meet."""
    objects: list[tuple[int, list[int], list[int]]] = []  # (size, firsts, lasts): lifetimes sorted, disjoint
    chosen: list[int] = []
    for group in groups:
        life = group.lifetime
        assert life is not None
        for number, (_, firsts, lasts) in enumerate(objects):
            at = bisect.bisect_left(firsts, life.first)
            if (at == 0 or lasts[at - 1] < life.first) and (at == len(firsts) or firsts[at] > life.last):
                firsts.insert(at, life.first)
                lasts.insert(at, life.last)
                chosen.append(number)
                break
        else:
            objects.append((_aligned(_block(group)), [life.first], [life.last]))
            chosen.append(len(objects) - 1)
    starts, cursor = [], 0
    for size, _, _ in objects:
        starts.append(cursor)
        cursor += size
    return [starts[number] for number in chosen], cursor


def _offset_fit(groups: Sequence[StorageGroup]) -> tuple[list[int], int]:
    """Bases (relative) and total size: each group at the lowest aligned offset clear of the groups it meets."""
    placed: list[tuple[int, int, Lifetime]] = []  # (base, end, lifetime)
    bases: list[int] = []
    top = 0
    for group in groups:
        life = group.lifetime
        assert life is not None
        need = _block(group)
        taken = sorted((base, end) for base, end, other in placed if other.meets(life))
        candidate = 0
        for base, end in taken:
            if candidate + need <= base:
                break
            candidate = max(candidate, _aligned(end))
        placed.append((candidate, candidate + need, life))
        bases.append(candidate)
        top = max(top, _aligned(candidate + need))
    return bases, top


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
