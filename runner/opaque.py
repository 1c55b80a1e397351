"""Opaque delegates: a deterministic stand-in for a backend the runner cannot execute.

A CUDA delegate ships an AOTInductor library, a TensorRT delegate an engine;
only their own runtimes can run them.  What a rewrite must preserve does not
need them: every call of every delegate must receive the same inputs.  So a
delegate without an executor can run as an *opaque* function whose outputs are
filled from a seeded generator, the seed being a digest of

* the backend id, the processed blob and the delegate index (at init), and
* the dtype, shape and bytes of every input (at each call), and the value of
  every non-tensor input.

Two programs then compute the same stand-ins exactly when every call of every
delegate gets the same inputs.  Values (``digest.fill_standin``): floats uniform
in [0.5, 1.5], integers 0 (safe to index any non-empty dimension), bools seeded.
Outputs take the dtype and shape the program plans for them (for a dynamic shape
its upper bound).  Non-tensor outputs (a returned SymInt) keep their traced
value.

At its boundary an opaque delegate behaves like a device delegate: inputs whose
memory is elsewhere are copied to its ``target_device`` and results are written
into the planned outputs, both counted, through ``DelegateContext``.  Where
inputs end and outputs begin comes from the program (``program/dataflow.py``),
passed in as ``context.read`` (argument positions).  Everything runs on the delegate's device
and nothing is fetched to the host during the call (see ``digest.py``).
"""

from __future__ import annotations

from typing import Any

import torch

from .delegates import DelegateArg, DelegateContext, DelegateExecutor, DelegateInitContext
from .digest import fill_standin, host_seed, mix, tensor_digest
from pte_devconst.program.dtypes import dtype_name
from pte_devconst.util.record import record
from .transcript import list_digest, literal
from .values import RunnerError


@record
class OpaqueHandle:
    seed: int  # from backend id, blob and delegate index


def _describe(value: Any) -> bytes:
    """Host-side identity of one input: a tensor's dtype and shape, or a literal's type and value (a list's
    tensors by dtype and shape: their bytes go into the digests)."""
    if isinstance(value, torch.Tensor):
        return f"tensor {dtype_name(value.dtype)} {list(value.shape)}".encode()
    return f"{type(value).__name__} {literal(value)}".encode()


class OpaqueExecutor(DelegateExecutor):
    """Runs any backend's delegate as a deterministic function of its inputs (see the module docstring)."""

    backend_id = ""  # any: chosen by OpaquePolicy, never by id

    def init(self, blob: bytes, compile_specs: dict[str, bytes], context: DelegateInitContext) -> OpaqueHandle:
        return OpaqueHandle(host_seed(context.backend_id.encode(), bytes(blob),
                                      str(context.delegate_index).encode()))

    def execute(self, handle: OpaqueHandle, args: list[DelegateArg], context: DelegateContext) -> None:
        if context.read is None:
            raise RunnerError("an opaque delegate needs the program's input/output split", where=context.where)
        read = frozenset(context.read)
        inputs = [arg for position, arg in enumerate(args) if position in read]
        outputs = [arg for position, arg in enumerate(args) if position not in read]
        device = context.torch_device
        descriptions = [_describe(arg.value) for arg in inputs]
        digests = []
        for arg in inputs:
            value = context.input(arg)  # counted, like a device delegate reading host memory
            known = context.input_digests.get(arg.index)  # taken as the call started, when the method records
            if isinstance(value, torch.Tensor):
                digests.append(known if known is not None else tensor_digest(value))
            elif (listed := known if known is not None else list_digest(value)) is not None:
                digests.append(listed.to(device))
        state = mix(host_seed(str(handle.seed).encode(), *descriptions), digests, device)
        for position, arg in enumerate(outputs):
            if isinstance(arg.value, torch.Tensor):
                context.output(arg, fill_standin(arg.value, mix(state, [position], device)))
