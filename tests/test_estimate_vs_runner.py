"""The static per-call host-to-device estimate (inspect, diff, check) equals what the runner measures."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import CASES, CORPUS, EXAMPLES, ptd_path, pte_path, shipped
from pte_devconst.rewriter.load import analyze_file
from pte_devconst.rewriter.rewrite import rewrite_file

pytest.importorskip("torch")
from pte_devconst.runner import run_program  # noqa: E402

DEVICE_CASES = [n for n in CASES if not n.endswith(("_cpu", "_cpu_only", "_xnnpack"))]
EXAMPLE_CASES = shipped(EXAMPLES)


def _measured(pte: Path, ptd, method: str, inputs) -> int:
    result = run_program(pte, ptd_path=ptd, method=method, inputs=inputs, calls=1, simulate_devices=True)
    return result.calls[0].copies.h2d.nbytes


def _cases():
    for name in DEVICE_CASES:
        yield pytest.param(pte_path(name), ptd_path(name), CORPUS / f"{name}.inputs.pt", id=name)
    for name in EXAMPLE_CASES:
        yield pytest.param(EXAMPLES / f"{name}.pte", None, EXAMPLES / f"{name}.inputs.pt", id=f"example-{name}")


@pytest.mark.parametrize("pte, ptd, inputs", list(_cases()))
def test_estimate_matches_runner_before_and_after_rewrite(pte: Path, ptd, inputs: Path, tmp_path: Path) -> None:
    rewritten = tmp_path / "rewritten.pte"
    rewrite_file(pte, rewritten, ptd=ptd)
    for path in (pte, rewritten):
        for method in analyze_file(path, ptd).methods:
            assert method.h2d_bytes_per_call == _measured(path, ptd, method.name, inputs), (path.name, method.name)
