"""What each instruction of a method reads and writes, as the runtime does it, and each value's uses in order.

The one statement of the rule (every consumer asks here):

* **KernelCall.**  What ``kernel_effects.py`` says (the one table of what a kernel writes, by name, with both
  return-slot conventions): its out arguments (or a prim op's result) are written, the rest read.
* **DelegateCall.**  Its outputs (``dataflow.delegate_call_sites``) are written, its inputs read.
* **MoveCall.**  Writes ``move_to``, reads ``move_from``; the two name one tensor from then on (``aliases``, as
  do a view kernel's self and out: ``kernel_effects.kernel_alias``).
* **JumpFalseCall, FreeCall.**  Read their value.

(``kernel_effects.instruction_effects`` states it for one instruction; this module runs it over a method.)

A tensor list read or written is its items read or written too.  Everything here is linear in the values,
instructions and arguments of the method.
"""

from __future__ import annotations

from typing import Collection, Optional, Sequence

from pte_devconst.schema import model as m
from pte_devconst.util.record import record
from .dataflow import DelegateCallSite, delegate_call_sites
from .kernel_effects import instruction_effects, kernel_alias, list_items
from .regions import RegionKey, region_key


@record
class Step:
    """An instruction's place: chain, then index in the chain (program order is tuple order)."""

    chain: int
    instruction: int


@record
class Use:
    """One use of a value: at ``position`` (program order over all chains), a read or a write."""

    position: int
    writes: bool


class MethodEffects:
    """Reads and writes of every instruction of one method, and the uses of every value, built once.

    ``steps[p]`` is the instruction at program position ``p`` (chains in order, instructions in order);
    ``reads[p]`` / ``writes[p]`` are the values it reads / writes, tensor lists expanded to their items too.
    """

    def __init__(self, plan: m.ExecutionPlan, sites: Optional[Sequence[DelegateCallSite]] = None) -> None:
        self.plan = plan
        values = plan.values or ()
        self.values = values
        ops = [op.qualified_name for op in plan.operators or ()]
        self.sites = tuple(sites) if sites is not None else tuple(delegate_call_sites(plan))
        self._site_at = {(s.chain, s.instruction): s for s in self.sites}
        self.steps: list[Step] = []
        self.reads: list[tuple[int, ...]] = []
        self.writes: list[tuple[int, ...]] = []
        self.chain_span: list[tuple[int, int]] = []  # per chain: [first position, end position)
        self.chains_with_jumps: set[int] = set()
        self.chains_with_loops: set[int] = set()  # a jump backwards (to or before itself): code may run again
        self.jumps: list[tuple[int, int, int]] = []  # (chain, source instruction, destination instruction)
        self.conditions: dict[tuple[int, int], int] = {}  # (chain, instruction) of a jump -> its condition's value
        self.kernel_names: dict[int, str] = {}  # position -> operator name
        # (source, alias) of every MoveCall (move_from, move_to) and view kernel (``kernel_alias``), in program
        # order: one storage under two names from then on
        self.aliases: list[tuple[int, int]] = []
        n_values = len(values)

        def items(index: int) -> tuple[int, ...]:
            return list_items(values[index]) if 0 <= index < n_values else ()

        def expand(indices: Sequence[int]) -> tuple[int, ...]:
            out: list[int] = []
            for index in indices:
                if 0 <= index < n_values:
                    out.append(index)
                    out.extend(list_items(values[index]))
            return tuple(dict.fromkeys(out))

        for c, chain in enumerate(plan.chains or ()):
            first = len(self.steps)
            for k, ins in enumerate(chain.instructions or ()):
                position = len(self.steps)
                self.steps.append(Step(c, k))
                name = ""
                written: Optional[tuple[int, ...]] = None
                if isinstance(ins, m.KernelCall):
                    name = ops[ins.op_index] if 0 <= ins.op_index < len(ops) else ""
                    self.kernel_names[position] = name
                    alias = kernel_alias(name, tuple(ins.args or ()))
                    if alias is not None:
                        self.aliases.append(alias)
                elif isinstance(ins, m.DelegateCall):
                    site = self._site_at.get((c, k))
                    written = site.written if site is not None else None
                elif isinstance(ins, m.MoveCall):
                    self.aliases.append((ins.move_from, ins.move_to))
                elif isinstance(ins, m.JumpFalseCall):
                    self.chains_with_jumps.add(c)
                    self.jumps.append((c, k, ins.destination_instruction))
                    self.conditions[(c, k)] = ins.cond_value_index
                    if ins.destination_instruction <= k:
                        self.chains_with_loops.add(c)
                read, wrote = instruction_effects(ins, name, written, items)  # kernel_effects.py's rule
                self.writes.append(expand(wrote))
                self.reads.append(expand(read))
            self.chain_span.append((first, len(self.steps)))
        self.inputs = frozenset(i for i in plan.inputs or () if 0 <= i < n_values)
        self.outputs = tuple(plan.outputs or ())
        self._uses: Optional[list[list[Use]]] = None
        self._settled: Optional[dict[int, bool]] = None

    @property
    def work(self) -> int:
        """The steps building this took (for a work budget): instructions plus every read and write."""
        return len(self.steps) + sum(map(len, self.reads)) + sum(map(len, self.writes))

    def uses(self) -> list[list[Use]]:
        """Per value, its uses in program order (a read before a write at one position)."""
        if self._uses is None:
            uses: list[list[Use]] = [[] for _ in self.values]
            for position, (read, written) in enumerate(zip(self.reads, self.writes)):
                for index in read:
                    uses[index].append(Use(position, False))
                for index in written:
                    uses[index].append(Use(position, True))
            self._uses = uses
        return self._uses

    def never_taken(self, chain: int, instruction: int) -> bool:
        """Whether the jump at (chain, instruction) never jumps: its condition is ``true`` on every call
        (``settled_conditions``)."""
        if self._settled is None:
            self._settled = settled_conditions(self)
        return self._settled.get(self.conditions.get((chain, instruction), -1)) is True

    def written_anywhere(self) -> frozenset[int]:
        """Every value some instruction writes."""
        return frozenset(v for written in self.writes for v in written)

    def site(self, step: tuple[int, int]) -> Optional[DelegateCallSite]:
        """The delegate call at (chain, instruction), with its split (``sites``), or None."""
        return self._site_at.get(step)

    def static_views(self) -> frozenset[int]:
        """Planned tensors no instruction writes that are no input, constant or initial data: the emitter's elided
        static views, which read whatever was last written at their place (``memory.py``)."""
        written = self.written_anywhere()
        return frozenset(i for i, v in enumerate(self.values)
                         if isinstance(v, m.Tensor) and v.allocation_info is not None and i not in written
                         and i not in self.inputs and not v.is_constant and not v.has_initial_data)

    def position(self, step: tuple[int, int]) -> int:
        """The program position of (chain, instruction)."""
        return self.chain_span[step[0]][0] + step[1]


def settled_conditions(effects: MethodEffects) -> dict[int, bool]:
    """The ``Bool`` values that hold the same value at every point of every call: a literal that nothing writes, or
    that only MoveCalls from settled Bools of the same value write (a run-once region's flag that a ``true`` is
    moved into never clears, so its jump never skips anything).  Linear in the writes, times the length of a chain of
    such moves."""
    values = effects.values
    settled = {index: bool(value.bool_val) for index, value in enumerate(values) if isinstance(value, m.Bool)}
    sources: dict[int, list[Optional[int]]] = {}  # a Bool -> what writes it (a MoveCall's source, else None)
    for position, written in enumerate(effects.writes):
        step = effects.steps[position]
        ins = ((effects.plan.chains or ())[step.chain].instructions or ())[step.instruction]
        for index in written:
            if index in settled:
                sources.setdefault(index, []).append(ins.move_from if isinstance(ins, m.MoveCall) else None)
    changed = True
    while changed:
        changed = False
        for index, writers in sources.items():
            if index in settled and any(src is None or settled.get(src) is not settled[index] for src in writers):
                del settled[index]
                changed = True
    return settled


def outputs_depending_on(plan: m.ExecutionPlan, delegates: Collection[int],
                         effects: Optional[MethodEffects] = None) -> frozenset[int]:
    """Positions in ``plan.outputs`` whose values may depend on what the given delegates (by index) return.

    Taint flows forward in program order over the effects above: an instruction taints what it writes when it
    reads a tainted value, and a delegate call when it is one of ``delegates``.  A value is tainted when its own
    index is, or its planned region is (so static views carry it too).  An untainted write clears a region's
    taint, except in chains with jumps, where the pass sees both branches of a condition and taint only grows.
    (``validate`` does not compare opaque delegates' stand-in outputs with expected outputs.)
    """
    if not delegates:
        return frozenset()
    effects = effects if effects is not None else MethodEffects(plan)
    values = effects.values
    tainted_values: set[int] = set()
    tainted_regions: set[RegionKey] = set()
    delegate_at = {effects.position((s.chain, s.instruction)): s.delegate_index for s in effects.sites}

    def tainted(index: int) -> bool:
        region = region_key(values[index]) if 0 <= index < len(values) else None
        return index in tainted_values or (region is not None and region in tainted_regions)

    for position, (read, written) in enumerate(zip(effects.reads, effects.writes)):
        monotone = effects.steps[position].chain in effects.chains_with_jumps
        taint = delegate_at.get(position) in delegates or any(tainted(a) for a in read)
        for target in written:
            region = region_key(values[target])
            if taint:
                tainted_values.add(target)
                if region is not None:
                    tainted_regions.add(region)
            elif not monotone:
                tainted_values.discard(target)
                if region is not None:
                    tainted_regions.discard(region)
    return frozenset(position for position, index in enumerate(effects.outputs)
                     if 0 <= index < len(values)
                     and (tainted(index) or any(tainted(i) for i in list_items(values[index]))))
