"""What the model offers beyond the fields the .fbs declares: per-record helpers (devices and element sizes
are ExecuTorch's conventions, from ``devices.py`` and ``scalar_types.py``, re-exported here for ``model``).

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

from .devices import CPU, Device
from .scalar_types import KNOWN_SCALAR_TYPES, element_size
from .generated.enums import TensorDataLocation

if TYPE_CHECKING:
    from .generated.flat_tensor_model import TensorLayout
    from .generated.program_model import BackendDelegate, ExecutionPlan, Operator, Program, Tensor

__all__ = ["Device", "CPU", "element_size", "dim_order_strides", "KNOWN_SCALAR_TYPES", "LayoutKey", "layout_key"]


LayoutKey = tuple[int, tuple[int, ...], tuple[int, ...]]


def layout_key(scalar_type: int, sizes: "Optional[tuple[int, ...] | list[int]]",
               dim_order: "Optional[tuple[int, ...] | list[int]]") -> LayoutKey:
    """What a reader sees of a tensor besides its bytes: dtype, sizes and dim order.  A Tensor and a .ptd
    entry's TensorLayout agree when their keys are equal."""
    return scalar_type, tuple(sizes or ()), tuple(dim_order or ())


def dim_order_strides(sizes: "tuple[int, ...] | list[int]",
                      dim_order: "tuple[int, ...] | list[int]") -> tuple[int, ...]:
    """Element strides that ``dim_order`` implies: the last dim in the order is innermost; size 0 counts as 1."""
    strides = [0] * len(sizes)
    running = 1
    for dim in reversed(dim_order):
        strides[dim] = running
        running *= max(sizes[dim], 1)
    return tuple(strides)




class TensorMethods:
    __slots__ = ()

    @property
    def numel(self: Tensor) -> int:
        return math.prod(self.sizes or ())

    @property
    def layout_key(self: Tensor) -> LayoutKey:
        """Dtype, sizes and dim order (``layout_key``)."""
        return layout_key(self.scalar_type, self.sizes, self.dim_order)

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

    def operator_index(self: ExecutionPlan, qualified_name: str) -> Optional[int]:
        """The index of the first operator whose kernel key is ``qualified_name`` (None: the method has none)."""
        for index, op in enumerate(self.operators or ()):
            if op.qualified_name == qualified_name:
                return index
        return None

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

    @property
    def layout_key(self: TensorLayout) -> LayoutKey:
        """Dtype, sizes and dim order (``layout_key``): compare with the tensor's."""
        return layout_key(self.scalar_type, self.sizes, self.dim_order)
