"""A program around one delegate of another program: how the runner hands a delegate to the ExecuTorch runtime.

The installed ExecuTorch runtime executes whole programs, never one delegate of one.  So for a delegate whose
backend that runtime registers (``runtime_backend.py``), the runner writes a program that holds only it: the
same processed blob, the same compile specs, the named data its blob names, and one method per distinct
DelegateCall of it (``call0``, ``call1``, ...).  A method is that one call: its values are the call's arguments
(the same dtypes, sizes, dim orders and dynamism), the call's inputs are the method's inputs and its outputs
the method's outputs.  Outputs are planned in one host buffer, which the runtime copies out; an input the call
only reads has no planned memory, so the runtime reads it where the caller keeps it (no copy of a weight per
call).  Nothing here runs anything: it is a pure function of the program, written to a file by the project's own
writer (``runner/staging.py``, ``schema/pte_writer.py``).

Named data: a delegate finds its data by key at init (XNNPACK names its weights by their SHA-256), and the
program does not say which delegate uses which key; an entry goes into the new program when its key's bytes
appear in the blob or in a compile spec (``named_keys_in``).  A backend that computes its keys otherwise fails
its init there, with the runtime's message.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Optional, Sequence

from pte_devconst.program.dataflow import DelegateCallSite
from pte_devconst.schema import model as m
from pte_devconst.schema.pte_writer import ComputedPiece, SegmentContent
from pte_devconst.util.errors import UnsupportedProgramError
from pte_devconst.util.record import record

ALIGNMENT = 64  # each tensor's offset in the method's buffer
SLACK = 64  # bytes after each tensor: XNNPACK may read up to 16 bytes past the end of an input (XNN_EXTRA_BYTES)
SEGMENT_ALIGNMENT = 16


@record
class CallMethod:
    """One method of the new program: one DelegateCall, by the original program's value indices."""

    name: str
    inputs: tuple[int, ...]  # the original value behind each method input, in order
    outputs: tuple[int, ...]  # the original value behind each method output, in order
    literals: tuple[tuple[int, Any], ...]  # non-tensor inputs written into the program: (value index, value)


@record
class DelegateProgram:
    """The new program, its segments, and its method for each call (by the call's argument tuple)."""

    program: m.Program
    contents: tuple[SegmentContent, ...]
    methods: Mapping[tuple[int, ...], CallMethod]


def _literal(value: m.EValue, where: str) -> Any:
    """The Python value of a non-tensor argument, as the runner holds it."""
    if isinstance(value, (m.Null, type(None))):
        return None
    if isinstance(value, m.Int):
        return int(value.int_val)
    if isinstance(value, m.Bool):
        return bool(value.bool_val)
    if isinstance(value, m.Double):
        return float(value.double_val)
    raise UnsupportedProgramError(f"a {type(value).__name__} argument cannot be passed to the ExecuTorch runtime "
                                  "in a program of its own", where=where)


def _method(name: str, site: DelegateCallSite, values: Sequence[m.EValue], where: str
            ) -> tuple[m.ExecutionPlan, CallMethod]:
    """The plan of one call: a value per distinct argument (a repeated one stays one value), tensors planned."""
    order = list(dict.fromkeys(site.args))
    local = {index: position for position, index in enumerate(order)}
    planned: list[m.EValue] = []
    literals: list[tuple[int, Any]] = []
    size = 0
    tensors = {index for index in order if 0 <= index < len(values) and isinstance(values[index], m.Tensor)}
    outputs = tuple(dict.fromkeys(site.outputs))
    inputs = tuple(dict.fromkeys(i for i in site.inputs if i in tensors))
    # An input only read is left unplanned: the runtime then uses the caller's memory for it (Method::set_input
    # shares the data of an input without planned memory) instead of copying it into the method's buffer.
    borrowed = set(inputs) - set(outputs)
    for index in order:
        if not 0 <= index < len(values):
            raise UnsupportedProgramError(f"argument value {index} is out of range", where=where)
        value = values[index]
        if isinstance(value, m.Tensor) and index in borrowed:
            planned.append(m.replace(value, storage_offset=0, data_buffer_idx=0, extra_tensor_info=None,
                                     allocation_info=None))
        elif isinstance(value, m.Tensor):
            planned.append(m.replace(value, storage_offset=0, data_buffer_idx=0, extra_tensor_info=None,
                                     allocation_info=m.AllocationDetails(memory_id=1, memory_offset=size)))
            size += -(-(value.nbytes + SLACK) // ALIGNMENT) * ALIGNMENT
        else:
            literals.append((index, _literal(value, where)))
            planned.append(value)
    plan = m.ExecutionPlan(
        name=name, container_meta_type=m.ContainerMetadata("", ""), values=tuple(planned),
        inputs=tuple(local[i] for i in inputs), outputs=tuple(local[i] for i in outputs),
        chains=(m.Chain(inputs=(), outputs=(), instructions=(
            m.DelegateCall(delegate_index=0, args=tuple(local[i] for i in site.args)),)),),
        operators=(), delegates=(), non_const_buffer_sizes=(0, size))
    return plan, CallMethod(name, inputs, outputs, tuple(literals))


SEARCH_BUDGET = 1 << 26  # bytes compared when looking for keys anywhere in the blob (not as whole strings)


def named_keys_in(parts: Sequence[bytes], keys: Sequence[str]) -> list[str]:
    """The keys (in order, each once) whose UTF-8 bytes ``parts`` (a blob, compile spec values) name.

    A flatbuffer stores a string NUL-terminated after its length, so a key a blob names is one of its
    NUL-delimited tokens: that finds them in one pass over the bytes.  Keys not found so are then looked
    for anywhere in ``parts``, while that costs fewer than ``SEARCH_BUDGET`` byte comparisons, so the work
    stays bounded by the program's size whatever the number of keys.
    """
    encoded = {key: key.encode("utf-8", "surrogateescape") for key in dict.fromkeys(keys)}
    tokens = {token for part in parts for token in bytes(part).split(b"\x00") if token}
    found = {key for key, data in encoded.items() if data in tokens}
    rest = [key for key, data in encoded.items() if data and key not in found]
    if len(rest) * sum(len(part) for part in parts) <= SEARCH_BUDGET:
        found.update(key for key in rest if any(encoded[key] in part for part in parts))
    return [key for key in encoded if key in found]


def _producer(view: memoryview) -> Callable[[], memoryview]:
    """The writer asks for a named-data entry's bytes when it reaches them: no copy is made before."""
    return lambda: view


def delegate_program(backend_id: str, blob: bytes, compile_specs: Mapping[str, bytes],
                     sites: Sequence[DelegateCallSite], values: Sequence[m.EValue],
                     named_data: Callable[[str], Optional[memoryview]], named_keys: Sequence[str],
                     version: int = 0, where: str = "") -> DelegateProgram:
    """A program of the one delegate ``blob`` with one method per distinct call in ``sites`` (see the module)."""
    specs = tuple(m.CompileSpec(key, value) for key, value in compile_specs.items())
    # Segment 0: an empty constant segment (the runtime refuses a program without one); 1: the blob.
    contents: list[SegmentContent] = [SegmentContent(0), SegmentContent.of(bytes(blob), SEGMENT_ALIGNMENT)]
    named: list[m.NamedData] = []
    for key in named_keys_in((blob, *compile_specs.values()), named_keys):
        data = named_data(key)
        if data is not None:
            named.append(m.NamedData(key=key, segment_index=len(contents)))
            view = memoryview(data)
            contents.append(SegmentContent.of(ComputedPiece(view.nbytes, _producer(view), f"named data {key}"),
                                              SEGMENT_ALIGNMENT))
    delegate = m.BackendDelegate(id=backend_id, processed=m.BackendDelegateDataReference(m.DataLocation.SEGMENT, 1),
                                 compile_specs=specs)
    plans: list[m.ExecutionPlan] = []
    methods: dict[tuple[int, ...], CallMethod] = {}
    for site in sites:
        if site.args in methods:
            continue
        plan, method = _method(f"call{len(plans)}", site, values,
                               f"{where}: chain {site.chain} instruction {site.instruction}")
        plans.append(m.replace(plan, delegates=(delegate,)))
        methods[site.args] = method
    program = m.Program(version=version, execution_plan=tuple(plans), constant_buffer=(), backend_delegate_data=(),
                        segments=(), constant_segment=m.SubsegmentOffsets(segment_index=0, offsets=(0,)),
                        named_data=tuple(named))
    return DelegateProgram(program, tuple(contents), methods)

