"""One method's edits as a pure function of the input method and its ``MethodEdit``.

``plan.py`` calls it to see the method the rewrite will write (to lay its device memory out by lifetimes),
``apply.py`` to write it; neither decides anything here.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Optional

from pte_devconst.program.executorch import H2D_COPY
from pte_devconst.schema import model as m

if TYPE_CHECKING:
    from .plan import FoldPlacement, MethodEdit, Placement, Reencoded


def relocated_tensor(value: m.EValue, memory_id: int, offset: Optional[int]) -> m.EValue:
    """A planned tensor at a new place (``offset`` None: unplanned; nothing uses it, so it needs no bytes)."""
    assert isinstance(value, m.Tensor)
    return replace(value, allocation_info=None if offset is None else m.AllocationDetails(memory_id, offset))


def _moved_tensor(tensor: m.Tensor, placement: "Placement") -> m.Tensor:
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


def _device_copy_tensor(tensor: m.Tensor, memory_id: int, offset: int, device: m.Device) -> m.Tensor:
    """The destination of a first-call copy (1.5): planned device memory at its resident place, without initial
    data (the prologue fills it), static, tagged with its device."""
    info = tensor.extra_tensor_info or m.ExtraTensorInfo()
    location = m.TensorDataLocation.SEGMENT
    name = None if info.location == m.TensorDataLocation.EXTERNAL else info.fully_qualified_name
    return replace(
        tensor,
        data_buffer_idx=0,
        allocation_info=m.AllocationDetails(memory_id, offset),
        extra_tensor_info=replace(info, mutable_data_segments_idx=0, device_type=device.type,
                                  device_index=device.index, location=location, fully_qualified_name=name),
        storage_offset=0,
        shape_dynamism=m.TensorShapeDynamism.STATIC,
        requires_grad=False,
    )


def _reencoded_tensor(tensor: m.Tensor, r: "Reencoded") -> m.Tensor:
    """A 1.6 constant made the destination of a first-call copy: its initial data gone, its name kept."""
    info = tensor.extra_tensor_info or m.ExtraTensorInfo()
    name = info.fully_qualified_name
    return replace(_device_copy_tensor(tensor, r.memory_id, r.offset, r.device),
                   extra_tensor_info=replace(info, mutable_data_segments_idx=0, device_type=r.device.type,
                                             device_index=r.device.index, location=m.TensorDataLocation.SEGMENT,
                                             fully_qualified_name=name))


def _folded_tensor(tensor: m.Tensor, fold: "FoldPlacement") -> m.Tensor:
    """A folded value (or a device copy of a shared constant) as planned device memory with initial data.

    ``tensor`` is the value being re-encoded (a device copy's destination, the chain's result) or, for a
    new value, the result it stands for.  Its bytes are the initial data at ``initial_data_index``; a copy
    of an external constant is loaded from the .ptd by the constant's key instead.
    """
    if fold.first_call_source is not None:
        return _device_copy_tensor(tensor, fold.memory_id, fold.offset, fold.device)
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


def _next_survivors(mapping: tuple[Optional[int], ...], new_length: int) -> list[int]:
    """For each old index (and one past the end), where a jump to it lands: the next instruction that survives."""
    landing = [new_length] * (len(mapping) + 1)
    for old in range(len(mapping) - 1, -1, -1):
        new = mapping[old]
        landing[old] = new if new is not None else landing[old + 1]
    return landing


def prologue_instructions(edit: "MethodEdit", h2d_op: int) -> list[m.Instruction]:
    """The first-call prologue ``edit`` writes at the start of chain 0 (``program/prologue.py``)."""
    if not edit.prologue:
        return []
    assert edit.guard is not None, "a prologue has its guard"
    guard, cleared_from = edit.guard
    return [m.JumpFalseCall(guard, edit.prologue_length),
            *(m.KernelCall(h2d_op, copy.args) for copy in edit.prologue),
            m.MoveCall(cleared_from, guard)]


def _edit_chain(chain: m.Chain, chain_index: int, edit: "MethodEdit", rewired: dict[tuple[int, int], dict[int, int]],
                prologue: list[m.Instruction]) -> m.Chain:
    mapping = edit.instruction_maps[chain_index]
    instructions = chain.instructions or ()
    new_length = len(prologue) + sum(1 for new in mapping if new is not None)
    landing = _next_survivors(mapping, new_length)
    out: list[m.Instruction] = list(prologue)
    for k, ins in enumerate(instructions):
        if mapping[k] is None:
            continue
        if isinstance(ins, m.DelegateCall) and (chain_index, k) in rewired:
            args = list(ins.args or ())
            for pos, value in rewired[(chain_index, k)].items():
                args[pos] = value
            ins = replace(ins, args=tuple(args))
        elif isinstance(ins, m.JumpFalseCall):
            # A jump to a removed instruction lands on the next instruction that survives.
            ins = replace(ins, destination_instruction=landing[min(ins.destination_instruction, len(mapping))])
        out.append(ins)
    stacktrace = chain.stacktrace
    if stacktrace is not None:
        kept = tuple(frames for k, frames in enumerate(stacktrace) if k >= len(mapping) or mapping[k] is not None)
        stacktrace = (m.FrameList(()),) * len(prologue) + kept
    return replace(chain, instructions=tuple(out) if chain.instructions is not None else None, stacktrace=stacktrace)


def _h2d_op(plan: m.ExecutionPlan) -> int:
    found = plan.operator_index(H2D_COPY)
    assert found is not None, "the plan writes a prologue only in methods with the copy kernel"
    return found


def edit_method(plan: m.ExecutionPlan, edit: "MethodEdit", constant_remap: Optional[dict[int, int]] = None
                ) -> m.ExecutionPlan:
    """``plan`` with one method's edits: moved and folded values, removed instructions, rewired delegate
    arguments, relocated planned values and the buffers' new sizes.  Pure: the plan uses it to lay out memory
    on the program the rewrite will write, ``apply`` to write it."""
    values = list(plan.values or ())
    moved = {p.value: p for p in edit.placements if not p.first_call}
    copied_once = {p.holder: p for p in edit.placements if p.first_call}
    reencoded = {r.value: r for r in edit.reencoded}
    folded = {f.value: f for f in edit.folds if not f.appended}
    released = set(edit.released)
    relocated = {index: (memory_id, offset) for index, memory_id, offset in edit.relocations}
    for index, value in enumerate(values):
        if index in copied_once or index in reencoded:
            assert isinstance(value, m.Tensor), f"value {index}: a first-call copy's destination is a tensor"
            if index in reencoded:
                values[index] = _reencoded_tensor(value, reencoded[index])
            else:
                p = copied_once[index]
                values[index] = _device_copy_tensor(value, p.memory_id, p.offset, p.device)
        elif index in moved or index in folded or index in released:
            assert isinstance(value, m.Tensor), f"value {index}: a plan moves, folds and releases tensors only"
            if index in moved:
                values[index] = _moved_tensor(value, moved[index])
            elif index in folded:
                values[index] = _folded_tensor(value, folded[index])
            else:
                values[index] = replace(value, data_buffer_idx=0)  # nothing reads it; its bytes left the file
        elif (constant_remap is not None and isinstance(value, m.Tensor) and value.is_constant
              and not value.is_external and value.data_buffer_idx in constant_remap):
            values[index] = replace(value, data_buffer_idx=constant_remap[value.data_buffer_idx])
    appended: dict[int, m.EValue] = {f.value: _folded_tensor(f.tensor, f) for f in edit.appended}
    appended.update(edit.new_values)
    assert sorted(appended) == list(range(len(values), len(values) + len(appended))), "new values are contiguous"
    values += [appended[index] for index in sorted(appended)]
    for index, (memory_id, offset) in relocated.items():
        values[index] = relocated_tensor(values[index], memory_id, offset)
    rewired: dict[tuple[int, int], dict[int, int]] = {}
    placements: tuple[Placement | FoldPlacement, ...] = (*edit.placements, *edit.folds)
    for placement in placements:
        for arg in placement.delegate_args:
            rewired.setdefault((arg.chain, arg.instruction), {})[arg.arg_pos] = placement.holder
    sizes = list(plan.non_const_buffer_sizes or (0,))
    devices = list(plan.non_const_buffer_device or ())
    for growth in edit.buffers:
        while len(sizes) <= growth.memory_id:
            sizes.append(0)
        sizes[growth.memory_id] = growth.new_size
        if growth.added and not growth.device.is_cpu:
            devices.append(m.NonConstBufferDevice(growth.memory_id, growth.device.type, growth.device.index))
    prologue = prologue_instructions(edit, _h2d_op(plan)) if edit.prologue else []
    chains = tuple(_edit_chain(chain, c, edit, rewired, prologue if c == 0 else [])
                   for c, chain in enumerate(plan.chains or ()))
    return replace(
        plan,
        values=tuple(values) if plan.values is not None else None,
        chains=chains if plan.chains is not None else None,
        non_const_buffer_sizes=tuple(sizes),
        non_const_buffer_device=tuple(devices) if devices else plan.non_const_buffer_device,
    )


