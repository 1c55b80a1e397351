"""``model.Program`` -> flatbuffer bytes (and ``FlatTensor`` for .ptd files).

Follows the ExecuTorch 1.5.1 writer's conventions (``pte-format.md`` §2): a
scalar equal to its default is left out, a table, vector or string is written
exactly when it is not ``None`` (so "absent" and "empty" survive a round trip),
and the two ``force_align: 16`` byte vectors are aligned to 16.

Each ``TableLayout`` below lists a table's fields in ``fbs/program.fbs`` order
(a union takes two slots: its type tag, then its value), the same slot numbers
``decode.py`` reads. Children are written before their parent, in the order the
flatc-generated builder path writes them, so the output is byte for byte what
that path produces (``tests/test_encode.py`` checks it against
``tests/reference_encoder.py``).
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence, TypeVar

from . import model as m
from .flatbuf import BOOL, F64, I8, I32, I64, U8, U32, U64
from .flatbuf_builder import REF, Builder, TableLayout
from .gc_pause import gc_paused
from .ptd_model import FlatTensor, PtdNamedData

T = TypeVar("T")
FORCE_ALIGN = 16

ALLOCATION = TableLayout((U32, 0), (U32, 0), (U32, 0))
EXTRA = TableLayout((U64, 0), REF, (I8, 0), (I8, 0), (I8, 0))
TENSOR = TableLayout((I8, 0), (I32, 0), REF, REF, (BOOL, False), (U32, 0), REF, (I8, 0), (I8, 0), REF)
INT = TableLayout((I64, 0))
BOOL_VALUE = TableLayout((BOOL, False))
DOUBLE = TableLayout((F64, 0.0))
ONE_REF = TableLayout(REF)  # String, the five list types, FrameList: one string or vector field
NULL = TableLayout()
UNION = TableLayout((U8, 0), REF)  # EValue and Instruction: type tag, then the member table
CALL = TableLayout((I32, 0), REF)  # KernelCall, DelegateCall: index, args
TWO_INTS = TableLayout((I32, 0), (I32, 0))  # MoveCall, JumpFalseCall
FREE = TableLayout((I32, 0))
FRAME = TableLayout(REF, (I32, 0), REF, REF)
TWO_REFS = TableLayout(REF, REF)  # Operator, CompileSpec, ContainerMetadata
DATA_REFERENCE = TableLayout((I8, 0), (U32, 0))
DELEGATE = TableLayout(REF, REF, REF)
CHAIN = TableLayout(REF, REF, REF, REF)
BUFFER_DEVICE = TableLayout((I32, 0), (I8, 0), (I8, 0))
PLAN = TableLayout(*(REF,) * 10)
DATA_SEGMENT = TableLayout((U64, 0), (U64, 0))
SUBSEGMENT = TableLayout((U32, 0), REF)
NAMED = TableLayout(REF, (U32, 0))
PROGRAM = TableLayout((U32, 0), *(REF,) * 7)
# flat_tensor.fbs
FT_NAMED = TableLayout(REF, (U32, 0), REF)
FT_LAYOUT = TableLayout((I8, 0), REF, REF)
FLAT_TENSOR = TableLayout((U32, 0), REF, REF)

KERNEL_TAGS = {m.Null: 1, m.Int: 2, m.Bool: 3, m.Double: 4, m.Tensor: 5, m.String: 6, m.IntList: 7,
               m.DoubleList: 8, m.BoolList: 9, m.TensorList: 10, m.OptionalTensorList: 11}
LIST_KINDS = {m.IntList: I64, m.DoubleList: F64, m.BoolList: BOOL, m.TensorList: I32, m.OptionalTensorList: I32}
INSTRUCTION_TAGS = {m.KernelCall: 1, m.DelegateCall: 2, m.MoveCall: 3, m.JumpFalseCall: 4, m.FreeCall: 5}


class _Encoder:
    """Writes model objects children-first; every method returns the written item's offset (or ``None``)."""

    def __init__(self, size_hint: int = 1024) -> None:
        self.b = Builder(size_hint)

    def scalars(self, kind, items: Optional[Sequence], alignment: int = 0) -> Optional[int]:  # noqa: ANN001
        return None if items is None else self.b.scalars(kind, items, alignment)

    def byte_vector(self, data: Optional[bytes], alignment: int = 4) -> Optional[int]:
        return None if data is None else self.b.bytes_vector(data, alignment)

    def string(self, text: Optional[str]) -> Optional[int]:
        return None if text is None else self.b.string(text)

    def tables(self, items: Optional[Sequence[T]], encode: Callable[[T], int]) -> Optional[int]:
        return None if items is None else self.b.offsets([encode(item) for item in items])

    # --- values -------------------------------------------------------------

    def tensor(self, t: m.Tensor) -> int:
        b = self.b
        sizes, dim_order = self.scalars(I32, t.sizes), self.scalars(U8, t.dim_order)
        alloc = t.allocation_info
        if alloc is not None:
            alloc = b.table(ALLOCATION, (alloc.memory_id, alloc.memory_offset & 0xFFFFFFFF, alloc.memory_offset >> 32))
        extra = t.extra_tensor_info
        if extra is not None:
            extra = b.table(EXTRA, (extra.mutable_data_segments_idx, self.string(extra.fully_qualified_name),
                                    extra.location, extra.device_type, extra.device_index))
        return b.table(TENSOR, (t.scalar_type, t.storage_offset, sizes, dim_order, t.requires_grad,
                                t.data_buffer_idx, alloc, t.layout, t.shape_dynamism, extra))

    def kernel_value(self, v: m.EValue) -> int:
        kind = type(v)
        if kind is m.Tensor:
            return self.tensor(v)
        b = self.b
        if kind is m.Int:
            return b.table(INT, (v.int_val,))
        if kind is m.Bool:
            return b.table(BOOL_VALUE, (v.bool_val,))
        if kind is m.Double:
            return b.table(DOUBLE, (v.double_val,))
        if kind is m.String:
            return b.table(ONE_REF, (self.string(v.string_val),))
        if kind is m.Null:
            return b.table(NULL, ())
        return b.table(ONE_REF, (self.scalars(LIST_KINDS[kind], v.items),))

    def evalue(self, v: Optional[m.EValue]) -> int:
        if v is None:
            return self.b.table(UNION, ())
        return self.b.table(UNION, (KERNEL_TAGS[type(v)], self.kernel_value(v)))

    # --- instructions -------------------------------------------------------

    def instruction_args(self, ins: m.Instruction) -> int:
        b = self.b
        kind = type(ins)
        if kind is m.KernelCall:
            return b.table(CALL, (ins.op_index, self.scalars(I32, ins.args)))
        if kind is m.DelegateCall:
            return b.table(CALL, (ins.delegate_index, self.scalars(I32, ins.args)))
        if kind is m.MoveCall:
            return b.table(TWO_INTS, (ins.move_from, ins.move_to))
        if kind is m.JumpFalseCall:
            return b.table(TWO_INTS, (ins.cond_value_index, ins.destination_instruction))
        return b.table(FREE, (ins.value_index,))

    def instruction(self, ins: Optional[m.Instruction]) -> int:
        if ins is None:
            return self.b.table(UNION, ())
        return self.b.table(UNION, (INSTRUCTION_TAGS[type(ins)], self.instruction_args(ins)))

    def frame(self, f: m.Frame) -> int:
        filename, name, context = self.string(f.filename), self.string(f.name), self.string(f.context)
        return self.b.table(FRAME, (filename, f.lineno, name, context))

    def frame_list(self, fl: Optional[m.FrameList]) -> int:
        return self.b.table(ONE_REF, (self.tables(None if fl is None else fl.items, self.frame),))

    def chain(self, c: m.Chain) -> int:
        inputs, outputs = self.scalars(I32, c.inputs), self.scalars(I32, c.outputs)
        instructions = self.tables(c.instructions, self.instruction)
        stacktrace = self.tables(c.stacktrace, self.frame_list)
        return self.b.table(CHAIN, (inputs, outputs, instructions, stacktrace))

    # --- plans and the program ----------------------------------------------

    def operator(self, o: m.Operator) -> int:
        return self.b.table(TWO_REFS, (self.string(o.name), self.string(o.overload)))

    def compile_spec(self, c: m.CompileSpec) -> int:
        key = self.string(c.key)
        return self.b.table(TWO_REFS, (key, self.byte_vector(c.value)))

    def delegate(self, d: m.BackendDelegate) -> int:
        ident = self.string(d.id)
        processed = None
        if d.processed is not None:
            processed = self.b.table(DATA_REFERENCE, (d.processed.location, d.processed.index))
        specs = self.tables(d.compile_specs, self.compile_spec)
        return self.b.table(DELEGATE, (ident, processed, specs))

    def buffer_device(self, d: m.NonConstBufferDevice) -> int:
        return self.b.table(BUFFER_DEVICE, (d.buffer_idx, d.device_type, d.device_index))

    def plan(self, p: m.ExecutionPlan) -> int:
        name = self.string(p.name)
        meta = p.container_meta_type
        if meta is not None:
            meta = self.b.table(TWO_REFS, (self.string(meta.encoded_inp_str), self.string(meta.encoded_out_str)))
        values = self.tables(p.values, self.evalue)
        inputs, outputs = self.scalars(I32, p.inputs), self.scalars(I32, p.outputs)
        chains = self.tables(p.chains, self.chain)
        operators = self.tables(p.operators, self.operator)
        delegates = self.tables(p.delegates, self.delegate)
        sizes = self.scalars(I64, p.non_const_buffer_sizes)
        devices = self.tables(p.non_const_buffer_device, self.buffer_device)
        return self.b.table(PLAN, (name, meta, values, inputs, outputs, chains, operators, delegates, sizes, devices))

    def data_segment(self, s: m.DataSegment) -> int:
        return self.b.table(DATA_SEGMENT, (s.offset, s.size))

    def subsegment(self, s: m.SubsegmentOffsets) -> int:
        return self.b.table(SUBSEGMENT, (s.segment_index, self.scalars(U64, s.offsets)))

    def named(self, n: m.NamedData) -> int:
        return self.b.table(NAMED, (self.string(n.key), n.segment_index))

    def force_aligned(self, data: Optional[bytes]) -> int:
        """``Buffer`` and ``BackendDelegateInlineData``: one ``[ubyte] (force_align: 16)`` field."""
        return self.b.table(ONE_REF, (self.byte_vector(data, FORCE_ALIGN),))

    def program(self, p: m.Program) -> int:
        plans = self.tables(p.execution_plan, self.plan)
        constant_buffer = self.tables(p.constant_buffer, lambda buf: self.force_aligned(buf.storage))
        inline = self.tables(p.backend_delegate_data, lambda d: self.force_aligned(d.data))
        segments = self.tables(p.segments, self.data_segment)
        constant_segment = None if p.constant_segment is None else self.subsegment(p.constant_segment)
        mutable = self.tables(p.mutable_data_segments, self.subsegment)
        named = self.tables(p.named_data, self.named)
        return self.b.table(PROGRAM, (p.version, plans, constant_buffer, inline, segments, constant_segment,
                                      mutable, named))

    # --- .ptd ---------------------------------------------------------------

    def ptd_named(self, n: PtdNamedData) -> int:
        key = self.string(n.key)
        layout = n.tensor_layout
        if layout is not None:
            sizes, order = self.scalars(I32, layout.sizes), self.scalars(U8, layout.dim_order)
            layout = self.b.table(FT_LAYOUT, (layout.scalar_type, sizes, order))
        return self.b.table(FT_NAMED, (key, n.segment_index, layout))


@gc_paused
def encode_program(program: m.Program) -> bytes:
    """The Program as a plain flatbuffer with identifier ``ET12`` (no extended header)."""
    encoder = _Encoder()
    return encoder.b.finish(encoder.program(program), b"ET12")


@gc_paused
def encode_flat_tensor(ft: FlatTensor) -> bytes:
    """A .ptd FlatTensor as a plain flatbuffer with identifier ``FT01``."""
    encoder = _Encoder()
    segments = encoder.tables(ft.segments, encoder.data_segment)
    named = encoder.tables(ft.named_data, encoder.ptd_named)
    return encoder.b.finish(encoder.b.table(FLAT_TENSOR, (ft.version, segments, named)), b"FT01")
