"""The names users know for a program's constants: matching recorded placeholders to value indices.

A .pte names only its external constants (``ExtraTensorInfo.fully_qualified_name``, the .ptd key); every
other constant is a bare value index.  The exporter knew the names: ExecuTorch's emitter walks each
method's graph and emits one value per placeholder, in graph order (``_Emitter.placeholder`` in
exir/emit/_emitter.py), taking the tensor behind each parameter, buffer or lifted constant from the graph
signature (``inputs_to_parameters``, ``inputs_to_buffers``, ``inputs_to_lifted_tensor_constants``).  So the
constant values of a method are its recorded constant placeholders, in order, less those a delegate took
inside its blob (and plus none: lowering and ``to_executorch`` remove placeholders, they add no constant).

The recorded program may be the final one (``ExecutorchProgramManager.exported_program``) or an earlier
one (an ETRecord holds the edge program from before lowering, ``EdgeProgramManager`` likewise), and
lowering re-creates the placeholders of what it does not delegate in another order (measured on a 1.5.1
export: ``shift`` recorded after ``proj.bias`` became value 0), so positions prove nothing.  A constant is
named when it is the only one of its dtype, shape and bytes (sha256 of its data) on both sides; without the
recorded bytes (a state dict this reader cannot parse), when it is the only one of its dtype and shape.
Tensors with the same bytes (two freshly initialised LayerNorms: ones and zeros) cannot be told apart: which
is which is recorded nowhere; when the program has as many of them as the recording, each is named with
every candidate (``ln1.weight or ln2.weight``), else they stay unnamed.  A name is given only where it is
certain; the others are counted (``ProgramNames.unnamed``) and said in a note.  Mutable buffers planned with
initial data (``k_cache``) are named the same way, from the recorded mutable buffers.

A method's user inputs and outputs keep their order through lowering and emission (the emitter lists the
user input placeholders and the output node's values in graph order), so they are named by position: the
i-th input of the program is the i-th recorded user input, when the counts agree and every tensor's dtype and
static sizes agree (a dynamic size is an upper bound in the program).  A recording that fails that, or names
none of the program's constants while it has constants to name, is not this program's: one note says so.
"""

from __future__ import annotations

import hashlib
from dataclasses import field, replace
from typing import Any, Callable, Mapping, Optional, Sequence

from pte_devconst.util.record import record
from pte_devconst.util.units import plural
from pte_devconst.schema import model as m
from pte_devconst.program.etrecord import RecordedConstant, RecordedMethod, RecordedValue, output_keys
from pte_devconst.program.executorch import method_name
from pte_devconst.schema.scalar_types import scalar_type_name
from pte_devconst.schema.pte_file import PteFile


@record
class ProgramNames:
    """Names for a program's unnamed constants: plan index -> value index -> fully qualified name."""

    by_plan: Mapping[int, Mapping[int, str]]
    source: str  # where they came from: ``ETRecord model.etrecord``, ``ExecutorchProgramManager``
    unnamed: int = 0  # constants of the program the recording could not name with certainty
    notes: tuple[str, ...] = field(default=())
    # plan index -> the name of each user input / output, by position (None: it has none the user knows)
    inputs: Mapping[int, tuple[Optional[str], ...]] = field(default_factory=dict)
    outputs: Mapping[int, tuple[Optional[str], ...]] = field(default_factory=dict)

    @property
    def count(self) -> int:
        return sum(len(values) for values in self.by_plan.values())

    @property
    def inputs_named(self) -> int:
        return sum(1 for names in self.inputs.values() for n in names if n)

    @property
    def outputs_named(self) -> int:
        return sum(1 for names in self.outputs.values() for n in names if n)

    def name(self, plan_index: int, value: int) -> Optional[str]:
        return self.by_plan.get(plan_index, {}).get(value)

    def input_name(self, plan_index: int, position: int) -> Optional[str]:
        names = self.inputs.get(plan_index, ())
        return names[position] if position < len(names) else None

    def output_name(self, plan_index: int, position: int) -> Optional[str]:
        names = self.outputs.get(plan_index, ())
        return names[position] if position < len(names) else None


def _digests(source: PteFile) -> Callable[[m.Tensor], Optional[str]]:
    """sha256 of a program tensor's bytes, each run of the file hashed once: many constants may name one entry
    (a values vector naming one tensor 200,000 times, constants aliasing one entry), and hashing it at each would
    cost their number times its size."""
    found: dict[object, Optional[str]] = {}

    def digest(tensor: m.Tensor) -> Optional[str]:
        key = source.tensor_span(tensor) or id(tensor)  # an inline or external tensor: the record itself
        if key not in found:
            data = source.tensor_bytes(tensor)
            found[key] = None if data is None else hashlib.sha256(data).hexdigest()
        return found[key]

    return digest


def match_names(source: PteFile, recorded: Mapping[str, RecordedMethod], origin: str) -> ProgramNames:
    """Name the program's unnamed constants from ``recorded`` (method -> its constant placeholders, in order)."""
    by_plan: dict[int, dict[int, str]] = {}
    inputs: dict[int, tuple[Optional[str], ...]] = {}
    outputs: dict[int, tuple[Optional[str], ...]] = {}
    unnamed = 0
    notes = []
    foreign = []  # methods the recording is not of: their inputs, outputs or constants disagree
    foreign_unnamed = 0
    for plan_index, plan in enumerate(source.program.execution_plan or ()):
        name = method_name(plan.name, plan_index)
        values = plan.values or ()
        constants = [(i, v) for i, v in enumerate(values) if isinstance(v, m.Tensor) and v.is_constant]
        unnamed_here = [(i, v) for i, v in constants if not v.fqn]
        method = recorded.get(name)
        if method is None:
            if unnamed_here or plan.inputs or plan.outputs:
                notes.append(f"{origin} has no method {name!r}")
                unnamed += len(unnamed_here)
            continue
        notes.extend(f"{origin}: {note}" for note in method.notes)
        known = {v.fqn for _, v in constants if v.fqn}
        candidates = [c for c in method.constants if c.name not in known]
        found = _match(source, unnamed_here, candidates)
        unnamed += len(unnamed_here) - len(found)
        ours_keys = {(scalar_type_name(v.scalar_type), tuple(v.sizes or ())) for _, v in unnamed_here}
        unrelated = bool(ours_keys) and bool(candidates) and not ours_keys & {c.key for c in candidates}
        mutable = [(i, v) for i, v in enumerate(values)
                   if isinstance(v, m.Tensor) and v.is_planned and v.has_initial_data and not v.fqn]
        if mutable and method.mutable:
            found.update(_match(source, mutable, method.mutable))
        by_plan[plan_index] = dict(sorted(found.items()))
        ins = _positional(values, plan.inputs or (), method.inputs)
        outs = _positional(values, plan.outputs or (), method.outputs)
        if (method.inputs is not None and ins is None) or (method.outputs is not None and outs is None) or unrelated:
            foreign.append(name)  # its inputs and outputs stay unnamed: the positions are another method's
            foreign_unnamed += len(unnamed_here) - len(found)
            continue
        if ins is not None:
            inputs[plan_index] = ins
        if outs is not None:
            outputs[plan_index] = outs
    if foreign:
        notes.append(f"{origin} does not match this program (method{'s' if len(foreign) > 1 else ''} "
                     f"{', '.join(map(repr, foreign))}: its inputs, outputs or constants differ): is it the "
                     "ETRecord of this export?")
    if unnamed > foreign_unnamed:
        notes.append(f"{plural(unnamed - foreign_unnamed, 'constant')} not named: {origin} does not tell them apart "
                     "with certainty")
    return ProgramNames(by_plan, origin, unnamed, tuple(notes), inputs, outputs)


def _positional(values: Sequence[object], indices: Sequence[int], recorded: Optional[Sequence[RecordedValue]]
                ) -> Optional[tuple[Optional[str], ...]]:
    """The recorded names of a method's inputs (or outputs), by position; None when the recording is not of
    these values: another count, or a recorded tensor where the program has another dtype, static size or a scalar."""
    if recorded is None or len(recorded) != len(indices):
        return None
    for index, value in zip(indices, recorded):
        if value.dtype is None:
            continue  # a scalar, or a tensor whose meta was not recorded: nothing to compare
        ours = values[index] if 0 <= index < len(values) else None
        if not isinstance(ours, m.Tensor) or scalar_type_name(ours.scalar_type) != value.dtype:
            return None
        sizes = tuple(ours.sizes or ())
        if value.sizes is not None and (len(value.sizes) != len(sizes) or any(
                r is not None and r != s for r, s in zip(value.sizes, sizes))):
            return None
    return tuple(value.name for value in recorded)


def _match(source: PteFile, program: Sequence[tuple[int, m.Tensor]], recorded: Sequence[RecordedConstant]
           ) -> dict[int, str]:
    _digest = _digests(source)
    groups: dict[tuple[object, ...], tuple[list[tuple[int, m.Tensor]], list[RecordedConstant]]] = {}
    for index, tensor in program:
        key = (scalar_type_name(tensor.scalar_type), tuple(tensor.sizes or ()))
        groups.setdefault(key, ([], []))[0].append((index, tensor))
    for constant in recorded:
        if constant.key in groups:
            groups[constant.key][1].append(constant)
    found: dict[int, str] = {}
    for ours, theirs in groups.values():
        digests = [c.digest() if c.digest else None for c in theirs]
        if len(ours) == 1 and len(theirs) == 1:
            index, tensor = ours[0]
            if digests[0] is None or digests[0] == _digest(tensor):
                found[index] = theirs[0].name  # the only tensor of its dtype and shape on both sides
        elif digests and all(d is not None for d in digests):
            # The bytes decide.  A tensor of the program whose bytes the recording lacks (folded, changed) stays
            # unnamed, and so do tensors with the same bytes: which is which is not recorded anywhere.
            by_digest: dict[Optional[str], tuple[list[int], list[str]]] = {}
            for index, tensor in ours:
                by_digest.setdefault(_digest(tensor), ([], []))[0].append(index)
            for constant, digest in zip(theirs, digests):
                if digest in by_digest:
                    by_digest[digest][1].append(constant.name)
            for digest, (indices, names) in by_digest.items():
                if digest is None or len(indices) != len(names):
                    continue  # a delegate took some of these bytes inside: which ones is recorded nowhere
                joint = names[0] if len(names) == 1 else _either(names)
                found.update((index, joint) for index in indices)
    return dict(sorted(found.items()))


JOINT_NAMES_SHOWN = 3


def _either(names: Sequence[str]) -> str:
    """The name of one of several tensors with the same bytes: every candidate (``ln1.weight or ln2.weight``)."""
    if len(names) <= JOINT_NAMES_SHOWN:
        return " or ".join(names)
    return f"{names[0]} or {len(names) - 1} others with the same bytes"


def name_opened(source: PteFile, namer: Optional[Callable[[PteFile], Optional[ProgramNames]]]
                ) -> Optional[ProgramNames]:
    """Name an opened program's constants for a report (its ``program`` becomes ``named_program``'s); the names
    ``namer`` found, or None without one.  Only for a program that is read, never for one a rewrite applies."""
    names = namer(source) if namer is not None else None
    source.program = named_program(source.program, names)
    return names


def named_program(program: m.Program, names: Optional[ProgramNames]) -> m.Program:
    """``program`` with each named constant's name in its ``ExtraTensorInfo``: for reports only, never written.

    Every report takes a constant's name from ``fully_qualified_name``; a constant of the program's own keeps it.
    """
    if names is None or not names.count:
        return program
    plans = list(program.execution_plan or ())
    for plan_index, values_named in names.by_plan.items():
        if not values_named:
            continue
        plan = plans[plan_index]
        values = list(plan.values or ())
        for index, name in values_named.items():
            value = values[index]
            if isinstance(value, m.Tensor) and not value.fqn:
                info = value.extra_tensor_info or m.ExtraTensorInfo()
                values[index] = replace(value, extra_tensor_info=replace(info, fully_qualified_name=name))
        plans[plan_index] = replace(plan, values=tuple(values))
    return replace(program, execution_plan=tuple(plans))


def recorded_from_programs(programs: Mapping[str, Any]) -> dict[str, RecordedMethod]:
    """method -> its constants, from live ``torch.export.ExportedProgram`` objects (an API caller's managers).

    Reads the graph signature and each placeholder's ``meta["val"]``; the bytes come from ``state_dict``
    and ``constants``.  The caller holds torch objects, so torch is loaded already; nothing here imports it.
    """
    methods = {}
    for method, program in programs.items():
        signature = program.graph_signature
        mutated = set(getattr(signature, "buffers_to_mutate", {}).values())
        placeholders = {node.name: node for node in program.graph.nodes if node.op == "placeholder"}
        state = {**getattr(program, "constants", {}), **getattr(program, "state_dict", {})}
        nodes = {node.name: node for node in program.graph.nodes}
        constants: list[RecordedConstant] = []
        mutable: list[RecordedConstant] = []
        inputs: list[RecordedValue] = []
        for spec in signature.input_specs:
            kind = getattr(spec.kind, "name", "")
            if kind == "USER_INPUT":
                name = getattr(spec.arg, "name", None)
                inputs.append(_live_value(nodes.get(name) if isinstance(name, str) else None,
                                          name if isinstance(name, str) and name else None))
                continue
            if kind not in ("PARAMETER", "BUFFER", "CONSTANT_TENSOR") or spec.target is None:
                continue
            node = placeholders.get(getattr(spec.arg, "name", None))
            value = node.meta.get("val") if node is not None else None
            if value is None or not hasattr(value, "dtype"):
                continue
            try:
                sizes = tuple(int(s) for s in value.shape)
            except TypeError:  # a symbolic size
                continue
            tensor = state.get(spec.target)
            (mutable if spec.target in mutated else constants).append(RecordedConstant(
                spec.target, str(value.dtype).removeprefix("torch."), sizes,
                _digest_of(tensor) if tensor is not None else None))
        user_outputs = [spec.arg for spec in signature.output_specs if getattr(spec.kind, "name", "") == "USER_OUTPUT"]
        keys = output_keys(_live_out_spec(program), len(user_outputs)) or (None,) * len(user_outputs)
        outputs = tuple(_live_value(nodes.get(getattr(arg, "name", None)), key) for arg, key in zip(user_outputs, keys))
        methods[method] = RecordedMethod(method, tuple(constants), tuple(inputs), outputs, tuple(mutable))
    return methods


def _live_out_spec(program: object) -> object:
    """The ``out_spec`` of a live ExportedProgram's root call, or None."""
    for entry in getattr(program, "module_call_graph", None) or ():
        if getattr(entry, "fqn", None) == "" and getattr(entry, "signature", None) is not None:
            return entry.signature.out_spec
    return None


def _live_value(node: object, name: Optional[str]) -> RecordedValue:
    """A user input or output of a live program: its name, and dtype and sizes from the node's ``meta["val"]``."""
    value = getattr(node, "meta", {}).get("val") if node is not None else None
    if value is None or not hasattr(value, "dtype") or not hasattr(value, "shape"):
        return RecordedValue(name)
    sizes = tuple(size if isinstance(size, int) else None for size in value.shape)  # a SymInt: compared with nothing
    return RecordedValue(name, str(value.dtype).removeprefix("torch."), sizes)


def _digest_of(tensor: object) -> Callable[[], Optional[str]]:
    """The digest of ``tensor``, computed when a match needs it (most constants are matched by shape alone)."""
    return lambda: _tensor_digest(tensor)


def _tensor_digest(tensor: object) -> Optional[str]:
    """sha256 of a torch tensor's bytes, as the emitter writes them (contiguous)."""
    try:
        import torch  # the caller's object is a torch tensor: torch is loaded

        data = tensor.detach().contiguous().reshape(-1).view(torch.uint8)  # type: ignore[attr-defined]
        return hashlib.sha256(data.numpy().tobytes()).hexdigest()
    except Exception:  # noqa: BLE001 - a tensor we cannot read (a fake one): match without its bytes
        return None
