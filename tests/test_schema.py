"""The file-format layer: decoder vs flatc accessors, lossless round trips, .ptd, bad input.

(The generated code itself, and adding a field, are tests/test_regenerate.py.)
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import replace
from pathlib import Path

import pytest

import flatc_reference
from conftest import CASES, CORPUS, CPU_CASES, EXAMPLES, FIXTURES, facts, ptd_path, pte_path, shipped
from pte_devconst.schema import model as m
from pte_devconst.util.errors import FormatError
from pte_devconst.schema.ptd_file import PtdFile, open_ptd
from pte_devconst.schema.ptd_writer import write_ptd
from pte_devconst.schema.pte_file import PteFile, open_pte
from pte_devconst.schema.pte_writer import unchanged_segments, write_pte

REAL_MODELS = FIXTURES / "real_models"


# The corpus, the examples, and one variant of each real-model architecture (the mixed-device copy style: the
# most varied tables) to keep the default run short.
ALL_PROGRAMS = ([pte_path(n) for n in CASES] + [EXAMPLES / f"{n}.pte" for n in shipped(EXAMPLES)]
                + [REAL_MODELS / f"{n}.pte" for n in shipped(REAL_MODELS) if n.endswith("_mm_copy")])


@pytest.mark.parametrize("path", ALL_PROGRAMS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_decoder_reads_what_flatc_accessors_read(path: Path) -> None:
    """Every field of every table, as the generated decoder reads it, equals what flatc's generated accessors read.

    The two share nothing but the .fbs: slots, widths and defaults come from flatc there and from the project's
    parser here (tests/flatc_reference.py).
    """
    with open_pte(path) as pte:
        flatbuffer = bytes(pte.data[: pte.flatbuffer_size])
        program = pte.program
    assert flatc_reference.first_difference(program, flatc_reference.decode_program(flatbuffer)) is None


@pytest.mark.parametrize("name", [n for n in CASES if ptd_path(n)])
def test_ptd_decoder_reads_what_flatc_accessors_read(name: str) -> None:
    with open_ptd(ptd_path(name)) as ptd:
        flatbuffer = bytes(ptd.data[: ptd.header.flatbuffer_offset + ptd.header.flatbuffer_size])
        flat_tensor = ptd.flat_tensor
    assert flat_tensor == flatc_reference.decode_flat_tensor(flatbuffer)


def test_a_wrong_field_is_caught_by_the_comparison() -> None:
    """The comparison above sees a single field read wrong (here: a tensor's data_buffer_idx off by one)."""
    with open_pte(pte_path("v_a_dtypes_copy")) as pte:
        flatbuffer = bytes(pte.data[: pte.flatbuffer_size])
        program = pte.program
    plan = program.execution_plan[0]
    wrong = replace(plan.values[0], data_buffer_idx=plan.values[0].data_buffer_idx + 1)
    program = replace(program, execution_plan=(replace(plan, values=(wrong,) + plan.values[1:]),))
    assert flatc_reference.first_difference(program, flatc_reference.decode_program(flatbuffer)) == \
        "execution_plan[0].values[0].data_buffer_idx: 2 != 1"


@pytest.mark.parametrize("name", CASES)
def test_round_trip_is_byte_identical(name: str, tmp_path: Path) -> None:
    """Reading a 1.5.1 file and writing it back unchanged reproduces it exactly (so parse-equal too)."""
    out = tmp_path / "out.pte"
    with open_pte(pte_path(name)) as pte:
        write_pte(out, pte.program, unchanged_segments(pte))
        original_program = pte.program
    assert out.read_bytes() == pte_path(name).read_bytes()
    with open_pte(out) as again:
        assert again.program == original_program


def _with_spare_buffers(program: m.Program) -> m.Program:
    """The same program with 16 extra empty planned buffers per method: 128 more flatbuffer bytes, so every
    segment lands at a new file offset and the writer's layout (not a byte copy) is what gets tested."""
    plans = tuple(replace(p, non_const_buffer_sizes=tuple(p.non_const_buffer_sizes) + (0,) * 16)
                  for p in program.execution_plan)
    return replace(program, execution_plan=plans)


@pytest.mark.parametrize("name", CASES)
def test_round_trip_after_re_encoding_keeps_every_tensor_byte(name: str, tmp_path: Path) -> None:
    """A program re-laid out from scratch (segments moved) still has the same data for every constant."""
    out = tmp_path / "out.pte"
    with open_pte(pte_path(name)) as pte:
        write_pte(out, _with_spare_buffers(pte.program), unchanged_segments(pte))
        base = pte.segment_base
        before = {(p, v): bytes(pte.tensor_bytes(t) or b"") for p, plan in enumerate(pte.program.execution_plan)
                  for v, t in enumerate(plan.values) if isinstance(t, m.Tensor)}
    with open_pte(out) as again:
        assert again.segment_base != base or not any(s.size for s in again.program.segments)
        after = {(p, v): bytes(again.tensor_bytes(t) or b"") for p, plan in enumerate(again.program.execution_plan)
                 for v, t in enumerate(plan.values) if isinstance(t, m.Tensor)}
    assert before == after


def test_constant_bytes_match_the_exporters_hashes() -> None:
    """The reader finds each constant's bytes where the exporter put them (sha256 from the corpus facts)."""
    checked = 0
    for name in CASES:
        with open_pte(pte_path(name)) as pte:
            for method, mfacts in facts(name)["methods"].items():
                plan = pte.program.plan(method)
                for c in mfacts["constants"]:
                    tensor = plan.values[c["value"]]
                    if tensor.is_external or not c.get("data_sha256"):
                        continue
                    assert hashlib.sha256(bytes(pte.tensor_bytes(tensor))).hexdigest() == c["data_sha256"], (name, c)
                    checked += 1
    assert checked > 40


@pytest.mark.parametrize("name", CPU_CASES)
def test_round_trip_runs_bit_identically_in_executorch(name: str, tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from et_oracle import run_with_executorch

    out = tmp_path / f"{name}.pte"
    with open_pte(pte_path(name)) as pte:
        write_pte(out, _with_spare_buffers(pte.program), unchanged_segments(pte))
    inputs = torch.load(CORPUS / f"{name}.inputs.pt")
    for method, calls in inputs.items():
        for call in calls:
            expected = run_with_executorch(pte_path(name), method, call, ptd_path(name))
            got = run_with_executorch(out, method, call, ptd_path(name))
            assert len(got) == len(expected)
            assert all(torch.equal(a, b) for a, b in zip(got, expected))


@pytest.mark.parametrize("name", [n for n in CASES if ptd_path(n)])
def test_ptd_read_and_write(name: str, tmp_path: Path) -> None:
    with open_ptd(ptd_path(name)) as ptd:
        entries = [(e.key, e.tensor_layout, bytes(ptd.tensor_bytes(e.key))) for e in ptd.flat_tensor.named_data]
        assert {k for k, _, _ in entries} >= {"w", "b"}
    out = tmp_path / "copy.ptd"
    write_ptd(out, entries)
    with open_ptd(out) as again:
        assert [(e.key, e.tensor_layout, bytes(again.tensor_bytes(e.key)))
                for e in again.flat_tensor.named_data] == entries


def test_opening_reads_only_the_flatbuffer(tmp_path: Path) -> None:
    """A program whose segment area is a 4 GiB sparse hole opens instantly: segments are never read."""
    import time

    with open_pte(pte_path("v_a_dtypes_copy")) as pte:
        base = pte.segment_base
        program = pte.program
    big = tmp_path / "big.pte"
    data = bytearray(pte_path("v_a_dtypes_copy").read_bytes())
    hole = 4 << 30
    segments = list(program.segments)
    segments.append(m.DataSegment(segments[-1].offset + 1024, hole))
    from pte_devconst.schema.pte_writer import SegmentContent

    contents = [SegmentContent(s.size, [(0, bytes(data[base + s.offset: base + s.offset + s.size]))])
                for s in program.segments] + [SegmentContent(hole)]
    # Write the head, then extend the file sparsely instead of writing 4 GiB of zeros.
    from pte_devconst.schema.pte_writer import layout_pte, write_pte_to_fd

    layout = layout_pte(replace(program, segments=tuple(segments)), contents)
    import os

    fd = os.open(big, os.O_WRONLY | os.O_CREAT)
    try:  # the head and the real segments only (the writer would zero-fill up to the hole's end)
        write_pte_to_fd(fd, replace(layout, segments=layout.segments[:-1]), contents[:-1])
        os.ftruncate(fd, layout.file_size)
    finally:
        os.close(fd)
    stat = big.stat()
    assert stat.st_size == layout.file_size > hole
    if hasattr(stat, "st_blocks"):  # really a hole: the test writes kilobytes, not 4 GiB
        assert stat.st_blocks * 512 < 16 << 20
    start = time.process_time()  # CPU time: work done (a busy machine's wall clock is no measure of it)
    with open_pte(big) as opened:
        assert opened.segment_span(len(segments) - 1).size == hole
    assert time.process_time() - start < 1.0


BAD_INPUTS = {
    "empty": b"",
    "text": b"hello, this is not an ExecuTorch program at all" * 3,
    "wrong_identifier": None,  # filled from a real file below
    "truncated_header": None,
    "truncated_segments": None,
    "root_out_of_range": None,
}


def _bad(kind: str) -> bytes:
    good = pte_path("v_a_dtypes_copy").read_bytes()
    if kind == "wrong_identifier":
        return good[:4] + b"XX12" + good[8:]
    if kind == "truncated_header":
        return good[:30]
    if kind == "truncated_segments":
        return good[: len(good) - 100]
    if kind == "root_out_of_range":
        return struct.pack("<I", 10_000_000) + good[4:]
    return BAD_INPUTS[kind]


@pytest.mark.parametrize("kind", list(BAD_INPUTS))
def test_bad_input_is_a_format_error_naming_the_file(kind: str) -> None:
    with pytest.raises(FormatError) as info:
        PteFile.from_bytes(_bad(kind), path="bad.pte")
    assert str(info.value).startswith("bad.pte")


def test_out_of_range_indices_are_reported_with_where(tmp_path: Path) -> None:
    with open_pte(pte_path("v_h_cpu_only")) as pte:
        plan = pte.program.execution_plan[0]
        first = plan.chains[0].instructions[0]
        bad_chain = replace(plan.chains[0],
                            instructions=(replace(first, op_index=99),) + plan.chains[0].instructions[1:])
        program = replace(pte.program, execution_plan=(replace(plan, chains=(bad_chain,)),))
        out = tmp_path / "bad.pte"
        write_pte(out, program, unchanged_segments(pte))
    with pytest.raises(FormatError, match=r"forward\.chains\[0\]\.instructions\[0\].*op_index 99"):
        open_pte(out)


def test_ptd_bad_input() -> None:
    with pytest.raises(FormatError):
        PtdFile.from_bytes(pte_path("v_a_dtypes_copy").read_bytes(), path="x.ptd")
