"""Semantic checks of a decoded program: every index and byte range it holds points somewhere real.

``decode.py`` guarantees the flatbuffer is well-formed; this module checks what
the runtime's ``validate_program`` and method parser check on top of that
(value, operator, delegate, segment and buffer indices in range; tensor sizes
that fit their data and do not overflow; known scalar types), so that every
later layer can index without re-checking.  The first problem raises
``FormatError`` naming where it is.
"""

from __future__ import annotations

from typing import Optional, Sequence

from . import model as m
from pte_devconst.util.errors import FormatError
from pte_devconst.util.gc_pause import gc_paused

MAX_TENSOR_BYTES = 1 << 62
MAX_RANK = 16
KNOWN_DEVICE_TYPES = frozenset(int(d) for d in m.DeviceType)



def _fail(where: str, what: str) -> FormatError:
    return FormatError(what, where=where)


def _segment_size(program: m.Program, index: int, where: str) -> int:
    segments = program.segments or ()
    if not 0 <= index < len(segments):
        raise _fail(where, f"segment index {index} is out of range ({len(segments)} segments)")
    return segments[index].size


def check_segments(program: m.Program, available: int) -> None:
    """Every segment lies inside the ``available`` bytes after the segment base (none without an extended header).

    The loader reads a segment as ``[segment_base_offset + offset, + size)`` and refuses a range past the
    file end (``Program::LoadSegment``, runtime/executor/program.cpp); ``segment_data_size`` is not a bound
    there (a header from before ExecuTorch 1.0 leaves it 0).  Without a header ``segment_base_offset`` is 0
    and the runtime refuses to load any segment.
    """
    for i, seg in enumerate(program.segments or ()):
        if seg.size and seg.offset + seg.size > available:
            raise _fail(f"segments[{i}]", f"[{seg.offset}, {seg.offset + seg.size}) lies past the end of the "
                        f"segment data ({max(available, 0)} bytes); the file is truncated or corrupt")


def check_shape(scalar_type: int, sizes: Optional[Sequence[int]], dim_order: Optional[Sequence[int]],
                where: str) -> int:
    """The byte size of a (scalar type, sizes, dim_order) shape, after checking it the way the runtime does."""
    if scalar_type not in m.KNOWN_SCALAR_TYPES:
        raise _fail(where, f"unknown scalar type {scalar_type}")
    if sizes is None or dim_order is None:
        raise _fail(where, "tensor lacks sizes or dim_order")
    if len(sizes) != len(dim_order):
        raise _fail(where, f"sizes has {len(sizes)} dims but dim_order {len(dim_order)}")
    if len(sizes) > MAX_RANK:
        raise _fail(where, f"rank {len(sizes)} exceeds the runtime limit of {MAX_RANK}")
    if sorted(dim_order) != list(range(len(dim_order))):
        raise _fail(where, f"dim_order {list(dim_order)} is not a permutation")
    nbytes = m.element_size(scalar_type)
    for size in sizes:
        if size < 0:
            raise _fail(where, f"negative size {size}")
        nbytes *= size
        if nbytes > MAX_TENSOR_BYTES:
            raise _fail(where, f"sizes {list(sizes)} overflow (more than 2^62 bytes)")
    return nbytes


def _tensor_nbytes(t: m.Tensor, where: str) -> int:
    nbytes = check_shape(t.scalar_type, t.sizes, t.dim_order, where)
    if t.storage_offset != 0:
        raise _fail(where, f"storage_offset {t.storage_offset} is not 0 (the runtime requires 0)")
    return nbytes


class _TensorCheckContext:
    """Per-program facts every tensor check needs.

    As in the runtime, a constant or initial-data entry is checked when a tensor uses it
    (``Program::get_constant_buffer_data``, ``load_mutable_subsegment_into``): an offset no tensor
    reads may point anywhere, and the initial-data list is looked at only if a tensor has initial
    data.  ``Program::load`` itself checks only the constant segment's index.
    """

    def __init__(self, program: m.Program) -> None:
        self.program = program
        cs = program.constant_segment
        self.constant_offsets = (cs.offsets or ()) if cs else ()
        self.constant_size = (_segment_size(program, cs.segment_index, "constant_segment")
                              if cs and len(self.constant_offsets) > 1 else 0)
        self.inline_constants = program.constant_buffer or ()

    def constant_extent(self, idx: int, where: str) -> int:
        """Bytes available to constant entry idx."""
        if len(self.constant_offsets) > 1 or not self.inline_constants:
            if idx >= len(self.constant_offsets):
                raise _fail(where, f"data_buffer_idx {idx} is out of range "
                                   f"({len(self.constant_offsets)} constant entries)")
            return _extent(self.constant_offsets[idx], self.constant_size, "constant", idx, where)
        if idx >= len(self.inline_constants):
            raise _fail(where, f"data_buffer_idx {idx} is out of range ({len(self.inline_constants)} inline constants)")
        return len(self.inline_constants[idx].storage or b"")

    def mutable_extent(self, idx: int, where: str) -> int:
        lists = self.program.mutable_data_segments or ()
        offsets = (lists[0].offsets or ()) if lists else ()
        if idx >= len(offsets):
            raise _fail(where, f"initial-data index {idx} is out of range ({len(offsets)} mutable entries)")
        size = _segment_size(self.program, lists[0].segment_index, "mutable_data_segments[0]")
        return _extent(offsets[idx], size, "initial-data", idx, where)


def _extent(offset: int, size: int, what: str, idx: int, where: str) -> int:
    if offset > size:
        raise _fail(where, f"{what} entry {idx} starts at {offset}, past the end of its segment ({size} bytes)")
    return size - offset


def _check_tensor(ctx: _TensorCheckContext, plan: m.ExecutionPlan, t: m.Tensor, where: str) -> None:
    nbytes = _tensor_nbytes(t, where)
    info = t.extra_tensor_info
    if info is not None:
        if info.location not in (0, 1):
            raise _fail(where, f"unknown data location {info.location}")
        _check_device(info.device_type, info.device_index, where)
    if t.is_external and info is not None and not info.fully_qualified_name:  # external implies info
        raise _fail(where, "external tensor has no fully_qualified_name")
    alloc = t.allocation_info
    if alloc is not None:
        sizes = plan.non_const_buffer_sizes or ()
        if not 1 <= alloc.memory_id < len(sizes):
            raise _fail(where, f"memory_id {alloc.memory_id} is out of range (buffers 1..{len(sizes) - 1})")
        if alloc.memory_offset + nbytes > sizes[alloc.memory_id]:
            raise _fail(where, f"[{alloc.memory_offset}, {alloc.memory_offset + nbytes}) overruns buffer "
                        f"{alloc.memory_id} ({sizes[alloc.memory_id]} bytes)")
        # The index is checked even for an empty tensor: the runtime looks the entry up either way.
        if t.data_buffer_idx > 0 and not t.is_external:
            if nbytes > ctx.mutable_extent(t.data_buffer_idx, where):
                raise _fail(where, f"initial data entry {t.data_buffer_idx} holds fewer than {nbytes} bytes")
    elif t.data_buffer_idx > 0 and not t.is_external:
        if nbytes > ctx.constant_extent(t.data_buffer_idx, where):
            raise _fail(where, f"constant entry {t.data_buffer_idx} holds fewer than {nbytes} bytes")


def _check_device(device_type: int, device_index: int, where: str) -> None:
    if device_type not in KNOWN_DEVICE_TYPES:
        raise _fail(where, f"unknown device type {device_type} (known: "
                    f"{', '.join(f'{d.value} {d.name}' for d in m.DeviceType)})")
    if device_index < 0:
        raise _fail(where, f"negative device index {device_index}")


# The items of every list value of a method, each list counted at every value that names it (the runtime builds
# each one): real programs hold thousands; a small file naming one 20,000-item list thousands of times asks for
# tens of millions, which every pass over the method would walk.  Refused past this, with the figure.
READ_MAX_LIST_ITEMS = 4_000_000


def list_items_problem(items: int) -> str | None:
    """Why a method's lists are too large to read, or None."""
    if items <= READ_MAX_LIST_ITEMS:
        return None
    return (f"its value lists hold {items:,} items in all (a list counted at every value that names it, as the "
            f"runtime builds each), over the {READ_MAX_LIST_ITEMS:,} this tool reads")


def _check_index(index: int, count: int, where: str, what: str, allow_none: bool = False) -> None:
    if not (0 <= index < count or (allow_none and index == -1)):
        raise _fail(where, f"{what} {index} is out of range (0..{count - 1})")


def _check_plan(ctx: _TensorCheckContext, plan: m.ExecutionPlan, where: str) -> None:
    values = plan.values or ()
    n = len(values)
    # The runtime's MethodMeta needs these; later layers may rely on them being present.
    for name in ("name", "inputs", "outputs", "non_const_buffer_sizes"):
        if getattr(plan, name) is None:
            raise _fail(where, f"{name} is missing")
    buffer_sizes = plan.non_const_buffer_sizes
    assert buffer_sizes is not None  # refused just above
    for i, size in enumerate(buffer_sizes):
        if size < 0:
            raise _fail(f"{where}.non_const_buffer_sizes[{i}]", f"negative buffer size {size}")
        if size > MAX_TENSOR_BYTES:  # also keeps a rewrite that grows the buffer inside int64
            raise _fail(f"{where}.non_const_buffer_sizes[{i}]", f"buffer size {size} exceeds 2^62 bytes")
    for i, entry in enumerate(plan.non_const_buffer_device or ()):
        ew = f"{where}.non_const_buffer_device[{i}]"
        _check_index(entry.buffer_idx, len(buffer_sizes), ew, "buffer_idx")
        _check_device(entry.device_type, entry.device_index, ew)
    items = sum(len(v.items or ()) for v in values if isinstance(v, (m.TensorList, m.OptionalTensorList, m.IntList)))
    problem = list_items_problem(items)
    if problem:
        raise _fail(f"{where}.values", problem)
    checked: set[int] = set()  # a table the file names many times is decoded once (shared): check it once
    for i, value in enumerate(values):
        vw = f"{where}.values[{i}]"
        if value is None:
            raise _fail(vw, "value has no type (union type NONE); the runtime rejects it")
        if id(value) in checked:
            continue
        checked.add(id(value))
        if isinstance(value, m.Tensor):
            _check_tensor(ctx, plan, value, vw)
        elif isinstance(value, (m.TensorList, m.OptionalTensorList, m.IntList)):
            optional = isinstance(value, m.OptionalTensorList)
            wanted = m.Int if isinstance(value, m.IntList) else m.Tensor
            for k, item in enumerate(value.items or ()):
                _check_index(item, n, f"{vw}.items[{k}]", "value index", allow_none=optional)
                target = values[item] if item >= 0 else None
                if item >= 0 and not isinstance(target, wanted) and not (optional and isinstance(target, m.Null)):
                    raise _fail(f"{vw}.items[{k}]", f"value {item} is a {type(target).__name__}, "
                                f"not the {wanted.__name__} a {type(value).__name__} holds")
    for name in ("inputs", "outputs"):
        for k, item in enumerate(getattr(plan, name) or ()):
            _check_index(item, n, f"{where}.{name}[{k}]", "value index")
    operators = plan.operators or ()
    ops = len(operators)
    for k, op in enumerate(operators):
        if op.name is None:
            raise _fail(f"{where}.operators[{k}]", "operator has no name")
    delegates = plan.delegates or ()
    for d, delegate in enumerate(delegates):
        dw = f"{where}.delegates[{d}]"
        if delegate.id is None:
            raise _fail(dw, "delegate has no backend id")
        for k, spec in enumerate(delegate.compile_specs or ()):
            if spec.key is None or spec.value is None:
                raise _fail(f"{dw}.compile_specs[{k}]", "compile spec lacks its key or value")
        ref = delegate.processed
        if ref is None:
            raise _fail(dw, "delegate has no processed data reference")
        if ref.location == m.DataLocation.INLINE:
            _check_index(ref.index, len(ctx.program.backend_delegate_data or ()), dw, "inline data index")
        elif ref.location == m.DataLocation.SEGMENT:
            _segment_size(ctx.program, ref.index, dw)
        else:
            raise _fail(dw, f"unknown data location {ref.location}")
    for c, chain in enumerate(plan.chains or ()):
        instructions = chain.instructions or ()
        for k, ins in enumerate(instructions):
            iw = f"{where}.chains[{c}].instructions[{k}]"
            if isinstance(ins, m.KernelCall):
                _check_index(ins.op_index, ops, iw, "op_index")
            elif isinstance(ins, m.DelegateCall):
                _check_index(ins.delegate_index, len(delegates), iw, "delegate_index")
            elif isinstance(ins, m.MoveCall):
                _check_index(ins.move_from, n, iw, "move_from")
                _check_index(ins.move_to, n, iw, "move_to")
            elif isinstance(ins, m.JumpFalseCall):
                _check_index(ins.cond_value_index, n, iw, "cond_value_index")
                if not isinstance(values[ins.cond_value_index], (m.Bool, m.Tensor)):
                    raise _fail(iw, f"condition value {ins.cond_value_index} is a "
                                f"{type(values[ins.cond_value_index]).__name__}, not a Bool or a Tensor")
                _check_index(ins.destination_instruction, len(instructions) + 1, iw, "destination_instruction")
            elif isinstance(ins, m.FreeCall):
                _check_index(ins.value_index, n, iw, "value_index")
            else:
                raise _fail(iw, "instruction has no arguments")
            for a in getattr(ins, "args", None) or ():
                _check_index(a, n, iw, "argument value index")


@gc_paused
def check_program(program: m.Program, segment_bytes: int) -> None:
    """Raise ``FormatError`` at the first index or range that points nowhere.

    ``segment_bytes``: how many bytes of the file follow the segment base (0 without an extended header).
    """
    if program.version > 0:
        raise _fail("version", f"schema version {program.version} is newer than ExecuTorch 1.5.1's (0)")
    check_segments(program, segment_bytes)
    if program.execution_plan is None:
        raise _fail("execution_plan", "the program has no execution plans")
    for i, nd in enumerate(program.named_data or ()):
        if nd.key is None:
            raise _fail(f"named_data[{i}]", "entry has no key")
        _segment_size(program, nd.segment_index, f"named_data[{i}]")
    ctx = _TensorCheckContext(program)
    for i, plan in enumerate(program.execution_plan):
        name = plan.name
        # The method name goes into every message below: control characters from the file are shown escaped.
        _check_plan(ctx, plan, (name if name.isprintable() else repr(name)) if name else f"execution_plan[{i}]")
