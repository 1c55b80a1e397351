"""Static host-to-device transfers of one call: what the runtime copies to a device every time a method runs.

The program says it all, without running anything.  Per call, bytes cross from
host memory to a device in four places, and only there:

* **method input**: a tensor input whose memory is on a device (planned in a
  device buffer, or unplanned and device-tagged): the caller's data is copied in;
* **``_h2d_copy``**: an ``et_copy::_h2d_copy.out`` kernel copies its ``self``
  (copy style);
* **delegate host input**: a delegate on a device reads an input whose memory is
  on the host (legacy style); the delegate copies it itself, once per argument
  position;
* **host delegate output**: a delegate on the host writes an output whose memory
  is on a device.

Which DelegateCall arguments are inputs comes from ``dataflow.delegate_call_sites``,
the one split the runner's opaque delegates use too.  Where a value's memory is:
its planned buffer's device, the host for a constant, its device tag for an
unplanned input (``regions.memory_device``); a MoveCall gives its destination the source's memory.  An
``_h2d_copy`` never writes its return slot (``kernel_effects.py``), so that slot keeps its own memory.

Sizes are the planned sizes.  For a DYNAMIC_BOUND tensor they are its upper bound,
which is all a program records of a dynamic shape (not the expression that computes
it), so the figure is a bound on what a call copies, exact when every such tensor
a call copies is at its bound.  The exporter's bounds are interval bounds: a tensor
of ``h - h % 4`` rows, ``h <= 30``, is planned for 30 rows and never holds more than
28, so even a call at the largest inputs copies less than the figure (``Transfer.bound``
marks those copies).  Static programs' figures are exact.  A chain with jumps (``torch.cond``)
copies what its costliest path does: a forward jump on a runtime condition may go
either way, a jump on a constant ``False`` always goes.  ``tests/test_estimate_vs_runner.py``
holds the total equal to the runner's measured copies on every fixture.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Iterable, Optional, Sequence

from pte_devconst.schema import model as m
from .dataflow import DelegateCallSite, delegate_call_sites
from pte_devconst.schema.devices import delegate_target_device
from pte_devconst.util.named_enum import NamedEnum
from pte_devconst.util.record import record

from .kernel_effects import copy_slots
from .once import OnceRegion, once_region
from .regions import memory_device, value_nbytes


class TransferKind(NamedEnum):
    """The four places where bytes cross from host memory to a device every call (see above)."""

    METHOD_INPUT = "method input"
    H2D_KERNEL = "_h2d_copy"
    DELEGATE_HOST_INPUT = "delegate host input"
    HOST_DELEGATE_OUTPUT = "host delegate output"


@record
class Transfer:
    """One host-to-device copy that every call makes (on the path it lies on)."""

    kind: TransferKind
    chain: int  # -1 for a method input
    instruction: int  # -1 for a method input
    value: int  # the host value whose bytes cross
    nbytes: int
    device: m.Device  # the device side
    arg_pos: int = -1  # the DelegateCall argument position (delegate kinds)
    bound: bool = False  # a DYNAMIC_BOUND tensor: ``nbytes`` is its upper bound; a call may copy less


def work(plan: m.ExecutionPlan) -> int:
    """An upper bound of the steps ``per_call_transfers`` takes: every argument, a tensor list's items included.

    Linear to compute, so a caller with a work budget can refuse a program shaped to make the data flow
    run away (one long list read by many instructions) before running it.
    """
    values = plan.values or ()
    steps = len(plan.inputs or ())
    for chain in plan.chains or ():
        for instruction in chain.instructions or ():
            args = getattr(instruction, "args", None) or ()
            steps += 2 + len(args)
            for arg in args:
                value = values[arg] if 0 <= arg < len(values) else None
                if isinstance(value, (m.TensorList, m.OptionalTensorList)):
                    steps += len(value.items or ())
    return steps


def _bound(value: m.EValue) -> bool:
    return isinstance(value, m.Tensor) and value.shape_dynamism != m.TensorShapeDynamism.STATIC


class _Residence:
    """Where each value's memory is, as the instructions run in program order: ``regions.memory_device``, and a
    MoveCall's destination where its source is."""

    def __init__(self, plan: m.ExecutionPlan) -> None:
        self.values = plan.values or ()
        self.buffers = plan.buffer_devices()
        self.moved: dict[int, m.Device] = {}

    def static(self, index: int) -> m.Device:
        return memory_device(self.values[index] if 0 <= index < len(self.values) else None, self.buffers)

    def of(self, index: int) -> m.Device:
        found = self.moved.get(index)
        return found if found is not None else self.static(index)


def _successors(instructions: Sequence[m.Instruction], pc: int, values: Sequence[m.EValue]) -> tuple[int, ...]:
    instruction = instructions[pc]
    if isinstance(instruction, m.JumpFalseCall):
        target = instruction.destination_instruction
        cond = values[instruction.cond_value_index] if 0 <= instruction.cond_value_index < len(values) else None
        if isinstance(cond, m.Bool):
            return (pc + 1,) if cond.bool_val else (target,)
        return (pc + 1, target)
    return (pc + 1,)


def _costliest_path(instructions: Sequence[m.Instruction], cost: dict[int, int],
                    values: Sequence[m.EValue]) -> Optional[set[int]]:
    """The instructions on the path from 0 to the end that copies the most, or None when a jump goes back."""
    n = len(instructions)
    best = [0] * (n + 1)
    take: list[int] = [n] * (n + 1)
    for pc in range(n - 1, -1, -1):
        options = _successors(instructions, pc, values)
        if any(s <= pc for s in options):
            return None
        nxt = max(options, key=lambda s: best[min(s, n)])
        take[pc] = min(nxt, n)
        best[pc] = cost.get(pc, 0) + best[take[pc]]
    path, pc = set(), 0
    while pc < n:
        path.add(pc)
        pc = take[pc]
    return path


def per_call_transfers(plan: m.ExecutionPlan, sites: Optional[Sequence[DelegateCallSite]] = None,
                       region: Optional[OnceRegion] = None) -> list[Transfer]:
    """Every host-to-device copy one call of ``plan`` makes, in program order (see the module docstring).

    ``sites``: ``dataflow.delegate_call_sites(plan)``, when the caller has it already.  The copies inside the
    method's run-once region (``program/once.py``) are not made per call: ``once_transfers`` lists them.
    """
    return _transfers(plan, sites, region)[0]


def once_transfers(plan: m.ExecutionPlan, region: Optional[OnceRegion] = None) -> list[Transfer]:
    """The host-to-device copies inside the method's run-once region: made once per loaded method, on its first
    call (none when the method has no such region)."""
    return _transfers(plan, None, region)[1]


def _transfers(plan: m.ExecutionPlan, sites: Optional[Sequence[DelegateCallSite]],
               region: Optional[OnceRegion]) -> tuple[list[Transfer], list[Transfer]]:
    """(per-call transfers, transfers made once) of ``plan``."""
    if region is None:
        region = once_region(plan)
    once: list[Transfer] = []
    values = plan.values or ()
    ops = [op.qualified_name for op in plan.operators or ()]
    targets = [delegate_target_device(d)[0] for d in plan.delegates or ()]
    where = _Residence(plan)
    transfers: list[Transfer] = []
    for index in plan.inputs or ():
        device = where.static(index)
        if not device.is_cpu and isinstance(values[index] if 0 <= index < len(values) else None, m.Tensor):
            transfers.append(Transfer(TransferKind.METHOD_INPUT, -1, -1, index, value_nbytes(values[index]), device))
    by_step = {(s.chain, s.instruction): s for s in (delegate_call_sites(plan) if sites is None else sites)}
    for c, chain in enumerate(plan.chains or ()):
        instructions = chain.instructions or ()
        found: list[Transfer] = []
        for k, instruction in enumerate(instructions):
            if isinstance(instruction, m.KernelCall):
                slots = copy_slots(ops[instruction.op_index], instruction.args or ()) \
                    if 0 <= instruction.op_index < len(ops) else None
                if slots is not None and slots.to_device:  # its return slots are never written: no residence moves
                    copy = Transfer(TransferKind.H2D_KERNEL, c, k, slots.source, value_nbytes(values[slots.source]),
                                    where.of(slots.out))
                    (once if region is not None and region.runs_once(c, k) else found).append(copy)
            elif isinstance(instruction, m.DelegateCall) and 0 <= instruction.delegate_index < len(targets):
                site = by_step[(c, k)]
                target = targets[instruction.delegate_index]
                reads = frozenset(site.read)
                for pos, arg in enumerate(site.args):
                    if not isinstance(values[arg] if 0 <= arg < len(values) else None, m.Tensor):
                        continue
                    here = where.of(arg)
                    if pos in reads and here.is_cpu and not target.is_cpu:
                        found.append(Transfer(TransferKind.DELEGATE_HOST_INPUT, c, k, arg, value_nbytes(values[arg]),
                                              target, pos))
                    elif pos not in reads and not here.is_cpu and target.is_cpu:
                        found.append(Transfer(TransferKind.HOST_DELEGATE_OUTPUT, c, k, arg, value_nbytes(values[arg]),
                                              here, pos))
            elif isinstance(instruction, m.MoveCall):
                where.moved[instruction.move_to] = where.of(instruction.move_from)
        if any(isinstance(i, m.JumpFalseCall) for i in instructions):
            cost: dict[int, int] = {}
            for t in found:
                cost[t.instruction] = cost.get(t.instruction, 0) + t.nbytes
            path = _costliest_path(instructions, cost, values)
            if path is not None:
                found = [t for t in found if t.instruction in path]
        transfers.extend(found)
    return [replace(t, bound=True) if _bound(values[t.value]) else t for t in transfers], once


def copies_per_call(transfers: Iterable[Transfer]) -> dict[int, int]:
    """How many times one call copies each value host-to-device: its per-call transfers, counted (the copies of a
    run-once region are made once, not per call).  The one count every report uses: a constant's verdict, a
    fold chain's, a diff's folded value."""
    counts: dict[int, int] = {}
    for t in transfers:
        counts[t.value] = counts.get(t.value, 0) + 1
    return counts


def h2d_bytes_per_call(plan: m.ExecutionPlan) -> int:
    """Host-to-device bytes of one call of ``plan``: the sum of ``per_call_transfers``."""
    return sum(t.nbytes for t in per_call_transfers(plan))
