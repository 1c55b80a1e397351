"""What each instruction of a method reads and writes, as the runtime does it, and each value's uses in order.

The one statement of the rule (every consumer asks here):

* **KernelCall.**  A codegen'd out variant takes its schema's arguments, then one return slot per result; it
  writes its out arguments (which the emitter also passes as the return slots) and never the return slots
  themselves.  So when the last ``r`` arguments repeat the ``r`` before them, those are the outs and are
  written; otherwise (a prim op, ``executorch_prim::*``, ``aten::sym_size``) the last argument is the result and
  is written.  Named exceptions: ``et_copy::_h2d_copy.out`` / ``_d2h_copy.out`` write their ``out`` (argument 1)
  whatever the return slot names; ``aten::copy_`` writes ``self`` (and its return slot);
  ``executorch_prim::et_copy_index.tensor`` writes its first argument.
* **DelegateCall.**  Its outputs (``dataflow.delegate_call_sites``) are written, its inputs read.
* **MoveCall.**  Writes ``move_to``, reads ``move_from``.
* **JumpFalseCall, FreeCall.**  Read their value.

A tensor list read or written is its items read or written too.  Everything here is linear in the values,
instructions and arguments of the method.
"""

from __future__ import annotations

from typing import Callable, Collection, NamedTuple, Optional, Sequence

from pte_devconst.schema import model as m
from pte_devconst.program.executorch import COPY_KERNELS, ET_COPY_INDEX

from .dataflow import DelegateCallSite, delegate_call_sites
from .regions import Region, planned_region

INPLACE_COPY = ("aten::copy_", "aten::copy_.default")


class Step(NamedTuple):
    """An instruction's place: chain, then index in the chain (program order is tuple order)."""

    chain: int
    instruction: int


class Use(NamedTuple):
    """One use of a value: at ``position`` (program order over all chains), a read or a write."""

    position: int
    writes: bool


def kernel_writes(name: str, args: Sequence[int],
                  items: Optional[Callable[[int], tuple[int, ...]]] = None) -> tuple[int, ...]:
    """The arguments a KernelCall writes, by the rule of the module docstring (unexpanded).

    ``items(value)`` gives a tensor list's items: several outs are returned as one TensorList value, whose
    items are the outs before it (``native_layer_norm.out``), or a list of outs is passed twice as two list
    values with the same items (``split_with_sizes_copy.out``).
    """
    if not args:
        return ()
    if name in COPY_KERNELS:
        return (args[1],) if len(args) >= 2 else ()
    if name in INPLACE_COPY:
        return (args[0], *args[3:])
    if name == ET_COPY_INDEX:  # copies into an item of its first argument (a stack built in a loop)
        return (args[0],)
    n = len(args)
    for r in range(n // 2, 0, -1):
        if tuple(args[n - r:]) == tuple(args[n - 2 * r:n - r]):
            return tuple(dict.fromkeys(args[n - 2 * r:]))
    returned = items(args[-1]) if items is not None else ()
    if returned:
        k = len(returned)
        if n - 1 >= k and tuple(args[n - 1 - k:n - 1]) == returned:
            return (*args[n - 1 - k:n - 1], args[-1])
        if n >= 2 and items is not None and items(args[-2]) == returned:
            return (args[-2], args[-1])
    return (args[-1],)


def list_items(value: m.EValue) -> tuple[int, ...]:
    """The items of a tensor list (absent optionals left out); () for anything else."""
    if isinstance(value, (m.TensorList, m.OptionalTensorList)):
        return tuple(i for i in value.items or () if i >= 0)
    return ()


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
        outputs_of = {(s.chain, s.instruction): s for s in self.sites}
        self.steps: list[Step] = []
        self.reads: list[tuple[int, ...]] = []
        self.writes: list[tuple[int, ...]] = []
        self.chain_span: list[tuple[int, int]] = []  # per chain: [first position, end position)
        self.chains_with_jumps: set[int] = set()
        self.chains_with_loops: set[int] = set()  # a jump backwards (to or before itself): code may run again
        self.jumps: list[tuple[int, int, int]] = []  # (chain, source instruction, destination instruction)
        self.kernel_names: dict[int, str] = {}  # position -> operator name
        self.moves: list[tuple[int, int]] = []  # (move_from, move_to) of every MoveCall, in program order
        n_values = len(values)

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
                read: Sequence[int] = ()
                written: Sequence[int] = ()
                if isinstance(ins, m.KernelCall):
                    args = tuple(ins.args or ())
                    name = ops[ins.op_index] if 0 <= ins.op_index < len(ops) else ""
                    self.kernel_names[position] = name
                    written = kernel_writes(name, args, lambda i: list_items(values[i]) if 0 <= i < n_values else ())
                    read = tuple(a for a in args if a not in written)
                elif isinstance(ins, m.DelegateCall):
                    site = outputs_of.get((c, k))
                    args = tuple(ins.args or ())
                    read, written = (site.inputs, site.outputs) if site is not None else (args, ())
                elif isinstance(ins, m.MoveCall):
                    read, written = (ins.move_from,), (ins.move_to,)
                    self.moves.append((ins.move_from, ins.move_to))
                elif isinstance(ins, m.JumpFalseCall):
                    read = (ins.cond_value_index,)
                    self.chains_with_jumps.add(c)
                    self.jumps.append((c, k, ins.destination_instruction))
                    if ins.destination_instruction <= k:
                        self.chains_with_loops.add(c)
                elif isinstance(ins, m.FreeCall):
                    read = (ins.value_index,)
                self.writes.append(expand(written))
                self.reads.append(expand(read))
            self.chain_span.append((first, len(self.steps)))
        self.inputs = frozenset(i for i in plan.inputs or () if 0 <= i < n_values)
        self.outputs = tuple(plan.outputs or ())
        self._uses: Optional[list[list[Use]]] = None

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

    def written_anywhere(self) -> frozenset[int]:
        """Every value some instruction writes."""
        return frozenset(v for written in self.writes for v in written)

    def position(self, step: tuple[int, int]) -> int:
        """The program position of (chain, instruction)."""
        return self.chain_span[step[0]][0] + step[1]


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
    tainted_regions: set[Region] = set()
    delegate_at = {effects.position((s.chain, s.instruction)): s.delegate_index for s in effects.sites}

    def tainted(index: int) -> bool:
        region = planned_region(values[index]) if 0 <= index < len(values) else None
        return index in tainted_values or (region is not None and region in tainted_regions)

    for position, (read, written) in enumerate(zip(effects.reads, effects.writes)):
        monotone = effects.steps[position].chain in effects.chains_with_jumps
        taint = delegate_at.get(position) in delegates or any(tainted(a) for a in read)
        for target in written:
            region = planned_region(values[target])
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
