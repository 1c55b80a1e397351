"""Whether an ``_h2d_copy`` always runs before what reads its output, and whether anything else sees that memory.

Removing a copy ``_h2d_copy.out(C, D, D)`` and pointing D's delegate readers at C
keeps what those readers receive.  It keeps the method's meaning only if nothing
else depended on the copy having run:

* **Every path runs it first.**  No reader of D comes before the copy, and no
  JumpFalseCall can skip the copy while a reader still runs (a jump from before
  the copy to past it, landing at or before a reader in its chain, or anywhere
  when a later chain reads D).  Otherwise the original's reader sees whatever D
  held, not C.
* **Nothing else writes D.**  Once the copy is gone every device reader of D reads
  the resident C; an instruction that writes D (a delegate whose output slot is D,
  a kernel, a move) would write C instead, and the next call would read what it
  wrote.
* **Nothing else sees D's memory.**  Another value whose planned bytes overlap D
  (a static view the emitter elided into a second value, a region the planner
  reuses, or a forged alias) must not be used between the copy and D's last
  reader, and its first use after that must write it (until a write of a static
  tensor covers all of D).  Otherwise it reads the bytes the copy wrote, which
  the rewrite no longer writes.  A method output there must be written after the
  copy too.

Reads and writes are ``program/effects.py``'s, regions ``program/regions.py``'s.
Cost: the uses of each planned region are indexed once (values with the same
region share one sorted event list, with a range-minimum tree); each copy visits
only the regions that overlap D (an interval index), each with a few binary
searches, so a method with N copies costs O(N log N), not a scan per copy.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from typing import Callable, Optional, Sequence

from pte_devconst.program.effects import MethodEffects
from pte_devconst.program.regions import IntervalIndex, Region
from pte_devconst.schema import model as m

Step = tuple[int, int]  # (chain, instruction)
Problem = tuple[str, str]  # (short reason, detail)
Spend = Callable[[int], None]
Key = tuple[int, bool, int, int, int]  # (position, writes, start, end, value): program order of the region's uses
_NEVER: Key = (1 << 62, True, 0, 0, 0)


class _RegionUses:
    """The uses of every value planned at one region, in program order, with what the copy rule asks of them."""

    __slots__ = ("keys", "positions", "next_other", "tree", "size", "static_writes")

    def __init__(self, keys: list[Key], static: Callable[[int], bool]) -> None:
        keys.sort()
        self.keys = keys
        self.positions = [k[0] for k in keys]
        n = len(keys)
        # next_other[i]: the first index after i whose value differs from keys[i]'s.
        self.next_other = [n] * n
        for i in range(n - 2, -1, -1):
            self.next_other[i] = i + 1 if keys[i + 1][4] != keys[i][4] else self.next_other[i + 1]
        # For each read: the position of the previous use of the same value (-1: none); writes never count.
        last_seen: dict[int, int] = {}
        leaves = []
        for position, writes, _, _, value in keys:
            leaves.append(_NEVER[0] if writes else last_seen.get(value, -1))
            last_seen[value] = position
        self.size = n
        self.tree = [_NEVER[0]] * n + leaves  # a range-minimum tree, leaves at [n, 2n)
        for i in range(n - 1, 0, -1):
            self.tree[i] = min(self.tree[2 * i], self.tree[2 * i + 1])
        self.static_writes = [i for i, k in enumerate(keys) if k[1] and static(k[4])]

    def min_previous(self, lo: int, hi: int) -> int:
        """The smallest previous-use position over the reads with index in [lo, hi)."""
        best = _NEVER[0]
        lo += self.size
        hi += self.size
        while lo < hi:
            if lo & 1:
                best = min(best, self.tree[lo])
                lo += 1
            if hi & 1:
                hi -= 1
                best = min(best, self.tree[hi])
            lo //= 2
            hi //= 2
        return best

    def first_static_write_after(self, position: int) -> Optional[Key]:
        """The first write of a static tensor here past ``position`` (static_writes holds event indices)."""
        lo = bisect.bisect_left(self.static_writes, self.after(position))
        return self.keys[self.static_writes[lo]] if lo < len(self.static_writes) else None

    def previous_use(self, i: int) -> int:
        """For the read at index ``i``: the position of the same value's previous use (-1: none)."""
        return self.tree[self.size + i]

    def after(self, position: int) -> int:
        """The index of the first use past ``position``."""
        return bisect.bisect_right(self.positions, position)


class CopyMemory:
    """One method's planned regions, value uses (read or write, lists expanded) and jumps, built once."""

    def __init__(self, plan: m.ExecutionPlan, spend: Spend, effects: Optional[MethodEffects] = None,
                 regions: Optional[Sequence[Optional[Region]]] = None) -> None:
        from pte_devconst.program.regions import value_regions

        self.spend = spend
        self.effects = effects if effects is not None else MethodEffects(plan)
        values = self.effects.values
        self.values = values
        self.regions = list(regions) if regions is not None else value_regions(values)
        uses = self.effects.uses()
        spend(len(values) + self.effects.work)
        # keyed by plain (memory_id, start, end): a tuple hashes in C, a Region (a record) in a Python call
        by_region: dict[tuple[int, int, int], list[Key]] = defaultdict(list)
        for index, region in enumerate(self.regions):
            if region is not None:
                start, end = region.start, region.end
                by_region[(region.memory_id, start, end)].extend((u.position, u.writes, start, end, index)
                                                                 for u in uses[index])
        self.groups: dict[tuple[int, int, int], _RegionUses] = {}
        per_buffer: dict[int, list[tuple[int, int, int]]] = defaultdict(list)
        for number, (bounds, keys) in enumerate(by_region.items()):
            self.groups[bounds] = _RegionUses(keys, lambda v: _static(values[v]))
            memory_id, start, end = bounds
            per_buffer[memory_id].append((start, end, number))
        self._group_list = list(self.groups.items())
        self.index = {memory_id: IntervalIndex(items) for memory_id, items in per_buffer.items()}
        outputs: dict[int, list[tuple[int, int, int]]] = defaultdict(list)
        for index in self.effects.outputs:
            region = self.regions[index] if 0 <= index < len(values) else None
            if region is not None:
                outputs[region.memory_id].append((region.start, region.end, index))
        self.output_index = {memory_id: IntervalIndex(items) for memory_id, items in outputs.items()}
        spend(sum(len(g.keys) for g in self.groups.values()))

    def problem(self, copy: Step, dst: int, readers: list[Step], *, once: bool = False,
                views: frozenset[int] = frozenset()) -> Optional[Problem]:
        """Why removing the copy at ``copy`` into ``dst`` (read at ``readers``) could change the method, or None.

        ``views``: static views of D that follow the constant (``method_context.DeviceCopy.views``): their reads are
        among ``readers`` and they are D's bytes under another name, not another value there.

        ``once``: the copy is in a run-once region (``program/once.py``): it runs before everything on the first
        call and never again, so the readers of every later call read what it wrote then.  Removing it keeps
        that only if nothing else ever writes D or uses D's memory (``_once_problem``).
        """
        if once:
            return self._other_write(self.effects.position(copy), dst) or self._once_problem(dst, views | {dst})
        early = [r for r in readers if r <= copy]
        if early:
            return ("its device copy is read before the _h2d_copy runs",
                    f"its device copy (value {dst}) is read at instruction {early[0][1]}, before the _h2d_copy at "
                    f"instruction {copy[1]} fills it")
        skip = self._skipping_jump(copy, readers)
        if skip is not None:
            return ("a jump can skip its _h2d_copy",
                    f"the jump at instruction {skip[0]} to {skip[1]} can skip the _h2d_copy at instruction "
                    f"{copy[1]} and still reach a reader of its device copy (value {dst})")
        copy_at = self.effects.position(copy)
        other_write = self._other_write(copy_at, dst)
        if other_write is not None:
            return other_write
        return self._shared_memory(copy_at, dst, self.effects.position(max(readers)), views | {dst})

    def _other_write(self, copy_at: int, dst: int) -> Optional[Problem]:
        """An instruction other than the copy that writes D: after the rewrite it would write the constant."""
        uses = self.effects.uses()[dst] if 0 <= dst < len(self.values) else ()
        self.spend(1)
        for use in uses:
            if use.writes and use.position != copy_at:
                step = self.effects.steps[use.position]
                ins = ((self.effects.plan.chains or ())[step.chain].instructions or ())[step.instruction]
                if isinstance(ins, m.DelegateCall):
                    what = f"delegate {ins.delegate_index}"
                elif isinstance(ins, m.MoveCall):
                    what = "a MoveCall"
                else:
                    what = f"kernel {self.effects.kernel_names.get(use.position, '?')}"
                return ("its device copy is also written by another instruction",
                        f"its device copy (value {dst}) is also written by {what} at instruction {step.instruction}; "
                        "without the copy that write would land on the resident constant")
        return None

    def _once_problem(self, dst: int, own: frozenset[int]) -> Optional[Problem]:
        """Another value on D's bytes that anything uses (but D and its views that follow it: ``own``), or a method
        input or output there: what a copy made once wrote must stay in D for every later call."""
        region = self.regions[dst]
        if region is None:
            return None
        memory_id, start, end = region.memory_id, region.start, region.end
        overlapping = [self._group_list[number] for number in self.index[memory_id].overlapping(start, end)]
        self.spend(1 + len(overlapping))
        for _, group in overlapping:
            i = 0
            while i < len(group.keys) and group.keys[i][4] in own:
                self.spend(1)
                i = group.next_other[i]
            if i < len(group.keys):
                other = group.keys[i][4]
                return ("its device copy's memory is also another value's",
                        f"value {other} shares memory with its device copy made once (value {dst}, buffer "
                        f"{memory_id} [{start}, {end})), which must hold the constant for every call")
        outputs = self.output_index.get(memory_id)
        for other in outputs.overlapping(start, end) if outputs is not None else ():
            if other not in own:
                return ("its device copy's memory is also a method output's",
                        f"value {other}, a method output, shares memory with its device copy made once "
                        f"(value {dst})")
        return None

    def _skipping_jump(self, copy: Step, readers: list[Step]) -> Optional[tuple[int, int]]:
        chain, k = copy
        later_chain = any(r[0] > chain for r in readers)
        last_here = max((r[1] for r in readers if r[0] == chain), default=-1)
        jumps = [(source, destination) for c, source, destination in self.effects.jumps
                 if c == chain and not self.effects.never_taken(c, source)] \
            if chain in self.effects.chains_with_jumps else ()
        self.spend(len(jumps))
        for source, destination in jumps:
            if source < k < destination and (later_chain or destination <= last_here):
                return source, destination
        return None

    def _shared_memory(self, copy_at: int, dst: int, last_at: int, own: frozenset[int]) -> Optional[Problem]:
        """Another value overlapping D's bytes, used between the copy and D's last reader, or read after it first."""
        region = self.regions[dst]
        if region is None:
            return None
        memory_id, start, end = region.memory_id, region.start, region.end
        where = f"shares memory with its device copy (value {dst}, buffer {memory_id} [{start}, {end}))"
        overlapping = [self._group_list[number] for number in self.index[memory_id].overlapping(start, end)]
        self.spend(1 + len(overlapping))
        # Between the copy and the last reader: any use of another value there.
        found: Optional[tuple[int, int]] = None
        for _, group in overlapping:
            lo = bisect.bisect_right(group.positions, copy_at)
            hi = bisect.bisect_right(group.positions, last_at)
            if lo < hi:
                i = lo
                while i < hi and group.keys[i][4] in own:  # D itself, or a view of it that follows it
                    self.spend(1)
                    i = group.next_other[i]
                if i < hi and (found is None or group.keys[i][0] < found[0]):
                    found = (group.keys[i][0], group.keys[i][4])
        if found is not None:
            step = self.effects.steps[found[0]]
            return ("its device copy's memory is also another value's, used while it holds the copy",
                    f"value {found[1]} {where} and is used at instruction {step.instruction}, while it holds the copy")
        # After the last reader: the first static write that covers D ends what can see the copy's bytes.
        covering = _NEVER
        for (_, group_start, group_end), group in overlapping:
            if group_start <= start and end <= group_end:
                key = group.first_static_write_after(last_at)
                if key is not None and key < covering:
                    covering = key
        for _, group in overlapping:
            lo = group.after(last_at)
            hi = bisect.bisect_left(group.keys, covering)
            if lo < hi and group.min_previous(lo, hi) <= last_at:
                # some value's first use after the last reader is a read: find it for the message
                for i in range(lo, hi):
                    self.spend(1)
                    position, writes, _, _, other = group.keys[i]
                    if not writes and other not in own and group.previous_use(i) <= last_at:
                        step = self.effects.steps[position]
                        return ("its device copy's memory is also another value's, read after it",
                                f"value {other} {where} and is read at instruction {step.instruction} before "
                                "anything writes it")
        uses = self.effects.uses()
        outputs = self.output_index.get(memory_id)
        for other in outputs.overlapping(start, end) if outputs is not None else ():
            self.spend(1)
            if other in own:
                continue
            other_region = self.regions[other]
            assert other_region is not None  # the output index holds planned values only
            keys = [(u.position, u.writes, other_region.start, other_region.end, other) for u in uses[other]]
            at = bisect.bisect_right(keys, (last_at, True, 1 << 62, 0, 0))
            if at == len(keys) or keys[at] > covering:
                return ("its device copy's memory is also a method output's",
                        f"value {other} {where} and is a method output that nothing writes after the copy")
        return None


def _static(value: m.EValue) -> bool:
    """A tensor of static shape: a write to it fills every byte of its span."""
    return isinstance(value, m.Tensor) and value.shape_dynamism == m.TensorShapeDynamism.STATIC
