"""The self-check: prove the written file before it replaces the destination.

``check_rewrite`` re-reads nothing itself: it gets the input and the written
file, both opened with the full reader, and proves that the output is the input
with exactly the plan's changes, and that those changes are right on their own
terms.  It does not trust the plan for what it can check independently:

* **Unchanged except what the plan lists.**  Every method (matched by plan
  index, never by name), value, instruction (through the plan's instruction-index
  map, itself checked), operator, delegate, compile spec, chain, stack trace,
  buffer, segment table and named-data entry equals the input's, except the
  moved values, the buffers the plan grows, the removed copies, the delegate
  arguments they fed, and the constant entries the plan drops.
* **Plan-independent postconditions** on the written program: a removed
  instruction is an ``_h2d_copy.out`` of a constant moved in the same method; a
  changed delegate argument was a value that only removed copies of the new
  argument wrote; no surviving instruction, method output or list reads a value
  that only removed instructions wrote (in any of their out or return slots); a
  moved value was a constant of this method, now lies in a fresh 16-aligned region
  of a buffer on its device that no other value overlaps, and is read only by
  delegate calls whose ``target_device`` is that device; an external moved
  constant's key appears exactly once in the .ptd with a matching layout; the
  program stays within the runtime verifier's limits (``schema/limits.py``).
* **Every referenced byte range holds the input bytes it came from**: kept
  constants, existing and new initial data, delegate blobs, named data, and every
  segment the rewrite does not re-lay, compared by ``verify_bytes.py`` (whole, or
  sampled where the writer's recipe proves the source range; every byte with
  ``full``, which also checks that all remaining bytes are the writer's zero padding).

Any failure raises ``RewriteCheckError``: an internal error (a bug in this
tool or a case it should have refused), reported with the destination untouched.
"""

from __future__ import annotations

import bisect
import dataclasses
import operator
from typing import Callable, Mapping, Optional

from pte_devconst.schema import model as m
from pte_devconst.util.errors import FormatError, InternalError
from pte_devconst.program.executorch import H2D_COPY
from pte_devconst.util.gc_pause import gc_paused
from pte_devconst.schema.limits import over_runtime_limits
from pte_devconst.schema.ptd_file import PtdFile, tensor_key
from pte_devconst.schema.pte_file import PteFile, open_pte
from pte_devconst.schema.span import Span

from pte_devconst.program.dataflow import Declared, delegate_call_sites
from pte_devconst.program.delegate_blobs import declared_splits
from pte_devconst.program.effects import MethodEffects
from pte_devconst.program.kernel_effects import copy_slots, kernel_results
from pte_devconst.program.readers import ReaderKind, readers_in_order
from pte_devconst.program.layout import is_aligned, layout_problems
from pte_devconst.program.memory import storage_groups, view_reads
from pte_devconst.program.regions import planned_region
from pte_devconst.program.replay import Origin, prove_same_reads

from .fold import FOLD_KERNELS, FoldRecipe, Traced, Tracer, layout_of
from .edit import on_holder, relocated_tensor, views_on_holders
from .plan import FoldPlacement, MethodEdit, Placement, RewritePlan
from .encodings import Verifier
from .model.verify_bytes import ByteChecker, CheckCost, ComputedBytes, SameBytes, WriteRecipe, ZeroBytes

FULL_CHECK_ENV = "PTE_DEVCONST_FULL_CHECK"
# A tensor's fields other than its data index (a kept constant's index moves when entries are dropped), and the
# fields a moved constant keeps; attrgetter compares them at C speed (a 100,000-value program has ~50,000 constants).
_ALL_BUT_INDEX = operator.attrgetter(*(f.name for f in dataclasses.fields(m.Tensor) if f.name != "data_buffer_idx"))
_KEPT_WHEN_MOVED = operator.attrgetter("scalar_type", "sizes", "dim_order", "requires_grad", "layout")


class RewriteCheckError(InternalError):
    """The written file is not the input with exactly the plan's changes (a bug; the destination is untouched)."""


class RelayoutUnproven(RewriteCheckError):
    """The byte replay (``program/replay.py``) found a read that differs from the input's in a method whose device
    memory was laid out again: the lifetime model that made the layout missed something the replay sees.  The
    rewrite then keeps the input's offsets (``rewrite.py``), which the replay checks again."""

    def __init__(self, what: str, reason: str) -> None:
        super().__init__(what)
        self.reason = reason  # the method and the first read that differs, for the report's note


def _fail(what: str) -> RewriteCheckError:
    return RewriteCheckError(f"internal error: the rewritten file failed the self-check: {what}")


def full_by_default() -> bool:
    """``--verify full`` everywhere when PTE_DEVCONST_FULL_CHECK is set (e.g. in CI)."""
    from pte_devconst.util.env import env_flag

    return env_flag(FULL_CHECK_ENV)


class _VerifyContext:
    """What the per-method checks share: both files, the .ptd, the constant remap, and the byte requirements they
    add up (working state, util/record.py)."""

    __slots__ = ("original", "written", "ptd", "plan", "remap", "same", "computed", "declared")

    def __init__(self, original: PteFile, written: PteFile, ptd: Optional[PtdFile], plan: RewritePlan,
                 remap: Optional[dict[int, int]]) -> None:
        self.original = original
        self.written = written
        self.ptd = ptd
        self.plan = plan
        self.remap = remap  # constant entry: old index -> new (None: the segment keeps its layout)
        self.same: list[SameBytes] = []
        self.computed: list[ComputedBytes] = []
        # per method, what the delegates' blobs of each file declare of their calls (the input's, the output's)
        self.declared = (declared_splits(original.program, original.delegate_blob),
                         declared_splits(written.program, written.delegate_blob))

    def declared_of(self, index: int) -> tuple[Optional[Declared], Optional[Declared]]:
        """What the delegates' blobs of method ``index`` declare, in the input and in the output."""
        old, new = self.declared
        return old[index] if index < len(old) else None, new[index] if index < len(new) else None

    def require_same(self, what: str, source: Optional[Span], written: Optional[Span]) -> None:
        if source is not None and written is not None:
            self.same.append(SameBytes(what, source, written))


@gc_paused
def check_rewrite(original: PteFile, written: PteFile, plan: RewritePlan, *, ptd: Optional[PtdFile] = None,
                  recipe: Optional[WriteRecipe] = None, full: Optional[bool] = None,
                  cost: Optional[CheckCost] = None) -> None:
    """Raise ``RewriteCheckError`` unless ``written`` is ``original`` with exactly the changes of ``plan``.

    ``recipe`` (what the writer was given) lets bulk ranges copied from a proven source be sampled;
    ``full`` compares every byte (default: PTE_DEVCONST_FULL_CHECK).
    """
    if full is None:
        full = full_by_default()
    a, b = original.program, written.program
    over = over_runtime_limits(b)
    if over:
        raise _fail(f"the program has {over}")
    remap = _check_program_tables(a, b, plan)
    context = _VerifyContext(original, written, ptd, plan, remap)
    edits = _edits_by_index(plan, len(a.execution_plan or ()))
    for index, (old, new) in enumerate(zip(a.execution_plan or (), b.execution_plan or ())):
        _MethodCheck(context, index, old, new, edits.get(index)).run()
    _require_segments(context)
    checker = ByteChecker(original, written, recipe, full)
    zeros = _padding(written, [*context.same, *context.computed]) if full else ()
    difference = checker.first_difference(context.same, zeros, context.computed)
    if cost is not None:
        cost.bytes_read += checker.bytes_read
    if difference is not None:
        where = difference.requirement
        if isinstance(where, SameBytes):
            raise _fail(f"{where.what}: its bytes differ from the input's at byte {difference.offset:,}")
        if isinstance(where, ComputedBytes):
            raise _fail(f"{where.what}: its bytes differ from the value recomputed from the input at byte "
                        f"{difference.offset:,}")
        raise _fail(f"{where.what}: byte {difference.offset:,} is not zero")


def read_back(path: str) -> PteFile:
    """Open the written file with the full reader; a file the reader refuses is the tool's own bug."""
    try:
        return open_pte(path)
    except FormatError as error:
        raise _fail(f"the written file does not read back ({': '.join(p for p in (error.where, error.what) if p)})") \
            from None


def check_copy(original: PteFile, written: PteFile, recipe: Optional[WriteRecipe] = None,
               full: Optional[bool] = None, cost: Optional[CheckCost] = None) -> None:
    """A rewrite that moved nothing: the written file is the input, byte for byte."""
    if full is None:
        full = full_by_default()
    if written.size != original.size or written.program != original.program:
        raise _fail("the copy of the input differs from it")
    checker = ByteChecker(original, written, recipe, full)
    difference = checker.first_difference([SameBytes("the copy of the input", Span(0, original.size),
                                                     Span(0, written.size))])
    if cost is not None:
        cost.bytes_read += checker.bytes_read
    if difference is not None:
        raise _fail(f"the copy of the input differs from it at byte {difference.offset:,}")


# --- the program's own tables -------------------------------------------------------------------

def _check_program_tables(a: m.Program, b: m.Program, plan: RewritePlan) -> Optional[dict[int, int]]:
    """Program-level tables: unchanged except the constant and initial-data lists; returns the constant remap."""
    for name in ("version", "constant_buffer", "backend_delegate_data", "named_data"):
        if getattr(a, name) != getattr(b, name):
            raise _fail(f"the program's {name} changed")
    if len(a.execution_plan or ()) != len(b.execution_plan or ()):
        raise _fail(f"the number of methods changed ({len(a.execution_plan or ())} -> {len(b.execution_plan or ())})")
    old_segments, new_segments = len(a.segments or ()), len(b.segments or ())
    new_lists = b.mutable_data_segments or ()
    new_tables = [index for index in ((new_lists[0].segment_index if new_lists else -1),
                                      (b.constant_segment.segment_index if b.constant_segment else -1))
                  if index >= old_segments]
    if sorted(new_tables) != list(range(old_segments, new_segments)):
        raise _fail(f"the segment table went from {old_segments} to {new_segments} entries, "
                    "more than a new initial-data or constant segment")
    _check_initial_data_lists(a, b, plan)
    return _constant_remap(a.constant_segment, b.constant_segment, plan)


def _check_initial_data_lists(a: m.Program, b: m.Program, plan: RewritePlan) -> None:
    """The first list keeps its entries and gains the plan's, in order, in its segment or in a new one.  Entries
    the plan drops (read only by re-encoded constants) hold no bytes, nothing reads them, and the offsets never
    decrease; the kept ones may move within the segment, checked value by value."""
    old_lists, new_lists = a.mutable_data_segments or (), b.mutable_data_segments or ()
    if plan.dropped_initial_data:
        first = (new_lists[0].offsets or ()) if new_lists else ()
        kept = (old_lists[0].offsets or ()) if old_lists else ()
        if not old_lists or len(new_lists) != len(old_lists) or new_lists[1:] != old_lists[1:] \
                or new_lists[0].segment_index != old_lists[0].segment_index or len(first) != len(kept) \
                or plan.initial_data or any(a > b for a, b in zip(first, first[1:])) \
                or not set(plan.dropped_initial_data) <= set(range(1, len(kept))):
            raise _fail("the initial-data list is not the input's with the dropped entries emptied, its offsets in "
                        "order")
        _no_reader_of(b, set(plan.dropped_initial_data))
        return
    if not plan.initial_data:
        if a.mutable_data_segments != b.mutable_data_segments:
            raise _fail("mutable_data_segments changed although no initial data was added")
        return
    if len(new_lists) != max(1, len(old_lists)) or new_lists[1:] != old_lists[1:]:
        raise _fail("mutable_data_segments lists other than the first changed")
    first = new_lists[0].offsets or ()
    kept = (old_lists[0].offsets or ()) if old_lists else (0,)
    # A new segment (one past the input's) may hold it, e.g. when the old one is shared with another table:
    # _require_segments then holds the new segment's start equal to the old one, which stays as it was.
    if old_lists and new_lists[0].segment_index not in (old_lists[0].segment_index, len(a.segments or ())):
        raise _fail("the initial data moved to another existing segment")
    if tuple(first[: len(kept)]) != tuple(kept) or len(first) != len(kept) + len(plan.initial_data):
        raise _fail(f"the initial-data offsets are not the input's {len(kept)} followed by "
                    f"{len(plan.initial_data)} new entries")
    for position, entry in enumerate(plan.initial_data):
        if entry.index != len(kept) + position:
            raise _fail(f"initial-data entry {entry.index} is out of order")


def _no_reader_of(program: m.Program, dropped: set[int]) -> None:
    """No planned tensor of any method loads an initial-data entry the plan dropped."""
    for p, plan in enumerate(program.execution_plan or ()):
        for index, value in enumerate(plan.values or ()):
            if isinstance(value, m.Tensor) and value.has_initial_data and not value.is_external \
                    and value.data_buffer_idx in dropped:
                raise _fail(f"method {p}: value {index} still loads dropped initial-data entry {value.data_buffer_idx}")


def _constant_remap(old: Optional[m.SubsegmentOffsets], new: Optional[m.SubsegmentOffsets],
                    plan: RewritePlan) -> Optional[dict[int, int]]:
    """Old constant index -> new, when the plan drops entries or adds them (None when the constant table is
    unchanged).  New entries (host constants the encoding added: ``Storage.new_entries``) follow the kept ones."""
    dropped = set(plan.dropped_constants)
    added = len(plan.constant_entries)
    if not dropped and not added:
        if old != new:
            raise _fail("the constant segment's table changed although no constant entry was dropped or added")
        return None
    offsets = (old.offsets or ()) if old is not None else ()
    if dropped and (new is None or old is None or new.segment_index != old.segment_index or len(offsets) <= 1
                    or not dropped <= set(range(1, len(offsets)))):
        raise _fail(f"the plan drops constant entries {sorted(dropped)} that the input does not have")
    if new is None:
        raise _fail("the constant table is gone although the plan adds entries")
    remap = {0: 0}
    for index in range(1, len(offsets)):
        if index not in dropped:
            remap[index] = len(remap)
    expected = len(remap) + added
    if len(new.offsets or ()) != expected:
        raise _fail(f"the constant table has {len(new.offsets or ())} entries, expected {expected}")
    for position, entry in enumerate(plan.constant_entries):
        if entry.index != len(remap) + position:
            raise _fail(f"new constant entry {entry.index} is out of order")
    return remap


def _edits_by_index(plan: RewritePlan, methods: int) -> dict[int, MethodEdit]:
    edits: dict[int, MethodEdit] = {}
    for edit in plan.methods:
        if not 0 <= edit.plan_index < methods or edit.plan_index in edits:
            raise _fail(f"the plan edits method index {edit.plan_index} twice or out of range")
        edits[edit.plan_index] = edit
    return edits


# --- one method ---------------------------------------------------------------------------------

class _MethodCheck(Verifier):
    """Compares method ``index`` of the input and the output, given the plan's edit of it (if any); the encoding's
    part (how a moved constant is held, what chain 0 starts with) is its ``EncodingCheck``'s."""

    def __init__(self, context: _VerifyContext, index: int, old: m.ExecutionPlan, new: m.ExecutionPlan,
                 edit: Optional[MethodEdit]) -> None:
        self.context = context
        self.old, self.new = old, new
        self.new_devices = new.buffer_devices()  # once: a lookup per moved value would be quadratic
        self.edit = edit
        self.label = f"method {index} ({old.name!r})"
        self.declared = context.declared_of(index)
        self.moved: dict[int, Placement] = {}
        for placement in edit.placements if edit else ():
            if placement.value in self.moved or not 0 <= placement.value < len(old.values or ()):
                raise self.fail(f"value {placement.value} is placed twice or does not exist")
            self.moved[placement.value] = placement
        # values that only removed copies wrote (their out and return slots) -> the values they copied
        self.copied_from: dict[int, set[int]] = {}
        self.folds: dict[int, FoldPlacement] = {}
        for fold in edit.folds if edit else ():
            if fold.value in self.folds or fold.value in self.moved or \
                    fold.appended != (fold.value >= len(old.values or ())):
                raise self.fail(f"folded value {fold.value} is placed twice, or is new and old at once")
            self.folds[fold.value] = fold
        self.released = set(edit.released) if edit else set()
        self.relocated: dict[int, tuple[int, Optional[int]]] = {}
        for value, memory_id, offset in edit.relocations if edit else ():
            if value in self.relocated or value in self.moved or value in self.folds:
                raise self.fail(f"value {value} is relocated twice, or relocated and moved")
            self.relocated[value] = (memory_id, offset)
        # static views of removed copies' destinations pointed at the value holding their constant -> that value
        self.followers: dict[int, int] = {}
        for view, holder in views_on_holders(edit) if edit else ():
            if view in self.followers or view in self.moved or view in self.folds or view in self.relocated:
                raise self.fail(f"value {view} follows a moved constant twice, or is also moved or relocated")
            self.followers[view] = holder
        self.traced: dict[int, Traced] = {}  # folded value -> how the input computes it (its own reading)
        self.stands_for: dict[int, set[int]] = {}  # folded value -> the input's values it replaces
        self.dead: set[int] = set()  # values only removed kernels wrote
        self._maps: list[tuple[Optional[int], ...]] = []  # per chain: old instruction -> new (None: removed)
        # the value that holds each moved constant on its device (itself, or the value its encoding keeps it in)
        self.held: dict[int, Placement] = {p.holder: p for p in self.moved.values()}
        self.encoded = context.plan.options.encoding.checker(self)
    def fail(self, what: str) -> RewriteCheckError:
        return _fail(f"{self.label}: {what}")

    def recompute(self, recipe: FoldRecipe) -> Callable[[], bytearray]:
        return _recompute(recipe, self.context.original, self.context.ptd)

    def run(self) -> None:
        old, new = self.old, self.new
        for name in ("name", "container_meta_type", "inputs", "outputs", "operators", "delegates"):
            if getattr(old, name) != getattr(new, name):
                raise self.fail(f"its {name} changed")
        maps = self._maps = self._instruction_maps()
        self._trace_folds(maps)
        self._check_removed(maps)
        self._check_values()
        self._check_buffers()
        self._check_layout()
        self._check_chains(maps)
        self._check_readers()
        self._check_replay(maps)

    # instructions

    def _instruction_maps(self) -> list[tuple[Optional[int], ...]]:
        chains = self.old.chains or ()
        if self.edit is None:
            return [tuple(range(len(chain.instructions or ()))) for chain in chains]
        maps = list(self.edit.instruction_maps)
        if len(maps) != len(chains):
            raise self.fail(f"the plan maps {len(maps)} chains, the method has {len(chains)}")
        shift = self.encoded.leading
        for c, (chain, mapping) in enumerate(zip(chains, maps)):
            kept = [new for new in mapping if new is not None]
            first = shift if c == 0 else 0
            if len(mapping) != len(chain.instructions or ()) or kept != list(range(first, first + len(kept))):
                raise self.fail(f"the plan's instruction map of chain {c} is not an order-keeping map")
        removed = {(c, k) for c, mapping in enumerate(maps) for k, new in enumerate(mapping) if new is None}
        if removed != set(self.edit.removed):
            raise self.fail("the plan's removed instructions and its instruction map disagree")
        return maps

    def _check_removed(self, maps: list[tuple[Optional[int], ...]]) -> None:
        ops = [op.qualified_name for op in self.old.operators or ()]
        replaced = set().union(*self.stands_for.values()) if self.stands_for else set()
        folded_steps = {(s.chain, s.instruction) for traced in self.traced.values() for s in traced.steps}
        for c, mapping in enumerate(maps):
            instructions = (self.old.chains or ())[c].instructions or ()
            for k, new_index in enumerate(mapping):
                if new_index is not None:
                    continue
                if self.encoded.removed_in_input(c, k):
                    continue  # the encoding's own instructions in the input, rewritten (``EncodingCheck``)
                ins = instructions[k]
                args = ins.args or () if isinstance(ins, m.KernelCall) else ()
                name = ops[ins.op_index] if isinstance(ins, m.KernelCall) else ""
                slots = copy_slots(name, args)
                if slots is not None and slots.to_device and (slots.source in self.moved or slots.out in replaced):
                    for slot in kernel_results(name, args):  # its out and return slots
                        self.copied_from.setdefault(slot, set()).add(slots.source)
                elif name in FOLD_KERNELS and (c, k) in folded_steps:
                    self.dead.update(kernel_results(name, args))
                else:
                    raise self.fail(f"chain {c} instruction {k} was removed but is not an {H2D_COPY} of a "
                                    "constant moved in this method or of a folded value, nor a kernel of a folded "
                                    "chain")

    # folded values

    def _trace_folds(self, maps: list[tuple[Optional[int], ...]]) -> None:
        """How the input computes each folded value, read from the input program alone (``fold.Tracer``).

        A folded value stands for the input's values whose delegate arguments now read it (and for itself,
        when it is not new): each must be computed from one constant by table kernels (or be a device copy
        of such a value), all by the same kernels, and those must be the plan's chain.
        """
        if not self.folds:
            return
        for c, mapping in enumerate(maps):
            old_ins, new_ins = (self.old.chains or ())[c].instructions or (), \
                ((self.new.chains or ())[c].instructions or ()) if c < len(self.new.chains or ()) else ()
            for k, new_index in enumerate(mapping):
                if new_index is None or new_index >= len(new_ins):
                    continue
                before, after = old_ins[k], new_ins[new_index]
                if isinstance(before, m.DelegateCall) and isinstance(after, m.DelegateCall):
                    for a, b in zip(before.args or (), after.args or ()):
                        if a != b and b in self.folds:
                            self.stands_for.setdefault(b, set()).add(a)
        tracer = Tracer(self.old)
        for value, fold in self.folds.items():
            stands = self.stands_for.setdefault(value, set())
            if not fold.appended:
                stands.add(value)
            found = {v: tracer.trace(v) for v in stands}
            shapes = {(t.source, t.steps) for t in found.values() if t is not None}
            if not stands or None in found.values() or len(shapes) != 1:
                raise self.fail(f"folded value {value} does not stand for one value the input computes from a "
                                f"constant with foldable kernels (it replaces values {sorted(stands)})")
            traced = next(t for t in found.values() if t is not None)
            if (traced.source, traced.steps) != (fold.chain.source, fold.chain.steps):
                raise self.fail(f"folded value {value}: the plan's chain is not how the input computes it")
            self.traced[value] = traced

    def _check_folded(self, index: int, old: Optional[m.EValue], new: m.EValue, fold: FoldPlacement) -> None:
        where = f"folded value {index}"
        traced = self.traced[index]
        constant = (self.old.values or ())[traced.source]
        assert isinstance(constant, m.Tensor), "the tracer starts a chain at a constant tensor"
        result = traced.steps[-1].tensor if traced.steps else constant
        if not isinstance(new, m.Tensor) or new.allocation_info is None or layout_of(new) != layout_of(result) \
                or (old is not None and (not isinstance(old, m.Tensor) or layout_of(old) != layout_of(result))):
            raise self.fail(f"{where} is not planned memory of the type, shape and dim order its chain computes")
        if new.storage_offset != 0 or new.shape_dynamism != m.TensorShapeDynamism.STATIC:
            raise self.fail(f"{where} has a storage offset or a dynamic shape")
        self.check_region(where, new, fold.memory_id, fold.offset, fold.device, result.nbytes)
        self.encoded.check_fold(index, new, fold, traced, constant)

    def check_region(self, where: str, tensor: m.Tensor, memory_id: int, offset: int, device: m.Device,
                      nbytes: int) -> None:
        """A value moved or folded into planned memory: where the plan put it, on its device, in its buffer."""
        info = tensor.allocation_info
        assert info is not None, "the callers refused a value without its allocation"
        if (info.memory_id, info.memory_offset) != (memory_id, offset):
            raise self.fail(f"{where} is not at buffer {memory_id} offset {offset}")
        buffer_device = self.new_devices.get(memory_id, m.CPU)
        if tensor.device != device or buffer_device != device or \
                buffer_device.is_cpu and not self.context.plan.options.host_placement:
            raise self.fail(f"{where}, its buffer and the plan disagree on its device "
                            f"({tensor.device}, {buffer_device}, {device})")
        sizes = self.new.non_const_buffer_sizes or ()
        if not is_aligned(offset) or memory_id >= len(sizes) or offset + nbytes > sizes[memory_id]:
            raise self.fail(f"{where}: its region is misaligned or outside buffer {memory_id}")

    def _check_chains(self, maps: list[tuple[Optional[int], ...]]) -> None:
        old_chains, new_chains = self.old.chains or (), self.new.chains or ()
        if len(old_chains) != len(new_chains) or (self.old.chains is None) != (self.new.chains is None):
            raise self.fail("the number of chains changed")
        for c, (old, new, mapping) in enumerate(zip(old_chains, new_chains, maps)):
            if old.inputs != new.inputs or old.outputs != new.outputs:
                raise self.fail(f"chain {c}'s inputs or outputs changed")
            survivors = [k for k, new_index in enumerate(mapping) if new_index is not None]
            shift = self.encoded.leading if c == 0 else 0
            instructions = new.instructions or ()
            if len(instructions) != shift + len(survivors) or (old.instructions is None) != (new.instructions is None):
                raise self.fail(f"chain {c} has {len(instructions)} instructions, expected {shift + len(survivors)}")
            if c == 0:
                self.encoded.check_leading(instructions[:shift])
            for k, ins in zip(survivors, instructions[shift:]):
                self._check_instruction(c, k, (old.instructions or ())[k], ins, mapping, shift + len(survivors))
            expected_trace = None if old.stacktrace is None else (m.FrameList(()),) * shift + tuple(
                frames for k, frames in enumerate(old.stacktrace) if k >= len(mapping) or mapping[k] is not None)
            if new.stacktrace != expected_trace:
                raise self.fail(f"chain {c}'s stack traces are not the input's for the instructions kept")

    def _check_instruction(self, c: int, k: int, old: m.Instruction, new: m.Instruction,
                           mapping: tuple[Optional[int], ...], length: int) -> None:
        where = f"chain {c} instruction {k} (now {mapping[k]})"
        if isinstance(old, m.JumpFalseCall) and isinstance(new, m.JumpFalseCall):
            later = [n for n in mapping[old.destination_instruction:] if n is not None]
            target = later[0] if later else length
            if new != m.JumpFalseCall(old.cond_value_index, target):
                raise self.fail(f"{where}: the jump is not to instruction {target}, the one after its old target")
            return
        if isinstance(old, m.DelegateCall) and isinstance(new, m.DelegateCall) and old != new:
            old_args, new_args = old.args or (), new.args or ()
            if old.delegate_index != new.delegate_index or len(old_args) != len(new_args):
                raise self.fail(f"{where}: the delegate call changed")
            for pos, (before, after) in enumerate(zip(old_args, new_args)):
                moved = after in self.held and self.copied_from.get(before) == {self.held[after].value}
                folded = after in self.folds and before in self.stands_for.get(after, ())
                if before != after and not (moved or folded):
                    raise self.fail(f"{where}: argument {pos} changed from value {before} to {after}, but value "
                                    f"{before} was neither written only by removed copies of moved value {after} "
                                    "(or of the constant its device copy holds) nor a value it folds")
            return
        if old != new:
            raise self.fail(f"{where} changed")

    # values and buffers

    def _check_values(self) -> None:
        old_values, new_values = self.old.values or (), self.new.values or ()
        appended = sorted(v for v, f in self.folds.items() if f.appended)
        added = sorted(appended + [index for index, _ in self.edit.new_values] if self.edit else appended)
        if len(new_values) != len(old_values) + len(added) or added != list(
                range(len(old_values), len(new_values))) or (self.old.values is None) != (self.new.values is None):
            raise self.fail(f"the number of values changed ({len(old_values)} -> {len(new_values)}), not by the "
                            f"{len(added)} new value(s) the plan adds")
        for index in appended:
            self._check_folded(index, None, new_values[index], self.folds[index])
        self.encoded.check_new_values()
        original, written, remap = self.context.original, self.context.written, self.context.remap
        for index, (old, new) in enumerate(zip(old_values, new_values)):
            if index in self.held:
                self.encoded.check_placement(index, old, new, self.held[index])
                continue
            if index in self.followers:
                self._check_follower(index, old, new)
                continue
            if self.encoded.owns(index):
                self.encoded.check_value(index, old, new)
                continue
            if index in self.folds:
                self._check_folded(index, old, new, self.folds[index])
                continue
            if index in self.released:
                self._check_released(index, old, new)
                continue
            if isinstance(old, m.Tensor) and (old.is_constant or old.has_initial_data) and not old.is_external:
                if remap is not None and old.is_constant:
                    if old.data_buffer_idx not in remap:
                        raise self.fail(f"value {index} still reads constant entry {old.data_buffer_idx}, "
                                        "which the rewrite dropped")
                    same = (isinstance(new, m.Tensor) and new.data_buffer_idx == remap[old.data_buffer_idx]
                            and _ALL_BUT_INDEX(new) == _ALL_BUT_INDEX(old))
                elif index in self.relocated and old.has_initial_data:  # resident data of a relaid buffer
                    memory_id, offset = self.relocated[index]
                    same = old.allocation_info is not None and old.allocation_info.memory_id == memory_id \
                        and offset is not None and new == relocated_tensor(old, memory_id, offset)
                else:
                    same = new == old
                if not same:
                    raise self.fail(f"value {index} changed although the plan does not move it")
                assert isinstance(new, m.Tensor)  # the same as a tensor
                kind = "kept constant" if old.is_constant else "initial data"
                self.context.require_same(f"{self.label}: value {index} ({kind})",
                                          original.tensor_span(old), written.tensor_span(new))
            elif index in self.relocated:
                memory_id, offset = self.relocated[index]
                if not isinstance(old, m.Tensor) or old.allocation_info is None or \
                        old.allocation_info.memory_id != memory_id or new != relocated_tensor(old, memory_id, offset):
                    raise self.fail(f"value {index} is not the input's at its relocated place in buffer {memory_id}")
            elif new != old:
                raise self.fail(f"value {index} changed although the plan does not move it")

    def _check_replay(self, maps: list[tuple[Optional[int], ...]]) -> None:
        """The memory proof (``program/replay.py``): both methods replayed over bytes, call after call, every kept
        kernel and delegate argument, jump condition and method output reading the definitions the input's reads
        (a moved constant's readers the constant, a folded value's what it stands for).  It shares nothing with the
        lifetime model that laid the buffers out (``_check_layout`` asks that model)."""
        if self.edit is None:
            return
        matching: list[list[Optional[int]]] = [[None] * len(chain.instructions or ())
                                               for chain in self.new.chains or ()]
        for c, mapping in enumerate(maps):
            for old, new in enumerate(mapping):
                if new is not None and c < len(matching) and new < len(matching[c]):
                    matching[c][new] = old
        stands_for = {value: Origin(value=traced.source) if not traced.steps else
                      Origin(step=(traced.steps[-1].chain, traced.steps[-1].instruction))
                      for value, traced in self.traced.items()}
        mismatch = prove_same_reads(self.old, self.new, matching=matching, stands_for=stands_for,
                                    declared=self.declared)
        if mismatch is not None:
            if self.edit is not None and any(g.relaid for g in self.edit.buffers):
                raise RelayoutUnproven(self.fail(f"the byte replay: {mismatch}").what, f"{self.label}: {mismatch}")
            raise self.fail(f"the byte replay: {mismatch}")

    def _check_layout(self) -> None:
        """Every relaid buffer, proven from the output alone: no two values whose lifetimes meet share a byte,
        no resident value shares a byte with anything, nothing overruns the buffer (``program/memory.py``)."""
        relaid = {g.memory_id for g in self.edit.buffers if g.relaid} if self.edit else set()
        if not relaid:
            return
        groups = storage_groups(MethodEffects(self.new), relaid)
        sizes = self.new.non_const_buffer_sizes or ()
        for memory_id in sorted(relaid):
            problems = layout_problems(groups.get(memory_id, []), sizes[memory_id])
            if problems:
                raise self.fail(f"planned buffer {memory_id}: {problems[0]}")

    def _check_follower(self, index: int, old: m.EValue, new: m.EValue) -> None:
        """A static view that follows its constant: in the input it lay where a removed copy of that constant wrote,
        within those bytes; here it is the same tensor where the holder's bytes start.  What it reads on every call
        is the byte replay's to prove."""
        holder = self.followers[index]
        placement = self.held.get(holder)
        new_holder = (self.new.values or ())[holder] if 0 <= holder < len(self.new.values or ()) else None
        old_values = self.old.values or ()
        if placement is None or not isinstance(old, m.Tensor) or old.allocation_info is None \
                or not isinstance(new_holder, m.Tensor):
            raise self.fail(f"value {index} follows value {holder}, which holds no moved constant")
        place = (old.allocation_info.memory_id, old.allocation_info.memory_offset)
        copies = [d for d, sources in self.copied_from.items() if sources == {placement.value}
                  and isinstance(copy := old_values[d], m.Tensor) and (info := copy.allocation_info) is not None
                  and (info.memory_id, info.memory_offset) == place and old.nbytes <= copy.nbytes]
        if not copies:
            raise self.fail(f"value {index} follows moved value {placement.value}, but in the input it was no view "
                            "within the bytes of a removed copy of it")
        if old.nbytes > new_holder.nbytes or new != on_holder(old, new_holder):
            raise self.fail(f"value {index} is not the input's view where value {holder} holds its constant")

    def _check_released(self, index: int, old: m.EValue, new: m.EValue) -> None:
        """A constant nothing reads any more, whose bytes left the file: unbound (data index 0), else unchanged."""
        if not isinstance(old, m.Tensor) or not old.is_constant or old.is_external or \
                old.data_buffer_idx not in self.context.plan.dropped_constants or \
                new != m.replace(old, data_buffer_idx=0):
            raise self.fail(f"value {index} was released but is not a constant whose entry was dropped, unbound")
        self.dead.add(index)  # nothing may read it any more

    def check_external(self, where: str, tensor: m.Tensor) -> None:
        """The runtime loads an external constant's initial data from the first .ptd entry with its key."""
        ptd = self.context.ptd
        if ptd is None:
            raise self.fail(f"{where} is external but no .ptd was given")
        problem = external_entry_problem(ptd, tensor)
        if problem:
            raise self.fail(f"{where}: {problem}")

    def _check_buffers(self) -> None:
        old_sizes, new_sizes = self.old.non_const_buffer_sizes or (), self.new.non_const_buffer_sizes or ()
        growth = {g.memory_id: g for g in self.edit.buffers} if self.edit else {}
        if len(new_sizes) < len(old_sizes):
            raise self.fail("planned buffers disappeared")
        for memory_id, size in enumerate(new_sizes):
            old_size = old_sizes[memory_id] if memory_id < len(old_sizes) else None
            g = growth.get(memory_id)
            if g is None and size != old_size or g is not None and (
                    size != g.new_size or size < (old_size or 0) and not g.relaid or g.added != (old_size is None)):
                raise self.fail(f"planned buffer {memory_id} is {size} bytes (input: {old_size}), "
                                "which the plan does not say")
        old_devices, new_devices = self.old.non_const_buffer_device or (), self.new.non_const_buffer_device or ()
        added = tuple(m.NonConstBufferDevice(g.memory_id, g.device.type, g.device.index)
                      for g in growth.values() if g.added and not g.device.is_cpu)
        if tuple(new_devices) != tuple(old_devices) + added:
            raise self.fail("non_const_buffer_device is not the input's plus the buffers the plan adds")
        self._check_disjoint()

    def _check_disjoint(self) -> None:
        regions = [(p.memory_id, p.offset, p.nbytes, p.holder) for p in self.moved.values()]
        regions += [(r.memory_id, r.offset, r.nbytes, value) for value, r in self.encoded.resident.items()]
        regions += [(f.memory_id, f.offset, f.nbytes, value) for value, f in self.folds.items()]
        problem = overlap(self.new, regions, self.followers)
        if problem:
            raise self.fail(problem)

    # who reads what, in the output

    def _check_views(self, written_by_removed: set[int]) -> None:
        """No surviving instruction (nor the caller, for an output) reads, through a static view, memory that
        only removed instructions wrote: the views each such value had in the input (``program/memory.py``)."""
        if not written_by_removed:
            return
        sites = delegate_call_sites(self.old, declared=self.declared[0])
        maps, views = self._maps, view_reads(MethodEffects(self.old, sites))
        for value in written_by_removed:
            for view, (c, k) in views.get(value, ()):
                if view in self.followers:
                    continue  # pointed at the holder (_check_follower); the byte replay proves its reads
                if (c, k) == (-1, -1) or maps[c][k] is not None:
                    reader = "method output" if c < 0 else f"chain {c} instruction {k}"
                    raise self.fail(f"value {view} is still read by {reader}, but it is a view of memory only removed "
                                    f"instructions wrote (value {value})")

    def _check_readers(self) -> None:
        """Moved and folded device values are read only by delegates on their device; nothing reads what only
        removed instructions wrote, directly or through a static view."""
        resident = set(self.held) | set(self.folds) | set(self.encoded.resident)
        gone = (set(self.copied_from) | self.dead) - resident
        self._check_views(set(self.copied_from) | self.dead)
        watched = resident | gone
        if not watched:
            return
        skip = self.encoded.own_steps  # the encoding's own instructions, checked by it
        for value, reader in readers_in_order(self.new, watched):  # program/readers.py: every use, in order
            if reader.step in skip:
                continue
            if value in gone:
                raise self.fail(f"value {value} is still read by {reader.describe()}, but only removed instructions "
                                "wrote it")
            placement = self.held.get(value) or self.folds.get(value) or self.encoded.resident.get(value)
            if placement is not None and not placement.device.is_cpu and \
                    (reader.kind is not ReaderKind.DELEGATE_CALL or reader.device != placement.device):
                raise self.fail(f"moved value {value} now lives on {placement.device} but is read by "
                                f"{reader.describe()}")

def _recompute(recipe: FoldRecipe, original: PteFile, ptd: Optional[PtdFile]) -> Callable[[], bytearray]:
    """The folded bytes, from the input (torch is imported when the self-check reaches them)."""

    def compute() -> bytearray:
        from .fold.compute import SourceBytes, fold_bytes

        return fold_bytes(recipe, SourceBytes(original, ptd))

    return compute


def overlap(plan: m.ExecutionPlan, regions: list[tuple[int, int, int, int]],
            views: Optional[Mapping[int, int]] = None) -> Optional[str]:
    """Which value overlaps a moved region (memory_id, offset, nbytes, owner) other than its owner (or a static view
    that follows it: ``views``, view -> owner), if any.

    O((values + regions) log regions): regions sorted per buffer, each value's neighbours found by bisection.
    """
    by_buffer: dict[int, list[tuple[int, int, int]]] = {}
    for memory_id, offset, nbytes, owner in regions:
        if nbytes > 0:
            by_buffer.setdefault(memory_id, []).append((offset, offset + nbytes, owner))
    index_of: dict[int, tuple[list[int], list[int], list[int]]] = {}
    for memory_id, spans in by_buffer.items():
        spans.sort()
        for (_, end, owner), (start, _, other) in zip(spans, spans[1:]):
            if start < end:
                return f"value {other} overlaps the region of moved value {owner}"
        index_of[memory_id] = ([s for s, _, _ in spans], [e for _, e, _ in spans], [o for _, _, o in spans])
    for index, value in enumerate(plan.values or ()):
        region = planned_region(value)
        found = index_of.get(region.memory_id) if region is not None else None
        if region is None or found is None:
            continue
        starts, ends, owners = found
        # Regions are disjoint and sorted, so those overlapping the value's region are contiguous.
        for k in range(bisect.bisect_right(ends, region.start), bisect.bisect_left(starts, region.end)):
            if owners[k] != index and (views is None or views.get(index) != owners[k]):
                return f"value {index} overlaps the region of moved value {owners[k]}"
    return None


def external_entry_problem(ptd: PtdFile, tensor: m.Tensor) -> Optional[str]:
    """Why the .ptd entry the runtime would load for ``tensor`` (the first with its key) is not its data."""
    key = tensor.fqn or ""
    entry = ptd.entry(key)
    if entry is None:
        return f"its key {key!r} is not in {ptd.path}"
    reached = tensor_key(key)  # the name the runtime looks up (its C string); ``entry`` resolves it the same way
    twins = sum(1 for e in ptd.flat_tensor.named_data or () if e.key == reached)
    if twins != 1:
        return (f"its key {key!r} appears {twins} times in {ptd.path} (the runtime uses the first, so the .ptd is "
                "ambiguous)")
    layout = entry.tensor_layout
    if layout is not None and layout.layout_key != tensor.layout_key:
        return f"the layout of {key!r} in {ptd.path} does not match the tensor"
    if (ptd.span(key) or Span(0, 0)).size < tensor.nbytes:
        return f"the data of {key!r} in {ptd.path} is shorter than the tensor"
    return None


# --- segments and padding -----------------------------------------------------------------------

def _require_segments(context: _VerifyContext) -> None:
    """Every segment the rewrite does not re-lay holds the input's bytes (the initial data's as a prefix).

    The constant segment, when entries are dropped, is checked entry by entry (its values above);
    delegate blobs and named data must be unchanged wherever they are, so a blob or named entry that
    shares the re-laid constant segment shows as a difference.
    """
    original, written = context.original, context.written
    a, b = original.program, written.program
    roles: dict[int, list[str]] = {}
    for p, plan in enumerate(a.execution_plan or ()):
        for d, delegate in enumerate(plan.delegates or ()):
            if delegate.processed is not None and delegate.processed.location == m.DataLocation.SEGMENT:
                roles.setdefault(delegate.processed.index, []).append(
                    f"the blob of method {p} ({plan.name!r}) delegate {d}, {delegate.id}")
    for entry in a.named_data or ():
        roles.setdefault(entry.segment_index, []).append(f"named data {entry.key!r}")
    relaid = b.constant_segment.segment_index if context.remap is not None and b.constant_segment else None
    lists = b.mutable_data_segments or ()
    initial = lists[0].segment_index if lists and context.plan.initial_data else None
    relaid_initial = lists[0].segment_index if lists and context.plan.dropped_initial_data else None
    old_lists = a.mutable_data_segments or ()
    if initial is not None and initial >= len(a.segments or ()) and old_lists:  # a new segment: the old one first
        source = original.segment_span(old_lists[0].segment_index)
        target = written.segment_span(initial)
        if target.size < source.size:
            raise _fail(f"segment {initial} (the new initial data) is shorter than the input's initial data")
        context.require_same(f"segment {initial} (the new initial data, starting with segment "
                             f"{old_lists[0].segment_index})", source, Span(target.offset, source.size))
    for index in range(len(a.segments or ())):
        source, target = original.segment_span(index), written.segment_span(index)
        what = f"segment {index}" + (f" ({'; '.join(roles[index])})" if index in roles else "")
        if index in (relaid, relaid_initial) and index not in roles:
            continue  # checked entry by entry
        if index == initial and index not in roles:
            if target.size < source.size:
                raise _fail(f"{what} (initial data) shrank")
            target = Span(target.offset, source.size)
        context.require_same(what, source, target)


def _padding(written: PteFile, same: list[SameBytes | ComputedBytes]) -> list[ZeroBytes]:
    """Every byte of the output outside the flatbuffer and the referenced ranges: the writer's zero fill."""
    covered = sorted([(0, written.flatbuffer_size)] + [(r.written.offset, r.written.end) for r in same])
    gaps: list[ZeroBytes] = []
    cursor = 0
    for start, end in covered + [(written.size, written.size)]:
        if start > cursor:
            gaps.append(ZeroBytes(f"padding at [{cursor:,}, {start:,})", Span(cursor, start - cursor)))
        cursor = max(cursor, end)
    return gaps
