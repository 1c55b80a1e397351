"""The runtime EValue array of a loaded method, and where each tensor's memory lives.

``values[i]`` holds what ExecuTorch's ``EValue`` i holds: a torch tensor (a view
of planned memory, of constant data, or a bound input), a Python scalar, or a
list reference resolved at call time (IntList items are indices of Int values,
which prim ops may change).  ``residence[i]`` is the logical device of the
memory behind tensor i, which is what every copy count and host/device check
uses; with simulated devices the torch tensor itself is always on the CPU.
"""

from __future__ import annotations

import math
from typing import Any, Optional, Sequence

import torch

from pte_devconst.schema import model as m
from pte_devconst.util.errors import PteDevconstError
from pte_devconst.util.named_enum import NamedEnum

from .copies import CopyLedger
from .devices import DeviceMap
from pte_devconst.program.dtypes import dim_order_strides
from pte_devconst.util.record import record


class RunnerError(PteDevconstError):
    """The program cannot run as given: wrong inputs, an unknown operator or backend, a host/device mix-up."""


class ListKind(NamedEnum):
    """Which list of value indices a ``ListRef`` is (a member equals its string: ``kind == "tensor"``)."""

    INT = "int"  # IntList: indices of Int values
    TENSOR = "tensor"  # TensorList
    OPTIONAL_TENSOR = "optional_tensor"  # OptionalTensorList: -1 for None


@record
class ListRef:
    """An IntList / TensorList / OptionalTensorList: value indices resolved when an instruction runs."""

    kind: ListKind
    items: tuple[int, ...]


class Unset:
    """A value with no data yet: an input not bound, or a tensor freed by FreeCall."""

    def __init__(self, why: str) -> None:
        self.why = why

    def __repr__(self) -> str:
        return f"<{self.why}>"


NOT_BOUND = Unset("not bound")
FREED = Unset("freed")


class RuntimeValues:
    """Values of one loaded method plus the services instructions need (devices, copy ledger)."""

    def __init__(self, method: str, count: int, devices: DeviceMap, ledger: CopyLedger,
                 specs: Sequence[Any] = ()) -> None:
        self.method = method
        self.values: list[Any] = [None] * count
        self.residence: list[Optional[m.Device]] = [None] * count
        self.specs = tuple(specs)  # the program's EValues: a tensor's bounds, dynamism and dim order
        self.devices = devices
        self.ledger = ledger
        self.derivation: Any = None  # runner/derivation.Derivation, set by the loaded method

    def constant_derived(self, index: int) -> Optional[bool]:
        """Whether value ``index`` holds bytes computed from constants alone (None when not tracked)."""
        return None if self.derivation is None else self.derivation.of(index)

    def get(self, index: int, where: str) -> Any:
        """The Python value of EValue ``index`` with list references resolved."""
        if not 0 <= index < len(self.values):
            raise RunnerError(f"value index {index} is out of range ({len(self.values)} values)", where=where)
        value = self.values[index]
        if isinstance(value, Unset):
            raise RunnerError(f"value {index} is used but has no data ({value.why})", where=where)
        if isinstance(value, ListRef):
            if value.kind is ListKind.OPTIONAL_TENSOR:
                return [None if i == -1 else self.get(i, where) for i in value.items]
            return [self.get(i, where) for i in value.items]
        return value

    def tensor(self, index: int, where: str) -> torch.Tensor:
        value = self.get(index, where)
        if not isinstance(value, torch.Tensor):
            raise RunnerError(f"value {index} should be a tensor but is {type(value).__name__}", where=where)
        return value

    def device_of(self, index: int) -> m.Device:
        return self.residence[index] or m.CPU

    def set(self, index: int, value: Any, residence: Optional[m.Device] = None) -> None:
        self.values[index] = value
        self.residence[index] = residence

    def tensor_indices(self, index: int) -> list[int]:
        """The tensor value indices behind ``index`` (itself, or a tensor list's items)."""
        value = self.values[index]
        if isinstance(value, ListRef):
            return [i for i in value.items if i >= 0] if value.kind is not ListKind.INT else []
        return [index] if isinstance(value, torch.Tensor) else []

    def is_dynamic(self, index: int) -> bool:
        """Whether tensor value ``index`` may change shape (DYNAMIC_BOUND in the program)."""
        spec = self.specs[index] if 0 <= index < len(self.specs) else None
        return isinstance(spec, m.Tensor) and spec.shape_dynamism != m.TensorShapeDynamism.STATIC

    def _tensor_spec(self, index: int, where: str) -> m.Tensor:
        spec = self.specs[index] if 0 <= index < len(self.specs) else None
        if not isinstance(spec, m.Tensor):
            raise RunnerError(f"value {index} is not a tensor of the program", where=where)
        return spec

    def resize(self, index: int, shape: Sequence[int], where: str) -> torch.Tensor:
        """Give tensor value ``index`` the sizes ``shape`` in place, as ExecuTorch's ``resize_tensor`` does.

        The rank never changes; a STATIC tensor keeps its sizes; a DYNAMIC_BOUND one takes any sizes up to
        its planned number of elements, with the strides of its dim order (its memory stays where it is).
        Returns the tensor, which later instructions see with its new sizes.
        """
        tensor = self.tensor(index, where)
        shape = tuple(int(size) for size in shape)
        if tuple(tensor.shape) != shape:
            spec = self._check_resize(index, shape, where)
            try:
                tensor.as_strided_(shape, dim_order_strides(shape, tuple(spec.dim_order or range(len(shape)))))
            except RuntimeError:  # the value holds another tensor's smaller memory (a MoveCall into it)
                raise RunnerError(f"value {index} cannot take shape {list(shape)}: its memory holds "
                                  f"{tensor.untyped_storage().nbytes()} bytes", where=where) from None
        return tensor

    def accept_resize(self, index: int, where: str) -> None:
        """A torch kernel resized tensor ``index`` through ``out=``: refuse what ExecuTorch refuses, and lay
        the result out in the tensor's dim order (torch resizes to contiguous strides)."""
        tensor = self.tensor(index, where)
        shape = tuple(tensor.shape)
        spec = self._check_resize(index, shape, where)
        strides = dim_order_strides(shape, tuple(spec.dim_order or range(len(shape))))
        if tensor.stride() != strides and tensor.numel() > 1:
            data = tensor.clone()
            tensor.as_strided_(shape, strides).copy_(data)

    def _check_resize(self, index: int, shape: tuple[int, ...], where: str) -> m.Tensor:
        spec = self._tensor_spec(index, where)
        sizes = tuple(spec.sizes or ())
        if len(shape) != len(sizes):
            raise RunnerError(f"value {index} has rank {len(sizes)}; a kernel tried to give it shape {list(shape)}",
                              where=where)
        if sizes and spec.shape_dynamism == m.TensorShapeDynamism.STATIC and shape != sizes:
            raise RunnerError(f"value {index} is a static {list(sizes)} tensor; it cannot take shape {list(shape)} "
                              f"(ExecuTorch refuses to resize a static tensor)", where=where)
        if math.prod(shape) > math.prod(sizes):
            raise RunnerError(f"value {index} holds at most {math.prod(sizes)} elements (planned as {list(sizes)}); "
                              f"shape {list(shape)} does not fit", where=where)
        return spec
