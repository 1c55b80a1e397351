"""How long each planned value's bytes must live, and which values must share them: the model the device-memory
layout (``layout.py``) and its check run on.

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
copies the EValue, and the binding outlives the call), and ``et_view`` points its out at its input's bytes
(``kernel_effects.kernel_alias``): the two are one group too, and the alias's uses are the
group's.  A group lives for the hull of its members' lifetimes.  A group is **resident** (alive for the whole
method, across calls) when it holds initial data (a moved or folded constant, a mutable buffer), when a run-once
region writes it (``once.py``: written on the first call, read on every call), or when its first use in a call is
a read: it carries state from the last call.  A group nothing uses is **dead**: it needs
no bytes.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Iterable, Optional

from pte_devconst.schema import model as m
from pte_devconst.util.record import record

from .effects import MethodEffects
from .once import once_region
from .regions import IntervalMap, Region, planned_region


@record
class Lifetime:
    """Program positions [first, last] (inclusive); -1 is before the first instruction, ``end`` after the last."""

    first: int
    last: int

    def meets(self, other: "Lifetime") -> bool:
        return self.first <= other.last and other.first <= self.last


@record
class StorageGroup:
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


def held_before_any_instruction(effects: MethodEffects) -> list[int]:
    """Planned values whose bytes are there before the first instruction: initial data (loaded once, in value
    order), then the method inputs (set before each call)."""
    planned = [isinstance(v, m.Tensor) and v.allocation_info is not None for v in effects.values]
    loaded = [i for i, v in enumerate(effects.values) if isinstance(v, m.Tensor) and v.has_initial_data]
    return loaded + [i for i in effects.inputs if planned[i]]


def outputs_that_may_be_views(effects: MethodEffects) -> dict[int, tuple[int, ...]]:
    """Per program position of a delegate call: the arguments its split calls outputs that may yet be static views
    the delegate reads (all but a last argument no earlier instruction mentions, an output for sure)."""
    return {effects.position((s.chain, s.instruction)): tuple(s.args[p] for p in s.maybe_views)
            for s in effects.sites}


def storage_aliases(effects: MethodEffects) -> list[tuple[int, int]]:
    """(source, alias) of every MoveCall and view kernel (``et_view``): one storage under two names from then on,
    across calls too."""
    n = len(effects.values)
    return [(a, b) for a, b in effects.aliases if 0 <= a < n and 0 <= b < n]


def view_reads(effects: MethodEffects) -> dict[int, list[tuple[int, tuple[int, int]]]]:
    """Reads through static views: written value -> [(view, (chain, instruction))] while it holds the memory.

    Following the instructions in order, a view read at (buffer, offset) reads the value last written there
    (initial data holds its place from load, a method input from the start of a call).  A method output that is
    a view is read after the last instruction: reading step (-1, -1).  A delegate argument the split calls an
    output, planned exactly on its holder's region, counts as a view read of the holder too (the module
    docstring).
    """
    views = effects.static_views()
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
    values a run-once region writes (``program/once.py``: written on the first call only, read on every call).
    """
    region = once_region(effects.plan, lambda: effects)
    resident = resident | (region.written if region is not None else frozenset())
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
    for source, destination in storage_aliases(effects):  # one storage under two names: one group
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
