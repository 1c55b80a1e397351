"""``diff`` compares data, not only structure: a byte changed in a constant, an initial-data entry, a delegate
blob or a named-data entry shows up, per tensor or entry, in every output format."""

from __future__ import annotations

import shutil
from pathlib import Path

from cli_runner import invoke, invoke_json
from conftest import EXAMPLES, pte_path
from pte_devconst.compare.diff import diff_files
from pte_devconst.rewriter.rewrite import rewrite_file
from pte_devconst.schema.pte_file import open_pte


def _flip_byte(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


def _first_data_offset(path: Path, value: int) -> int:
    """File offset of the first byte value ``value`` of method 0 ships (constant entry or initial data)."""
    with open_pte(path) as pte:
        span = pte.tensor_span(pte.program.execution_plan[0].values[value])
        assert span is not None and span.size > 0
        return span.offset


def test_a_changed_initial_data_byte_is_reported_per_tensor(tmp_path: Path) -> None:
    good = tmp_path / "good.pte"
    rewrite_file(EXAMPLES / "mlp_copy.pte", good)
    bad = tmp_path / "bad.pte"
    shutil.copy(good, bad)
    _flip_byte(bad, _first_data_offset(bad, 2))

    with open_pte(good) as a, open_pte(bad) as b:
        d = diff_files(a, b)
    assert not d.identical and d.data_changes == 1
    (change,) = d.methods[0].tensors
    assert (change.value, change.data) == (2, "changed") and change.before.sha256 != change.after.sha256

    text = invoke("diff", good, bad, env={"COLUMNS": "200"})
    assert text.exit_code == 0 and "initial data changed" in text.stdout
    code, doc = invoke_json("diff", good, bad)
    assert doc["data_changes"] == 1 and doc["identical"] is False
    assert invoke("diff", good, bad, "--format", "markdown").stdout.count("initial data changed") == 1


def test_a_rewrite_keeps_every_moved_constants_bytes(tmp_path: Path) -> None:
    out = tmp_path / "out.pte"
    result = rewrite_file(EXAMPLES / "transformer_copy.pte", out)
    with open_pte(EXAMPLES / "transformer_copy.pte") as a, open_pte(out) as b:
        d = diff_files(a, b)
    moved = [t for t in d.methods[0].tensors if t.after and t.after.initial_data]
    assert len(moved) == len(result.plan.placements) > 0
    assert {t.data for t in moved} == {"same"} and d.data_changes == 0


def test_a_changed_constant_byte_is_reported(tmp_path: Path) -> None:
    bad = tmp_path / "bad.pte"
    shutil.copy(pte_path("v_a_dtypes_copy"), bad)
    _flip_byte(bad, _first_data_offset(bad, 0))
    with open_pte(pte_path("v_a_dtypes_copy")) as a, open_pte(bad) as b:
        d = diff_files(a, b)
    (change,) = d.methods[0].tensors
    assert change.value == 0 and change.data == "changed" and change.before.kind == change.after.kind == "constant"
    assert "data changed" in invoke("diff", pte_path("v_a_dtypes_copy"), bad, env={"COLUMNS": "200"}).stdout


def test_changed_delegate_blobs_and_named_data_are_reported(tmp_path: Path) -> None:
    source = EXAMPLES / "mlp_inside_copy.pte"  # its weights are named data of the delegate
    with open_pte(source) as pte:
        plan = pte.program.execution_plan[0]
        blob = pte.delegate_span(plan.delegates[0])
        named = pte.segment_span(pte.program.named_data[0].segment_index)
        key = pte.program.named_data[0].key
    for offset, what in ((blob.offset + blob.size // 2, "blob"), (named.offset, "named")):
        bad = tmp_path / f"{what}.pte"
        shutil.copy(source, bad)
        _flip_byte(bad, offset)
        with open_pte(source) as a, open_pte(bad) as b:
            d = diff_files(a, b)
        assert not d.identical
        if what == "blob":
            (change,) = d.methods[0].delegates
            assert change.change == "blob" and change.index == 0
            assert d.named_data == ()
        else:
            (change,) = d.named_data
            assert (change.key, change.change) == (key, "changed")
            assert d.methods[0].delegates == ()
        code, doc = invoke_json("diff", source, bad)
        assert code == 0 and doc["identical"] is False
