"""The self-check of a first-call prologue (the 1.5 runtime encoding), as ``verify.py`` calls it per method.

What a 1.5 rewrite changes beyond a 1.6 one, proven from the two programs (and the plan only for what it
claims to have done):

* **The prologue is what the runtime runs once.**  Chain 0 of the output starts with exactly the plan's
  prologue, and ``program/prologue.py`` recognises it there (the guard is a Bool that starts true, nothing
  else in the method names the guard or its false value, no jump lands inside it), so its copies run on the
  first call and never again.
* **Each copy is accounted for** by exactly one change of the plan: a moved constant into its device copy, a
  folded value's host constant into the folded value, a re-encoded 1.6 constant's host constant into it, or a
  copy of the input's own prologue written again unchanged.
* **Each destination holds its constant for the whole method**: planned in a buffer on the copy's device, of
  the source's type, shape and dim order, with no initial data, written by no other instruction, no method
  input or output, and (``verify.py``'s ``overlap``) sharing bytes with no other value.
* **Each new host constant holds the input's bytes**: a re-encoded constant's initial data, or what the folded
  chain computes from the input (recomputed), or the same .ptd entry.
"""

from __future__ import annotations

from typing import Callable, Optional, Protocol, Sequence

from pte_devconst.program.effects import MethodEffects
from pte_devconst.program.executorch import H2D_COPY
from pte_devconst.program.kernel_effects import copy_slots
from pte_devconst.program.prologue import first_call_prologue
from pte_devconst.schema import model as m
from pte_devconst.program.layout import is_aligned
from pte_devconst.schema.pte_file import PteFile
from pte_devconst.schema.span import Span

from .edit import prologue_instructions
from .fold import FoldRecipe, Traced, layout_of, recipe_of
from .plan import FoldPlacement, MethodEdit, Reencoded
from .verify_bytes import ComputedBytes

Fail = Callable[[str], Exception]


class ByteRequirements(Protocol):
    """What the checks here ask of the self-check's context: both files, and where byte requirements go."""

    original: PteFile
    written: PteFile
    computed: list[ComputedBytes]

    def require_same(self, what: str, source: Optional[Span], written: Optional[Span]) -> None: ...


class PrologueCheck:
    """The first-call parts of one method's self-check (module docstring)."""

    def __init__(self, old: m.ExecutionPlan, new: m.ExecutionPlan, edit: Optional[MethodEdit], fail: Fail) -> None:
        self.old, self.new, self.edit, self.fail = old, new, edit, fail
        self.old_prologue = first_call_prologue(old)
        self.reencoded: dict[int, Reencoded] = {r.value: r for r in edit.reencoded} if edit else {}
        length = edit.prologue_length if edit else 0
        self.copy_steps = frozenset((0, k) for k in range(1, length - 1)) if length else frozenset()
        self.new_values = dict(edit.new_values) if edit else {}
        written = {(copy.src, copy.dst) for copy in edit.prologue} if edit else set()
        self._rewritten: set[tuple[int, int]] = set()
        if self.old_prologue is not None and edit is not None:
            instructions = (old.chains or ())[0].instructions or ()
            touched = {(0, 0), (0, self.old_prologue.end - 1), *((0, k) for k in self.old_prologue.copies)}
            removed = set(edit.removed)
            if touched & removed and not touched <= removed:
                raise fail("the input's first-call prologue is only partly removed")
            if touched <= removed:
                self._rewritten = {(0, 0), (0, self.old_prologue.end - 1)}
                for k in self.old_prologue.copies:
                    ins = instructions[k]
                    assert isinstance(ins, m.KernelCall), "a recognised prologue holds copies only"
                    slots = copy_slots(H2D_COPY, ins.args or ())
                    if slots is not None and (slots.source, slots.out) in written:
                        self._rewritten.add((0, k))

    def rewritten(self, chain: int, instruction: int) -> bool:
        """An instruction of the input's prologue that the output's prologue replaces (its guard, or a copy it
        makes again); a copy of a constant that moved is checked as any removed copy."""
        return (chain, instruction) in self._rewritten

    # --- the prologue's instructions --------------------------------------------------------------------

    def check_instructions(self, written: Sequence[m.Instruction]) -> None:
        """Chain 0 starts with exactly the plan's prologue, one the runtime runs once, each copy accounted for."""
        edit = self.edit
        assert edit is not None and edit.prologue, "called when the plan writes a prologue"
        op = self.new.operator_index(H2D_COPY)
        if op is None or list(written) != prologue_instructions(edit, op):
            raise self.fail("chain 0 does not start with the plan's first-call prologue")
        found = first_call_prologue(self.new)
        if found is None or found.end != edit.prologue_length or len(found.copies) != len(edit.prologue):
            raise self.fail("the first-call prologue written is not one the runtime runs once only (its guard or "
                            "false value is used elsewhere, or a jump lands inside it)")
        guard, cleared = edit.guard or (-1, -1)
        if self.new_values.get(guard, self._value(guard)) != m.Bool(True) \
                or self.new_values.get(cleared, self._value(cleared)) != m.Bool(False):
            raise self.fail("the first-call prologue's guard is not a true Bool cleared from a false one")
        self._check_accounted()
        self._check_destinations()

    def _value(self, index: int) -> Optional[m.EValue]:
        values = self.new.values or ()
        return values[index] if 0 <= index < len(values) else None

    def _check_accounted(self) -> None:
        """Every copy is one change of the plan, and every such change has exactly one copy."""
        edit = self.edit
        assert edit is not None
        expected: dict[tuple[int, int], str] = {}
        for p in edit.placements:
            if p.first_call:
                expected[(p.value, p.holder)] = f"moved constant {p.value}"
        for f in edit.folds:
            if f.first_call_source is not None:
                expected[(f.first_call_source, f.value)] = f"folded value {f.value}"
        for r in edit.reencoded:
            expected[(r.source, r.value)] = f"re-encoded constant {r.value}"
        kept: set[tuple[int, ...]] = set()
        if self.old_prologue is not None:
            instructions = (self.old.chains or ())[0].instructions or ()
            for k in self.old_prologue.copies:
                ins = instructions[k]
                if (0, k) in self._rewritten and isinstance(ins, m.KernelCall):
                    kept.add(tuple(ins.args or ()))
        seen: set[tuple[int, int]] = set()
        for copy in edit.prologue:
            key = (copy.src, copy.dst)
            if key in seen:
                raise self.fail(f"the first-call prologue copies value {copy.src} into value {copy.dst} twice")
            seen.add(key)
            if key not in expected and copy.args not in kept:
                raise self.fail(f"the first-call copy of value {copy.src} into value {copy.dst} is neither a change "
                                "of the plan nor a copy of the input's prologue")
            slots = copy_slots(H2D_COPY, copy.args)
            if key in expected and (slots is None or (slots.source, slots.out) != key):
                raise self.fail(f"the first-call copy of {expected[key]} has arguments {list(copy.args)}")
        missing = set(expected) - seen
        if missing:
            key = min(missing)
            raise self.fail(f"{expected[key]} has no first-call copy")

    def _check_destinations(self) -> None:
        """Each destination: device memory of the source's layout that no other instruction writes."""
        edit = self.edit
        assert edit is not None
        values = self.new.values or ()
        devices = self.new.buffer_devices()
        effects = MethodEffects(self.new)
        writers: dict[int, int] = {}
        for step, written in zip(effects.steps, effects.writes):
            if (step.chain, step.instruction) not in self.copy_steps:
                for value in written:
                    writers.setdefault(value, step.instruction)
        ends = set(self.new.inputs or ()) | set(self.new.outputs or ())
        for copy in edit.prologue:
            src, dst = values[copy.src], values[copy.dst]
            where = f"the first-call copy of value {copy.src} into value {copy.dst}"
            if not isinstance(src, m.Tensor) or not src.is_constant:
                raise self.fail(f"{where}: its source is not a host constant")
            if not isinstance(dst, m.Tensor) or dst.allocation_info is None or dst.has_initial_data:
                raise self.fail(f"{where}: its destination is not planned memory without initial data")
            if layout_of(src) != layout_of(dst) or dst.storage_offset or \
                    dst.shape_dynamism != m.TensorShapeDynamism.STATIC:
                raise self.fail(f"{where}: source and destination differ in type, shape or dim order")
            if copy.device.is_cpu or devices.get(dst.allocation_info.memory_id, m.CPU) != copy.device \
                    or dst.device != copy.device:
                raise self.fail(f"{where}: its destination is not in a buffer on {copy.device}")
            if copy.dst in writers:
                raise self.fail(f"{where}: instruction {writers[copy.dst]} also writes the destination, which must "
                                "hold the constant for every call")
            if copy.dst in ends or copy.src in ends:
                raise self.fail(f"{where}: a method input or output")

    # --- values -----------------------------------------------------------------------------------------

    def check_holder(self, index: int, old: m.EValue, new: m.EValue) -> None:
        """A first-call copy's destination that existed in the input (a per-call copy's destination, or a 1.6
        constant re-encoded): the same tensor at its resident place, no initial data."""
        edit = self.edit
        assert edit is not None
        placed = self.reencoded.get(index)
        found = placed if placed is not None else next(p for p in edit.placements if p.first_call and p.holder == index)
        memory_id, offset = found.memory_id, found.offset  # its device: _check_destinations
        where = f"value {index} (the device copy of {found.name})"
        if not isinstance(old, m.Tensor) or not isinstance(new, m.Tensor) or layout_of(old) != layout_of(new):
            raise self.fail(f"{where} changed its type, shape or dim order")
        info = new.allocation_info
        if info is None or (info.memory_id, info.memory_offset) != (memory_id, offset):
            raise self.fail(f"{where} is not at buffer {memory_id} offset {offset}")
        sizes = self.new.non_const_buffer_sizes or ()
        if not is_aligned(offset) or memory_id >= len(sizes) or offset + new.nbytes > sizes[memory_id]:
            raise self.fail(f"{where}: its region is misaligned or outside buffer {memory_id}")
        if placed is not None and not old.has_initial_data:
            raise self.fail(f"{where} is re-encoded but had no initial data in the input")
        if placed is None and (old.is_constant or old.has_initial_data or old.allocation_info is None):
            raise self.fail(f"{where} was not planned memory a per-call copy filled")

    def check_new_values(self, context: ByteRequirements) -> None:
        """Each value the plan appends is written as planned; a re-encoded constant's host constant holds the
        input's initial data (or names the same .ptd entry)."""
        values = self.new.values or ()
        for index, value in self.new_values.items():
            if values[index] != value:
                raise self.fail(f"new value {index} is not what the plan adds")
        for r in self.reencoded.values():
            host = values[r.source]
            if r.source not in self.new_values or not isinstance(host, m.Tensor) or not host.is_constant:
                raise self.fail(f"re-encoded constant {r.value}: its host constant {r.source} is not a new constant")
            if r.external_key is not None:
                continue  # the same key: the destination's checks and the .ptd rule cover it
            old = (self.old.values or ())[r.value]
            assert isinstance(old, m.Tensor)
            lists = context.original.program.mutable_data_segments or ()
            if host.data_buffer_idx != r.entry or not lists or r.initial_data_index != old.data_buffer_idx:
                raise self.fail(f"re-encoded constant {r.value}: its host constant reads the wrong entry")
            segment = context.original.segment_span(lists[0].segment_index)
            offsets = lists[0].offsets or ()
            source = Span(segment.offset + offsets[old.data_buffer_idx], old.nbytes)
            context.require_same(f"method {self.new.name!r}: host constant {r.source} (initial data of re-encoded "
                                 f"constant {r.value})", source, context.written.tensor_span(host))

    def check_fold_source(self, fold: FoldPlacement, traced: Traced, constant: m.Tensor,
                          recompute: Callable[[FoldRecipe], Callable[[], bytearray]],
                          context: ByteRequirements) -> None:
        """The host constant a folded value is copied from: the constant itself (a device copy of a shared
        constant), or a new constant holding what the chain computes from the input."""
        source = fold.first_call_source
        assert source is not None
        where = f"folded value {fold.value}"
        if not traced.steps:
            if source != traced.source:
                raise self.fail(f"{where} is a device copy of constant {traced.source} but is filled from {source}")
            return
        host = (self.new.values or ())[source]
        result = traced.steps[-1].tensor
        if source not in self.new_values or not isinstance(host, m.Tensor) or not host.is_constant \
                or host.is_external or layout_of(host) != layout_of(result):
            raise self.fail(f"{where}: its host constant {source} is not a new constant of its layout")
        span = context.written.tensor_span(host)
        if span is not None and span.size:
            recipe = recipe_of(constant, traced.steps, result)
            context.computed.append(ComputedBytes(
                f"method {self.new.name!r}: host constant {source} ({', '.join(s.describe() for s in traced.steps)} "
                f"of constant {traced.source})", span, recompute(recipe)))
