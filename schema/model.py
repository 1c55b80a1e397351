"""Immutable Python mirror of the ExecuTorch program schema (schema/fbs/program.fbs).

One frozen dataclass per flatbuffer table, with the same field names and
defaults.  A field is ``None`` exactly when the table, vector or string is
absent from the file; that distinction survives a round trip because the
ExecuTorch writer emits "absent" and "empty" differently.

Two conveniences depart from the wire format, each noted where it happens:
``EValue`` and ``Instruction`` (tables that only wrap a union) are flattened
to the union member itself, and ``AllocationDetails`` holds one 64-bit
``memory_offset`` instead of the low/high halves.

Nothing here reads or writes bytes: see ``decode.py`` and ``encode.py``.
"""

from __future__ import annotations

import math
from dataclasses import replace
from enum import IntEnum
from typing import Optional, Union

from .record import record

__all__ = [
    "ScalarType", "TensorShapeDynamism", "TensorDataLocation", "DeviceType", "DataLocation",
    "Device", "CPU", "element_size", "KNOWN_SCALAR_TYPES",
    "AllocationDetails", "ExtraTensorInfo", "Tensor", "Null", "Int", "Bool", "Double", "String",
    "IntList", "DoubleList", "BoolList", "TensorList", "OptionalTensorList", "EValue",
    "Operator", "KernelCall", "DelegateCall", "MoveCall", "JumpFalseCall", "FreeCall", "Instruction",
    "Frame", "FrameList", "BackendDelegateDataReference", "CompileSpec", "BackendDelegate", "Chain",
    "NonConstBufferDevice", "ContainerMetadata", "ExecutionPlan", "Buffer", "BackendDelegateInlineData",
    "DataSegment", "SubsegmentOffsets", "NamedData", "Program", "replace",
]


class ScalarType(IntEnum):
    BYTE = 0
    CHAR = 1
    SHORT = 2
    INT = 3
    LONG = 4
    HALF = 5
    FLOAT = 6
    DOUBLE = 7
    BOOL = 11
    QINT8 = 12
    QUINT8 = 13
    QINT32 = 14
    BFLOAT16 = 15
    QUINT4X2 = 16
    QUINT2X4 = 17
    BITS16 = 22
    FLOAT8E5M2 = 23
    FLOAT8E4M3FN = 24
    FLOAT8E5M2FNUZ = 25
    FLOAT8E4M3FNUZ = 26
    UINT16 = 27
    UINT32 = 28
    UINT64 = 29


_ELEMENT_SIZE = {
    **dict.fromkeys((0, 1, 11, 12, 13, 16, 17, 23, 24, 25, 26), 1),
    **dict.fromkeys((2, 5, 15, 22, 27), 2),
    **dict.fromkeys((3, 6, 14, 28), 4),
    **dict.fromkeys((4, 7, 29), 8),
}
KNOWN_SCALAR_TYPES = frozenset(_ELEMENT_SIZE)


def element_size(scalar_type: int) -> int:
    """Bytes per element; raises KeyError for a type the format does not define."""
    return _ELEMENT_SIZE[scalar_type]


class TensorShapeDynamism(IntEnum):
    STATIC = 0
    DYNAMIC_BOUND = 1
    DYNAMIC_UNBOUND = 2


class TensorDataLocation(IntEnum):
    SEGMENT = 0
    EXTERNAL = 1


class DeviceType(IntEnum):
    CPU = 0
    CUDA = 1


class DataLocation(IntEnum):
    INLINE = 0
    SEGMENT = 1


@record(order=True)
class Device:
    """A (type, index) pair, printed the way compile specs spell it: ``cuda:0``."""

    type: int = DeviceType.CPU
    index: int = 0

    @property
    def is_cpu(self) -> bool:
        return self.type == DeviceType.CPU

    def __str__(self) -> str:
        try:
            name = DeviceType(self.type).name.lower()
        except ValueError:
            name = f"device{self.type}"
        return name if self.is_cpu else f"{name}:{self.index}"

    @classmethod
    def parse(cls, text: str) -> "Device":
        """Parse ``cuda:1`` / ``CUDA`` / ``cpu``, case-insensitively (index defaults to 0)."""
        name, _, index = text.strip().partition(":")
        try:
            kind = DeviceType[name.upper()]
        except KeyError:
            raise ValueError(f"unknown device type {name!r} in {text!r}") from None
        if index and not index.isdigit():
            raise ValueError(f"bad device index in {text!r}")
        number = int(index) if index else 0
        if number > 127:
            raise ValueError(f"device index {number} does not fit the format (max 127)")
        return cls(kind, number)


CPU = Device()


@record
class AllocationDetails:
    memory_id: int = 0
    memory_offset: int = 0  # memory_offset_low | memory_offset_high << 32 on the wire


@record
class ExtraTensorInfo:
    mutable_data_segments_idx: int = 0
    fully_qualified_name: Optional[str] = None
    location: int = TensorDataLocation.SEGMENT
    device_type: int = DeviceType.CPU
    device_index: int = 0


@record
class Tensor:
    scalar_type: int = 0
    storage_offset: int = 0
    sizes: Optional[tuple[int, ...]] = ()
    dim_order: Optional[tuple[int, ...]] = ()
    requires_grad: bool = False
    data_buffer_idx: int = 0
    allocation_info: Optional[AllocationDetails] = None
    layout: int = 0
    shape_dynamism: int = TensorShapeDynamism.STATIC
    extra_tensor_info: Optional[ExtraTensorInfo] = None

    @property
    def numel(self) -> int:
        return math.prod(self.sizes or ())

    @property
    def nbytes(self) -> int:
        """Bytes of the tensor's data (upper bound for DYNAMIC_BOUND shapes)."""
        return self.numel * element_size(self.scalar_type)

    @property
    def device(self) -> Device:
        info = self.extra_tensor_info
        return CPU if info is None else Device(info.device_type, info.device_index)

    @property
    def is_external(self) -> bool:
        info = self.extra_tensor_info
        return info is not None and info.location == TensorDataLocation.EXTERNAL

    @property
    def fqn(self) -> Optional[str]:
        return None if self.extra_tensor_info is None else self.extra_tensor_info.fully_qualified_name

    @property
    def is_constant(self) -> bool:
        """Read-only data the program ships: in the constant table or in a .ptd by name."""
        if self.allocation_info is not None:
            return False
        return self.data_buffer_idx > 0 or self.is_external

    @property
    def is_planned(self) -> bool:
        return self.allocation_info is not None

    @property
    def has_initial_data(self) -> bool:
        """Planned memory that the runtime fills once at load (mutable data or a .ptd entry)."""
        return self.allocation_info is not None and (self.data_buffer_idx > 0 or self.is_external)


@record
class Null:
    pass


@record
class Int:
    int_val: int = 0


@record
class Bool:
    bool_val: bool = False


@record
class Double:
    double_val: float = 0.0


@record
class String:
    string_val: Optional[str] = None


@record
class IntList:
    items: Optional[tuple[int, ...]] = ()  # indices of Int values, not the ints themselves


@record
class DoubleList:
    items: Optional[tuple[float, ...]] = ()


@record
class BoolList:
    items: Optional[tuple[bool, ...]] = ()


@record
class TensorList:
    items: Optional[tuple[int, ...]] = ()  # value indices


@record
class OptionalTensorList:
    items: Optional[tuple[int, ...]] = ()  # value indices, -1 for None


# The EValue table only wraps the KernelTypes union; None stands for union type NONE.
EValue = Union[Null, Int, Bool, Double, Tensor, String, IntList, DoubleList, BoolList,
               TensorList, OptionalTensorList, None]


@record
class Operator:
    name: Optional[str] = None
    overload: Optional[str] = None

    @property
    def qualified_name(self) -> str:
        """The kernel key the runtime looks up, e.g. ``aten::mul.out``."""
        return f"{self.name}.{self.overload}" if self.overload else f"{self.name}"


@record
class KernelCall:
    op_index: int = 0
    args: Optional[tuple[int, ...]] = ()


@record
class DelegateCall:
    delegate_index: int = 0
    args: Optional[tuple[int, ...]] = ()


@record
class MoveCall:
    move_from: int = 0
    move_to: int = 0


@record
class JumpFalseCall:
    cond_value_index: int = 0
    destination_instruction: int = 0


@record
class FreeCall:
    value_index: int = 0


# The Instruction table only wraps the InstructionArguments union.
Instruction = Union[KernelCall, DelegateCall, MoveCall, JumpFalseCall, FreeCall, None]


@record
class Frame:
    filename: Optional[str] = None
    lineno: int = 0
    name: Optional[str] = None
    context: Optional[str] = None


@record
class FrameList:
    items: Optional[tuple[Frame, ...]] = ()


@record
class BackendDelegateDataReference:
    location: int = DataLocation.INLINE
    index: int = 0


@record
class CompileSpec:
    key: Optional[str] = None
    value: Optional[bytes] = b""


@record
class BackendDelegate:
    id: Optional[str] = None
    processed: Optional[BackendDelegateDataReference] = None
    compile_specs: Optional[tuple[CompileSpec, ...]] = ()

    def compile_spec(self, key: str) -> Optional[bytes]:
        for spec in self.compile_specs or ():
            if spec.key == key:
                return spec.value
        return None


@record
class Chain:
    inputs: Optional[tuple[int, ...]] = ()
    outputs: Optional[tuple[int, ...]] = ()
    instructions: Optional[tuple[Instruction, ...]] = ()
    stacktrace: Optional[tuple[Optional[FrameList], ...]] = None


@record
class NonConstBufferDevice:
    buffer_idx: int = 0
    device_type: int = DeviceType.CPU
    device_index: int = 0


@record
class ContainerMetadata:
    encoded_inp_str: Optional[str] = None
    encoded_out_str: Optional[str] = None


@record
class ExecutionPlan:
    name: Optional[str] = None
    container_meta_type: Optional[ContainerMetadata] = None
    values: Optional[tuple[EValue, ...]] = ()
    inputs: Optional[tuple[int, ...]] = ()
    outputs: Optional[tuple[int, ...]] = ()
    chains: Optional[tuple[Chain, ...]] = ()
    operators: Optional[tuple[Operator, ...]] = ()
    delegates: Optional[tuple[BackendDelegate, ...]] = ()
    non_const_buffer_sizes: Optional[tuple[int, ...]] = ()
    non_const_buffer_device: Optional[tuple[NonConstBufferDevice, ...]] = None

    def buffer_device(self, memory_id: int) -> Device:
        """Device of planned buffer ``memory_id`` (1-based); unlisted buffers are CPU.

        Scans ``non_const_buffer_device``: to look up many buffers, use ``buffer_devices`` once (a file may
        list a hundred thousand entries, and a lookup per tensor is then quadratic).
        """
        for entry in self.non_const_buffer_device or ():
            if entry.buffer_idx == memory_id:
                return Device(entry.device_type, entry.device_index)
        return CPU

    def buffer_devices(self) -> dict[int, Device]:
        """Planned buffer (memory_id) -> device, for every buffer ``non_const_buffer_device`` lists (the first
        entry of a buffer wins, as in ``buffer_device``); unlisted buffers are CPU."""
        devices: dict[int, Device] = {}
        for entry in self.non_const_buffer_device or ():
            devices.setdefault(entry.buffer_idx, Device(entry.device_type, entry.device_index))
        return devices


@record
class Buffer:
    storage: Optional[bytes] = b""


@record
class BackendDelegateInlineData:
    data: Optional[bytes] = b""


@record
class DataSegment:
    offset: int = 0  # relative to the file's segment_base_offset
    size: int = 0


@record
class SubsegmentOffsets:
    segment_index: int = 0
    offsets: Optional[tuple[int, ...]] = ()


@record
class NamedData:
    key: Optional[str] = None
    segment_index: int = 0


@record
class Program:
    version: int = 0
    execution_plan: Optional[tuple[ExecutionPlan, ...]] = ()
    constant_buffer: Optional[tuple[Buffer, ...]] = ()
    backend_delegate_data: Optional[tuple[BackendDelegateInlineData, ...]] = ()
    segments: Optional[tuple[DataSegment, ...]] = ()
    constant_segment: Optional[SubsegmentOffsets] = None
    mutable_data_segments: Optional[tuple[SubsegmentOffsets, ...]] = None
    named_data: Optional[tuple[NamedData, ...]] = None

    def plan(self, name: str) -> ExecutionPlan:
        for plan in self.execution_plan or ():
            if plan.name == name:
                return plan
        raise KeyError(name)

