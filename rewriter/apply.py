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
from pte_devconst.schema.ptd_file import PtdFile
from pte_devconst.schema.pte_writer import SegmentContent, unchanged_segments
from pte_devconst.schema.span import ComputedPiece, Piece, Span

from .edit import edit_method
from .plan import (ConstantEntry, InitialData, RewritePlan, entry_lengths, initial_data_lengths,
                   segment_users)


def _rebuild_constants(source: PteFile, plan: RewritePlan, ptd: Optional[PtdFile]
                       ) -> tuple[SegmentContent, tuple[int, ...], dict[int, int]]:
    """The constant segment without the dropped entries and with the plan's new ones (host constants the encoding
    added: ``Storage.new_entries``): (content, new offsets, old index -> new index)."""
    program = source.program
    cs = program.constant_segment
    offsets = (cs.offsets or ()) if cs is not None else ()
    segment = source.segment_span(cs.segment_index) if cs is not None and len(offsets) > 1 else Span(0, 0)
    dropped = set(plan.dropped_constants)
    lengths = entry_lengths(program)
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
    for entry in plan.constant_entries:
        assert entry.index == len(new_offsets), "new constant entries follow the kept ones, in order"
        start = align_up(cursor, TENSOR_ALIGNMENT) if entry.nbytes else cursor
        if entry.nbytes:
            content.pieces.append((start, _new_constant(entry, source, ptd)))
        new_offsets.append(start)
        cursor = start + entry.nbytes
    content.size = cursor
    return content, tuple(new_offsets), remap


def _new_constant(entry: ConstantEntry, source: PteFile, ptd: Optional[PtdFile]) -> Piece:
    """A new constant entry's bytes: an initial-data entry of the input, or what a fold recipe computes."""
    if entry.recipe is not None:
        return _computed(InitialData(entry.index, 0, entry.nbytes, entry.recipe), source, ptd)
    lists = source.program.mutable_data_segments or ()
    assert lists, "a re-encoded constant read initial data, so the input has an initial-data list"
    span = source.segment_span(lists[0].segment_index)
    return source.piece(Span(span.offset + (lists[0].offsets or ())[entry.initial_data], entry.nbytes))


def _computed(entry: InitialData, source: PteFile, ptd: Optional[PtdFile]) -> ComputedPiece:
    """A folded value's bytes, computed when the writer reaches them (one at a time: see fold/compute.py)."""
    recipe = entry.recipe
    assert recipe is not None, "called for a folded value's entry"

    def produce() -> bytearray:
        from .fold.compute import SourceBytes, fold_bytes  # torch, only when something folds

        return fold_bytes(recipe, SourceBytes(source, ptd))

    return ComputedPiece(entry.nbytes, produce, f"initial-data entry {entry.index} (a folded value)")


def _mutable_content(source: PteFile, plan: RewritePlan, ptd: Optional[PtdFile] = None
                     ) -> tuple[SegmentContent, tuple[int, ...], Optional[int]]:
    """The initial-data segment with the new entries appended: (content, offsets, the segment to replace or None).

    None means "append a new segment": when the program has none, or when its initial-data segment
    is shared with another table (``plan.segments``), whose bytes must not change.
    """
    program = source.program
    lists = program.mutable_data_segments or ()
    cs = program.constant_segment
    const_offsets = (cs.offsets or ()) if cs is not None else ()
    const_segment = source.segment_span(cs.segment_index) if cs is not None and len(const_offsets) > 1 else None
    if lists and plan.dropped_initial_data:  # re-laid without the dropped entries (never a shared segment)
        existing = lists[0]
        content, offsets = _without_dropped(source, plan, existing)
        index: Optional[int] = existing.segment_index
    elif lists:
        existing = lists[0]
        span = source.segment_span(existing.segment_index)
        content = SegmentContent(span.size, [(0, source.piece(span))] if span.size else [])
        offsets = list(existing.offsets or ())
        index = None if plan.segments.fresh_mutable else existing.segment_index
    else:
        content, offsets, index = SegmentContent(0), [0], None
    cursor = content.size
    for entry in plan.initial_data:
        start = align_up(cursor, TENSOR_ALIGNMENT) if entry.nbytes else cursor
        if entry.nbytes:
            if entry.recipe is not None:
                piece: Piece = _computed(entry, source, ptd)
            elif const_segment is not None:
                piece = source.piece(Span(const_segment.offset + const_offsets[entry.source_index], entry.nbytes))
            else:  # deprecated inline constant_buffer
                piece = bytes((program.constant_buffer or ())[entry.source_index].storage or b"")[: entry.nbytes]
            content.pieces.append((start, piece))
        offsets.append(start)
        cursor = start + entry.nbytes
    content.size = cursor
    return content, tuple(offsets), index


def _without_dropped(source: PteFile, plan: RewritePlan, existing: m.SubsegmentOffsets
                     ) -> tuple[SegmentContent, list[int]]:
    """The initial-data segment without the entries the plan drops: each kept entry's bytes (as long as the
    largest tensor reading it) at a new 16-aligned offset, each dropped entry with no bytes where the segment has
    got to (offsets never decrease: ExecuTorch's own Python serializer cuts a segment into entries at successive
    offsets, and an entry at offset 0 after others gave the entry before it the wrong bytes on a round trip)."""
    span = source.segment_span(existing.segment_index)
    old_offsets = existing.offsets or ()
    lengths = initial_data_lengths(source.program)
    dropped = set(plan.dropped_initial_data)
    content = SegmentContent(0)
    offsets = [0]
    cursor = 0
    for entry in range(1, len(old_offsets)):
        size = 0 if entry in dropped else lengths.get(entry, 0)
        if not size:
            offsets.append(cursor)
            continue
        start = align_up(cursor, TENSOR_ALIGNMENT)
        content.pieces.append((start, source.piece(Span(span.offset + old_offsets[entry], size))))
        offsets.append(start)
        cursor = start + size
    content.size = cursor
    return content, offsets


def apply_plan(source: PteFile, plan: RewritePlan, ptd: Optional[PtdFile] = None
               ) -> tuple[m.Program, list[SegmentContent]]:
    """The rewritten program and what each of its segments holds (``rewrite.py`` refuses, before writing, a
    result over the runtime's limits: ``schema/limits.py``).  ``ptd``: the .ptd folded values are computed
    from when their constant is external."""
    program = source.program
    contents = unchanged_segments(source)
    segments = list(program.segments or ())
    constant_segment = program.constant_segment
    remap: Optional[dict[int, int]] = None
    if plan.dropped_constants or plan.constant_entries:
        content, offsets, remap = _rebuild_constants(source, plan, ptd)
        if constant_segment is not None and 0 <= constant_segment.segment_index < len(segments) and (
                len(constant_segment.offsets or ()) > 1
                or not segment_users(program).get(constant_segment.segment_index)):
            contents[constant_segment.segment_index] = content
            constant_segment = replace(constant_segment, offsets=offsets)
        else:  # no constant segment of its own: a new segment holds the new ones
            constant_segment = m.SubsegmentOffsets(len(segments), offsets)
            segments.append(m.DataSegment())
            contents.append(content)
        if not plan.dropped_constants:
            remap = None
    edits = {edit.plan_index: edit for edit in plan.methods}
    plans = tuple(edit_method(p, edits[i], remap, plan.options.encoding) if i in edits else p
                  for i, p in enumerate(program.execution_plan or ()))
    mutable = program.mutable_data_segments
    if plan.initial_data or plan.dropped_initial_data:
        content, offsets, index = _mutable_content(source, plan, ptd)
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
