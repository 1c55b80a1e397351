"""Which ExecuTorch runtime loads a program: the oldest release whose loader does what the file asks.

One fact separates the releases this tool writes for (``docs/file-format.md``, "Runtime encodings"):

* **Device initial data** needs **1.6**.  A planned tensor in a buffer on a non-CPU device that holds initial
  data (an entry of the mutable data segment, or an external tensor the loader fills from a .ptd) is filled at
  load.  1.6's tensor parser reads the bytes on the host and copies them with the device's allocator; 1.5's
  loads them straight into the device pointer (``load_mutable_subsegment_into``), which is undefined for device
  memory (a crash or ``EFAULT``).  It is what ExecuTorch 1.6's ``skip_h2d_for_constants`` writes, and this
  tool's default encoding.
* Everything else this tool reads or writes loads in **1.5**: device buffers and ``non_const_buffer_device``,
  ``et_copy`` kernels, jumps and moves (the first-call encoding, ``program/prologue.py``).

The answer is about the file alone; whether a given runtime build has every kernel the program names is the
build's business (selective registration), and the first-call encoding adds no operator.
"""

from __future__ import annotations

from typing import Optional

from pte_devconst.schema import model as m
from pte_devconst.util.named_enum import NamedEnum
from pte_devconst.util.record import record

from .executorch import method_labels
from .regions import memory_device, value_nbytes


class Runtime(NamedEnum):
    """The ExecuTorch releases a rewrite can target, by the encoding of a constant kept on a device."""

    V1_5 = "1.5"  # first-call copies: the constant stays on the host, copied once, on the first call
    V1_6 = "1.6"  # device initial data: the constant's bytes fill its device memory at load

    @property
    def encoding(self) -> str:
        """What the encoding of a constant kept on a device is called in reports."""
        return "first-call copies" if self is Runtime.V1_5 else "device initial data"

    @classmethod
    def parse(cls, text: str) -> "Runtime":
        """``1.5`` / ``1.6`` (also ``v1.5``, ``1.5.1``: a patch release loads what its minor does)."""
        cleaned = text.strip().lower().removeprefix("v")
        parts = cleaned.split(".")
        if len(parts) >= 2 and parts[0] == "1" and parts[1] in ("5", "6") \
                and all(p.isdigit() for p in parts[2:]):
            return cls(f"1.{parts[1]}")
        choices = ", ".join(r.value for r in cls)
        raise ValueError(f"unknown ExecuTorch runtime {text!r} (choose one of: {choices})")


@record
class DeviceInitialData:
    """A planned tensor on a device that the loader fills at load: why a file needs 1.6."""

    method: str  # the method's label
    value: int
    device: m.Device
    nbytes: int
    external: bool  # filled from a .ptd entry, not from the mutable data segment


@record
class RuntimeNeed:
    """The oldest runtime that loads a program, and what makes it so."""

    runtime: Runtime
    device_initial_data: tuple[DeviceInitialData, ...] = ()

    @property
    def minimum(self) -> str:
        """``ExecuTorch >= 1.6``."""
        return f"ExecuTorch >= {self.runtime.value}"

    def describe(self) -> str:
        """One line: the minimum and why (``ExecuTorch >= 1.6: device initial data (4 tensors)``)."""
        if self.runtime is Runtime.V1_6:
            count = len(self.device_initial_data)
            return f"{self.minimum}: device initial data ({count} tensor{'' if count == 1 else 's'})"
        return self.minimum

    def loads_in(self, runtime: Runtime) -> bool:
        """Whether a runtime of release ``runtime`` (or newer) loads the program."""
        return _ORDER[runtime] >= _ORDER[self.runtime]

    def to_json(self) -> dict[str, object]:
        return {"minimum": self.runtime.value, "reason": self.describe(),
                "device_initial_data": [{"method": d.method, "value": d.value, "device": str(d.device),
                                         "bytes": d.nbytes, "external": d.external}
                                        for d in self.device_initial_data]}


_ORDER = {runtime: position for position, runtime in enumerate(Runtime)}


def device_initial_data(plan: m.ExecutionPlan, label: str) -> list[DeviceInitialData]:
    """The tensors of one method that the loader fills at load in device memory (the buffer's device counts:
    that is where the loader's pointer points, whatever the tensor's own tag says)."""
    devices = plan.buffer_devices()
    found = []
    for index, value in enumerate(plan.values or ()):
        if not isinstance(value, m.Tensor) or not value.has_initial_data:
            continue
        device = memory_device(value, devices)  # planned (has_initial_data): its buffer's device
        if not device.is_cpu:
            found.append(DeviceInitialData(label, index, device, value_nbytes(value), value.is_external))
    return found


def required_runtime(program: m.Program, labels: Optional[list[str]] = None) -> RuntimeNeed:
    """The oldest runtime that loads ``program`` (module docstring).  Linear in its values."""
    if labels is None:
        labels = method_labels(program)[0]
    found: list[DeviceInitialData] = []
    for plan, label in zip(program.execution_plan or (), labels):
        found.extend(device_initial_data(plan, label))
    return RuntimeNeed(Runtime.V1_6 if found else Runtime.V1_5, tuple(found))
