"""The ExecuTorch 1.5 encoding: a moved constant stays on the host and is copied once, on the first call.

A 1.5 loader cannot fill device memory with initial data, so the constant keeps its host bytes and its
``_h2d_copy.out`` moves into a *first-call prologue* at the start of chain 0, guarded by a Bool that the prologue's
last instruction clears: the copies run on the first call of a loaded method and never again, into device memory
nothing else uses.  To the rest of the tool a prologue is a run-once region (``program/once.py``, recognised from
the runtime's semantics alone: its copies are made once, and ``program/memory.py`` keeps what it writes resident);
what makes one this encoding's is said here (``first_call_prologue``).  Only instruction types and the copy
kernel that copy-style programs already have are written, so a runtime built with selective registration runs it;
a method without the copy kernel (legacy style) keeps its constants as they are, each with its reason.

Conversion from device initial data (``initial_data.py``): such a constant becomes a host constant (a new
constant entry holding its initial data, or the same .ptd key) that the prologue copies into it; its
initial-data entry leaves the file when nothing else reads it.  A folded value gets a host constant holding what
its chain computes.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any, Optional, Sequence

from pte_devconst.program.effects import MethodEffects
from pte_devconst.program.executorch import H2D_COPY
from pte_devconst.program.kernel_effects import copy_slots, is_h2d_copy
from pte_devconst.program.moves import COPIED_ONCE, MovedValue, copied_values
from pte_devconst.program.layout import is_aligned
from pte_devconst.program.once import OnceRegion, leading_copies, once_region
from pte_devconst.program.regions import memory_device
from pte_devconst.program.runtime import Runtime
from pte_devconst.schema import model as m
from pte_devconst.schema.span import Span
from pte_devconst.util.record import record
from pte_devconst.util.units import plural

from ..model.plan_model import (NO_PAYLOAD, EncodingPayload, FoldPlacement, MethodEdit, MethodJob,
                                NewConstantEntries, Placement, Reencoded, Storage, Unconverted, dropped_constants,
                                skip_reason)
from .base import Encoding, EncodingCheck, Verifier

if TYPE_CHECKING:
    from ..model.analysis import ConstantVerdict, DeviceCopy
    from ..fold import FoldChain, Traced

# How a value it keeps reaches its device, in the reports' words (validate's rows name its copies so).
COPIED = replace(COPIED_ONCE, copy="first-call copy")
LEGACY = ("legacy style: its delegate copies it itself, which a 1.5 runtime cannot skip (--runtime 1.6 can)")
NO_COPY_KERNEL = (f"legacy style: no {H2D_COPY} kernel in the method to copy it once with (a new operator could "
                  "be missing from a runtime built with selective registration; --runtime 1.6 can)")


class FirstCallEncoding(Encoding):
    """Host constants copied once, on the first call, by a guarded prologue (module docstring)."""

    key = "first-call"
    runtime = Runtime(1, 5)
    name = "first-call copies"
    when = "on the first call"
    refuses = "device initial data"
    described = ("it stays on the host and a guarded prologue copies it once, on the first call (1.5 runtimes "
                 "cannot copy initial data into device memory)")

    def held(self, plan: m.ExecutionPlan) -> frozenset[int]:
        return frozenset(first_call_copies(plan))

    def moved(self, before: m.ExecutionPlan, after: m.ExecutionPlan, *, devices_only: bool = True
              ) -> list[MovedValue]:
        """The destinations of the copies ``after``'s prologue-shaped chain 0 claims to make once (``claimed_copies``:
        a guard that never clears still claims them, so validate probes them and fails the file) that ``before``'s
        prologue did not really make."""
        return copied_values(before, after, first_call_copies(before), claimed_copies(after), devices_only=devices_only,
                             arrival=COPIED)

    # --- planning -----------------------------------------------------------------------------------------

    def admit(self, verdict: "ConstantVerdict") -> Optional[str]:
        if verdict.copied_once:
            return ""  # a first-call prologue copies it already
        return None if verdict.copies else LEGACY

    def fold_refusal(self, plan: m.ExecutionPlan) -> Optional[str]:
        return NO_COPY_KERNEL if plan.operator_index(H2D_COPY) is None else None

    def storage(self, program: m.Program, chosen: Sequence["ConstantVerdict"], chains: Sequence["FoldChain"],
                unread: set[tuple[int, int]], shared_constants: bool) -> "Storage":
        """No initial data; the moved constants keep their entries (the prologue copies them), only the entries of
        constants nothing reads any more go; new constant entries hold re-encoded and folded values' bytes."""

        dropped = () if shared_constants else dropped_constants(program, [], unread)
        return Storage(dropped, new_entries=NewConstantEntries(program, dropped))

    def place(self, job: "MethodJob", verdict: "ConstantVerdict", memory_id: int, offset: int) -> "Placement":
        """The constant stays; the destination of its first copy (a first-call copy's, when it has one) holds it,
        filled by the prologue."""

        device = verdict.device
        assert device is not None, "a moved constant names its device"
        copy = _first_copy(verdict)
        job.collected.append(FirstCallCopy(verdict.value, copy.dst, _copy_args(job.plan, copy), device))
        return Placement(
            method=verdict.method, value=verdict.value, name=verdict.name, device=device, nbytes=verdict.nbytes,
            memory_id=memory_id, offset=offset, initial_data_index=0, source_index=verdict.tensor.data_buffer_idx,
            external_key=None, copies=verdict.copies, delegate_args=verdict.delegate_args,
            copies_per_call=verdict.copies_per_call, plan_index=job.method.plan_index, held_by=copy.dst)

    def place_fold(self, job: "MethodJob", chain: "FoldChain", target: int, memory_id: int, offset: int,
                   removed: tuple[tuple[int, int], ...]) -> "FoldPlacement":
        """The folded value is filled by a first-call copy from a host constant: the constant itself (a device copy
        of a shared constant), or a new one holding what the chain computes."""

        if chain.duplicate:
            host = chain.source
        else:
            entries = job.storage.new_entries
            assert entries is not None, "the first-call storage makes constant entries"
            host = job.new_values.add(host_constant(chain.result_tensor, entries.computed(chain.recipe)))
        job.collected.append(FirstCallCopy(host, target, (host, target, target), chain.device))
        return FoldPlacement(method=chain.method, plan_index=job.method.plan_index, value=target,
                             appended=target >= len(job.plan.values or ()), chain=chain, memory_id=memory_id,
                             offset=offset, initial_data_index=0, external_key=None, removed=removed,
                             filled_from=host)

    def convert(self, job: "MethodJob") -> list["Reencoded"]:
        """Each constant the method holds as device initial data (``MethodAnalysis.residents``) becomes a host
        constant copied into it on the first call; one that cannot (read on the host too, through a static view,
        no copy kernel, left out by the options) stays, in ``job.unconverted``."""

        found = []
        for resident in job.method.residents:
            reason = resident.problem or skip_reason(resident.device, resident.nbytes, job.options)
            if reason:
                job.unconverted.append(Unconverted(resident.method, resident.plan_index, resident.value,
                                                   resident.name, resident.device, resident.nbytes, reason))
                continue
            entries = job.storage.new_entries
            assert entries is not None, "the first-call storage makes constant entries"
            tensor = resident.tensor
            entry = 0 if tensor.is_external else entries.copied(tensor.data_buffer_idx, tensor.nbytes)
            host = job.new_values.add(host_constant(tensor, entry))
            memory_id, offset = job.regions.region(resident.device, resident.nbytes)
            found.append(Reencoded(resident.method, resident.plan_index, resident.value, resident.name,
                                   resident.device, resident.nbytes, host, entry,
                                   tensor.fqn if tensor.is_external else None, memory_id, offset,
                                   0 if tensor.is_external else tensor.data_buffer_idx))
            job.collected.append(FirstCallCopy(host, resident.value, (host, resident.value, resident.value),
                                          resident.device))
        return found

    def payload(self, job: "MethodJob", removed: set[tuple[int, int]]
                ) -> tuple[EncodingPayload, set[tuple[int, int]]]:
        """The prologue that copies what ``place``, ``place_fold`` and ``convert`` gathered (``rewritten_prologue``)."""
        return rewritten_prologue(job, removed, job.collected)

    def converted(self, placements: Sequence["Placement"], reencoded: Sequence["Reencoded"]) -> int:
        return len(reencoded)

    def report_fields(self, methods: Sequence["MethodEdit"]) -> dict[str, object]:
        return {"first_call_copies": sum(edit.payload.copies for edit in methods if isinstance(edit.payload, Prologue))}

    # --- editing the method -----------------------------------------------------------------------------

    def held_tensor(self, tensor: m.Tensor, placement: "Placement") -> m.Tensor:
        return device_copy_tensor(tensor, placement.memory_id, placement.offset, placement.device)

    def folded_tensor(self, tensor: m.Tensor, fold: "FoldPlacement") -> m.Tensor:
        return device_copy_tensor(tensor, fold.memory_id, fold.offset, fold.device)

    def reencoded_tensor(self, tensor: m.Tensor, reencoded: "Reencoded") -> m.Tensor:
        """A device-initial-data constant made a first-call copy's destination: its initial data gone, its name
        kept."""
        info = tensor.extra_tensor_info or m.ExtraTensorInfo()
        r = reencoded
        return replace(device_copy_tensor(tensor, r.memory_id, r.offset, r.device),
                       extra_tensor_info=replace(info, mutable_data_segments_idx=0, device_type=r.device.type,
                                                 device_index=r.device.index, location=m.TensorDataLocation.SEGMENT,
                                                 fully_qualified_name=info.fully_qualified_name))

    def leading_instructions(self, edit: "MethodEdit", plan: m.ExecutionPlan) -> list[m.Instruction]:
        """The prologue (``first_call_prologue``): the guard's jump, the copies, the move that clears the guard."""
        written = written_prologue(edit)
        if written is None:
            return []
        op = plan.operator_index(H2D_COPY)
        assert op is not None, "the plan writes a prologue only with the copy kernel"
        guard, cleared_from = written.guard
        return [m.JumpFalseCall(guard, written.leading),
                *(m.KernelCall(op, copy.args) for copy in written.copied),
                m.MoveCall(cleared_from, guard)]

    def checker(self, verifier: Verifier) -> EncodingCheck:
        return FirstCallCheck(verifier)


# --- its shape ------------------------------------------------------------------------------------------------

# The instructions of a prologue around its copies: the guard's jump before them, the move that clears it after.
GUARD_INSTRUCTIONS = 2


@record
class FirstCallPrologue:
    """A recognised prologue of chain 0: a run-once region (``program/once.py``) of this encoding's shape."""

    guard: int  # the Bool value the jump tests: true until the first call clears it
    cleared_from: int  # the Bool(false) value the MoveCall copies into the guard
    end: int  # the jump's destination: chain 0's first instruction after the prologue
    copies: tuple[int, ...]  # chain 0 indices of its _h2d_copy.out kernels, in order


def first_call_prologue(plan: m.ExecutionPlan, region: Optional[OnceRegion] = None,
                        effects: Optional[MethodEffects] = None) -> Optional[FirstCallPrologue]:
    """The method's first-call prologue, or None.  Strict, so that "runs once, and what it copied stays" is
    certain whenever it answers: a run-once region (``region``, found when not given: the guard really clears,
    nothing enters it, what it writes stays) whose last instruction is the move that clears the guard and whose
    others are ``_h2d_copy.out`` kernels, one per destination, each of a host constant that nothing writes, no
    method input or output.  Linear in the method."""
    region = region if region is not None else once_region(plan)
    if region is None or region.move != region.end - 1 or region.end < GUARD_INSTRUCTIONS + 1:
        return None
    instructions = (plan.chains or ())[0].instructions or ()
    values, ops = plan.values or (), plan.operators or ()
    ends = set(plan.inputs or ()) | set(plan.outputs or ())
    sources: set[int] = set()
    destinations: set[int] = set()
    copies = tuple(range(1, region.end - 1))
    for k in copies:
        ins = instructions[k]
        if not isinstance(ins, m.KernelCall) or not 0 <= ins.op_index < len(ops) \
                or not is_h2d_copy(ops[ins.op_index].qualified_name):
            return None
        slots = copy_slots(ops[ins.op_index].qualified_name, ins.args or ())
        source = values[slots.source] if slots is not None and 0 <= slots.source < len(values) else None
        if slots is None or not isinstance(source, m.Tensor) or not source.is_constant or slots.out in destinations \
                or {slots.source, slots.out} & ends or slots.source == slots.out:
            return None  # not a host constant, two copies into one destination, a method input or output
        sources.add(slots.source)
        destinations.add(slots.out)
    if sources & (effects if effects is not None else MethodEffects(plan)).written_anywhere():
        return None
    return FirstCallPrologue(region.flag, region.cleared_from, region.end, copies)


def first_call_copies(plan: m.ExecutionPlan, prologue: Optional[FirstCallPrologue] = None
                      ) -> dict[int, tuple[int, int]]:
    """Destination value -> (source value, chain 0 instruction) of each copy the prologue makes."""
    prologue = prologue if prologue is not None else first_call_prologue(plan)
    return leading_copies(plan, prologue.end - 1) if prologue is not None else {}  # its copies, the move aside


def claimed_copies(plan: m.ExecutionPlan) -> dict[int, tuple[int, int]]:
    """Destination -> (source, instruction) of each copy of a constant that a chain 0 shaped like a prologue (a
    jump on a Bool first, a move into it last) puts before the jump's destination, whether or not the guard
    really clears: what the file claims to copy once.  Lenient where ``first_call_prologue`` is strict."""
    chains = plan.chains or ()
    instructions = (chains[0].instructions or ()) if chains else ()
    values = tuple(plan.values or ())
    if not instructions or not isinstance(instructions[0], m.JumpFalseCall):
        return {}
    guard, end = instructions[0].cond_value_index, min(instructions[0].destination_instruction, len(instructions))
    last = instructions[end - 1] if end >= 2 else None
    if not (0 <= guard < len(values) and isinstance(values[guard], m.Bool)) or not isinstance(last, m.MoveCall) \
            or last.move_to != guard:
        return {}
    return leading_copies(plan, end - 1)


# --- what it records in the plan --------------------------------------------------------------------------


@record
class FirstCallCopy:
    """One copy of the first-call prologue a rewrite writes (``first_call_prologue``): ``_h2d_copy.out`` of host
    constant ``src`` into ``dst``, device memory that holds it for the whole method."""

    src: int
    dst: int
    args: tuple[int, ...]  # the kernel's arguments, its return slot included
    device: m.Device


@record
class Prologue(EncodingPayload):
    """The first-call prologue a method's edit writes at the start of chain 0: its copies and its guard."""

    copied: tuple[FirstCallCopy, ...]
    guard: tuple[int, int]  # (guard, cleared_from): the prologue's Bool values

    @property
    def leading(self) -> int:
        return len(self.copied) + GUARD_INSTRUCTIONS

    @property
    def copies(self) -> int:
        return len(self.copied)

    def copies_phrase(self, count: int) -> str:
        return f"{plural(count, 'copy', 'copies')} in the first-call prologue (each run once, on the first call)"


def written_prologue(edit: "MethodEdit") -> Optional[Prologue]:
    """The prologue ``edit`` writes (None: none)."""
    return edit.payload if isinstance(edit.payload, Prologue) else None


# --- planning helpers ------------------------------------------------------------------------------------


def _first_copy(verdict: "ConstantVerdict") -> "DeviceCopy":
    """The copy whose destination keeps the constant: a first-call copy's, else the first."""
    once = [c for c in verdict.copies if c.once]
    return min(once or verdict.copies, key=lambda c: (c.chain, c.instruction))


def _copy_args(plan: m.ExecutionPlan, copy: "DeviceCopy") -> tuple[int, ...]:
    ins = ((plan.chains or ())[copy.chain].instructions or ())[copy.instruction]
    assert isinstance(ins, m.KernelCall), "a DeviceCopy is an _h2d_copy KernelCall"
    return tuple(ins.args or ())


def host_constant(tensor: m.Tensor, entry: int) -> m.Tensor:
    """A host constant of ``tensor``'s type and shape reading constant entry ``entry`` (0 and external: the .ptd
    entry of ``tensor``'s name)."""
    info = None
    if tensor.is_external:
        info = m.ExtraTensorInfo(fully_qualified_name=tensor.fqn, location=m.TensorDataLocation.EXTERNAL)
    return m.Tensor(scalar_type=tensor.scalar_type, sizes=tensor.sizes, dim_order=tensor.dim_order,
                    data_buffer_idx=tensor.data_buffer_idx if tensor.is_external else entry, extra_tensor_info=info)


def device_copy_tensor(tensor: m.Tensor, memory_id: int, offset: int, device: m.Device) -> m.Tensor:
    """The destination of a first-call copy: planned device memory at its resident place, without initial data
    (the prologue fills it), static, tagged with its device."""
    info = tensor.extra_tensor_info or m.ExtraTensorInfo()
    name = None if info.location == m.TensorDataLocation.EXTERNAL else info.fully_qualified_name
    return replace(
        tensor,
        data_buffer_idx=0,
        allocation_info=m.AllocationDetails(memory_id, offset),
        extra_tensor_info=replace(info, mutable_data_segments_idx=0, device_type=device.type,
                                  device_index=device.index, location=m.TensorDataLocation.SEGMENT,
                                  fully_qualified_name=name),
        storage_offset=0,
        shape_dynamism=m.TensorShapeDynamism.STATIC,
        requires_grad=False,
    )


def rewritten_prologue(job: "MethodJob", removed: set[tuple[int, int]], added: Sequence["FirstCallCopy"]
                       ) -> tuple[EncodingPayload, set[tuple[int, int]]]:
    """The first-call prologue a rewrite writes: (its ``Prologue``, or no payload; the input's prologue
    instructions that go).  The input's prologue stays as it is when nothing of it changes; otherwise it is written
    again with the copies it keeps first, then the ``added`` ones; a prologue left with no copy goes, guard and
    all."""

    plan = job.plan
    old = first_call_prologue(plan, job.method.once) if job.method.once is not None else None
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
            return NO_PAYLOAD, set()
    if not added and old is None:
        return NO_PAYLOAD, set()
    old_steps = {(0, 0), (0, old.end - 1), *((0, k) for k in old.copies)} if old is not None else set()
    copies = tuple(kept + list(added))
    if not copies:
        return NO_PAYLOAD, old_steps
    if old is not None:
        guard = (old.guard, old.cleared_from)
    else:
        guard = (job.new_values.add(m.Bool(True)), job.new_values.add(m.Bool(False)))
    return Prologue(copies, guard), old_steps


# --- the self-check --------------------------------------------------------------------------------------


def rewritten_input_steps(verifier: Verifier, written: Sequence["FirstCallCopy"]) -> set[tuple[int, int]]:
    """The instructions of the input's first-call prologue that the output replaces: its guard's jump and move, and
    each copy the output's prologue (``written``) makes again, when the whole prologue went (a conversion to another
    encoding writes none: its copies are then removed copies of moved constants, checked as such)."""
    old, edit = verifier.old, verifier.edit
    prologue = first_call_prologue(old)
    if prologue is None or edit is None:
        return set()
    instructions = (old.chains or ())[0].instructions or ()
    touched = {(0, 0), (0, prologue.end - 1), *((0, k) for k in prologue.copies)}
    removed = set(edit.removed)
    if touched & removed and not touched <= removed:
        raise verifier.fail("the input's first-call prologue is only partly removed")
    if not touched <= removed:
        return set()
    again = {(copy.src, copy.dst) for copy in written}
    steps = {(0, 0), (0, prologue.end - 1)}
    for k in prologue.copies:
        ins = instructions[k]
        assert isinstance(ins, m.KernelCall), "a recognised prologue holds copies only"
        slots = copy_slots(H2D_COPY, ins.args or ())
        if slots is not None and (slots.source, slots.out) in again:
            steps.add((0, k))
    return steps


class FirstCallCheck(EncodingCheck):
    """The self-check of the first-call encoding in one method, from the two programs (and the plan only for what
    it claims to have done):

    * **The prologue is what the runtime runs once.**  Chain 0 of the output starts with a prologue that
      ``first_call_prologue`` recognises (the guard clears, nothing enters it, host-constant sources, destinations
      nothing else writes or shares), of the plan's length, on the plan's guard: its copies run on the first call
      and never again.  The instructions are read from the output, not rebuilt with the writer's code.
    * **Each copy is accounted for** by exactly one change of the plan: a moved constant into its device copy, a
      folded value's host constant into the folded value, a re-encoded constant's host constant into it, or a
      copy of the input's own prologue written again unchanged.
    * **Each destination holds its constant for the whole method**: planned in a buffer on the copy's device, of
      the source's type, shape and dim order, with no initial data, written by no other instruction, no method
      input or output, and (``verify.py``'s ``overlap``) sharing bytes with no other value.
    * **Each new host constant holds the input's bytes**: a re-encoded constant's initial data, what the folded
      chain computes from the input (recomputed), or the same .ptd entry.
    """

    def __init__(self, verifier: Verifier) -> None:
        super().__init__(verifier)
        old, edit = verifier.old, verifier.edit
        self.old_prologue = first_call_prologue(old)
        self.reencoded: dict[int, "Reencoded"] = {r.value: r for r in edit.reencoded} if edit else {}
        written = written_prologue(edit) if edit else None
        self.written: tuple[FirstCallCopy, ...] = written.copied if written is not None else ()
        length = edit.leading_length if edit else 0
        self.copy_steps = frozenset((0, k) for k in range(1, length - 1)) if length else frozenset()
        self.new_values = dict(edit.new_values) if edit else {}
        self._rewritten = rewritten_input_steps(verifier, self.written)

    @property
    def own_steps(self) -> frozenset[tuple[int, int]]:
        return self.copy_steps

    @property
    def resident(self) -> dict[int, Any]:
        return dict(self.reencoded)

    def removed_in_input(self, chain: int, instruction: int) -> bool:
        """An instruction of the input's prologue that the output's prologue replaces (its guard, or a copy it
        makes again); a copy of a constant that moved is checked as any removed copy."""
        return (chain, instruction) in self._rewritten

    # --- the prologue's instructions --------------------------------------------------------------------

    def check_leading(self, written: Sequence[m.Instruction]) -> None:
        v, edit = self.verifier, self.verifier.edit
        planned = written_prologue(edit) if edit is not None else None
        if planned is None:
            super().check_leading(written)
            return
        found = first_call_prologue(v.new)
        if found is None or found.end != planned.leading or len(found.copies) != len(planned.copied):
            raise v.fail("chain 0 does not start with a first-call prologue the runtime runs once only, of the "
                         "plan's length (its guard never clears or is used elsewhere, a jump lands inside it, a "
                         "source is no host constant, or a destination is written or shared)")
        if (found.guard, found.cleared_from) != planned.guard:
            raise v.fail("the first-call prologue's guard is not the plan's")
        guard, cleared = found.guard, found.cleared_from
        if self.new_values.get(guard, self._value(guard)) != m.Bool(True) \
                or self.new_values.get(cleared, self._value(cleared)) != m.Bool(False):
            raise v.fail("the first-call prologue's guard is not a true Bool cleared from a false one")
        copies = []
        for k in found.copies:
            ins = written[k]
            assert isinstance(ins, m.KernelCall), "a recognised prologue holds copies only"
            copies.append(tuple(ins.args or ()))
        self._check_accounted(copies)
        self._check_destinations(copies)

    def _value(self, index: int) -> Optional[m.EValue]:
        values = self.verifier.new.values or ()
        return values[index] if 0 <= index < len(values) else None

    def _check_accounted(self, copies: list[tuple[int, ...]]) -> None:
        """Every copy written is one change of the plan, and every such change has exactly one copy."""
        v, edit = self.verifier, self.verifier.edit
        assert edit is not None
        expected: dict[tuple[int, int], str] = {}
        for p in edit.placements:
            if p.held_by is not None:
                expected[(p.value, p.holder)] = f"moved constant {p.value}"
        for f in edit.folds:
            if f.filled_from is not None:
                expected[(f.filled_from, f.value)] = f"folded value {f.value}"
        for r in edit.reencoded:
            expected[(r.source, r.value)] = f"re-encoded constant {r.value}"
        kept: set[tuple[int, ...]] = set()
        if self.old_prologue is not None:
            instructions = (v.old.chains or ())[0].instructions or ()
            for k in self.old_prologue.copies:
                ins = instructions[k]
                if (0, k) in self._rewritten and isinstance(ins, m.KernelCall):
                    kept.add(tuple(ins.args or ()))
        seen: set[tuple[int, int]] = set()
        for args in copies:
            slots = copy_slots(H2D_COPY, args)
            if slots is None:
                raise v.fail(f"a first-call copy has arguments {list(args)}")
            key = (slots.source, slots.out)
            if key in seen:
                raise v.fail(f"the first-call prologue copies value {key[0]} into value {key[1]} twice")
            seen.add(key)
            if key not in expected and args not in kept:
                raise v.fail(f"the first-call copy of value {key[0]} into value {key[1]} is neither a change "
                             "of the plan nor a copy of the input's prologue")
        missing = set(expected) - seen
        if missing:
            key = min(missing)
            raise v.fail(f"{expected[key]} has no first-call copy")

    def _check_destinations(self, copies: list[tuple[int, ...]]) -> None:
        """Each destination: device memory of the source's layout that no other instruction writes."""
        from ..fold import layout_of

        v = self.verifier
        values = v.new.values or ()
        devices = v.new.buffer_devices()
        effects = MethodEffects(v.new)
        writers: dict[int, int] = {}
        for step, written in zip(effects.steps, effects.writes):
            if (step.chain, step.instruction) not in self.copy_steps:
                for value in written:
                    writers.setdefault(value, step.instruction)
        ends = set(v.new.inputs or ()) | set(v.new.outputs or ())
        devices_of = {(copy.src, copy.dst): copy.device for copy in self.written}
        for args in copies:
            slots = copy_slots(H2D_COPY, args)
            assert slots is not None, "checked by _check_accounted"
            src, dst = values[slots.source], values[slots.out]
            device = devices_of.get((slots.source, slots.out))
            where = f"the first-call copy of value {slots.source} into value {slots.out}"
            if not isinstance(src, m.Tensor) or not src.is_constant:
                raise v.fail(f"{where}: its source is not a host constant")
            if not isinstance(dst, m.Tensor) or dst.allocation_info is None or dst.has_initial_data:
                raise v.fail(f"{where}: its destination is not planned memory without initial data")
            if layout_of(src) != layout_of(dst) or dst.storage_offset or \
                    dst.shape_dynamism != m.TensorShapeDynamism.STATIC:
                raise v.fail(f"{where}: source and destination differ in type, shape or dim order")
            if device is None or device.is_cpu or devices.get(dst.allocation_info.memory_id, m.CPU) != device \
                    or dst.device != device:
                raise v.fail(f"{where}: its destination is not in a buffer on {device}")
            if slots.out in writers:
                raise v.fail(f"{where}: instruction {writers[slots.out]} also writes the destination, which must "
                             "hold the constant for every call")
            if slots.out in ends or slots.source in ends:
                raise v.fail(f"{where}: a method input or output")

    # --- values -----------------------------------------------------------------------------------------

    def owns(self, index: int) -> bool:
        return index in self.reencoded

    def check_value(self, index: int, old: m.EValue, new: m.EValue) -> None:
        self._check_holder(index, old, new, self.reencoded[index])

    def check_placement(self, index: int, old: m.EValue, new: m.EValue, placement: "Placement") -> None:
        """A moved constant's first-call copy destination (a per-call copy's destination in the input)."""
        self._check_holder(index, old, new, placement)

    def _check_holder(self, index: int, old: m.EValue, new: m.EValue, found: Any) -> None:
        """A first-call copy's destination that existed in the input (a per-call copy's destination, or a constant
        re-encoded from device initial data): the same tensor at its resident place, no initial data."""
        from ..fold import layout_of

        v = self.verifier
        placed = self.reencoded.get(index)
        memory_id, offset = found.memory_id, found.offset  # its device: _check_destinations
        where = f"value {index} (the device copy of {found.name})"
        if not isinstance(old, m.Tensor) or not isinstance(new, m.Tensor) or layout_of(old) != layout_of(new):
            raise v.fail(f"{where} changed its type, shape or dim order")
        info = new.allocation_info
        if info is None or (info.memory_id, info.memory_offset) != (memory_id, offset):
            raise v.fail(f"{where} is not at buffer {memory_id} offset {offset}")
        sizes = v.new.non_const_buffer_sizes or ()
        if not is_aligned(offset) or memory_id >= len(sizes) or offset + new.nbytes > sizes[memory_id]:
            raise v.fail(f"{where}: its region is misaligned or outside buffer {memory_id}")
        if placed is not None and not old.has_initial_data:
            raise v.fail(f"{where} is re-encoded but had no initial data in the input")
        if placed is None and (old.is_constant or old.has_initial_data or old.allocation_info is None):
            raise v.fail(f"{where} was not planned memory a per-call copy filled")

    def check_new_values(self) -> None:
        """Each value the plan appends is written as planned; a re-encoded constant's host constant holds the
        input's initial data (or names the same .ptd entry)."""
        v = self.verifier
        values = v.new.values or ()
        for index, value in self.new_values.items():
            if values[index] != value:
                raise v.fail(f"new value {index} is not what the plan adds")
        context = v.context
        for r in self.reencoded.values():
            host = values[r.source]
            if r.source not in self.new_values or not isinstance(host, m.Tensor) or not host.is_constant:
                raise v.fail(f"re-encoded constant {r.value}: its host constant {r.source} is not a new constant")
            if r.external_key is not None:
                continue  # the same key: the destination's checks and the .ptd rule cover it
            old = (v.old.values or ())[r.value]
            assert isinstance(old, m.Tensor)
            lists = context.original.program.mutable_data_segments or ()
            if host.data_buffer_idx != r.entry or not lists or r.initial_data_index != old.data_buffer_idx:
                raise v.fail(f"re-encoded constant {r.value}: its host constant reads the wrong entry")
            segment = context.original.segment_span(lists[0].segment_index)
            offsets = lists[0].offsets or ()
            source = Span(segment.offset + offsets[old.data_buffer_idx], old.nbytes)
            context.require_same(f"method {v.new.name!r}: host constant {r.source} (initial data of re-encoded "
                                 f"constant {r.value})", source, context.written.tensor_span(host))

    def check_fold(self, index: int, new: m.Tensor, fold: "FoldPlacement", traced: "Traced", constant: m.Tensor
                   ) -> None:
        """The host constant a folded value is copied from: the constant itself (a device copy of a shared
        constant), or a new constant holding what the chain computes from the input."""
        from ..fold import layout_of, recipe_of
        from ..model.verify_bytes import ComputedBytes

        v = self.verifier
        where = f"folded value {fold.value}"
        source = fold.filled_from
        if source is None or new.has_initial_data:
            raise v.fail(f"{where} has initial data, or no host constant, although a first-call copy fills it")
        if not traced.steps:
            if source != traced.source:
                raise v.fail(f"{where} is a device copy of constant {traced.source} but is filled from {source}")
            return
        host = (v.new.values or ())[source]
        result = traced.steps[-1].tensor
        if source not in self.new_values or not isinstance(host, m.Tensor) or not host.is_constant \
                or host.is_external or layout_of(host) != layout_of(result):
            raise v.fail(f"{where}: its host constant {source} is not a new constant of its layout")
        span = v.context.written.tensor_span(host)
        if span is not None and span.size:
            recipe = recipe_of(constant, traced.steps, result)
            v.context.computed.append(ComputedBytes(
                f"method {v.new.name!r}: host constant {source} ({', '.join(s.describe() for s in traced.steps)} "
                f"of constant {traced.source})", span, v.recompute(recipe)))
