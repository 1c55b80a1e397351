"""The check against the real ExecuTorch 1.5.1 runtime: an original and its rewrite compute the same bits.

The pip runtime cannot allocate CUDA memory, but it runs a device program once its device placement is moved
back to the CPU (``flip_to_cpu``); programs whose device delegate is XNNPACK (examples/xnnpack_device.py) then
execute for real, the original and the rewrite alike.  ``assert_runtime_agrees`` runs both flips over the
same calls, each method's calls in order on one loaded method (state carries over) of a freshly loaded
program, and compares every output bit for bit.
``probe_constant_copies`` turns the copies of constants into accumulating adds, so a copy that runs more than
once changes the outputs: a rewrite that claims to copy a constant once can be held to it.

Everything here reads and writes programs with ExecuTorch's own deserializer and serializer
(``executorch.exir._serialize._program``), never with pte-devconst's reader or model, so the check does not
share the tool's understanding of a program.  docs/robustness.md ("The real-runtime check") says how to use it
and how to add a model.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any, Iterator, Mapping, Optional, Sequence

import torch

from et_oracle import run_calls_with_executorch

# The operator keys (name, overload) of a device copy, and what a flip runs in their place: the same
# argument list (self, out, return), a plain host copy.
DEVICE_COPIES = (("et_copy::_h2d_copy", "out"), ("et_copy::_d2h_copy", "out"))
HOST_COPY = ("aten::alias_copy", "out")
COPIES = (DEVICE_COPIES[0], HOST_COPY)  # what a constant's copy is called before and after a flip
PROBE = ("aten::add", "out")  # add.out(self, other, *, alpha, out) -> out

Calls = Mapping[str, Sequence[Sequence[Any]]]  # method -> each call's inputs, in order (NAME.inputs.pt)


def _schema() -> Any:
    from executorch.exir import schema

    return schema


def read_program(pte: bytes) -> Any:
    """``pte`` decoded by ExecuTorch's deserializer: a ``PTEFile`` (program, mutable data, named data)."""
    from executorch.exir._serialize._program import deserialize_pte_binary

    return deserialize_pte_binary(pte)


def write_program(pte_file: Any) -> bytes:
    """Serialize as the exporter does: delegate blobs in segments (the serializer's default inlines them);
    mutable data (initial values) and named data are carried by the PTEFile the deserializer returned."""
    from executorch.exir._serialize._program import serialize_pte_binary

    return bytes(serialize_pte_binary(pte_file, extract_delegate_segments=True))


def _tensors(plan: Any) -> Iterator[Any]:
    schema = _schema()
    return (value.val for value in plan.values if isinstance(value.val, schema.Tensor))


_ELEMENT_SIZES = {"BYTE": 1, "CHAR": 1, "SHORT": 2, "INT": 4, "LONG": 8, "HALF": 2, "FLOAT": 4, "DOUBLE": 8,
                  "BOOL": 1, "BFLOAT16": 2, "UINT16": 2, "UINT32": 4, "UINT64": 8}


def nbytes(tensor: Any) -> int:
    """A tensor value's byte size at its (upper-bound) sizes."""
    schema = _schema()
    return math.prod(tensor.sizes) * _ELEMENT_SIZES[schema.ScalarType(tensor.scalar_type).name]


def planned(plan: Any) -> list[tuple[int, Any]]:
    """``(value index, tensor)`` of every tensor with planned memory (``allocation_info``)."""
    schema = _schema()
    return [(k, v.val) for k, v in enumerate(plan.values)
            if isinstance(v.val, schema.Tensor) and v.val.allocation_info is not None]


# --- flip ----------------------------------------------------------------------------------------------------


def flip_to_cpu(pte: bytes) -> bytes:
    """``pte`` with every device placement moved to the CPU, which the 1.5.1 pip runtime runs.

    Every plan loses its ``non_const_buffer_device`` (every arena is then host memory), every tensor's
    ``extra_tensor_info`` says CPU:0 (the runtime refuses a planned input tagged with a device, and the copy
    kernels check the tags), and ``et_copy::_h2d_copy.out`` / ``_d2h_copy.out`` become ``aten::alias_copy.out``
    with the same arguments: a host-to-host copy where the device program copies between host and device.
    A device tensor with initial data (the 1.6 encoding's moved constant) becomes a host tensor with initial
    data, which 1.5.1 loads into its arena.  Delegates are unchanged: XNNPACK runs on the CPU either way.
    """
    schema = _schema()
    pte_file = read_program(pte)
    for plan in pte_file.program.execution_plan:
        plan.non_const_buffer_device = None
        for tensor in _tensors(plan):
            if tensor.extra_tensor_info is not None:
                tensor.extra_tensor_info.device_type = schema.DeviceType.CPU
                tensor.extra_tensor_info.device_index = 0
        plan.operators = [schema.Operator(*HOST_COPY) if (op.name, op.overload) in DEVICE_COPIES else op
                          for op in plan.operators]
    return write_program(pte_file)


# --- probe ---------------------------------------------------------------------------------------------------


def _is_constant(value: Any) -> bool:
    """A constant tensor: bytes from the program (or its .ptd), no planned memory."""
    schema = _schema()
    tensor = value.val
    if not isinstance(tensor, schema.Tensor) or tensor.allocation_info is not None:
        return False
    external = tensor.extra_tensor_info is not None and tensor.extra_tensor_info.location == \
        schema.TensorDataLocation.EXTERNAL
    return tensor.data_buffer_idx > 0 or external


def first_call_region(plan: Any) -> range:
    """The instructions of chain 0 that a leading guard runs on the first call only: chain 0 starts with a
    ``JumpFalseCall`` on a ``Bool`` value (the first-call encoding, docs/file-format.md), and the
    instructions between it and its destination are the guarded ones.  Empty when there is no such guard."""
    schema = _schema()
    if not plan.chains or not plan.chains[0].instructions:
        return range(0)
    first = plan.chains[0].instructions[0].instr_args
    if not isinstance(first, schema.JumpFalseCall):
        return range(0)
    if not isinstance(plan.values[first.cond_value_index].val, schema.Bool):
        return range(0)
    return range(1, first.destination_instruction)


def constant_copies(plan: Any, scope: str = "all") -> list[int]:
    """The chain-0 instructions of ``plan`` that copy a constant (``_h2d_copy.out`` or, after a flip,
    ``alias_copy.out``, with the constant as ``self``); ``scope="first_call"``: only those in the
    ``first_call_region``."""
    schema = _schema()
    if scope not in ("all", "first_call"):
        raise ValueError(f"scope is 'all' or 'first_call', not {scope!r}")
    if not plan.chains:
        return []
    keys = [(op.name, op.overload) for op in plan.operators]
    region = first_call_region(plan) if scope == "first_call" else None
    found = []
    for index, instruction in enumerate(plan.chains[0].instructions):
        call = instruction.instr_args
        if region is not None and index not in region:
            continue
        if isinstance(call, schema.KernelCall) and keys[call.op_index] in COPIES and len(call.args) == 3 \
                and _is_constant(plan.values[call.args[0]]):
            found.append(index)
    return found


def probe_constant_copies(pte: bytes, *, scope: str = "all") -> bytes:
    """``pte`` with each copy of a constant (``constant_copies``) turned into ``aten::add.out(out, src,
    alpha=1, out=out)``: it adds the constant to what its destination holds, so a copy that runs twice leaves
    twice the constant there and the outputs change.  Sound on the first call only if the destination holds
    zeros then (a fresh planned arena does: ``tests/test_real_runtime.py`` checks it) and nothing else writes
    it: the first-call encoding's destinations are resident.  Run it on a flipped program (the add runs on
    the host), or flip afterwards.  The operator and an ``Int(1)`` value are added to each plan that needs
    them; nothing else changes.
    """
    schema = _schema()
    pte_file = read_program(pte)
    for plan in pte_file.program.execution_plan:
        copies = constant_copies(plan, scope)
        if not copies:
            continue
        plan.operators = [*plan.operators, schema.Operator(*PROBE)]
        plan.values = [*plan.values, schema.EValue(schema.Int(1))]
        add, one = len(plan.operators) - 1, len(plan.values) - 1
        for index in copies:
            source, out, _ = plan.chains[0].instructions[index].instr_args.args
            plan.chains[0].instructions[index] = schema.Instruction(schema.KernelCall(add, [out, source, one, out,
                                                                                            out]))
    return write_program(pte_file)


# --- run and compare -----------------------------------------------------------------------------------------


def method_names(pte: bytes) -> list[str]:
    """The program's method names, in order (ExecuTorch's deserializer)."""
    return [plan.name for plan in read_program(pte).program.execution_plan]


def same_bits(a: Any, b: Any) -> bool:
    """Equal bit for bit: tensors of one dtype and shape with the same bytes (NaN equals the same NaN, -0.0
    differs from 0.0), other values by ``==``."""
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        if a.dtype != b.dtype or a.shape != b.shape:
            return False
        return torch.equal(_bytes(a), _bytes(b))
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    return type(a) is type(b) and bool(a == b)


def _bytes(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.detach().contiguous().reshape(-1).view(torch.uint8)


def describe_difference(a: Any, b: Any) -> str:
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
        return f"{a!r} != {b!r}"
    if a.dtype != b.dtype or a.shape != b.shape:
        return f"{a.dtype}{list(a.shape)} != {b.dtype}{list(b.shape)}"
    differ = (_bytes(a).reshape(a.numel(), -1) != _bytes(b).reshape(b.numel(), -1)).any(dim=-1)
    worst = ""
    if a.is_floating_point():
        worst = f", largest difference {(a.double() - b.double()).abs().nan_to_num(math.inf).max().item():.3g}"
    return f"{int(differ.sum())} of {a.numel()} elements differ{worst}"


@dataclasses.dataclass(frozen=True)
class Disagreement:
    method: str
    call: int  # 0-based
    output: int
    what: str

    def __str__(self) -> str:
        return f"{self.method}: call {self.call + 1}, output {self.output}: {self.what}"


def compare_runs(method: str, before: Sequence[Sequence[Any]], after: Sequence[Sequence[Any]]) -> list[Disagreement]:
    """Where two runs of one method's calls differ (empty: bit-identical)."""
    found = []
    for call, (want, got) in enumerate(zip(before, after)):
        if len(want) != len(got):
            found.append(Disagreement(method, call, -1, f"{len(want)} outputs != {len(got)}"))
            continue
        found.extend(Disagreement(method, call, k, describe_difference(a, b))
                     for k, (a, b) in enumerate(zip(want, got)) if not same_bits(a, b))
    return found


def runtime_disagreements(original: bytes, rewritten: bytes, calls: Calls, *, probe: bool = False,
                          ptd: Optional[Path] = None) -> list[Disagreement]:
    """Run the flipped ``original`` and the flipped ``rewritten`` (with ``probe``: its first-call constant
    copies probed) on ``calls``, each method on a freshly loaded program, and list every output that
    differs.  Raises if ``calls`` does not cover every method with >= 3 calls, or if ``probe`` finds no
    first-call copy to probe (a probe that probes nothing proves nothing)."""
    methods = method_names(original)
    if sorted(calls) != sorted(set(methods)):
        raise ValueError(f"calls cover {sorted(calls)}, the program has the methods {methods}")
    if any(len(method_calls) < 3 for method_calls in calls.values()):
        raise ValueError("run at least 3 calls per method: state and once-only copies show from the second")
    before_pte, after_pte = flip_to_cpu(original), flip_to_cpu(rewritten)
    if probe:
        if not any(constant_copies(plan, "first_call") for plan in read_program(after_pte).program.execution_plan):
            raise ValueError("probe=True, but the rewrite has no constant copy that runs on the first call only")
        after_pte = probe_constant_copies(after_pte, scope="first_call")
    found = []
    for method, method_calls in calls.items():
        before = run_calls_with_executorch(before_pte, method, method_calls, ptd)
        after = run_calls_with_executorch(after_pte, method, method_calls, ptd)
        found.extend(compare_runs(method, before, after))
    return found


def assert_runtime_agrees(original: bytes, rewritten: bytes, calls: Calls, *, probe: bool,
                          ptd: Optional[Path] = None) -> None:
    """The real runtime computes the same bits from ``rewritten`` as from ``original``, call after call, in
    every method (``runtime_disagreements``); ``probe=True`` also holds the rewrite's first-call copies of
    constants to running once."""
    found = runtime_disagreements(original, rewritten, calls, probe=probe, ptd=ptd)
    assert not found, "the real runtime disagrees:\n  " + "\n  ".join(map(str, found))
