"""Executor for the project's reference device backend (``PteDevconstReference``; blob format in
docs/reference-backend.md, exporter in examples/devconst_backend.py).

The blob is versioned JSON listing the delegated subgraph's ops by torch
operator name with references to delegate inputs, delegate-owned constants
(named data), earlier results and literals.  The executor runs the ops with
torch on the ``target_device``; like a real device delegate it first copies
any input whose memory is on the host to the device (counted), and copies
its own constants to the device once, at init.
"""

from __future__ import annotations

import math
from typing import Any, Optional

import torch

from pte_devconst.schema import model as m

from .delegates import DelegateArg, DelegateContext, DelegateExecutor, DelegateInitContext
from pte_devconst.program.dtypes import dtype_name
from .memory import host_bytes
from .quantized import FUNCTIONAL as QUANTIZED_FUNCTIONS
from .values import RunnerError
from pte_devconst.util.bounded_json import BoundedJSON, JSONBoundError
from pte_devconst.util.record import record

BACKEND_ID = "PteDevconstReference"
BLOB_FORMAT = "pte-devconst-reference"
BLOB_VERSION = 1
# The values a blob's JSON may build: a program's blob describes its operators, a few dozen values each (the
# blob comes with the .pte, which may be anyone's: ``[],`` repeated would build 28 times its bytes).
MAX_BLOB_VALUES = 4_000_000

_DTYPES = {dtype_name(d): d for d in (
    torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int8, torch.uint8, torch.int16,
    torch.int32, torch.int64, torch.bool)}
_MEMORY_FORMATS = {"contiguous_format": torch.contiguous_format, "preserve_format": torch.preserve_format,
                   "channels_last": torch.channels_last}
_FLOATS = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}
_SCALARS = {"int": int, "float": float, "bool": bool}


@record
class InputSpec:
    """A delegate input as the blob declares it: a tensor (a ``None`` dim is dynamic) or a scalar."""

    dtype: Optional[torch.dtype]
    shape: Optional[tuple[Optional[int], ...]]
    scalar: Optional[type] = None

    @classmethod
    def parse(cls, doc: dict[str, Any]) -> "InputSpec":
        if "scalar" in doc:
            return cls(None, None, _SCALARS[doc["scalar"]])
        return cls(_DTYPES[doc["dtype"]], tuple(None if s is None else int(s) for s in doc["shape"]))

    def mismatch(self, value: Any) -> Optional[str]:
        """Why ``value`` is not this input, or None."""
        if self.scalar is not None:
            accepted = {bool: (bool,), int: (int,), float: (int, float)}[self.scalar]
            if isinstance(value, accepted) and (self.scalar is bool or not isinstance(value, bool)):
                return None
            return f"a {type(value).__name__}, the blob expects a {self.scalar.__name__}"
        if not isinstance(value, torch.Tensor):
            return f"a {type(value).__name__}, the blob expects a tensor"
        shape = tuple(value.shape)
        if value.dtype != self.dtype or len(shape) != len(self.shape or ()) or any(
                want is not None and got != want for got, want in zip(shape, self.shape or ())):
            declared = ["*" if s is None else s for s in self.shape or ()]
            return f"{value.dtype}{list(shape)}, the blob expects {self.dtype}{declared}"
        return None


@record
class ReferenceProgram:
    inputs: tuple[InputSpec, ...]
    constants: tuple[torch.Tensor, ...]
    nodes: tuple[tuple[Any, list[Any], dict[str, Any]], ...]  # (torch op, args, kwargs) with references unresolved
    outputs: tuple[Any, ...]


def _op(name: str, where: str) -> Any:
    quantized = QUANTIZED_FUNCTIONS.get(name)
    if quantized is not None:  # ExecuTorch's quantized kernels' arithmetic, with or without torch's definition
        return quantized
    qualified, _, overload = name.partition(".")
    namespace, _, op = qualified.partition("::")
    try:
        return getattr(getattr(getattr(torch.ops, namespace), op), overload or "default")
    except (AttributeError, RuntimeError):
        raise RunnerError(f"reference backend blob names unknown operator {name}", where=where) from None


class ReferenceBackendExecutor(DelegateExecutor):
    backend_id = BACKEND_ID

    def init(self, blob: bytes, compile_specs: dict[str, bytes], context: DelegateInitContext) -> ReferenceProgram:
        where = context.where
        try:
            doc = BoundedJSON(MAX_BLOB_VALUES).loads(bytes(blob))
        except JSONBoundError as error:
            raise RunnerError(f"reference backend blob: {error}", where=where) from None
        except ValueError as error:  # UnicodeDecodeError, json.JSONDecodeError
            raise RunnerError(f"reference backend blob is not JSON: {error}", where=where) from None
        if not isinstance(doc, dict) or doc.get("format") != BLOB_FORMAT:
            raise RunnerError(f"reference backend blob lacks format {BLOB_FORMAT!r}", where=where)
        if doc.get("version") != BLOB_VERSION:
            raise RunnerError(f"reference backend blob version {doc.get('version')!r}; this runner reads "
                              f"version {BLOB_VERSION}", where=where)
        declared = doc.get("target_device")
        try:
            declared = None if declared is None else m.Device.parse(declared)
        except (ValueError, TypeError, AttributeError):
            raise RunnerError(f"reference backend blob names an unknown target device {declared!r}",
                              where=where) from None
        if declared is not None and declared != context.target_device:
            raise RunnerError(f"blob targets {declared} but the compile spec says {context.target_device}", where=where)
        try:
            inputs = tuple(InputSpec.parse(i) for i in doc["inputs"])
            constants = []
            for spec in doc.get("constants", []):
                data = context.named_data(spec["key"])
                if data is None:
                    raise RunnerError(f"reference backend constant {spec['key']!r} is not in the named data",
                                      where=where)
                dtype, shape = _DTYPES[spec["dtype"]], tuple(spec["shape"])
                needed = math.prod(shape) * dtype.itemsize
                if len(data) < needed:
                    raise RunnerError(f"reference backend constant {spec['key']!r} needs {needed} bytes, its named "
                                      f"data holds {len(data)}", where=where)
                host = host_bytes(data)[:needed].view(dtype).reshape(shape)
                constants.append(context.load_to_device(host))
            nodes = tuple((_op(n["op"], where), list(n.get("args", [])), dict(n.get("kwargs", {})))
                          for n in doc["nodes"])
            outputs = tuple(doc["outputs"])
        except (KeyError, TypeError, ValueError) as error:
            raise RunnerError(f"malformed reference backend blob: {type(error).__name__}: {error}",
                              where=where) from None
        return ReferenceProgram(inputs, tuple(constants), nodes, outputs)

    def execute(self, handle: ReferenceProgram, args: list[DelegateArg], context: DelegateContext) -> None:
        n_in = len(handle.inputs)
        if len(args) != n_in + len(handle.outputs):
            raise RunnerError(f"reference delegate expects {n_in} inputs and {len(handle.outputs)} outputs, "
                              f"the call passes {len(args)} values", where=context.where)
        inputs = []
        for position, (arg, spec) in enumerate(zip(args, handle.inputs)):
            value = context.input(arg)
            why = spec.mismatch(value)
            if why is not None:
                raise RunnerError(f"reference delegate input {position} is {why}", where=context.where)
            inputs.append(value)
        results: list[Any] = []
        device = context.torch_device

        def resolve(ref: Any) -> Any:
            if isinstance(ref, list):
                return [resolve(r) for r in ref]
            if not isinstance(ref, dict):
                return ref
            if "input" in ref:
                return inputs[ref["input"]]
            if "constant" in ref:
                return handle.constants[ref["constant"]]
            if "node" in ref:
                value = results[ref["node"]]
                return value[ref["item"]] if "item" in ref else value
            if "dtype" in ref:
                return _DTYPES[ref["dtype"]]
            if "float" in ref:
                return _FLOATS[ref["float"]]
            if "memory_format" in ref:
                return _MEMORY_FORMATS[ref["memory_format"]]
            if "layout" in ref:
                return torch.strided
            if "device" in ref:
                return device
            raise RunnerError(f"reference backend blob has an unknown reference {ref}", where=context.where)

        try:
            for op, node_args, node_kwargs in handle.nodes:
                results.append(op(*resolve(node_args), **{k: resolve(v) for k, v in node_kwargs.items()}))
            outputs = [resolve(ref) for ref in handle.outputs]
        except (RuntimeError, TypeError, ValueError, IndexError, KeyError) as error:
            raise RunnerError(f"reference delegate failed: {' '.join(str(error).split())[:300]}",
                              where=context.where) from None
        for arg, result in zip(args[n_in:], outputs):
            context.output(arg, result)
