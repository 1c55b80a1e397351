"""A toy encoding for an imagined ExecuTorch 1.7, with a mechanism of its own: the *clear-first* run-once region.

It derives from ``base.Encoding`` alone and reuses no other encoding's code: what it writes and reads is said here,
on top of what program/ states of the runtime's semantics (``program/once.py``, ``program/moves.py``).  A moved
constant stays a host constant; the destination D of its first device copy holds it for the whole method, filled
by a copy that chain 0's leading region makes once::

    [0]         JumpFalseCall(cond = T, destination = P)   T: a new Bool(true)
    [1]         MoveCall(move_from = F, move_to = T)      F: a new Bool(false): the flag clears *first*
    [2 .. P-1]  et_copy::_h2d_copy.out(C_i, D_i, D_i)
    [P ..]      the method's own instructions

Every per-call copy of C goes; delegates read D.  Folds are refused (``fold_refusal``); it converts nothing.  Only
the registry knows it exists (tests/test_encodings.py registers it); nothing else in the package names it.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Optional, Sequence

from pte_devconst.program.effects import MethodEffects
from pte_devconst.program.executorch import H2D_COPY
from pte_devconst.program.kernel_effects import copy_slots
from pte_devconst.program.moves import COPIED_ONCE, MovedValue, copied_values
from pte_devconst.program.once import copies_made_once, once_region
from pte_devconst.program.regions import memory_device, value_nbytes
from pte_devconst.program.runtime import Runtime
from pte_devconst.rewriter.encodings.base import Encoding, EncodingCheck, NeededTensor, Verifier
from pte_devconst.rewriter.model.analysis import ConstantVerdict
from pte_devconst.rewriter.model.plan_model import (NO_PAYLOAD, EncodingPayload, MethodEdit, MethodJob, Placement,
                                                    Storage, dropped_constants)
from pte_devconst.schema import model as m
from pte_devconst.util.record import record

MOVE_AT = 1  # the region's MoveCall comes first: what tells the toy's region from any other
TOY_COPIED = replace(COPIED_ONCE, copy="toy copy")  # how its values arrive, in its own words


@record
class ToyCopy:
    src: int
    dst: int
    device: m.Device


@record
class ToyRegion(EncodingPayload):
    """The region a method's edit writes: its copies, and its two Bools (flag, the false it clears from)."""

    copied: tuple[ToyCopy, ...]
    flag: tuple[int, int]

    @property
    def leading(self) -> int:
        return MOVE_AT + 1 + len(self.copied)

    @property
    def copies(self) -> int:
        return len(self.copied)

    def copies_phrase(self, count: int) -> str:
        return f"{count} toy copies behind a flag cleared first"


def toy_copies(plan: m.ExecutionPlan) -> dict[int, tuple[int, int]]:
    """Destination -> (source, instruction) of the copies of a clear-first region (a run-once region whose move
    comes first and the rest are copies of host constants)."""
    region = once_region(plan)
    if region is None or region.move != MOVE_AT:
        return {}
    found = copies_made_once(plan, region)
    return found if len(found) == region.end - MOVE_AT - 1 else {}


class ToyEncoding(Encoding):
    """Host constants copied once by a clear-first region (module docstring); constants of fewer than 64 bytes
    stay where they are."""

    key = "toy"
    runtime = Runtime(1, 7)
    name = "clear-first copies"
    when = "on the first call"
    TOO_SMALL = "toy: fewer than 64 bytes stay on the host"
    NO_FOLDS = "toy: folded values are not kept on a device"

    def needs(self, program: m.Program, labels: Sequence[str]) -> list[NeededTensor]:
        found = []
        for plan, label in zip(program.execution_plan or (), labels):
            values, devices = plan.values or (), plan.buffer_devices()
            for dst in sorted(toy_copies(plan)):
                found.append(NeededTensor(label, dst, memory_device(values[dst], devices), value_nbytes(values[dst]),
                                          False))
        return found

    def held(self, plan: m.ExecutionPlan) -> frozenset[int]:
        return frozenset(toy_copies(plan))

    def moved(self, before: m.ExecutionPlan, after: m.ExecutionPlan, *, devices_only: bool = True
              ) -> list[MovedValue]:
        return copied_values(before, after, toy_copies(before), toy_copies(after), devices_only=devices_only,
                             arrival=TOY_COPIED)

    def admit(self, verdict: ConstantVerdict) -> Optional[str]:
        if verdict.copied_once:
            return ""
        if not verdict.copies:
            return "toy: no copy kernel to copy it once with"
        return self.TOO_SMALL if verdict.nbytes < 64 else None

    def fold_refusal(self, plan: m.ExecutionPlan) -> Optional[str]:
        return self.NO_FOLDS

    def storage(self, program: m.Program, chosen: Sequence[ConstantVerdict], chains: Sequence[Any],
                unread: set[tuple[int, int]], shared_constants: bool) -> Storage:
        return Storage(() if shared_constants else dropped_constants(program, [], unread))

    def place(self, job: MethodJob, verdict: ConstantVerdict, memory_id: int, offset: int) -> Placement:
        assert verdict.device is not None
        dst = min(verdict.copies, key=lambda c: (c.chain, c.instruction)).dst
        job.collected.append(ToyCopy(verdict.value, dst, verdict.device))
        return Placement(method=verdict.method, value=verdict.value, name=verdict.name, device=verdict.device,
                         nbytes=verdict.nbytes, memory_id=memory_id, offset=offset, initial_data_index=0,
                         source_index=verdict.tensor.data_buffer_idx, external_key=None, copies=verdict.copies,
                         delegate_args=verdict.delegate_args, copies_per_call=verdict.copies_per_call,
                         plan_index=job.method.plan_index, held_by=dst)

    def place_fold(self, *args: Any) -> Any:
        raise AssertionError("the toy refuses folds")

    def payload(self, job: MethodJob, removed: set[tuple[int, int]]) -> tuple[EncodingPayload, set[tuple[int, int]]]:
        if not job.collected:
            return NO_PAYLOAD, set()
        flag = (job.new_values.add(m.Bool(True)), job.new_values.add(m.Bool(False)))
        return ToyRegion(tuple(job.collected), flag), set()

    def held_tensor(self, tensor: m.Tensor, placement: Placement) -> m.Tensor:
        """The destination, planned at its own region of a buffer on its device, static, no initial data."""
        info = replace(tensor.extra_tensor_info or m.ExtraTensorInfo(), device_type=placement.device.type,
                       device_index=placement.device.index)
        return replace(tensor, allocation_info=m.AllocationDetails(placement.memory_id, placement.offset),
                       extra_tensor_info=info, storage_offset=0, shape_dynamism=m.TensorShapeDynamism.STATIC)

    def leading_instructions(self, edit: MethodEdit, plan: m.ExecutionPlan) -> list[m.Instruction]:
        region = edit.payload
        if not isinstance(region, ToyRegion):
            return []
        op = plan.operator_index(H2D_COPY)
        assert op is not None, "the toy copies with the method's own copy kernel"
        flag, cleared = region.flag
        return [m.JumpFalseCall(flag, region.leading), m.MoveCall(cleared, flag),
                *(m.KernelCall(op, (c.src, c.dst, c.dst)) for c in region.copied)]

    def checker(self, verifier: Verifier) -> EncodingCheck:
        return ToyCheck(verifier)


class ToyCheck(EncodingCheck):
    """The toy's self-check, from the output: chain 0 starts with a clear-first run-once region of the plan's
    length and flag (``program/once.py`` proves it runs once and what it writes stays), whose copies are exactly the
    plan's, each of a host constant into planned device memory without initial data of the same layout."""

    def __init__(self, verifier: Verifier) -> None:
        super().__init__(verifier)
        edit = verifier.edit
        self.region = edit.payload if edit is not None and isinstance(edit.payload, ToyRegion) else None

    @property
    def own_steps(self) -> frozenset[tuple[int, int]]:
        return frozenset((0, k) for k in range(MOVE_AT + 1, self.leading)) if self.region else frozenset()

    def check_leading(self, written: Sequence[m.Instruction]) -> None:
        v, planned = self.verifier, self.region
        if planned is None:
            super().check_leading(written)
            return
        found = once_region(v.new, lambda: MethodEffects(v.new))
        if found is None or found.move != MOVE_AT or found.end != planned.leading \
                or (found.flag, found.cleared_from) != planned.flag:
            raise v.fail("chain 0 does not start with the plan's clear-first region, run once")
        values = v.new.values or ()
        copies = set()
        for ins in written[MOVE_AT + 1:]:
            slots = copy_slots(H2D_COPY, ins.args or ()) if isinstance(ins, m.KernelCall) else None
            if slots is None:
                raise v.fail("the toy's region holds something other than copies")
            src, dst = values[slots.source], values[slots.out]
            if not isinstance(src, m.Tensor) or not src.is_constant or not isinstance(dst, m.Tensor) \
                    or dst.allocation_info is None or dst.has_initial_data or (src.scalar_type, src.sizes) != \
                    (dst.scalar_type, dst.sizes):
                raise v.fail(f"the toy copies value {slots.source} into value {slots.out}, not a host constant into "
                             "planned memory of its layout")
            copies.add((slots.source, slots.out))
        if copies != {(c.src, c.dst) for c in planned.copied}:
            raise v.fail("the toy's copies are not the plan's")

    def check_new_values(self) -> None:
        v = self.verifier
        for index, value in (v.edit.new_values if v.edit is not None else ()):
            if (v.new.values or ())[index] != value:
                raise v.fail(f"new value {index} is not what the plan adds")

    def check_placement(self, index: int, old: m.EValue, new: m.EValue, placement: Placement) -> None:
        v, p = self.verifier, placement
        where = f"value {index} (the toy's copy of {p.name})"
        if not isinstance(old, m.Tensor) or not isinstance(new, m.Tensor) or old.allocation_info is None \
                or old.is_constant or old.has_initial_data or new.has_initial_data \
                or (old.scalar_type, old.sizes, old.dim_order) != (new.scalar_type, new.sizes, new.dim_order):
            raise v.fail(f"{where} is not the input's per-call copy destination, kept without initial data")
        v.check_region(where, new, p.memory_id, p.offset, p.device, new.nbytes)
