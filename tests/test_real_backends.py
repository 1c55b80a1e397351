"""docs/real-backends.md on real exports: ExecuTorch 1.5.1's own partitioners, and ``with_target_device``.

* ``with_target_device(XnnpackPartitioner(force_non_static_weights_for_f32_linear=True))``: a real partitioner that
  passes linear weights to its delegates as inputs, its delegates marked for ``cuda:0``.  The export (copy style,
  with ``clone_spec_patch``) is what the guide's worked example builds; ``inspect`` must see every weight as
  eligible, ``rewrite`` move them, ``check`` pass on the result and ``validate`` (simulated devices; XNNPACK runs
  as an opaque stand-in) accept it.
* ``CudaPartitioner``'s partitioning (``AotiPartitioner``, the class it derives from, with the project's reference
  backend in place of AOTInductor, which needs a GPU to compile): every constant goes inside the delegate, so
  ``inspect`` finds none copied per call, as the guide says.

The exports run once per module; the heavy imports run at collection, so no test pays for them.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("executorch.exir")
xnnpack = pytest.importorskip("executorch.backends.xnnpack.partition.xnnpack_partitioner")
aoti = pytest.importorskip("executorch.backends.aoti.aoti_partitioner")

from executorch.exir import ExecutorchBackendConfig, to_edge_transform_and_lower  # noqa: E402
from executorch.exir.backend.compile_spec_schema import CompileSpec  # noqa: E402

from cli_runner import invoke  # noqa: E402
from pte_devconst import PteDevconstError, check, inspect, rewrite, validate  # noqa: E402
from pte_devconst.exporting import clone_spec_patch, with_target_device  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "real-backends.md"
WEIGHTS = ["0.weight", "0.bias", "2.weight", "2.bias"]


def _model() -> Any:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8)).eval()


def _export(partitioner: Any) -> Any:
    """The guide's export: copy style (1.5.1's default) with the patch it needs for device delegates."""
    exported = torch.export.export(_model(), (torch.randn(4, 16),))
    edge = to_edge_transform_and_lower(exported, partitioner=[partitioner])
    with clone_spec_patch():
        return edge.to_executorch(ExecutorchBackendConfig(enable_non_cpu_memory_planning=True))


@pytest.fixture(scope="module")
def xnnpack_on_cuda() -> Any:
    return _export(with_target_device(xnnpack.XnnpackPartitioner(force_non_static_weights_for_f32_linear=True)))


def test_a_partitioner_that_keeps_weights_outside_gives_eligible_constants(xnnpack_on_cuda: Any) -> None:
    report = inspect(xnnpack_on_cuda)
    (method,) = report.summary.methods
    assert {(d.backend_id, str(d.device)) for d in method.delegates} == {("XnnpackBackend", "cuda:0")}
    assert {c.name: c.verdict for c in method.constants} == {name: "eligible:cuda:0" for name in WEIGHTS}
    result = rewrite(xnnpack_on_cuda)  # in memory
    assert sorted(p.name for p in result.plan.placements) == sorted(WEIGHTS)
    assert not check(xnnpack_on_cuda).passed and check(result.data).passed


def test_the_rewrite_of_the_worked_example_validates(xnnpack_on_cuda: Any) -> None:
    """The rewrite computes what the export computes (XNNPACK runs as a seeded stand-in: every delegate call must
    receive the same bytes) and copies the weights once, at load."""
    outcome = validate(xnnpack_on_cuda, rewrite(xnnpack_on_cuda).data, simulate_devices=True)
    assert outcome.passed, outcome.to_json()


def test_the_guides_inspect_output_is_the_real_one(xnnpack_on_cuda: Any, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The guide's ``pte-devconst inspect`` block is this export's output, line for line (80 columns)."""
    (block,) = re.findall(r"```console\n\$ pte-devconst inspect (\S+)\n(.*?)```", GUIDE.read_text(), re.DOTALL)
    name, shown = block
    monkeypatch.chdir(tmp_path)
    Path(name).write_bytes(xnnpack_on_cuda.buffer)
    done = invoke("inspect", name, env={"COLUMNS": "80", "NO_COLOR": "1"})
    assert done.exit_code == 0, done.stderr
    assert [line.rstrip() for line in done.stdout.splitlines()] == shown.rstrip("\n").splitlines()


def test_cuda_partitioners_partitioning_takes_every_constant_inside() -> None:
    """``CudaPartitioner`` is ``AotiPartitioner`` with the CUDA backend and ``target_device``: every operator goes
    to the delegate and ``tag_constant_data`` takes every constant with it, so nothing is copied per call."""
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        import devconst_backend  # the reference backend stands for AOTInductor, which compiles only on a GPU
    finally:
        sys.path.remove(str(ROOT / "examples"))
    partitioner = aoti.AotiPartitioner(devconst_backend.BACKEND_ID, [CompileSpec("target_device", b"cuda:0")])
    et = _export(partitioner)
    report = inspect(et)
    (method,) = report.summary.methods
    assert [str(d.device) for d in method.delegates] == ["cuda:0"] and method.constants == ()
    assert len([s for s in report.summary.segments if s.role.startswith("named data")]) == len(WEIGHTS)
    assert check(et).passed and not rewrite(et).changed


def test_with_target_device_keeps_a_device_the_partitioner_gave_and_refuses_the_cpu() -> None:
    class Fixed(aoti.AotiPartitioner):  # a partitioner whose delegates already name their device
        pass

    inner = Fixed("SomeBackend", [CompileSpec("target_device", b"cuda:1")])
    wrapped = with_target_device(inner, "cuda:0")
    exported = torch.export.export(_model(), (torch.randn(4, 16),))
    from executorch.exir import to_edge

    tags = wrapped.partition(to_edge(exported).exported_program()).partition_tags
    assert tags and all([(s.key, s.value) for s in spec.compile_specs] == [("target_device", b"cuda:1")]
                        for spec in tags.values())
    for device in ("cpu", "gpu:0", "cuda:x", "cuda:0,cuda:1"):
        with pytest.raises(PteDevconstError):
            with_target_device(inner, device)
