"""The static per-call host-to-device figure (inspect, diff, check) equals what the runner measures.

Every committed program: the corpus, the examples and the real-model fixtures (copy and legacy style,
``all`` and ``mm`` partitions, CPU programs), each before and after its rewrite.  The runner counts
every copy as it happens (``runner/copies.py``), with the backends' own executors and with opaque
stand-ins; the figure is computed from the program alone (``program/transfers.py``).  Sizes of dynamic shapes are their upper bounds, so a dynamic program is
measured on a call at its largest shapes.
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


def _cases():
    for name in CASES:
        yield pytest.param(pte_path(name), ptd_path(name), CORPUS / f"{name}.inputs.pt", id=name)
    for name in shipped(EXAMPLES):
        yield pytest.param(EXAMPLES / f"{name}.pte", None, EXAMPLES / f"{name}.inputs.pt", id=f"example-{name}")
    for name in shipped(REAL):
        yield pytest.param(REAL / f"{name}.pte", None, REAL / f"{name}.inputs.pt", id=f"real-{name}")


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
