"""Programs whose XNNPACK blob binds its call's arguments in an order no exporter writes (issue 44).

The base is a real ExecuTorch 1.5.1 export (``tests/fixtures/binding/add_mul_copy.pte``, made by ``export_add_mul``):
one XNNPACK delegate on ``cuda:0``, copy style, computing ``x + c`` and ``x * c``; here ``c``, a method input in the
export, becomes a program constant (``with_constant``), so its per-call ``_h2d_copy`` is what a rewrite removes.
Every edit goes through ExecuTorch's own deserializer and serializer (``tests/real_runtime.py``) and, for the blob,
XNNPACK's own layout: its header (``XNNHeader``), its flatbuffer decompiled to JSON and compiled back with flatc
and XNNPACK's ``schema.fbs`` from the installed wheel.  Nothing here uses pte-devconst's reader or writer.

* ``permuted``: external ids c -> 0, first output -> 1, x -> 2, second output -> 3, and the call's arguments in
  that order, argument 1 (the first output) a static view of c's device copy (the same planned bytes): XNNPACK
  writes ``x + c`` over the copy, so the copy must run on every call.  The method returns the second output only
  (the first stays on the device: a host read of it would keep the copy whatever the binding).
* ``listed_twice``: the export's binding, but the graph's ``input_ids`` lists x's value twice (a blob no exporter
  writes; the runtime binds by the values' flags and ids, which still say x, c -> 0, 1 and the outputs -> 2, 3).
"""

from __future__ import annotations

import copy
import json
import struct
import tempfile
from pathlib import Path
from typing import Any, Callable

import torch

from real_runtime import read_program, write_program

BASE = Path(__file__).parent / "fixtures" / "binding" / "add_mul_copy.pte"
SHAPE = (2, 4)
C = torch.arange(8, dtype=torch.float32).reshape(SHAPE) / 4 + 0.5  # the constant c
X_INDEX, C_INDEX = 0, 1  # values in the export: the method inputs x and c
X_COPY, C_COPY, OUT1, OUT2 = 2, 3, 4, 5  # their device copies and the delegate's two outputs


def export_add_mul() -> bytes:
    """The base export (copy style, XNNPACK tagged ``cuda:0``): ``forward(x, c) = (x + c, x * c)``."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import ExecutorchBackendConfig, to_edge_transform_and_lower
    from executorch.exir.backend.compile_spec_schema import CompileSpec
    from executorch.exir.backend.partitioner import DelegationSpec

    from pte_devconst.exporting import clone_spec_patch

    class OnDevice(XnnpackPartitioner):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            base = self.delegation_spec
            self.delegation_spec = DelegationSpec(base.backend_id,
                                                  [*base.compile_specs, CompileSpec("target_device", b"cuda:0")])

    class AddMul(torch.nn.Module):
        def forward(self, x: torch.Tensor, c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return x + c, x * c

    exported = torch.export.export(AddMul(), (torch.randn(SHAPE), torch.randn(SHAPE)))
    edge = to_edge_transform_and_lower(exported, partitioner=[OnDevice()])
    with clone_spec_patch():
        program = edge.to_executorch(ExecutorchBackendConfig(enable_non_cpu_memory_planning=True))
    return bytes(program.buffer)


def _xnnpack() -> Any:
    from executorch.backends.xnnpack.serialization import xnnpack_graph_serialize

    return xnnpack_graph_serialize


def blob_graph(blob: bytes) -> tuple[dict[str, Any], bytes]:
    """An XNNPACK blob's graph as JSON (flatc with XNNPACK's schema, defaults written) and its constant data."""
    from executorch.exir._serialize._flatbuffer import _flatc_decompile

    serialize = _xnnpack()
    header = serialize.XNNHeader.from_bytes(blob[:serialize.XNNHeader.EXPECTED_LENGTH])
    graph = blob[header.flatbuffer_offset:header.flatbuffer_offset + header.flatbuffer_size]
    constants = blob[header.constant_data_offset:header.constant_data_offset + header.constant_data_size]
    with tempfile.TemporaryDirectory() as d:
        schema = Path(d) / "schema.fbs"
        schema.write_bytes(serialize._get_schema_bytes())
        (Path(d) / "graph.bin").write_bytes(graph)
        _flatc_decompile(d, str(schema), str(Path(d) / "graph.bin"))
        return json.loads((Path(d) / "graph.json").read_text()), constants


def graph_blob(graph: dict[str, Any], constants: bytes) -> bytes:
    """The blob XNNPACK's serializer writes for ``graph`` (JSON) and ``constants``: header, flatbuffer, data."""
    from executorch.exir._serialize._flatbuffer import _flatc_compile

    serialize = _xnnpack()
    with tempfile.TemporaryDirectory() as d:
        schema = Path(d) / "schema.fbs"
        schema.write_bytes(serialize._get_schema_bytes())
        (Path(d) / "graph.json").write_text(json.dumps(graph))
        _flatc_compile(d, str(schema), str(Path(d) / "graph.json"))
        payload = (Path(d) / "graph.bin").read_bytes()
    align = serialize.CONSTANT_TENSOR_ALIGNMENT
    head_len = serialize._aligned_size(serialize.XNNHeader.EXPECTED_LENGTH, align)
    body_len = serialize._aligned_size(len(payload), align)
    header = serialize.XNNHeader(flatbuffer_offset=head_len, flatbuffer_size=len(payload),
                                 constant_data_offset=head_len + body_len,
                                 constant_data_size=len(constants)).to_bytes()
    return serialize._pad_to(header, head_len) + serialize._pad_to(payload, body_len) + bytes(constants)


def _tensor_values(graph: dict[str, Any]) -> list[dict[str, Any]]:
    found = []
    for value in graph["xvalues"]:
        body = value["xvalue_union"]
        found.append(body.get("tensor_value", body))
    return found


def with_constant(pte: bytes) -> Any:
    """The export, decoded, with method input c made a program constant holding ``C``."""
    from executorch.exir import schema

    pte_file = read_program(pte)
    program = pte_file.program
    plan = program.execution_plan[0]
    program.constant_buffer.append(schema.Buffer(storage=C.numpy().tobytes()))
    tensor = plan.values[C_INDEX].val
    tensor.data_buffer_idx = len(program.constant_buffer) - 1
    tensor.allocation_info = None
    plan.inputs = [X_INDEX]
    return pte_file


def _edited(pte: bytes, edit_graph: Callable[[dict[str, Any]], None], edit_plan: Callable[[Any], None]) -> bytes:
    pte_file = with_constant(pte)
    program = pte_file.program
    plan = program.execution_plan[0]
    delegate = plan.delegates[0]
    blob = bytes(program.backend_delegate_data[delegate.processed.index].data)
    graph, constants = blob_graph(blob)
    edit_graph(graph)
    program.backend_delegate_data[delegate.processed.index].data = graph_blob(graph, constants)
    edit_plan(plan)
    return write_program(pte_file)


def constant_only(pte: bytes) -> bytes:
    """The export with c a constant, nothing else changed: what the others are compared with."""
    return write_program(with_constant(pte))


def permuted(pte: bytes) -> bytes:
    """External ids c -> 0, first output -> 1, x -> 2, second output -> 3; argument 1 a static view of c's copy."""
    new_id = {0: 2, 1: 0, 2: 1, 3: 3}  # the export's external id -> the permuted one

    def graph_edit(graph: dict[str, Any]) -> None:
        for value in _tensor_values(graph):
            if value["flags"] & 3:
                value["external_id"] = new_id[value["external_id"]]

    def plan_edit(plan: Any) -> None:
        view = plan.values[OUT1].val  # the first output's value becomes a static view of c's device copy
        view.allocation_info = copy.deepcopy(plan.values[C_COPY].val.allocation_info)
        call = plan.chains[0].instructions[2].instr_args
        assert list(call.args) == [X_COPY, C_COPY, OUT1, OUT2], call
        call.args = [C_COPY, OUT1, X_COPY, OUT2]
        # the first output stays on the device, unreturned: a host read of it would keep the copy whatever the
        # binding, and the method's output is the second, which reads c's copy after the first is written over it
        chain = plan.chains[0]
        copy_out = chain.instructions[3].instr_args
        assert list(copy_out.args)[0] == OUT1, copy_out
        chain.instructions = [ins for k, ins in enumerate(chain.instructions) if k != 3]
        plan.outputs = [plan.outputs[1]]

    return _edited(pte, graph_edit, plan_edit)


def listed_twice(pte: bytes) -> bytes:
    """The graph's ``input_ids`` lists x's value twice (3 inputs, 2 outputs listed for 4 arguments)."""

    def graph_edit(graph: dict[str, Any]) -> None:
        graph["input_ids"] = [graph["input_ids"][0], *graph["input_ids"]]

    return _edited(pte, graph_edit, lambda plan: None)


def external_ids(blob: bytes) -> list[tuple[int, int]]:
    """(external id, flags) of every external value of an XNNPACK blob, in value order."""
    graph, _ = blob_graph(blob)
    return [(v["external_id"], v["flags"]) for v in _tensor_values(graph) if v["flags"] & 3]


def u32(blob: bytes, at: int) -> int:
    return int(struct.unpack_from("<I", blob, at)[0])
