"""One method's edits as a pure function of the input method and its ``MethodEdit``.

``plan.py`` calls it to see the method the rewrite will write (to lay its device memory out by lifetimes),
``apply.py`` to write it; neither decides anything here.  What a moved, folded or re-encoded value becomes, and
what chain 0 starts with, is the encoding's (``rewriter/encodings``: the one that filled in the edit).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Optional

from pte_devconst.schema import model as m

from .encodings import Encoding, encoding_for

if TYPE_CHECKING:
    from .model.plan_model import FoldPlacement, MethodEdit, Placement


def relocated_tensor(value: m.EValue, memory_id: int, offset: Optional[int]) -> m.EValue:
    """A planned tensor at a new place (``offset`` None: unplanned; nothing uses it, so it needs no bytes)."""
    assert isinstance(value, m.Tensor)
    return replace(value, allocation_info=None if offset is None else m.AllocationDetails(memory_id, offset))


def views_on_holders(edit: "MethodEdit") -> list[tuple[int, int]]:
    """(view, holder) for every static view of a removed copy's destination that follows its constant to the value
    that holds it on its device (``method_context.DeviceCopy.views``): the same in every encoding, whose holder is
    planned memory."""
    return [(view, placement.holder) for placement in edit.placements for copy in placement.copies
            for view in copy.views]


def on_holder(view: m.EValue, holder: m.EValue) -> m.EValue:
    """A static view pointed at the bytes of the value that holds its constant (where they start)."""
    assert isinstance(view, m.Tensor) and isinstance(holder, m.Tensor)
    return replace(view, allocation_info=holder.allocation_info)


def _next_survivors(mapping: tuple[Optional[int], ...], new_length: int) -> list[int]:
    """For each old index (and one past the end), where a jump to it lands: the next instruction that survives."""
    landing = [new_length] * (len(mapping) + 1)
    for old in range(len(mapping) - 1, -1, -1):
        new = mapping[old]
        landing[old] = new if new is not None else landing[old + 1]
    return landing


def _edit_chain(chain: m.Chain, chain_index: int, edit: "MethodEdit", rewired: dict[tuple[int, int], dict[int, int]],
                leading: list[m.Instruction]) -> m.Chain:
    mapping = edit.instruction_maps[chain_index]
    instructions = chain.instructions or ()
    new_length = len(leading) + sum(1 for new in mapping if new is not None)
    landing = _next_survivors(mapping, new_length)
    out: list[m.Instruction] = list(leading)
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
        stacktrace = (m.FrameList(()),) * len(leading) + kept
    return replace(chain, instructions=tuple(out) if chain.instructions is not None else None, stacktrace=stacktrace)


def edit_method(plan: m.ExecutionPlan, edit: "MethodEdit", constant_remap: Optional[dict[int, int]] = None,
                encoding: Optional[Encoding] = None) -> m.ExecutionPlan:
    """``plan`` with one method's edits: moved and folded values, removed instructions, rewired delegate
    arguments, relocated planned values and the buffers' new sizes.  Pure: the plan uses it to lay out memory
    on the program the rewrite will write, ``apply`` to write it.  ``encoding`` is the one that filled in the
    edit (the plan's ``options.encoding``; None: the default's)."""
    if encoding is None:
        encoding = encoding_for()
    values = list(plan.values or ())
    held = {p.holder: p for p in edit.placements}
    reencoded = {r.value: r for r in edit.reencoded}
    folded = {f.value: f for f in edit.folds if not f.appended}
    released = set(edit.released)
    relocated = {index: (memory_id, offset) for index, memory_id, offset in edit.relocations}
    for index, value in enumerate(values):
        if index in held or index in reencoded or index in folded or index in released:
            assert isinstance(value, m.Tensor), f"value {index}: a plan moves, folds and releases tensors only"
            if index in held:
                values[index] = encoding.held_tensor(value, held[index])
            elif index in reencoded:
                values[index] = encoding.reencoded_tensor(value, reencoded[index])
            elif index in folded:
                values[index] = encoding.folded_tensor(value, folded[index])
            else:
                values[index] = replace(value, data_buffer_idx=0)  # nothing reads it; its bytes left the file
        elif (constant_remap is not None and isinstance(value, m.Tensor) and value.is_constant
              and not value.is_external and value.data_buffer_idx in constant_remap):
            values[index] = replace(value, data_buffer_idx=constant_remap[value.data_buffer_idx])
    appended: dict[int, m.EValue] = {f.value: encoding.folded_tensor(f.tensor, f) for f in edit.appended}
    appended.update(edit.new_values)
    assert sorted(appended) == list(range(len(values), len(values) + len(appended))), "new values are contiguous"
    values += [appended[index] for index in sorted(appended)]
    for index, (memory_id, offset) in relocated.items():
        values[index] = relocated_tensor(values[index], memory_id, offset)
    for view, holder in views_on_holders(edit):  # last: where the holder ends up, relaid or not
        values[view] = on_holder(values[view], values[holder])
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
    leading = encoding.leading_instructions(edit, plan)
    chains = tuple(_edit_chain(chain, c, edit, rewired, leading if c == 0 else [])
                   for c, chain in enumerate(plan.chains or ()))
    return replace(
        plan,
        values=tuple(values) if plan.values is not None else None,
        chains=chains if plan.chains is not None else None,
        non_const_buffer_sizes=tuple(sizes),
        non_const_buffer_device=tuple(devices) if devices else plan.non_const_buffer_device,
    )

