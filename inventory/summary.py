"""What is in a program, at a glance: the facts ``inspect`` shows, as plain typed records.

Built from a ``PteFile`` (never its tensor data) and an ``Analysis`` (for who
reads each constant and its verdict); the command line renders these as
tables, markdown or JSON.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional


from pte_devconst.schema import model as m
from pte_devconst.schema.scalar_types import scalar_type_name
from pte_devconst.util.named_enum import NamedEnum
from pte_devconst.schema.pte_file import PteFile
from pte_devconst.util.record import record

from pte_devconst.program.regions import memory_device

from pte_devconst.rewriter.model.analysis import Analysis, MethodStyle, Reader, ReaderKind
from pte_devconst.rewriter.encodings import RuntimeNeed, required_runtime
from pte_devconst.rewriter.derived import DerivedCopy, DerivedStatus, derived_copies
from pte_devconst.program.labels import value_name

if TYPE_CHECKING:
    from pte_devconst.rewriter.names import ProgramNames

class ValueKind(NamedEnum):
    """What a value is, in a word (a list of any kind is ``list``)."""

    TENSOR = "tensor"
    INT = "int"
    BOOL = "bool"
    DOUBLE = "double"
    STRING = "string"
    LIST = "list"
    NONE = "none"


class BytesLocation(NamedEnum):
    """Where the bytes of a constant, a delegate blob or initial data are in the files."""

    CONSTANT_SEGMENT = "constant segment"
    SEGMENT = "segment"  # a delegate blob's own segment
    MUTABLE_SEGMENT = "mutable segment"  # initial data
    INLINE = "inline"  # in the flatbuffer
    EXTERNAL = "external"  # a .ptd


@record
class ValueSummary:
    index: int
    kind: ValueKind
    dtype: Optional[str] = None
    shape: Optional[tuple[int, ...]] = None
    device: Optional[str] = None
    name: Optional[str] = None  # a user input's or output's name (``tokens``, ``logits``; from an ETRecord)


@record
class DelegateSummary:
    index: int
    backend_id: str
    device: str
    location: BytesLocation  # INLINE or SEGMENT
    nbytes: int
    call_sites: tuple[int, ...]
    compile_specs: tuple[str, ...]
    device_error: Optional[str] = None  # target_device did not parse, so the delegate runs on the host


@record
class BufferSummary:
    memory_id: int
    nbytes: int
    device: str
    tensors: int


@record
class ConstantSummary:
    value: int
    name: str
    dtype: str
    shape: tuple[int, ...]
    nbytes: int
    location: BytesLocation  # CONSTANT_SEGMENT, INLINE or EXTERNAL
    device_tag: str
    readers: tuple[str, ...]
    verdict: str


@record
class FoldSummary:
    """A chain of host kernels from a constant to device readers (``rewrite --fold``)."""

    value: int  # the value the last kernel writes (the constant itself for a device copy of a shared one)
    source: int
    source_name: str
    kernels: tuple[str, ...]  # "permute_copy at #7", in order
    device: str
    delegates: tuple[int, ...]
    nbytes: int
    bytes_per_call: int
    status: str  # "foldable", "duplicate" (a device copy with --duplicate-shared), or why it cannot fold


@record
class InitialDataSummary:
    value: int
    name: str
    nbytes: int
    memory_id: int
    offset: int
    device: str
    source: BytesLocation  # MUTABLE_SEGMENT or EXTERNAL


@record
class PerCallCopySummary:
    """A constant-derived value copied host-to-device on every call: whether the rewrite moves it, and if not why."""

    value: int
    name: str
    device: str
    nbytes: int
    copies_per_call: int
    bytes_per_call: int
    status: DerivedStatus
    reason: str  # empty when movable

    @classmethod
    def of(cls, copy: DerivedCopy) -> "PerCallCopySummary":
        return cls(copy.value, copy.name, str(copy.device), copy.nbytes, copy.copies_per_call, copy.bytes_per_call,
                   copy.status, copy.reason)


@record
class MethodSummary:
    name: str
    inputs: tuple[ValueSummary, ...]
    outputs: tuple[ValueSummary, ...]
    values: int
    instructions: int
    operators: tuple[str, ...]
    delegates: tuple[DelegateSummary, ...]
    buffers: tuple[BufferSummary, ...]
    constants: tuple[ConstantSummary, ...]
    initial_data: tuple[InitialDataSummary, ...]
    style: MethodStyle
    h2d_bytes_per_call: int
    per_call_copies: tuple[PerCallCopySummary, ...] = ()  # the constant-derived part of h2d_bytes_per_call
    folds: tuple[FoldSummary, ...] = ()
    # some copy is of a dynamic tensor, counted at its planned bound: h2d_bytes_per_call bounds what a call copies
    h2d_per_call_is_bound: bool = False
    # what a run-once region copies once, on the first call (program/once.py); the report's published key
    first_call_h2d_bytes: int = 0


@record
class SegmentSummary:
    index: int
    role: str
    offset: int
    nbytes: int


@record
class ProgramSummary:
    path: str
    file_size: int
    program_size: int
    schema_version: int
    segments: tuple[SegmentSummary, ...]
    methods: tuple[MethodSummary, ...]
    named_data: tuple[str, ...]
    eligible_constants: int  # constants copied per call that a rewrite moves
    eligible_bytes_per_call: int
    runtime_need: Optional[RuntimeNeed] = None  # the oldest runtime that loads it (summarize always says)

    @property
    def stays(self) -> tuple[PerCallCopySummary, ...]:
        """The constant-derived per-call copies the rewrite cannot remove, each with its reason."""
        return tuple(c for method in self.methods for c in method.per_call_copies if c.status is DerivedStatus.STAYS)

    @property
    def stays_bytes_per_call(self) -> int:
        return sum(c.bytes_per_call for c in self.stays)


def value_summary(plan: m.ExecutionPlan, index: int, name: Optional[str] = None) -> ValueSummary:
    value = (plan.values or ())[index]
    if isinstance(value, m.Tensor):
        return ValueSummary(index, ValueKind.TENSOR, scalar_type_name(value.scalar_type), tuple(value.sizes or ()),
                            str(value.device), name)
    kind = {m.Int: ValueKind.INT, m.Bool: ValueKind.BOOL, m.Double: ValueKind.DOUBLE, m.String: ValueKind.STRING,
            m.Null: ValueKind.NONE}.get(type(value), ValueKind.LIST)
    return ValueSummary(index, kind, name=name)


def describe_reader(reader: Reader) -> str:
    if reader.kind == ReaderKind.KERNEL_CALL:
        return f"#{reader.instruction} {reader.name}"
    if reader.kind == ReaderKind.DELEGATE_CALL:
        device = f"{reader.device}, unreadable target_device" if reader.device_error else str(reader.device)
        return f"#{reader.instruction} delegate {reader.delegate_index} ({reader.name}, {device})"
    if reader.kind == ReaderKind.OUTPUT:
        return f"output {reader.arg_pos}"
    if reader.kind == ReaderKind.TENSOR_LIST:
        return f"in list {reader.name}"
    return f"#{reader.instruction} {reader.kind}"


def segment_roles(program: m.Program) -> dict[int, str]:
    roles: dict[int, str] = {}
    if program.constant_segment is not None and len(program.constant_segment.offsets or ()) > 0:
        roles[program.constant_segment.segment_index] = "constants"
    for sub in program.mutable_data_segments or ():
        roles[sub.segment_index] = "initial data"
    for plan in program.execution_plan or ():
        for delegate in plan.delegates or ():
            ref = delegate.processed
            if ref is not None and ref.location == m.DataLocation.SEGMENT:
                roles.setdefault(ref.index, f"delegate {delegate.id}")
    for entry in program.named_data or ():
        roles.setdefault(entry.segment_index, f"named data {entry.key}")
    return roles


def _constant_location(tensor: m.Tensor, program: m.Program) -> BytesLocation:
    if tensor.is_external:
        return BytesLocation.EXTERNAL
    cs = program.constant_segment
    return BytesLocation.CONSTANT_SEGMENT if cs is not None and len(cs.offsets or ()) > 1 else BytesLocation.INLINE


def summarize(source: PteFile, analysis: Analysis, names: Optional["ProgramNames"] = None) -> ProgramSummary:
    """The program at a glance; ``names`` (an ETRecord's) names the methods' user inputs and outputs."""
    program = source.program
    methods = []
    copies_of: dict[int, list[PerCallCopySummary]] = {}
    for copy in derived_copies(program, analysis):
        copies_of.setdefault(copy.plan_index, []).append(PerCallCopySummary.of(copy))
    for method in analysis.methods:
        plan = (program.execution_plan or ())[method.plan_index]
        values = plan.values or ()
        on = plan.buffer_devices()
        counts: dict[int, int] = {}
        initial = []
        for index, value in enumerate(values):
            if isinstance(value, m.Tensor) and value.allocation_info is not None:
                mid = value.allocation_info.memory_id
                counts[mid] = counts.get(mid, 0) + 1
                if value.has_initial_data:
                    initial.append(InitialDataSummary(
                        index, value_name(value.fqn, index), value.nbytes, mid, value.allocation_info.memory_offset,
                        str(memory_device(value, on)),
                        BytesLocation.EXTERNAL if value.is_external else BytesLocation.MUTABLE_SEGMENT))
        delegates = []
        for info in method.delegates:
            delegate = (plan.delegates or ())[info.index]
            span = source.delegate_span(delegate)
            inline = (program.backend_delegate_data or ())
            if span:
                size = span.size
            elif delegate.processed:
                size = len(inline[delegate.processed.index].data or b"")
            else:
                size = 0
            specs = tuple(f"{s.key}={_spec_text(s.value)}" for s in delegate.compile_specs or ())
            delegates.append(DelegateSummary(info.index, info.backend_id, str(info.device),
                                             BytesLocation.SEGMENT if span else BytesLocation.INLINE, size,
                                             tuple(k for _, k in info.call_sites), specs, info.device_error))
        sizes = plan.non_const_buffer_sizes or ()
        buffers = tuple(BufferSummary(i, sizes[i], str(on.get(i, m.CPU)), counts.get(i, 0))
                        for i in range(1, len(sizes)))
        folds = method.folds
        constants = tuple(
            ConstantSummary(c.value, c.name, scalar_type_name(c.tensor.scalar_type), tuple(c.tensor.sizes or ()),
                            c.nbytes,
                            _constant_location(c.tensor, program), str(c.tensor.device),
                            tuple(describe_reader(r) for r in c.readers), (folds and folds.verdict(c)) or c.verdict)
            for c in method.constants
        )
        chains = tuple(
            FoldSummary(f.result, f.source, value_name(f.source_tensor.fqn, f.source),
                        tuple(step.describe() for step in f.steps), str(f.device), f.delegates, f.nbytes,
                        f.bytes_per_call, f.problem or ("duplicate" if f.duplicate else "foldable"))
            for f in (folds.chains if folds else ()))
        operators = tuple(op.qualified_name for op in plan.operators or ())
        instructions = sum(len(chain.instructions or ()) for chain in plan.chains or ())
        methods.append(MethodSummary(
            method.label,
            tuple(value_summary(plan, i, names.input_name(method.plan_index, k) if names else None)
                  for k, i in enumerate(plan.inputs or ())),
            tuple(value_summary(plan, i, names.output_name(method.plan_index, k) if names else None)
                  for k, i in enumerate(plan.outputs or ())), len(values), instructions, operators,
            tuple(delegates), buffers, constants, tuple(initial), method.style, method.h2d_bytes_per_call,
            tuple(copies_of.get(method.plan_index, ())), chains, any(t.bound for t in method.transfers),
            method.once_bytes))
    roles = segment_roles(program)
    segments = tuple(SegmentSummary(i, roles.get(i, "unused"), source.segment_base + s.offset, s.size)
                     for i, s in enumerate(program.segments or ()))
    eligible = [c for c in analysis.eligible if c.copies_per_call]  # a copy made once is no per-call copy
    return ProgramSummary(
        source.path, source.size, source.flatbuffer_size, program.version, segments, tuple(methods),
        tuple(e.key or "" for e in program.named_data or ()), len(eligible),
        sum(c.nbytes * c.copies_per_call for c in eligible),
        required_runtime(program, [method.label for method in analysis.methods]))


def _spec_text(value: Optional[bytes]) -> str:
    raw = bytes(value or b"")
    try:
        text = raw.decode("utf-8")
        if text.isprintable():
            return text
    except UnicodeDecodeError:
        pass
    return "0x" + raw.hex() if len(raw) <= 16 else f"<{len(raw)} bytes>"
