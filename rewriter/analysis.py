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
import itertools
from dataclasses import field
from typing import Any, Iterable, Mapping, Optional

from pte_devconst.schema import model as m
from pte_devconst.util.errors import UnsupportedProgramError
from pte_devconst.program.dataflow import DelegateCallSite, delegate_call_sites
from pte_devconst.util.gc_pause import gc_paused
from pte_devconst.schema.model import CPU, Device
from pte_devconst.util.named_enum import NamedEnum
from pte_devconst.schema.ptd_file import tensor_key
from pte_devconst.util.record import record
from pte_devconst.program.executorch import H2D_COPY, method_labels, method_name
from pte_devconst.schema.devices import delegate_target_device
from pte_devconst.program.transfers import Transfer, per_call_transfers
from pte_devconst.program.transfers import work as transfer_work

from pte_devconst.program.effects import MethodEffects, Step
from pte_devconst.program.memory import view_reads

from .copy_memory import CopyMemory

NO_PTD = "external (data in a .ptd) but no .ptd given; pass --ptd"
# The codegen'd kernel of an out variant takes exactly its schema arguments plus one return slot
# (executorch/codegen/gen.py: "Expected %zu args"): self, out, return.
H2D_ARGS = 3
# Details kept per distinct reason; the rest are counted ("and N more").
DETAILS_PER_REASON = 3
# Steps of analysis allowed per value, instruction and read of a method.
WORK_PER_ITEM = 16


class WorkBudget:
    """Counts the steps of one method's analysis and fails past a limit proportional to its size."""

    __slots__ = ("left", "limit", "method")

    def __init__(self, method: str, items: int) -> None:
        self.method = method
        self.limit = WORK_PER_ITEM * items + 4096
        self.left = self.limit

    def spend(self, steps: int = 1) -> None:
        self.left -= steps
        if self.left < 0:
            raise UnsupportedProgramError(
                f"method {_printable(self.method)}: analysis needed more than {self.limit:,} steps, "
                f"{WORK_PER_ITEM} per value, instruction and read; refusing a program shaped to run it away")


def _printable(name: str) -> str:
    return name if name.isprintable() else repr(name)


class ReaderKind(NamedEnum):
    """What reads a value: an instruction (by its type's name in the format), a tensor list, or the method's outputs."""

    KERNEL_CALL = "KernelCall"
    DELEGATE_CALL = "DelegateCall"
    MOVE_CALL = "MoveCall"
    JUMP_FALSE_CALL = "JumpFalseCall"
    FREE_CALL = "FreeCall"
    TENSOR_LIST = "TensorList"
    OUTPUT = "output"


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
class Reader:
    """One use of a value: an instruction argument, or the method's output list."""

    kind: ReaderKind
    chain: int
    instruction: int  # index in the chain; -1 for a method output or a list item
    arg_pos: int
    name: str = ""  # kernel key or backend id
    delegate_index: int = -1
    device: Optional[Device] = None  # the delegate's target device
    device_error: Optional[str] = None  # the delegate's target_device spec did not parse (so: host)

    @property
    def step(self) -> tuple[int, int]:
        return self.chain, self.instruction

    @property
    def on_device(self) -> bool:
        """A DelegateCall of a delegate on a non-CPU device."""
        return self.kind == ReaderKind.DELEGATE_CALL and self.device is not None and not self.device.is_cpu

    @property
    def copies_to_device(self) -> bool:
        """The ``self`` of an ``_h2d_copy.out`` kernel: the value is copied to a device here."""
        return self.kind is ReaderKind.KERNEL_CALL and self.name == H2D_COPY and self.arg_pos == 0


@record
class DeviceCopy:
    """An ``_h2d_copy.out`` kernel that copies a constant into a device tensor on every call."""

    chain: int
    instruction: int
    src: int
    dst: int
    device: Device


@record
class RewiredDelegateArg:
    """A delegate argument that must point at the constant once its copy is gone."""

    chain: int
    instruction: int
    arg_pos: int
    value: int  # the value there now (a copy's destination, or the constant itself)


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

    @property
    def eligible(self) -> bool:
        return self.device is not None

    @property
    def unknown(self) -> bool:
        """External, its .ptd not given, and eligible for ``pending_device`` as far as its readers tell."""
        return self.pending_device is not None

    @property
    def status(self) -> VerdictStatus:
        return (VerdictStatus.ELIGIBLE if self.eligible else VerdictStatus.UNKNOWN if self.unknown
                else VerdictStatus.NOT_ELIGIBLE)

    @property
    def verdict(self) -> str:
        """``eligible:cuda:0``, ``unknown: <why>`` or ``not eligible: <reason>; <reason>``."""
        if self.device is not None:
            return f"eligible:{self.device}"
        if self.pending_device is not None:
            return f"unknown: no .ptd given (pass --ptd); would move to {self.pending_device}"
        return "not eligible: " + "; ".join(self.reasons)

    @property
    def nbytes(self) -> int:
        return self.tensor.nbytes

    @property
    def name(self) -> str:
        return self.tensor.fqn or f"value {self.value}"

    @property
    def copies_per_call(self) -> int:
        """Host-to-device copies of this constant per call: one per copy kernel, or per delegate call (legacy)."""
        if self.copies:
            return len(self.copies)
        return sum(1 for r in self.readers if r.on_device)


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
    folds: Any = None  # fold.MethodFolds: chains of host kernels from constants to device readers (fold.py)

    @property
    def eligible(self) -> tuple[ConstantVerdict, ...]:
        return tuple(c for c in self.constants if c.eligible)

    @property
    def unknown(self) -> tuple[ConstantVerdict, ...]:
        return tuple(c for c in self.constants if c.unknown)


@record
class ExternalData:
    """What analysis needs of a .ptd: the layout of each key (None when the entry has none)."""

    layouts: Mapping[str, Optional[tuple[int, tuple[int, ...], tuple[int, ...]]]] = field(default_factory=dict)


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


def buffer_devices(plan: m.ExecutionPlan) -> dict[int, Device]:
    """Planned buffer (memory_id) -> its device, for the buffers ``non_const_buffer_device`` lists (first wins)."""
    return plan.buffer_devices()


def collect_readers(plan: m.ExecutionPlan, delegates: Mapping[int, DelegateInfo]) -> dict[int, list[Reader]]:
    """Every use of every value, in instruction order; list membership counts as a use by the list."""
    readers: dict[int, list[Reader]] = defaultdict(list)
    ops = _operator_names(plan)
    values = plan.values or ()
    for c, chain in enumerate(plan.chains or ()):
        for k, ins in enumerate(chain.instructions or ()):
            if isinstance(ins, m.KernelCall):
                name = ops[ins.op_index]
                for pos, arg in enumerate(ins.args or ()):
                    readers[arg].append(Reader(ReaderKind.KERNEL_CALL, c, k, pos, name))
            elif isinstance(ins, m.DelegateCall):
                info = delegates[ins.delegate_index]
                for pos, arg in enumerate(ins.args or ()):
                    readers[arg].append(Reader(ReaderKind.DELEGATE_CALL, c, k, pos, info.backend_id, ins.delegate_index,
                                               info.device, info.device_error))
            elif isinstance(ins, m.MoveCall):
                readers[ins.move_from].append(Reader(ReaderKind.MOVE_CALL, c, k, 0))
                readers[ins.move_to].append(Reader(ReaderKind.MOVE_CALL, c, k, 1))
            elif isinstance(ins, m.JumpFalseCall):
                readers[ins.cond_value_index].append(Reader(ReaderKind.JUMP_FALSE_CALL, c, k, 0))
            elif isinstance(ins, m.FreeCall):
                readers[ins.value_index].append(Reader(ReaderKind.FREE_CALL, c, k, 0))
    for pos, out in enumerate(plan.outputs or ()):
        readers[out].append(Reader(ReaderKind.OUTPUT, -1, -1, pos))
    for index, value in enumerate(values):
        if isinstance(value, (m.TensorList, m.OptionalTensorList)):
            for pos, item in enumerate(value.items or ()):
                if item >= 0:
                    readers[item].append(Reader(ReaderKind.TENSOR_LIST, -1, -1, pos, f"value {index}"))
    return readers


def _host_reason(reader: Reader) -> tuple[str, str]:
    """(short reason, detailed reason) for a reader that keeps a constant on the host."""
    if reader.kind == ReaderKind.KERNEL_CALL:
        return f"read by host kernel {reader.name}", f"read by host kernel {reader.name} at instruction {reader.instruction}"
    if reader.kind == ReaderKind.DELEGATE_CALL:
        if reader.device_error:
            short = f"read by delegate {reader.name} with an unreadable target_device (host)"
            return short, f"{short} at instruction {reader.instruction}: {reader.device_error}"
        short = f"read by delegate {reader.name} without target_device (host)"
        return short, f"{short} at instruction {reader.instruction}"
    if reader.kind == ReaderKind.OUTPUT:
        return "is a method output", f"is method output {reader.arg_pos}"
    if reader.kind == ReaderKind.TENSOR_LIST:
        return "is part of a tensor list", f"is item {reader.arg_pos} of tensor list {reader.name}"
    return f"used by a {reader.kind}", f"used by a {reader.kind} at instruction {reader.instruction}"


class _Reasons:
    """Why a constant stays: distinct short reasons in order, and at most a few details of each."""

    __slots__ = ("counts", "details")

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.details: list[str] = []

    def __bool__(self) -> bool:
        return bool(self.counts)

    def add(self, short: str, detail: str, count: int = 1) -> None:
        """``count`` occurrences of ``short``; ``detail`` describes the first of them."""
        seen = self.counts.get(short, 0)
        if seen < DETAILS_PER_REASON:
            self.details.append(detail)
        self.counts[short] = seen + count

    def result(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        extra = [f"and {n - DETAILS_PER_REASON:,} more: {short}" for short, n in self.counts.items()
                 if n > DETAILS_PER_REASON]
        return tuple(self.counts), tuple(self.details + extra)


@record
class _Uses:
    """The readers of one value split by what the copy rule needs, built once per value (``_MethodContext.uses``).

    ``kinds`` holds, per distinct short reason of the non-device readers, how many there are and the
    first few of them: enough to explain why a copy cannot go without scanning every reader again.
    """

    on_device: tuple[Reader, ...]
    kinds: tuple[tuple[str, int, tuple[Reader, ...]], ...]


class _MethodContext:
    """What judging one method's constants shares: its readers, and per-value summaries built on demand."""

    def __init__(self, name: str, plan_index: int, plan: m.ExecutionPlan, readers: Mapping[int, list[Reader]],
                 external: Optional[ExternalData], host_placement: bool, budget: WorkBudget) -> None:
        self.name = name
        self.plan_index = plan_index
        self.plan = plan
        self.readers = readers
        self.external = external
        self.host_placement = host_placement
        self.budget = budget
        self._uses: dict[int, _Uses] = {}
        self._views: Optional[Mapping[int, list]] = None
        self._memory: Optional[CopyMemory] = None
        self._effects: Optional[MethodEffects] = None
        self._writers: Optional[dict[int, Step]] = None

    def views_of(self, value: int) -> list:
        """Reads of ``value``'s memory through static views (``program/memory.py``, computed once per method)."""
        if self._views is None:
            self._views = view_reads(self.effects())
        return self._views.get(value, [])

    def memory(self) -> CopyMemory:
        """The method's regions, uses and jumps, for the copy rules (built on the first copy that needs them)."""
        if self._memory is None:
            self._memory = CopyMemory(self.plan, self.budget.spend, self.effects())
        return self._memory

    def effects(self) -> MethodEffects:
        """What each instruction reads and writes (``program/effects.py``), built once per method."""
        if self._effects is None:
            self._effects = MethodEffects(self.plan)
            self.budget.spend(self._effects.work)
        return self._effects

    def writer_of(self, index: int) -> Optional[Step]:
        """The first instruction that writes value ``index``, or None."""
        if self._writers is None:
            effects = self.effects()
            self._writers = {}
            for position, written in enumerate(effects.writes):
                for value in written:
                    self._writers.setdefault(value, effects.steps[position])
        return self._writers.get(index)

    def uses(self, value: int) -> _Uses:
        found = self._uses.get(value)
        if found is None:
            readers = self.readers.get(value, ())
            self.budget.spend(len(readers) + 1)
            kinds: dict[str, tuple[int, list[Reader]]] = {}
            on_device = []
            for reader in readers:
                if reader.on_device:
                    on_device.append(reader)
                    continue
                short = _host_reason(reader)[0]
                count, sample = kinds.get(short, (0, []))
                if len(sample) <= H2D_ARGS:  # one more than a copy's own slots: always one that is not its own
                    sample.append(reader)
                kinds[short] = (count + 1, sample)
            found = _Uses(tuple(on_device), tuple((short, n, tuple(sample)) for short, (n, sample) in kinds.items()))
            self._uses[value] = found
        return found


def _judge(ctx: _MethodContext, index: int, tensor: m.Tensor) -> ConstantVerdict:
    readers = ctx.readers.get(index, [])
    ctx.budget.spend(len(readers) + 1)
    reasons = _Reasons()
    devices: set[Device] = set()
    copies: list[DeviceCopy] = []
    args: list[RewiredDelegateArg] = []

    data_missing = tensor.is_external and ctx.external is None
    if tensor.is_external and not data_missing:
        problem = _external_problem(tensor, ctx.external)
        if problem:
            reasons.add(problem, problem)
    writer = ctx.writer_of(index)
    if writer is not None:  # a constant some instruction writes is not constant: keep it where it is
        reasons.add("written by an instruction", f"written at instruction {writer.instruction} (chain {writer.chain})")
    for reader in readers:
        if reader.on_device:
            devices.add(reader.device)  # type: ignore[arg-type]
            args.append(RewiredDelegateArg(reader.chain, reader.instruction, reader.arg_pos, index))
        elif reader.copies_to_device:
            _follow_copy(ctx, index, reader, reasons, devices, copies, args)
        elif ctx.host_placement and reader.kind in (ReaderKind.KERNEL_CALL, ReaderKind.DELEGATE_CALL):
            devices.add(CPU)
        else:
            reasons.add(*_host_reason(reader))
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
                           tuple(copies) if keep else (), tuple(args) if keep else (), ctx.plan_index, pending)


def _follow_copy(ctx: _MethodContext, index: int, copy: Reader, reasons: _Reasons, devices: set[Device],
                 copies: list[DeviceCopy], args: list[RewiredDelegateArg]) -> None:
    """One h2d copy of the constant: it may go only if delegates on one device are all that read what it writes.

    The kernel writes its ``out`` argument; codegen'd out variants never write the return slot (the
    wrapper in executorch/codegen/gen.py leaves it alone), so a return slot naming another value that
    anything reads is refused rather than guessed at.
    """
    kernel = (ctx.plan.chains or ())[copy.chain].instructions[copy.instruction]
    kernel_args = tuple(kernel.args or ())
    where = f"_h2d_copy at instruction {copy.instruction}"
    if len(kernel_args) != H2D_ARGS or kernel_args[1] == index:
        reasons.add("copied by a malformed _h2d_copy",
                    f"{where} has arguments {list(kernel_args)}; the kernel takes (self, out, return) and the "
                    "runtime refuses any other count")
        return
    dst, ret = kernel_args[1], kernel_args[2]
    clean = _only_read_by_this_copy(ctx, dst, copy, kernel_args, reasons, delegates_allowed=True,
                                    short="its device copy is also {kind}",
                                    detail=f"its device copy (value {dst}) is also {{detail}}")
    if ret != dst:
        clean &= _only_read_by_this_copy(ctx, ret, copy, kernel_args, reasons, delegates_allowed=False,
                                         short="its _h2d_copy returns into another value that is read",
                                         detail=f"{where} returns into value {ret}, not its out value {dst} (the "
                                         f"kernel never writes that slot), and value {ret} is also {{detail}}")
    if not clean:
        return
    views = ctx.views_of(dst)
    if views:  # removing the copy would leave that memory unwritten
        reasons.add("its device copy is also read through a static view",
                    f"its device copy (value {dst}) is also read through value {views[0][0]}, a view of its memory")
        return
    uses = ctx.uses(dst)
    if not uses.on_device:
        reasons.add("its device copy has no readers", f"its device copy (value {dst}) has no readers")
        return
    ctx.budget.spend(len(uses.on_device))
    problem = ctx.memory().problem(copy.step, dst, [use.step for use in uses.on_device])
    if problem is not None:
        reasons.add(*problem)
        return
    devices.update(use.device for use in uses.on_device)  # type: ignore[misc]
    args.extend(RewiredDelegateArg(use.chain, use.instruction, use.arg_pos, dst) for use in uses.on_device)
    value = (ctx.plan.values or ())[dst]
    dst_device = value.device if isinstance(value, m.Tensor) else CPU
    copies.append(DeviceCopy(copy.chain, copy.instruction, index, dst,
                             uses.on_device[0].device if dst_device.is_cpu else dst_device))  # type: ignore[arg-type]


def _only_read_by_this_copy(ctx: _MethodContext, value: int, copy: Reader, kernel_args: tuple[int, ...],
                            reasons: _Reasons, *, delegates_allowed: bool, short: str, detail: str) -> bool:
    """Whether nothing but this copy's own slots (and device delegates, if allowed) uses ``value``; else say what.

    Constant work per call: the copy's own slots (at most three, all of one kind) are subtracted from
    the per-value counts, and each kind's sample always holds a reader that is not one of them.
    """
    uses = ctx.uses(value)
    own = kernel_args.count(value)
    own_kind = _host_reason(copy)[0]
    kinds: Iterable[tuple[str, int, tuple[Reader, ...]]] = uses.kinds
    if not delegates_allowed and uses.on_device:
        first = uses.on_device[0]
        kinds = itertools.chain([(f"read by delegate {first.name} on {first.device}", len(uses.on_device), uses.on_device[:1])],
                      kinds)
    named = 0
    for kind, count, sample in kinds:
        others = count - (own if kind == own_kind else 0)
        if others <= 0:
            continue
        first = next(r for r in sample if r.step != copy.step)
        first_detail = (_host_reason(first)[1] if not first.on_device
                        else f"read by delegate {first.name} on {first.device} at instruction {first.instruction}")
        reasons.add(short.format(kind=kind), detail.format(detail=first_detail)
                    + (f" (and {others - 1:,} more uses like it)" if others > 1 else ""))
        named += 1
        if named == DETAILS_PER_REASON:
            break
    return named == 0


def _external_problem(tensor: m.Tensor, external: Optional[ExternalData]) -> Optional[str]:
    if external is None:
        return NO_PTD
    key = tensor_key(tensor.fqn or "")  # what the runtime looks up (schema/ptd_file.py, the one resolution)
    if key not in external.layouts:
        return f"external key {key!r} is not in the .ptd"
    layout = external.layouts[key]
    if layout is None:  # Method::parse_external_constants calls get_tensor_layout, which needs one
        return f"the .ptd entry of {key!r} has no tensor layout (the runtime needs one to load it)"
    if layout != (tensor.scalar_type, tuple(tensor.sizes or ()), tuple(tensor.dim_order or ())):
        return f"the .ptd layout of {key!r} does not match the tensor"
    return None


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


def method_transfers(plan: m.ExecutionPlan, budget: Optional[WorkBudget] = None
                     ) -> tuple[tuple[Transfer, ...], tuple[DelegateCallSite, ...]]:
    """Every host-to-device copy one call makes (``program/transfers.py``: the rule the runner's counts follow),
    and the delegate calls' input/output split it rests on (``program/dataflow.py``).

    Their bytes are the per-call estimate that ``inspect`` and ``diff`` show; ``tests/test_estimate_vs_runner.py``
    holds it equal to the runner's measured copies.  The data flow's work is charged to ``budget`` first.
    """
    if budget is not None:
        budget.spend(transfer_work(plan))
    sites = tuple(delegate_call_sites(plan))
    return tuple(per_call_transfers(plan, sites)), sites


def _shares_mutable_buffers(program: m.Program) -> bool:
    """The footprint of ``share_mutable_buffers``: several methods, each [0, X, shared] with the same buffer-2 tensors."""
    plans = program.execution_plan or ()
    if len(plans) < 2:
        return False
    signatures = set()
    for plan in plans:
        sizes = plan.non_const_buffer_sizes or ()
        if len(sizes) != 3 or not buffer_devices(plan).get(2, CPU).is_cpu:
            return False
        shared = frozenset((v.allocation_info.memory_offset, v.scalar_type, v.sizes) for v in plan.values or ()
                           if isinstance(v, m.Tensor) and v.allocation_info is not None and v.allocation_info.memory_id == 2)
        if not shared:
            return False
        signatures.add((sizes[2], shared))
    return len(signatures) == 1


@gc_paused
def analyze_program(program: m.Program, external: Optional[ExternalData] = None, *,
                    host_placement: bool = False) -> Analysis:
    """Verdicts for every constant of every method, plus per-call copy estimates.

    ``host_placement`` (a library option for testing the encoding with the CPU
    runtime) treats constants read only by host kernels or host delegates as
    eligible for planned CPU memory instead.
    """
    from .fold import method_folds  # fold.py builds on this module

    methods = []
    labels, notes = method_labels(program)
    for plan_index, plan in enumerate(program.execution_plan or ()):
        label = labels[plan_index]
        delegates = _delegate_infos(plan)
        readers = collect_readers(plan, delegates)
        instructions = sum(len(chain.instructions or ()) for chain in plan.chains or ())
        budget = WorkBudget(label, len(plan.values or ()) + instructions + sum(map(len, readers.values())))
        ctx = _MethodContext(label, plan_index, plan, readers, external, host_placement, budget)
        constants = tuple(
            _judge(ctx, index, value)
            for index, value in enumerate(plan.values or ())
            if isinstance(value, m.Tensor) and value.is_constant
        )
        ops = _operator_names(plan)
        has_copies = any(isinstance(ins, m.KernelCall) and ops[ins.op_index] == H2D_COPY
                         for chain in plan.chains or () for ins in chain.instructions or ())
        on_device = any(not d.device.is_cpu for d in delegates.values())
        style = MethodStyle.COPY if has_copies else MethodStyle.LEGACY if on_device else MethodStyle.CPU
        transfers, sites = method_transfers(plan, budget)
        methods.append(MethodAnalysis(method_name(plan.name, plan_index), plan_index, constants,
                                      tuple(delegates.values()), sum(t.nbytes for t in transfers), style, label,
                                      transfers, sites, method_folds(ctx, constants)))
    refusal = None
    if _shares_mutable_buffers(program):
        refusal = ("the methods share one mutable buffer arena (share_mutable_buffers); the runtime cannot give "
                   "each method its own device copy there")
    elif len(program.mutable_data_segments or ()) > 1:
        refusal = f"the program has {len(program.mutable_data_segments)} mutable data segment lists; the runtime reads only one"
    elif program.mutable_data_segments and program.mutable_data_segments[0].segment_index >= len(program.segments or ()):
        refusal = (f"its initial-data list names segment {program.mutable_data_segments[0].segment_index}, which does "
                   "not exist (harmless while no tensor has initial data; new initial data could not be added)")
    return Analysis(tuple(methods), refusal, notes)
