"""Regression tests for the reader and writer bugs the robustness audit and the fuzz suite found.

Each test builds the damaged input the bug needed (by editing a decoded corpus
program and re-encoding it, or by editing header bytes) and checks the clean
``FormatError`` (or the correct file) that replaced the crash.
"""

from __future__ import annotations

import os
import struct
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from pte_devconst.schema import model as m
from pte_devconst.util.errors import FormatError
from pte_devconst.schema.ptd_file import PtdFile, open_ptd
from pte_devconst.schema.ptd_model import TensorLayout
from pte_devconst.schema.ptd_writer import write_ptd
from pte_devconst.schema.pte_file import PteFile, open_pte
from pte_devconst.schema.pte_writer import SegmentContent, unchanged_segments, write_pte

try:
    from fuzz.mutate import assemble_ptd, assemble_pte
except ImportError:  # collected as a package (tests/__init__.py present)
    from tests.fuzz.mutate import assemble_ptd, assemble_pte

CORPUS = Path(__file__).parent / "fixtures" / "corpus"


def _load(name: str) -> tuple[bytes, m.Program]:
    data = (CORPUS / name).read_bytes()
    with PteFile.from_bytes(data) as pte:
        return data, pte.program


def _edit_value(program: m.Program, index: int, value: m.EValue, plan: int = 0) -> m.Program:
    p = program.execution_plan[plan]
    values = list(p.values)
    values[index] = value
    plans = list(program.execution_plan)
    plans[plan] = replace(p, values=tuple(values))
    return replace(program, execution_plan=tuple(plans))


def _reject(data: bytes, *fragments: str) -> FormatError:
    with pytest.raises(FormatError) as caught:
        PteFile.from_bytes(data, path="x.pte").close()
    text = str(caught.value)
    assert text.startswith("x.pte: ") and "\n" not in text
    for fragment in fragments:
        assert fragment in text, text
    return caught.value


def test_initial_data_index_checked_for_empty_tensors() -> None:
    """Was: accepted, then ``tensor_bytes`` raised IndexError (no mutable segment list)."""
    data, program = _load("v_b_dtypes_legacy.pte")
    empty = program.execution_plan[0].values[13]  # (0, 4) float, planned
    assert empty.nbytes == 0 and empty.allocation_info is not None
    forged = _edit_value(program, 13, replace(empty, data_buffer_idx=0xFFFFFFFF))
    _reject(assemble_pte(forged, data), "values[13]", "initial-data index 4294967295 is out of range")


def test_external_tensor_bytes_never_index_the_inline_table() -> None:
    """Was: IndexError when an EXTERNAL tensor met a non-empty deprecated constant_buffer."""
    data, program = _load("v_g_external_cpu.pte")
    forged = replace(program, constant_buffer=(m.Buffer(b"\x00" * 16),))
    with PteFile.from_bytes(assemble_pte(forged, data)) as pte:
        external = [v for v in pte.program.execution_plan[0].values if isinstance(v, m.Tensor) and v.is_external]
        assert external and all(pte.tensor_bytes(t) is None for t in external)


def test_damaged_file_on_disk_is_a_format_error_not_a_buffer_error(tmp_path: Path) -> None:
    """Was: every malformed file opened from disk raised BufferError from mmap.close()."""
    data = (CORPUS / "v_a_dtypes_copy.pte").read_bytes()
    path = tmp_path / "cut.pte"
    for cut in (100, 1000, 3000, len(data) - 10):
        path.write_bytes(data[:cut])
        with pytest.raises(FormatError):
            open_pte(path)
    ptd = (CORPUS / "v_g_external_copy.ptd").read_bytes()
    path.write_bytes(ptd[:300])
    with pytest.raises(FormatError):
        open_ptd(path)


def test_close_with_live_slices_is_quiet() -> None:
    path = CORPUS / "v_a_dtypes_copy.pte"
    pte = open_pte(path)
    constant = next(v for v in pte.program.execution_plan[0].values if isinstance(v, m.Tensor) and v.is_constant)
    kept = pte.tensor_bytes(constant)
    pte.close()  # was: BufferError: cannot close exported pointers exist
    assert kept is not None and len(kept) == constant.nbytes


@pytest.mark.parametrize("kind", ["directory", "fifo"])
def test_non_regular_files_are_refused_without_blocking(tmp_path: Path, kind: str) -> None:
    """Was: a FIFO blocked open() forever; a directory gave 'No such device'."""
    path = tmp_path / "thing.pte"
    if kind == "directory":
        path.mkdir()
    else:
        os.mkfifo(path)
    result: list[BaseException] = []
    worker = threading.Thread(target=lambda: _capture(result, path), daemon=True)
    worker.start()
    worker.join(5)
    assert not worker.is_alive(), "opening a FIFO blocked"
    assert isinstance(result[0], FormatError)
    assert ("directory" if kind == "directory" else "not a regular file") in str(result[0])


def _capture(out: list[BaseException], path: Path) -> None:
    try:
        open_pte(path)
    except BaseException as error:  # noqa: BLE001
        out.append(error)


def test_writer_pads_to_an_empty_last_segment(tmp_path: Path) -> None:
    """Was: the header counted an empty last segment's alignment gap the file did not hold."""
    with open_pte(CORPUS / "v_h_cpu_only.pte") as pte:
        contents = unchanged_segments(pte) + [SegmentContent(0, [])]
        layout = write_pte(tmp_path / "out.pte", pte.program, contents)
    assert layout.segments[-1].size == 0 and layout.segments[-1].offset > layout.segments[-2].size
    with open_pte(tmp_path / "out.pte") as again:
        assert (tmp_path / "out.pte").stat().st_size == again.segment_base + layout.header.segment_data_size
    write_ptd(tmp_path / "out.ptd", [("a", None, b"1234"), ("b", None, b"")])
    assert open_ptd(tmp_path / "out.ptd").keys() == ["a", "b"]


def test_forged_ptd_rank_is_rejected_quickly() -> None:
    """Was: the size product of a 100,000-dimension layout took a bigint loop of minutes."""
    data = (CORPUS / "v_g_external_copy.ptd").read_bytes()
    with PtdFile.from_bytes(data) as ptd:
        ft = ptd.flat_tensor
    first = ft.named_data[0]
    huge = TensorLayout(first.tensor_layout.scalar_type, (0x7FFFFFFF,) * 100_000, (0,) * 100_000)
    forged = replace(ft, named_data=(replace(first, tensor_layout=huge),) + ft.named_data[1:])
    started = time.process_time()  # CPU time: work done (a busy machine's wall clock is no measure of it)
    with pytest.raises(FormatError, match="named_data\\[0\\].tensor_layout"):
        PtdFile.from_bytes(assemble_ptd(forged, data))
    assert time.process_time() - started < 1.0
    bad_order = TensorLayout(6, (4, 4), (0, 0))
    forged = replace(ft, named_data=(replace(first, tensor_layout=bad_order),) + ft.named_data[1:])
    with pytest.raises(FormatError, match="not a permutation"):
        PtdFile.from_bytes(assemble_ptd(forged, data))


def test_value_without_type_is_rejected() -> None:
    data, program = _load("v_h_cpu_only.pte")
    _reject(assemble_pte(_edit_value(program, 0, None), data), "values[0]", "union type NONE")


def test_unknown_device_type_and_negative_index_are_rejected() -> None:
    data, program = _load("v_b_dtypes_legacy.pte")
    t = program.execution_plan[0].values[0]
    _reject(assemble_pte(_edit_value(program, 0, replace(t, extra_tensor_info=replace(
        t.extra_tensor_info, device_type=7))), data), "unknown device type 7")
    _reject(assemble_pte(_edit_value(program, 0, replace(t, extra_tensor_info=replace(
        t.extra_tensor_info, device_index=-1))), data), "negative device index")
    data, program = _load("v_a_dtypes_copy.pte")
    plan = program.execution_plan[0]
    entry = plan.non_const_buffer_device[0]
    forged = replace(program, execution_plan=(replace(plan, non_const_buffer_device=(
        replace(entry, device_type=-3),)),) + program.execution_plan[1:])
    _reject(assemble_pte(forged, data), "non_const_buffer_device[0]", "unknown device type -3")


def test_list_items_must_have_the_listed_type() -> None:
    data, program = _load("v_i_kvcache_copy.pte")
    values = program.execution_plan[0].values
    first_bool = next(i for i, v in enumerate(values) if isinstance(v, m.Bool))
    forged = _edit_value(program, 5, m.TensorList((first_bool,)))
    _reject(assemble_pte(forged, data), "values[5].items[0]", "is a Bool, not the Tensor")
    forged = _edit_value(program, 5, m.IntList((0,)))
    _reject(assemble_pte(forged, data), "is a Tensor, not the Int")


def test_missing_names_and_ids_are_rejected() -> None:
    data, program = _load("v_b_dtypes_legacy.pte")
    plan = program.execution_plan[0]
    delegate = plan.delegates[0]

    def with_plan(**changes: object) -> bytes:
        return assemble_pte(replace(program, execution_plan=(replace(plan, **changes),)), data)

    _reject(with_plan(name=None), "name is missing")
    _reject(with_plan(inputs=None), "inputs is missing")
    _reject(with_plan(delegates=(replace(delegate, id=None),)), "delegates[0]", "no backend id")
    spec = delegate.compile_specs[0]
    _reject(with_plan(delegates=(replace(delegate, compile_specs=(replace(spec, value=None),)),)),
            "compile_specs[0]", "lacks its key or value")


def test_segment_data_without_a_base_is_rejected() -> None:
    data = bytearray((CORPUS / "v_h_cpu_only.pte").read_bytes())
    struct.pack_into("<Q", data, 24, 0)  # segment_base_offset = 0 while segment_data_size > 0
    _reject(bytes(data), "extended header", "segment_base_offset is 0")


def test_planned_buffer_sizes_are_bounded() -> None:
    """Was: accepted; a rewrite then grew the buffer past int64 and the encoder failed (internal error)."""
    data, program = _load("v_a_dtypes_copy.pte")
    plan = program.execution_plan[0]
    sizes = list(plan.non_const_buffer_sizes)
    sizes[2] = (1 << 63) - 64
    forged = replace(program, execution_plan=(replace(plan, non_const_buffer_sizes=tuple(sizes)),))
    _reject(assemble_pte(forged, data), "non_const_buffer_sizes[2]", "exceeds 2^62 bytes")
