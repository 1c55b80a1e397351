"""Loading a program and running its methods instruction by instruction, as ``Method::execute`` does."""

from __future__ import annotations

import contextlib
from typing import Any, Iterator, Optional, Sequence

import torch

from pte_devconst.schema import model as m
from pte_devconst.program.dataflow import DelegateCallSite, delegate_call_sites
from pte_devconst.util.errors import PteDevconstError
from pte_devconst.program.kernel_effects import copy_slots, is_h2d_copy
from pte_devconst.schema.devices import TARGET_DEVICE_KEY
from pte_devconst.schema.scalar_types import scalar_type_name
from pte_devconst.schema.ptd_file import PtdFile
from pte_devconst.program.delegate_blobs import declared_splits, unbindable_calls
from pte_devconst.schema.pte_file import ProgramBytes, PteFile, open_pte

from .copies import LOAD, Cause, CopyLedger, Direction
from .derivation import Derivation
from .delegates import (DelegateArg, DelegateContext, DelegateExecutor, DelegateInitContext, DelegateRun, Execution,
                        OpaquePolicy, executor_for)
from .devices import DeviceMap, parse_target_device
from pte_devconst.program.dtypes import dim_order_strides, dtype_name, torch_dtype
from .kernels import Kernel, resolve_kernel
from .memory import CallerMemory, CallerRole, MethodMemory, ProgramData, check_fits, typed_view, zeros
from .shared_memory import RELEASE_FROM, release, span
from .digest import fetch_digests, tensor_digest
from .transcript import DelegateCallRecord, TranscriptRecorder, inputs_as_called
from pte_devconst.util.record import record
from .values import FREED, NOT_BOUND, ListKind, ListRef, RunnerError, RuntimeValues

MAX_INSTRUCTIONS = 10_000_000
# What a method may return: MethodMeta::output_tag knows no other kinds, so ExecuTorch's Python runtime
# fails to return a list (runtime/executor/method_meta.cpp).
OUTPUT_KINDS = (m.Tensor, m.Int, m.Double, m.Bool, m.String, m.Null)


@record
class _Delegate:
    executor: DelegateExecutor
    handle: Any
    backend_id: str
    target_device: m.Device
    execution: Execution  # what runs it: the ExecuTorch runtime, an executor, or an opaque stand-in
    why: str = ""  # why a delegate an executor was found for runs as a stand-in all the same

    @property
    def opaque(self) -> bool:
        """Runs as an opaque stand-in (runner/opaque.py), not through its backend or an executor of it."""
        return self.execution is Execution.STAND_IN


@record
class ObservedWrite:
    """A delegate call that changed an argument the program's reading says it only reads (seen in its bytes)."""

    chain: int
    instruction: int
    delegate: int
    backend_id: str
    value: int
    position: int

    def line(self) -> str:
        return (f"delegate {self.delegate} ({self.backend_id}) at chain {self.chain} instruction {self.instruction} "
                f"wrote argument {self.position} (value {self.value}), which the program's reading says it only "
                "reads")

    def to_json(self) -> dict[str, Any]:
        return {"chain": self.chain, "instruction": self.instruction, "delegate": self.delegate,
                "backend": self.backend_id, "value": self.value, "argument": self.position, "line": self.line()}


def describe(tensor: m.Tensor) -> str:
    return f"{scalar_type_name(tensor.scalar_type)}{list(tensor.sizes or ())}"


class LoadedMethod:
    """One method with its memory laid out, constants bound, initial data loaded and delegates initialized.

    ``opaque`` says which delegates run as opaque stand-ins; with ``transcript`` every DelegateCall is
    recorded (``runner/transcript.py``) and ``finish_call`` returns a call's records.
    """

    def __init__(self, data: ProgramData, plan: m.ExecutionPlan, devices: DeviceMap, ledger: CopyLedger,
                 opaque: OpaquePolicy = OpaquePolicy.NEVER, transcript: bool = False) -> None:
        self.plan = plan
        self.name = plan.name or ""
        self.devices = devices
        self.ledger = ledger
        ledger.phase, ledger.method = LOAD, self.name
        self.where = f"method {self.name!r}"
        for position, index in enumerate(plan.outputs or ()):
            kind = (plan.values or ())[index]
            if not isinstance(kind, OUTPUT_KINDS):
                raise RunnerError(f"output {position} (value {index}) is a {type(kind).__name__}: ExecuTorch returns "
                                  "only tensors, ints, doubles, bools, strings and None from a method",
                                  where=self.where)
        self.memory = MethodMemory(plan, devices, self.name)
        self.rv = RuntimeValues(self.name, len(plan.values or ()), devices, ledger, plan.values or ())
        for index, value in enumerate(plan.values or ()):
            self._load_value(data, index, value)
        sites = delegate_call_sites(plan)
        self.call_sites: dict[tuple[int, int], DelegateCallSite] = {(site.chain, site.instruction): site
                                                                    for site in sites}
        self.caller_memory = self._bind_caller_memory(sites)
        self.derivation = Derivation(plan)
        self.rv.derivation = self.derivation
        self.opaque_policy = opaque
        by_delegate: dict[int, list[DelegateCallSite]] = {}
        for site in sites:
            by_delegate.setdefault(site.delegate_index, []).append(site)
        self.delegates = [self._init_delegate(data, i, d, tuple(by_delegate.get(i, ())))
                          for i, d in enumerate(plan.delegates or ())]
        self.transcript = TranscriptRecorder() if transcript else None
        self._write_checks: list[tuple[int, int, int, str, int, int, torch.Tensor, torch.Tensor]] = []
        self.observed_writes: list[ObservedWrite] = []  # over every call so far
        self.observed_arguments = 0  # read-only arguments digested after their calls, over every call
        # value -> the value an _h2d_copy last filled it from: kept across calls, as the bytes are (a run-once
        # region's copies fill their destinations on the first call only)
        self.h2d_source: dict[int, int] = {}
        self.kernels: dict[int, Kernel] = {}
        for chain in plan.chains or ():
            for instruction in chain.instructions or ():
                if isinstance(instruction, m.KernelCall) and instruction.op_index not in self.kernels:
                    operators = plan.operators or ()
                    if not 0 <= instruction.op_index < len(operators):
                        raise RunnerError(f"op_index {instruction.op_index} is out of range", where=self.where)
                    self.kernels[instruction.op_index] = resolve_kernel(operators[instruction.op_index], self.where)
        self.h2d_ops = frozenset(i for i in self.kernels if is_h2d_copy((self.plan.operators or ())[i].qualified_name))
        # Constants large enough that their pages are given back once an instruction has read them (memory.py):
        # the runner then holds a model once, in its planned memory, as a device runtime does.
        self.large_constants = frozenset(
            index for index, value in enumerate(plan.values or ()) if isinstance(value, m.Tensor)
            and value.is_constant and value.allocation_info is None and value.nbytes >= RELEASE_FROM)

    @property
    def opaque_delegates(self) -> dict[int, str]:
        """Delegate index -> backend id of the delegates that run as opaque stand-ins."""
        return {i: d.backend_id for i, d in enumerate(self.delegates) if d.opaque}

    @property
    def delegate_runs(self) -> tuple[DelegateRun, ...]:
        """How each delegate runs (the ExecuTorch runtime, an executor, a stand-in), for the reports."""
        return tuple(DelegateRun(i, d.backend_id, str(d.target_device), d.execution, d.why)
                     for i, d in enumerate(self.delegates))

    # --- load -------------------------------------------------------------

    def _load_value(self, data: ProgramData, index: int, value: m.EValue) -> None:
        where = f"{self.where}: value {index}"
        rv = self.rv
        if isinstance(value, m.Tensor):
            if value.storage_offset:
                raise RunnerError("tensors with a non-zero storage_offset are not supported", where=where)
            if value.shape_dynamism == m.TensorShapeDynamism.DYNAMIC_UNBOUND:
                raise RunnerError("DYNAMIC_UNBOUND tensors are not supported (ExecuTorch rejects them too)",
                                  where=where)
            if value.allocation_info is not None:
                view, device = self.memory.planned(value, where)
                rv.set(index, view, device)
                if value.has_initial_data:
                    data.load_initial_data(value, view, where)
                    if not device.is_cpu:
                        self.ledger.record(Direction.H2D, Cause.LOAD_INITIAL_DATA, value.nbytes, str(device), index)
            elif value.is_constant:
                rv.set(index, data.constant(value, where), m.CPU)
            else:
                rv.set(index, NOT_BOUND, None)
        elif isinstance(value, (m.Null, type(None))):
            rv.set(index, None)
        elif isinstance(value, m.Int):
            rv.set(index, int(value.int_val))
        elif isinstance(value, m.Bool):
            rv.set(index, bool(value.bool_val))
        elif isinstance(value, m.Double):
            rv.set(index, float(value.double_val))
        elif isinstance(value, m.String):
            rv.set(index, value.string_val)
        elif isinstance(value, (m.DoubleList, m.BoolList)):
            rv.set(index, list(value.items or ()))
        elif isinstance(value, m.IntList):
            rv.set(index, ListRef(ListKind.INT, tuple(value.items or ())))
        elif isinstance(value, m.TensorList):
            rv.set(index, ListRef(ListKind.TENSOR, tuple(value.items or ())))
        elif isinstance(value, m.OptionalTensorList):
            rv.set(index, ListRef(ListKind.OPTIONAL_TENSOR, tuple(value.items or ())))
        else:  # pragma: no cover - the decoder knows no other kinds
            raise RunnerError(f"unsupported value kind {type(value).__name__}", where=where)

    def _bind_caller_memory(self, sites: Sequence[DelegateCallSite]) -> tuple[CallerMemory, ...]:
        """Bind the tensors the program leaves to its caller: unplanned, no constant, no method input.

        * A method output (``MemoryPlanningPass(alloc_graph_output=False)``): its memory is the caller's, bound
          with ``Method::set_output_data_ptr`` before ``execute``.  ExecuTorch's Python runtime allocates one
          zero-filled host buffer per such output, of the output's (upper-bound) size, once per loaded method
          (``pybindings.cpp``: ``allocate_output_storages``); so does the runner.
        * A delegate's output: with ``alloc_graph_output=False`` in copy style, 1.5.1's exporter plans the
          ``_d2h_copy`` destinations the method returns and leaves the device delegate outputs they copy
          unplanned (it takes those for the method's outputs).  Nothing in the runtime's API binds them; the
          runner does what a caller with a device allocator would: one zero-filled buffer per such value on the
          delegate's device, once per loaded method.  The reports list them.

        An output that is also a method input is bound by the input instead.
        """
        values = self.plan.values or ()
        inputs = set(self.plan.inputs or ())
        wanted: dict[int, tuple[m.Device, CallerRole, Optional[int]]] = {}
        for index in self.plan.outputs or ():
            wanted.setdefault(index, (m.CPU, CallerRole.OUTPUT, None))
        for site in sites:
            for index in site.outputs:
                if index not in wanted and 0 <= site.delegate_index < len(self.plan.delegates or ()):
                    wanted[index] = (self._delegate_specs(site.delegate_index)[1], CallerRole.DELEGATE_OUTPUT,
                                     site.delegate_index)
        bound = [CallerMemory(index, device, spec.nbytes, role, delegate)
                 for index, (device, role, delegate) in wanted.items()
                 if 0 <= index < len(values) and index not in inputs and isinstance(spec := values[index], m.Tensor)
                 and self.rv.values[index] is NOT_BOUND]
        check_fits(self.name, sum(caller.nbytes for caller in bound), "caller-owned tensors")
        for caller in bound:
            spec = values[caller.value]
            assert isinstance(spec, m.Tensor)  # chosen above
            where = f"{self.where}: {caller.role} value {caller.value}"
            storage = zeros(caller.nbytes, self.devices.physical(caller.device), self.name,
                            f"caller-owned value {caller.value} on {caller.device}")
            self.rv.set(caller.value, typed_view(storage, 0, spec, where), caller.device)
        return tuple(bound)

    def _delegate_specs(self, index: int) -> tuple[dict[str, bytes], m.Device, str]:
        """Delegate ``index``'s compile specs, its target device (CPU without a spec) and where it is."""
        delegate = (self.plan.delegates or ())[index]
        where = f"{self.where}: delegate {index} ({delegate.id or ''})"
        specs = {spec.key or "": bytes(spec.value or b"") for spec in delegate.compile_specs or ()}
        return specs, parse_target_device(specs.get(TARGET_DEVICE_KEY), where), where

    def _init_delegate(self, data: ProgramData, index: int, delegate: m.BackendDelegate,
                       sites: tuple[DelegateCallSite, ...]) -> _Delegate:
        """The delegate's executor, initialized.  A backend that fails to initialize is an error with the backend's
        own message (a backend the installed runtime registers is never replaced by a stand-in behind the
        user's back: the stand-in would pass a program the real backend refuses)."""
        backend = delegate.id or ""
        specs, target, where = self._delegate_specs(index)
        self.devices.physical(target)  # fails early, with the --simulate-devices hint, when the GPU is missing
        executor, execution = executor_for(backend, where, self.opaque_policy)
        context = DelegateInitContext(backend, target, self.devices, self.ledger, data.named_data, where, index,
                                      sites, self.plan.values or (), data.named_keys())
        blob = bytes(data.pte.delegate_blob(delegate))
        with _executor_errors(backend, "init", where):
            return _Delegate(executor, executor.init(blob, specs, context), backend, target, execution)

    # --- inputs and outputs -------------------------------------------------

    def set_inputs(self, inputs: Sequence[Any]) -> None:
        plan_inputs = tuple(self.plan.inputs or ())
        if len(inputs) != len(plan_inputs):
            raise RunnerError(f"method {self.name!r} takes {len(plan_inputs)} inputs, {len(inputs)} given")
        for position, (index, given) in enumerate(zip(plan_inputs, inputs)):
            self._set_input(position, index, given)

    def _set_input(self, position: int, index: int, given: Any) -> None:
        where = f"{self.where}: input {position}"
        self.derivation.set((index,), False, self.rv)
        spec = (self.plan.values or ())[index]
        if isinstance(spec, m.Tensor):
            if not isinstance(given, torch.Tensor):
                raise RunnerError(f"expected a tensor {describe(spec)}, got {type(given).__name__}", where=where)
            dtype = torch_dtype(spec.scalar_type, where)
            sizes = tuple(spec.sizes or ())
            shape = tuple(given.shape)
            if given.dtype != dtype:
                raise RunnerError(f"expected dtype {dtype_name(dtype)}, got {dtype_name(given.dtype)} "
                                  f"(shape {list(shape)})", where=where)
            dynamic = spec.shape_dynamism == m.TensorShapeDynamism.DYNAMIC_BOUND
            if shape != sizes and not (dynamic and len(shape) == len(sizes)
                                       and all(a <= b for a, b in zip(shape, sizes))):
                raise RunnerError(f"expected shape {list(sizes)}{' (upper bounds)' if dynamic else ''}, "
                                  f"got {list(shape)}", where=where)
            if spec.allocation_info is not None:
                view, device = self.memory.planned(spec, where)
                if shape != sizes:  # DYNAMIC_BOUND: the same memory, the current shape
                    view = view.as_strided(shape, dim_order_strides(shape, tuple(spec.dim_order or ())))
                view.copy_(given)
                self.rv.set(index, view, device)
                if not device.is_cpu:
                    self.ledger.record(Direction.H2D, Cause.METHOD_INPUT, view.numel() * view.element_size(),
                                       str(device), index, False)
            else:
                device = spec.device
                bound = given.detach()
                if not device.is_cpu:
                    bound = bound.to(self.devices.physical(device))
                    self.ledger.record(Direction.H2D, Cause.METHOD_INPUT, given.numel() * given.element_size(),
                                       str(device), index, False)
                self.rv.set(index, bound, device)
        else:
            traced = self.rv.values[index]
            if isinstance(given, torch.Tensor) and given.numel() == 1:
                given = given.item()
            if given != traced:
                raise RunnerError(f"this input was traced as the constant {traced!r}; got {given!r}", where=where)

    def outputs(self) -> list[Any]:
        """The method outputs, copied to host memory (counted when they live on a device)."""
        result = []
        for index in self.plan.outputs or ():
            value = self.rv.get(index, f"{self.where}: output value {index}")
            if isinstance(value, torch.Tensor):
                device = self.rv.device_of(index)
                if not device.is_cpu:
                    self.ledger.record(Direction.D2H, Cause.METHOD_OUTPUT, value.numel() * value.element_size(),
                                       str(device), index)
                value = value.detach().to("cpu", copy=True)
            result.append(value)
        return result

    # --- execution -----------------------------------------------------------

    def execute(self) -> None:
        executed = 0
        for chain_index, chain in enumerate(self.plan.chains or ()):
            instructions = chain.instructions or ()
            pc = 0
            while pc < len(instructions):
                executed += 1
                if executed > MAX_INSTRUCTIONS:
                    raise RunnerError(f"more than {MAX_INSTRUCTIONS} instructions executed (a jump loop?)",
                                      where=self.where)
                where = f"{self.where}: chain {chain_index} instruction {pc}"
                pc = self._step(instructions[pc], chain_index, pc, where)
                if not 0 <= pc <= len(instructions):
                    raise RunnerError(f"jump to instruction {pc} leaves the chain ({len(instructions)} instructions)",
                                      where=self.where)

    def finish_call(self) -> tuple[DelegateCallRecord, ...]:
        """The delegate calls of the call just made, digests fetched (empty without a transcript); the writes
        observed in read-only arguments go to ``observed_writes``.

        Call it after the call, outside any timed or profiled region: it moves the digests to the host.
        """
        checks, self._write_checks = self._write_checks, []
        self.observed_arguments += len(checks)
        if checks:
            fetched = fetch_digests([d for check in checks for d in check[-2:]])
            for k, (chain, pc, delegate, backend, index, position, _, _) in enumerate(checks):
                if fetched[2 * k] != fetched[2 * k + 1]:
                    self.observed_writes.append(ObservedWrite(chain, pc, delegate, backend, index, position))
        return self.transcript.finish() if self.transcript is not None else ()

    def _step(self, instruction: m.Instruction, chain: int, pc: int, where: str) -> int:
        rv = self.rv
        if isinstance(instruction, m.KernelCall):
            kernel = self.kernels[instruction.op_index]
            args = tuple(instruction.args or ())
            name = (self.plan.operators or ())[instruction.op_index].qualified_name
            kernel(rv, args, f"{where} ({name})")
            self.derivation.kernel(rv, name, kernel, args)
            if instruction.op_index in self.h2d_ops and (slots := copy_slots(name, args)) is not None:
                self.h2d_source[slots.out] = slots.source  # the out argument only: the return slot is never written
            self._release(args)
        elif isinstance(instruction, m.DelegateCall):
            self._delegate_call(instruction, chain, pc, where)
            self._release(tuple(instruction.args or ()))
        elif isinstance(instruction, m.MoveCall):
            rv.get(instruction.move_from, where)
            rv.set(instruction.move_to, rv.values[instruction.move_from], rv.residence[instruction.move_from])
            self.derivation.move(instruction.move_from, instruction.move_to)
        elif isinstance(instruction, m.JumpFalseCall):
            cond = rv.get(instruction.cond_value_index, where)
            if isinstance(cond, torch.Tensor):
                if cond.dtype != torch.bool:
                    raise RunnerError(f"jump condition value {instruction.cond_value_index} is a "
                                      f"{dtype_name(cond.dtype)} tensor, not bool", where=where)
                cond = bool(cond.all())
            elif not isinstance(cond, bool):
                raise RunnerError(f"jump condition value {instruction.cond_value_index} is not a Bool", where=where)
            return pc + 1 if cond else instruction.destination_instruction
        elif isinstance(instruction, m.FreeCall):
            rv.set(instruction.value_index, FREED, None)
        else:
            raise RunnerError("empty instruction", where=where)
        return pc + 1

    def _release(self, args: tuple[int, ...]) -> None:
        """Give back the mapped pages of the large constants an instruction read (they stay the file's)."""
        for index in args:
            if index in self.large_constants:
                value = self.rv.values[index]
                if isinstance(value, torch.Tensor):
                    release(value)

    def _delegate_call(self, call: m.DelegateCall, chain: int, pc: int, where: str) -> None:
        if not 0 <= call.delegate_index < len(self.delegates):
            raise RunnerError(f"delegate_index {call.delegate_index} is out of range", where=where)
        delegate = self.delegates[call.delegate_index]
        where = f"{where} (delegate {call.delegate_index}, {delegate.backend_id})"
        args = [DelegateArg(i, self.rv.get(i, where), self.rv.residence[i]) for i in call.args or ()]
        site = self.call_sites.get((chain, pc))
        read = site.read if site is not None else None
        as_called = inputs_as_called(args, read) if self.transcript is not None else None
        context = DelegateContext(delegate.backend_id, delegate.target_device, self.devices, self.ledger, where,
                                  read, call.delegate_index, as_called, values=self.rv)
        with _executor_errors(delegate.backend_id, "execute", where):
            delegate.executor.execute(delegate.handle, args, context)
        if as_called and not delegate.opaque:
            # What the delegate really wrote: each argument the program says it only reads, digested again after
            # the call.  A backend that binds its arguments otherwise than the program's reading (a blob's ids,
            # a wrong declaration) shows here, whatever the analysis took on trust (fetched after the call).
            # An argument whose bytes a written one shares (an output planned over an input) is written by design.
            read_positions = frozenset(read or ())
            written = [span(arg.value) for position, arg in enumerate(args)
                       if position not in read_positions and isinstance(arg.value, torch.Tensor)]
            seen: set[int] = set()
            for position, arg in enumerate(args):
                before = as_called.get(arg.index)
                if before is None or arg.index in seen or not isinstance(arg.value, torch.Tensor):
                    continue
                seen.add(arg.index)  # a value passed twice is looked at once, at its first position
                start, end = span(arg.value)
                if not any(start < end_w and start_w < end for start_w, end_w in written):
                    self._write_checks.append((chain, pc, call.delegate_index, delegate.backend_id, arg.index,
                                               position, before, tensor_digest(arg.value)))
        if site is not None:
            self.derivation.delegate(self.rv, site.inputs, site.outputs)
        if self.transcript is not None:
            self.transcript.record(chain, pc, call.delegate_index, delegate.backend_id, delegate.opaque, args,
                                   self.h2d_source, context.input_digests, self.rv.constant_derived)


@contextlib.contextmanager
def _executor_errors(backend_id: str, step: str, where: str) -> Iterator[None]:
    """An executor failing on what a program gives it (torch refusing mismatched shapes, a blob it cannot
    read) is one error naming the delegate, as a backend fails its ``execute`` in ExecuTorch."""
    try:
        yield
    except (IndexError, KeyError, RuntimeError, TypeError, ValueError) as error:
        raise RunnerError(f"{backend_id} {step} failed: {' '.join(str(error).split())[:300] or type(error).__name__}",
                          where=where) from None


def refuse_unbindable(pte: PteFile, file: str) -> None:
    """A program with a delegate call its blob binds past (``delegate_blobs.unbindable_calls``) is refused before
    anything runs (``run``, and ``validate`` in both engines): its backend would read memory that is no argument,
    and what a run then shows (a crash, the backend's refusal, or plausible numbers) depends on the machine, not on
    the program."""
    plans = pte.program.execution_plan or ()
    found = unbindable_calls(plans, [plan.name or "" for plan in plans],
                             declared_splits(pte.program, pte.delegate_blob))
    if found:
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        raise PteDevconstError(f"{found[0]}{more}: pte-devconst does not run such a program (inspect and "
                               "check name every such delegate)", file=file)


class LoadedProgram:
    """An opened .pte (plus optional .ptd) whose methods load on demand; close it when done."""

    def __init__(self, pte_path: "str | ProgramBytes", ptd_path: Optional[str] = None, *,
                 simulate_devices: bool = False, opaque: OpaquePolicy = OpaquePolicy.NEVER,
                 transcript: bool = False) -> None:
        self.opaque = opaque
        self.transcript = transcript
        self.pte = open_pte(pte_path)  # a path, or a program in memory (ProgramBytes)
        try:
            refuse_unbindable(self.pte, self.pte.path)
            self.ptd = PtdFile.open(ptd_path) if ptd_path else None
        except BaseException:
            self.pte.close()
            raise
        self.data = ProgramData(self.pte, self.ptd)
        self.devices = DeviceMap(simulate_devices)
        self.ledger = CopyLedger()
        self.methods: dict[str, LoadedMethod] = {}

    @property
    def method_names(self) -> list[str]:
        return [plan.name or "" for plan in self.pte.program.execution_plan or ()]

    def load_method(self, name: str) -> LoadedMethod:
        if name not in self.methods:
            try:
                plan = self.pte.program.plan(name)
            except KeyError:
                raise RunnerError(f"the program has no method {name!r} (it has: {', '.join(self.method_names)})",
                                  file=self.pte.path) from None
            try:
                self.methods[name] = LoadedMethod(self.data, plan, self.devices, self.ledger, self.opaque,
                                                  self.transcript)
            except PteDevconstError as error:
                raise error.with_file(self.pte.path)
        return self.methods[name]

    def close(self) -> None:
        self.methods.clear()
        self.data = None  # type: ignore[assignment]
        if self.ptd is not None:
            self.ptd.close()
        self.pte.close()

    def __enter__(self) -> "LoadedProgram":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
