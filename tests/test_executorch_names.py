"""ExecuTorch's names and small rules (program/executorch.py) against what the real exporter and torch use."""

from __future__ import annotations

import pytest

from conftest import CASES, pte_path
from pte_devconst.program import executorch as et
from pte_devconst.schema import devices, scalar_types
from pte_devconst.schema.generated.enums import ScalarType
from pte_devconst.schema.pte_file import open_pte


def test_kernel_names_are_the_exporters() -> None:
    """Every ``et_copy`` and ``dim_order_ops`` kernel the real ExecuTorch 1.5.1 exporter wrote into the corpus is
    one of ours."""
    ours = et.COPY_KERNELS | {et.TO_DIM_ORDER_COPY, et.CLONE_DIM_ORDER, et.EMPTY_DIM_ORDER}
    used = set()
    for name in CASES:
        with open_pte(pte_path(name)) as pte:
            used |= {op.qualified_name for plan in pte.program.execution_plan or () for op in plan.operators or ()
                     if op.qualified_name.startswith(("et_copy::", "dim_order_ops::"))}
    assert {et.H2D_COPY, et.CLONE_DIM_ORDER} <= used <= ours


def test_scalar_type_table_agrees_with_torch() -> None:
    """Each scalar type's name is torch's dtype name and its element size is torch's itemsize."""
    torch = pytest.importorskip("torch")
    for scalar, info in scalar_types.SCALAR_TYPES.items():
        dtype = getattr(torch, info.name)
        assert isinstance(dtype, torch.dtype) and dtype.itemsize == info.element_size, (scalar, info)
        assert scalar_types.element_size(scalar) == info.element_size
        assert scalar_types.scalar_type_name(scalar) == info.name
    assert scalar_types.scalar_type_name(99) == "scalar_type_99"
    with pytest.raises(KeyError):
        scalar_types.element_size(99)


def test_runner_dtypes_derive_from_the_table() -> None:
    torch = pytest.importorskip("torch")
    from pte_devconst.program.dtypes import scalar_type, torch_dtype
    from pte_devconst.util.errors import UnsupportedProgramError

    assert torch_dtype(ScalarType.FLOAT) is torch.float32 and scalar_type(torch.bfloat16) == ScalarType.BFLOAT16
    with pytest.raises(UnsupportedProgramError, match="scalar type qint8"):
        torch_dtype(ScalarType.QINT8)


@pytest.mark.parametrize("raw, expected", [(None, "cpu"), (b"cuda:1", "cuda:1"), (b"CUDA", "cuda:0")])
def test_target_device_spec_parses(raw: bytes | None, expected: str) -> None:
    assert str(devices.parse_target_device(raw)) == expected


@pytest.mark.parametrize("raw", [b"tpu:0", b"cuda:x", b"\xff", b"cuda:128"])
def test_an_unreadable_target_device_is_one_error(raw: bytes) -> None:
    with pytest.raises(devices.UnreadableTargetDevice, match=r"unreadable target_device compile spec"):
        devices.parse_target_device(raw)


def test_nameless_and_repeated_methods_are_labelled_by_plan() -> None:
    from dataclasses import replace

    with open_pte(pte_path("v_a_dtypes_copy")) as pte:
        program = pte.program
    plan = program.execution_plan[0]
    labels, notes = et.method_labels(replace(program, execution_plan=(plan, plan, replace(plan, name=None))))
    assert labels == ["forward (plan 0)", "forward (plan 1)", "plan2"]
    assert len(notes) == 1 and "always loads plan 0" in notes[0]


def test_closed_sets_print_and_serialize_as_their_values() -> None:
    """Reports read as before the enums: str(), f-strings, json.dumps and the CLI's JSON give the value."""
    import json

    from pte_devconst.util.jsonable import to_jsonable
    from pte_devconst.rewriter.model.analysis import MethodStyle, ReaderKind
    from pte_devconst.compare.diff import DataComparison

    for member in (ReaderKind.KERNEL_CALL, MethodStyle.LEGACY, DataComparison.NOT_COMPARED):
        assert str(member) == f"{member}" == f"{member:>0}" == member.value == to_jsonable(member)
        assert json.dumps({"k": member}) == json.dumps({"k": member.value})


def test_labels_stay_unique_when_a_name_looks_like_a_label(tmp_path) -> None:
    """Plans named ``forward (plan 1)``, ``forward``, ``forward``: the second's label was ``forward (plan 1)``
    too, and ``rewrite --format json`` reported the first method's figures for it (found reading the code)."""
    from dataclasses import replace

    from pte_devconst import api
    from pte_devconst.schema.pte_writer import unchanged_segments, write_pte

    with open_pte(pte_path("v_f_multi_method_copy")) as pte:
        program = pte.program
        plans = program.execution_plan
        forged = replace(program, execution_plan=(replace(plans[0], name="forward (plan 1)"),
                                                  replace(plans[1], name="forward"), replace(plans[0], name="forward")))
        labels, _ = et.method_labels(forged)
        assert len(set(labels)) == 3 and labels[0] == "forward (plan 1)"
        write_pte(tmp_path / "named.pte", forged, unchanged_segments(pte))
    result = api.rewrite(tmp_path / "named.pte", dry_run=True)
    doc = result.to_json()
    analysis = result.plan.analysis
    for entry, method in zip(doc["methods"], analysis.methods):
        assert entry["name"] == method.label
        assert entry["h2d_bytes_per_call_before"] == method.h2d_bytes_per_call  # each method's own figure
    assert [m["h2d_bytes_per_call_before"] for m in doc["methods"]] \
        != [doc["methods"][0]["h2d_bytes_per_call_before"]] * 3
