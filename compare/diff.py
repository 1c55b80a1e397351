"""What changed between two programs: tensors, buffers, instructions, segments, per-call copies.

Works on any two .pte files.  Methods are matched by name and values by index
(a rewrite keeps value indices, so its diff lists exactly the moved
constants); instructions are aligned by kind and operator (``align``: identical
instructions first, then the rest by kind and operator, in near-linear time), so
removed copy kernels show up as removals and retargeted delegate arguments as
changes, and the old-to-new instruction index map is reported for tools that
key on instruction indices.

Data is compared too, by SHA-256: the bytes each tensor ships (a constant's
entry, or a planned tensor's initial data), every delegate blob and every
named-data entry.  A rewrite must keep a moved constant's bytes, so a tensor
whose data differs is listed even when nothing else about it changed.
Hashing runs in C over bounded blocks read with ``preadv`` (``MappedFile.sha256``),
never through the memory map, so diffing two multi-gigabyte files keeps a few MiB
resident; each distinct byte range is hashed once.
"""

from __future__ import annotations

import bisect
import hashlib
from collections import Counter, deque
from typing import Any, Callable, Hashable, Mapping, Optional, Sequence

from pte_devconst.program.effects import MethodEffects
from pte_devconst.program.layout import planned_device_bytes
from pte_devconst.program.regions import memory_device, value_nbytes
from pte_devconst.program.transfers import copies_per_call, per_call_transfers
from pte_devconst.schema import model as m
from pte_devconst.program.executorch import method_labels
from pte_devconst.schema.scalar_types import scalar_type_name
from pte_devconst.util.jsonable import fields_to_json
from pte_devconst.util.named_enum import NamedEnum
from pte_devconst.schema.model import CPU, Device
from pte_devconst.schema.pte_file import PteFile
from pte_devconst.schema.span import Span
from pte_devconst.util.record import record

from pte_devconst.rewriter.model.analysis import analyze_program
from pte_devconst.rewriter.encodings import RuntimeNeed, moved_by_encodings, required_runtime
from pte_devconst.rewriter.flows import MethodFlows, diff_residents, program_flows
from pte_devconst.rewriter.fold import Tracer
from pte_devconst.inventory.summary import segment_roles
from pte_devconst.program.labels import value_name


class MemoryKind(NamedEnum):
    """Where a tensor's memory comes from, in a word."""

    CONSTANT = "constant"  # the constant segment
    EXTERNAL_CONSTANT = "external constant"  # a .ptd
    PLANNED = "planned"  # a planned buffer (with or without initial data)
    INPUT = "input"  # the caller's (unplanned, no data): a method input
    UNUSED = "unused"  # unplanned, no data, and nothing reads or writes it (the output of a removed copy)
    UNPLANNED = "unplanned"  # unplanned, no data, used, but not a method input (memory set at run time)
    OTHER = "other"


class Change(NamedEnum):
    """How an item of one file compares with the same item of the other."""

    SAME = "same"
    CHANGED = "changed"
    ADDED = "added"
    REMOVED = "removed"


class DataComparison(NamedEnum):
    """How a tensor's bytes compare across the two files."""

    SAME = "same"
    CHANGED = "changed"
    FOLDED = "folded"  # computed by a fold: nothing in the original to compare with
    NOT_COMPARED = "-"  # a side ships no bytes for it (planned memory, a .ptd)


@record
class TensorPlacement:
    """Where a tensor's memory comes from."""

    kind: MemoryKind
    device: str
    memory_id: Optional[int]
    offset: Optional[int]
    initial_data: bool
    nbytes: int
    dtype: str
    shape: tuple[int, ...]
    sha256: Optional[str] = None  # of the bytes the tensor ships in this file; None: none (or in a .ptd)

    def describe(self) -> str:
        if self.kind is MemoryKind.PLANNED:
            text = f"planned {self.device} buffer {self.memory_id} @{self.offset}"
            return text + (", initial data" if self.initial_data else "")
        return f"{self.kind} ({self.device})" if self.device != "cpu" else self.kind


@record
class TensorChange:
    value: int
    name: str
    before: Optional[TensorPlacement]
    after: Optional[TensorPlacement]
    data: DataComparison


def data_status(before: Optional[TensorPlacement], after: Optional[TensorPlacement]) -> DataComparison:
    a = before.sha256 if before else None
    b = after.sha256 if after else None
    if a is None or b is None:
        return DataComparison.NOT_COMPARED
    return DataComparison.SAME if a == b else DataComparison.CHANGED


@record
class DelegateChange:
    index: int
    backend_before: Optional[str]
    backend_after: Optional[str]
    change: str  # added, removed, backend, compile specs, blob (comma-separated when several)


@record
class NamedDataChange:
    key: str
    change: Change  # added, removed or changed
    size_before: Optional[int]
    size_after: Optional[int]


@record
class BufferChange:
    memory_id: int
    device_before: Optional[str]
    device_after: Optional[str]
    size_before: Optional[int]
    size_after: Optional[int]


@record
class InstructionChange:
    chain: int
    change: Change  # removed, added or changed
    before_index: Optional[int]
    after_index: Optional[int]
    before: Optional[str]
    after: Optional[str]


@record
class FoldedChange:
    """A value the rewrite keeps in device memory with initial data where the original computed it on the host
    from one constant with foldable kernels (``rewrite --fold``), traced in the original program."""

    value: int
    new_value: bool  # a value past the original's (its host value stays for other readers)
    source: int  # the constant it comes from
    source_name: str
    kernels: tuple[str, ...]  # "permute_copy at #7" (the original's instruction numbers); empty: a device copy
    device: str
    nbytes: int
    bytes_per_call: int  # what the original copied of it per call (estimate)


@record
class MethodDiff:
    name: str
    status: Change
    tensors: tuple[TensorChange, ...]
    buffers: tuple[BufferChange, ...]
    delegates: tuple[DelegateChange, ...]
    instructions: tuple[InstructionChange, ...]
    instruction_map: tuple[tuple[int, Optional[int]], ...]  # (old, new) for chain 0 where they differ
    instructions_before: int
    instructions_after: int
    h2d_bytes_per_call_before: int
    h2d_bytes_per_call_after: int
    folds: tuple[FoldedChange, ...] = ()


@record
class SegmentChange:
    role: str
    size_before: int
    size_after: int


@record
class ProgramDiff:
    a: str
    b: str
    file_size_before: int
    file_size_after: int
    program_size_before: int
    program_size_after: int
    methods: tuple[MethodDiff, ...]
    segments: tuple[SegmentChange, ...]
    named_data: tuple[NamedDataChange, ...]
    h2d_bytes_per_call_before: int
    h2d_bytes_per_call_after: int
    device_bytes_before: int = 0  # planned device memory (program/memory.py), all methods
    device_bytes_after: int = 0
    constants_moved: int = 0  # constants of the first the second keeps on a device (each encoding's ``moved``)
    flows: tuple[MethodFlows, ...] = ()  # the first program's per-call copies, and which the second removed
    notes: tuple[str, ...] = ()  # what the names say of themselves (--etrecord of another program)
    runtime_before: Optional[RuntimeNeed] = None  # what loads each file (program_diff always says)
    runtime_after: Optional[RuntimeNeed] = None

    @property
    def identical(self) -> bool:
        return (all(method.status is Change.SAME for method in self.methods) and not self.segments
                and not self.named_data and self.file_size_before == self.file_size_after
                and self.program_size_before == self.program_size_after)

    @property
    def data_changes(self) -> int:
        """Tensors whose bytes differ (a correct rewrite has none)."""
        return sum(1 for method in self.methods for t in method.tensors if t.data is DataComparison.CHANGED)

    @property
    def moved_constants(self) -> int:
        """Constants the second program plans with initial data (``program/moves.py``), all methods."""
        return self.constants_moved

    @property
    def folded_values(self) -> int:
        return sum(len(method.folds) for method in self.methods)

    def to_json(self) -> dict[str, Any]:
        """``diff``'s JSON document (cli/report.schema.json): every field, and the totals."""
        return {"diff": fields_to_json(self), "identical": self.identical, "moved_constants": self.moved_constants,
                "folded_values": self.folded_values, "data_changes": self.data_changes}


class _Digests:
    """SHA-256 of byte ranges of one file, each distinct range hashed once."""

    def __init__(self, source: PteFile) -> None:
        self.source = source
        self._done: dict[tuple[int, int], str] = {}

    def span(self, span: Optional[Span]) -> Optional[str]:
        return None if span is None else self.digest(span)

    def digest(self, span: Span) -> str:
        key = (span.offset, span.size)
        if key not in self._done:
            self._done[key] = self.source.sha256(span)
        return self._done[key]

    def tensor(self, tensor: m.Tensor) -> Optional[str]:
        span = self.source.tensor_span(tensor)
        if span is not None:
            return self.span(span)
        data = self.source.tensor_bytes(tensor)  # the deprecated inline constant_buffer; None: no bytes here
        return None if data is None else hashlib.sha256(data).hexdigest()

    def delegate(self, delegate: m.BackendDelegate) -> str:
        span = self.source.delegate_span(delegate)
        if span is not None:
            return self.digest(span)
        return hashlib.sha256(self.source.delegate_blob(delegate)).hexdigest()


def used_values(plan: m.ExecutionPlan) -> frozenset[int]:
    """The values a method uses: its inputs and outputs, and what any instruction reads or writes."""
    effects = MethodEffects(plan)
    return (effects.inputs | set(effects.outputs) | {v for read in effects.reads for v in read}
            | {v for written in effects.writes for v in written})


def placement(plan: m.ExecutionPlan, value: m.EValue, digests: Optional[_Digests] = None,
              devices: Optional[Mapping[int, Device]] = None, index: Optional[int] = None,
              used: Optional[frozenset[int]] = None) -> Optional[TensorPlacement]:
    """Where ``value``'s memory comes from.  An unplanned tensor without data is a method input only when it is
    one (``index`` among ``plan.inputs``); else it is unused (nothing reads or writes it) or unplanned."""
    if not isinstance(value, m.Tensor):
        return None
    common: dict[str, Any] = dict(nbytes=value_nbytes(value), dtype=scalar_type_name(value.scalar_type),
                                  shape=tuple(value.sizes or ()),
                                  sha256=digests.tensor(value) if digests is not None else None)
    if value.allocation_info is not None:
        alloc = value.allocation_info
        device = memory_device(value, plan.buffer_devices() if devices is None else devices)
        return TensorPlacement(MemoryKind.PLANNED, str(device), alloc.memory_id, alloc.memory_offset,
                               value.has_initial_data, **common)
    tag = str(value.device)  # the tag the file gives it (a legacy export tags a host constant cuda:0)
    if value.is_constant:
        kind = MemoryKind.EXTERNAL_CONSTANT if value.is_external else MemoryKind.CONSTANT
        return TensorPlacement(kind, tag, None, None, False, **common)
    kind = MemoryKind.INPUT if value.data_buffer_idx == 0 else MemoryKind.OTHER
    if kind is MemoryKind.INPUT and index is not None and index not in (plan.inputs or ()):
        kind = MemoryKind.UNUSED if used is not None and index not in used else MemoryKind.UNPLANNED
    return TensorPlacement(kind, tag, None, None, False, **common)


def instruction_text(plan: m.ExecutionPlan, ins: m.Instruction) -> str:
    ops = plan.operators or ()
    if isinstance(ins, m.KernelCall):
        name = ops[ins.op_index].qualified_name if 0 <= ins.op_index < len(ops) else f"op {ins.op_index}"
        return f"{name}({', '.join(map(str, ins.args or ()))})"
    if isinstance(ins, m.DelegateCall):
        return f"delegate {ins.delegate_index}({', '.join(map(str, ins.args or ()))})"
    if isinstance(ins, m.MoveCall):
        return f"move {ins.move_from} -> {ins.move_to}"
    if isinstance(ins, m.JumpFalseCall):
        return f"jump_false {ins.cond_value_index} -> {ins.destination_instruction}"
    if isinstance(ins, m.FreeCall):
        return f"free {ins.value_index}"
    return "empty"


def _instruction_key(plan: m.ExecutionPlan, ins: m.Instruction) -> str:
    text = instruction_text(plan, ins)
    return text.split("(")[0] if isinstance(ins, (m.KernelCall, m.DelegateCall)) else text.split(" ")[0]


def align(a: Sequence[Hashable], b: Sequence[Hashable]) -> list[tuple[str, int, int, int, int]]:
    """Opcodes (``"equal"`` or ``"replace"``, i1, i2, j1, j2) that pair equal items of ``a`` and ``b`` in order,
    in near-linear time on any input.

    ``difflib.SequenceMatcher(autojunk=False)`` took minutes on a few thousand instructions whose operator names
    repeat (its longest-match search is quadratic or worse there). Here: the common prefix and suffix; then,
    between them, the items that occur exactly once in each side, kept where their order agrees (the longest
    increasing run of their positions, patience diff) as anchors, each gap aligned the same way; a gap with no
    such item (a run of one operator) pairs equal items greedily in order. A work budget proportional to the
    input turns the remaining gaps greedy, so nested gaps cannot add up to quadratic work.
    """
    pairs: list[tuple[int, int]] = []
    budget = 16 * (len(a) + len(b)) + 1024
    stack = [(0, len(a), 0, len(b))]
    while stack:
        a1, a2, b1, b2 = stack.pop()
        while a1 < a2 and b1 < b2 and a[a1] == b[b1]:
            pairs.append((a1, b1))
            a1, b1 = a1 + 1, b1 + 1
        while a1 < a2 and b1 < b2 and a[a2 - 1] == b[b2 - 1]:
            a2, b2 = a2 - 1, b2 - 1
            pairs.append((a2, b2))
        if a1 == a2 or b1 == b2:
            continue
        budget -= (a2 - a1) + (b2 - b1)
        anchors = _unique_anchors(a, a1, a2, b, b1, b2) if budget > 0 else []
        if not anchors:
            pairs.extend(_greedy_pairs(a, a1, a2, b, b1, b2))
            continue
        start_a, start_b = a1, b1
        for i, j in anchors:
            stack.append((start_a, i, start_b, j))
            pairs.append((i, j))
            start_a, start_b = i + 1, j + 1
        stack.append((start_a, a2, start_b, b2))
    pairs.sort()
    opcodes: list[tuple[str, int, int, int, int]] = []
    i = j = 0
    k = 0
    while k < len(pairs):
        x, y = pairs[k]
        if x > i or y > j:
            opcodes.append(("replace", i, x, j, y))
        run = 1
        while k + run < len(pairs) and pairs[k + run] == (x + run, y + run):
            run += 1
        opcodes.append(("equal", x, x + run, y, y + run))
        i, j, k = x + run, y + run, k + run
    if i < len(a) or j < len(b):
        opcodes.append(("replace", i, len(a), j, len(b)))
    return opcodes


def _unique_anchors(a: Sequence[Hashable], a1: int, a2: int, b: Sequence[Hashable], b1: int, b2: int
                    ) -> list[tuple[int, int]]:
    """Pairs (i, j) of items occurring once in ``a[a1:a2]`` and once in ``b[b1:b2]``, the longest run in order."""
    count_a = Counter(a[a1:a2])
    count_b = Counter(b[b1:b2])
    where_b = {b[j]: j for j in range(b1, b2) if count_b[b[j]] == 1}
    candidates = [(i, where_b[a[i]]) for i in range(a1, a2) if count_a[a[i]] == 1 and a[i] in where_b]
    if not candidates:
        return []
    # longest increasing subsequence of the b positions (patience sorting), O(k log k)
    tails: list[int] = []  # tails[n]: b position ending the best run of length n + 1
    tail_at: list[int] = []  # index into candidates of that end
    previous = [-1] * len(candidates)
    for index, (_, j) in enumerate(candidates):
        n = bisect.bisect_left(tails, j)
        if n == len(tails):
            tails.append(j)
            tail_at.append(index)
        else:
            tails[n] = j
            tail_at[n] = index
        previous[index] = tail_at[n - 1] if n else -1
    run = []
    index = tail_at[-1]
    while index >= 0:
        run.append(candidates[index])
        index = previous[index]
    return run[::-1]


def _greedy_pairs(a: Sequence[Hashable], a1: int, a2: int, b: Sequence[Hashable], b1: int, b2: int
                  ) -> list[tuple[int, int]]:
    """Equal items paired in order, each ``a`` item with the next unused equal ``b`` item: linear, not minimal."""
    positions: dict[Hashable, deque[int]] = {}
    for j in range(b1, b2):
        positions.setdefault(b[j], deque()).append(j)
    pairs = []
    j = b1
    for i in range(a1, a2):
        queue = positions.get(a[i])
        while queue and queue[0] < j:
            queue.popleft()
        if queue:
            j = queue.popleft()
            pairs.append((i, j))
            j += 1
    return pairs


def _diff_instructions(a: m.ExecutionPlan, b: m.ExecutionPlan
                       ) -> tuple[list[InstructionChange], list[tuple[int, Optional[int]]]]:
    changes: list[InstructionChange] = []
    mapping: list[tuple[int, Optional[int]]] = []
    chains_a, chains_b = a.chains or (), b.chains or ()
    for c in range(max(len(chains_a), len(chains_b))):
        ins_a = (chains_a[c].instructions or ()) if c < len(chains_a) else ()
        ins_b = (chains_b[c].instructions or ()) if c < len(chains_b) else ()
        texts_a = [instruction_text(a, i) for i in ins_a]
        texts_b = [instruction_text(b, i) for i in ins_b]
        keys_a = [_instruction_key(a, i) for i in ins_a]
        keys_b = [_instruction_key(b, i) for i in ins_b]
        # Align identical instructions first; inside each differing block, pair by kind and operator,
        # so a retargeted delegate call reads as "changed" and a deleted copy as "removed".
        for tag, i1, i2, j1, j2 in align(texts_a, texts_b):
            if tag == "equal":
                mapping.extend((i, j) for i, j in zip(range(i1, i2), range(j1, j2)) if c == 0 and i != j)
                continue
            for itag, x1, x2, y1, y2 in align(keys_a[i1:i2], keys_b[j1:j2]):
                if itag == "equal":
                    for i, j in zip(range(i1 + x1, i1 + x2), range(j1 + y1, j1 + y2)):
                        changes.append(InstructionChange(c, Change.CHANGED, i, j, texts_a[i], texts_b[j]))
                        if c == 0 and i != j:
                            mapping.append((i, j))
                    continue
                for i in range(i1 + x1, i1 + x2):
                    changes.append(InstructionChange(c, Change.REMOVED, i, None, texts_a[i], None))
                    if c == 0:
                        mapping.append((i, None))
                for j in range(j1 + y1, j1 + y2):
                    changes.append(InstructionChange(c, Change.ADDED, None, j, None, texts_b[j]))
        changes.sort(key=lambda ch: (ch.chain, ch.before_index if ch.before_index is not None else ch.after_index))
        mapping.sort()
    return changes, mapping


def _diff_delegates(a: m.ExecutionPlan, b: m.ExecutionPlan, digests: tuple[_Digests, _Digests]
                    ) -> list[DelegateChange]:
    changes = []
    delegates_a, delegates_b = a.delegates or (), b.delegates or ()
    for index in range(max(len(delegates_a), len(delegates_b))):
        da = delegates_a[index] if index < len(delegates_a) else None
        db = delegates_b[index] if index < len(delegates_b) else None
        kinds: list[str]
        if da is None or db is None:
            kinds = [Change.ADDED if da is None else Change.REMOVED]
        else:
            kinds = [kind for kind, differs in (
                ("backend", da.id != db.id),
                ("compile specs", da.compile_specs != db.compile_specs),
                ("blob", digests[0].delegate(da) != digests[1].delegate(db))) if differs]
        if kinds:
            changes.append(DelegateChange(index, da.id if da else None, db.id if db else None, ", ".join(kinds)))
    return changes


def _diff_method(name: str, a: Optional[m.ExecutionPlan], b: Optional[m.ExecutionPlan], h2d: tuple[int, int],
                 digests: tuple[_Digests, _Digests]) -> MethodDiff:
    if a is None or b is None:
        present = a or b
        assert present is not None, "a method of either file"
        count = sum(len(ch.instructions or ()) for ch in present.chains or ())
        return MethodDiff(name, Change.ADDED if a is None else Change.REMOVED, (), (), (), (), (),
                          0 if a is None else count, count if a is None else 0, *h2d)
    tensors = []
    values_a, values_b = a.values or (), b.values or ()
    devices_a, devices_b = a.buffer_devices(), b.buffer_devices()
    used_a, used_b = used_values(a), used_values(b)
    for index in range(max(len(values_a), len(values_b))):
        pa = placement(a, values_a[index], digests[0], devices_a, index, used_a) if index < len(values_a) else None
        pb = placement(b, values_b[index], digests[1], devices_b, index, used_b) if index < len(values_b) else None
        if pa != pb:
            source = values_b[index] if index < len(values_b) else values_a[index]
            label = value_name(source.fqn if isinstance(source, m.Tensor) else None, index)
            tensors.append(TensorChange(index, label, pa, pb, data_status(pa, pb)))
    sizes_a, sizes_b = a.non_const_buffer_sizes or (), b.non_const_buffer_sizes or ()
    buffers = []
    for mid in range(1, max(len(sizes_a), len(sizes_b))):
        da = str(devices_a.get(mid, CPU)) if mid < len(sizes_a) else None
        db = str(devices_b.get(mid, CPU)) if mid < len(sizes_b) else None
        sa = sizes_a[mid] if mid < len(sizes_a) else None
        sb = sizes_b[mid] if mid < len(sizes_b) else None
        if (da, sa) != (db, sb):
            buffers.append(BufferChange(mid, da, db, sa, sb))
    delegates = _diff_delegates(a, b, digests)
    instructions, mapping = _diff_instructions(a, b)
    count_a = sum(len(ch.instructions or ()) for ch in a.chains or ())
    count_b = sum(len(ch.instructions or ()) for ch in b.chains or ())
    changed = tensors or buffers or delegates or instructions or len(values_a) != len(values_b)
    folds = _folds(a, b, tensors)
    status = {f.value: _fold_data(a, f, next(t for t in tensors if t.value == f.value), digests[0]) for f in folds}
    tensors = [m.replace(t, data=status[t.value]) if t.value in status else t for t in tensors]
    return MethodDiff(name, Change.CHANGED if changed else Change.SAME, tuple(tensors), tuple(buffers),
                      tuple(delegates), tuple(instructions), tuple(mapping), count_a, count_b, *h2d, tuple(folds))


def _folds(a: m.ExecutionPlan, b: m.ExecutionPlan, tensors: list[TensorChange]) -> list[FoldedChange]:
    """Tensors device-resident with initial data in ``b`` that ``a`` computed from a constant (or had not):
    traced in ``a`` through its foldable kernels; a new value through the delegate arguments now reading it."""
    candidates = [t for t in tensors if t.after and t.after.kind is MemoryKind.PLANNED and t.after.initial_data
                  and t.after.device != "cpu" and (t.before is None or t.before.kind is MemoryKind.PLANNED
                                                   and not t.before.initial_data)]
    if not candidates:
        return []
    tracer = Tracer(a)
    standing = _replaced_arguments(a, b)
    copies = copies_per_call(per_call_transfers(a))
    found = []
    for t in candidates:
        origins = [t.value] if t.before is not None else sorted(standing.get(t.value, ()))
        traced = next((x for x in map(tracer.trace, origins) if x is not None), None)
        if traced is None:
            continue
        if traced.copied_from is not None:
            host = traced.copied_from
        else:
            host = traced.steps[-1].output if traced.steps else traced.source
        source = (a.values or ())[traced.source]
        assert isinstance(source, m.Tensor) and t.after is not None  # traced from a constant; a candidate is planned
        found.append(FoldedChange(t.value, t.before is None, traced.source, value_name(source.fqn, traced.source),
                                  tuple(step.describe() for step in traced.steps), t.after.device, t.after.nbytes,
                                  t.after.nbytes * copies.get(host, 0)))
    return found


def _fold_data(a: m.ExecutionPlan, fold: FoldedChange, change: TensorChange, digests: _Digests) -> DataComparison:
    """``folded`` (computed bytes: nothing in the original to compare with), or for a device copy of a shared
    constant whether it holds the constant's bytes."""
    if fold.kernels:
        return DataComparison.FOLDED
    source = placement(a, (a.values or ())[fold.source], digests)
    return data_status(source, change.after)


def _replaced_arguments(a: m.ExecutionPlan, b: m.ExecutionPlan) -> dict[int, set[int]]:
    """For each value ``b``'s delegate calls pass where ``a``'s passed another: those others (calls matched in
    order)."""
    calls_a = [i for chain in a.chains or () for i in chain.instructions or () if isinstance(i, m.DelegateCall)]
    calls_b = [i for chain in b.chains or () for i in chain.instructions or () if isinstance(i, m.DelegateCall)]
    found: dict[int, set[int]] = {}
    for x, y in zip(calls_a, calls_b):
        for before, after in zip(x.args or (), y.args or ()):
            if before != after:
                found.setdefault(after, set()).add(before)
    return found


def _named_data(source: PteFile, digests: _Digests) -> dict[str, tuple[int, str]]:
    """key -> (size, sha256); the first entry of a duplicated key, as the runtime looks it up."""
    found: dict[str, tuple[int, str]] = {}
    for entry in source.program.named_data or ():
        assert entry.key is not None  # validate refused an entry without one
        if entry.key not in found:
            span = source.segment_span(entry.segment_index)
            found[entry.key] = (span.size, digests.digest(span))
    return found


def _diff_named_data(a: PteFile, b: PteFile, digests: tuple[_Digests, _Digests]) -> list[NamedDataChange]:
    named_a, named_b = _named_data(a, digests[0]), _named_data(b, digests[1])
    changes = []
    for key in list(named_a) + [k for k in named_b if k not in named_a]:
        before, after = named_a.get(key), named_b.get(key)
        if before != after:
            if before is None:
                change = Change.ADDED
            else:
                change = Change.REMOVED if after is None else Change.CHANGED
            changes.append(NamedDataChange(key, change, before[0] if before else None, after[0] if after else None))
    return changes


def _segment_sizes(source: PteFile) -> dict[str, int]:
    roles = segment_roles(source.program)
    sizes: dict[str, int] = {}
    for index, segment in enumerate(source.program.segments or ()):
        role = roles.get(index, "unused")
        if role.startswith("delegate"):
            role = "delegates"
        elif role.startswith("named"):
            role = "named data"
        sizes[role] = sizes.get(role, 0) + segment.size
    return sizes


def diff_files(a: PteFile, b: PteFile, progress: Optional[Callable[[int, int, str], None]] = None) -> ProgramDiff:
    """Compare two opened programs (either may be any .pte).

    ``progress(done, total, what)`` is called as each method's comparison starts (the bytes of every constant
    are compared, which takes a while on a large model), and before the named data.
    """
    analysis_a, analysis_b = analyze_program(a.program), analyze_program(b.program)
    h2d_a = {method.label: method.h2d_bytes_per_call for method in analysis_a.methods}  # labels: names repeat
    h2d_b = {method.label: method.h2d_bytes_per_call for method in analysis_b.methods}
    plans_a = dict(zip(method_labels(a.program)[0], a.program.execution_plan or ()))
    plans_b = dict(zip(method_labels(b.program)[0], b.program.execution_plan or ()))
    names = list(plans_a) + [n for n in plans_b if n not in plans_a]
    digests = (_Digests(a), _Digests(b))
    found = []
    for done, n in enumerate(names):
        if progress is not None:
            progress(done, len(names) + 1, f"method {n}")
        found.append(_diff_method(n, plans_a.get(n), plans_b.get(n), (h2d_a.get(n, 0), h2d_b.get(n, 0)), digests))
    methods = tuple(found)
    if progress is not None:
        progress(len(names), len(names) + 1, "named data and segments")
    seg_a, seg_b = _segment_sizes(a), _segment_sizes(b)
    segments = tuple(SegmentChange(role, seg_a.get(role, 0), seg_b.get(role, 0))
                     for role in list(seg_a) + [r for r in seg_b if r not in seg_a]
                     if seg_a.get(role, 0) != seg_b.get(role, 0))
    flows = program_flows(a.program, analysis_a, diff_residents(b.program, analysis_b))
    return ProgramDiff(a.path, b.path, a.size, b.size, a.flatbuffer_size, b.flatbuffer_size, methods, segments,
                       tuple(_diff_named_data(a, b, digests)), sum(h2d_a.values()), sum(h2d_b.values()),
                       device_bytes_before=planned_device_bytes(a.program),
                       device_bytes_after=planned_device_bytes(b.program),
                       constants_moved=sum(1 for n in names if n in plans_a and n in plans_b
                                           for v in moved_by_encodings(plans_a[n], plans_b[n], devices_only=False)
                                           if not v.folded and not v.reencoded),
                       flows=flows, runtime_before=required_runtime(a.program),
                       runtime_after=required_runtime(b.program))
