"""Which constants are read only by delegates on one device, and why the others are not.

Pure functions of a decoded ``Program`` (and, for external constants, the
keys and layouts of a .ptd).  Nothing here writes or decides placement; see
``plan.py``.  The verdict rule, per method:

A constant is *eligible for device D* when every reader of it is either a
DelegateCall of a delegate whose ``target_device`` is D, or an
``et_copy::_h2d_copy.out`` kernel whose output is read only by DelegateCalls
of delegates on D (nothing else: no other kernel, method output, MoveCall,
FreeCall or JumpFalseCall), and that every path runs before those readers,
its output's memory seen by no other value meanwhile (``copy_memory.py``).
D is never the CPU, and delegates without a
``target_device`` compile spec run on the CPU.  An external constant whose
.ptd was not given gets no verdict either way: it is *unknown* (it would be
eligible for D if its data matched).

Who reads each value is ``program/readers.py``'s, what each instruction writes ``program/effects.py``'s; the
copy rule (``follow_copy``) lives in ``method_context.py``, below this module and the fold package, which share
it; each method's fold chains (``fold.method_folds``) are part of its analysis.

Methods are told apart by their index in ``execution_plan``, never by name:
two plans may share a name (ExecuTorch then always loads the first).

Cost: every step is linear in the number of values, instructions and reads
(a read: one instruction argument, list item or method output), and is
charged to a work budget proportional to them (``WorkBudget``), as the reader
charges its own, so an adversarial shape fails with a clear error instead of
running away.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Optional, Sequence

from pte_devconst.program.dataflow import Declared, DelegateCallSite
from pte_devconst.program.executorch import H2D_COPY, method_labels, method_name
from pte_devconst.program.kernel_effects import is_h2d_copy
from pte_devconst.program.labels import value_name
from pte_devconst.program.once import OnceRegion
from pte_devconst.program.readers import Reader, ReaderKind, collect_readers
from pte_devconst.program.regions import memory_device
from pte_devconst.schema.devices import delegate_target_device
from pte_devconst.program.transfers import Transfer, once_transfers
from pte_devconst.schema import model as m
from pte_devconst.schema.model import CPU, Device
from pte_devconst.util.gc_pause import gc_paused
from pte_devconst.util.named_enum import NamedEnum
from pte_devconst.util.record import record

from ..fold import MethodFolds, method_folds
from pte_devconst.program.method_context import (NO_PTD, DeviceCopy, ExternalData, MethodContext, Reasons,
                                                 RewiredDelegateArg, WorkBudget, external_problem, follow_copy,
                                                 host_reason)

# The reader model lives in program/readers.py, the copy rule in method_context.py (fold's chains share it); they
# are part of this module's interface too, as every consumer of an analysis meets them.
__all__ = [
    "NO_PTD", "Analysis", "ConstantVerdict", "DelegateInfo", "DeviceCopy", "ExternalData", "MethodAnalysis",
    "MethodStyle", "Reader", "ReaderKind", "RewiredDelegateArg", "VerdictStatus", "WorkBudget", "analyze_program",
]


class VerdictStatus(NamedEnum):
    """A constant's verdict, in a word."""

    ELIGIBLE = "eligible"
    UNKNOWN = "unknown"
    NOT_ELIGIBLE = "not eligible"


class MethodStyle(NamedEnum):
    """How a method gets constants to its device delegates."""

    COPY = "copy"  # et_copy::_h2d_copy.out kernels copy them
    LEGACY = "legacy"  # device delegates read host tensors and copy them themselves
    CPU = "cpu"  # no delegate on a device


@record
class ConstantVerdict:
    method: str  # the method's name, with its plan index when another plan has the same name
    value: int
    tensor: m.Tensor
    readers: tuple[Reader, ...]
    device: Optional[Device]  # the device it can move to; None when not eligible
    reasons: tuple[str, ...]  # why not (empty when eligible)
    details: tuple[str, ...]  # the same with instruction numbers, for --verbose and JSON
    copies: tuple[DeviceCopy, ...] = ()
    delegate_args: tuple[RewiredDelegateArg, ...] = ()
    plan_index: int = 0
    pending_device: Optional[Device] = None  # unknown: the device it would move to once its .ptd is given
    # host-to-device copies of it one call makes (``program/transfers.py``'s count; a run-once region's copy is
    # made once per loaded method, not per call)
    copies_per_call: int = 0

    @property
    def eligible(self) -> bool:
        return self.device is not None

    @property
    def unknown(self) -> bool:
        """External, its .ptd not given, and eligible for ``pending_device`` as far as its readers tell."""
        return self.pending_device is not None

    @property
    def status(self) -> VerdictStatus:
        if self.eligible:
            return VerdictStatus.ELIGIBLE
        return VerdictStatus.UNKNOWN if self.unknown else VerdictStatus.NOT_ELIGIBLE

    @property
    def verdict(self) -> str:
        """``eligible:cuda:0``, ``copied once:cuda:0`` (a run-once region copies it: no per-call copy),
        ``unknown: <why>`` or ``not eligible: <reason>; <reason>``."""
        if self.device is not None:
            return f"copied once:{self.device}" if self.copied_once else f"eligible:{self.device}"
        if self.pending_device is not None:
            return f"unknown: no .ptd given (pass --ptd); would move to {self.pending_device}"
        return "not eligible: " + "; ".join(self.reasons)

    @property
    def nbytes(self) -> int:
        return self.tensor.nbytes

    @property
    def name(self) -> str:
        return value_name(self.tensor.fqn, self.value)

    @property
    def copied_once(self) -> bool:
        """Copied to its device by copies made once only (a run-once region's, ``program/once.py``)."""
        return bool(self.copies) and all(copy.once for copy in self.copies)


@record
class ResidentConstant:
    """A planned tensor on a device, filled with initial data at load, that nothing writes and only delegates on
    its device read: a constant in the 1.6 encoding (``skip_h2d_for_constants``, or this tool's default).  A
    ``--runtime 1.5`` rewrite makes it a host constant copied once, on the first call (``problem``: why not)."""

    method: str
    plan_index: int
    value: int
    tensor: m.Tensor
    device: Device
    problem: Optional[str] = None

    @property
    def nbytes(self) -> int:
        return self.tensor.nbytes

    @property
    def name(self) -> str:
        return value_name(self.tensor.fqn, self.value)


@record
class DelegateInfo:
    index: int
    backend_id: str
    device: Device
    device_error: Optional[str]  # a target_device spec that could not be parsed
    call_sites: tuple[tuple[int, int], ...]  # (chain, instruction)


@record
class MethodAnalysis:
    name: str
    plan_index: int
    constants: tuple[ConstantVerdict, ...]
    delegates: tuple[DelegateInfo, ...]
    h2d_bytes_per_call: int  # the sum of ``transfers``: what one call copies host-to-device
    style: MethodStyle
    label: str = ""  # the name, with the plan index when another plan has the same name
    transfers: tuple[Transfer, ...] = ()  # every host-to-device copy of one call (program/transfers.py)
    call_sites: tuple[DelegateCallSite, ...] = ()  # each DelegateCall's inputs/outputs (program/dataflow.py)
    folds: Optional[MethodFolds] = None  # chains of host kernels from constants to device readers (fold/)
    once: Optional[OnceRegion] = None  # the run-once region of chain 0 (program/once.py), if any
    once_transfers: tuple[Transfer, ...] = ()  # the host-to-device copies it makes, once per loaded method
    residents: tuple[ResidentConstant, ...] = ()  # planned device memory filled with a constant at load

    @property
    def once_bytes(self) -> int:
        """What the first call copies host-to-device besides every call's copies (the run-once region's)."""
        return sum(t.nbytes for t in self.once_transfers)

    @property
    def eligible(self) -> tuple[ConstantVerdict, ...]:
        return tuple(c for c in self.constants if c.eligible)

    @property
    def unknown(self) -> tuple[ConstantVerdict, ...]:
        return tuple(c for c in self.constants if c.unknown)


@record
class Analysis:
    methods: tuple[MethodAnalysis, ...]
    refusal: Optional[str]  # why this program cannot be rewritten at all, if so
    notes: tuple[str, ...] = ()  # facts a reader of the report should know (e.g. two methods with one name)

    @property
    def eligible(self) -> tuple[ConstantVerdict, ...]:
        return tuple(c for method in self.methods for c in method.eligible)

    @property
    def unknown(self) -> tuple[ConstantVerdict, ...]:
        return tuple(c for method in self.methods for c in method.unknown)

    def method(self, key: int | str) -> MethodAnalysis:
        """The method at plan index ``key``, or the first whose label (else name) is ``key``."""
        if isinstance(key, int):
            return self.methods[key]
        for method in self.methods:
            if method.label == key:
                return method
        for method in self.methods:
            if method.name == key:
                return method
        raise KeyError(key)


def _operator_names(plan: m.ExecutionPlan) -> list[str]:
    return [op.qualified_name for op in plan.operators or ()]


def _judge(ctx: MethodContext, index: int, tensor: m.Tensor) -> ConstantVerdict:
    readers = ctx.readers.get(index, [])
    ctx.budget.spend(len(readers) + 1)
    reasons = Reasons()
    devices: set[Device] = set()
    copies: list[DeviceCopy] = []
    args: list[RewiredDelegateArg] = []

    data_missing = tensor.is_external and ctx.external is None
    if tensor.is_external and not data_missing:
        problem = external_problem(tensor, ctx.external)
        if problem:
            reasons.add(problem, problem)
    writer = ctx.writer_of(index)
    if writer is not None:  # a constant some instruction writes is not constant: keep it where it is
        reasons.add("written by an instruction", f"written at instruction {writer.instruction} (chain {writer.chain})")
    for reader in readers:
        if reader.on_device:
            devices.add(reader.delegate_device)
            args.append(RewiredDelegateArg(reader.chain, reader.instruction, reader.arg_pos, index))
        elif reader.copies_to_device:
            follow_copy(ctx, index, reader, reasons, devices, copies, args)
        elif ctx.host_placement and reader.kind in (ReaderKind.KERNEL_CALL, ReaderKind.DELEGATE_CALL):
            devices.add(CPU)
        else:
            reasons.add(*host_reason(reader))
    if not readers:
        reasons.add("no readers", "no instruction reads it")
    if not reasons and len(devices) > 1:
        text = f"read by delegates on different devices ({', '.join(str(d) for d in sorted(devices))})"
        reasons.add(text, text)
    device = min(devices) if not reasons and devices else None
    pending = None
    if device is not None and data_missing:
        device, pending = None, device
        reasons.add(NO_PTD, f"{NO_PTD}: its key {tensor.fqn!r} is looked up in the .ptd at load")
    short, details = reasons.result()
    keep = device is not None or pending is not None
    return ConstantVerdict(ctx.name, index, tensor, tuple(readers), device, short, details,
                           tuple(copies) if keep else (), tuple(args) if keep else (), ctx.plan_index, pending,
                           ctx.per_call_copies(index))


def _delegate_infos(plan: m.ExecutionPlan) -> dict[int, DelegateInfo]:
    sites: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for c, chain in enumerate(plan.chains or ()):
        for k, ins in enumerate(chain.instructions or ()):
            if isinstance(ins, m.DelegateCall):
                sites[ins.delegate_index].append((c, k))
    infos = {}
    for index, delegate in enumerate(plan.delegates or ()):
        device, error = delegate_target_device(delegate)
        infos[index] = DelegateInfo(index, delegate.id or "", device, error, tuple(sites[index]))
    return infos


def _residents(ctx: MethodContext) -> tuple[ResidentConstant, ...]:
    """The method's constants in the 1.6 encoding (``ResidentConstant``), each with why it cannot be re-encoded
    for the 1.5 runtime when it cannot."""
    plan = ctx.plan
    devices = ctx.buffer_devices()
    has_copy_kernel = any(map(is_h2d_copy, _operator_names(plan)))
    outputs = set(plan.outputs or ())
    inputs = set(plan.inputs or ())
    found = []
    for index, value in enumerate(plan.values or ()):
        if not isinstance(value, m.Tensor) or not value.has_initial_data:
            continue
        device = memory_device(value, devices)  # planned (initial data): its buffer's device
        if device.is_cpu:
            continue
        readers = ctx.readers.get(index, [])
        ctx.budget.spend(len(readers) + 1)
        problem: Optional[str] = None
        if ctx.writer_of(index) is not None or index in inputs:
            continue  # state (a mutable buffer), not a constant: nothing to re-encode
        if index in outputs:
            problem = "it is a method output"
        elif any(not r.on_device or r.delegate_device != device for r in readers):
            other = next(r for r in readers if not r.on_device or r.delegate_device != device)
            problem = host_reason(other)[0] if not other.on_device else f"read by a delegate on {other.device}"
        elif ctx.views_of(index):
            problem = "it is read through a static view"
        elif not has_copy_kernel:
            problem = (f"the method has no {H2D_COPY} kernel to copy it with (a new operator could be missing from "
                       "a runtime built with selective registration)")
        found.append(ResidentConstant(ctx.name, ctx.plan_index, index, value, device, problem))
    return tuple(found)


def _shares_mutable_buffers(program: m.Program) -> bool:
    """The footprint of ``share_mutable_buffers``: several methods, each [0, X, shared] with the same buffer-2
    tensors."""
    plans = program.execution_plan or ()
    if len(plans) < 2:
        return False
    signatures = set()
    for plan in plans:
        sizes = plan.non_const_buffer_sizes or ()
        if len(sizes) != 3 or not plan.buffer_devices().get(2, CPU).is_cpu:
            return False
        shared = frozenset((v.allocation_info.memory_offset, v.scalar_type, v.sizes) for v in plan.values or ()
                           if isinstance(v, m.Tensor) and v.allocation_info is not None
                           and v.allocation_info.memory_id == 2)
        if not shared:
            return False
        signatures.add((sizes[2], shared))
    return len(signatures) == 1


@gc_paused
def analyze_program(program: m.Program, external: Optional[ExternalData] = None, *,
                    host_placement: bool = False, declared: Sequence[Declared] = ()) -> Analysis:
    """Verdicts for every constant of every method, plus per-call copy estimates.

    ``declared`` (per method, ``delegate_blobs.declared_splits``): what the delegates' blobs declare of their
    calls, which the program alone does not say.

    ``host_placement`` (a library option for testing the encoding with the CPU
    runtime) treats constants read only by host kernels or host delegates as
    eligible for planned CPU memory instead.
    """
    methods = []
    labels, notes = method_labels(program)
    for plan_index, plan in enumerate(program.execution_plan or ()):
        label = labels[plan_index]
        delegates = _delegate_infos(plan)
        readers = collect_readers(plan)
        instructions = sum(len(chain.instructions or ()) for chain in plan.chains or ())
        budget = WorkBudget(label, len(plan.values or ()) + instructions + sum(map(len, readers.values())))
        ctx = MethodContext(label, plan_index, plan, readers, external, host_placement, budget,
                            declared[plan_index] if plan_index < len(declared) else None)
        transfers, sites = ctx.transfers()
        constants = tuple(
            _judge(ctx, index, value)
            for index, value in enumerate(plan.values or ())
            if isinstance(value, m.Tensor) and value.is_constant
        )
        ops = _operator_names(plan)
        has_copies = any(isinstance(ins, m.KernelCall) and is_h2d_copy(ops[ins.op_index])
                         for chain in plan.chains or () for ins in chain.instructions or ())
        on_device = any(not d.device.is_cpu for d in delegates.values())
        if has_copies:
            style = MethodStyle.COPY
        else:
            style = MethodStyle.LEGACY if on_device else MethodStyle.CPU
        methods.append(MethodAnalysis(method_name(plan.name, plan_index), plan_index, constants,
                                      tuple(delegates.values()), sum(t.nbytes for t in transfers), style, label,
                                      transfers, sites, method_folds(ctx, constants), ctx.once,
                                      tuple(once_transfers(plan, ctx.once)) if ctx.once else (),
                                      _residents(ctx)))
    refusal = None
    if _shares_mutable_buffers(program):
        refusal = ("the methods share one mutable buffer arena (share_mutable_buffers); the runtime cannot give "
                   "each method its own device copy there")
    elif len(program.mutable_data_segments or ()) > 1:
        refusal = (f"the program has {len(program.mutable_data_segments or ())} mutable data segment lists; the "
                   "runtime reads only one")
    elif program.mutable_data_segments \
            and program.mutable_data_segments[0].segment_index >= len(program.segments or ()):
        refusal = (f"its initial-data list names segment {program.mutable_data_segments[0].segment_index}, which does "
                   "not exist (harmless while no tensor has initial data; new initial data could not be added)")
    return Analysis(tuple(methods), refusal, notes)
