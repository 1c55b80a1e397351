"""The first-call prologue: host-to-device copies that run once per loaded method, on its first call.

The 1.5 runtime encoding of a constant kept on a device (``rewrite --runtime 1.5``) puts its
``_h2d_copy.out`` at the start of the method behind a guard that only the first call passes::

    chain 0:  [0]      JumpFalseCall(cond = G, destination = P)   G: a Bool value, true in the file
              [1..P-2] et_copy::_h2d_copy.out(C_i, D_i, ...)       one per constant kept on a device
              [P-1]    MoveCall(move_from = F, move_to = G)        F: a Bool value, false in the file
              [P..]    the method's own instructions

ExecuTorch parses a method's values once, when it loads (``Method::init``), and ``execute`` never parses
them again: the MoveCall's ``false`` stays in G, so every later call jumps over the copies, and each D_i keeps
the constant's bytes as long as nothing else uses its memory (``program/memory.py`` keeps D_i resident).
Only instruction types and operators that copy-style programs already have are used, so a runtime built with
selective registration runs it.

``first_call_prologue`` recognises the shape strictly, so that "runs once, and what it copied stays" is certain
whenever it answers:

* **the guard really clears**: it starts ``true``, the MoveCall copies a ``false`` into it, and nothing else in
  the method (no other instruction, input, output or list) names the guard or its ``false`` value;
* **nothing enters it**: no jump lands inside the prologue;
* **it holds copies of host constants only**: each an ``_h2d_copy.out`` whose source is a constant (the file's
  bytes, no method input or output) that no instruction writes;
* **each destination keeps what it got**: one copy per destination, no other instruction writes it (effects.py,
  the one statement of writes), it is no method input or output, and no other planned value shares its bytes but
  a static view of it (a value nothing writes, within its bytes from where they start: it only reads them).

Anything else is an ordinary jump over per-call copies (what ``transfers.py``, the copy rule and the lifetimes
handle, conservatively): ``check`` calls its copies per-call copying, and ``rewrite`` treats them as such.
"""

from __future__ import annotations

from typing import Callable, Optional

from pte_devconst.schema import model as m
from pte_devconst.util.record import record

from .effects import MethodEffects
from .executorch import H2D_COPY
from .kernel_effects import copy_slots, is_h2d_copy
from .readers import readers_in_order
from .regions import Region, planned_region

# The instructions of a prologue around its copies: the guard's jump before them, the move that clears it after.
GUARD_INSTRUCTIONS = 2


@record
class FirstCallPrologue:
    """A recognised prologue of chain 0 (module docstring)."""

    guard: int  # the Bool value the jump tests: true until the first call clears it
    cleared_from: int  # the Bool(false) value the MoveCall copies into the guard
    end: int  # the jump's destination: chain 0's first instruction after the prologue
    copies: tuple[int, ...]  # chain 0 indices of its _h2d_copy.out kernels, in order

    def runs_once(self, chain: int, instruction: int) -> bool:
        """Whether (chain, instruction) is one of the copies or the move: run on the first call only."""
        return chain == 0 and 1 <= instruction < self.end


def _bool(values: tuple[m.EValue, ...], index: int, expected: bool) -> bool:
    value = values[index] if 0 <= index < len(values) else None
    return isinstance(value, m.Bool) and bool(value.bool_val) is expected


def first_call_prologue(plan: m.ExecutionPlan, effects: Optional[Callable[[], MethodEffects]] = None
                        ) -> Optional[FirstCallPrologue]:
    """The method's first-call prologue, or None when chain 0 does not start with one.  Linear in the method.

    ``effects`` gives the method's ``MethodEffects`` when the caller keeps them (built here otherwise, and only
    for a chain 0 shaped like a prologue)."""
    chains = plan.chains or ()
    if not chains:
        return None
    instructions = chains[0].instructions or ()
    values = tuple(plan.values or ())
    ops = plan.operators or ()
    if not instructions or not isinstance(instructions[0], m.JumpFalseCall):
        return None
    jump = instructions[0]
    guard, end = jump.cond_value_index, jump.destination_instruction
    if not GUARD_INSTRUCTIONS + 1 <= end <= len(instructions) or not _bool(values, guard, True):
        return None
    move = instructions[end - 1]
    if not isinstance(move, m.MoveCall) or move.move_to != guard or not _bool(values, move.move_from, False):
        return None
    cleared_from = move.move_from
    if cleared_from == guard:
        return None
    copies = tuple(range(1, end - 1))
    ends = set(plan.inputs or ()) | set(plan.outputs or ())
    sources: set[int] = set()
    destinations: set[int] = set()
    for k in copies:
        ins = instructions[k]
        if not isinstance(ins, m.KernelCall) or not 0 <= ins.op_index < len(ops) \
                or not is_h2d_copy(ops[ins.op_index].qualified_name):
            return None
        slots = copy_slots(ops[ins.op_index].qualified_name, ins.args or ())
        if slots is None or guard in (ins.args or ()) or cleared_from in (ins.args or ()):
            return None
        source = values[slots.source] if 0 <= slots.source < len(values) else None
        if not isinstance(source, m.Tensor) or not source.is_constant or slots.out in destinations \
                or {slots.source, slots.out} & ends or slots.source == slots.out:
            return None  # not a host constant, two copies into one destination, a method input or output
        sources.add(slots.source)
        destinations.add(slots.out)
    reserved = {guard, cleared_from}
    if reserved & ends:
        return None
    own = {(0, 0), (0, end - 1)}  # the guard's jump and the move that clears it
    if any(reader.step not in own for _, reader in readers_in_order(plan, reserved)):
        return None  # anything else that uses the guard's values (program/readers.py)
    for c, chain in enumerate(chains):
        for ins in chain.instructions or ():
            if isinstance(ins, m.JumpFalseCall) and c == 0 and 1 <= ins.destination_instruction < end:
                return None  # a jump into the prologue would run its copies again
    if not _copies_stay(plan, effects() if effects is not None else MethodEffects(plan), end, sources,
                        destinations):
        return None
    return FirstCallPrologue(guard, cleared_from, end, copies)


def _copies_stay(plan: m.ExecutionPlan, effects: MethodEffects, end: int, sources: set[int],
                 destinations: set[int]) -> bool:
    """Whether what the prologue copies stays: no instruction outside it writes a source or a destination, and no
    other planned value shares a destination's bytes but a static view of it (a value no instruction writes that
    is no input, output, constant or initial data, starting where the destination does and ending within it: it
    reads the destination's bytes, and nothing can change them through it).  Linear in the method, plus a sort
    per buffer."""
    watched = sources | destinations
    for step, writes in zip(effects.steps, effects.writes):
        if not (step.chain == 0 and step.instruction < end) and watched.intersection(writes):
            return False
    values = plan.values or ()
    held = {(r.memory_id, r.start): r.end for index in destinations if (r := planned_region(values[index]))}
    views = effects.static_views() - set(plan.outputs or ())

    def views_a_destination(index: int, region: Region) -> bool:
        return index in views and region.end <= held.get((region.memory_id, region.start), -1)

    regions = sorted((r.memory_id, r.start, r.end, index in destinations) for index, value in enumerate(values)
                     if (r := planned_region(value)) is not None
                     and (index in destinations or not views_a_destination(index, r)))
    # one sweep by start per buffer: a region overlaps an earlier one iff it starts before the furthest end so far
    furthest: dict[int, tuple[int, int]] = {}  # buffer -> (furthest end of any region, of a destination's)
    for memory_id, start, stop, is_destination in regions:
        any_end, destination_end = furthest.get(memory_id, (0, 0))
        if start < destination_end or is_destination and start < any_end:
            return False
        furthest[memory_id] = (max(any_end, stop), max(destination_end, stop) if is_destination else destination_end)
    return True


def first_call_copies(plan: m.ExecutionPlan, prologue: Optional[FirstCallPrologue] = None
                      ) -> dict[int, tuple[int, int]]:
    """Destination value -> (source value, chain 0 instruction) of each copy the prologue makes."""
    prologue = prologue if prologue is not None else first_call_prologue(plan)
    if prologue is None:
        return {}
    instructions = (plan.chains or ())[0].instructions or ()
    found: dict[int, tuple[int, int]] = {}
    for k in prologue.copies:
        ins = instructions[k]
        assert isinstance(ins, m.KernelCall), "first_call_prologue holds copies only"
        slots = copy_slots(H2D_COPY, ins.args or ())
        assert slots is not None, "first_call_prologue holds copies with a source and an out"
        found.setdefault(slots.out, (slots.source, k))
    return found
