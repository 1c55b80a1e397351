"""The plan's vocabulary: the options a rewrite is planned with and the records ``make_plan`` fills in.

``plan.py`` decides (selection, folds, layout) and the chosen encoding (``rewriter/encodings``) fills in these
records; ``edit.py``, ``apply.py``, ``verify.py`` and every report read them.  They live apart from the decisions so
that the encodings and the editor depend on the records, never on the planner (no import cycle:
``tests/test_structure.py``).  ``skip_reason`` is here too: the one selection rule (``--device``,
``--min-bytes``) that the planner, the encodings and the gate apply.
"""

from __future__ import annotations

from typing import AbstractSet, Any, Optional, Protocol

from pte_devconst.program.layout import AppendedRegions, BufferGrowth
from pte_devconst.schema import model as m
from pte_devconst.schema.model import Device
from pte_devconst.util.errors import UnsupportedProgramError
from pte_devconst.util.record import record
from pte_devconst.util.units import plural

from .analysis import ConstantVerdict, DeviceCopy, MethodAnalysis, RewiredDelegateArg
from ..fold import FoldChain, FoldRecipe


class Selection(Protocol):
    """What the one selection rule (``skip_reason``) reads of a rewrite's options (``plan.RewriteOptions``)."""

    @property
    def devices(self) -> Optional[frozenset[Device]]: ...  # only these devices (None: every device)

    @property
    def min_bytes(self) -> int: ...  # leave values smaller than this where they are


@record
class Placement:
    """One constant moved into planned memory on ``device`` with initial data."""

    method: str  # the method's label (its name, with the plan index when names repeat)
    value: int
    name: str
    device: Device
    nbytes: int
    memory_id: int
    offset: int
    initial_data_index: int  # index into mutable_data_segments[0].offsets; 0 for external constants
    source_index: int  # the constant's data_buffer_idx before the rewrite (external: its .ptd index)
    external_key: Optional[str]
    copies: tuple[DeviceCopy, ...]
    delegate_args: tuple[RewiredDelegateArg, ...]
    copies_per_call: int
    plan_index: int = 0
    held_by: Optional[int] = None  # the value its encoding keeps it in on the device (None: the constant itself)

    @property
    def bytes_per_call(self) -> int:
        return self.nbytes * self.copies_per_call

    @property
    def holder(self) -> int:
        """The value that holds the constant in device memory: itself, or the value its encoding keeps it in."""
        return self.value if self.held_by is None else self.held_by


class EncodingPayload:
    """What an encoding records in a method's edit besides the placements, folds and re-encoded constants (its
    own instructions and values): opaque to every other module, made by ``Encoding.payload`` and read back by the
    same encoding's ``leading_instructions`` and self-check.  The base says what a report may ask of any: how many
    instructions it writes in front of chain 0 and how many copies those make."""

    __slots__ = ()

    @property
    def leading(self) -> int:
        """Instructions the encoding writes at the start of chain 0 (0: none)."""
        return 0

    @property
    def copies(self) -> int:
        """Host-to-device copies among them (each run once per loaded method)."""
        return 0

    def copies_phrase(self, count: int) -> str:
        """``4 copies written in front of the method, each run once``: what ``rewrite`` says of ``count`` such copies
        (over every method's payload of this kind)."""
        return f"{plural(count, 'copy', 'copies')} written in front of the method, each run once"


@record
class NoPayload(EncodingPayload):
    """An edit with nothing of its encoding's own."""


NO_PAYLOAD = NoPayload()


@record
class ConstantEntry:
    """A new entry of the constant segment (an encoding that keeps host constants: ``Storage.new_entries``): the
    bytes of initial-data entry ``initial_data`` of the input (a constant re-encoded), or the bytes ``recipe``
    computes (a folded value)."""

    index: int
    nbytes: int
    initial_data: int = 0
    recipe: Optional[FoldRecipe] = None


@record
class Reencoded:
    """A constant another encoding holds on its device, taken over by the chosen one (``Encoding.convert``): value
    ``value`` keeps its device memory, filled from host constant ``source`` (a new value, reading constant entry
    ``entry``, or the .ptd by ``external_key``) as the chosen encoding fills it."""

    method: str
    plan_index: int
    value: int
    name: str
    device: Device
    nbytes: int
    source: int
    entry: int  # into the new constant table; 0 for an external constant
    external_key: Optional[str]
    memory_id: int
    offset: int
    initial_data_index: int  # the initial-data entry it read in the input (0: external)


@record
class FoldPlacement:
    """A value made device-resident with initial data: computed by folding ``chain``, or (a chain without
    kernels) a device copy of a constant the host also reads."""

    method: str
    plan_index: int
    value: int  # the device-resident value: the device copy's destination, the chain's result, or a new value
    appended: bool  # a new value, past the input's (the result is also read on the host)
    chain: FoldChain
    memory_id: int
    offset: int
    initial_data_index: int  # into mutable_data_segments[0].offsets; 0 for a copy of an external constant
    external_key: Optional[str]  # a copy of an external constant is loaded from the .ptd by this key
    removed: tuple[tuple[int, int], ...]  # (chain, instruction) of the kernels and copies that go with it
    filled_from: Optional[int] = None  # the value its encoding fills ``value`` from (None: its own bytes)

    @property
    def device(self) -> Device:
        return self.chain.device

    @property
    def holder(self) -> int:
        """The value that holds the folded bytes in device memory (``Placement.holder``'s counterpart)."""
        return self.value

    @property
    def delegate_args(self) -> tuple[RewiredDelegateArg, ...]:
        return self.chain.delegate_args

    @property
    def nbytes(self) -> int:
        return self.chain.nbytes

    @property
    def bytes_per_call(self) -> int:
        return self.chain.bytes_per_call

    @property
    def duplicate(self) -> bool:
        return self.chain.duplicate

    @property
    def tensor(self) -> m.Tensor:
        """The value's type, sizes and dim order (those of the chain's result)."""
        return self.chain.result_tensor


@record
class MethodEdit:
    name: str
    plan_index: int
    placements: tuple[Placement, ...]
    buffers: tuple[BufferGrowth, ...]
    removed: tuple[tuple[int, int], ...]  # (chain, instruction) of deleted copy kernels (and folded kernels)
    instruction_maps: tuple[tuple[Optional[int], ...], ...]  # per chain: old index -> new index (None: removed)
    folds: tuple[FoldPlacement, ...] = ()
    released: tuple[int, ...] = ()  # constants nothing reads any more whose bytes leave the file (their data
    # index becomes 0: an unbound tensor the runtime never dereferences)
    relocations: tuple[tuple[int, int, Optional[int]], ...] = ()  # (value, memory_id, new offset or None:
    # unplanned) for every other planned value of a relaid buffer whose place changes
    payload: EncodingPayload = NO_PAYLOAD  # what the encoding writes of its own (opaque: ``EncodingPayload``)
    new_values: tuple[tuple[int, m.EValue], ...] = ()  # values appended after the folds' (the encoding's own)
    reencoded: tuple[Reencoded, ...] = ()  # constants another encoding held that this one takes over
    encoding: str = ""  # the key of the encoding that filled it in (rewriter/encodings; "": the default)

    @property
    def leading_length(self) -> int:
        """Instructions the encoding writes at the start of chain 0 (0: none)."""
        return self.payload.leading

    @property
    def bytes_per_call_saved(self) -> int:
        return sum(p.bytes_per_call for p in self.placements) + sum(f.bytes_per_call for f in self.folds)

    @property
    def appended(self) -> tuple[FoldPlacement, ...]:
        return tuple(f for f in self.folds if f.appended)


@record
class InitialData:
    """One new entry of the mutable data segment: the bytes of constant entry ``source_index``, or the bytes
    ``recipe`` computes (a folded value; ``source_index`` is then 0)."""

    index: int
    source_index: int
    nbytes: int
    recipe: Optional[FoldRecipe] = None


@record
class Skipped:
    verdict: ConstantVerdict
    reason: str


@record
class FoldSkipped:
    """A chain that could fold but does not: filtered out (--device, --min-bytes), or refused for its data."""

    chain: FoldChain
    reason: str


@record
class SegmentPolicy:
    """How the rewrite treats segments that several tables share (never re-laid out under the others).

    ``constant_shared_with`` names what else reads the constant segment: then no entry is dropped
    from it and it is copied unchanged.  ``fresh_mutable`` (with ``mutable_shared_with``): the
    initial data goes into a new segment that starts with a copy of the old one, and the old
    segment stays, unchanged, for the tables that share it.
    """

    constant_shared_with: tuple[str, ...] = ()
    mutable_shared_with: tuple[str, ...] = ()

    @property
    def fresh_mutable(self) -> bool:
        return bool(self.mutable_shared_with)


def skip_reason(device: Optional[Device], nbytes: int, options: Selection) -> Optional[str]:
    """Why the options leave a value of ``nbytes`` bound for ``device`` where it is (None: they select it).

    The one selection rule (``--device``, ``--min-bytes``): the plan applies it to constants and chains,
    and ``check`` to what it reports, so the two cannot disagree.
    """
    if options.devices is not None and device not in options.devices:
        return f"device {device} not selected (--device)"
    if nbytes < options.min_bytes:
        return f"{nbytes} bytes is below --min-bytes {options.min_bytes}"
    return None


def existing_mutable_entries(program: m.Program) -> int:
    lists = program.mutable_data_segments or ()
    return len(lists[0].offsets or ()) if lists else 1  # entry 0 is reserved and empty


@record
class Unconverted:
    """A tensor of the input that only a newer runtime loads (``Encoding.needs``) and the chosen encoding leaves
    so: it keeps the output needing that runtime."""

    method: str
    plan_index: int
    value: int
    name: str
    device: Device
    nbytes: int
    reason: str


class Storage:
    """Where the bytes of what moves live in the file, program-wide, as the encoding decides (``Encoding.storage``):
    the new initial-data entries (by the constant entry or fold recipe they copy), the constant entries nothing
    reads any more, and the new constant entries (working state: an encoding adds to ``new_entries`` while it
    places)."""

    __slots__ = ("dropped", "entry_of_recipe", "entry_of_source", "initial_data", "new_entries")

    def __init__(self, dropped: tuple[int, ...] = (), initial_data: tuple["InitialData", ...] = (),
                 entry_of_source: Optional[dict[int, int]] = None, entry_of_recipe: Optional[dict[FoldRecipe, int]]
                 = None, new_entries: Optional["NewConstantEntries"] = None) -> None:
        self.dropped = dropped
        self.initial_data = initial_data
        self.entry_of_source = entry_of_source or {}
        self.entry_of_recipe = entry_of_recipe or {}
        self.new_entries = new_entries


class MethodJob:
    """One method as its encoding fills in the plan: the method, where new regions go, the values it appends, the
    program-wide storage, and what it collects (its own, for its payload; what it cannot convert)."""

    __slots__ = ("collected", "method", "new_values", "options", "plan", "program", "regions", "storage",
                 "unconverted")

    def __init__(self, program: m.Program, method: MethodAnalysis, options: Selection, storage: Storage,
                 unconverted: list[Unconverted]) -> None:
        self.program = program
        self.method = method
        self.plan = (program.execution_plan or ())[method.plan_index]
        self.options = options
        self.storage = storage
        self.regions = AppendedRegions(self.plan, method.label)  # program/layout.py: which buffer, which offset
        self.new_values = NewValues(len(self.plan.values or ()))
        self.collected: list[Any] = []  # what the encoding gathers while it places (read by its ``payload``)
        self.unconverted = unconverted


class NewValues:
    """The values a method's edit appends, numbered in the order they are taken (folded values, host constants,
    the encoding's own values)."""

    def __init__(self, first: int) -> None:
        self.next = first
        self._added: list[tuple[int, m.EValue]] = []

    def take(self) -> int:
        """A new index whose value the fold's own record describes (a folded value)."""
        self.next += 1
        return self.next - 1

    def add(self, value: m.EValue) -> int:
        index = self.take()
        self._added.append((index, value))
        return index

    def added(self) -> tuple[tuple[int, m.EValue], ...]:
        return tuple(self._added)


class NewConstantEntries:
    """New entries of the constant segment, numbered past the entries the rewrite keeps; equal sources share one."""

    def __init__(self, program: m.Program, dropped: tuple[int, ...]) -> None:
        self.program = program
        self.dropped = dropped
        self._entries: list[ConstantEntry] = []
        self._of_initial: dict[int, int] = {}
        self._of_recipe: dict[FoldRecipe, int] = {}

    def _next(self) -> int:
        return _constant_base(self.program, len(self.dropped)) + len(self._entries)

    def copied(self, initial_data: int, nbytes: int) -> int:
        """The entry holding the bytes of the input's initial-data entry ``initial_data``."""
        found = self._of_initial.get(initial_data)
        if found is None:
            found = self._of_initial[initial_data] = self._next()
            self._entries.append(ConstantEntry(found, nbytes, initial_data=initial_data))
        return found

    def computed(self, recipe: FoldRecipe) -> int:
        """The entry holding what ``recipe`` computes."""
        found = self._of_recipe.get(recipe)
        if found is None:
            found = self._of_recipe[recipe] = self._next()
            self._entries.append(ConstantEntry(found, recipe.nbytes, recipe=recipe))
        return found

    def entries(self) -> tuple[ConstantEntry, ...]:
        return tuple(self._entries)


def _constant_base(program: m.Program, dropped: int) -> int:
    """The index the first new constant entry gets: past the entries the rewrite keeps (entry 0 is reserved)."""
    cs = program.constant_segment
    offsets = (cs.offsets or ()) if cs is not None else ()
    if len(offsets) <= 1 and program.constant_buffer:
        raise UnsupportedProgramError("the program keeps its constants in the deprecated inline constant_buffer; "
                                      "a 1.5 rewrite cannot add the host constants it needs there")
    return max(1, len(offsets) - dropped)


def constant_entry_of(plan: m.ExecutionPlan, value: int) -> Optional[int]:
    """The constant entry a value reads (None: not a constant of the segment)."""
    tensor = (plan.values or ())[value]
    return tensor.data_buffer_idx if isinstance(tensor, m.Tensor) and tensor.is_constant and not tensor.is_external \
        else None


def dropped_constants(program: m.Program, moved: list[ConstantVerdict],
                       unread: AbstractSet[tuple[int, int]] = frozenset()) -> tuple[int, ...]:
    """Constant entries that only moved values, or values nothing reads any more, referenced (any method):
    their bytes can leave the segment."""
    cs = program.constant_segment
    if cs is None or len(cs.offsets or ()) <= 1:
        return ()  # no constant segment, or the deprecated inline constant_buffer: leave it alone
    gone = {(v.plan_index, v.value) for v in moved} | set(unread)
    candidates = {v.tensor.data_buffer_idx for v in moved if not v.tensor.is_external}
    for plan_index, unread_value in unread:
        entry = constant_entry_of((program.execution_plan or ())[plan_index], unread_value)
        if entry is not None:
            candidates.add(entry)
    for plan_index, plan in enumerate(program.execution_plan or ()):
        for index, value in enumerate(plan.values or ()):
            if (isinstance(value, m.Tensor) and value.is_constant and not value.is_external
                    and (plan_index, index) not in gone):
                candidates.discard(value.data_buffer_idx)
    return tuple(sorted(candidates))
