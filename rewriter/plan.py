"""Decide the rewrite: where each eligible constant goes, which copies disappear, what grows.

A pure function of the analysis, the program and the user's options; it returns
a ``RewritePlan`` that ``apply.py`` carries out without further decisions and
that ``--dry-run`` prints as it is.  Placement follows ExecuTorch 1.6's
``skip_h2d_for_constants`` encoding (see docs/design.md): each moved constant
gets a fresh 16-aligned region at the end of its method's buffer for its
device (a new buffer when the method has none), and its bytes become initial
data in the mutable data segment, stored once however many methods move it.
"""

from __future__ import annotations

from dataclasses import field
from typing import Optional

from pte_devconst.schema import model as m
from pte_devconst.schema.header import TENSOR_ALIGNMENT, align_up
from pte_devconst.schema.model import CPU, Device
from pte_devconst.schema.record import record

from .analysis import Analysis, ConstantVerdict, DelegateArg, DeviceCopy


@record
class RewriteOptions:
    devices: Optional[frozenset[Device]] = None  # only move constants to these devices (None: every device)
    min_bytes: int = 0  # leave constants smaller than this where they are
    host_placement: bool = False  # library-only: place host-read constants in planned CPU memory (tests)


@record
class Placement:
    """One constant moved into planned memory on ``device`` with initial data."""

    method: str
    value: int
    name: str
    device: Device
    nbytes: int
    memory_id: int
    offset: int
    initial_data_index: int  # index into mutable_data_segments[0].offsets; 0 for external constants
    source_index: int  # the constant's data_buffer_idx before the rewrite (external: its .ptd index)
    external_key: Optional[str]
    copies: tuple[DeviceCopy, ...]
    delegate_args: tuple[DelegateArg, ...]
    copies_per_call: int

    @property
    def bytes_per_call(self) -> int:
        return self.nbytes * self.copies_per_call


@record
class BufferGrowth:
    memory_id: int
    device: Device
    old_size: int
    new_size: int
    added: bool  # a new buffer (and non_const_buffer_device entry) was created


@record
class MethodEdit:
    name: str
    plan_index: int
    placements: tuple[Placement, ...]
    buffers: tuple[BufferGrowth, ...]
    removed: tuple[tuple[int, int], ...]  # (chain, instruction) of deleted copy kernels
    instruction_maps: tuple[tuple[Optional[int], ...], ...]  # per chain: old index -> new index (None: removed)

    @property
    def bytes_per_call_saved(self) -> int:
        return sum(p.bytes_per_call for p in self.placements)


@record
class InitialData:
    """One new entry of the mutable data segment: the bytes of constant entry ``source_index``."""

    index: int
    source_index: int
    nbytes: int


@record
class Skipped:
    verdict: ConstantVerdict
    reason: str


@record
class RewritePlan:
    analysis: Analysis
    options: RewriteOptions
    methods: tuple[MethodEdit, ...]
    initial_data: tuple[InitialData, ...]
    dropped_constants: tuple[int, ...]  # constant entries nothing reads any more
    skipped: tuple[Skipped, ...] = field(default=())

    @property
    def is_empty(self) -> bool:
        return not any(method.placements for method in self.methods)

    @property
    def placements(self) -> tuple[Placement, ...]:
        return tuple(p for method in self.methods for p in method.placements)

    @property
    def bytes_per_call_saved(self) -> int:
        return sum(method.bytes_per_call_saved for method in self.methods)


def _skip_reason(verdict: ConstantVerdict, options: RewriteOptions) -> Optional[str]:
    if options.devices is not None and verdict.device not in options.devices:
        return f"device {verdict.device} not selected (--device)"
    if verdict.nbytes < options.min_bytes:
        return f"{verdict.nbytes} bytes is below --min-bytes {options.min_bytes}"
    return None


def _buffer_for(plan: m.ExecutionPlan, device: Device, sizes: list[int], devices: list[m.NonConstBufferDevice]
                ) -> tuple[int, bool]:
    """The method's buffer on ``device`` (first one), or a new one appended (memory_id, added)."""
    for memory_id in range(1, len(sizes)):
        if _device_of(memory_id, devices) == device:
            return memory_id, False
    sizes.append(0)
    memory_id = len(sizes) - 1
    if not device.is_cpu:
        devices.append(m.NonConstBufferDevice(memory_id, device.type, device.index))
    return memory_id, True


def _device_of(memory_id: int, devices: list[m.NonConstBufferDevice]) -> Device:
    for entry in devices:
        if entry.buffer_idx == memory_id:
            return Device(entry.device_type, entry.device_index)
    return CPU


def _instruction_maps(plan: m.ExecutionPlan, removed: set[tuple[int, int]]) -> tuple[tuple[Optional[int], ...], ...]:
    maps = []
    for c, chain in enumerate(plan.chains or ()):
        new_index = 0
        mapping: list[Optional[int]] = []
        for k in range(len(chain.instructions or ())):
            if (c, k) in removed:
                mapping.append(None)
            else:
                mapping.append(new_index)
                new_index += 1
        maps.append(tuple(mapping))
    return tuple(maps)


def _existing_mutable_entries(program: m.Program) -> int:
    lists = program.mutable_data_segments or ()
    return len(lists[0].offsets or ()) if lists else 1  # entry 0 is reserved and empty


def make_plan(program: m.Program, analysis: Analysis, options: RewriteOptions = RewriteOptions()) -> RewritePlan:
    """Turn verdicts into placements, buffer growth, copy removals and segment edits."""
    chosen: list[ConstantVerdict] = []
    skipped: list[Skipped] = []
    for method in analysis.methods:
        for verdict in method.eligible:
            reason = _skip_reason(verdict, options)
            if reason:
                skipped.append(Skipped(verdict, reason))
            else:
                chosen.append(verdict)

    # Initial data: one entry per distinct constant entry, however many values or methods move it.
    next_index = _existing_mutable_entries(program)
    entry_of_source: dict[int, int] = {}
    entry_size: dict[int, int] = {}
    for verdict in chosen:
        tensor = verdict.tensor
        if tensor.is_external:
            continue
        source = tensor.data_buffer_idx
        if source not in entry_of_source:
            entry_of_source[source] = next_index
            next_index += 1
        entry_size[source] = max(entry_size.get(source, 0), tensor.nbytes)
    initial_data = tuple(InitialData(index, source, entry_size[source]) for source, index in entry_of_source.items())

    methods = []
    by_method: dict[str, list[ConstantVerdict]] = {}
    for verdict in chosen:
        by_method.setdefault(verdict.method, []).append(verdict)
    for method in analysis.methods:
        plan = (program.execution_plan or ())[method.plan_index]
        verdicts = by_method.get(method.name, [])
        sizes = list(plan.non_const_buffer_sizes or (0,))
        devices = list(plan.non_const_buffer_device or ())
        cursors: dict[int, int] = {}
        added: set[int] = set()
        placements = []
        for verdict in verdicts:
            memory_id, is_new = _buffer_for(plan, verdict.device, sizes, devices)
            if is_new:
                added.add(memory_id)
            offset = cursors.get(memory_id, align_up(sizes[memory_id], TENSOR_ALIGNMENT))
            cursors[memory_id] = offset + align_up(verdict.nbytes, TENSOR_ALIGNMENT)
            tensor = verdict.tensor
            placements.append(Placement(
                method=method.name, value=verdict.value, name=verdict.name, device=verdict.device,
                nbytes=verdict.nbytes, memory_id=memory_id, offset=offset,
                initial_data_index=0 if tensor.is_external else entry_of_source[tensor.data_buffer_idx],
                source_index=tensor.data_buffer_idx, external_key=tensor.fqn if tensor.is_external else None,
                copies=verdict.copies, delegate_args=verdict.delegate_args, copies_per_call=verdict.copies_per_call,
            ))
        old_sizes = plan.non_const_buffer_sizes or (0,)
        buffers = tuple(
            BufferGrowth(memory_id, _device_of(memory_id, devices),
                         old_sizes[memory_id] if memory_id < len(old_sizes) else 0,
                         max(cursor, old_sizes[memory_id] if memory_id < len(old_sizes) else 0), memory_id in added)
            for memory_id, cursor in sorted(cursors.items())
        )
        removed = {(copy.chain, copy.instruction) for p in placements for copy in p.copies}
        methods.append(MethodEdit(method.name, method.plan_index, tuple(placements), buffers,
                                  tuple(sorted(removed)), _instruction_maps(plan, removed)))

    return RewritePlan(analysis, options, tuple(methods), initial_data, _dropped_constants(program, chosen),
                       tuple(skipped))


def _dropped_constants(program: m.Program, moved: list[ConstantVerdict]) -> tuple[int, ...]:
    """Constant entries that only moved values referenced (any method): their bytes can leave the segment."""
    cs = program.constant_segment
    if cs is None or len(cs.offsets or ()) <= 1:
        return ()  # no constant segment, or the deprecated inline constant_buffer: leave it alone
    moved_keys = {(v.method, v.value) for v in moved}
    candidates = {v.tensor.data_buffer_idx for v in moved if not v.tensor.is_external}
    for plan_index, plan in enumerate(program.execution_plan or ()):
        name = plan.name or f"plan{plan_index}"
        for index, value in enumerate(plan.values or ()):
            if (isinstance(value, m.Tensor) and value.is_constant and not value.is_external
                    and (name, index) not in moved_keys):
                candidates.discard(value.data_buffer_idx)
    return tuple(sorted(candidates))
