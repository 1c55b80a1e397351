"""The reference encoder: ``model.Program`` -> flatbuffer bytes with the flatc-generated builder functions.

The project's encoder (``schema/encode.py``) writes with its own builder, which
is several times faster and does not import numpy; ``tests/test_encode.py``
holds it to byte-for-byte equality with this one, which goes through the code
flatc generated from the project's .fbs and the ``flatbuffers`` package.

Follows the ExecuTorch 1.5.1 writer's conventions (``pte-format.md`` §2): scalars
equal to their default are omitted (the generated ``Add*`` functions do that),
tables, vectors and strings are written exactly when they are not ``None``
(so "absent" and "empty" survive a round trip), and the two ``force_align: 16``
byte vectors are aligned to 16, which flatc's Python generator ignores.
Scalar vectors are packed in one ``struct.pack_into`` call, not per element.
"""

from __future__ import annotations

import importlib
import struct
from typing import Callable, Optional, Sequence, TypeVar

import flatbuffers

from pte_devconst.schema import model as m
from pte_devconst.schema.ptd_model import FlatTensor as FlatTensorModel


class _Generated:
    """A flatc-generated module, imported on first use (there are about 40; most tests never encode).

    After the first access the module's functions live in this object's ``__dict__``.
    """

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attribute: str) -> object:
        module = importlib.import_module(f"pte_devconst.schema.generated.{self._name}")
        self.__dict__.update(vars(module))
        return getattr(module, attribute)


(AllocationDetails, BackendDelegate, BackendDelegateDataReference, BackendDelegateInlineData, Bool,
 BoolList, Buffer, Chain, CompileSpec, ContainerMetadata, DataSegment, DelegateCall, Double, DoubleList,
 EValue, ExecutionPlan, ExtraTensorInfo, Frame, FrameList, FreeCall, Instruction, Int, IntList,
 JumpFalseCall, KernelCall, MoveCall, NamedData, NonConstBufferDevice, Null, Operator,
 OptionalTensorList, Program, String, SubsegmentOffsets, Tensor, TensorList) = (
    _Generated(f"executorch_flatbuffer.{name}") for name in (
        "AllocationDetails", "BackendDelegate", "BackendDelegateDataReference", "BackendDelegateInlineData", "Bool",
        "BoolList", "Buffer", "Chain", "CompileSpec", "ContainerMetadata", "DataSegment", "DelegateCall", "Double",
        "DoubleList", "EValue", "ExecutionPlan", "ExtraTensorInfo", "Frame", "FrameList", "FreeCall", "Instruction",
        "Int", "IntList", "JumpFalseCall", "KernelCall", "MoveCall", "NamedData", "NonConstBufferDevice", "Null",
        "Operator", "OptionalTensorList", "Program", "String", "SubsegmentOffsets", "Tensor", "TensorList"))
PtdDataSegment, FlatTensor, TensorLayout, PtdNamedData = (
    _Generated(f"flat_tensor_flatbuffer.{name}") for name in ("DataSegment", "FlatTensor", "TensorLayout", "NamedData"))

T = TypeVar("T")
FORCE_ALIGN = 16

_KERNEL_TAGS = {m.Null: 1, m.Int: 2, m.Bool: 3, m.Double: 4, m.Tensor: 5, m.String: 6, m.IntList: 7,
                m.DoubleList: 8, m.BoolList: 9, m.TensorList: 10, m.OptionalTensorList: 11}
_INSTRUCTION_TAGS = {m.KernelCall: 1, m.DelegateCall: 2, m.MoveCall: 3, m.JumpFalseCall: 4, m.FreeCall: 5}


class _Encoder:
    def __init__(self, size_hint: int = 1024) -> None:
        self.b = flatbuffers.Builder(size_hint)

    # --- primitives --------------------------------------------------------

    def scalars(self, fmt: str, items: Optional[Sequence], alignment: int = 0) -> Optional[int]:
        if items is None:
            return None
        b = self.b
        width = struct.calcsize(fmt)
        count = len(items)
        b.StartVector(width, count, max(alignment, width))
        b.head = b.head - count * width
        if count:
            struct.pack_into(f"<{count}{fmt}", b.Bytes, b.head, *items)
        return b.EndVector()

    def bytes_(self, data: Optional[bytes], alignment: int = 1) -> Optional[int]:
        if data is None:
            return None
        if alignment > 1:  # force_align vectors: CreateByteVector aligns only to 4
            return self.scalars("B", data, alignment)
        return self.b.CreateByteVector(bytes(data))

    def string(self, text: Optional[str]) -> Optional[int]:
        return None if text is None else self.b.CreateString(text)

    def tables(self, items: Optional[Sequence[T]], encode: Callable[[T], int]) -> Optional[int]:
        if items is None:
            return None
        offsets = [encode(item) for item in items]
        b = self.b
        b.StartVector(4, len(offsets), 4)
        for offset in reversed(offsets):
            b.PrependUOffsetTRelative(offset)
        return b.EndVector()

    # --- program tables ----------------------------------------------------

    def allocation(self, a: m.AllocationDetails) -> int:
        b = self.b
        AllocationDetails.Start(b)
        AllocationDetails.AddMemoryId(b, a.memory_id)
        AllocationDetails.AddMemoryOffsetLow(b, a.memory_offset & 0xFFFFFFFF)
        AllocationDetails.AddMemoryOffsetHigh(b, a.memory_offset >> 32)
        return AllocationDetails.End(b)

    def extra(self, e: m.ExtraTensorInfo) -> int:
        b = self.b
        fqn = self.string(e.fully_qualified_name)
        ExtraTensorInfo.Start(b)
        ExtraTensorInfo.AddMutableDataSegmentsIdx(b, e.mutable_data_segments_idx)
        if fqn is not None:
            ExtraTensorInfo.AddFullyQualifiedName(b, fqn)
        ExtraTensorInfo.AddLocation(b, e.location)
        ExtraTensorInfo.AddDeviceType(b, e.device_type)
        ExtraTensorInfo.AddDeviceIndex(b, e.device_index)
        return ExtraTensorInfo.End(b)

    def tensor(self, t: m.Tensor) -> int:
        b = self.b
        sizes = self.scalars("i", t.sizes)
        dim_order = self.scalars("B", t.dim_order)
        alloc = None if t.allocation_info is None else self.allocation(t.allocation_info)
        extra = None if t.extra_tensor_info is None else self.extra(t.extra_tensor_info)
        Tensor.Start(b)
        Tensor.AddScalarType(b, t.scalar_type)
        Tensor.AddStorageOffset(b, t.storage_offset)
        if sizes is not None:
            Tensor.AddSizes(b, sizes)
        if dim_order is not None:
            Tensor.AddDimOrder(b, dim_order)
        Tensor.AddRequiresGrad(b, t.requires_grad)
        Tensor.AddDataBufferIdx(b, t.data_buffer_idx)
        if alloc is not None:
            Tensor.AddAllocationInfo(b, alloc)
        Tensor.AddLayout(b, t.layout)
        Tensor.AddShapeDynamism(b, t.shape_dynamism)
        if extra is not None:
            Tensor.AddExtraTensorInfo(b, extra)
        return Tensor.End(b)

    def _items_table(self, module: object, fmt: str, items: Optional[Sequence]) -> int:
        vec = self.scalars(fmt, items)
        module.Start(self.b)  # type: ignore[attr-defined]
        if vec is not None:
            module.AddItems(self.b, vec)  # type: ignore[attr-defined]
        return module.End(self.b)  # type: ignore[attr-defined]

    def kernel_value(self, v: m.EValue) -> int:
        b = self.b
        if isinstance(v, m.Tensor):
            return self.tensor(v)
        if isinstance(v, m.Int):
            Int.Start(b), Int.AddIntVal(b, v.int_val)
            return Int.End(b)
        if isinstance(v, m.Bool):
            Bool.Start(b), Bool.AddBoolVal(b, v.bool_val)
            return Bool.End(b)
        if isinstance(v, m.Double):
            Double.Start(b), Double.AddDoubleVal(b, v.double_val)
            return Double.End(b)
        if isinstance(v, m.String):
            s = self.string(v.string_val)
            String.Start(b)
            if s is not None:
                String.AddStringVal(b, s)
            return String.End(b)
        if isinstance(v, m.Null):
            Null.Start(b)
            return Null.End(b)
        table, fmt = {m.IntList: (IntList, "q"), m.DoubleList: (DoubleList, "d"), m.BoolList: (BoolList, "?"),
                      m.TensorList: (TensorList, "i"), m.OptionalTensorList: (OptionalTensorList, "i")}[type(v)]
        return self._items_table(table, fmt, v.items)

    def evalue(self, v: m.EValue) -> int:
        b = self.b
        member = None if v is None else self.kernel_value(v)
        EValue.Start(b)
        if member is not None:
            EValue.AddValType(b, _KERNEL_TAGS[type(v)])
            EValue.AddVal(b, member)
        return EValue.End(b)

    def instruction_args(self, ins: m.Instruction) -> int:
        b = self.b
        if isinstance(ins, (m.KernelCall, m.DelegateCall)):
            args = self.scalars("i", ins.args)
            if isinstance(ins, m.KernelCall):
                KernelCall.Start(b), KernelCall.AddOpIndex(b, ins.op_index)
                if args is not None:
                    KernelCall.AddArgs(b, args)
                return KernelCall.End(b)
            DelegateCall.Start(b), DelegateCall.AddDelegateIndex(b, ins.delegate_index)
            if args is not None:
                DelegateCall.AddArgs(b, args)
            return DelegateCall.End(b)
        if isinstance(ins, m.MoveCall):
            MoveCall.Start(b), MoveCall.AddMoveFrom(b, ins.move_from), MoveCall.AddMoveTo(b, ins.move_to)
            return MoveCall.End(b)
        if isinstance(ins, m.JumpFalseCall):
            JumpFalseCall.Start(b)
            JumpFalseCall.AddCondValueIndex(b, ins.cond_value_index)
            JumpFalseCall.AddDestinationInstruction(b, ins.destination_instruction)
            return JumpFalseCall.End(b)
        FreeCall.Start(b), FreeCall.AddValueIndex(b, ins.value_index)
        return FreeCall.End(b)

    def instruction(self, ins: m.Instruction) -> int:
        b = self.b
        member = None if ins is None else self.instruction_args(ins)
        Instruction.Start(b)
        if member is not None:
            Instruction.AddInstrArgsType(b, _INSTRUCTION_TAGS[type(ins)])
            Instruction.AddInstrArgs(b, member)
        return Instruction.End(b)

    def frame(self, f: m.Frame) -> int:
        b = self.b
        filename, name, context = self.string(f.filename), self.string(f.name), self.string(f.context)
        Frame.Start(b)
        if filename is not None:
            Frame.AddFilename(b, filename)
        Frame.AddLineno(b, f.lineno)
        if name is not None:
            Frame.AddName(b, name)
        if context is not None:
            Frame.AddContext(b, context)
        return Frame.End(b)

    def frame_list(self, fl: Optional[m.FrameList]) -> int:
        items = self.tables(None if fl is None else fl.items, self.frame)
        FrameList.Start(self.b)
        if items is not None:
            FrameList.AddItems(self.b, items)
        return FrameList.End(self.b)

    def chain(self, c: m.Chain) -> int:
        b = self.b
        inputs, outputs = self.scalars("i", c.inputs), self.scalars("i", c.outputs)
        instructions = self.tables(c.instructions, self.instruction)
        stacktrace = self.tables(c.stacktrace, self.frame_list)
        Chain.Start(b)
        if inputs is not None:
            Chain.AddInputs(b, inputs)
        if outputs is not None:
            Chain.AddOutputs(b, outputs)
        if instructions is not None:
            Chain.AddInstructions(b, instructions)
        if stacktrace is not None:
            Chain.AddStacktrace(b, stacktrace)
        return Chain.End(b)

    def operator(self, o: m.Operator) -> int:
        b = self.b
        name, overload = self.string(o.name), self.string(o.overload)
        Operator.Start(b)
        if name is not None:
            Operator.AddName(b, name)
        if overload is not None:
            Operator.AddOverload(b, overload)
        return Operator.End(b)

    def compile_spec(self, c: m.CompileSpec) -> int:
        b = self.b
        key, value = self.string(c.key), self.bytes_(c.value)
        CompileSpec.Start(b)
        if key is not None:
            CompileSpec.AddKey(b, key)
        if value is not None:
            CompileSpec.AddValue(b, value)
        return CompileSpec.End(b)

    def delegate(self, d: m.BackendDelegate) -> int:
        b = self.b
        ident = self.string(d.id)
        processed = None
        if d.processed is not None:
            BackendDelegateDataReference.Start(b)
            BackendDelegateDataReference.AddLocation(b, d.processed.location)
            BackendDelegateDataReference.AddIndex(b, d.processed.index)
            processed = BackendDelegateDataReference.End(b)
        specs = self.tables(d.compile_specs, self.compile_spec)
        BackendDelegate.Start(b)
        if ident is not None:
            BackendDelegate.AddId(b, ident)
        if processed is not None:
            BackendDelegate.AddProcessed(b, processed)
        if specs is not None:
            BackendDelegate.AddCompileSpecs(b, specs)
        return BackendDelegate.End(b)

    def buffer_device(self, d: m.NonConstBufferDevice) -> int:
        b = self.b
        NonConstBufferDevice.Start(b)
        NonConstBufferDevice.AddBufferIdx(b, d.buffer_idx)
        NonConstBufferDevice.AddDeviceType(b, d.device_type)
        NonConstBufferDevice.AddDeviceIndex(b, d.device_index)
        return NonConstBufferDevice.End(b)

    def plan(self, p: m.ExecutionPlan) -> int:
        b = self.b
        name = self.string(p.name)
        meta = None
        if p.container_meta_type is not None:
            inp = self.string(p.container_meta_type.encoded_inp_str)
            out = self.string(p.container_meta_type.encoded_out_str)
            ContainerMetadata.Start(b)
            if inp is not None:
                ContainerMetadata.AddEncodedInpStr(b, inp)
            if out is not None:
                ContainerMetadata.AddEncodedOutStr(b, out)
            meta = ContainerMetadata.End(b)
        values = self.tables(p.values, self.evalue)
        inputs, outputs = self.scalars("i", p.inputs), self.scalars("i", p.outputs)
        chains = self.tables(p.chains, self.chain)
        operators = self.tables(p.operators, self.operator)
        delegates = self.tables(p.delegates, self.delegate)
        sizes = self.scalars("q", p.non_const_buffer_sizes)
        devices = self.tables(p.non_const_buffer_device, self.buffer_device)
        ExecutionPlan.Start(b)
        for add, value in ((ExecutionPlan.AddName, name), (ExecutionPlan.AddContainerMetaType, meta),
                           (ExecutionPlan.AddValues, values), (ExecutionPlan.AddInputs, inputs),
                           (ExecutionPlan.AddOutputs, outputs), (ExecutionPlan.AddChains, chains),
                           (ExecutionPlan.AddOperators, operators), (ExecutionPlan.AddDelegates, delegates),
                           (ExecutionPlan.AddNonConstBufferSizes, sizes),
                           (ExecutionPlan.AddNonConstBufferDevice, devices)):
            if value is not None:
                add(b, value)
        return ExecutionPlan.End(b)

    def data_segment(self, s: m.DataSegment) -> int:
        DataSegment.Start(self.b)
        DataSegment.AddOffset(self.b, s.offset)
        DataSegment.AddSize(self.b, s.size)
        return DataSegment.End(self.b)

    def subsegment(self, s: m.SubsegmentOffsets) -> int:
        offsets = self.scalars("Q", s.offsets)
        SubsegmentOffsets.Start(self.b)
        SubsegmentOffsets.AddSegmentIndex(self.b, s.segment_index)
        if offsets is not None:
            SubsegmentOffsets.AddOffsets(self.b, offsets)
        return SubsegmentOffsets.End(self.b)

    def named(self, n: m.NamedData) -> int:
        key = self.string(n.key)
        NamedData.Start(self.b)
        if key is not None:
            NamedData.AddKey(self.b, key)
        NamedData.AddSegmentIndex(self.b, n.segment_index)
        return NamedData.End(self.b)

    def buffer(self, buf: m.Buffer) -> int:
        storage = self.bytes_(buf.storage, FORCE_ALIGN)
        Buffer.Start(self.b)
        if storage is not None:
            Buffer.AddStorage(self.b, storage)
        return Buffer.End(self.b)

    def inline_data(self, d: m.BackendDelegateInlineData) -> int:
        data = self.bytes_(d.data, FORCE_ALIGN)
        BackendDelegateInlineData.Start(self.b)
        if data is not None:
            BackendDelegateInlineData.AddData(self.b, data)
        return BackendDelegateInlineData.End(self.b)

    def program(self, p: m.Program) -> int:
        b = self.b
        plans = self.tables(p.execution_plan, self.plan)
        constant_buffer = self.tables(p.constant_buffer, self.buffer)
        inline = self.tables(p.backend_delegate_data, self.inline_data)
        segments = self.tables(p.segments, self.data_segment)
        constant_segment = None if p.constant_segment is None else self.subsegment(p.constant_segment)
        mutable = self.tables(p.mutable_data_segments, self.subsegment)
        named = self.tables(p.named_data, self.named)
        Program.Start(b)
        Program.AddVersion(b, p.version)
        for add, value in ((Program.AddExecutionPlan, plans), (Program.AddConstantBuffer, constant_buffer),
                           (Program.AddBackendDelegateData, inline), (Program.AddSegments, segments),
                           (Program.AddConstantSegment, constant_segment),
                           (Program.AddMutableDataSegments, mutable), (Program.AddNamedData, named)):
            if value is not None:
                add(b, value)
        return Program.End(b)


def encode_program(program: m.Program) -> bytes:
    """The Program as a plain flatbuffer with identifier ``ET12`` (no extended header)."""
    encoder = _Encoder()
    root = encoder.program(program)
    encoder.b.Finish(root, file_identifier=b"ET12")
    return bytes(encoder.b.Output())


def encode_flat_tensor(ft: FlatTensorModel) -> bytes:
    """A .ptd FlatTensor as a plain flatbuffer with identifier ``FT01``."""
    enc = _Encoder()
    b = enc.b

    def segment(s: m.DataSegment) -> int:
        PtdDataSegment.Start(b), PtdDataSegment.AddOffset(b, s.offset), PtdDataSegment.AddSize(b, s.size)
        return PtdDataSegment.End(b)

    def named(n: "PtdNamedData") -> int:  # type: ignore[name-defined]
        key = enc.string(n.key)
        layout = None
        if n.tensor_layout is not None:
            sizes, order = enc.scalars("i", n.tensor_layout.sizes), enc.scalars("B", n.tensor_layout.dim_order)
            TensorLayout.Start(b)
            TensorLayout.AddScalarType(b, n.tensor_layout.scalar_type)
            if sizes is not None:
                TensorLayout.AddSizes(b, sizes)
            if order is not None:
                TensorLayout.AddDimOrder(b, order)
            layout = TensorLayout.End(b)
        PtdNamedData.Start(b)
        if key is not None:
            PtdNamedData.AddKey(b, key)
        PtdNamedData.AddSegmentIndex(b, n.segment_index)
        if layout is not None:
            PtdNamedData.AddTensorLayout(b, layout)
        return PtdNamedData.End(b)

    segments = enc.tables(ft.segments, segment)
    named_data = enc.tables(ft.named_data, named)
    FlatTensor.Start(b)
    FlatTensor.AddVersion(b, ft.version)
    if segments is not None:
        FlatTensor.AddSegments(b, segments)
    if named_data is not None:
        FlatTensor.AddNamedData(b, named_data)
    b.Finish(FlatTensor.End(b), file_identifier=b"FT01")
    return bytes(b.Output())
