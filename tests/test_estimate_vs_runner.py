"""The static per-call host-to-device figure (inspect, diff, check) equals what the runner measures.

Every committed program: the corpus, the examples, the real-model fixtures (copy and legacy style,
``all`` and ``mm`` partitions, CPU programs) and the MoE and Swin ``mm`` exports (tests/fixtures/moe_swin),
each before and after its rewrite.  The runner counts
every copy as it happens (``runner/copies.py``), with the backends' own executors and with opaque
stand-ins; the figure is computed from the program alone (``program/transfers.py``).  Sizes of dynamic shapes
are their upper bounds, so a dynamic program is measured on a call at its largest shapes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import pytest

from conftest import CASES, CORPUS, EXAMPLES, FIXTURES, ptd_path, pte_path, shipped
from pte_devconst.rewriter.load import analyze_file
from pte_devconst.rewriter.rewrite import rewrite_file
from pte_devconst.schema import model as m
from pte_devconst.schema.pte_file import open_pte

torch = pytest.importorskip("torch")
from pte_devconst.runner import run_program  # noqa: E402
from pte_devconst.runner.delegates import OpaquePolicy  # noqa: E402

REAL = FIXTURES / "real_models"
MOE_SWIN = FIXTURES / "moe_swin"  # examples/moe_swin_models.py: matmul-only partitions of a Mixtral and a Swin


def _cases():
    for name in CASES:
        yield pytest.param(pte_path(name), ptd_path(name), CORPUS / f"{name}.inputs.pt", id=name)
    for name in shipped(EXAMPLES):
        yield pytest.param(EXAMPLES / f"{name}.pte", None, EXAMPLES / f"{name}.inputs.pt", id=f"example-{name}")
    for name in shipped(REAL):
        yield pytest.param(REAL / f"{name}.pte", None, REAL / f"{name}.inputs.pt", id=f"real-{name}")
    for name in shipped(MOE_SWIN):
        yield pytest.param(MOE_SWIN / f"{name}.pte", None, MOE_SWIN / f"{name}.inputs.pt", id=f"moe_swin-{name}")


def _at_upper_bounds(plan: m.ExecutionPlan, call: list[Any]) -> list[Any]:
    """The call with every DYNAMIC_BOUND tensor input grown to its planned sizes (its values kept, zeros after)."""
    grown = []
    for index, given in zip(plan.inputs or (), call):
        spec = plan.values[index]
        if (isinstance(spec, m.Tensor) and isinstance(given, torch.Tensor)
                and spec.shape_dynamism != m.TensorShapeDynamism.STATIC and tuple(given.shape) != tuple(spec.sizes)):
            full = torch.zeros(tuple(spec.sizes), dtype=given.dtype)
            full[tuple(slice(0, n) for n in given.shape)] = given
            given = full
        grown.append(given)
    return grown


def _first_call(path: Path, method: str, inputs: Path) -> list[Any]:
    loaded = torch.load(inputs, weights_only=False)
    calls = loaded.get(method, next(iter(loaded.values()))) if isinstance(loaded, dict) else loaded
    call = calls[0] if isinstance(calls, list) and calls and isinstance(calls[0], (list, tuple)) else calls
    with open_pte(path) as pte:
        return _at_upper_bounds(pte.program.plan(method), list(call))


def _measured(pte: Path, ptd: Optional[Path], method: str, call: list[Any],
              opaque: OpaquePolicy = OpaquePolicy.MISSING) -> int:
    result = run_program(pte, ptd_path=ptd, method=method, inputs=[call], calls=1, simulate_devices=True,
                         opaque=opaque)
    return result.calls[0].copies.h2d.nbytes


@pytest.mark.parametrize("pte, ptd, inputs", list(_cases()))
def test_estimate_matches_runner_before_and_after_rewrite(pte: Path, ptd: Optional[Path], inputs: Path,
                                                          tmp_path: Path) -> None:
    rewritten = tmp_path / "rewritten.pte"
    rewrite_file(pte, rewritten, ptd=ptd)
    for path in (pte, rewritten):
        for method in analyze_file(path, ptd).methods:
            call = _first_call(path, method.name, inputs)
            assert method.h2d_bytes_per_call == _measured(path, ptd, method.name, call), (path.name, method.name)
            if path is pte and method.style != "cpu":
                # Opaque stand-ins (how validate runs a CUDA or TensorRT delegate) split a call's arguments by the
                # program alone (program/dataflow.py), not by the blob: they must copy the same bytes.
                opaque = _measured(path, ptd, method.name, call, OpaquePolicy.ALWAYS)
                assert method.h2d_bytes_per_call == opaque, (path.name, method.name, "opaque")


def _measured_by_value(pte: Path, call: list[Any]) -> dict[int, int]:
    """The runner's host-to-device bytes of one call, by the program value they came from."""
    result = run_program(pte, inputs=[call], calls=1, simulate_devices=True)
    found: dict[int, int] = {}
    for event in result.events:
        if event.phase != "load" and event.direction.value == "h2d":
            found[event.source_value] = found.get(event.source_value, 0) + event.nbytes
    return found


def test_a_dynamic_bound_no_call_reaches_makes_the_figure_a_bound() -> None:
    """``h - h % 4`` rows of an input of h <= 30 rows: planned for 30, never more than 28.  At the largest
    input the delegate copies 28 rows of it: the figure counts 30, and says so (``Transfer.bound``); every
    static copy is exact, value by value."""
    from pte_devconst.program.transfers import per_call_transfers

    path = FIXTURES / "runtime_ops" / "loose_bound_mm_legacy.pte"
    with open_pte(path) as pte:
        plan = pte.program.plan("forward")
    transfers = per_call_transfers(plan)
    call = _at_upper_bounds(plan, [torch.randn(1, 4, 16)])
    assert tuple(call[0].shape) == (1, 30, 16)
    measured = _measured_by_value(path, call)
    assert set(measured) == {t.value for t in transfers}
    loose = [t for t in transfers if t.bound]
    assert [plan.values[t.value].sizes for t in loose] == [(30, 16)]
    for transfer in transfers:
        if transfer.bound:
            assert measured[transfer.value] == 28 * 16 * 4 < transfer.nbytes == 30 * 16 * 4
        else:
            assert measured[transfer.value] == transfer.nbytes
    assert analyze_file(path, None).methods[0].h2d_bytes_per_call == sum(t.nbytes for t in transfers)


def test_inspect_shows_a_bound_figure_as_one() -> None:
    """``inspect`` says ``<=`` (JSON: h2d_per_call_is_bound) exactly when a dynamic tensor counts at its bound."""
    from cli_runner import invoke
    from pte_devconst import api

    loose = FIXTURES / "runtime_ops" / "loose_bound_mm_legacy.pte"
    assert api.analyze(loose).methods[0].h2d_per_call_is_bound
    assert not api.analyze(REAL / "vit_mm_legacy.pte").methods[0].h2d_per_call_is_bound
    shown = invoke("inspect", "--format", "markdown", str(loose))
    assert shown.exit_code == 0 and "(legacy style, <= 2.9 KiB host-to-device per call)" in shown.stdout


def test_h2d_by_value_names_the_value_a_figure_counts_at_its_bound(capsys: pytest.CaptureFixture[str]) -> None:
    """examples/h2d_by_value.py, the tool for a program whose figure and measurement differ, points at the value."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("h2d_by_value", Path(__file__).resolve().parents[1] / "examples"
                                                  / "h2d_by_value.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    assert tool.main([str(FIXTURES / "runtime_ops" / "loose_bound_mm_legacy.pte")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "static 2944 B, measured 2816 B, difference -128 B" in lines[0]
    assert [line.split()[0] for line in lines[2:] if line.endswith("<- bound")] == ["13"]
    assert not any(line.endswith("<- differs") for line in lines)


def _moe_swin_manifest() -> dict[str, dict]:
    import json

    path = MOE_SWIN / "manifest.json"
    return {e["name"]: e for e in json.loads(path.read_text())["fixtures"]} if path.is_file() else {}


@pytest.mark.parametrize("name", shipped(MOE_SWIN))
def test_moe_and_swin_matmul_partitions_are_exact_value_by_value_or_a_marked_bound(name: str) -> None:
    """Issue 19 reported the figure a few KiB off the runner on legacy matmul-only MoE and Swin programs.  On real
    exports of both (examples/moe_swin_models.py) every value a call copies counts exactly what the runner copies
    of it, on every call of the inputs file (the experts each call picks differ), except a DYNAMIC_BOUND tensor's
    (ExecuTorch's MoE LLaMA, exported with a dynamic token count), which counts its planned bound, copies no more
    on any call and is marked; ``inspect`` calls the figure a bound exactly then.  The copies include
    constant-derived ones (the experts' gathered weights, Swin's attention mask and position bias)."""
    from pte_devconst import api
    from pte_devconst.program.transfers import per_call_transfers

    path = MOE_SWIN / f"{name}.pte"
    dynamic = _moe_swin_manifest()[name]["dynamic"]
    with open_pte(path) as pte:
        plan = pte.program.plan("forward")
    static: dict[int, int] = {}
    bound: set[int] = set()
    for transfer in per_call_transfers(plan):
        static[transfer.value] = static.get(transfer.value, 0) + transfer.nbytes
        if transfer.bound:
            bound.add(transfer.value)
    assert bool(bound) == dynamic
    calls = [list(c) for c in torch.load(MOE_SWIN / f"{name}.inputs.pt", weights_only=False)["forward"]]
    expected = torch.load(MOE_SWIN / f"{name}.expected.pt", weights_only=False)["forward"]
    assert len(calls) >= 2
    result = run_program(path, inputs=calls, calls=len(calls), simulate_devices=True)
    by_call: dict[str, dict[int, int]] = {}
    for event in result.events:
        if event.phase != "load" and event.direction.value == "h2d":
            found = by_call.setdefault(event.phase, {})
            found[event.source_value] = found.get(event.source_value, 0) + event.nbytes
    assert len(by_call) == len(calls)
    for measured in by_call.values():
        assert set(measured) == set(static)
        for value, nbytes in static.items():
            if value in bound:
                assert measured[value] <= nbytes, value
            else:
                assert measured[value] == nbytes, value
    for call, want in zip(result.calls, expected, strict=True):
        assert call.copies.constant_derived_h2d.nbytes > 0
        if dynamic:
            assert call.copies.h2d.nbytes < sum(static.values())
        else:
            assert call.copies.h2d.nbytes == sum(static.values())
        for got, ref in zip(call.outputs, want, strict=True):  # the runner ran the model, not a stand-in
            assert torch.allclose(got, ref, rtol=1e-4, atol=1e-5)
    method = api.analyze(path).methods[0]
    assert method.h2d_bytes_per_call == sum(static.values()) and method.h2d_per_call_is_bound == dynamic


def test_the_moe_and_swin_fixtures_are_current_and_small() -> None:
    """tests/fixtures/moe_swin/manifest.json names every program there, with each file's sha256 (so the
    generator's output and the committed files are one), and the folder stays small."""
    import hashlib
    import json

    manifest = json.loads((MOE_SWIN / "manifest.json").read_text())
    assert {e["name"] for e in manifest["fixtures"]} == set(shipped(MOE_SWIN))
    assert {e["architecture"] for e in manifest["fixtures"]} >= {"mixtral", "swin", "et_moe"}
    total = 0
    for entry in manifest["fixtures"]:
        assert entry["partition"] == "mm" and entry["style"] in ("legacy", "copy")
        for file in entry["files"]:
            data = (MOE_SWIN / file["file"]).read_bytes()
            assert hashlib.sha256(data).hexdigest() == file["sha256"], file["file"]
            total += len(data)
    assert total < 800_000
