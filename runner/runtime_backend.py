"""Delegates the installed ExecuTorch runtime executes for real (XNNPACK in the 1.5.1 wheel).

When ``executorch`` is importable, the runner asks its runtime which backends it registers and can use
(``Runtime.get().backend_registry``: registered and ``is_available``); a delegate of such a backend that has
no executor of the runner's own runs through the runtime: at load, the runner writes a program around the
delegate (``one_delegate.py``: the same blob, compile specs and named data, one method per call), loads it
with ``executorch.runtime`` and loads each method; at each call it passes the call's inputs in and writes the
method's outputs into the call's outputs.  The outputs are the backend's own, bit for bit.

At its boundary the delegate is counted as any executor's is (``DelegateContext``): inputs whose memory is
not on its ``target_device`` are copied there, outputs written into host memory from a device count.  The
runtime itself runs on the host; on a real GPU a delegate tagged with a device passes its arguments through
host memory, which the ledger does not count (``--profile`` sees it).

The runtime's own log lines (XNNPACK's CPU probing, a failed method's reason) go to the process's stderr
from C++; the runner collects them while it calls the runtime and quotes the last ones in its error when a
call fails, so a run prints nothing of them otherwise.
"""

from __future__ import annotations

import contextlib
import functools
import io
import os
import sys
import tempfile
from typing import Any, Iterator, Mapping

import torch

from pte_devconst.util.record import record

from .delegates import DelegateArg, DelegateContext, DelegateExecutor, DelegateInitContext
from .one_delegate import CallMethod, delegate_program
from .values import RunnerError

LOG_LINES = 3  # of the runtime's log, quoted in an error


@functools.lru_cache(maxsize=1)
def runtime_backends() -> frozenset[str]:
    """The backends the installed ExecuTorch runtime registers and can use; empty without ``executorch``."""
    try:
        with RuntimeLog().capture():
            from executorch.runtime import Runtime

            registry = Runtime.get().backend_registry
            return frozenset(name for name in registry.registered_backend_names if registry.is_available(name))
    except Exception:  # noqa: BLE001 - no executorch, or one that does not load: nothing executes for real
        return frozenset()


def runtime_version() -> str:
    """The installed ``executorch`` distribution's version, as reports name the runtime."""
    from importlib import metadata

    try:
        return metadata.version("executorch")
    except metadata.PackageNotFoundError:
        return "unknown"


class RuntimeLog:
    """Where the runtime's log goes while the runner calls it: ExecuTorch's Python bindings write it to
    ``sys.stderr``, native code (XNNPACK's CPU probing) to file descriptor 2; both are collected, and
    ``last_lines`` quotes the end of it in an error."""

    def __init__(self) -> None:
        self.native = tempfile.TemporaryFile()
        self.text = io.StringIO()

    @contextlib.contextmanager
    def capture(self) -> Iterator[None]:
        """Collect (and keep from the terminal) everything the runtime logs inside the block."""
        self.native.seek(0)
        self.native.truncate()
        self.text = io.StringIO()
        sys.stderr.flush()
        saved_fd, saved_stream = os.dup(2), sys.stderr
        try:
            os.dup2(self.native.fileno(), 2)
            sys.stderr = self.text
            yield
        finally:
            sys.stderr = saved_stream
            os.dup2(saved_fd, 2)
            os.close(saved_fd)

    def last_lines(self) -> str:
        """The last log lines, on one line."""
        self.native.seek(0)
        written = self.native.read().decode("utf-8", "replace") + self.text.getvalue()
        lines = [line.strip() for line in written.splitlines() if line.strip()]
        return " | ".join(lines[-LOG_LINES:])[:400]


@record
class RuntimeHandle:
    """What ``init`` made: the loaded program (kept alive), its methods, and the log sink."""

    program: Any
    methods: Mapping[tuple[int, ...], tuple[CallMethod, Any]]
    log: RuntimeLog


class RuntimeExecutor(DelegateExecutor):
    """Runs a delegate through the installed ExecuTorch runtime, in a program of its own (module docstring)."""

    backend_id = ""  # any backend that runtime_backends() lists: chosen by the registry, never by id

    @contextlib.contextmanager
    def _runtime_call(self, log: RuntimeLog, what: str, where: str) -> Iterator[None]:
        """The runtime's log collected in ``log``; a failure is one error quoting its reason and the log."""
        try:
            with log.capture():
                yield
        except (RuntimeError, ValueError, TypeError, IndexError, KeyError) as error:
            quoted = log.last_lines()
            message = " ".join(str(error).split())[:300] or type(error).__name__
            raise RunnerError(f"the ExecuTorch runtime failed to {what}: {message}"
                              + (f" (runtime log: {quoted})" if quoted else ""), where=where) from None

    def init(self, blob: bytes, compile_specs: dict[str, bytes], context: DelegateInitContext) -> RuntimeHandle:
        built = delegate_program(context.backend_id, blob, compile_specs, context.call_sites, context.values,
                                 context.named_data, context.named_keys, where=context.where)
        data = built.to_bytes()
        log = RuntimeLog()
        from executorch.runtime import Runtime

        with self._runtime_call(log, "load the delegate", context.where):
            program = Runtime.get().load_program(data)
            methods = {args: (call, program.load_method(call.name)) for args, call in built.methods.items()}
        return RuntimeHandle(program, methods, log)

    def execute(self, handle: RuntimeHandle, args: list[DelegateArg], context: DelegateContext) -> None:
        key = tuple(arg.index for arg in args)
        if key not in handle.methods:
            raise RunnerError("a call the program did not list at load reached the runtime executor",
                              where=context.where)
        call, method = handle.methods[key]
        by_value = {arg.index: arg for arg in args}
        for index, traced in call.literals:
            if by_value[index].value != traced:
                raise RunnerError(f"argument value {index} is {by_value[index].value!r} at run time, and the "
                                  f"ExecuTorch runtime's program holds {traced!r}", where=context.where)
        inputs = []
        for index in call.inputs:
            value = context.input(by_value[index])  # counted, as the delegate's boundary copies it
            inputs.append(value.cpu() if isinstance(value, torch.Tensor) else value)
        with self._runtime_call(handle.log, "execute the delegate", context.where):
            results = method.execute(inputs)
        if len(results) != len(call.outputs):
            raise RunnerError(f"the ExecuTorch runtime returned {len(results)} outputs, {len(call.outputs)} expected",
                              where=context.where)
        for index, result in zip(call.outputs, results):
            if isinstance(result, torch.Tensor):
                context.output(by_value[index], result)
