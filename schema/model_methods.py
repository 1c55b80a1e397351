"""What the model offers beyond the fields the .fbs declares: devices, element sizes, and per-record helpers.

The records themselves are generated from ``fbs/*.fbs`` (``generated/*_model.py``,
see ``regenerate.py``). A record named ``X`` inherits ``XMethods`` from here when
this module defines it: the generator looks for these classes, so a helper is
added here, once, and survives every regeneration. Each class holds only
methods and properties over the record's fields (``__slots__ = ()``: records are
slotted, and a base with a ``__dict__`` would give every record one).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Optional

from .generated.enums import DeviceType, TensorDataLocation
from .record import record

if TYPE_CHECKING:
    from .generated.flat_tensor_model import TensorLayout
    from .generated.program_model import BackendDelegate, ExecutionPlan, Operator, Program, Tensor

__all__ = ["Device", "CPU", "element_size", "KNOWN_SCALAR_TYPES"]

# Bytes per element of each ScalarType (the format numbers the types; their sizes are ExecuTorch's).
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


class TensorMethods:
    __slots__ = ()

    @property
    def numel(self: Tensor) -> int:
        return math.prod(self.sizes or ())

    @property
    def nbytes(self: Tensor) -> int:
        """Bytes of the tensor's data (upper bound for DYNAMIC_BOUND shapes)."""
        return self.numel * element_size(self.scalar_type)

    @property
    def device(self: Tensor) -> Device:
        info = self.extra_tensor_info
        return CPU if info is None else Device(info.device_type, info.device_index)

    @property
    def is_external(self: Tensor) -> bool:
        info = self.extra_tensor_info
        return info is not None and info.location == TensorDataLocation.EXTERNAL

    @property
    def fqn(self: Tensor) -> Optional[str]:
        return None if self.extra_tensor_info is None else self.extra_tensor_info.fully_qualified_name

    @property
    def is_constant(self: Tensor) -> bool:
        """Read-only data the program ships: in the constant table or in a .ptd by name."""
        if self.allocation_info is not None:
            return False
        return self.data_buffer_idx > 0 or self.is_external

    @property
    def is_planned(self: Tensor) -> bool:
        return self.allocation_info is not None

    @property
    def has_initial_data(self: Tensor) -> bool:
        """Planned memory that the runtime fills once at load (mutable data or a .ptd entry)."""
        return self.allocation_info is not None and (self.data_buffer_idx > 0 or self.is_external)


class OperatorMethods:
    __slots__ = ()

    @property
    def qualified_name(self: Operator) -> str:
        """The kernel key the runtime looks up, e.g. ``aten::mul.out``."""
        return f"{self.name}.{self.overload}" if self.overload else f"{self.name}"


class BackendDelegateMethods:
    __slots__ = ()

    def compile_spec(self: BackendDelegate, key: str) -> Optional[bytes]:
        for spec in self.compile_specs or ():
            if spec.key == key:
                return spec.value
        return None


class ExecutionPlanMethods:
    __slots__ = ()

    def buffer_device(self: ExecutionPlan, memory_id: int) -> Device:
        """Device of planned buffer ``memory_id`` (1-based); unlisted buffers are CPU.

        Scans ``non_const_buffer_device``: to look up many buffers, use ``buffer_devices`` once (a file may
        list a hundred thousand entries, and a lookup per tensor is then quadratic).
        """
        for entry in self.non_const_buffer_device or ():
            if entry.buffer_idx == memory_id:
                return Device(entry.device_type, entry.device_index)
        return CPU

    def buffer_devices(self: ExecutionPlan) -> dict[int, Device]:
        """Planned buffer (memory_id) -> device, for every buffer ``non_const_buffer_device`` lists (the first
        entry of a buffer wins, as in ``buffer_device``); unlisted buffers are CPU."""
        devices: dict[int, Device] = {}
        for entry in self.non_const_buffer_device or ():
            devices.setdefault(entry.buffer_idx, Device(entry.device_type, entry.device_index))
        return devices


class ProgramMethods:
    __slots__ = ()

    def plan(self: Program, name: str) -> ExecutionPlan:
        for plan in self.execution_plan or ():
            if plan.name == name:
                return plan
        raise KeyError(name)


class TensorLayoutMethods:
    __slots__ = ()

    @property
    def nbytes(self: TensorLayout) -> int:
        return math.prod(self.sizes or ()) * element_size(self.scalar_type)
