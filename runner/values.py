"""The runtime EValue array of a loaded method, and where each tensor's memory lives.

``values[i]`` holds what ExecuTorch's ``EValue`` i holds: a torch tensor (a view
of planned memory, of constant data, or a bound input), a Python scalar, or a
list reference resolved at call time (IntList items are indices of Int values,
which prim ops may change).  ``residence[i]`` is the logical device of the
memory behind tensor i, which is what every copy count and host/device check
uses; with simulated devices the torch tensor itself is always on the CPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import torch

from pte_devconst.schema import model as m
from pte_devconst.schema.errors import PteDevconstError

from .copies import CopyLedger
from .devices import DeviceMap


class RunnerError(PteDevconstError):
    """The program cannot run as given: wrong inputs, an unknown operator or backend, a host/device mix-up."""


@dataclass(frozen=True, slots=True)
class ListRef:
    """An IntList / TensorList / OptionalTensorList: value indices resolved when an instruction runs."""

    kind: str  # "int", "tensor", "optional_tensor"
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

    def __init__(self, method: str, count: int, devices: DeviceMap, ledger: CopyLedger) -> None:
        self.method = method
        self.values: list[Any] = [None] * count
        self.residence: list[Optional[m.Device]] = [None] * count
        self.devices = devices
        self.ledger = ledger

    def get(self, index: int, where: str) -> Any:
        """The Python value of EValue ``index`` with list references resolved."""
        if not 0 <= index < len(self.values):
            raise RunnerError(f"value index {index} is out of range ({len(self.values)} values)", where=where)
        value = self.values[index]
        if isinstance(value, Unset):
            raise RunnerError(f"value {index} is used but has no data ({value.why})", where=where)
        if isinstance(value, ListRef):
            if value.kind == "optional_tensor":
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
            return [i for i in value.items if i >= 0] if value.kind != "int" else []
        return [index] if isinstance(value, torch.Tensor) else []
