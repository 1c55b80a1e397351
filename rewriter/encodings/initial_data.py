"""The ExecuTorch 1.6 encoding: a moved constant is planned device memory whose bytes are its *initial data*.

What ExecuTorch 1.6's ``skip_h2d_for_constants`` writes at export time (``docs/file-format.md``): the constant's
tensor gets a region of a buffer on its device for the whole method, ``data_buffer_idx`` names an entry of the
mutable data segment (one per distinct constant entry, however many values or methods move it; an external
constant keeps its ``.ptd`` key), and the loader copies the bytes there once, at load.  Its per-call copies go.
A 1.5 loader writes those bytes straight into the device pointer, so only 1.6 and newer load such a file.

It converts a first-call file (``first_call.py``) by treating each constant a prologue copies as any eligible
constant: the copy goes, and with it the prologue's guard.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Optional, Sequence

from pte_devconst.program.moves import AT_LOAD, MovedValue, loaded_values
from pte_devconst.program.regions import memory_device, value_nbytes
from pte_devconst.program.runtime import Runtime
from pte_devconst.schema import model as m

from ..model.plan_model import (EncodingPayload, FoldPlacement, InitialData, MethodJob, Placement, Reencoded, Storage,
                          dropped_constants, existing_mutable_entries)
from .base import Encoding, EncodingCheck, NeededTensor, Verifier

if TYPE_CHECKING:
    from ..model.analysis import ConstantVerdict
    from ..fold import FoldChain, Traced

# How a value it keeps reaches its device, in the reports' words (validate's rows name it so).
LOADED = replace(AT_LOAD, kept="device initial data")


class InitialDataEncoding(Encoding):
    """Device memory with initial data, copied at load (module docstring)."""

    key = "initial-data"
    runtime = Runtime(1, 6)
    name = "device initial data"
    when = "at load"
    described = "device memory with initial data, copied at load (what 1.6's skip_h2d_for_constants writes)"

    def needs(self, program: m.Program, labels: Sequence[str]) -> list[NeededTensor]:
        """Device initial data: a 1.5 loader writes host bytes straight into the device pointer
        (``load_mutable_subsegment_into``), which is undefined for device memory; 1.6 copies them with the
        device's allocator."""
        found: list[NeededTensor] = []
        for plan, label in zip(program.execution_plan or (), labels):
            found.extend(device_initial_data(plan, label))
        return found

    def moved(self, before: m.ExecutionPlan, after: m.ExecutionPlan, *, devices_only: bool = True
              ) -> list[MovedValue]:
        return loaded_values(before, after, devices_only=devices_only, arrival=LOADED)

    # --- planning -----------------------------------------------------------------------------------------

    def storage(self, program: m.Program, chosen: Sequence["ConstantVerdict"], chains: Sequence["FoldChain"],
                unread: set[tuple[int, int]], shared_constants: bool) -> "Storage":
        """One initial-data entry per distinct constant entry the moved values read (however many values or
        methods move it), then one per distinct fold recipe (equal recipes give equal bytes); the constant
        entries only moved values read leave the file (unless another table shares the constant segment)."""

        next_index = existing_mutable_entries(program)
        entry_of_source: dict[int, int] = {}
        entry_size: dict[int, int] = {}
        for tensor in [v.tensor for v in chosen] + [chain.source_tensor for chain in chains if chain.duplicate]:
            if tensor.is_external:
                continue
            source = tensor.data_buffer_idx
            if source not in entry_of_source:
                entry_of_source[source] = next_index
                next_index += 1
            entry_size[source] = max(entry_size.get(source, 0), tensor.nbytes)
        entry_of_recipe = {}
        for chain in chains:
            if not chain.duplicate and chain.recipe not in entry_of_recipe:
                entry_of_recipe[chain.recipe] = next_index
                next_index += 1
        initial_data = tuple(InitialData(index, source, entry_size[source])
                             for source, index in entry_of_source.items()) \
            + tuple(InitialData(index, 0, recipe.nbytes, recipe) for recipe, index in entry_of_recipe.items())
        dropped = () if shared_constants else dropped_constants(program, list(chosen), unread)
        return Storage(dropped, initial_data, entry_of_source, entry_of_recipe)

    def place(self, job: "MethodJob", verdict: "ConstantVerdict", memory_id: int, offset: int) -> "Placement":

        tensor = verdict.tensor
        assert verdict.device is not None, "a moved constant names its device"
        return Placement(
            method=verdict.method, value=verdict.value, name=verdict.name, device=verdict.device,
            nbytes=verdict.nbytes, memory_id=memory_id, offset=offset,
            initial_data_index=0 if tensor.is_external else job.storage.entry_of_source[tensor.data_buffer_idx],
            source_index=tensor.data_buffer_idx, external_key=tensor.fqn if tensor.is_external else None,
            copies=verdict.copies, delegate_args=verdict.delegate_args, copies_per_call=verdict.copies_per_call,
            plan_index=job.method.plan_index)

    def place_fold(self, job: "MethodJob", chain: "FoldChain", target: int, memory_id: int, offset: int,
                   removed: tuple[tuple[int, int], ...]) -> "FoldPlacement":

        source = chain.source_tensor
        external = chain.duplicate and source.is_external
        if external:
            index = 0
        elif chain.duplicate:
            index = job.storage.entry_of_source[source.data_buffer_idx]
        else:
            index = job.storage.entry_of_recipe[chain.recipe]
        return FoldPlacement(method=chain.method, plan_index=job.method.plan_index, value=target,
                             appended=target >= len(job.plan.values or ()), chain=chain, memory_id=memory_id,
                             offset=offset, initial_data_index=index,
                             external_key=source.fqn if external else None, removed=removed)

    def payload(self, job: "MethodJob", removed: set[tuple[int, int]]
                ) -> tuple[EncodingPayload, set[tuple[int, int]]]:
        """No prologue of its own; an input's first-call prologue whose copies all went (their constants moved
        here) goes with its guard (``first_call.rewritten_prologue``)."""
        from .first_call import rewritten_prologue

        return rewritten_prologue(job, removed, [])

    def converted(self, placements: Sequence["Placement"], reencoded: Sequence["Reencoded"]) -> int:
        """The constants a first-call prologue copied once that now are device initial data."""
        return sum(1 for p in placements if p.copies and all(copy.once for copy in p.copies))

    # --- editing the method -----------------------------------------------------------------------------

    def held_tensor(self, tensor: m.Tensor, placement: "Placement") -> m.Tensor:
        """The constant itself becomes planned device memory reading its initial-data entry (an external one
        keeps its key: the loader fills it from the .ptd)."""
        info = tensor.extra_tensor_info or m.ExtraTensorInfo()
        return replace(
            tensor,
            data_buffer_idx=tensor.data_buffer_idx if placement.external_key else placement.initial_data_index,
            allocation_info=m.AllocationDetails(placement.memory_id, placement.offset),
            extra_tensor_info=replace(info, mutable_data_segments_idx=0, device_type=placement.device.type,
                                      device_index=placement.device.index),
            storage_offset=0,
            shape_dynamism=m.TensorShapeDynamism.STATIC,
        )

    def folded_tensor(self, tensor: m.Tensor, fold: "FoldPlacement") -> m.Tensor:
        """A folded value (or a device copy of a shared constant) as planned device memory with initial data:
        ``tensor`` is the value re-encoded (a device copy's destination, the chain's result) or, for a new value,
        the result it stands for; a copy of an external constant is loaded from the .ptd by the constant's key."""
        info = tensor.extra_tensor_info or m.ExtraTensorInfo()
        name: Optional[str]
        if fold.external_key is not None:
            location, name = m.TensorDataLocation.EXTERNAL, fold.external_key
        else:
            location = m.TensorDataLocation.SEGMENT
            name = None if info.location == m.TensorDataLocation.EXTERNAL else info.fully_qualified_name
        return replace(
            tensor,
            data_buffer_idx=fold.initial_data_index,
            allocation_info=m.AllocationDetails(fold.memory_id, fold.offset),
            extra_tensor_info=replace(info, mutable_data_segments_idx=0, device_type=fold.device.type,
                                      device_index=fold.device.index, location=location, fully_qualified_name=name),
            storage_offset=0,
            shape_dynamism=m.TensorShapeDynamism.STATIC,
            requires_grad=False,
        )

    # --- the self-check -----------------------------------------------------------------------------------

    def checker(self, verifier: Verifier) -> EncodingCheck:
        return InitialDataCheck(verifier)


def device_initial_data(plan: m.ExecutionPlan, label: str) -> list[NeededTensor]:
    """The tensors of one method that the loader fills at load in device memory (the buffer's device counts:
    that is where the loader's pointer points, whatever the tensor's own tag says)."""
    devices = plan.buffer_devices()
    found = []
    for index, value in enumerate(plan.values or ()):
        if not isinstance(value, m.Tensor) or not value.has_initial_data:
            continue
        device = memory_device(value, devices)  # planned (has_initial_data): its buffer's device
        if not device.is_cpu:
            found.append(NeededTensor(label, index, device, value_nbytes(value), value.is_external))
    return found


def _kept(tensor: m.Tensor) -> tuple[object, ...]:
    """The fields a moved constant keeps."""
    return (tensor.scalar_type, tensor.sizes, tensor.dim_order, tensor.requires_grad, tensor.layout)


class InitialDataCheck(EncodingCheck):
    """The self-check of the 1.6 encoding in one method: each moved constant is the input's constant, now planned
    device memory at its region reading initial data that holds the constant's bytes (or its .ptd key); each
    folded value reads initial data that holds what its chain computes from the input.  A conversion from
    first-call copies removes the input's prologue whole: its copies are removed copies of moved constants, its
    guard's jump and move go with them."""

    def __init__(self, verifier: Verifier) -> None:
        from .first_call import rewritten_input_steps

        super().__init__(verifier)
        self._guard = rewritten_input_steps(verifier, ())

    def removed_in_input(self, chain: int, instruction: int) -> bool:
        return (chain, instruction) in self._guard

    def check_placement(self, index: int, old: m.EValue, new: m.EValue, placement: "Placement") -> None:
        v, p = self.verifier, placement
        where = f"moved value {index} ({p.name})"
        if not isinstance(old, m.Tensor) or not old.is_constant:
            raise v.fail(f"{where} was not a constant of this method in the input")
        if not isinstance(new, m.Tensor) or new.allocation_info is None:
            raise v.fail(f"{where} is not planned memory")
        if _kept(old) != _kept(new) or new.storage_offset != 0 or new.shape_dynamism != m.TensorShapeDynamism.STATIC:
            raise v.fail(f"{where} changed its type, shape or layout")
        if p.nbytes != old.nbytes:
            raise v.fail(f"{where} is not at buffer {p.memory_id} offset {p.offset}")
        v.check_region(where, new, p.memory_id, p.offset, p.device, old.nbytes)
        info, before = new.extra_tensor_info, old.extra_tensor_info or m.ExtraTensorInfo()
        if info is None or info.mutable_data_segments_idx != 0 or \
                (info.location, info.fully_qualified_name) != (before.location, before.fully_qualified_name):
            raise v.fail(f"{where} lacks its initial-data, location or name fields")
        if old.is_external:
            if new.data_buffer_idx != old.data_buffer_idx or new.fqn != p.external_key:
                raise v.fail(f"{where} lost its external key")
            v.check_external(where, new)
            return
        if new.data_buffer_idx != p.initial_data_index or new.data_buffer_idx == 0 and old.nbytes:
            raise v.fail(f"{where} does not point at its initial data")
        original, written = v.context.original, v.context.written
        source = original.tensor_span(old)
        if source is None:  # the deprecated inline constant_buffer: small by nature
            if bytes(original.tensor_bytes(old) or b"") != bytes(written.tensor_bytes(new) or b""):
                raise v.fail(f"{where}: its initial data differs from the input's constant")
            return
        v.context.require_same(f"{v.label}: {where} (initial data from constant entry {old.data_buffer_idx})",
                               source, written.tensor_span(new))

    def check_fold(self, index: int, new: m.Tensor, fold: "FoldPlacement", traced: "Traced", constant: m.Tensor
                   ) -> None:
        from ..fold import recipe_of
        from ..model.verify_bytes import ComputedBytes

        v = self.verifier
        where = f"folded value {index}"
        info = new.extra_tensor_info
        if info is None or info.mutable_data_segments_idx != 0:
            raise v.fail(f"{where} lacks its initial-data fields")
        if fold.external_key is not None:  # a device copy of an external constant: loaded by the constant's key
            if traced.steps or not constant.is_external or new.fqn != constant.fqn or fold.external_key != constant.fqn:
                raise v.fail(f"{where} is external but is not a copy of the external constant it stands for")
            v.check_external(where, new)
            return
        if new.is_external or new.data_buffer_idx != fold.initial_data_index or not new.data_buffer_idx and new.nbytes:
            raise v.fail(f"{where} does not point at its initial data")
        original, written = v.context.original, v.context.written
        if not traced.steps:  # a device copy of a shared constant: its bytes
            source = original.tensor_span(constant)
            if source is None:
                if bytes(original.tensor_bytes(constant) or b"") != bytes(written.tensor_bytes(new) or b""):
                    raise v.fail(f"{where}: its initial data differs from constant {traced.source}")
                return
            v.context.require_same(f"{v.label}: {where} (a device copy of constant {traced.source})",
                                   source, written.tensor_span(new))
            return
        span = written.tensor_span(new)
        if span is not None and span.size:
            recipe = recipe_of(constant, traced.steps, new)
            v.context.computed.append(ComputedBytes(
                f"{v.label}: {where} ({', '.join(s.describe() for s in traced.steps)} of constant "
                f"{traced.source})", span, v.recompute(recipe)))
