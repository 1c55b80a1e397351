"""What a delegate's blob declares of its calls, where its format can be read cheaply: XNNPACK's and the reference
backend's.

A DelegateCall passes its arguments (the delegate's inputs, then its outputs) to a blob that fixed, when it was
compiled, how many inputs it reads and outputs it writes.  A blob of another call site (two delegates of a
program pointing at one segment, a tool that re-pointed a delegate) reads arguments that are not there: the
runtime refuses the program, or reads past its argument list (XNNPACK, in the 1.5.1 runtime: a SIGSEGV on one
machine, ``xnn_status_invalid_parameter`` on another).  ``inspect`` and ``check`` say so before anything runs
(``call_site_mismatches``), and ``validate`` refuses to run a call whose blob binds arguments it does not pass
(``unbindable_calls``): what such a run shows is undefined.

XNNPACK (``XnnpackBackend``), read as its 1.5.1 runtime reads it (backends/xnnpack/runtime/XNNHeader.cpp,
``XNNCompiler::compileModel``, ``XNNExecutor::prepare_args``): a blob of at least 30 bytes; when bytes 4-8 are
``XH00``, a header whose u32 flatbuffer offset and size (bytes 10 and 14) and u32 constant data offset and u64 size
(bytes 18 and 22) lie inside the blob, the constant data after the flatbuffer; else the whole blob is the
flatbuffer.  The ``XNNGraph`` flatbuffer (identifier ``XN00``/``XN01``) defines its values (``xvalues``, each an
``XNNTensorValue`` or a quantized one wrapping it); a value flagged ``XNN_VALUE_FLAG_EXTERNAL_INPUT`` (1) is read,
one flagged ``XNN_VALUE_FLAG_EXTERNAL_OUTPUT`` (2) written, and the executor binds each to the call's argument at its
``external_id`` (``args[ext_id]``): an argument's role comes from its external id, not from its place in the list.
The graph's ``input_ids`` and ``output_ids`` (the ``id_out`` of those values, in the serializer's order) are not
what the runtime binds by, but a blob whose lists disagree with its flagged values is no exporter's.

A declaration that cannot be the backend's declares nothing (``Declaration.problem``): an external id listed twice,
one both read and written, one past ``num_externs``, ``input_ids``/``output_ids`` that list a value twice or
another set of values than the flags; and one that does not bind a call declares nothing for that call
(``Declaration.disagreement``: an id past the call's arguments, arguments no id names).  The program's own rule
(``dataflow.py``) then splits the call, and ``call_site_mismatches`` says so.  Only the fields named here are read,
through the project's checked flatbuffer reader, with a budget of the blob's size: an unreadable blob declares
nothing and is no finding (the backend itself says more when it loads it).

The reference backend (``PteDevconstReference``, ``runner/reference_backend.py``): a small JSON document of
version 1 whose ``inputs`` (a list of objects) are the call's first arguments, read, and whose ``outputs`` the
arguments after them, written, in order (the executor reads ``args[:len(inputs)]`` and writes the rest); a blob
over 1 MiB is not read.

What a blob declares also settles which of a call's arguments are read and which written (``declared_splits``),
which the program alone leaves open (``dataflow.py``): an argument the split could only guess at, planned on bytes
another value wrote, is then known to be written, or known to be read.
"""

from __future__ import annotations

import json
import struct
from typing import Callable, Mapping, Optional, Sequence

from pte_devconst.schema import model as m
from pte_devconst.schema.flatbuf import FlatbufferError, FlatReader, Table
from pte_devconst.util.record import record

from .dataflow import Declaration

XNNPACK = "XnnpackBackend"
REFERENCE = "PteDevconstReference"
_REFERENCE_FORMAT = "pte-devconst-reference"
_REFERENCE_VERSION = 1
_REFERENCE_LIMIT = 1 << 20  # bytes: larger blobs are not parsed (a declaration is a few hundred bytes)
_XNN_HEADER_MAGIC = b"XH00"
_XNN_HEADER_MIN = 30  # XNNHeader::kMinSize: a shorter blob is refused, header or not
_XNN_IDENTIFIERS = (b"XN00", b"XN01")
_XNN_XNODES, _XNN_XVALUES, _XNN_NUM_EXTERNS, _XNN_INPUT_IDS, _XNN_OUTPUT_IDS = 1, 2, 3, 4, 5  # XNNGraph's fields
_XNN_MAX_EXTERNS = 4096  # compileModel refuses more
_XNN_TENSOR, _XNN_QUANTIZED = 1, 2  # XValueUnion's members
_XNN_EXTERNAL_ID, _XNN_FLAGS, _XNN_ID_OUT = 4, 5, 6  # XNNTensorValue's fields
_XNN_EXTERNAL_INPUT, _XNN_EXTERNAL_OUTPUT = 1, 2  # XNN_VALUE_FLAG_*
_U32 = struct.Struct("<I")
_U16 = struct.Struct("<H")


@record
class _XnnValue:
    external_id: int
    flags: int
    id_out: int


def _tensor_value(table: Table) -> _XnnValue:
    return _XnnValue(table.scalar(_XNN_EXTERNAL_ID, _U32, 0), table.scalar(_XNN_FLAGS, _U32, 0),
                     table.scalar(_XNN_ID_OUT, _U32, 0))


def _quantized_value(table: Table) -> _XnnValue:
    inner = table.decoded_table(0, _tensor_value)  # XNNQuantizedTensorValue.tensor_value
    return inner if inner is not None else _XnnValue(0, 0, 0)


def _xvalue(table: Table) -> Optional[_XnnValue]:
    return table.union(0, {_XNN_TENSOR: _tensor_value, _XNN_QUANTIZED: _quantized_value}, "xvalue_union")[1]


def _xnn_graph(blob: memoryview) -> Optional[memoryview]:
    """The flatbuffer ``XNNHeader::Parse`` and ``compileModel`` find in a blob, or None where they refuse it."""
    size = len(blob)
    if size < _XNN_HEADER_MIN:
        return None
    if bytes(blob[4:8]) != _XNN_HEADER_MAGIC:
        return blob
    offset, length, constant_offset = struct.unpack_from("<III", blob, 10)
    (constant_size,) = struct.unpack_from("<Q", blob, 22)
    if length < 8 or offset > size or length > size - offset:
        return None
    if constant_offset > size or constant_size > size - constant_offset:
        return None
    if constant_offset < offset or constant_offset - offset < length:
        return None
    return blob[offset:offset + length]


def _xnnpack_declaration(blob: memoryview) -> Optional[Declaration]:
    """How an XNNPACK blob binds its calls' arguments (module docstring), or None when it cannot be read."""
    graph = _xnn_graph(blob)
    if graph is None or bytes(graph[4:8]) not in _XNN_IDENTIFIERS:
        return None
    try:
        root = FlatReader(graph, budget=len(graph) + 4096).root()
        values = root.tables(_XNN_XVALUES, _xvalue, "xvalues")
        has_nodes = root.vector(_XNN_XNODES, "I") is not None
        num_externs = root.scalar(_XNN_NUM_EXTERNS, _U32, 0)
        input_ids = root.vector(_XNN_INPUT_IDS, "I") or ()
        output_ids = root.vector(_XNN_OUTPUT_IDS, "I") or ()
    except FlatbufferError:
        return None
    if values is None or not has_nodes or num_externs > _XNN_MAX_EXTERNS:
        return None
    read: list[int] = []
    written: list[int] = []
    read_values: list[int] = []
    written_values: list[int] = []
    problems: list[str] = []
    for value in values:
        if value is None or not value.flags & (_XNN_EXTERNAL_INPUT | _XNN_EXTERNAL_OUTPUT):
            continue
        if value.flags & _XNN_EXTERNAL_INPUT and value.flags & _XNN_EXTERNAL_OUTPUT:
            problems.append(f"external id {value.external_id} is both read and written")
        if value.external_id >= num_externs:
            problems.append(f"external id {value.external_id} is past the graph's {num_externs} externals")
        if value.flags & _XNN_EXTERNAL_INPUT:
            read.append(value.external_id)
            read_values.append(value.id_out)
        if value.flags & _XNN_EXTERNAL_OUTPUT:
            written.append(value.external_id)
            written_values.append(value.id_out)
    twice = _repeated(read + written)
    if twice is not None:
        problems.append(f"external id {twice} is given to two values")
    for field, listed, flagged, role in (("input_ids", input_ids, read_values, "read"),
                                          ("output_ids", output_ids, written_values, "written")):
        repeated = _repeated(listed)
        if repeated is not None:
            problems.append(f"its {field} lists value {repeated} twice")
        elif sorted(listed) != sorted(flagged):
            problems.append(f"its {field} lists values {_short(listed)}, but the values it flags {role} are "
                            f"{_short(flagged)}")
    problem = ""
    if problems:
        problem = "its XnnpackBackend blob cannot be the backend's: " + "; ".join(problems[:3]) + (
            f"; and {len(problems) - 3} more" if len(problems) > 3 else "")
    return Declaration(XNNPACK, tuple(read), tuple(written), problem)


def _repeated(items: Sequence[int]) -> Optional[int]:
    seen: set[int] = set()
    for item in items:
        if item in seen:
            return item
        seen.add(item)
    return None


def _short(items: Sequence[int]) -> str:
    shown = sorted(items)
    return "[" + ", ".join(str(i) for i in shown[:6]) + (", ...]" if len(shown) > 6 else "]")


def _reference_declaration(blob: memoryview) -> Optional[Declaration]:
    """How a reference backend blob binds its calls' arguments (inputs first, then outputs), or None when it cannot
    be read."""
    if len(blob) > _REFERENCE_LIMIT:
        return None
    try:
        doc = json.loads(bytes(blob))
    except (ValueError, RecursionError):  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        return None
    if not isinstance(doc, dict) or doc.get("format") != _REFERENCE_FORMAT or doc.get("version") != _REFERENCE_VERSION:
        return None
    inputs, outputs = doc.get("inputs"), doc.get("outputs")
    if not isinstance(inputs, list) or not isinstance(outputs, list) or not all(isinstance(i, dict) for i in inputs):
        return None
    n = len(inputs)
    return Declaration(REFERENCE, tuple(range(n)), tuple(range(n, n + len(outputs))))


_READERS: dict[str, Callable[[memoryview], Optional[Declaration]]] = {XNNPACK: _xnnpack_declaration,
                                                                       REFERENCE: _reference_declaration}


def reads_blobs_of(backend_id: str) -> bool:
    """Whether this module reads what a ``backend_id`` delegate's blob declares."""
    return backend_id in _READERS


def declaration_of(backend_id: str, blob: memoryview) -> Optional[Declaration]:
    """How the blob of a ``backend_id`` delegate binds its calls' arguments; None for a backend whose format is not
    read here, or a blob that cannot be read."""
    reader = _READERS.get(backend_id)
    return reader(blob) if reader is not None else None


def declared_io(backend_id: str, blob: memoryview) -> Optional[tuple[int, int]]:
    """(inputs, outputs) the blob of a ``backend_id`` delegate declares (``declaration_of``'s counts); None where it
    declares nothing."""
    declaration = declaration_of(backend_id, blob)
    if declaration is None or declaration.problem:
        return None
    return len(declaration.read), len(declaration.written)


def call_site_mismatches(plans: Sequence[m.ExecutionPlan], labels: Sequence[str],
                         declared: Sequence[Mapping[int, Declaration]]) -> list[str]:
    """One line per delegate whose blob's declaration is not used for a call (``declared``: ``declared_splits``'s,
    per method): one that cannot be the backend's, or one that does not bind the call (another number of
    arguments).  The call is then split by the program's rule.  Linear in the instructions."""
    found = []
    for plan, label, method_declared in zip(plans, labels, declared):
        delegates = plan.delegates or ()
        for index, sites in sorted(_calls_by_delegate(plan).items()):
            declaration = method_declared.get(index)
            if declaration is None:
                continue
            backend = delegates[index].id
            if declaration.problem:
                where = " and ".join(str(k) for k, _ in sites[:2]) + (", ..." if len(sites) > 2 else "")
                found.append(f"method {label!r}: delegate {index} ({backend}) at instruction {where}: "
                             f"{declaration.problem}; its arguments are split by the program alone")
                continue
            declared_n = len(declaration.read) + len(declaration.written)
            counts = sorted({n for _, n in sites})
            if counts == [declared_n] and not declaration.disagreement(declared_n):
                continue
            passed = " or ".join(str(n) for n in counts)
            first = next(k for k, n in sites if declaration.disagreement(n))
            found.append(f"method {label!r}: delegate {index} ({backend}) is called with {passed} arguments, but "
                         f"its blob declares {len(declaration.read)} inputs and {len(declaration.written)} outputs "
                         f"({declared_n}): the runtime would refuse it or read arguments that are not there (a "
                         f"blob of another call site?); at instruction {first}, "
                         f"{declaration.disagreement(next(n for k, n in sites if k == first))}")
    return found


def _calls_by_delegate(plan: m.ExecutionPlan) -> dict[int, list[tuple[int, int]]]:
    """Delegate index -> (instruction, number of arguments) of each of its calls in ``plan``."""
    delegates = plan.delegates or ()
    calls: dict[int, list[tuple[int, int]]] = {}
    for chain in plan.chains or ():
        for k, ins in enumerate(chain.instructions or ()):
            if isinstance(ins, m.DelegateCall) and 0 <= ins.delegate_index < len(delegates):
                calls.setdefault(ins.delegate_index, []).append((k, len(ins.args or ())))
    return calls


def unbindable_calls(plans: Sequence[m.ExecutionPlan], labels: Sequence[str],
                     declared: Sequence[Mapping[int, Declaration]]) -> list[str]:
    """One line per delegate whose blob binds an argument that one of its calls does not pass
    (``Declaration.past_the_call``): its backend would read or write past the call's argument list, which no
    run can prove anything about (``validate`` refuses such a program instead of running it).  A call that
    passes arguments the blob does not bind is not here: its backend ignores or refuses them, in its own words."""
    found = []
    for plan, label, method_declared in zip(plans, labels, declared):
        for index, sites in sorted(_calls_by_delegate(plan).items()):
            declaration = method_declared.get(index)
            if declaration is None:
                continue
            past = next(((k, n) for k, n in sites if declaration.past_the_call(n)), None)
            if past is None:
                continue
            instruction, passed = past
            found.append(f"method {label!r}: delegate {index} ({(plan.delegates or ())[index].id}) at instruction "
                         f"{instruction} passes {passed} arguments, and its blob binds "
                         f"{len(declaration.read) + len(declaration.written)} ({len(declaration.read)} read, "
                         f"{len(declaration.written)} written): its backend would read past the call's arguments "
                         "(a blob of another call site?)")
    return found


def declared_splits(program: m.Program, blob_of: Callable[[m.BackendDelegate], memoryview]
                    ) -> tuple[dict[int, Declaration], ...]:
    """Per method of ``program``: delegate index -> how its blob binds its calls' arguments, for the delegates whose
    blob can be read (``dataflow.delegate_call_sites`` takes it; a declaration with a ``problem``, or one that does
    not bind a call, declares nothing there).  One small read of each readable blob."""
    found = []
    for plan in program.execution_plan or ():
        declared: dict[int, Declaration] = {}
        for index, delegate in enumerate(plan.delegates or ()):
            if (delegate.id or "") in _READERS:
                declaration = declaration_of(delegate.id or "", blob_of(delegate))
                if declaration is not None:
                    declared[index] = declaration
        found.append(declared)
    return tuple(found)
