"""``run_program``: load a program, run one method N times on given inputs, and report outputs and copies."""

from __future__ import annotations

import ctypes
import gc
import hashlib
import io
import time
from dataclasses import field
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import torch

from pte_devconst.schema import model as m
from pte_devconst.schema.pte_file import ProgramBytes
from pte_devconst.util.atomic import atomic_output, write_all
from pte_devconst.util.errors import PteDevconstError
from pte_devconst.util.units import human_bytes

from .copies import LOAD, CopyEvent, PhaseCopies
from .delegates import DelegateRun, Execution, OpaquePolicy
from .devices import exact_float_math
from pte_devconst.program.dtypes import dtype_name, torch_dtype
from pte_devconst.util.record import record
from .memory import CallerMemory
from .method import LoadedProgram, ObservedWrite
from .profiling import ProfiledCopies, profile_call
from .transcript import DelegateCallRecord


@record
class OutputSummary:
    """What ``run`` prints for one output: shape, dtype and a checksum of the raw bytes."""

    kind: str
    dtype: Optional[str]
    shape: Optional[tuple[int, ...]]
    sha256: Optional[str]
    sum: Optional[float]
    value: Any = None  # non-tensor outputs

    @classmethod
    def of(cls, value: Any) -> "OutputSummary":
        if not isinstance(value, torch.Tensor):
            return cls(type(value).__name__, None, None, None, None, value)
        contiguous = value.detach().cpu().contiguous()
        # The bytes straight from host memory: Tensor.numpy() needs numpy, which torch's CPU wheel does not bring.
        nbytes = contiguous.numel() * contiguous.element_size()
        digest = hashlib.sha256(ctypes.string_at(contiguous.data_ptr(), nbytes) if nbytes else b"").hexdigest()
        total = None if contiguous.dtype.is_complex else float(contiguous.double().sum())
        return cls("tensor", dtype_name(value.dtype), tuple(value.shape), digest, total)

    def to_json(self) -> dict[str, Any]:
        if self.kind != "tensor":
            return {"kind": self.kind, "value": self.value}
        return {"kind": "tensor", "dtype": self.dtype, "shape": list(self.shape or ()), "sha256": self.sha256,
                "sum": self.sum}


@record
class CallResult:
    index: int
    outputs: list[Any]
    copies: PhaseCopies
    wall_s: float
    profiled: Optional[ProfiledCopies] = None
    delegate_calls: tuple[DelegateCallRecord, ...] = ()  # with run_program(transcript=True)

    def to_json(self, output_names: Sequence[Optional[str]] = ()) -> dict[str, Any]:
        """``output_names``: the user's name of each output by position (an ETRecord's), None where unknown."""
        names = list(output_names) + [None] * (len(self.outputs) - len(output_names))
        return {"call": self.index, "wall_s": self.wall_s, "copies": self.copies.to_json(),
                "outputs": [{"name": name, **OutputSummary.of(v).to_json()} for v, name in zip(self.outputs, names)],
                "profiler": self.profiled.to_json() if self.profiled else None}


@record
class RunResult:
    """Everything one ``run_program`` measured: the load's copies and each call's outputs, copies and time."""

    path: str
    method: str
    simulated: bool
    load: PhaseCopies
    calls: list[CallResult]
    events: list[CopyEvent] = field(default_factory=list)
    opaque_delegates: dict[int, str] = field(default_factory=dict)  # delegate index -> backend id, run opaque
    device_peak_bytes: Optional[int] = None  # torch.cuda.max_memory_allocated over load and calls (real GPUs)
    # The user's names of the method's inputs and outputs by position (None: unknown), and where they came
    # from as the JSON reports give it (``names_json``; None without an ETRecord): set by ``api.run``.
    input_names: tuple[Optional[str], ...] = ()
    output_names: tuple[Optional[str], ...] = ()
    names: Optional[dict[str, Any]] = None
    delegates: tuple[DelegateRun, ...] = ()  # how each delegate ran: the ExecuTorch runtime, an executor, a stand-in
    caller_memory: tuple[CallerMemory, ...] = ()  # unplanned tensors bound to memory the caller provides
    # With a transcript: arguments a delegate (not a stand-in) changed although the program says it only reads
    # them, seen in their bytes (``LoadedMethod.finish_call``), and how many such arguments were looked at.
    observed_writes: tuple[ObservedWrite, ...] = ()
    observed_arguments: int = 0

    @property
    def opaque_backends(self) -> list[str]:
        """Backend ids that ran as opaque stand-ins (their outputs are not the model's)."""
        return sorted(set(self.opaque_delegates.values()))

    @property
    def runtime_backends(self) -> list[str]:
        """Backend ids whose delegates the installed ExecuTorch runtime executed (their outputs are real)."""
        return sorted({d.backend_id for d in self.delegates if d.execution is Execution.RUNTIME})

    def to_json(self) -> dict[str, Any]:
        return {"file": self.path, "method": self.method, "devices": "simulated" if self.simulated else "real",
                "opaque_backends": self.opaque_backends, "delegates": [d.to_json() for d in self.delegates],
                "caller_memory": [c.to_json() for c in self.caller_memory],
                "device_peak_bytes": self.device_peak_bytes,
                "names": self.names, "input_names": list(self.input_names), "load": self.load.to_json(),
                "calls": [c.to_json(self.output_names) for c in self.calls]}


# Synthetic inputs are for a quick look; a forged shape must not allocate the machine's memory.
SYNTHETIC_INPUT_LIMIT = 1 << 30


def synthetic_inputs(plan: m.ExecutionPlan, seed: int = 0) -> tuple[Any, ...]:
    """Deterministic inputs matching a method's declared inputs (used when the user gives none)."""
    generator = torch.Generator().manual_seed(seed)
    result: list[Any] = []
    for index in plan.inputs or ():
        value = (plan.values or ())[index]
        if isinstance(value, m.Tensor):
            dtype = torch_dtype(value.scalar_type, f"input value {index}")
            sizes = tuple(value.sizes or ())
            if value.nbytes > SYNTHETIC_INPUT_LIMIT:
                raise PteDevconstError(f"input value {index} declares {value.nbytes} bytes; too large for synthetic "
                                       f"inputs (limit {SYNTHETIC_INPUT_LIMIT}): pass --inputs")
            if dtype.is_floating_point:
                result.append(torch.randn(sizes, generator=generator).to(dtype))
            elif dtype == torch.bool:
                result.append(torch.randint(0, 2, sizes, generator=generator).bool())
            else:
                result.append(torch.randint(0, 4, sizes, generator=generator).to(dtype))
        elif isinstance(value, m.Int):
            result.append(value.int_val)
        elif isinstance(value, m.Double):
            result.append(value.double_val)
        elif isinstance(value, m.Bool):
            result.append(value.bool_val)
        else:
            result.append(None)
    return tuple(result)


def load_torch_file(path: str | Path, what: str) -> Any:
    """``torch.load`` with weights_only, turning any failure into one clear error."""
    try:
        return torch.load(str(path), map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise PteDevconstError(f"{what} file not found", file=str(path)) from None
    except Exception as error:  # noqa: BLE001 - pickle/zip errors of many kinds
        raise PteDevconstError(f"cannot read {what} (expected a torch.save file of tensors): "
                               f"{_load_failure(str(error))}", file=str(path)) from None


def _load_failure(message: str) -> str:
    """What torch.load said, short: of a weights-only refusal the unpickler's own reason, not torch's advice to
    load the file with ``weights_only=False`` (which would run whatever code the file holds)."""
    if "WeightsUnpickler error:" in message:
        reason = " ".join(message.split("WeightsUnpickler error:", 1)[1].split("Check the documentation")[0].split())
        return f"torch.load with weights_only=True refused it ({reason[:160] or 'no reason given'})"
    return " ".join(message.split())[:200]


def save_outputs(result: RunResult, path: str | Path) -> None:
    """Every call's outputs, on the host, as ``{method: [(output, ...) per call]}``: the layout ``validate
    --expected`` and ``calls_from`` read.  Written atomically (a failure leaves the destination untouched)."""
    def host(value: Any) -> Any:
        return value.detach().to("cpu").clone() if isinstance(value, torch.Tensor) else value

    buffer = io.BytesIO()
    torch.save({result.method: [tuple(host(v) for v in call.outputs) for call in result.calls]}, buffer)
    with atomic_output(path) as fd:
        write_all(fd, buffer.getbuffer())


def calls_from(data: Any, method: str, what: str, path: str = "") -> list[tuple[Any, ...]]:
    """Normalize a loaded inputs/expected file: ``{method: [call, ...]}``, ``[call, ...]`` or one call."""
    if isinstance(data, dict):
        if method not in data:
            raise PteDevconstError(f"{what} has no entry for method {method!r} (has: {', '.join(map(str, data))})",
                                   file=path or None)
        data = data[method]
    if isinstance(data, torch.Tensor):
        return [(data,)]
    if isinstance(data, (list, tuple)) and data and all(isinstance(c, (list, tuple)) for c in data):
        return [tuple(c) for c in data]
    if isinstance(data, (list, tuple)):
        return [tuple(data)]
    raise PteDevconstError(f"{what} holds {type(data).__name__}; expected a tuple of tensors per call",
                           file=path or None)


def resolve_inputs(inputs: Any, method: str, plan: m.ExecutionPlan) -> list[tuple[Any, ...]]:
    """Inputs as a list of calls from a path, a loaded object or None (synthetic)."""
    if inputs is None:
        return [synthetic_inputs(plan)]
    if isinstance(inputs, (str, Path)):
        return calls_from(load_torch_file(inputs, "inputs"), method, "inputs", str(inputs))
    return calls_from(inputs, method, "inputs")


def default_method(program: LoadedProgram, method: Optional[str]) -> str:
    if method is not None:
        return method
    names = program.method_names
    return "forward" if "forward" in names or not names else names[0]


def _moved_words(copies: PhaseCopies, when: str) -> str:
    """What a phase copied, for a progress line: ``the load copied 256.1 MiB to devices``."""
    return (f"{when} copied {human_bytes(copies.h2d.nbytes)} to devices"
            + (f", {human_bytes(copies.d2h.nbytes)} back" if copies.d2h.nbytes else ""))


def run_program(pte_path: str | Path | ProgramBytes, *, ptd_path: Optional[str | Path] = None,
                method: Optional[str] = None,
                inputs: Any = None, calls: int = 1, simulate_devices: bool = False,
                profile: bool = False, opaque: OpaquePolicy = OpaquePolicy.NEVER,
                transcript: bool = False, on_call: Optional[Callable[[int, str], None]] = None) -> RunResult:
    """Load ``pte_path`` and run ``method`` ``calls`` times (inputs cycle through the given calls).

    ``inputs`` is a path to a torch.save file, the loaded object (``{method: [call, ...]}``, a list of
    calls, or one call), or None for deterministic synthetic inputs.  ``profile`` cross-checks the copy
    bytes with torch.profiler's memcpy events (real GPUs only).  ``opaque`` says which delegates run as
    opaque stand-ins; ``transcript`` records every delegate call (``CallResult.delegate_calls``).
    ``on_call(index, bytes)`` is called as each call starts (a progress display); ``bytes`` says in words what the
    call before copied (``256.1 MiB to devices, 32 KiB back``), or what the load did before the first call.
    """
    try:
        return _run_program(pte_path, ptd_path, method, inputs, calls, simulate_devices, profile, opaque,
                            transcript, on_call)
    except PteDevconstError as error:
        raise error.with_file(str(pte_path))
    finally:
        # A large program's arenas and maps go now, not at some later collection: the next program a validation
        # runs (the rewrite after the original) must not find them still held (``shared_memory.py``).  A small
        # one's wait: a collection costs tens of milliseconds, more than running it.
        if program_size(pte_path) >= COLLECT_FROM:
            gc.collect()


COLLECT_FROM = 16 << 20


def program_size(pte_path: str | Path | ProgramBytes) -> int:
    """A program's size in bytes: its file's, or the bytes held in memory (0 for a file that cannot be read)."""
    if isinstance(pte_path, ProgramBytes):
        return len(pte_path)
    try:
        return Path(pte_path).stat().st_size
    except OSError:
        return 0


def _run_program(pte_path: str | Path | ProgramBytes, ptd_path: Optional[str | Path], method: Optional[str],
                 inputs: Any,
                 calls: int, simulate_devices: bool, profile: bool, opaque: OpaquePolicy,
                 transcript: bool, on_call: Optional[Callable[[int, str], None]] = None) -> RunResult:
    if calls < 1:
        raise PteDevconstError(f"--calls must be at least 1, got {calls}")
    cuda = not simulate_devices and torch.cuda.is_available()
    if cuda:  # the device memory this program needs: its planned buffers, initial data and temporaries
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        baseline = torch.cuda.memory_allocated()
    with exact_float_math(), LoadedProgram(pte_path if isinstance(pte_path, ProgramBytes) else str(pte_path),
                                           str(ptd_path) if ptd_path else None,
                                           simulate_devices=simulate_devices, opaque=opaque,
                                           transcript=transcript) as program:
        name = default_method(program, method)
        loaded = program.load_method(name)
        call_inputs = resolve_inputs(inputs, name, loaded.plan)
        if not call_inputs:
            raise PteDevconstError("the inputs file holds no calls")
        ledger = program.ledger
        results: list[CallResult] = []
        for index in range(calls):
            if on_call is not None:
                copies = results[-1].copies if results else PhaseCopies.of(LOAD, ledger.of_phase(LOAD, name))
                on_call(index, _moved_words(copies, "the call before" if results else "the load"))
            phase = f"call {index}"
            ledger.phase, ledger.method = phase, name
            try:
                def one_call() -> list[Any]:
                    loaded.set_inputs(call_inputs[index % len(call_inputs)])
                    loaded.execute()
                    return loaded.outputs()

                program.devices.synchronize()
                start = time.perf_counter()
                if profile and not simulate_devices:
                    outputs, profiled = profile_call(one_call)
                else:
                    outputs, profiled = one_call(), None
                program.devices.synchronize()
                wall = time.perf_counter() - start
            except PteDevconstError as error:
                raise error.with_file(str(pte_path))
            results.append(CallResult(index, outputs, PhaseCopies.of(phase, ledger.of_phase(phase, name)), wall,
                                      profiled, loaded.finish_call()))
        load = PhaseCopies.of(LOAD, ledger.of_phase(LOAD, name))
        peak = torch.cuda.max_memory_allocated() - baseline if cuda else None
        return RunResult(str(pte_path), name, simulate_devices, load, results, list(ledger.events),
                         loaded.opaque_delegates, peak, delegates=loaded.delegate_runs,
                         caller_memory=loaded.caller_memory, observed_writes=tuple(loaded.observed_writes),
                         observed_arguments=loaded.observed_arguments)
