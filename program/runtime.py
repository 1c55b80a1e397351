"""ExecuTorch releases (``Runtime``, the default a rewrite targets), what a file needs of them (``RuntimeNeed``), and
the program facts that decide it.  Which release loads what is the encodings' to say (``rewriter/encodings``:
``required_runtime`` answers for a file).

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

import re
from typing import Optional

from pte_devconst.schema import model as m
from pte_devconst.util.record import record

from .regions import memory_device, value_nbytes


@record
class DeviceInitialData:
    """A planned tensor on a device that the loader fills at load: why a file needs 1.6."""

    method: str  # the method's label
    value: int
    device: m.Device
    nbytes: int
    external: bool  # filled from a .ptd entry, not from the mutable data segment


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


@record(order=True)
class Runtime:
    """An ExecuTorch release, by its minor version (a patch release loads what its minor does)."""

    major: int
    minor: int

    @property
    def value(self) -> str:
        """``1.6``: how options, config files and reports spell it."""
        return f"{self.major}.{self.minor}"

    def __str__(self) -> str:
        return self.value

    @property
    def minimum(self) -> str:
        """``ExecuTorch >= 1.6``."""
        return f"ExecuTorch >= {self.value}"

    @classmethod
    def read(cls, text: str) -> Optional["Runtime"]:
        """``1.5``, ``v1.5``, ``1.5.1`` (any patch) as a release; None when ``text`` is not one."""
        found = re.fullmatch(r"v?(\d{1,4})\.(\d{1,4})(?:\.\d{1,4})*", text.strip().lower())
        return cls(int(found.group(1)), int(found.group(2))) if found else None


@record
class RuntimeNeed:
    """The oldest runtime that loads a program, and what makes it so (what every older one cannot load)."""

    runtime: Runtime
    device_initial_data: tuple[DeviceInitialData, ...] = ()
    why: str = ""  # what the older runtimes cannot load, in a few words ("device initial data")

    @property
    def minimum(self) -> str:
        return self.runtime.minimum

    def describe(self) -> str:
        """One line: the minimum and why (``ExecuTorch >= 1.6: device initial data (4 tensors)``)."""
        if self.device_initial_data:
            count = len(self.device_initial_data)
            return f"{self.minimum}: {self.why} ({count} tensor{'' if count == 1 else 's'})"
        return self.minimum

    def loads_in(self, runtime: Runtime) -> bool:
        """Whether a runtime of release ``runtime`` (or newer) loads the program."""
        return runtime >= self.runtime

    def to_json(self) -> dict[str, object]:
        return {"minimum": self.runtime.value, "reason": self.describe(),
                "device_initial_data": [{"method": d.method, "value": d.value, "device": str(d.device),
                                         "bytes": d.nbytes, "external": d.external}
                                        for d in self.device_initial_data]}


# The release a rewrite targets when nobody says: written here and nowhere else.
DEFAULT_RUNTIME = Runtime(1, 6)
