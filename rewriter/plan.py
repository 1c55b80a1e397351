"""Decide the rewrite: where each eligible constant goes, which copies disappear, what grows.

A pure function of the analysis, the program and the user's options; it returns
a ``RewritePlan`` that ``apply.py`` carries out without further decisions and
that ``--dry-run`` prints as it is.  Placement follows ExecuTorch 1.6's
``skip_h2d_for_constants`` encoding (see docs/design.md): each moved constant
becomes resident device memory, and its bytes become initial data in the
mutable data segment, stored once however many methods move it.  Where in
device memory (which buffer, which offset, laid out again or appended) is
``program/layout.py``'s decision; this module records it.
"""

from __future__ import annotations

from dataclasses import field, replace
from typing import AbstractSet, Callable, Mapping, Optional

from pte_devconst.schema import model as m
from pte_devconst.util.errors import PteDevconstError, UnsupportedProgramError
from pte_devconst.schema.model import Device
from pte_devconst.util.record import record

from pte_devconst.program.executorch import H2D_COPY
from pte_devconst.program.kernel_effects import copy_slots
from pte_devconst.program.regions import memory_device
from pte_devconst.program.layout import AppendedRegions, BufferGrowth, DeviceMemory, device_memory, relayout
from pte_devconst.program.prologue import GUARD_INSTRUCTIONS
from pte_devconst.program.executorch import method_labels
from pte_devconst.program.runtime import Runtime, RuntimeNeed, device_initial_data

from .analysis import Analysis, ConstantVerdict, DeviceCopy, MethodAnalysis, RewiredDelegateArg
from .edit import edit_method
from .fold import FoldChain, FoldRecipe, MethodFolds, removed_steps


@record
class RewriteOptions:
    devices: Optional[frozenset[Device]] = None  # only move constants to these devices (None: every device)
    min_bytes: int = 0  # leave constants smaller than this where they are
    host_placement: bool = False  # library-only: place host-read constants in planned CPU memory (tests)
    fold: bool = False  # also fold chains of host kernels from constants to device readers (fold/)
    duplicate_shared: bool = False  # give device readers of constants also read on the host their own copy
    relayout: bool = True  # lay the buffers that receive constants out again by lifetimes (program/memory.py)
    runtime: Runtime = Runtime.V1_6  # the encoding: device initial data (1.6) or first-call copies (1.5)


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
    device_copy: Optional[int] = None  # 1.5: the device value the constant is copied into once, on the first call

    @property
    def bytes_per_call(self) -> int:
        return self.nbytes * self.copies_per_call

    @property
    def first_call(self) -> bool:
        """The 1.5 encoding: the constant stays on the host and a first-call prologue copies it to ``holder``."""
        return self.device_copy is not None

    @property
    def holder(self) -> int:
        """The value that holds the constant in device memory: itself (1.6), or its device copy (1.5)."""
        return self.value if self.device_copy is None else self.device_copy


@record
class FirstCallCopy:
    """One copy of the first-call prologue a rewrite writes (``program/prologue.py``): ``_h2d_copy.out`` of host
    constant ``src`` into ``dst``, device memory that holds it for the whole method."""

    src: int
    dst: int
    args: tuple[int, ...]  # the kernel's arguments, its return slot included
    device: Device


@record
class ConstantEntry:
    """A new entry of the constant segment (1.5 rewrites): the bytes of initial-data entry ``initial_data`` of
    the input (a 1.6 constant re-encoded), or the bytes ``recipe`` computes (a folded value)."""

    index: int
    nbytes: int
    initial_data: int = 0
    recipe: Optional[FoldRecipe] = None


@record
class Reencoded:
    """A constant in the 1.6 encoding (device initial data) re-encoded for the 1.5 runtime: value ``value`` keeps
    its device memory but no initial data, and the first-call prologue fills it from host constant ``source``
    (a new value, reading constant entry ``entry``, or the .ptd by ``external_key``)."""

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
    first_call_source: Optional[int] = None  # 1.5: the host constant copied into ``value`` on the first call

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
    prologue: tuple[FirstCallCopy, ...] = ()  # the first-call prologue written at the start of chain 0 (1.5)
    guard: Optional[tuple[int, int]] = None  # (guard, cleared_from): the prologue's Bool values
    new_values: tuple[tuple[int, m.EValue], ...] = ()  # values appended after the folds' (host constants, Bools)
    reencoded: tuple[Reencoded, ...] = ()  # constants in the 1.6 encoding made first-call copies (1.5)

    @property
    def prologue_length(self) -> int:
        """Instructions the written prologue takes at the start of chain 0 (0: none)."""
        return len(self.prologue) + GUARD_INSTRUCTIONS if self.prologue else 0

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


@record
class RewritePlan:
    analysis: Analysis
    options: RewriteOptions
    methods: tuple[MethodEdit, ...]
    initial_data: tuple[InitialData, ...]
    dropped_constants: tuple[int, ...]  # constant entries nothing reads any more
    skipped: tuple[Skipped, ...] = field(default=())
    segments: SegmentPolicy = field(default_factory=SegmentPolicy)
    fold_skipped: tuple[FoldSkipped, ...] = field(default=())
    dropped_bytes: int = 0  # the bytes of the dropped constant entries
    memory: DeviceMemory = field(default_factory=DeviceMemory)  # planned device memory before and after
    constant_entries: tuple[ConstantEntry, ...] = ()  # new entries of the constant segment (1.5)
    kept_for_runtime: tuple[Skipped, ...] = ()  # eligible constants the chosen runtime's encoding cannot move
    output_need: RuntimeNeed = field(default_factory=lambda: RuntimeNeed(Runtime.V1_5))  # what loads the output
    unconverted: tuple["Unconverted", ...] = ()  # 1.5: what keeps the output needing 1.6 (device initial data)
    dropped_initial_data: tuple[int, ...] = ()  # initial-data entries only re-encoded constants read (1.5)

    @property
    def is_empty(self) -> bool:
        return not any(method.placements or method.folds or method.reencoded or method.removed
                       for method in self.methods)

    @property
    def output_runtime(self) -> Runtime:
        """The oldest runtime that loads the rewritten program."""
        return self.output_need.runtime

    @property
    def reencoded(self) -> tuple[Reencoded, ...]:
        return tuple(r for method in self.methods for r in method.reencoded)

    @property
    def folds(self) -> tuple[FoldPlacement, ...]:
        return tuple(f for method in self.methods for f in method.folds)

    @property
    def moved_tensors(self) -> int:
        """Constants moved plus values folded: the tensors now in device memory from the load on."""
        return len(self.placements) + len(self.folds)

    @property
    def initial_data_bytes(self) -> int:
        """The bytes the new initial-data entries add to the file."""
        return sum(entry.nbytes for entry in self.initial_data)

    def fold_cost(self, duplicates: bool) -> tuple[int, int, int]:
        """(values, device bytes, file bytes) the folded values (``duplicates``: the device copies of shared
        constants) add: device memory for the whole method, and their new initial data (a computed entry or a
        copied constant entry is stored once however many values use it; an external copy adds none)."""
        folds = [f for f in self.folds if f.duplicate == duplicates]
        entries = {f.initial_data_index for f in folds if f.external_key is None}
        return (len(folds), sum(f.nbytes for f in folds),
                sum(e.nbytes for e in self.initial_data if e.index in entries))

    @property
    def device_bytes_added(self) -> int:
        """The device memory the moved and folded tensors take for the whole method (all methods)."""
        return sum(p.nbytes for p in self.placements) + sum(f.nbytes for f in self.folds)

    @property
    def placements(self) -> tuple[Placement, ...]:
        return tuple(p for method in self.methods for p in method.placements)

    @property
    def bytes_per_call_saved(self) -> int:
        return sum(method.bytes_per_call_saved for method in self.methods)


@record
class FoldGain:
    """What folding would add to a rewrite: tensors and per-call host-to-device bytes."""

    tensors: int
    bytes_per_call: int


def fold_gain(program: m.Program, analysis: Analysis, options: RewriteOptions = RewriteOptions(),
              plain: Optional["RewritePlan"] = None) -> FoldGain:
    """How many more tensors (and bytes per call) a rewrite with ``--fold`` would move than one without.

    Pure: plans both ways (no data is read; a chain a float-to-integer cast would refuse counts); ``plain``,
    the caller's plan with ``options`` when it has one, is not made again.
    """
    if options.fold or not any(method.folds and method.folds.foldable for method in analysis.methods):
        return FoldGain(0, 0)
    plain = plain if plain is not None else make_plan(program, analysis, options)
    folded = make_plan(program, analysis, m.replace(options, fold=True))
    return FoldGain(folded.moved_tensors - plain.moved_tensors,
                    folded.bytes_per_call_saved - plain.bytes_per_call_saved)


def safe_fold_gain(program: m.Program, analysis: Analysis, options: RewriteOptions = RewriteOptions(),
                   plain: Optional["RewritePlan"] = None) -> Optional[FoldGain]:
    """``fold_gain`` for a hint: None when folding adds nothing, or when planning refuses the program."""
    try:
        gain = fold_gain(program, analysis, options, plain)
    except PteDevconstError:
        return None
    return gain if gain.tensors > 0 else None


def safe_device_memory(program: m.Program, analysis: Analysis, options: RewriteOptions = RewriteOptions(),
                       plain: Optional["RewritePlan"] = None) -> Optional[DeviceMemory]:
    """The planned device memory now and after a rewrite with ``options`` (``plain``, when the caller has that
    plan), for a report: None when the program plans none on a device and the rewrite adds none, or when
    planning refuses the program."""
    try:
        memory = (plain if plain is not None else make_plan(program, analysis, options)).memory
    except PteDevconstError:
        return None
    return memory if memory.before or memory.after else None


def skip_reason(device: Optional[Device], nbytes: int, options: RewriteOptions) -> Optional[str]:
    """Why the options leave a value of ``nbytes`` bound for ``device`` where it is (None: they select it).

    The one selection rule (``--device``, ``--min-bytes``): the plan applies it to constants and chains,
    and ``check`` to what it reports, so the two cannot disagree.
    """
    if options.devices is not None and device not in options.devices:
        return f"device {device} not selected (--device)"
    if nbytes < options.min_bytes:
        return f"{nbytes} bytes is below --min-bytes {options.min_bytes}"
    return None


def devices_used(program: m.Program, analysis: Analysis) -> tuple[str, ...]:
    """The non-CPU devices a program uses: its delegates' target devices, its planned buffers' devices and the
    devices its host-to-device copies go to (what ``--device`` can select)."""
    used: set[Optional[Device]] = {d.device for method in analysis.methods for d in method.delegates}
    used |= {t.device for method in analysis.methods for t in method.transfers}
    for plan in program.execution_plan or ():
        used |= set(plan.buffer_devices().values())
    return tuple(sorted(str(d) for d in used if d is not None and not d.is_cpu))


def selection_unused(used: tuple[str, ...], options: RewriteOptions) -> Optional[str]:
    """Why ``--device`` selects nothing in a program using ``used`` (None: it selects a device the program uses,
    or every device): the one rule by which ``rewrite`` refuses a selection that would move nothing."""
    if options.devices is None:
        return None
    selected = sorted(str(d) for d in options.devices)
    if set(selected) & set(used):
        return None
    return (f"--device {','.join(selected)}: the program uses none of the devices selected (it uses "
            f"{', '.join(used) or 'no device'}): nothing would move, so nothing was written")


def _skip_reason(verdict: ConstantVerdict, options: RewriteOptions) -> Optional[str]:
    return skip_reason(verdict.device, verdict.nbytes, options)


def _instruction_maps(plan: m.ExecutionPlan, removed: set[tuple[int, int]], shift: int = 0
                      ) -> tuple[tuple[Optional[int], ...], ...]:
    """Per chain, old instruction index -> new (None: removed); chain 0's survivors come after ``shift``
    instructions (a first-call prologue written in front of them)."""
    maps = []
    for c, chain in enumerate(plan.chains or ()):
        new_index = shift if c == 0 else 0
        mapping: list[Optional[int]] = []
        for k in range(len(chain.instructions or ())):
            if (c, k) in removed:
                mapping.append(None)
            else:
                mapping.append(new_index)
                new_index += 1
        maps.append(tuple(mapping))
    return tuple(maps)


def _existing_mutable_entries(program: m.Program) -> int:
    lists = program.mutable_data_segments or ()
    return len(lists[0].offsets or ()) if lists else 1  # entry 0 is reserved and empty


def segment_users(program: m.Program) -> dict[int, list[str]]:
    """What reads each segment: the constant table, the initial-data lists, delegates, named data."""
    users: dict[int, list[str]] = {}
    cs = program.constant_segment
    if cs is not None and len(cs.offsets or ()) > 1:
        users.setdefault(cs.segment_index, []).append("the constant segment")
    for i, sub in enumerate(program.mutable_data_segments or ()):
        users.setdefault(sub.segment_index, []).append(f"initial-data list {i}")
    for p, plan in enumerate(program.execution_plan or ()):
        for d, delegate in enumerate(plan.delegates or ()):
            ref = delegate.processed
            if ref is not None and ref.location == m.DataLocation.SEGMENT:
                users.setdefault(ref.index, []).append(f"the blob of delegate {d} of plan {p} ({delegate.id})")
    for entry in program.named_data or ():
        users.setdefault(entry.segment_index, []).append(f"named data {entry.key!r}")
    return users


def segment_policy(program: m.Program) -> SegmentPolicy:
    """Which segments the rewrite must not re-lay out because another table reads them too.

    The runtime reads a segment through each table that names it: the whole constant segment by
    offsets (``Program::load``), initial data by ``mutable_data_segments[0]`` offsets, a delegate its
    whole segment as the processed blob, named data its whole segment (runtime/executor/program.cpp,
    pte_data_map.cpp).  Changing a shared segment for one of them changes it for all.
    """
    users = segment_users(program)
    cs = program.constant_segment
    constant_shared: tuple[str, ...] = ()
    if cs is not None and len(cs.offsets or ()) > 1:
        constant_shared = tuple(u for u in users.get(cs.segment_index, ()) if u != "the constant segment")
    lists = program.mutable_data_segments or ()
    mutable_shared: tuple[str, ...] = ()
    if lists:
        mutable_shared = tuple(u for u in users.get(lists[0].segment_index, ()) if u != "initial-data list 0")
    return SegmentPolicy(constant_shared, mutable_shared)


@record
class _FoldChoice:
    """What folding decides in one method before placement: chains, their targets, kernels removed."""

    chains: tuple[tuple[FoldChain, Optional[int]], ...]  # (chain, target value; None: a new value)
    removed: frozenset[tuple[int, int]]  # kernels nothing needs any more
    moves: tuple[ConstantVerdict, ...]  # constants only device delegates read once their kernels go
    unread: tuple[int, ...]  # constants nothing reads once their kernels go


def _fold_skip_reason(chain: FoldChain, options: RewriteOptions, refusals: Mapping[tuple[int, int], str]
                      ) -> Optional[str]:
    if chain.problem:
        return chain.problem
    refused = refusals.get((chain.plan_index, chain.result))
    if refused:
        return refused
    return skip_reason(chain.device, chain.nbytes, options)


def _choose_folds(method: MethodAnalysis, options: RewriteOptions, refusals: Mapping[tuple[int, int], str],
                  skipped: list[FoldSkipped], refused: Optional[str] = None) -> _FoldChoice:
    """Which chains of one method fold, where their folded values go, and what that frees on the host
    (``refused``: why none can in this method, each chain skipped with it)."""
    folds: Optional[MethodFolds] = method.folds
    if folds is None:
        return _FoldChoice((), frozenset(), (), ())
    wanted: list[FoldChain] = []
    for chain in folds.chains:
        if chain.duplicate or not options.fold:
            continue
        reason = _fold_skip_reason(chain, options, refusals) or refused
        if reason:
            skipped.append(FoldSkipped(chain, reason))
        else:
            wanted.append(chain)
    removed, needed = removed_steps(folds, {chain.result for chain in wanted})
    roots = {chain.source: chain for chain in folds.chains if chain.duplicate}
    constants = {c.value: c for c in method.constants}
    moves, unread = [], []
    for value, node in folds.nodes.items():
        if node.parent != -1:
            continue
        if needed[value]:  # the host still reads it: its device readers may get their own copy
            shared = roots.get(value)
            if shared is not None and options.duplicate_shared:
                reason = _fold_skip_reason(shared, options, refusals) or refused
                if reason:
                    skipped.append(FoldSkipped(shared, reason))
                else:
                    wanted.append(shared)
        elif node.device is not None:  # only device delegates read it now: it moves like any constant
            verdict = constants[value]
            moves.append(m.replace(verdict, device=node.device, reasons=(), details=(), copies=node.copies,
                                   delegate_args=node.delegate_args))
        else:
            unread.append(value)
    chosen = []
    for chain in wanted:
        if chain.copies:
            target: Optional[int] = min(chain.copies, key=lambda c: (c.chain, c.instruction)).dst
        elif chain.device.is_cpu or not (chain.duplicate or needed[chain.result]):
            target = chain.result
        else:
            target = None
        chosen.append((chain, target))
    return _FoldChoice(tuple(chosen), frozenset(removed), tuple(moves), tuple(unread))


LEGACY_UNDER_1_5 = ("legacy style: its delegate copies it itself, which a 1.5 runtime cannot skip "
                    "(--runtime 1.6 can)")
NO_COPY_KERNEL = (f"legacy style: no {H2D_COPY} kernel in the method to copy it once with (a new operator could "
                  "be missing from a runtime built with selective registration; --runtime 1.6 can)")


@record
class Unconverted:
    """A tensor of the input that only a 1.6 runtime loads (device initial data) and a 1.5 rewrite leaves so."""

    method: str
    plan_index: int
    value: int
    name: str
    device: Device
    nbytes: int
    reason: str


def _first_copy(verdict: ConstantVerdict) -> DeviceCopy:
    """The copy whose destination keeps the constant in a 1.5 rewrite: a first-call copy's, else the first."""
    once = [c for c in verdict.copies if c.once]
    return min(once or verdict.copies, key=lambda c: (c.chain, c.instruction))


def _copy_args(plan: m.ExecutionPlan, copy: DeviceCopy) -> tuple[int, ...]:
    ins = ((plan.chains or ())[copy.chain].instructions or ())[copy.instruction]
    assert isinstance(ins, m.KernelCall), "a DeviceCopy is an _h2d_copy KernelCall"
    return tuple(ins.args or ())


def _constant_base(program: m.Program, dropped: int) -> int:
    """The index the first new constant entry gets: past the entries the rewrite keeps (entry 0 is reserved)."""
    cs = program.constant_segment
    offsets = (cs.offsets or ()) if cs is not None else ()
    if len(offsets) <= 1 and program.constant_buffer:
        raise UnsupportedProgramError("the program keeps its constants in the deprecated inline constant_buffer; "
                                      "a 1.5 rewrite cannot add the host constants it needs there")
    return max(1, len(offsets) - dropped)


def make_plan(program: m.Program, analysis: Analysis, options: RewriteOptions = RewriteOptions(),
              refusals: Mapping[tuple[int, int], str] = {}) -> RewritePlan:
    """Turn verdicts into placements, buffer growth, copy removals and segment edits.

    Methods are keyed by plan index throughout: two plans may share a name.  With ``options.fold`` (or
    ``duplicate_shared``) chains of host kernels fold too; ``refusals`` (plan index, result value) -> why
    names chains that the data refuses (``fold.compute.cast_problem``).  ``options.runtime`` picks the encoding:
    1.6 makes each moved value device memory with initial data; 1.5 keeps it on the host and copies it once, in
    a first-call prologue (``program/prologue.py``), into resident device memory, and re-encodes the input's
    1.6 constants the same way.
    """
    first_call = options.runtime is Runtime.V1_5
    chosen: list[ConstantVerdict] = []
    skipped: list[Skipped] = []
    kept_for_runtime: list[Skipped] = []

    def choose(verdict: ConstantVerdict) -> None:
        reason = _skip_reason(verdict, options)
        if reason:
            skipped.append(Skipped(verdict, reason))
        elif first_call and verdict.copied_once:
            return  # the 1.5 encoding already: nothing to do
        elif first_call and not verdict.copies:
            kept_for_runtime.append(Skipped(verdict, LEGACY_UNDER_1_5))
        else:
            chosen.append(verdict)

    for method in analysis.methods:
        for verdict in method.eligible:
            choose(verdict)
    fold_skipped: list[FoldSkipped] = []
    choices: dict[int, _FoldChoice] = {}
    if options.fold and options.host_placement:  # with host placement, eligible constants may be fold roots
        roots = {(method.plan_index, v) for method in analysis.methods if method.folds
                 for v, node in method.folds.nodes.items() if node.parent == -1}
        chosen = [v for v in chosen if (v.plan_index, v.value) not in roots]
    if options.fold or options.duplicate_shared:
        for method in analysis.methods:
            plan = (program.execution_plan or ())[method.plan_index]
            no_copy = first_call and plan.operator_index(H2D_COPY) is None
            choice = _choose_folds(method, options, refusals, fold_skipped, NO_COPY_KERNEL if no_copy else None)
            choices[method.plan_index] = choice
            for verdict in choice.moves:
                choose(verdict)

    # Initial data (1.6): one entry per distinct constant entry, however many values or methods move it, then
    # one per distinct fold recipe (equal recipes give equal bytes).
    next_index = _existing_mutable_entries(program)
    entry_of_source: dict[int, int] = {}
    entry_size: dict[int, int] = {}
    sources = [] if first_call else [v.tensor for v in chosen] + [
        chain.source_tensor for choice in choices.values() for chain, _ in choice.chains if chain.duplicate]
    for tensor in sources:
        if tensor.is_external:
            continue
        source = tensor.data_buffer_idx
        if source not in entry_of_source:
            entry_of_source[source] = next_index
            next_index += 1
        entry_size[source] = max(entry_size.get(source, 0), tensor.nbytes)
    entry_of_recipe: dict[FoldRecipe, int] = {}
    if not first_call:
        for choice in choices.values():
            for chain, _ in choice.chains:
                if not chain.duplicate and chain.recipe not in entry_of_recipe:
                    entry_of_recipe[chain.recipe] = next_index
                    next_index += 1
    initial_data = tuple(InitialData(index, source, entry_size[source]) for source, index in entry_of_source.items()) \
        + tuple(InitialData(index, 0, recipe.nbytes, recipe) for recipe, index in entry_of_recipe.items())

    unread = {(plan_index, value) for plan_index, choice in choices.items() for value in choice.unread}
    policy = segment_policy(program)
    dropped = () if policy.constant_shared_with else _dropped_constants(program, [] if first_call else chosen, unread)
    new_entries = _NewConstantEntries(program, dropped) if first_call else None

    methods = []
    unconverted: list[Unconverted] = []
    by_plan: dict[int, list[ConstantVerdict]] = {}
    for verdict in chosen:
        by_plan.setdefault(verdict.plan_index, []).append(verdict)
    for method in analysis.methods:
        plan = (program.execution_plan or ())[method.plan_index]
        regions = AppendedRegions(plan, method.label)  # program/layout.py: which buffer, at which offset
        new_values = _NewValues(len(plan.values or ()))

        placements = []
        copies_once: list[FirstCallCopy] = []
        for verdict in by_plan.get(method.plan_index, []):
            device = verdict.device
            assert device is not None, "a moved constant is eligible: it names its device"
            memory_id, offset = regions.region(device, verdict.nbytes)
            tensor = verdict.tensor
            if first_call:
                copy = _first_copy(verdict)
                copies_once.append(FirstCallCopy(verdict.value, copy.dst, _copy_args(plan, copy), device))
            placements.append(Placement(
                method=verdict.method, value=verdict.value, name=verdict.name, device=device,
                nbytes=verdict.nbytes, memory_id=memory_id, offset=offset,
                initial_data_index=0 if tensor.is_external or first_call else entry_of_source[tensor.data_buffer_idx],
                source_index=tensor.data_buffer_idx,
                external_key=tensor.fqn if tensor.is_external and not first_call else None,
                copies=verdict.copies, delegate_args=verdict.delegate_args, copies_per_call=verdict.copies_per_call,
                plan_index=method.plan_index, device_copy=_first_copy(verdict).dst if first_call else None,
            ))
        choice = choices.get(method.plan_index, _FoldChoice((), frozenset(), (), ()))
        folds = []
        for chain, target in choice.chains:
            memory_id, offset = regions.region(chain.device, chain.nbytes)
            if target is None:
                target = new_values.take()
            source_tensor = chain.source_tensor
            external = chain.duplicate and source_tensor.is_external and not first_call
            host: Optional[int] = None
            if first_call:
                index = 0
                if chain.duplicate:
                    host = chain.source
                else:
                    assert new_entries is not None
                    host = new_values.add(_host_constant(chain.result_tensor, new_entries.computed(chain.recipe)))
                copies_once.append(FirstCallCopy(host, target, (host, target, target), chain.device))
            elif external:
                index = 0
            elif chain.duplicate:
                index = entry_of_source[source_tensor.data_buffer_idx]
            else:
                index = entry_of_recipe[chain.recipe]
            kernels = tuple((s.chain, s.instruction) for s in chain.steps if (s.chain, s.instruction) in choice.removed)
            folds.append(FoldPlacement(
                method=chain.method, plan_index=method.plan_index, value=target,
                appended=target >= len(plan.values or ()), chain=chain, memory_id=memory_id, offset=offset,
                initial_data_index=index, external_key=source_tensor.fqn if external else None,
                removed=tuple(sorted(kernels + tuple((c.chain, c.instruction) for c in chain.copies))),
                first_call_source=host))
        reencoded = []
        if first_call:
            for resident in method.residents:
                reason = resident.problem or skip_reason(resident.device, resident.nbytes, options)
                if reason:
                    unconverted.append(Unconverted(resident.method, resident.plan_index, resident.value,
                                                   resident.name, resident.device, resident.nbytes, reason))
                    continue
                assert new_entries is not None
                tensor = resident.tensor
                entry = 0 if tensor.is_external else new_entries.copied(tensor.data_buffer_idx, tensor.nbytes)
                host = new_values.add(_host_constant(tensor, entry))
                memory_id, offset = regions.region(resident.device, resident.nbytes)
                reencoded.append(Reencoded(resident.method, resident.plan_index, resident.value, resident.name,
                                           resident.device, resident.nbytes, host, entry,
                                           tensor.fqn if tensor.is_external else None, memory_id, offset,
                                           0 if tensor.is_external else tensor.data_buffer_idx))
                copies_once.append(FirstCallCopy(host, resident.value, (host, resident.value, resident.value),
                                                 resident.device))
        growth = regions.growth()
        removed = {(copy.chain, copy.instruction) for p in placements for copy in p.copies}
        removed |= set(choice.removed) | {step for f in folds for step in f.removed}
        prologue, guard, old_steps = _prologue(plan, method, removed, copies_once, new_values)
        removed |= old_steps
        released = tuple(v for v in choice.unread if _entry(plan, v) in dropped)
        edit = MethodEdit(method.label, method.plan_index, tuple(placements), tuple(growth),
                          tuple(sorted(removed)),
                          _instruction_maps(plan, removed, len(prologue) + GUARD_INSTRUCTIONS if prologue else 0),
                          tuple(folds), released, prologue=prologue, guard=guard, new_values=new_values.added(),
                          reencoded=tuple(reencoded))
        methods.append(_relaid(plan, edit) if options.relayout else edit)

    lengths = entry_lengths(program) if dropped else {}
    return RewritePlan(analysis, options, tuple(methods), initial_data, dropped, tuple(skipped), policy,
                       tuple(fold_skipped), sum(lengths.get(index, 0) for index in dropped),
                       device_memory(program, {edit.plan_index: (edit.name, edit.buffers) for edit in methods}),
                       new_entries.entries() if new_entries is not None else (), tuple(kept_for_runtime),
                       _output_need(program, tuple(methods)), tuple(unconverted),
                       () if policy.fresh_mutable else _dropped_initial_data(program, tuple(methods)))


class _NewValues:
    """The values a method's edit appends, numbered in the order they are taken (folded values, host constants,
    the prologue's Bools)."""

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


class _NewConstantEntries:
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


def _host_constant(tensor: m.Tensor, entry: int) -> m.Tensor:
    """A host constant of ``tensor``'s type and shape reading constant entry ``entry`` (0 and external: the .ptd
    entry of ``tensor``'s name)."""
    info = None
    if tensor.is_external:
        info = m.ExtraTensorInfo(fully_qualified_name=tensor.fqn, location=m.TensorDataLocation.EXTERNAL)
    return m.Tensor(scalar_type=tensor.scalar_type, sizes=tensor.sizes, dim_order=tensor.dim_order,
                    data_buffer_idx=tensor.data_buffer_idx if tensor.is_external else entry, extra_tensor_info=info)


def _prologue(plan: m.ExecutionPlan, method: MethodAnalysis, removed: AbstractSet[tuple[int, int]],
              added: list[FirstCallCopy], new_values: _NewValues
              ) -> tuple[tuple[FirstCallCopy, ...], Optional[tuple[int, int]], set[tuple[int, int]]]:
    """The first-call prologue the rewrite writes: (its copies, its guard, the input's prologue instructions to
    remove).  The input's prologue stays as it is when nothing of it changes; otherwise it is written again with
    the copies it keeps first, then the ``added`` ones (program/prologue.py)."""
    old = method.prologue
    instructions = ((plan.chains or ())[0].instructions or ()) if plan.chains else ()
    kept = []
    if old is not None:
        devices = plan.buffer_devices()
        for k in old.copies:
            if (0, k) not in removed:
                ins = instructions[k]
                assert isinstance(ins, m.KernelCall), "a recognised prologue holds copies only"
                args = tuple(ins.args or ())
                slots = copy_slots(H2D_COPY, args)
                assert slots is not None, "a recognised prologue's copies have a source and an out"
                device = memory_device((plan.values or ())[slots.out], devices)
                kept.append(FirstCallCopy(slots.source, slots.out, args, device))
        if not added and len(kept) == len(old.copies):
            return (), None, set()
    if not added and old is None:
        return (), None, set()
    old_steps = {(0, 0), (0, old.end - 1), *((0, k) for k in old.copies)} if old is not None else set()
    copies = tuple(kept + added)
    if not copies:
        return (), None, old_steps
    if old is not None:
        guard = (old.guard, old.cleared_from)
    else:
        guard = (new_values.add(m.Bool(True)), new_values.add(m.Bool(False)))
    return copies, guard, old_steps


def _dropped_initial_data(program: m.Program, methods: tuple[MethodEdit, ...]) -> tuple[int, ...]:
    """Initial-data entries that only re-encoded constants read (any method): their bytes now live in the new
    constant entries, so they leave the initial-data segment (their index stays, unused, at offset 0)."""
    reencoded = {(edit.plan_index, r.value) for edit in methods for r in edit.reencoded}
    if not reencoded:
        return ()
    candidates = {r.initial_data_index for edit in methods for r in edit.reencoded if r.initial_data_index}
    for plan_index, plan in enumerate(program.execution_plan or ()):
        for index, value in enumerate(plan.values or ()):
            if isinstance(value, m.Tensor) and value.has_initial_data and not value.is_external \
                    and (plan_index, index) not in reencoded:
                candidates.discard(value.data_buffer_idx)
    return tuple(sorted(candidates))


def initial_data_lengths(program: m.Program) -> dict[int, int]:
    """The bytes each initial-data entry must keep: the largest tensor that reads it (any method)."""
    return _largest_readers(program, lambda tensor: tensor.has_initial_data)


def _output_need(program: m.Program, methods: tuple[MethodEdit, ...]) -> RuntimeNeed:
    """What loads the rewritten program (``program/runtime.py``), read from each method as the rewrite writes it."""
    edits = {edit.plan_index: edit for edit in methods}
    labels = method_labels(program)[0]
    found = []
    for index, plan in enumerate(program.execution_plan or ()):
        edit = edits.get(index)
        written = edit_method(plan, edit) if edit is not None and not _untouched(edit) else plan
        found.extend(device_initial_data(written, labels[index]))
    return RuntimeNeed(Runtime.V1_6 if found else Runtime.V1_5, tuple(found))


def _untouched(edit: MethodEdit) -> bool:
    return not (edit.placements or edit.folds or edit.reencoded or edit.removed or edit.relocations)


def input_offsets_kept(program: m.Program, plan: RewritePlan, relaid: RewritePlan, why: str) -> RewritePlan:
    """``plan`` (made with ``relayout=False``), each buffer that ``relaid`` laid out again noting ``why`` it keeps
    the input's offsets: the fallback when the self-check's byte replay cannot prove a re-layout (``rewrite.py``)."""
    given_up = {(edit.plan_index, g.memory_id) for edit in relaid.methods for g in edit.buffers if g.relaid}
    methods = tuple(replace(edit, buffers=tuple(replace(g, kept_offsets=why) if (edit.plan_index, g.memory_id)
                                                in given_up else g for g in edit.buffers))
                    for edit in plan.methods)
    memory = device_memory(program, {edit.plan_index: (edit.name, edit.buffers) for edit in methods})
    return replace(plan, methods=methods, memory=memory)


def _relaid(plan: m.ExecutionPlan, edit: MethodEdit) -> MethodEdit:
    """The edit with each buffer that receives constants laid out again where that needs less (``program/layout.py``
    decides: ``relayout``), the values it placed moved to their new offsets and the others' relocations recorded."""
    targets = {p.memory_id for p in edit.placements} | {f.memory_id for f in edit.folds} \
        | {r.memory_id for r in edit.reencoded}
    if not targets:
        return edit
    layout = relayout(edit_method(plan, edit), edit.buffers, targets)
    if not layout.changed:
        return replace(edit, buffers=layout.buffers)
    moved = {p.holder for p in edit.placements} | {f.value for f in edit.folds} | {r.value for r in edit.reencoded}
    placements = tuple(replace(p, offset=layout.placed(p.holder, p.memory_id, p.offset)) for p in edit.placements)
    folds = tuple(replace(f, offset=layout.placed(f.value, f.memory_id, f.offset)) for f in edit.folds)
    reencoded = tuple(replace(r, offset=layout.placed(r.value, r.memory_id, r.offset)) for r in edit.reencoded)
    return replace(edit, placements=placements, folds=folds, reencoded=reencoded, buffers=layout.buffers,
                   relocations=tuple(r for r in layout.relocations if r[0] not in moved))


def entry_lengths(program: m.Program) -> dict[int, int]:
    """The bytes each constant entry must keep: the largest tensor that reads it (any method)."""
    return _largest_readers(program, lambda tensor: tensor.is_constant)


def _largest_readers(program: m.Program, reads: Callable[[m.Tensor], bool]) -> dict[int, int]:
    """Per ``data_buffer_idx``, the bytes of the largest tensor (not external, any method) that ``reads`` it."""
    lengths: dict[int, int] = {}
    for plan in program.execution_plan or ():
        for value in plan.values or ():
            if isinstance(value, m.Tensor) and reads(value) and not value.is_external:
                lengths[value.data_buffer_idx] = max(lengths.get(value.data_buffer_idx, 0), value.nbytes)
    return lengths


def _entry(plan: m.ExecutionPlan, value: int) -> Optional[int]:
    """The constant entry a value reads (None: not a constant of the segment)."""
    tensor = (plan.values or ())[value]
    return tensor.data_buffer_idx if isinstance(tensor, m.Tensor) and tensor.is_constant and not tensor.is_external \
        else None


def _dropped_constants(program: m.Program, moved: list[ConstantVerdict],
                       unread: AbstractSet[tuple[int, int]] = frozenset()) -> tuple[int, ...]:
    """Constant entries that only moved values, or values nothing reads any more, referenced (any method):
    their bytes can leave the segment."""
    cs = program.constant_segment
    if cs is None or len(cs.offsets or ()) <= 1:
        return ()  # no constant segment, or the deprecated inline constant_buffer: leave it alone
    gone = {(v.plan_index, v.value) for v in moved} | set(unread)
    candidates = {v.tensor.data_buffer_idx for v in moved if not v.tensor.is_external}
    for plan_index, unread_value in unread:
        entry = _entry((program.execution_plan or ())[plan_index], unread_value)
        if entry is not None:
            candidates.add(entry)
    for plan_index, plan in enumerate(program.execution_plan or ()):
        for index, value in enumerate(plan.values or ()):
            if (isinstance(value, m.Tensor) and value.is_constant and not value.is_external
                    and (plan_index, index) not in gone):
                candidates.discard(value.data_buffer_idx)
    return tuple(sorted(candidates))
