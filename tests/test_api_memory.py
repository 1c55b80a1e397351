"""The API right after a real export: ``et`` from ``to_executorch()``, its ``buffer``, bytes and file objects.

A tiny model (tests/fixtures/names/make_names_fixture.py's ``Mixed``, a few hundred bytes of constants) is
exported once per module with ExecuTorch 1.5.1, copy style, with ``clone_spec_patch`` (pte_devconst.exporting).
The names are checked against the model itself: each parameter's bytes say which value index holds it.
"""

from __future__ import annotations

import io
import os
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("executorch.exir")  # imported at collection, so no test pays for it

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "names"))

from make_names_fixture import Mixed, export_managers  # noqa: E402

from pte_devconst import api  # noqa: E402
from pte_devconst.util.errors import PteDevconstError  # noqa: E402
from pte_devconst.schema.pte_file import open_pte  # noqa: E402


@pytest.fixture(scope="module")
def exported() -> tuple[object, object, dict[int, str]]:
    """(edge manager, et, value index -> the model's own name for the tensor there)."""
    torch.manual_seed(1)
    model = Mixed().eval()
    edge, et = export_managers(model)
    by_bytes = {t.detach().contiguous().numpy().tobytes(): name for name, t in model.state_dict().items()}
    expected = {}
    with open_pte(_memory(et.buffer)) as source:
        for index, value in enumerate(source.program.execution_plan[0].values):
            if getattr(value, "is_constant", False) and value.is_constant:
                expected[index] = by_bytes[bytes(source.tensor_bytes(value))]
    return edge, et, expected


def _memory(data: bytes):  # type: ignore[no-untyped-def]
    from pte_devconst.schema.pte_file import ProgramBytes

    return ProgramBytes(data, "<export>")


def _constant_names(report) -> dict[int, str]:  # type: ignore[no-untyped-def]
    return {c.value: c.name for m in report.summary.methods for c in m.constants}


def test_rewrite_of_et_returns_the_new_program_without_touching_the_disk(exported, tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    _, et, expected = exported
    monkeypatch.chdir(tmp_path)
    result = api.rewrite(et)
    assert os.listdir(tmp_path) == []  # nothing written anywhere we can see
    assert result.output is None and result.data is not None and result.changed and result.verified == "sampled"
    assert result.output_size == len(result.data)
    moved = {p.value: p.name for p in result.plan.placements}
    assert moved and moved == {v: n for v, n in expected.items() if n.startswith("proj.")}  # named by et itself
    # The same program from its bytes, a file object and a path: the same output, byte for byte.
    assert api.rewrite(et.buffer).data == result.data
    assert api.rewrite(io.BytesIO(et.buffer)).data == result.data
    written = tmp_path / "m.pte"
    written.write_bytes(et.buffer)
    on_disk = api.rewrite(written, tmp_path / "m.out.pte")
    assert (tmp_path / "m.out.pte").read_bytes() == result.data and on_disk.data is None
    assert result.to_json()["dry_run"] is False and result.to_json()["output"] is None


def test_check_diff_inspect_take_programs_in_memory(exported) -> None:
    _, et, expected = exported
    before = api.check(et)
    assert not before.passed and {f.value: f.name for f in before.findings} == {
        v: n for v, n in expected.items() if n.startswith("proj.")}
    after = api.rewrite(et.buffer).data
    assert api.check(after).passed and api.check([io.BytesIO(after)]).passed
    changes = api.diff(et, after)
    assert changes.moved_constants == 2
    # the moved constants, by name (relaid activations change place too, unnamed)
    assert {t.value: t.name for m in changes.methods for t in m.tensors
            if t.before is not None and t.before.kind.value == "constant"} == {
        v: n for v, n in expected.items() if n.startswith("proj.")}
    assert _constant_names(api.inspect(et)) == expected
    assert api.analyze(et.buffer).methods[0].constants  # bytes alone: unnamed but analysed
    assert set(_constant_names(api.inspect(et.buffer)).values()) == {f"value {v}" for v in expected}


def test_every_kind_of_names_source_agrees(exported) -> None:
    edge, et, expected = exported
    etrecord = et.get_etrecord()
    saved = io.BytesIO()
    etrecord.save(saved)
    saved.seek(0)
    for source in (et, edge, etrecord, saved):
        report = api.inspect(et.buffer, etrecord=source)
        assert _constant_names(report) == expected, type(source).__name__
        # The input by Mixed.forward's argument, from the live graph signature as from the file; the output is
        # returned bare: no name a user knows.
        method = report.summary.methods[0]
        assert [v.name for v in method.inputs] == ["x"] and [v.name for v in method.outputs] == [None]


def test_validate_runs_both_programs_from_memory(exported) -> None:
    _, et, _ = exported
    rewritten = api.rewrite(et).data
    seen: list[str] = []
    result = api.validate(et.buffer, rewritten, simulate_devices=True,
                          progress=lambda done, total, what: seen.append(f"{done}/{total} {what}"))
    assert result.passed, result.to_json()
    assert seen[0].startswith("0/4 forward: original, call 1/2 (the load copied ")
    assert seen[-1].startswith("3/4 forward: rewrite, call 2/2 (the call before copied ")


@pytest.mark.parametrize("bad, expected", [
    (42, "expected a path, the program's bytes, a binary file object or an ExecuTorch program manager"),
    (io.StringIO("text"), "open it in binary mode"),
    (object(), "got object"),
])
def test_wrong_types_are_told_what_is_expected(bad: object, expected: str) -> None:
    for call in (lambda: api.rewrite(bad), lambda: api.inspect(bad), lambda: api.diff(bad, bad),
                 lambda: api.validate(bad, bad), lambda: api.check(bad)):
        with pytest.raises(PteDevconstError, match=expected):
            call()


def test_a_program_in_memory_has_no_output_path(exported, tmp_path: Path) -> None:
    _, et, _ = exported
    with pytest.raises(PteDevconstError, match="rewritten in memory"):
        api.rewrite(et, tmp_path / "x.pte")
    with pytest.raises(PteDevconstError, match="rewritten in memory"):
        api.rewrite(et.buffer, in_place=True)
    assert not (tmp_path / "x.pte").exists()


def test_the_readme_export_example_runs_and_prints_what_it_shows(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    import re

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    code, shown = re.search(r"### Right after an export\n.*?```python\n(.*?)```\n\nprints\n\n```text\n(.*?)```",
                            readme, re.S).groups()
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "examples"))
    exec(compile(code, "README.md", "exec"), {"__name__": "readme"})
    assert capsys.readouterr().out == shown
    assert sorted(os.listdir(tmp_path)) == ["model.etrecord", "model.pte"]
    assert api.check(tmp_path / "model.pte").passed
