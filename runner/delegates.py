"""DelegateCall: a registry of delegate executors keyed by backend id, open to third parties.

An executor plays the part of an ExecuTorch backend: ``init`` gets the
processed blob and compile specs once, when the method loads; ``execute``
gets the call's arguments (inputs, then outputs, as the program lists them)
and writes the outputs in place.  ``DelegateContext`` gives it the two things a
real device delegate does at its boundary, each counted in the copy ledger:
copy a host input to its device, and write a result into host memory.

Third parties register executors under the entry-point group
``pte_devconst.delegate_executors``: the entry-point name is the backend id,
the object a ``DelegateExecutor`` subclass (or any zero-argument factory).
A backend without one runs through the installed ExecuTorch runtime when that runtime registers it
(``runner/runtime_backend.py``: XNNPACK in the 1.5.1 wheel), else as an *opaque* stand-in
(``runner/opaque.py``), as ``OpaquePolicy`` says.  ``Execution`` names which of the three ran a delegate.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from enum import Enum
from importlib import metadata
from typing import Any, Callable, Optional, Sequence

import torch

from pte_devconst.program.dataflow import DelegateCallSite
from pte_devconst.schema import model as m
from pte_devconst.util.named_enum import NamedEnum
from pte_devconst.util.record import record

from .copies import Cause, CopyLedger, Direction
from .devices import DeviceMap
from .values import RunnerError, RuntimeValues

ENTRY_POINT_GROUP = "pte_devconst.delegate_executors"


@record
class DelegateArg:
    """One argument of a DelegateCall: its value index, value, and the device its memory is on."""

    index: int
    value: Any
    residence: Optional[m.Device]


@record
class DelegateInitContext:
    """What ``init`` may use: the target device, device memory, named data, and the ledger (load phase)."""

    backend_id: str
    target_device: m.Device
    devices: DeviceMap
    ledger: CopyLedger
    named_data: Callable[[str], Optional[memoryview]]
    where: str
    delegate_index: int = -1  # the program's index of this delegate (ExecutionPlan.delegates)
    call_sites: tuple[DelegateCallSite, ...] = ()  # this delegate's DelegateCalls, arguments split (dataflow.py)
    values: Sequence[m.EValue] = ()  # the method's values, as the program declares them
    named_keys: tuple[str, ...] = ()  # every key named_data knows (the program's, then the .ptd's)

    def load_to_device(self, host: torch.Tensor) -> torch.Tensor:
        """Copy delegate-owned constant data to the target device once (counted as a load-time copy)."""
        if self.target_device.is_cpu:
            return host
        self.ledger.record(Direction.H2D, Cause.DELEGATE_INIT, host.numel() * host.element_size(),
                           str(self.target_device))
        return host.to(self.devices.physical(self.target_device), copy=True)


class DelegateContext:
    """What ``execute`` may use: the target device and counted copies across the delegate boundary.  Working state
    (util/record.py): one per call."""

    __slots__ = ("backend_id", "target_device", "devices", "ledger", "where", "read", "delegate_index",
                 "input_digests", "values")

    def __init__(self, backend_id: str, target_device: m.Device, devices: DeviceMap, ledger: CopyLedger, where: str,
                 read: Optional[tuple[int, ...]] = None, delegate_index: int = -1,
                 input_digests: Optional[dict[int, torch.Tensor]] = None,
                 values: Optional[RuntimeValues] = None) -> None:
        self.backend_id = backend_id
        self.target_device = target_device
        self.devices = devices
        self.ledger = ledger
        self.where = where
        # The argument positions the call reads (program/dataflow.py: DelegateCallSite.read); the others it writes.
        self.read = read
        self.delegate_index = delegate_index
        # Digests (runner/digest.py) of the inputs the call does not also write, by value index, taken as the call
        # starts (``transcript.inputs_as_called``) when the method records the delegate-boundary transcript: an
        # executor that digests its inputs (the opaque stand-in) reuses them instead of reading those bytes again.
        self.input_digests: dict[int, torch.Tensor] = {} if input_digests is None else input_digests
        self.values = values  # the method's values, to resize dynamic outputs

    @property
    def torch_device(self) -> torch.device:
        return self.devices.physical(self.target_device)

    def input(self, arg: DelegateArg) -> Any:
        """An input on the target device: copied there (and counted) when its memory is elsewhere."""
        value = arg.value
        if not isinstance(value, torch.Tensor):
            return value
        here = arg.residence or m.CPU
        if here == self.target_device:
            return value
        nbytes = value.numel() * value.element_size()
        if here.is_cpu:
            self.ledger.record(Direction.H2D, Cause.DELEGATE_HOST_INPUT, nbytes, str(self.target_device), arg.index,
                               self.values.constant_derived(arg.index) if self.values is not None else None)
        elif self.target_device.is_cpu:
            self.ledger.record(Direction.D2H, Cause.DELEGATE_DEVICE_INPUT, nbytes, str(here), arg.index)
        return value.to(self.torch_device)

    def output(self, arg: DelegateArg, result: torch.Tensor) -> None:
        """Write ``result`` into output ``arg`` in place, counting a copy when the output's memory is elsewhere."""
        out = arg.value
        if not isinstance(out, torch.Tensor):
            raise RunnerError(f"delegate output value {arg.index} is not a tensor", where=self.where)
        if tuple(out.shape) != tuple(result.shape):  # a dynamic output resizes, as a backend's outputs do
            if self.values is None:
                raise RunnerError(f"{self.backend_id} produced shape {tuple(result.shape)} for output value "
                                  f"{arg.index}, which is planned as {tuple(out.shape)}", where=self.where)
            out = self.values.resize(arg.index, result.shape, self.where)
        here = arg.residence or m.CPU
        nbytes = out.numel() * out.element_size()
        if here.is_cpu and not self.target_device.is_cpu:
            self.ledger.record(Direction.D2H, Cause.DELEGATE_HOST_OUTPUT, nbytes, str(self.target_device))
        elif not here.is_cpu and self.target_device.is_cpu:
            self.ledger.record(Direction.H2D, Cause.DELEGATE_HOST_OUTPUT, nbytes, str(here))
        out.copy_(result)


class DelegateExecutor(ABC):
    """Runs one backend's delegates.  Subclasses set ``backend_id``."""

    backend_id: str = ""

    @abstractmethod
    def init(self, blob: bytes, compile_specs: dict[str, bytes], context: DelegateInitContext) -> Any:
        """Parse the processed blob; return a handle passed back to ``execute``."""

    @abstractmethod
    def execute(self, handle: Any, args: list[DelegateArg], context: DelegateContext) -> None:
        """Run the delegate on ``args`` (inputs, then outputs) and write the outputs in place."""


ExecutorFactory = Callable[[], DelegateExecutor]
_REGISTERED: dict[str, ExecutorFactory] = {}


def register_executor(backend_id: str, factory: ExecutorFactory) -> None:
    """Register (or replace) the executor for ``backend_id`` in this process."""
    _REGISTERED[backend_id] = factory


class Execution(NamedEnum):
    """What ran a delegate: its backend's own code, a reimplementation in Python, or a stand-in."""

    RUNTIME = "ExecuTorch runtime"  # the installed runtime executed the backend (runtime_backend.py): real
    EXECUTOR = "runner executor"  # a DelegateExecutor (built in, registered, or an entry point's)
    STAND_IN = "stand-in"  # opaque: seeded outputs from the inputs' bytes (opaque.py), not the model's


@record
class DelegateRun:
    """How one delegate of a loaded method is executed, for the reports (``why``: a stand-in's reason)."""

    index: int
    backend_id: str
    device: str
    execution: Execution
    why: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "backend": self.backend_id, "device": self.device,
                "execution": self.execution.value, "why": self.why or None}


def _builtin() -> dict[str, ExecutorFactory]:
    from .demo_backend import DemoBackendExecutor
    from .reference_backend import ReferenceBackendExecutor

    return {DemoBackendExecutor.backend_id: DemoBackendExecutor,
            ReferenceBackendExecutor.backend_id: ReferenceBackendExecutor}


def _entry_points() -> dict[str, Any]:
    try:
        return {ep.name: ep for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)}
    except Exception:  # noqa: BLE001 - broken metadata must not stop built-in backends
        return {}


class OpaquePolicy(str, Enum):
    """When a delegate runs opaque (seeded stand-in outputs) instead of through its executor."""

    NEVER = "never"  # a backend without an executor is an error (``run``'s default)
    MISSING = "missing"  # backends without an executor run opaque (``validate``'s default)
    ALWAYS = "always"  # every delegate runs opaque (``--opaque-delegates``)


def _runtime_backends() -> frozenset[str]:
    from .runtime_backend import runtime_backends

    return runtime_backends()


def known_backends() -> list[str]:
    return sorted(set(_builtin()) | set(_REGISTERED) | set(_entry_points()) | _runtime_backends())


def stand_in() -> DelegateExecutor:
    """The opaque stand-in executor (``runner/opaque.py``)."""
    from .opaque import OpaqueExecutor

    return OpaqueExecutor()


def executor_for(backend_id: str, where: str,
                 opaque: OpaquePolicy = OpaquePolicy.NEVER) -> tuple[DelegateExecutor, Execution]:
    """A fresh executor for ``backend_id`` and what it is.

    Registered in-process, else built in, else from an entry point, else the installed ExecuTorch runtime when
    it registers the backend; else, as ``opaque`` allows, the opaque stand-in.
    """
    if opaque is OpaquePolicy.ALWAYS:
        return stand_in(), Execution.STAND_IN
    factory = _REGISTERED.get(backend_id) or _builtin().get(backend_id)
    if factory is None:
        entry = _entry_points().get(backend_id)
        if entry is not None:
            try:
                factory = entry.load()
            except Exception as error:  # noqa: BLE001 - a third party's import error, reported in one line
                raise RunnerError(f"the executor registered for backend {backend_id!r} ({entry.value}) "
                                  f"failed to load: {error}", where=where) from None
    if factory is None and backend_id in _runtime_backends():
        from .runtime_backend import RuntimeExecutor

        return RuntimeExecutor(), Execution.RUNTIME
    if factory is None:
        if opaque is OpaquePolicy.MISSING:
            return stand_in(), Execution.STAND_IN
        raise RunnerError(f"no delegate executor for backend {backend_id!r} (known: {', '.join(known_backends())}); "
                          f"register one in the entry-point group {ENTRY_POINT_GROUP}, or run it as an opaque "
                          f"delegate with --opaque-delegates (stand-in outputs)", where=where)
    executor = factory()
    if not isinstance(executor, DelegateExecutor):
        raise RunnerError(f"the executor registered for backend {backend_id!r} is not a DelegateExecutor",
                          where=where)
    return executor, Execution.EXECUTOR
