"""Program flatbuffer bytes -> ``model.Program``, every offset checked (see ``flatbuf.py``).

The slot numbers below are the field positions in ``fbs/program.fbs``; a union
field takes two slots (its type tag, then its value).  ``tests/test_schema.py``
cross-checks this decoder against the flatc-generated accessors on every corpus
file, so a slot typo here cannot go unnoticed.
"""

from __future__ import annotations

from typing import Callable

from . import model as m
from .flatbuf import BOOL, F64, I8, I32, I64, U8, U32, U64, FlatbufferError, FlatReader, Table
from .gc_pause import gc_paused

PROGRAM_IDENTIFIER = b"ET12"


def _allocation(t: Table) -> m.AllocationDetails:
    low = t.scalar(1, U32, 0)
    high = t.scalar(2, U32, 0)
    return m.AllocationDetails(t.scalar(0, U32, 0), low | (high << 32))


def _extra(t: Table) -> m.ExtraTensorInfo:
    return m.ExtraTensorInfo(
        t.scalar(0, U64, 0), t.string(1), t.scalar(2, I8, 0), t.scalar(3, I8, 0), t.scalar(4, I8, 0)
    )


def _tensor(t: Table) -> m.Tensor:
    return m.Tensor(
        scalar_type=t.scalar(0, I8, 0),
        storage_offset=t.scalar(1, I32, 0),
        sizes=t.vector(2, "i"),
        dim_order=t.vector(3, "B"),
        requires_grad=t.scalar(4, BOOL, False),
        data_buffer_idx=t.scalar(5, U32, 0),
        allocation_info=t.child(6, _allocation, "allocation_info"),
        layout=t.scalar(7, I8, 0),
        shape_dynamism=t.scalar(8, I8, 0),
        extra_tensor_info=t.child(9, _extra, "extra_tensor_info"),
    )


KERNEL_TYPES: dict[int, Callable[[Table], m.EValue]] = {
    1: lambda t: m.Null(),
    2: lambda t: m.Int(t.scalar(0, I64, 0)),
    3: lambda t: m.Bool(t.scalar(0, BOOL, False)),
    4: lambda t: m.Double(t.scalar(0, F64, 0.0)),
    5: _tensor,
    6: lambda t: m.String(t.string(0)),
    7: lambda t: m.IntList(t.vector(0, "q")),
    8: lambda t: m.DoubleList(t.vector(0, "d")),
    9: lambda t: m.BoolList(t.vector(0, "?")),
    10: lambda t: m.TensorList(t.vector(0, "i")),
    11: lambda t: m.OptionalTensorList(t.vector(0, "i")),
}

INSTRUCTION_TYPES: dict[int, Callable[[Table], m.Instruction]] = {
    1: lambda t: m.KernelCall(t.scalar(0, I32, 0), t.vector(1, "i")),
    2: lambda t: m.DelegateCall(t.scalar(0, I32, 0), t.vector(1, "i")),
    3: lambda t: m.MoveCall(t.scalar(0, I32, 0), t.scalar(1, I32, 0)),
    4: lambda t: m.JumpFalseCall(t.scalar(0, I32, 0), t.scalar(1, I32, 0)),
    5: lambda t: m.FreeCall(t.scalar(0, I32, 0)),
}


def _evalue(t: Table) -> m.EValue:
    return t.union(0, KERNEL_TYPES, "val")[1]


def _instruction(t: Table) -> m.Instruction:
    return t.union(0, INSTRUCTION_TYPES, "instr_args")[1]


def _frame(t: Table) -> m.Frame:
    return m.Frame(t.string(0), t.scalar(1, I32, 0), t.string(2), t.string(3))


def _frame_list(t: Table) -> m.FrameList:
    return m.FrameList(t.tables(0, _frame, "items"))


def _chain(t: Table) -> m.Chain:
    return m.Chain(
        inputs=t.vector(0, "i"),
        outputs=t.vector(1, "i"),
        instructions=t.tables(2, _instruction, "instructions"),
        stacktrace=t.tables(3, _frame_list, "stacktrace"),
    )


def _operator(t: Table) -> m.Operator:
    return m.Operator(t.string(0), t.string(1))


def _data_reference(t: Table) -> m.BackendDelegateDataReference:
    return m.BackendDelegateDataReference(t.scalar(0, I8, 0), t.scalar(1, U32, 0))


def _compile_spec(t: Table) -> m.CompileSpec:
    return m.CompileSpec(t.string(0), t.byte_vector(1))


def _delegate(t: Table) -> m.BackendDelegate:
    return m.BackendDelegate(
        t.string(0), t.child(1, _data_reference, "processed"), t.tables(2, _compile_spec, "compile_specs")
    )


def _buffer_device(t: Table) -> m.NonConstBufferDevice:
    return m.NonConstBufferDevice(t.scalar(0, I32, 0), t.scalar(1, I8, 0), t.scalar(2, I8, 0))


def _container_meta(t: Table) -> m.ContainerMetadata:
    return m.ContainerMetadata(t.string(0), t.string(1))


def _plan(t: Table) -> m.ExecutionPlan:
    return m.ExecutionPlan(
        name=t.string(0),
        container_meta_type=t.child(1, _container_meta, "container_meta_type"),
        values=t.tables(2, _evalue, "values"),
        inputs=t.vector(3, "i"),
        outputs=t.vector(4, "i"),
        chains=t.tables(5, _chain, "chains"),
        operators=t.tables(6, _operator, "operators"),
        delegates=t.tables(7, _delegate, "delegates"),
        non_const_buffer_sizes=t.vector(8, "q"),
        non_const_buffer_device=t.tables(9, _buffer_device, "non_const_buffer_device"),
    )


def _data_segment(t: Table) -> m.DataSegment:
    return m.DataSegment(t.scalar(0, U64, 0), t.scalar(1, U64, 0))


def _subsegment(t: Table) -> m.SubsegmentOffsets:
    return m.SubsegmentOffsets(t.scalar(0, U32, 0), t.vector(1, "Q"))


def _named_data(t: Table) -> m.NamedData:
    return m.NamedData(t.string(0), t.scalar(1, U32, 0))


def _program(t: Table) -> m.Program:
    return m.Program(
        version=t.scalar(0, U32, 0),
        execution_plan=t.tables(1, _plan, "execution_plan"),
        constant_buffer=t.tables(2, lambda b: m.Buffer(b.byte_vector(0)), "constant_buffer"),
        backend_delegate_data=t.tables(3, lambda b: m.BackendDelegateInlineData(b.byte_vector(0)), "backend_delegate_data"),
        segments=t.tables(4, _data_segment, "segments"),
        constant_segment=t.child(5, _subsegment, "constant_segment"),
        mutable_data_segments=t.tables(6, _subsegment, "mutable_data_segments"),
        named_data=t.tables(7, _named_data, "named_data"),
    )


def decode_program(flatbuffer: bytes | memoryview) -> m.Program:
    """Decode a Program flatbuffer (the extended header, if inserted, is skipped by offsets).

    Raises ``FlatbufferError`` with a path for any structural problem.
    """
    return decode_program_counted(flatbuffer)[0]


@gc_paused
def decode_program_counted(flatbuffer: bytes | memoryview) -> tuple[m.Program, int]:
    """``decode_program``, plus the number of tables the flatbuffers verifier would count in it.

    The decoder visits every table of the schema, as the verifier does, so the two counts agree
    (``tests/test_verifier_limits.py`` holds them to ``schema.limits.count_tables`` and to the runtime's own
    verifier).
    """
    reader = FlatReader(flatbuffer)
    root = reader.root()
    if reader.identifier() != PROGRAM_IDENTIFIER:
        raise FlatbufferError(f"file identifier is {reader.identifier()!r}, not {PROGRAM_IDENTIFIER!r}")
    program = _program(root)
    return program, reader.tables


# flat_tensor (.ptd) ---------------------------------------------------------

PTD_IDENTIFIER = b"FT01"


def _tensor_layout(t: Table) -> "TensorLayout":
    return TensorLayout(t.scalar(0, I8, 0), t.vector(1, "i"), t.vector(2, "B"))


def _ptd_named(t: Table) -> "PtdNamedData":
    return PtdNamedData(t.string(0), t.scalar(1, U32, 0), t.child(2, _tensor_layout, "tensor_layout"))


@gc_paused
def decode_flat_tensor(flatbuffer: bytes | memoryview) -> "FlatTensor":
    reader = FlatReader(flatbuffer)
    root = reader.root()
    if reader.identifier() != PTD_IDENTIFIER:
        raise FlatbufferError(f"file identifier is {reader.identifier()!r}, not {PTD_IDENTIFIER!r}")
    return FlatTensor(
        version=root.scalar(0, U32, 0),
        segments=root.tables(1, _data_segment, "segments"),
        named_data=root.tables(2, _ptd_named, "named_data"),
    )


from .ptd_model import FlatTensor, PtdNamedData, TensorLayout  # noqa: E402  (kept beside its decoder)

__all__ = ["decode_program", "decode_program_counted", "decode_flat_tensor", "FlatbufferError", "PROGRAM_IDENTIFIER", "PTD_IDENTIFIER",
           "U8"]
