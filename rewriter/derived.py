"""Which per-call host-to-device copies carry constant data, and why each one is still made.

A *constant-derived* copy is a per-call transfer (``program/transfers.py``: an
``_h2d_copy`` source, or a host tensor a device delegate reads) whose value is a
constant, or is computed on the host from constant-derived values only (a weight
transposed by ``permute_copy``, a mask built from literals).  Its bytes are the
same on every call, so copying them every time is waste that a gate can flag.

Each such copy gets a status and a reason:

* ``movable``: the value is a constant the rewrite moves (its verdict is eligible);
* ``unknown``: an external constant whose .ptd was not given or found (it would move);
* ``stays``: anything else, with the reason in words: the constant's verdict
  (*read by host kernel aten::mul.out*, *read by delegates on different devices
  (cuda:0, cuda:1)*, *external key 'w' is not in the .ptd*), or, for a value computed
  on the host, what computed it (*transposed on the host from w (aten::permute_copy.out)*).

The rule is static and follows the data forward in program order, like the runtime:
a value is constant-derived when the last instruction that wrote it (or its planned
region: a static view) is a host kernel, a host delegate or a MoveCall whose inputs
are all constant-derived; a constant and a literal (a non-tensor value no instruction
writes) are; a method input, initial data and a device delegate's result are not.  In a
chain with jumps a value once not constant-derived stays so (either branch may have run).
Pure functions of the program and its analysis, linear in the arguments they read (a list's
items included): the data-flow work that the analysis charged to its budget for the transfers.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Iterable, Optional, Sequence

from pte_devconst.schema import model as m
from pte_devconst.program.dataflow import DelegateCallSite, delegate_call_sites
from pte_devconst.program.effects import MethodEffects
from pte_devconst.program.regions import RegionKey, region_key
from pte_devconst.util.record import record
from pte_devconst.program.kernel_effects import copy_slots, kernel_reads, kernel_results, kernel_writes, list_items
from pte_devconst.schema.devices import delegate_target_device
from pte_devconst.util.named_enum import NamedEnum
from pte_devconst.program.transfers import Transfer, TransferKind

from .model.analysis import Analysis, ConstantVerdict, MethodAnalysis
from pte_devconst.program.labels import value_name


class DerivedStatus(NamedEnum):
    """What a rewrite can do about a constant-derived per-call copy."""

    MOVABLE = "movable"  # the rewrite removes it
    UNKNOWN = "unknown"  # it would, given the .ptd
    STAYS = "stays"  # it cannot (the reason says why)


NAMES_SHOWN = 3  # source constants named in a reason; the rest are counted
OPS_KEPT = 4  # distinct host operators remembered per value (for the reason)

# What a host operator does to a tensor, for the reason text: the operator's base name -> a verb.
_VERBS = {
    "transposed": ("permute_copy", "permute", "transpose_copy", "transpose", "t_copy", "t"),
    "reshaped": ("view_copy", "view", "reshape", "_unsafe_view", "expand_copy", "squeeze_copy", "unsqueeze_copy",
                 "flatten", "unflatten", "alias_copy"),
    "sliced": ("slice_copy", "select_copy", "split_copy", "split_with_sizes_copy", "narrow_copy", "index_select",
               "unbind_copy", "chunk"),
    "converted": ("_to_dim_order_copy", "_to_copy", "to_copy", "_clone_dim_order", "clone"),
}
_VERB_OF = {name: verb for verb, names in _VERBS.items() for name in names}


@record
class DerivedCopy:
    """A constant-derived value copied host-to-device on every call (``copies_per_call`` times)."""

    method: str  # the method's label
    plan_index: int
    value: int
    name: str  # the value's name, or ``value N``
    device: m.Device
    nbytes: int  # bytes of one copy (upper bound for a dynamic shape)
    copies_per_call: int
    status: DerivedStatus
    reason: str  # why it stays (or, when unknown, what is missing); empty when movable
    sources: tuple[str, ...] = ()  # the constants it is computed from (empty for a constant itself)
    host_ops: tuple[str, ...] = ()  # the host operators that computed it (empty for a constant itself)

    @property
    def bytes_per_call(self) -> int:
        return self.nbytes * self.copies_per_call

    @property
    def computed(self) -> bool:
        """Computed on the host (not a constant copied as it is)."""
        return bool(self.host_ops)


@record
class _Origin:
    """How a constant-derived value came to be: the constants it is computed from and the host operators."""

    constants: tuple[int, ...] = ()
    ops: tuple[str, ...] = ()
    more_constants: bool = False


LITERAL = _Origin()


def _merge(origins: Iterable[Optional[_Origin]], op: Optional[str] = None) -> Optional[_Origin]:
    """The origin of a value computed from ``origins`` (None as soon as one input is not constant-derived)."""
    constants: dict[int, None] = {}
    ops: dict[str, None] = {} if op is None else {op: None}
    more = False
    for origin in origins:
        if origin is None:
            return None
        more |= origin.more_constants
        for c in origin.constants:
            constants[c] = None
        for o in origin.ops:
            ops[o] = None
    kept = tuple(constants)[:NAMES_SHOWN + 1]
    return _Origin(kept, tuple(ops)[:OPS_KEPT], more or len(constants) > len(kept))


def _items(value: m.EValue) -> tuple[int, ...]:
    if isinstance(value, (m.TensorList, m.OptionalTensorList, m.IntList)):
        return tuple(i for i in value.items or () if i >= 0)
    return ()


class _OriginFlow:
    """The origin of every value as the instructions of one method run, in program order."""

    def __init__(self, plan: m.ExecutionPlan, written: frozenset[int]) -> None:
        self.values = plan.values or ()
        self.inputs = frozenset(plan.inputs or ())
        self.written = written
        self.origin: dict[int, Optional[_Origin]] = {}
        self.regions: dict[RegionKey, Optional[_Origin]] = {}
        self.monotone = False  # in a chain with jumps a value, once not constant-derived, stays so
        self._region_of: dict[int, Optional[RegionKey]] = {}  # memo: one size computation per value
        self._items_of: dict[int, tuple[int, ...]] = {}

    def value(self, index: int) -> m.EValue:
        return self.values[index] if 0 <= index < len(self.values) else None

    def region_of(self, index: int) -> Optional[RegionKey]:
        if index not in self._region_of:
            self._region_of[index] = region_key(self.value(index))
        return self._region_of[index]

    def items_of(self, index: int) -> tuple[int, ...]:
        if index not in self._items_of:
            self._items_of[index] = _items(self.value(index))
        return self._items_of[index]

    def read(self, index: int) -> Optional[_Origin]:
        if index in self.origin:
            return self.origin[index]
        value = self.value(index)
        if index in self.inputs or value is None:
            return None
        if isinstance(value, m.Tensor):
            if value.is_constant:
                return _Origin((index,))
            region = self.region_of(index)
            return self.regions.get(region) if region is not None else None  # a static view, or nothing yet
        if isinstance(value, (m.TensorList, m.OptionalTensorList, m.IntList)):
            return _merge(self.read(item) for item in self.items_of(index))
        return None if index in self.written else LITERAL

    def write(self, indices: Sequence[int], origin: Optional[_Origin]) -> None:
        for index in indices:
            for target in (index, *self.items_of(index)):
                if self.monotone and target in self.origin and self.origin[target] is None:
                    continue
                self.origin[target] = origin
                region = self.region_of(target)
                if region is not None:
                    self.regions[region] = origin


def _origins_at_transfers(plan: m.ExecutionPlan, transfers: Sequence[Transfer],
                          call_sites: Sequence[DelegateCallSite]) -> dict[Transfer, Optional[_Origin]]:
    """The origin of each transfer's value just before its instruction runs."""
    ops = [op.qualified_name for op in plan.operators or ()]
    hosts = [delegate_target_device(d)[0].is_cpu for d in plan.delegates or ()]
    sites = {(s.chain, s.instruction): s for s in call_sites or delegate_call_sites(plan)}
    flow = _OriginFlow(plan, MethodEffects(plan, tuple(sites.values())).written_anywhere())
    at: dict[tuple[int, int], list[Transfer]] = defaultdict(list)
    for t in transfers:
        if t.kind in (TransferKind.H2D_KERNEL, TransferKind.DELEGATE_HOST_INPUT):
            at[(t.chain, t.instruction)].append(t)
    found: dict[Transfer, Optional[_Origin]] = {}
    for c, chain in enumerate(plan.chains or ()):
        instructions = chain.instructions or ()
        flow.monotone = any(isinstance(i, m.JumpFalseCall) for i in instructions)
        for k, instruction in enumerate(instructions):
            for t in at.get((c, k), ()):
                found[t] = flow.read(t.value)
            if isinstance(instruction, m.KernelCall) and instruction.args:
                args = tuple(instruction.args)
                name = ops[instruction.op_index] if 0 <= instruction.op_index < len(ops) else "?"
                slots = copy_slots(name, args)
                if slots is not None:  # a copy between memories: the data is what it was, in its out and return
                    flow.write(kernel_results(name, args), flow.read(slots.source))
                    continue
                written = kernel_writes(name, args, lambda i: list_items(flow.value(i)))  # kernel_effects's table
                produced = {*written, *(item for w in written for item in flow.items_of(w))}
                inputs = [a for a in kernel_reads(name, args, written=written) if a not in produced
                          and not (flow.items_of(a) and produced.issuperset(flow.items_of(a)))]
                flow.write(written, _merge((flow.read(a) for a in inputs), name))
            elif isinstance(instruction, m.DelegateCall) and (c, k) in sites:
                site = sites[(c, k)]
                on_host = 0 <= site.delegate_index < len(hosts) and hosts[site.delegate_index]
                origin = _merge((flow.read(a) for a in site.inputs), "delegate") if on_host else None
                flow.write(site.outputs, origin)
            elif isinstance(instruction, m.MoveCall):
                flow.write((instruction.move_to,), flow.read(instruction.move_from))
    return found


def _verb(ops: Sequence[str]) -> str:
    verbs = {_VERB_OF.get(op.split("::")[-1].split(".")[0], "computed") for op in ops if op != "delegate"}
    return verbs.pop() if len(verbs) == 1 else "computed"


def _names(values: Sequence[m.EValue], indices: Sequence[int]) -> tuple[str, ...]:
    names = []
    for index in indices:
        value = values[index] if 0 <= index < len(values) else None
        names.append(value_name(value.fqn if isinstance(value, m.Tensor) else None, index))
    return tuple(names)


def _host_reason(origin: _Origin, sources: tuple[str, ...]) -> str:
    shown = ", ".join(sources[:NAMES_SHOWN])
    if len(sources) > NAMES_SHOWN or origin.more_constants:
        shown += " and more"
    start = f"{_verb(origin.ops)} on the host"
    ops = ", ".join(origin.ops)
    return f"{start} from {shown} ({ops})" if sources else f"{start} from literals ({ops})"


def _constant_status(verdict: Optional[ConstantVerdict]) -> tuple[DerivedStatus, str]:
    if verdict is None:  # not reached: every constant has a verdict
        return DerivedStatus.STAYS, "a constant the analysis did not judge"
    if verdict.eligible:
        return DerivedStatus.MOVABLE, ""
    if verdict.unknown:
        return DerivedStatus.UNKNOWN, verdict.verdict
    return DerivedStatus.STAYS, "; ".join(verdict.reasons)


def method_derived_copies(plan: m.ExecutionPlan, method: MethodAnalysis) -> tuple[DerivedCopy, ...]:
    """The constant-derived per-call copies of one method, one entry per (value, device), in program order."""
    origins = _origins_at_transfers(plan, method.transfers, method.call_sites)
    verdicts = {c.value: c for c in method.constants}
    values = plan.values or ()
    grouped: dict[tuple[int, m.Device], list[Transfer]] = {}
    for t in method.transfers:
        origin = origins.get(t)
        if origin is not None and (origin.constants or origin.ops):  # a bare literal (an Int) carries no data
            grouped.setdefault((t.value, t.device), []).append(t)
    result = []
    for (value, device), copies in grouped.items():
        origin = origins[copies[0]]
        assert origin is not None
        name = _names(values, (value,))[0]
        if origin.ops:
            sources = _names(values, origin.constants)
            status, reason, ops = DerivedStatus.STAYS, _host_reason(origin, sources), origin.ops
        else:  # the constant itself, or a value a MoveCall made of it (the constant's verdict says why it stays)
            sources, ops = (), ()
            status, reason = _constant_status(verdicts.get(value) or verdicts.get(origin.constants[0]))
        result.append(DerivedCopy(method.label, method.plan_index, value, name, device, copies[0].nbytes,
                                  len(copies), status, reason, sources, ops))
    return tuple(result)


def derived_copies(program: m.Program, analysis: Analysis) -> tuple[DerivedCopy, ...]:
    """Every constant-derived per-call copy of every method of ``program`` (see the module docstring)."""
    result: list[DerivedCopy] = []
    plans = program.execution_plan or ()
    for method in analysis.methods:
        result.extend(method_derived_copies(plans[method.plan_index], method))
    return tuple(result)


def reason_kind(reason: str) -> str:
    """What a summary groups a reason by: ``transposed on the host``, ``read by host kernel aten::mul.out``."""
    first = reason.split("; ")[0]
    return first.split(" from ")[0] if " on the host from " in first or " on the host (" in first else first


def reasons_in_brief(reasons: Iterable[str]) -> str:
    """``2 read by host kernel aten::mul.out, 1 transposed on the host``: how many copies stay for each kind."""
    counts: dict[str, int] = {}
    for reason in reasons:
        kind = reason_kind(reason)
        counts[kind] = counts.get(kind, 0) + 1
    return ", ".join(f"{n} {kind}" for kind, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
