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

The runtime runs in a child process (``isolated.py``): a backend that crashes (a blob that does not match its
call site, a hostile one) ends the child, and the runner reports the delegate and the signal; a backend that
refuses to load is reported with its own message, never replaced by a stand-in.  The runtime's own log lines
(XNNPACK's CPU probing, a failed method's reason) are collected there and the last ones quoted in an error.
"""

from __future__ import annotations

import contextlib
import functools
import io
import os
import sys
import tempfile
import weakref
from typing import Iterator, Mapping

import torch

from .delegates import DelegateArg, DelegateContext, DelegateExecutor, DelegateInitContext
from .one_delegate import CallMethod, delegate_program
from .isolated import RuntimeWorker, log_tail
from .staging import staged_program
from .shared_memory import SLACK, SharedTensor, describe, locate, span
from .values import RunnerError

# XNNPACK may read this many bytes past the end of an input (XNN_EXTRA_BYTES): an argument passed in place must
# have them inside its region, or it is passed by value.
XNN_EXTRA_BYTES = 16


@functools.lru_cache(maxsize=1)
def runtime_backends() -> frozenset[str]:
    """The backends the installed ExecuTorch runtime registers and can use (asked of the child that runs it,
    ``isolated.py``); empty without ``executorch``, or with one that does not load."""
    import importlib.util

    if importlib.util.find_spec("executorch") is None:
        return frozenset()
    from .isolated import worker

    try:
        _, names = worker().request("backends", what="list its backends")
    except RunnerError:
        return frozenset()
    return frozenset(names)


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
        return log_tail(self.native.read().decode("utf-8", "replace") + self.text.getvalue())


class RuntimeHandle:
    """What ``init`` made: the program the child holds (by its key) and the method of each call.  When the
    handle goes, the child lets the program go (at the next request: never in the middle of one)."""

    __slots__ = ("__weakref__", "key", "methods")

    def __init__(self, key: int, methods: Mapping[tuple[int, ...], CallMethod]) -> None:
        self.key = key
        self.methods = methods
        weakref.finalize(self, _DROPPED.append, key)


_DROPPED: list[int] = []  # keys of programs no handle holds any more


def _drop_released() -> None:
    from .isolated import worker

    while _DROPPED:
        worker().request("drop", _DROPPED.pop(), what="let a program go")


def _argument(child: "RuntimeWorker", value: torch.Tensor, where: str) -> "torch.Tensor | SharedTensor":
    """How an input tensor reaches the child: where it lies in a region the child maps (no copy), else its own
    bytes (a compact copy, never the whole storage a view belongs to, which a pickle of the view would carry)."""
    found = locate(value)
    if found is not None:
        region, offset = found
        _, end = span(value)
        room = region.size + (SLACK if region.shared else 0) - (offset + end - value.data_ptr())
        if offset % value.element_size() == 0 and room >= XNN_EXTRA_BYTES:
            child.share(region, where)
            return describe(value, region, offset)
    return value.detach().to("cpu", copy=True).contiguous()


class RuntimeExecutor(DelegateExecutor):
    """Runs a delegate through the installed ExecuTorch runtime, in a program of its own (module docstring), in
    the child process that runs the runtime (``isolated.py``): a crash there is this delegate's error."""

    backend_id = ""  # any backend that runtime_backends() lists: chosen by the registry, never by id

    def init(self, blob: bytes, compile_specs: dict[str, bytes], context: DelegateInitContext) -> RuntimeHandle:
        from .isolated import worker

        built = delegate_program(context.backend_id, blob, compile_specs, context.call_sites, context.values,
                                 context.named_data, context.named_keys, where=context.where)
        _drop_released()
        child = worker()
        key = child.key()
        with staged_program(built.program, built.contents) as path:  # loaded from a file: the runtime maps it
            child.request("load", key, path, None, what=f"load the delegate ({context.backend_id})",
                          where=context.where)
            for call in built.methods.values():
                child.request("load_method", key, call.name, what=f"load the delegate ({context.backend_id})",
                              where=context.where)
        return RuntimeHandle(key, built.methods)

    def execute(self, handle: RuntimeHandle, args: list[DelegateArg], context: DelegateContext) -> None:
        from .isolated import worker

        key = tuple(arg.index for arg in args)
        if key not in handle.methods:
            raise RunnerError("a call the program did not list at load reached the runtime executor",
                              where=context.where)
        call = handle.methods[key]
        by_value = {arg.index: arg for arg in args}
        for index, traced in call.literals:
            if by_value[index].value != traced:
                raise RunnerError(f"argument value {index} is {by_value[index].value!r} at run time, and the "
                                  f"ExecuTorch runtime's program holds {traced!r}", where=context.where)
        child = worker()
        inputs = []
        for index in call.inputs:
            value = context.input(by_value[index])  # counted, as the delegate's boundary copies it
            inputs.append(_argument(child, value, context.where) if isinstance(value, torch.Tensor) else value)
        results = child.request("execute", handle.key, call.name, inputs,
                                what=f"execute the delegate ({context.backend_id})", where=context.where)
        if len(results) != len(call.outputs):
            raise RunnerError(f"the ExecuTorch runtime returned {len(results)} outputs, {len(call.outputs)} expected",
                              where=context.where)
        for index, result in zip(call.outputs, results):
            if isinstance(result, torch.Tensor):
                context.output(by_value[index], result)
