"""Which constants are read only by delegates on one device, and why the others are not.

Pure functions of a decoded ``Program`` (and, for external constants, the
keys and layouts of a .ptd).  Nothing here writes or decides placement; see
``plan.py``.  The verdict rule, per method:

A constant is *eligible for device D* when every reader of it is either a
DelegateCall of a delegate whose ``target_device`` is D, or an
``et_copy::_h2d_copy.out`` kernel whose output is read only by DelegateCalls
of delegates on D (nothing else: no other kernel, method output, MoveCall,
FreeCall or JumpFalseCall).  D is never the CPU, and delegates without a
``target_device`` compile spec run on the CPU.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import field
from typing import Callable, Mapping, Optional

from pte_devconst.schema import model as m
from pte_devconst.schema.gc_pause import gc_paused
from pte_devconst.schema.model import CPU, Device
from pte_devconst.schema.record import record

H2D_COPY = "et_copy::_h2d_copy.out"
D2H_COPY = "et_copy::_d2h_copy.out"
TARGET_DEVICE_KEY = "target_device"


@record
class Reader:
    """One use of a value: an instruction argument, or the method's output list."""

    kind: str  # KernelCall, DelegateCall, MoveCall, JumpFalseCall, FreeCall, TensorList, output
    chain: int
    instruction: int  # index in the chain; -1 for a method output
    arg_pos: int
    name: str = ""  # kernel key or backend id
    delegate_index: int = -1
    device: Optional[Device] = None  # the delegate's target device
    device_error: Optional[str] = None  # the delegate's target_device spec did not parse (so: host)


@record
class DeviceCopy:
    """An ``_h2d_copy.out`` kernel that copies a constant into a device tensor on every call."""

    chain: int
    instruction: int
    src: int
    dst: int
    device: Device


@record
class DelegateArg:
    """A delegate argument that must point at the constant once its copy is gone."""

    chain: int
    instruction: int
    arg_pos: int
    value: int  # the value there now (a copy's destination, or the constant itself)


@record
class ConstantVerdict:
    method: str
    value: int
    tensor: m.Tensor
    readers: tuple[Reader, ...]
    device: Optional[Device]  # the device it can move to; None when not eligible
    reasons: tuple[str, ...]  # why not (empty when eligible)
    details: tuple[str, ...]  # the same with instruction numbers, for --verbose and JSON
    copies: tuple[DeviceCopy, ...] = ()
    delegate_args: tuple[DelegateArg, ...] = ()

    @property
    def eligible(self) -> bool:
        return self.device is not None

    @property
    def verdict(self) -> str:
        """``eligible:cuda:0`` or ``not eligible: <reason>; <reason>``."""
        return f"eligible:{self.device}" if self.device is not None else "not eligible: " + "; ".join(self.reasons)

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
        return sum(1 for r in self.readers if r.kind == "DelegateCall" and r.device is not None and not r.device.is_cpu)


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
    h2d_bytes_per_call: int  # estimate: copy kernels plus host tensors handed to device delegates
    style: str  # "copy" (h2d copy kernels), "legacy" (device delegates, no copies) or "cpu" (no device delegate)

    @property
    def eligible(self) -> tuple[ConstantVerdict, ...]:
        return tuple(c for c in self.constants if c.eligible)


@record
class ExternalData:
    """What analysis needs of a .ptd: the layout of each key (None when the entry has none)."""

    layouts: Mapping[str, Optional[tuple[int, tuple[int, ...], tuple[int, ...]]]] = field(default_factory=dict)


@record
class Analysis:
    methods: tuple[MethodAnalysis, ...]
    refusal: Optional[str]  # why this program cannot be rewritten at all, if so

    @property
    def eligible(self) -> tuple[ConstantVerdict, ...]:
        return tuple(c for method in self.methods for c in method.eligible)

    def method(self, name: str) -> MethodAnalysis:
        for method in self.methods:
            if method.name == name:
                return method
        raise KeyError(name)


def delegate_device(delegate: m.BackendDelegate) -> tuple[Device, Optional[str]]:
    """The delegate's ``target_device`` (CPU when absent), plus an error text when it does not parse."""
    raw = delegate.compile_spec(TARGET_DEVICE_KEY)
    if raw is None:
        return CPU, None
    try:
        return Device.parse(bytes(raw).decode("utf-8")), None
    except (UnicodeDecodeError, ValueError) as error:
        return CPU, f"unreadable target_device {bytes(raw)!r}: {error}"


def _operator_names(plan: m.ExecutionPlan) -> list[str]:
    return [op.qualified_name for op in plan.operators or ()]


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
                    readers[arg].append(Reader("KernelCall", c, k, pos, name))
            elif isinstance(ins, m.DelegateCall):
                info = delegates[ins.delegate_index]
                for pos, arg in enumerate(ins.args or ()):
                    readers[arg].append(Reader("DelegateCall", c, k, pos, info.backend_id, ins.delegate_index,
                                                   info.device, info.device_error))
            elif isinstance(ins, m.MoveCall):
                readers[ins.move_from].append(Reader("MoveCall", c, k, 0))
                readers[ins.move_to].append(Reader("MoveCall", c, k, 1))
            elif isinstance(ins, m.JumpFalseCall):
                readers[ins.cond_value_index].append(Reader("JumpFalseCall", c, k, 0))
            elif isinstance(ins, m.FreeCall):
                readers[ins.value_index].append(Reader("FreeCall", c, k, 0))
    for pos, out in enumerate(plan.outputs or ()):
        readers[out].append(Reader("output", -1, -1, pos))
    for index, value in enumerate(values):
        if isinstance(value, (m.TensorList, m.OptionalTensorList)):
            for pos, item in enumerate(value.items or ()):
                if item >= 0:
                    readers[item].append(Reader("TensorList", -1, -1, pos, f"value {index}"))
    return readers


def _host_reason(reader: Reader) -> tuple[str, str]:
    """(short reason, detailed reason) for a reader that keeps a constant on the host."""
    if reader.kind == "KernelCall":
        return f"read by host kernel {reader.name}", f"read by host kernel {reader.name} at instruction {reader.instruction}"
    if reader.kind == "DelegateCall":
        if reader.device_error:
            short = f"read by delegate {reader.name} with an unreadable target_device (host)"
            return short, f"{short} at instruction {reader.instruction}: {reader.device_error}"
        short = f"read by delegate {reader.name} without target_device (host)"
        return short, f"{short} at instruction {reader.instruction}"
    if reader.kind == "output":
        return "is a method output", f"is method output {reader.arg_pos}"
    if reader.kind == "TensorList":
        return "is part of a tensor list", f"is item {reader.arg_pos} of tensor list {reader.name}"
    return f"used by a {reader.kind}", f"used by a {reader.kind} at instruction {reader.instruction}"


def _judge(method: str, index: int, tensor: m.Tensor, plan: m.ExecutionPlan, all_readers: Mapping[int, list[Reader]],
           external: Optional[ExternalData], host_placement: bool) -> ConstantVerdict:
    readers = all_readers.get(index, [])
    reasons: list[str] = []
    details: list[str] = []
    devices: list[Device] = []
    copies: list[DeviceCopy] = []
    args: list[DelegateArg] = []

    def refuse(short: str, detail: str) -> None:
        if short not in reasons:
            reasons.append(short)
        details.append(detail)

    if tensor.is_external:
        problem = _external_problem(tensor, external)
        if problem:
            refuse(problem, problem)
    for reader in readers:
        if reader.kind == "DelegateCall" and reader.device is not None and not reader.device.is_cpu:
            devices.append(reader.device)
            args.append(DelegateArg(reader.chain, reader.instruction, reader.arg_pos, index))
        elif reader.kind == "KernelCall" and reader.name == H2D_COPY and reader.arg_pos == 0:
            _follow_copy(index, reader, plan, all_readers, devices, copies, args, refuse)
        elif host_placement and reader.kind in ("KernelCall", "DelegateCall"):
            devices.append(CPU)
        else:
            refuse(*_host_reason(reader))
    if not readers:
        refuse("no readers", "no instruction reads it")
    distinct = sorted(set(devices))
    if not reasons and len(distinct) > 1:
        text = f"read by delegates on different devices ({', '.join(str(d) for d in distinct)})"
        refuse(text, text)
    device = distinct[0] if not reasons and distinct else None
    return ConstantVerdict(method, index, tensor, tuple(readers), device, tuple(reasons), tuple(details),
                           tuple(copies) if device else (), tuple(args) if device else ())


def _follow_copy(index: int, copy: Reader, plan: m.ExecutionPlan, all_readers: Mapping[int, list[Reader]],
                 devices: list[Device], copies: list[DeviceCopy], args: list[DelegateArg],
                 refuse: Callable[[str, str], None]) -> None:
    """One h2d copy of the constant: its output must be read by delegates on one device and nothing else."""
    kernel = (plan.chains or ())[copy.chain].instructions[copy.instruction]
    kernel_args = kernel.args or ()
    dst = kernel_args[1] if len(kernel_args) >= 2 else index
    if dst == index:
        refuse("copied by a malformed _h2d_copy", f"_h2d_copy at instruction {copy.instruction} has no output")
        return
    feeds: list[Device] = []
    fed: list[DelegateArg] = []
    clean = True
    for use in all_readers.get(dst, ()):
        if use.chain == copy.chain and use.instruction == copy.instruction:
            continue  # the copy's own out and return slots
        if use.kind == "DelegateCall" and use.device is not None and not use.device.is_cpu:
            feeds.append(use.device)
            fed.append(DelegateArg(use.chain, use.instruction, use.arg_pos, dst))
        else:
            short, detail = _host_reason(use)
            refuse(f"its device copy is also {short}", f"its device copy (value {dst}) is also {detail}")
            clean = False
    if not clean:
        return
    if not feeds:
        refuse("its device copy has no readers", f"its device copy (value {dst}) has no readers")
        return
    devices.extend(feeds)
    args.extend(fed)
    dst_value = (plan.values or ())[dst]
    dst_device = dst_value.device if isinstance(dst_value, m.Tensor) else CPU
    copies.append(DeviceCopy(copy.chain, copy.instruction, index, dst, feeds[0] if dst_device.is_cpu else dst_device))


def _external_problem(tensor: m.Tensor, external: Optional[ExternalData]) -> Optional[str]:
    if external is None:
        return "external (data in a .ptd) but no .ptd given"
    key = tensor.fqn or ""
    if key not in external.layouts:
        return f"external key {key!r} is not in the .ptd"
    layout = external.layouts[key]
    if layout is not None and layout != (tensor.scalar_type, tuple(tensor.sizes or ()), tuple(tensor.dim_order or ())):
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
        device, error = delegate_device(delegate)
        infos[index] = DelegateInfo(index, delegate.id or "", device, error, tuple(sites[index]))
    return infos


def _lives_on_host(plan: m.ExecutionPlan, value: m.EValue) -> bool:
    if not isinstance(value, m.Tensor):
        return False
    if value.allocation_info is None:
        return True  # constants and runtime-provided inputs are host memory
    return plan.buffer_device(value.allocation_info.memory_id).is_cpu


def _first_uses(plan: m.ExecutionPlan, readers: Mapping[int, list[Reader]]
                ) -> tuple[dict[int, tuple[int, int]], dict[tuple[int, int, int], tuple[int, int]]]:
    """Earliest (chain, instruction) use of each value, and of each planned region (memory_id, offset, nbytes)."""
    by_value: dict[int, tuple[int, int]] = {}
    by_region: dict[tuple[int, int, int], tuple[int, int]] = {}
    values = plan.values or ()
    for index, uses in readers.items():
        steps = [(r.chain, r.instruction) for r in uses if r.instruction >= 0]
        if not steps:
            continue
        first = min(steps)
        by_value[index] = first
        value = values[index] if 0 <= index < len(values) else None
        if isinstance(value, m.Tensor) and value.allocation_info is not None:
            key = (value.allocation_info.memory_id, value.allocation_info.memory_offset, value.nbytes)
            by_region[key] = min(first, by_region.get(key, first))
    return by_value, by_region


def estimate_h2d_bytes_per_call(plan: m.ExecutionPlan, delegates: Mapping[int, DelegateInfo],
                                readers: Mapping[int, list[Reader]]) -> int:
    """Host-to-device bytes one call moves: ``_h2d_copy`` sources plus host tensors given to device delegates.

    A delegate's arguments are its inputs followed by its outputs, and the
    split is not stored; an argument counts as an input when something defined
    it before the call: a method input, a constant, initial data, an earlier
    instruction, or, for a value nothing reads afterwards, an earlier-used value
    with exactly the same planned region (the second value the emitter makes
    for a static view; an output shares a slot only with dead values and is
    read afterwards).  Sizes of dynamic
    shapes are their upper bounds.  ``tests/test_estimate_vs_runner.py`` holds
    this equal to the runner's measured copies.
    """
    values = plan.values or ()
    inputs = set(plan.inputs or ())
    ops = _operator_names(plan)
    first_use, first_region_use = _first_uses(plan, readers)
    total = 0
    for c, chain in enumerate(plan.chains or ()):
        for k, ins in enumerate(chain.instructions or ()):
            if isinstance(ins, m.KernelCall) and ops[ins.op_index] == H2D_COPY and ins.args:
                src = values[ins.args[0]]
                total += src.nbytes if isinstance(src, m.Tensor) else 0
            elif isinstance(ins, m.DelegateCall) and not delegates[ins.delegate_index].device.is_cpu:
                for arg in dict.fromkeys(ins.args or ()):
                    value = values[arg]
                    if not _lives_on_host(plan, value):
                        continue
                    alloc = value.allocation_info
                    region = None if alloc is None else (alloc.memory_id, alloc.memory_offset, value.nbytes)
                    later = any((r.chain, r.instruction) > (c, k) or r.instruction < 0 for r in readers.get(arg, ()))
                    defined = (arg in inputs or value.data_buffer_idx > 0 or value.is_external
                               or first_use.get(arg, (c, k)) < (c, k)
                               or (region is not None and not later
                                   and first_region_use.get(region, (c, k)) < (c, k)))
                    if defined:
                        total += value.nbytes
    return total


def _shares_mutable_buffers(program: m.Program) -> bool:
    """The footprint of ``share_mutable_buffers``: several methods, each [0, X, shared] with the same buffer-2 tensors."""
    plans = program.execution_plan or ()
    if len(plans) < 2:
        return False
    signatures = set()
    for plan in plans:
        sizes = plan.non_const_buffer_sizes or ()
        if len(sizes) != 3 or not plan.buffer_device(2).is_cpu:
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
    methods = []
    for plan_index, plan in enumerate(program.execution_plan or ()):
        name = plan.name or f"plan{plan_index}"
        delegates = _delegate_infos(plan)
        readers = collect_readers(plan, delegates)
        constants = tuple(
            _judge(name, index, value, plan, readers, external, host_placement)
            for index, value in enumerate(plan.values or ())
            if isinstance(value, m.Tensor) and value.is_constant
        )
        ops = _operator_names(plan)
        has_copies = any(isinstance(ins, m.KernelCall) and ops[ins.op_index] == H2D_COPY
                         for chain in plan.chains or () for ins in chain.instructions or ())
        on_device = any(not d.device.is_cpu for d in delegates.values())
        style = "copy" if has_copies else "legacy" if on_device else "cpu"
        methods.append(MethodAnalysis(name, plan_index, constants, tuple(delegates.values()),
                                      estimate_h2d_bytes_per_call(plan, delegates, readers), style))
    refusal = None
    if _shares_mutable_buffers(program):
        refusal = ("the methods share one mutable buffer arena (share_mutable_buffers); the runtime cannot give "
                   "each method its own device copy there")
    elif len(program.mutable_data_segments or ()) > 1:
        refusal = f"the program has {len(program.mutable_data_segments)} mutable data segment lists; the runtime reads only one"
    return Analysis(tuple(methods), refusal)
