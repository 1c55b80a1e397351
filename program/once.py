"""A run-once region: the leading instructions of chain 0 that only a loaded method's first call runs.

ExecuTorch parses a method's values once, when it loads (``Method::init``), and ``execute`` never parses them
again (``docs/file-format.md``): a ``Bool`` that a ``MoveCall`` writes keeps its value for the next call, and a
planned buffer keeps its bytes.  So a chain 0 that starts::

    [0]        JumpFalseCall(cond = T, destination = P)   T: a Bool value, true in the file
    [1 .. P-1] anything, among it one MoveCall(move_from = F, move_to = T)   F: a Bool value, false in the file
    [P ..]     the method's own instructions

runs [1, P) on the first call only: that call finds T true and falls through, the MoveCall makes it false, and
every later call jumps to P.  What the region writes is there on every later call, as long as nothing else
writes it and no other value uses its bytes.  ``once_region`` recognises such a region from these semantics
alone, whatever wrote it, and only when all of that is certain:

* **the flag really clears, once**: T starts ``true``, a MoveCall inside the region copies a ``false`` into it,
  and nothing else in the method (no other instruction, input, output or list) names T or F;
* **nothing enters it**: no jump lands inside the region;
* **it reads the file, not the caller**: no instruction of the region names a method input (what it wrote would
  be the first call's, not every call's);
* **what it writes stays**: one instruction of the region writes each such value, no instruction outside it
  writes one (effects.py, the one statement of writes), none is a method input or output, and no other planned
  value shares such a value's bytes but a static view of it (a value nothing writes, within its bytes from where
  they start: it only reads them).

Its copies to a device of host constants are *copies made once* (``copies_made_once``): what the transfers, the
analysis, the lifetimes and the replay count as made on the first call, never per call.  Anything else is an
ordinary jump (what ``transfers.py``, the copy rule and the lifetimes handle, conservatively).
"""

from __future__ import annotations

from typing import Callable, Iterator, Optional

from pte_devconst.schema import model as m
from pte_devconst.util.record import record

from .effects import MethodEffects
from .kernel_effects import CopySlots, copy_slots
from .readers import readers_in_order
from .regions import Region, planned_region


@record
class OnceRegion:
    """A recognised run-once region of chain 0 (module docstring)."""

    flag: int  # the Bool value the leading jump tests: true until the region clears it
    cleared_from: int  # the Bool(false) value the region's MoveCall copies into the flag
    end: int  # the jump's destination: chain 0's first instruction after the region
    move: int  # the chain 0 index of the MoveCall that clears the flag
    written: frozenset[int]  # the values the region writes (the flag aside): each keeps what it got

    def runs_once(self, chain: int, instruction: int) -> bool:
        """Whether (chain, instruction) is inside the region: run on the first call only."""
        return chain == 0 and 1 <= instruction < self.end


def is_bool(values: tuple[m.EValue, ...], index: int, expected: bool) -> bool:
    """Whether ``values[index]`` is a ``Bool`` holding ``expected`` in the file."""
    value = values[index] if 0 <= index < len(values) else None
    return isinstance(value, m.Bool) and bool(value.bool_val) is expected


def once_region(plan: m.ExecutionPlan, effects: Optional[Callable[[], MethodEffects]] = None
                ) -> Optional[OnceRegion]:
    """The method's run-once region, or None when chain 0 does not start with one.  Linear in the method.

    ``effects`` gives the method's ``MethodEffects`` when the caller keeps them (built here otherwise, and only
    for a chain 0 shaped like a region)."""
    chains = plan.chains or ()
    instructions = (chains[0].instructions or ()) if chains else ()
    if not instructions or not isinstance(instructions[0], m.JumpFalseCall):
        return None
    values = tuple(plan.values or ())
    flag, end = instructions[0].cond_value_index, instructions[0].destination_instruction
    if not 2 <= end <= len(instructions) or not is_bool(values, flag, True):
        return None
    moves = [k for k in range(1, end) if isinstance(ins := instructions[k], m.MoveCall) and ins.move_to == flag]
    if len(moves) != 1:
        return None
    move = moves[0]
    cleared_from = instructions[move].move_from  # type: ignore[union-attr]
    if cleared_from == flag or not is_bool(values, cleared_from, False):
        return None
    if {flag, cleared_from} & (set(plan.inputs or ()) | set(plan.outputs or ())):
        return None
    if any(isinstance(ins, m.JumpFalseCall) and 1 <= ins.destination_instruction < end for ins in instructions):
        return None  # a jump into the region would run it again
    own = {(0, 0), (0, move)}  # the jump and the move that clears the flag
    for value, reader in readers_in_order(plan, {flag, cleared_from} | set(plan.inputs or ())):
        if value in (flag, cleared_from) and reader.step not in own:
            return None  # anything else that uses the flag's values (program/readers.py)
        if value not in (flag, cleared_from) and reader.step[0] == 0 and 1 <= reader.step[1] < end:
            return None  # a method input read inside it: it would keep what the first call's inputs gave
    found = effects() if effects is not None else MethodEffects(plan)
    inside = [writes for step, writes in zip(found.steps, found.writes)
              if step.chain == 0 and 1 <= step.instruction < end]
    written = frozenset(value for writes in inside for value in writes) - {flag}
    if sum(len(set(writes) - {flag}) for writes in inside) != len(written) or not _stays(plan, found, end, written):
        return None  # a value written twice inside it, or what it writes does not stay
    return OnceRegion(flag, cleared_from, end, move, written)


def _stays(plan: m.ExecutionPlan, effects: MethodEffects, end: int, written: frozenset[int]) -> bool:
    """Whether what the region writes stays: no instruction outside it writes it, it is no method input or output,
    and no other planned value shares its bytes but a static view of it (a value no instruction writes that is no
    input, output, constant or initial data, starting where it does and ending within it: it reads its bytes, and
    nothing can change them through it).  Linear in the method, plus a sort per buffer."""
    if written & (set(plan.inputs or ()) | set(plan.outputs or ())):
        return False
    for step, writes in zip(effects.steps, effects.writes):
        if not (step.chain == 0 and step.instruction < end) and written.intersection(writes):
            return False
    values = plan.values or ()
    held = {(r.memory_id, r.start): r.end for index in written if (r := planned_region(values[index]))}
    views = effects.static_views() - set(plan.outputs or ())

    def views_a_held_value(index: int, region: Region) -> bool:
        return index in views and region.end <= held.get((region.memory_id, region.start), -1)

    regions = sorted((r.memory_id, r.start, r.end, index in written) for index, value in enumerate(values)
                     if (r := planned_region(value)) is not None
                     and (index in written or not views_a_held_value(index, r)))
    # one sweep by start per buffer: a region overlaps an earlier one iff it starts before the furthest end so far
    furthest: dict[int, tuple[int, int]] = {}  # buffer -> (furthest end of any region, of a written value's)
    for memory_id, start, stop, is_written in regions:
        any_end, written_end = furthest.get(memory_id, (0, 0))
        if start < written_end or is_written and start < any_end:
            return False
        furthest[memory_id] = (max(any_end, stop), max(written_end, stop) if is_written else written_end)
    return True


def copies_made_once(plan: m.ExecutionPlan, region: Optional[OnceRegion] = None
                     ) -> dict[int, tuple[int, int]]:
    """Destination value -> (source value, chain 0 instruction) of each copy to a device of a host constant inside
    the run-once region (the first such copy per destination)."""
    region = region if region is not None else once_region(plan)
    return leading_copies(plan, region.end) if region is not None else {}


def leading_copies(plan: m.ExecutionPlan, stop: int) -> dict[int, tuple[int, int]]:
    """Destination value -> (source value, chain 0 instruction) of each copy to a device of a host constant in chain
    0's instructions [1, ``stop``) (the first such copy per destination): what a run-once region ending at ``stop``
    copies, or what a region's shape claims to (an encoding's reader of its own files)."""
    found: dict[int, tuple[int, int]] = {}
    for k, slots in constant_copies(plan, 0, 1, stop):
        if slots.to_device:
            found.setdefault(slots.out, (slots.source, k))
    return found


def constant_copies(plan: m.ExecutionPlan, chain: int = 0, start: int = 0, stop: Optional[int] = None
                    ) -> Iterator[tuple[int, CopySlots]]:
    """(instruction, its arguments by role) of each device copy kernel in [``start``, ``stop``) of ``chain`` whose
    source is a constant (the file's bytes): what a run-once region, an encoding's reader of its own files and the
    runtime engine's probe look for."""
    chains = plan.chains or ()
    instructions = (chains[chain].instructions or ()) if 0 <= chain < len(chains) else ()
    values = plan.values or ()
    ops = plan.operators or ()
    for k in range(max(start, 0), len(instructions) if stop is None else min(stop, len(instructions))):
        ins = instructions[k]
        if not isinstance(ins, m.KernelCall) or not 0 <= ins.op_index < len(ops):
            continue
        slots = copy_slots(ops[ins.op_index].qualified_name, ins.args or ())
        source = values[slots.source] if slots is not None and 0 <= slots.source < len(values) else None
        if slots is not None and isinstance(source, m.Tensor) and source.is_constant:
            yield k, slots


def once_length(plan: m.ExecutionPlan) -> int:
    """The number of instructions of chain 0 that form its run-once region, the leading jump included (0: none)."""
    found = once_region(plan)
    return found.end if found is not None else 0
