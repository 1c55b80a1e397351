"""What a delegate's blob declares of its calls, where its format can be read cheaply: XNNPACK's and the reference
backend's.

A DelegateCall passes its arguments (the delegate's inputs, then its outputs) to a blob that fixed, when it was
compiled, how many inputs it reads and outputs it writes.  A blob of another call site (two delegates of a
program pointing at one segment, a tool that re-pointed a delegate) reads arguments that are not there: the
runtime refuses the program, or reads past its argument list (XNNPACK, in the 1.5.1 runtime: a SIGSEGV).
``inspect`` and ``check`` say so before anything runs (``call_site_mismatches``).

XNNPACK (``XnnpackBackend``): an optional 30-byte header (magic ``XH00`` at byte 4, the flatbuffer's offset and
size after it), then the ``XNNGraph`` flatbuffer (identifier ``XN00``/``XN01``) whose fields 4 and 5 are the
graph's ``input_ids`` and ``output_ids`` (executorch/backends/xnnpack/serialization/schema.fbs).  Only those two
vectors are read, through the project's checked flatbuffer reader, with a budget of the blob's size: an
unreadable blob is no finding (the backend itself says more when it loads it).

The reference backend (``PteDevconstReference``, ``runner/reference_backend.py``): a small JSON document whose
``inputs`` and ``outputs`` lists are the call's; a blob over 1 MiB is not read.

What a blob declares also settles where a call's inputs end and its outputs begin (``declared_splits``), which
the program alone leaves open (``dataflow.py``): an argument the split could only guess at, planned on bytes
another value wrote, is then known to be written, or known to be read.
"""

from __future__ import annotations

import json
import struct
from typing import Callable, Mapping, Optional, Sequence

from pte_devconst.schema import model as m
from pte_devconst.schema.flatbuf import FlatbufferError, FlatReader

XNNPACK = "XnnpackBackend"
REFERENCE = "PteDevconstReference"
_REFERENCE_FORMAT = "pte-devconst-reference"
_REFERENCE_LIMIT = 1 << 20  # bytes: larger blobs are not parsed (a declaration is a few hundred bytes)
_XNN_HEADER_MAGIC = b"XH00"
_XNN_IDENTIFIERS = (b"XN00", b"XN01")
_XNN_INPUT_IDS, _XNN_OUTPUT_IDS = 4, 5  # XNNGraph's field numbers


def _xnnpack_io(blob: memoryview) -> Optional[tuple[int, int]]:
    """(inputs, outputs) an XNNPACK blob declares, or None when it cannot be read."""
    if len(blob) < 8:
        return None
    graph = blob
    if bytes(blob[4:8]) == _XNN_HEADER_MAGIC:
        if len(blob) < 18:
            return None
        offset, size = struct.unpack_from("<II", blob, 10)
        if offset + size > len(blob):
            return None
        graph = blob[offset:offset + size]
    if bytes(graph[4:8]) not in _XNN_IDENTIFIERS:
        return None
    try:
        root = FlatReader(graph, budget=len(graph) + 4096).root()
        inputs = root.vector(_XNN_INPUT_IDS, "I")
        outputs = root.vector(_XNN_OUTPUT_IDS, "I")
    except FlatbufferError:
        return None
    if inputs is None or outputs is None:
        return None
    return len(inputs), len(outputs)


def _reference_io(blob: memoryview) -> Optional[tuple[int, int]]:
    """(inputs, outputs) a reference backend blob declares, or None when it cannot be read."""
    if len(blob) > _REFERENCE_LIMIT:
        return None
    try:
        doc = json.loads(bytes(blob))
    except (ValueError, RecursionError):  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        return None
    if not isinstance(doc, dict) or doc.get("format") != _REFERENCE_FORMAT:
        return None
    inputs, outputs = doc.get("inputs"), doc.get("outputs")
    if not isinstance(inputs, list) or not isinstance(outputs, list):
        return None
    return len(inputs), len(outputs)


_READERS: dict[str, Callable[[memoryview], Optional[tuple[int, int]]]] = {XNNPACK: _xnnpack_io,
                                                                          REFERENCE: _reference_io}


def declared_io(backend_id: str, blob: memoryview) -> Optional[tuple[int, int]]:
    """(inputs, outputs) the blob of a ``backend_id`` delegate declares; None for a backend whose format is not
    read here, or a blob that cannot be read."""
    reader = _READERS.get(backend_id)
    return reader(blob) if reader is not None else None


def call_site_mismatches(plans: Sequence[m.ExecutionPlan], labels: Sequence[str],
                         declared: Sequence[Mapping[int, tuple[int, int]]]) -> list[str]:
    """One line per delegate whose calls pass another number of arguments than its blob declares (inputs plus
    outputs; ``declared``: ``declared_splits``'s, per method).  Linear in the instructions."""
    found = []
    for plan, label, method_declared in zip(plans, labels, declared):
        delegates = plan.delegates or ()
        arities: dict[int, set[int]] = {}
        for chain in plan.chains or ():
            for ins in chain.instructions or ():
                if isinstance(ins, m.DelegateCall) and 0 <= ins.delegate_index < len(delegates):
                    arities.setdefault(ins.delegate_index, set()).add(len(ins.args or ()))
        for index, counts in sorted(arities.items()):
            io = method_declared.get(index)
            if io is None or counts == {sum(io)}:
                continue
            passed = " or ".join(str(n) for n in sorted(counts))
            found.append(f"method {label!r}: delegate {index} ({delegates[index].id}) is called with {passed} "
                         f"arguments, but its blob declares {io[0]} inputs and {io[1]} outputs ({sum(io)}): the "
                         "runtime would refuse it or read arguments that are not there (a blob of another call site?)")
    return found


def declared_splits(program: m.Program, blob_of: Callable[[m.BackendDelegate], memoryview]
                    ) -> tuple[dict[int, tuple[int, int]], ...]:
    """Per method of ``program``: delegate index -> (inputs, outputs) its blob declares, for the delegates whose
    blob can be read (``dataflow.delegate_call_sites`` takes it).  One small read of each readable blob."""
    found = []
    for plan in program.execution_plan or ():
        declared: dict[int, tuple[int, int]] = {}
        for index, delegate in enumerate(plan.delegates or ()):
            if (delegate.id or "") in _READERS:
                io = declared_io(delegate.id or "", blob_of(delegate))
                if io is not None:
                    declared[index] = io
        found.append(declared)
    return tuple(found)
