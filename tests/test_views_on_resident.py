"""A static view of a device copy follows its constant to device memory (issue 35, item 6).

The emitter elides a static view of a planned tensor into a second value at the same place, which no instruction
writes.  Where such a view of a constant's device copy reads what the copy wrote and nothing else, lies within its
bytes and only delegates on the device read it, the rewrite points it at the value holding the constant on its
device (``edit.py``: the same in both encodings) and the copy goes.  Otherwise the constant keeps its copy and
the reason says what blocks it.  The programs are the shipped MLPs (the reference backend, and XNNPACK for the real
runtime) with their delegate run again right after its call, given a view of a constant's copy (``forge``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import EXAMPLES
from forge import edit_plans, edit_program, view_read_again
from pte_devconst import api
from pte_devconst.rewriter import edit as edit_module
from pte_devconst.rewriter.load import analyze_file
from pte_devconst.rewriter.encodings import encoding_for
from pte_devconst.rewriter.plan import RewriteOptions
from pte_devconst.rewriter.rewrite import rewrite_file
from pte_devconst.schema import model as m
from pte_devconst.schema.pte_file import open_pte
from pte_devconst.rewriter.verify import RewriteCheckError

from cli_runner import invoke


def _forged(tmp_path: Path, name: str = "mlp_copy", **variant: object) -> Path:
    return edit_program(EXAMPLES / f"{name}.pte", tmp_path / f"{name}.viewed.pte",
                        lambda program: edit_plans(program, lambda plan: view_read_again(plan, **variant)))


def _verdicts(path: Path) -> dict[int, tuple[str, ...]]:
    (method,) = analyze_file(path).methods
    return {c.value: c.reasons for c in method.constants}


def _values(path: Path) -> tuple[m.EValue, ...]:
    with open_pte(path) as pte:
        return tuple(pte.program.execution_plan[0].values)


def _placed(path: Path) -> dict[int, tuple[int, int]]:
    with open_pte(path) as pte:
        plan = pte.program.execution_plan[0]
        return {i: (v.allocation_info.memory_id, v.allocation_info.memory_offset)
                for i, v in enumerate(plan.values) if isinstance(v, m.Tensor) and v.allocation_info is not None}


def _passes(original: Path, rewritten: Path, **kw: object) -> None:
    result = api.validate(original, rewritten, **kw)
    failed = {c.name: c.detail for mv in result.methods for c in mv.checks if not c.passed}
    assert result.passed, failed


@pytest.mark.parametrize("fold", [False, True], ids=["plain", "fold"])
def test_a_view_of_a_device_copy_follows_its_constant_in_both_encodings(fold: bool, tmp_path: Path) -> None:
    """Every constant moves; the view lies where the constant's holder starts; each rewrite and each conversion
    passes validate (the runner executes the delegate twice, the second time through the view) against the
    original and against the file it came from."""
    forged = _forged(tmp_path)
    assert all(not reasons for reasons in _verdicts(forged).values()), _verdicts(forged)
    files = {}
    for runtime in ("1.6", "1.5"):
        out = tmp_path / f"{runtime}.pte"
        result = rewrite_file(forged, out, options=RewriteOptions(fold=fold, encoding=encoding_for(runtime)),
                              durable=False)
        (edit,) = result.plan.methods
        followers = [(view, p.holder) for p in edit.placements for c in p.copies for view in c.views]
        assert len(followers) == 1
        view, holder = followers[0]
        assert _placed(out)[view] == _placed(out)[holder]
        _passes(forged, out, simulate_devices=True, calls=3)
        files[runtime] = out
    for before, after in (("1.6", "1.5"), ("1.5", "1.6")):
        converted = tmp_path / f"{before}-{after}.pte"
        rewrite_file(files[before], converted, options=RewriteOptions(fold=fold, encoding=encoding_for(after)),
                              durable=False)
        for source in (forged, files[before]):
            _passes(source, converted, simulate_devices=True, calls=3)


@pytest.mark.parametrize("runtime", ["1.6", "1.5"])
@pytest.mark.parametrize("fold", [False, True], ids=["plain", "fold"])
def test_the_real_runtime_agrees_with_a_view_on_the_resident_copy(runtime: str, fold: bool, tmp_path: Path) -> None:
    """XNNPACK as the device delegate, flipped to the CPU and run in ExecuTorch 1.5.1 over three calls: outputs
    bit for bit (the second call's, through the view, are what the method returns), first-call copies once."""
    forged = _forged(tmp_path, "mlp_xnnpack_copy")
    out = tmp_path / "out.pte"
    result = rewrite_file(forged, out, options=RewriteOptions(fold=fold, encoding=encoding_for(runtime)),
                              durable=False)
    (edit,) = result.plan.methods
    assert [view for p in edit.placements for c in p.copies for view in c.views] == [len(_values(forged)) - 1]
    assert not [c for c in analyze_file(forged).methods[0].constants if c.reasons]
    _passes(forged, out, inputs=EXAMPLES / "mlp_xnnpack_copy.inputs.pt", engine="executorch")


@pytest.mark.parametrize("variant, reason, detail", [
    ({"also_first": True}, "its device copy is also read through a static view of other data",
     "a view of its memory that is also used where another value's bytes are there"),
    ({"sizes": (600,)}, "its device copy is also read through a larger static view", "a view larger than its bytes"),
    ({"host_reader": True}, "its device copy is also read through a static view by the host",
     "read by host kernel et_copy::_d2h_copy.out"),
])
def test_a_view_that_cannot_follow_keeps_the_copy_and_says_why(variant: dict[str, object], reason: str, detail: str,
                                                                 tmp_path: Path) -> None:
    forged = _forged(tmp_path, **variant)
    (method,) = analyze_file(forged).methods
    viewed = method.constants[0]  # the first constant copied: the forge's
    assert viewed.reasons == (reason,), viewed.details
    assert detail in viewed.details[0]
    out = tmp_path / "out.pte"
    result = invoke("rewrite", forged, "-o", out)  # the others move; the self-check proves the file
    assert result.exit_code == 0, result.stderr
    if variant.get("also_first"):  # the one the delegate still runs (its blob fixes the view's shape)
        _passes(forged, out, simulate_devices=True, calls=3)


def test_the_self_check_refuses_a_view_left_where_the_copy_was(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A writer that forgets to point the view at the holder: the output would read bytes nothing writes any more.
    The self-check's own reading of the two programs refuses it, and nothing is written."""
    forged = _forged(tmp_path)
    monkeypatch.setattr(edit_module, "on_holder", lambda view, holder: view)
    out = tmp_path / "out.pte"
    with pytest.raises(RewriteCheckError, match="is not the input's view where value"):
        rewrite_file(forged, out, durable=False, options=RewriteOptions(relayout=False))
    assert not out.exists()


def test_the_byte_replay_refuses_a_view_the_analysis_let_follow_wrongly(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """An analysis that lets a view follow although it also reads what the previous call left (the call also first
    in the chain): structurally the file is what the plan says, and only the byte replay, which asks nothing of
    the analysis, sees the read change."""
    from pte_devconst.program import method_context

    forged = _forged(tmp_path, also_first=True)
    monkeypatch.setattr(method_context, "_views_refusal", lambda ctx, dst, views: None)
    monkeypatch.setattr(method_context.CopyMemory, "problem", lambda self, *a, **k: None)
    out = tmp_path / "out.pte"
    with pytest.raises(RewriteCheckError, match="byte replay"):
        rewrite_file(forged, out, durable=False, options=RewriteOptions(relayout=False))
    assert not out.exists()
