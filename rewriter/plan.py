"""Decide the rewrite: where each eligible constant goes, which copies disappear, what grows.

A pure function of the analysis, the program and the user's options; it returns
a ``RewritePlan`` that ``apply.py`` carries out without further decisions and
that ``--dry-run`` prints as it is.  Which constants move, to which device, is the
analysis's verdicts filtered by the options; how a moved constant is kept on its
device (its encoding, one per runtime: ``options.encoding``) is
the chosen encoding's (``rewriter/encodings``), which fills in the records here.
Where in device memory (which buffer, which offset, laid out again or appended) is
``program/layout.py``'s decision; this module records it.
"""

from __future__ import annotations

from dataclasses import field, replace
from typing import Callable, Mapping, Optional, Sequence

from pte_devconst.schema import model as m
from pte_devconst.util.errors import PteDevconstError
from pte_devconst.schema.model import Device
from pte_devconst.util.record import record

from pte_devconst.program.layout import DeviceMemory, device_memory, relayout

from .model.analysis import Analysis, ConstantVerdict, MethodAnalysis
from .edit import edit_method, views_on_holders
from .encodings import Encoding, Runtime, RuntimeNeed, encoding_for, required_runtime
from .fold import FoldChain, MethodFolds, removed_steps
from .model.plan_model import (ConstantEntry, FoldPlacement, FoldSkipped, InitialData, MethodEdit, MethodJob, Placement,
                         Reencoded, SegmentPolicy, Skipped, Unconverted, constant_entry_of, skip_reason)

# The records a plan is made of live in plan_model.py; these are also named here, where callers look for a plan.
__all__ = ["ConstantEntry", "FoldGain", "FoldPlacement", "InitialData", "MethodEdit", "Placement", "RewriteOptions",
           "RewritePlan", "devices_used", "entry_lengths", "fold_gain", "initial_data_lengths", "input_offsets_kept",
           "make_plan", "safe_device_memory", "safe_fold_gain", "segment_policy", "segment_users", "selection_unused",
           "skip_reason"]


@record
class RewriteOptions:
    """The options a rewrite is planned with, resolved: the encoding is chosen once (``api.rewrite_options`` from
    ``--runtime`` or the config's ``runtime``; ``encodings.encoding_for``) and every layer reads it from here."""

    devices: Optional[frozenset[Device]] = None  # only move constants to these devices (None: every device)
    min_bytes: int = 0  # leave constants smaller than this where they are
    host_placement: bool = False  # library-only: place host-read constants in planned CPU memory (tests)
    fold: bool = False  # also fold chains of host kernels from constants to device readers (fold/)
    duplicate_shared: bool = False  # give device readers of constants also read on the host their own copy
    relayout: bool = True  # lay the buffers that receive constants out again by lifetimes (program/memory.py)
    encoding: Encoding = field(default_factory=encoding_for)  # how moved constants are kept (the default's)

    @property
    def runtime(self) -> Runtime:
        """The release the output must load in: the encoding's."""
        return self.encoding.runtime


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
    output_need: Optional[RuntimeNeed] = None  # what loads the output (make_plan always says)
    unconverted: tuple["Unconverted", ...] = ()  # what the encoding could not take over (keeps a newer runtime)
    dropped_initial_data: tuple[int, ...] = ()  # initial-data entries only re-encoded constants read

    @property
    def is_empty(self) -> bool:
        return not any(method.placements or method.folds or method.reencoded or method.removed
                       for method in self.methods)

    @property
    def output_runtime(self) -> Runtime:
        """The oldest runtime that loads the rewritten program."""
        assert self.output_need is not None, "make_plan says what loads the output"
        return self.output_need.runtime

    @property
    def newly_moved(self) -> int:
        """Tensors copied per call before that the output keeps on a device (not those only converted from another
        encoding: constants another encoding copied once, now in this one)."""
        return sum(1 for p in self.placements if p.copies_per_call or not p.copies) + len(self.folds)

    @property
    def converted(self) -> int:
        """How many constants the plan takes over from another encoding (a conversion)."""
        return self.options.encoding.converted(self.placements, self.reencoded)

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
    return (f"the devices selected ({','.join(selected)}) are none the program uses (it uses "
            f"{', '.join(used) or 'no device'}): nothing would move, so nothing was written")


def _skip_reason(verdict: ConstantVerdict, options: RewriteOptions) -> Optional[str]:
    return skip_reason(verdict.device, verdict.nbytes, options)


def _instruction_maps(plan: m.ExecutionPlan, removed: set[tuple[int, int]], shift: int = 0
                      ) -> tuple[tuple[Optional[int], ...], ...]:
    """Per chain, old instruction index -> new (None: removed); chain 0's survivors come after ``shift``
    instructions (what the encoding writes in front of them: ``EncodingPayload.leading``)."""
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


def make_plan(program: m.Program, analysis: Analysis, options: RewriteOptions = RewriteOptions(),
              refusals: Mapping[tuple[int, int], str] = {}) -> RewritePlan:
    """Turn verdicts into placements, buffer growth, copy removals and segment edits.

    Methods are keyed by plan index throughout: two plans may share a name.  With ``options.fold`` (or
    ``duplicate_shared``) chains of host kernels fold too; ``refusals`` (plan index, result value) -> why
    names chains that the data refuses (``fold.compute.cast_problem``).  ``options.encoding`` is the encoding
    (``rewriter/encodings``): which constants it takes, where their bytes live, what it writes; this function
    selects and lays out, the encoding fills in the records.
    """
    encoding = options.encoding
    chosen: list[ConstantVerdict] = []
    skipped: list[Skipped] = []
    kept_for_runtime: list[Skipped] = []

    def choose(verdict: ConstantVerdict) -> None:
        reason = _skip_reason(verdict, options)
        if reason:
            skipped.append(Skipped(verdict, reason))
            return
        refused = encoding.admit(verdict)
        if refused is None:
            chosen.append(verdict)
        elif refused:
            kept_for_runtime.append(Skipped(verdict, refused))
        # "": in this encoding already, nothing to do

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
            choice = _choose_folds(method, options, refusals, fold_skipped, encoding.fold_refusal(plan))
            choices[method.plan_index] = choice
            for verdict in choice.moves:
                choose(verdict)

    unread = {(plan_index, value) for plan_index, choice in choices.items() for value in choice.unread}
    policy = segment_policy(program)
    storage = encoding.storage(program, chosen, [chain for choice in choices.values() for chain, _ in choice.chains],
                               unread, bool(policy.constant_shared_with))
    dropped = storage.dropped

    methods = []
    unconverted: list[Unconverted] = []
    by_plan: dict[int, list[ConstantVerdict]] = {}
    for verdict in chosen:
        by_plan.setdefault(verdict.plan_index, []).append(verdict)
    for method in analysis.methods:
        job = MethodJob(program, method, options, storage, unconverted)
        edit = _method_edit(job, encoding, by_plan.get(method.plan_index, []),
                            choices.get(method.plan_index, _FoldChoice((), frozenset(), (), ())), dropped)
        methods.append(_relaid(job.plan, edit, encoding) if options.relayout else edit)

    lengths = entry_lengths(program) if dropped else {}
    new_entries = storage.new_entries
    return RewritePlan(analysis, options, tuple(methods), storage.initial_data, dropped, tuple(skipped), policy,
                       tuple(fold_skipped), sum(lengths.get(index, 0) for index in dropped),
                       device_memory(program, {edit.plan_index: (edit.name, edit.buffers) for edit in methods}),
                       new_entries.entries() if new_entries is not None else (), tuple(kept_for_runtime),
                       _output_need(program, tuple(methods), encoding), tuple(unconverted),
                       () if policy.fresh_mutable else _dropped_initial_data(program, tuple(methods)))


def _method_edit(job: MethodJob, encoding: Encoding, chosen: Sequence[ConstantVerdict], choice: _FoldChoice,
                 dropped: tuple[int, ...]) -> MethodEdit:
    """One method's edit: its chosen constants and folds laid out in new regions, the encoding filling in the
    records (``place``, ``place_fold``, ``convert``, ``payload``); the copies and kernels that go, and the map of
    the instructions that stay."""
    plan, method = job.plan, job.method
    placements = []
    for verdict in chosen:
        assert verdict.device is not None, "a moved constant is eligible: it names its device"
        memory_id, offset = job.regions.region(verdict.device, verdict.nbytes)
        placements.append(encoding.place(job, verdict, memory_id, offset))
    folds = []
    for chain, target in choice.chains:
        memory_id, offset = job.regions.region(chain.device, chain.nbytes)
        if target is None:
            target = job.new_values.take()
        kernels = tuple((s.chain, s.instruction) for s in chain.steps if (s.chain, s.instruction) in choice.removed)
        folds.append(encoding.place_fold(job, chain, target, memory_id, offset,
                                         tuple(sorted(kernels + tuple((c.chain, c.instruction)
                                                                      for c in chain.copies)))))
    reencoded = encoding.convert(job)
    growth = job.regions.growth()
    removed = {(copy.chain, copy.instruction) for p in placements for copy in p.copies}
    removed |= set(choice.removed) | {step for f in folds for step in f.removed}
    payload, old_steps = encoding.payload(job, removed)
    removed |= old_steps
    released = tuple(v for v in choice.unread if constant_entry_of(plan, v) in dropped)
    return MethodEdit(method.label, method.plan_index, tuple(placements), tuple(growth), tuple(sorted(removed)),
                      _instruction_maps(plan, removed, payload.leading), tuple(folds), released, payload=payload,
                      new_values=job.new_values.added(), reencoded=tuple(reencoded), encoding=encoding.key)


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


def _output_need(program: m.Program, methods: tuple[MethodEdit, ...], encoding: Encoding) -> RuntimeNeed:
    """What loads the rewritten program (``encodings.required_runtime``), read from each method as the rewrite
    writes it."""
    edits = {edit.plan_index: edit for edit in methods}
    written = tuple(edit_method(plan, edits[index], encoding=encoding)
                    if index in edits and not _untouched(edits[index]) else plan
                    for index, plan in enumerate(program.execution_plan or ()))
    return required_runtime(m.replace(program, execution_plan=written))


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


def _relaid(plan: m.ExecutionPlan, edit: MethodEdit, encoding: Encoding) -> MethodEdit:
    """The edit with each buffer that receives constants laid out again where that needs less (``program/layout.py``
    decides: ``relayout``), the values it placed moved to their new offsets and the others' relocations recorded."""
    targets = {p.memory_id for p in edit.placements} | {f.memory_id for f in edit.folds} \
        | {r.memory_id for r in edit.reencoded}
    if not targets:
        return edit
    layout = relayout(edit_method(plan, edit, encoding=encoding), edit.buffers, targets)
    if not layout.changed:
        return replace(edit, buffers=layout.buffers)
    moved = {p.holder for p in edit.placements} | {f.value for f in edit.folds} | {r.value for r in edit.reencoded}
    placements = tuple(replace(p, offset=layout.placed(p.holder, p.memory_id, p.offset)) for p in edit.placements)
    folds = tuple(replace(f, offset=layout.placed(f.value, f.memory_id, f.offset)) for f in edit.folds)
    reencoded = tuple(replace(r, offset=layout.placed(r.value, r.memory_id, r.offset)) for r in edit.reencoded)
    followers = {view for view, _ in views_on_holders(edit)}  # they follow their holder (edit.py)
    return replace(edit, placements=placements, folds=folds, reencoded=reencoded, buffers=layout.buffers,
                   relocations=tuple(r for r in layout.relocations if r[0] not in moved and r[0] not in followers))


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
