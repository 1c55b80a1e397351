"""The writer keeps bulk data at its input's alignment, and copies it in whole pages.

The kernel copies a file range about a fifth faster when source and destination lie at the same offset modulo
64 KiB and each call starts on a page boundary (docs/performance.md, "Copying at the page cache's alignment"):
``plan_segments`` places a segment holding at least ``BULK_SEGMENT`` bytes of kernel-copied ranges so that most
of them keep their input's offset modulo ``COPY_ALIGNMENT``, and ``copy_range`` splits off the head of a range
that starts mid-page.  Small programs are laid out exactly as before (the exporter's packing).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conftest import pte_path
from forge import large_constant

from pte_devconst import api
from pte_devconst.schema.header import SEGMENT_ALIGNMENT, align_up
from pte_devconst.schema.pte_file import PteFile, open_pte
from pte_devconst.schema.pte_writer import (BULK_SEGMENT, COPY_ALIGNMENT, SegmentContent, copy_phase, layout_pte,
                                           plan_segments)
from pte_devconst.schema.span import FileRange
from pte_devconst.util import atomic

MiB = 1 << 20


def _bulk(source_offset: int, size: int = BULK_SEGMENT, at: int = 0) -> SegmentContent:
    """A segment holding one kernel-copied range of ``size`` bytes from ``source_offset``, at ``at`` in it."""
    return SegmentContent(at + size, [(at, FileRange(-1, source_offset, size))])


def test_the_phase_is_where_most_copied_bytes_line_up() -> None:
    assert copy_phase(_bulk(3 * COPY_ALIGNMENT + 3584)) == 3584
    assert copy_phase(_bulk(3584, at=512)) == 3072  # the segment must start 512 bytes before the range's phase
    small = _bulk(3584, size=BULK_SEGMENT - 16)
    assert copy_phase(small) is None  # under BULK_SEGMENT: nothing worth padding for
    mixed = SegmentContent(40 * MiB, [(0, FileRange(-1, 256, 8 * MiB)),
                                      (8 * MiB, FileRange(-1, 8 * MiB + 256, 4 * MiB)),
                                      (12 * MiB, FileRange(-1, 7 * 128, 20 * MiB)), (32 * MiB, b"\0" * 16)])
    assert copy_phase(mixed) == (7 * 128 - 12 * MiB) % COPY_ALIGNMENT  # 20 MiB beat 8 + 4 MiB at phase 256
    odd = _bulk(3584 + 16)  # no SEGMENT_ALIGNMENT-aligned start can line it up
    assert copy_phase(odd) is None


def _file_starts(contents: list[SegmentContent], program_size: int) -> list[int]:
    plan = plan_segments(contents)
    base = plan.base(program_size)
    assert base >= program_size and base % SEGMENT_ALIGNMENT == 0
    return [base + segment.offset for segment in plan.segments]


def test_bulk_segments_land_at_their_sources_phase() -> None:
    contents = [SegmentContent(3000, [(0, b"\1" * 3000)]), _bulk(97792), SegmentContent.of(b"\2" * 700),
                _bulk(5 * COPY_ALIGNMENT + 1280, at=128)]
    for program_size in (1000, 83512, 97768, 200_000):
        starts = _file_starts(contents, program_size)
        assert starts[1] % COPY_ALIGNMENT == 97792 % COPY_ALIGNMENT
        assert (starts[3] + 128) % COPY_ALIGNMENT == 1280
        assert all(b >= a + c.size for a, b, c in zip(starts, starts[1:], contents))  # in order, no overlap
        assert starts[0] - program_size < SEGMENT_ALIGNMENT + COPY_ALIGNMENT  # bounded padding


def test_small_programs_keep_the_exporters_packing() -> None:
    contents = [SegmentContent.of(b"\1" * 3000), _bulk(3584, size=BULK_SEGMENT // 2), SegmentContent.of(b"\2" * 9)]
    plan = plan_segments(contents)
    assert plan.base_phase is None and plan.base(1000) == align_up(1000, SEGMENT_ALIGNMENT)
    assert [s.offset for s in plan.segments] == [0, align_up(3000, SEGMENT_ALIGNMENT),
                                                 align_up(align_up(3000, 128) + BULK_SEGMENT // 2, 128)]


def test_a_round_trip_of_a_real_export_is_byte_identical() -> None:
    """No bulk: the layout is the exporter's, so an unchanged program writes back the very bytes it was."""
    from pte_devconst.schema.pte_writer import pte_bytes, unchanged_segments

    data = pte_path("v_a_dtypes_copy").read_bytes()
    with PteFile.from_bytes(data) as pte:
        contents = unchanged_segments(pte)
        assert pte_bytes(layout_pte(pte.program, contents), contents) == data


def test_a_rewrite_keeps_a_large_constant_at_its_inputs_alignment(tmp_path: Path) -> None:
    source = large_constant(pte_path("v_a_dtypes_copy"), tmp_path / "large.pte", BULK_SEGMENT // 16)  # 16 MiB
    result = api.rewrite(source, tmp_path / "out.pte")
    assert result.changed and result.plan.placements[0].value == 0
    with open_pte(source) as before, open_pte(tmp_path / "out.pte") as after:
        was = before.constant_span(before.program.execution_plan[0].values[0].data_buffer_idx, BULK_SEGMENT)
        index = result.plan.placements[0].initial_data_index
        now = after.mutable_span(index, BULK_SEGMENT)
        assert bytes(before.read(was)) == bytes(after.read(now))
        assert now.offset % COPY_ALIGNMENT == was.offset % COPY_ALIGNMENT != 0
        padding = after.header.segment_base_offset - after.header.program_size
        assert padding < SEGMENT_ALIGNMENT + COPY_ALIGNMENT


def test_a_range_starting_mid_page_is_copied_in_whole_pages_after_its_head(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    data = os.urandom(5 * atomic.PAGE + 123)
    (tmp_path / "src").write_bytes(data)
    calls: list[tuple[int, int, int]] = []
    real = os.copy_file_range

    def recording(src: int, dst: int, count: int, offset: int, dst_offset: int) -> int:
        calls.append((offset, dst_offset, count))
        return real(src, dst, count, offset, dst_offset)

    monkeypatch.setattr(os, "copy_file_range", recording)
    for dst_start, split in ((COPY_ALIGNMENT + 100, True), (COPY_ALIGNMENT + 200, False), (0, False)):
        calls.clear()
        src = os.open(tmp_path / "src", os.O_RDONLY)
        dst = os.open(tmp_path / "dst", os.O_RDWR | os.O_CREAT | os.O_TRUNC)
        try:
            os.lseek(dst, dst_start, os.SEEK_SET)
            atomic.copy_range(src, 100, len(data) - 100, dst)
            assert os.lseek(dst, 0, os.SEEK_CUR) == dst_start + len(data) - 100
            assert os.pread(dst, len(data), dst_start) == data[100:]
        finally:
            os.close(src)
            os.close(dst)
        if split:  # the same offset within a page: the head alone, then whole pages from a page boundary
            assert calls[0] == (100, dst_start, atomic.PAGE - 100)
            assert all(offset % atomic.PAGE == 0 == dst_offset % atomic.PAGE for offset, dst_offset, _ in calls[1:])
        else:  # different offsets within a page: no boundary serves both, one call
            assert len(calls) == 1
