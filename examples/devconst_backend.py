"""The project's reference device backend for ExecuTorch: ``PteDevconstReference`` (needs ``executorch``).

Real CUDA delegates ship AOTInductor shared libraries that only ExecuTorch's
C++ runtime can load; this backend's processed blob is instead a small,
self-describing op list of the delegated subgraph (versioned JSON, specified in
docs/reference-backend.md) that pte-devconst's runner executes with torch on
the blob's ``target_device``.  Its compile specs carry ``target_device``, so
ExecuTorch's ``PropagateDevicePass`` plans device memory and inserts copies
exactly as it does for a real device backend.

``DevconstPartitioner`` chooses which ops to delegate, the target device, and
whether the constants those ops read stay outside the delegate (program
constants the runtime copies to the device: the case pte-devconst rewrites)
or go inside it (delegate-owned named data, copied to the device once at
init).
"""

from __future__ import annotations

import json
import math
import operator
from typing import Any, Iterable, Optional, final

import torch
from executorch.exir._serialize._named_data_store import NamedDataStore
from executorch.exir.backend.backend_details import BackendDetails, PreprocessResult
from executorch.exir.backend.canonical_partitioners.pattern_op_partitioner import generate_pattern_op_partitions
from executorch.exir.backend.compile_spec_schema import CompileSpec
from executorch.exir.backend.partitioner import DelegationSpec, Partitioner, PartitionResult
from executorch.exir.backend.utils import tag_constant_data
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind
from torch.fx.passes.operator_support import OperatorSupportBase

BACKEND_ID = "PteDevconstReference"
BLOB_FORMAT = "pte-devconst-reference"
BLOB_VERSION = 1
TARGET_DEVICE_KEY = "target_device"


def op_name(target: Any) -> Optional[str]:
    """``aten.linear.default`` for an (edge) operator overload, None for anything else."""
    op = getattr(target, "_op", target)
    if isinstance(op, torch._ops.OpOverload):
        return f"{op._schema.name.replace('::', '.')}.{op._overloadname}"
    return None


def _aten_equivalent(name: str, node: torch.fx.Node) -> tuple[str, tuple, dict]:
    """The blob holds ATen ops only: ExecuTorch's dim-order copies become ``clone``/``_to_copy``."""
    kwargs = dict(node.kwargs)
    if name in ("dim_order_ops._clone_dim_order.default", "dim_order_ops._to_dim_order_copy.default"):
        dim_order = kwargs.pop("dim_order", None)
        rank = len(node.args[0].meta["val"].shape)
        if dim_order is not None and list(dim_order) != list(range(rank)):
            raise RuntimeError(f"{BACKEND_ID} supports only contiguous dim orders, not {list(dim_order)}")
        kwargs.pop("non_blocking", None)
        if name.startswith("dim_order_ops._clone"):
            return "aten.clone.default", tuple(node.args), kwargs
        return "aten._to_copy.default", tuple(node.args), kwargs
    return name, tuple(node.args), kwargs


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


class _Encoder:
    """Turns fx arguments into blob arguments: references to inputs/constants/results, or literals."""

    def __init__(self) -> None:
        self.refs: dict[torch.fx.Node, dict] = {}

    def __call__(self, value: Any) -> Any:
        if isinstance(value, torch.fx.Node):
            if value not in self.refs:
                raise RuntimeError(f"{BACKEND_ID}: node {value.name} is used before it is defined")
            return self.refs[value]
        if isinstance(value, (list, tuple)):
            return [self(v) for v in value]
        if isinstance(value, torch.dtype):
            return {"dtype": _dtype_name(value)}
        if isinstance(value, torch.memory_format):
            return {"memory_format": str(value).removeprefix("torch.")}
        if isinstance(value, torch.layout):
            return {"layout": "strided"}
        if isinstance(value, torch.device):
            return {"device": str(value)}
        if isinstance(value, float) and not math.isfinite(value):
            return {"float": "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")}
        if value is None or isinstance(value, (bool, int, float, str)):
            return value
        raise RuntimeError(f"{BACKEND_ID} cannot encode argument {value!r} ({type(value).__name__})")


_SCALARS = {torch.SymInt: "int", int: "int", torch.SymFloat: "float", float: "float", torch.SymBool: "bool",
            bool: "bool"}


def _input_spec(val: Any) -> dict:
    """A delegate input: a tensor's dtype and shape (``null`` for a dynamic dim, never specialized to the
    example's size), or a scalar (a SymInt such as a sequence length the graph computed on the host)."""
    if isinstance(val, torch.Tensor):
        return {"dtype": _dtype_name(val.dtype), "shape": [s if isinstance(s, int) else None for s in val.shape]}
    scalar = _SCALARS.get(type(val))
    if scalar is None:
        raise RuntimeError(f"{BACKEND_ID} cannot take a delegate input of type {type(val).__name__}")
    return {"scalar": scalar}


def _constant_tensor(program: ExportedProgram, name: str) -> Optional[torch.Tensor]:
    for spec in program.graph_signature.input_specs:
        if spec.arg.name == name and spec.kind in (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR):
            source = program.constants if spec.kind == InputKind.CONSTANT_TENSOR else program.state_dict
            if spec.target in source:
                return source[spec.target]
            return program.constants.get(spec.target)
    return None


@final
class PteDevconstReference(BackendDetails):
    """Serializes the delegated subgraph as the reference blob (see docs/reference-backend.md)."""

    @staticmethod
    def preprocess(edge_program: ExportedProgram, compile_specs: list[CompileSpec]) -> PreprocessResult:
        specs = {spec.key: bytes(spec.value) for spec in compile_specs}
        target = specs.get(TARGET_DEVICE_KEY, b"cpu").decode("utf-8")
        encode = _Encoder()
        store = NamedDataStore()
        inputs, constants, nodes, outputs = [], [], [], []
        for node in edge_program.graph.nodes:
            if node.op == "placeholder":
                tensor = _constant_tensor(edge_program, node.name)
                if tensor is not None:  # a constant owned by the delegate
                    key = f"{BACKEND_ID}:{node.name}:{len(constants)}"
                    data = tensor.detach().contiguous().cpu()
                    store.add_named_data(key, data.view(-1).view(torch.uint8).numpy().tobytes() if data.numel()
                                         else b"", alignment=16)
                    constants.append({"key": key, "dtype": _dtype_name(data.dtype), "shape": list(data.shape)})
                    encode.refs[node] = {"constant": len(constants) - 1}
                else:
                    inputs.append(_input_spec(node.meta["val"]))
                    encode.refs[node] = {"input": len(inputs) - 1}
            elif node.op == "call_function":
                if node.target is operator.getitem:
                    source, item = node.args
                    encode.refs[node] = {**encode(source), "item": int(item)}
                    continue
                name = op_name(node.target)
                if name is None:
                    raise RuntimeError(f"{BACKEND_ID} cannot delegate {node.target}")
                name, args, kwargs = _aten_equivalent(name, node)
                namespace, op, overload = name.split(".")
                nodes.append({"op": f"{namespace}::{op}.{overload}", "args": encode(list(args)),
                              "kwargs": {k: encode(v) for k, v in kwargs.items()}})
                encode.refs[node] = {"node": len(nodes) - 1}
            elif node.op == "output":
                outputs = [encode(v) for v in node.args[0]]
            else:
                raise RuntimeError(f"{BACKEND_ID} cannot delegate a {node.op} node")
        blob = {"format": BLOB_FORMAT, "version": BLOB_VERSION, "target_device": target, "inputs": inputs,
                "constants": constants, "nodes": nodes, "outputs": outputs}
        return PreprocessResult(processed_bytes=json.dumps(blob, separators=(",", ":")).encode("utf-8"),
                                data_store_output=store.get_named_data_store_output() if constants else None)


class _OpSupport(OperatorSupportBase):
    def __init__(self, ops: Optional[frozenset[str]]) -> None:
        self.ops = ops

    def is_node_supported(self, submodules: Any, node: torch.fx.Node) -> bool:
        if node.op != "call_function":
            return False
        if node.target is operator.getitem:
            return self.is_node_supported(submodules, node.args[0])
        name = op_name(node.target)
        if name is None:
            return False
        return self.ops is None or name in self.ops or name.rsplit(".", 1)[0] in self.ops


@final
class DevconstPartitioner(Partitioner):
    """Delegates ``ops`` (``aten.mm`` or ``aten.mm.default``; None = every op) to ``PteDevconstReference``.

    ``constants="outside"`` leaves the constants those ops read as program constants (ExecuTorch copies
    them to ``target_device`` on every call: what pte-devconst removes); ``"inside"`` makes them delegate
    data, loaded to the device once at init.
    """

    def __init__(self, ops: Optional[Iterable[str]] = None, target_device: str = "cuda:0",
                 constants: str = "outside") -> None:
        super().__init__()
        if constants not in ("outside", "inside"):
            raise ValueError("constants must be 'outside' or 'inside'")
        self.ops = None if ops is None else frozenset(ops)
        self.target_device = target_device
        self.constants = constants
        self.delegation_spec = DelegationSpec(
            PteDevconstReference.__name__, [CompileSpec(TARGET_DEVICE_KEY, target_device.encode("utf-8"))])

    def partition(self, exported_program: ExportedProgram) -> PartitionResult:
        tags: dict[str, DelegationSpec] = {}
        prefix = f"devconst_{self.target_device.replace(':', '_')}_"
        for partition in generate_pattern_op_partitions(exported_program.graph_module,
                                                        op_support=_OpSupport(self.ops)):
            tag = f"{prefix}{partition.id}"
            for node in partition.nodes:
                node.meta["delegation_tag"] = tag
            tags[tag] = self.delegation_spec
        if self.constants == "inside":
            tag_constant_data(exported_program)
        return PartitionResult(tagged_exported_program=exported_program, partition_tags=tags)
