"""The project's encoder writes, byte for byte, what the flatc-generated builder path writes.

``schema/encode.py`` runs the encoder generated from the project's .fbs
(``schema/generated/encoders.py``) on its own builder (``schema/flatbuf_builder.py``)
for speed; ``tests/flatc_reference.py`` uses the code flatc generated from the
same .fbs and the ``flatbuffers`` package. Equal bytes on real programs,
rewritten programs and thousands of randomly changed ones mean the fast path
inherits every layout rule of the reference (alignment, vtable sharing,
defaults left out, absent versus empty).
"""

from __future__ import annotations

import struct
import subprocess
import sys
from typing import Any

import pytest

import flatc_reference as reference
from conftest import CASES, CORPUS, EXAMPLES, pte_path, ptd_path, shipped
from pte_devconst.rewriter.apply import apply_plan
from pte_devconst.rewriter.load import opened
from pte_devconst.rewriter.plan import RewriteOptions
from pte_devconst.rewriter.rewrite import plan_file
from pte_devconst.schema import model as m
from pte_devconst.schema.encode import encode_flat_tensor, encode_program
from pte_devconst.schema.flatbuf_builder import Builder, BuilderError, TableLayout
from pte_devconst.schema.flatbuf import I32, U8
from pte_devconst.schema.ptd_file import open_ptd
from pte_devconst.schema.pte_file import open_pte
from forge import changed_programs

EXAMPLE_PROGRAMS = [EXAMPLES / f"{name}.pte" for name in shipped(EXAMPLES)]


def _program(path: Any) -> m.Program:
    with open_pte(path) as pte:
        return pte.program


@pytest.mark.parametrize("name", CASES)
def test_corpus_programs_encode_identically(name: str) -> None:
    program = _program(pte_path(name))
    assert encode_program(program) == reference.encode_program(program)


@pytest.mark.parametrize("name", [n for n in CASES if ptd_path(n)])
def test_corpus_ptd_files_encode_identically(name: str) -> None:
    with open_ptd(ptd_path(name)) as ptd:
        flat_tensor = ptd.flat_tensor
    assert encode_flat_tensor(flat_tensor) == reference.encode_flat_tensor(flat_tensor)


@pytest.mark.parametrize("path", [pte_path(n) for n in CASES] + EXAMPLE_PROGRAMS, ids=lambda p: p.stem)
def test_rewritten_programs_encode_identically(path: Any) -> None:
    with opened(path, ptd_path(path.stem) if path.parent == CORPUS else None) as (source, data):
        plan = plan_file(source, data, RewriteOptions())
        if plan.is_empty:
            pytest.skip("nothing to rewrite")
        program, _ = apply_plan(source, plan)
    assert encode_program(program) == reference.encode_program(program)


def _encode_both(encode: Any, encode_reference: Any, root: Any) -> tuple[str, Any]:
    """('ok', bytes) or ('refused', None): a value the format cannot hold must be refused by both."""
    results = []
    for fn in (encode, encode_reference):
        try:
            results.append(("ok", fn(root)))
        except (BuilderError, struct.error, TypeError, ValueError, OverflowError, AttributeError) as error:
            results.append(("refused", type(error).__name__))
    assert results[0][0] == results[1][0], results
    return results[0]


def test_randomly_changed_programs_encode_identically() -> None:
    """Structured mutations from the fuzzer (edge values, None versus empty, holes, odd strings), 1,500 of them."""
    compared = 0
    for root in changed_programs([_program(pte_path(name)) for name in CASES], 20261129, 1500):
        status, data = _encode_both(encode_program, reference.encode_program, root)
        if status == "ok":
            assert data == reference.encode_program(root)
            compared += 1
    assert compared > 1000


def test_edge_values_and_empty_containers() -> None:
    """Values next to defaults and limits, NaN and -0.0, strings with NUL and non-ASCII, absent versus empty."""
    values = (m.Int(0), m.Int(-1), m.Int((1 << 63) - 1), m.Int(-(1 << 63)), m.Bool(False), m.Bool(True),
              m.Double(0.0), m.Double(-0.0), m.Double(float("nan")), m.Double(float("inf")), m.String(""),
              m.String("a\x00\u4e2d"), m.String(None), m.Null(), None, m.IntList(()), m.IntList(None),
              m.BoolList((True, False, True)), m.DoubleList((1.5, -2.0)), m.TensorList((0, 1, 2)),
              m.OptionalTensorList((-1, 3)),
              m.Tensor(scalar_type=6, sizes=(), dim_order=(), allocation_info=m.AllocationDetails(1, (1 << 33) + 5),
                       extra_tensor_info=m.ExtraTensorInfo(0, None, 0, 1, 0)),
              m.Tensor(sizes=None, dim_order=None))
    plan = m.ExecutionPlan(name="forward", values=values, inputs=(), outputs=None, chains=(m.Chain(
        inputs=(0,), outputs=(1,), instructions=(m.KernelCall(0, ()), m.DelegateCall(0, None), m.MoveCall(1, 0),
                                                 m.JumpFalseCall(5, 0), m.FreeCall(3), None),
        stacktrace=(m.FrameList((m.Frame("f.py", 3, "fn", None),)), None, m.FrameList(None))),),
        operators=(m.Operator("aten::add", ""),), delegates=(m.BackendDelegate(
            "X", m.BackendDelegateDataReference(1, 0), (m.CompileSpec("target_device", b"cuda:0"),
                                                        m.CompileSpec(None, None))),),
        non_const_buffer_sizes=(0, 1 << 40), non_const_buffer_device=(m.NonConstBufferDevice(1, 1, 0),))
    program = m.Program(version=0, execution_plan=(plan, m.ExecutionPlan()), constant_buffer=(m.Buffer(b""), m.Buffer(
        bytes(range(33))), m.Buffer(None)), backend_delegate_data=(m.BackendDelegateInlineData(b"\x01" * 17),),
        segments=(m.DataSegment(0, 48),), constant_segment=m.SubsegmentOffsets(0, (0, 16)),
        mutable_data_segments=(), named_data=(m.NamedData("w", 0), m.NamedData(None, 7)))
    assert encode_program(program) == reference.encode_program(program)
    assert encode_program(m.Program()) == reference.encode_program(m.Program())


def test_out_of_range_values_are_refused() -> None:
    b = Builder()
    with pytest.raises(BuilderError, match="slot 0"):
        b.table(TableLayout((U8, 0)), (256,))
    with pytest.raises(BuilderError, match="vector"):
        Builder().scalars(I32, [1 << 31])
    with pytest.raises(BuilderError, match="written before"):
        Builder().table(TableLayout(None), (1 << 20,))
    with pytest.raises(BuilderError, match="written after"):
        Builder().offsets([1 << 20])
    with pytest.raises(BuilderError):
        encode_program(m.Program(version=-1))


def test_buffer_growth_keeps_contents() -> None:
    """Starting from a tiny buffer, thousands of doublings and copies must not disturb what was written."""
    program = _program(pte_path(CASES[0]))
    assert encode_program(program, size_hint=1) == reference.encode_program(program)


def test_encoding_imports_neither_flatbuffers_nor_numpy() -> None:
    code = ("import sys; from pte_devconst.schema.encode import encode_program; from pte_devconst.schema import model;"
            "encode_program(model.Program()); print(sorted({'flatbuffers', 'numpy', 'torch'} & set(sys.modules)))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_a_buffer_past_2_gib_is_refused_and_one_below_is_not(monkeypatch: pytest.MonkeyPatch) -> None:
    """The 2 GiB limit of 32-bit offsets, checked with the limit scaled down (a real 2 GiB test would be slow)."""
    from pte_devconst.schema import flatbuf_builder

    monkeypatch.setattr(flatbuf_builder, "MAX_SIZE", 3000)  # not a power of two: the last doubling overshoots it
    b = Builder(16)
    b.bytes_vector(bytes(2900))  # needs more than 2048: grows to the cap, not past it
    with pytest.raises(BuilderError, match="2 GiB"):
        b.bytes_vector(bytes(200))


def test_values_the_reference_refuses_are_refused_not_defaulted() -> None:
    """A scalar left as None, or a bool that is not one, must not quietly become the default in the file."""
    for program in (m.Program(version=None),  # type: ignore[arg-type]
                    m.Program(execution_plan=(m.ExecutionPlan(values=(m.Tensor(scalar_type=None),)),)),  # type: ignore[arg-type]
                    m.Program(execution_plan=(m.ExecutionPlan(values=(m.Bool(2),)),))):  # type: ignore[arg-type]
        assert _encode_both(encode_program, reference.encode_program, program)[0] == "refused"


def test_a_wide_memoryview_is_stored_as_its_bytes() -> None:
    from array import array

    words = array("i", [1, 2, 3])
    wide = m.Program(constant_buffer=(m.Buffer(memoryview(words)),))  # type: ignore[arg-type]
    assert encode_program(wide) == reference.encode_program(m.Program(constant_buffer=(m.Buffer(words.tobytes()),)))
