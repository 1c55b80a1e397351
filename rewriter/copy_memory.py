"""Whether an ``_h2d_copy`` always runs before what reads its output, and whether anything else sees that memory.

Removing a copy ``_h2d_copy.out(C, D, D)`` and pointing D's delegate readers at C
keeps what those readers receive.  It keeps the method's meaning only if nothing
else depended on the copy having run:

* **Every path runs it first.**  No reader of D comes before the copy, and no
  JumpFalseCall can skip the copy while a reader still runs (a jump from before
  the copy to past it, landing at or before a reader in its chain, or anywhere
  when a later chain reads D).  Otherwise the original's reader sees whatever D
  held, not C.
* **Nothing else sees D's memory.**  Another value whose planned bytes overlap D
  (a static view the emitter elided into a second value, a region the planner
  reuses, or a forged alias) must not be used between the copy and D's last
  reader, and its first use after that must write it (until a write of a static
  tensor covers all of D).  Otherwise it reads the bytes the copy wrote, which
  the rewrite no longer writes.  Every value that
  overlaps D in the corpus, the examples and the real-model fixtures follows this
  (a region reused once D is dead, first written by a kernel or a delegate).

Writes, as the runtime does them: a kernel writes its return slot and an out
variant its out argument (the one equal to the return slot), the items of a list
in either; a delegate its outputs by the rule of ``schema/dataflow.py``; a
MoveCall its destination.  Everything else reads.  The uses of each planned
buffer are indexed once, in program order; each copy scans those between it and
the first covering write after its last reader, charged to the analysis budget.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from typing import Callable, Optional

from pte_devconst.schema import model as m
from pte_devconst.schema.dataflow import delegate_call_sites

Step = tuple[int, int]  # (chain, instruction)
Problem = tuple[str, str]  # (short reason, detail)
Spend = Callable[[int], None]
Event = tuple[Step, bool, int, int, int]  # (step, writes, start, end, value)


class CopyMemory:
    """One method's planned regions, value uses (read or write, lists expanded) and jumps, built once."""

    def __init__(self, plan: m.ExecutionPlan, spend: Spend) -> None:
        self.spend = spend
        values = plan.values or ()
        self.values = values
        self.jumps: dict[int, list[tuple[int, int]]] = defaultdict(list)  # chain -> (source, destination)
        self.uses: dict[int, list[tuple[Step, bool]]] = defaultdict(list)  # value -> (step, writes it)
        self.outputs = frozenset(plan.outputs or ())
        outputs_of = {(s.chain, s.instruction): frozenset(range(s.n_inputs, len(s.args)))
                      for s in delegate_call_sites(plan)}
        for c, chain in enumerate(plan.chains or ()):
            for k, ins in enumerate(chain.instructions or ()):
                step = (c, k)
                if isinstance(ins, m.KernelCall):
                    args = tuple(ins.args or ())
                    last = len(args) - 1
                    for pos, arg in enumerate(args):
                        self._use(arg, step, pos == last or (pos == last - 1 and args[-1] == arg))
                elif isinstance(ins, m.DelegateCall):
                    written = outputs_of.get(step, frozenset())
                    for pos, arg in enumerate(ins.args or ()):
                        self._use(arg, step, pos in written)
                elif isinstance(ins, m.MoveCall):
                    self._use(ins.move_from, step, False)
                    self._use(ins.move_to, step, True)
                elif isinstance(ins, m.JumpFalseCall):
                    self.jumps[c].append((k, ins.destination_instruction))
                    self._use(ins.cond_value_index, step, False)
                elif isinstance(ins, m.FreeCall):
                    self._use(ins.value_index, step, False)
        # Per planned buffer, every use of a value placed in it, in program order: (step, writes, start, end, value).
        self.events: dict[int, list[Event]] = defaultdict(list)
        self.output_spans: dict[int, list[tuple[int, int, int]]] = defaultdict(list)  # buffer -> (start, end, value)
        for index, uses in self.uses.items():
            span = _span(values[index]) if 0 <= index < len(values) else None
            if span is not None:
                memory_id, start, end = span
                self.events[memory_id].extend((step, writes, start, end, index) for step, writes in uses)
        for index in self.outputs:
            span = _span(values[index]) if 0 <= index < len(values) else None
            if span is not None:
                self.output_spans[span[0]].append((span[1], span[2], index))
        for events in self.events.values():
            events.sort()
        self.event_steps = {memory_id: [event[0] for event in events] for memory_id, events in self.events.items()}
        spend(len(values) + 2 * sum(map(len, self.uses.values())) + len(self.outputs))

    def _use(self, index: int, step: Step, writes: bool) -> None:
        self.uses[index].append((step, writes))
        value = self.values[index] if 0 <= index < len(self.values) else None
        if isinstance(value, (m.TensorList, m.OptionalTensorList)):
            for item in value.items or ():
                if item >= 0:
                    self.uses[item].append((step, writes))

    def problem(self, copy: Step, dst: int, readers: list[Step]) -> Optional[Problem]:
        """Why removing the copy at ``copy`` into ``dst`` (read at ``readers``) could change the method, or None."""
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
        return self._shared_memory(copy, dst, max(readers))

    def _skipping_jump(self, copy: Step, readers: list[Step]) -> Optional[tuple[int, int]]:
        chain, k = copy
        later_chain = any(r[0] > chain for r in readers)
        last_here = max((r[1] for r in readers if r[0] == chain), default=-1)
        jumps = self.jumps.get(chain, ())
        self.spend(len(jumps))
        for source, destination in jumps:
            if source < k < destination and (later_chain or destination <= last_here):
                return source, destination
        return None

    def _shared_memory(self, copy: Step, dst: int, last: Step) -> Optional[Problem]:
        """Another value overlapping D's bytes, used between the copy and D's last reader, or read after it first.

        Scans the uses in D's buffer in program order: those between the copy and ``last``, then those after
        it until a static tensor's write covers all of D's bytes (nothing later can see what the copy wrote).
        """
        span = _span(self.values[dst])
        if span is None:
            return None
        memory_id, start, end = span
        events, steps = self.events.get(memory_id, []), self.event_steps.get(memory_id, [])
        where = f"shares memory with its device copy (value {dst}, buffer {memory_id} [{start}, {end}))"
        after_copy, after_last = bisect.bisect_right(steps, copy), bisect.bisect_right(steps, last)
        for step, _, other_start, other_end, other in events[after_copy:after_last]:
            self.spend(1)
            if other != dst and other_start < end and start < other_end:
                return ("its device copy's memory is also another value's, used while it holds the copy",
                        f"value {other} {where} and is used at instruction {step[1]}, while it holds the copy")
        seen: set[int] = set()
        for k in range(after_last, len(events)):
            step, writes, other_start, other_end, other = events[k]
            self.spend(1)
            if other_end <= start or end <= other_start:
                continue
            if other != dst and other not in seen:
                seen.add(other)
                if not writes:
                    return ("its device copy's memory is also another value's, read after it",
                            f"value {other} {where} and is read at instruction {step[1]} before anything writes it")
            if writes and other_start <= start and end <= other_end and _static(self.values[other]):
                return None  # every byte the copy wrote is overwritten before anything else reads it
        for other_start, other_end, other in self.output_spans.get(memory_id, ()):
            self.spend(1)
            if other != dst and other not in seen and other_start < end and start < other_end:
                return ("its device copy's memory is also a method output's",
                        f"value {other} {where} and is a method output that nothing writes after the copy")
        return None


def _static(value: m.EValue) -> bool:
    """A tensor of static shape: a write to it fills every byte of its span."""
    return isinstance(value, m.Tensor) and value.shape_dynamism == m.TensorShapeDynamism.STATIC


def _span(value: m.EValue) -> Optional[tuple[int, int, int]]:
    """(memory_id, start, end) of a planned tensor with bytes, else None."""
    if not isinstance(value, m.Tensor) or value.allocation_info is None:
        return None
    try:
        nbytes = value.nbytes
    except KeyError:
        return None
    if not nbytes:
        return None
    return value.allocation_info.memory_id, value.allocation_info.memory_offset, value.allocation_info.memory_offset + nbytes
