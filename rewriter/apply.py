"""Carry out a ``RewritePlan``: the new Program and the contents of its segments.

No decisions here: every placement, removal and offset comes from the plan.
Segments that do not change are passed on as ranges of the input file, so
the writer streams them without reading them into Python; only the constant
segment (when entries are dropped) and the mutable data segment (new initial
data) are re-laid out, again as file ranges.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Optional

from pte_devconst.schema import model as m
from pte_devconst.schema.header import TENSOR_ALIGNMENT, align_up
from pte_devconst.schema.pte_file import PteFile
from pte_devconst.schema.pte_writer import SegmentContent, unchanged_segments
from pte_devconst.schema.span import Span

from .plan import MethodEdit, Placement, RewritePlan


def _moved_tensor(tensor: m.Tensor, placement: Placement) -> m.Tensor:
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


def _next_survivors(mapping: tuple[Optional[int], ...], new_length: int) -> list[int]:
    """For each old index (and one past the end), where a jump to it lands: the next instruction that survives."""
    landing = [new_length] * (len(mapping) + 1)
    for old in range(len(mapping) - 1, -1, -1):
        new = mapping[old]
        landing[old] = new if new is not None else landing[old + 1]
    return landing


def _edit_chain(chain: m.Chain, chain_index: int, edit: MethodEdit, rewired: dict[tuple[int, int], dict[int, int]]
                ) -> m.Chain:
    mapping = edit.instruction_maps[chain_index]
    instructions = chain.instructions or ()
    new_length = sum(1 for new in mapping if new is not None)
    landing = _next_survivors(mapping, new_length)
    out: list[m.Instruction] = []
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
        stacktrace = tuple(frames for k, frames in enumerate(stacktrace) if k >= len(mapping) or mapping[k] is not None)
    return replace(chain, instructions=tuple(out) if chain.instructions is not None else None, stacktrace=stacktrace)


def _edit_plan(plan: m.ExecutionPlan, edit: MethodEdit, constant_remap: Optional[dict[int, int]]) -> m.ExecutionPlan:
    values = list(plan.values or ())
    moved = {p.value: p for p in edit.placements}
    for index, value in enumerate(values):
        if index in moved:
            values[index] = _moved_tensor(value, moved[index])
        elif (constant_remap is not None and isinstance(value, m.Tensor) and value.is_constant
              and not value.is_external and value.data_buffer_idx in constant_remap):
            values[index] = replace(value, data_buffer_idx=constant_remap[value.data_buffer_idx])
    rewired: dict[tuple[int, int], dict[int, int]] = {}
    for placement in edit.placements:
        for arg in placement.delegate_args:
            rewired.setdefault((arg.chain, arg.instruction), {})[arg.arg_pos] = placement.value
    sizes = list(plan.non_const_buffer_sizes or (0,))
    devices = list(plan.non_const_buffer_device or ())
    for growth in edit.buffers:
        while len(sizes) <= growth.memory_id:
            sizes.append(0)
        sizes[growth.memory_id] = growth.new_size
        if growth.added and not growth.device.is_cpu:
            devices.append(m.NonConstBufferDevice(growth.memory_id, growth.device.type, growth.device.index))
    chains = tuple(_edit_chain(chain, c, edit, rewired) for c, chain in enumerate(plan.chains or ()))
    return replace(
        plan,
        values=tuple(values) if plan.values is not None else None,
        chains=chains if plan.chains is not None else None,
        non_const_buffer_sizes=tuple(sizes),
        non_const_buffer_device=tuple(devices) if devices else plan.non_const_buffer_device,
    )


def _entry_lengths(program: m.Program) -> dict[int, int]:
    """The bytes each constant entry must keep: the largest tensor that reads it (any method)."""
    lengths: dict[int, int] = {}
    for plan in program.execution_plan or ():
        for value in plan.values or ():
            if isinstance(value, m.Tensor) and value.is_constant and not value.is_external:
                lengths[value.data_buffer_idx] = max(lengths.get(value.data_buffer_idx, 0), value.nbytes)
    return lengths


def _rebuild_constants(source: PteFile, plan: RewritePlan) -> tuple[SegmentContent, tuple[int, ...], dict[int, int]]:
    """The constant segment without the dropped entries: (content, new offsets, old index -> new index)."""
    program = source.program
    cs = program.constant_segment
    offsets = cs.offsets or ()
    segment = source.segment_span(cs.segment_index)
    dropped = set(plan.dropped_constants)
    lengths = _entry_lengths(program)
    content = SegmentContent(0)
    new_offsets = [0]
    remap = {0: 0}
    cursor = 0
    for old in range(1, len(offsets)):
        if old in dropped:
            continue
        size = lengths.get(old, 0)
        start = align_up(cursor, TENSOR_ALIGNMENT) if size else cursor
        if size:
            content.pieces.append((start, source.piece(Span(segment.offset + offsets[old], size))))
        remap[old] = len(new_offsets)
        new_offsets.append(start)
        cursor = start + size
    content.size = cursor
    return content, tuple(new_offsets), remap


def _mutable_content(source: PteFile, plan: RewritePlan) -> tuple[SegmentContent, tuple[int, ...], Optional[int]]:
    """The initial-data segment with the new entries appended: (content, offsets, the segment to replace or None).

    None means "append a new segment": when the program has none, or when its initial-data segment
    is shared with another table (``plan.segments``), whose bytes must not change.
    """
    program = source.program
    lists = program.mutable_data_segments or ()
    cs = program.constant_segment
    const_segment = source.segment_span(cs.segment_index) if cs is not None and len(cs.offsets or ()) > 1 else None
    if lists:
        existing = lists[0]
        span = source.segment_span(existing.segment_index)
        content = SegmentContent(span.size, [(0, source.piece(span))] if span.size else [])
        offsets = list(existing.offsets or ())
        index: Optional[int] = None if plan.segments.fresh_mutable else existing.segment_index
    else:
        content, offsets, index = SegmentContent(0), [0], None
    cursor = content.size
    for entry in plan.initial_data:
        start = align_up(cursor, TENSOR_ALIGNMENT) if entry.nbytes else cursor
        if entry.nbytes:
            if const_segment is not None:
                piece = source.piece(Span(const_segment.offset + cs.offsets[entry.source_index], entry.nbytes))
            else:  # deprecated inline constant_buffer
                piece = bytes(program.constant_buffer[entry.source_index].storage or b"")[: entry.nbytes]
            content.pieces.append((start, piece))
        offsets.append(start)
        cursor = start + entry.nbytes
    content.size = cursor
    return content, tuple(offsets), index


def apply_plan(source: PteFile, plan: RewritePlan) -> tuple[m.Program, list[SegmentContent]]:
    """The rewritten program and what each of its segments holds (``rewrite.py`` refuses, before writing, a
    result over the runtime's limits: ``schema/limits.py``)."""
    program = source.program
    contents = unchanged_segments(source)
    segments = list(program.segments or ())
    constant_segment = program.constant_segment
    remap: Optional[dict[int, int]] = None
    if plan.dropped_constants:
        content, offsets, remap = _rebuild_constants(source, plan)
        contents[constant_segment.segment_index] = content
        constant_segment = replace(constant_segment, offsets=offsets)
    edits = {edit.plan_index: edit for edit in plan.methods}
    plans = tuple(_edit_plan(p, edits[i], remap) if i in edits else p for i, p in enumerate(program.execution_plan or ()))
    mutable = program.mutable_data_segments
    if plan.initial_data:
        content, offsets, index = _mutable_content(source, plan)
        if index is None:
            index = len(segments)
            segments.append(m.DataSegment())
            contents.append(content)
        else:
            contents[index] = content
        mutable = (m.SubsegmentOffsets(index, offsets),) + tuple((program.mutable_data_segments or ())[1:])
    new_program = replace(program, execution_plan=plans, constant_segment=constant_segment,
                          mutable_data_segments=mutable, segments=tuple(segments))
    return new_program, contents
