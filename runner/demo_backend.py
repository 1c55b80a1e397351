"""Executor for ExecuTorch's test backend ``BackendWithCompilerDemo`` (all corpus device programs use it).

Blob (``exir/backend/test/backend_with_compiler_demo.py``, 1.5.1)::

    <n>version:0#op:demo::<op>, numel:<k>, dtype:<torch dtype><debug_handle><h>#...

It lists the delegated ops in graph order with each result's element count and
dtype, but not how they are wired.  ExecuTorch's own C++ runtime for it is a toy
(a Taylor-series ``sin``, a hard-wired 2x2 ``mm``); this executor computes what
the exported graph computes, with torch, on the ``target_device`` compile spec's
device.  It infers the wiring from the argument count, the two shapes the demo
partitioners produce:

* independent ops: op i reads the next ``arity(i)`` inputs and writes output i
  (``len(args) == sum(arity) + n``);
* one chain: op 0 reads its inputs, each later op reads the previous result and
  its remaining inputs in order, and the last result is the one output
  (``len(args) == sum(arity) - (n - 1) + 1``).

Every result is checked against the numel and dtype the blob records, so a
wrong guess fails loudly instead of computing something else.
"""

from __future__ import annotations

import re
from typing import Any, Optional

import torch

from pte_devconst.util.record import record
from .delegates import DelegateArg, DelegateContext, DelegateExecutor, DelegateInitContext
from .values import RunnerError

_ENTRY = re.compile(r"op:demo::(?P<op>[^,]+), numel:(?P<numel>-?\d+), "
                    r"dtype:(?P<dtype>[^<]+)<debug_handle>(?P<handle>-?\d+)")

# op name in the blob -> (arity, torch function)
_OPS: dict[str, tuple[int, Any]] = {
    "aten.add.Tensor": (2, torch.ops.aten.add.Tensor),
    "aten.mm.default": (2, torch.ops.aten.mm.default),
    "aten.sin.default": (1, torch.ops.aten.sin.default),
}


@record
class DemoOp:
    name: str
    numel: int
    dtype: str
    debug_handle: int


@record
class DemoProgram:
    ops: tuple[DemoOp, ...]

    def wiring(self, n_args: int) -> Optional[tuple[int, bool]]:
        """(number of inputs, chained) for a call with ``n_args`` arguments; None if neither shape fits."""
        arities = [_OPS[op.name][0] for op in self.ops]
        total = sum(arities)
        if n_args == total + len(self.ops):
            return total, False
        if n_args == total - (len(self.ops) - 1) + 1:
            return total - (len(self.ops) - 1), True
        return None


def parse_blob(blob: bytes, where: str) -> DemoProgram:
    """The ops a ``BackendWithCompilerDemo`` blob lists, checked against what the runner can compute."""
    text = bytes(blob).split(b"\0", 1)[0].decode("utf-8", "replace")
    head = re.match(r"(?P<count>-?\d+)version:(?P<version>-?\d+)#", text)
    if head is None:
        raise RunnerError("BackendWithCompilerDemo blob does not start with '<n>version:<v>#'", where=where)
    if int(head["version"]) != 0:
        raise RunnerError(f"BackendWithCompilerDemo blob version {head['version']} (the runtime knows 0)", where=where)
    ops = tuple(DemoOp(e["op"], int(e["numel"]), e["dtype"].strip(), int(e["handle"]))
                for e in _ENTRY.finditer(text[head.end():]))
    if len(ops) != int(head["count"]):
        raise RunnerError(f"BackendWithCompilerDemo blob announces {head['count']} ops but lists {len(ops)}",
                          where=where)
    for op in ops:
        if op.name not in _OPS:
            raise RunnerError(f"BackendWithCompilerDemo op demo::{op.name} is not supported by the runner "
                              f"(supported: {', '.join(sorted(_OPS))})", where=where)
    return DemoProgram(ops)


class DemoBackendExecutor(DelegateExecutor):
    backend_id = "BackendWithCompilerDemo"

    def init(self, blob: bytes, compile_specs: dict[str, bytes], context: DelegateInitContext) -> DemoProgram:
        return parse_blob(blob, context.where)

    def execute(self, handle: DemoProgram, args: list[DelegateArg], context: DelegateContext) -> None:
        ops = handle.ops
        arities = [_OPS[op.name][0] for op in ops]
        wiring = handle.wiring(len(args))
        if wiring is None:
            total = sum(arities)
            raise RunnerError(f"BackendWithCompilerDemo call has {len(args)} arguments; its {len(ops)} ops "
                              f"need {total + len(ops)} (independent) or {total - len(ops) + 2} (one chain)",
                              where=context.where)
        n_inputs, chained = wiring
        inputs = [context.input(arg) for arg in args[:n_inputs]]
        outputs = args[n_inputs:]
        cursor, previous, results = 0, None, []
        for op, arity in zip(ops, arities):
            if chained and previous is not None:
                operands = [previous] + inputs[cursor: cursor + arity - 1]
                cursor += arity - 1
            else:
                operands = inputs[cursor: cursor + arity]
                cursor += arity
            previous = _OPS[op.name][1](*operands)
            if previous.numel() != op.numel or str(previous.dtype) != op.dtype:
                raise RunnerError(f"BackendWithCompilerDemo op demo::{op.name} (debug handle {op.debug_handle}) "
                                  f"gave {previous.numel()} x {previous.dtype}, the blob says {op.numel} x "
                                  f"{op.dtype}: the runner cannot infer this delegate's wiring", where=context.where)
            if not chained:  # a chain's intermediate results are dropped as it goes: it returns its last one
                results.append(previous)
        for arg, result in zip(outputs, [previous] if chained else results):
            context.output(arg, result)

