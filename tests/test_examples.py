"""The committed example programs: small, exported by examples/export_examples.py, and runnable by the runner."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import pytest
import torch

from conftest import EXAMPLES, shipped
from et_oracle import run_with_executorch
from pte_devconst.rewriter import analyze_file
from pte_devconst.runner import Cause, Direction, run_program
from pte_devconst.schema.pte_file import open_pte

ROOT = Path(__file__).resolve().parents[1]
NAMES = shipped(EXAMPLES)
OUTSIDE = [n for n in NAMES if not n.endswith("_cpu") and "inside" not in n]


def calls(name: str, kind: str) -> list:
    return torch.load(EXAMPLES / f"{name}.{kind}.pt", weights_only=True)["forward"]


def load_export_script():
    """examples/ is not a package: the script is imported from its folder, as ``python examples/...`` runs it."""
    if str(ROOT / "examples") not in sys.path:
        sys.path.insert(0, str(ROOT / "examples"))
    return importlib.import_module("export_examples")


def test_the_promised_examples_exist_and_are_small() -> None:
    for style in ("copy", "legacy"):
        for model in ("mlp", "transformer", "two_gpu"):
            assert f"{model}_{style}" in NAMES
    for name in NAMES:
        assert (EXAMPLES / f"{name}.pte").stat().st_size < 100_000
        assert (EXAMPLES / f"{name}.inputs.pt").exists() and (EXAMPLES / f"{name}.expected.pt").exists()


@pytest.mark.parametrize("name", NAMES)
def test_example_matches_eager(name: str) -> None:
    inputs = calls(name, "inputs")
    result = run_program(EXAMPLES / f"{name}.pte", inputs=inputs, calls=len(inputs), simulate_devices=True)
    for call, want in zip(result.calls, calls(name, "expected")):
        for got, expected in zip(call.outputs, want):
            torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)


def test_cpu_example_agrees_with_executorch_runtime() -> None:
    inputs = calls("mlp_cpu", "inputs")
    result = run_program(EXAMPLES / "mlp_cpu.pte", inputs=inputs, calls=len(inputs))
    for call, given in zip(result.calls, inputs):
        for got, live in zip(call.outputs, run_with_executorch(EXAMPLES / "mlp_cpu.pte", "forward", given)):
            torch.testing.assert_close(got, live, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", OUTSIDE)
def test_weights_outside_the_delegate_are_copied_every_call(name: str) -> None:
    analysis = analyze_file(EXAMPLES / f"{name}.pte")
    (method,) = analysis.methods
    eligible = [c for c in method.constants if c.eligible]
    assert eligible and len(eligible) == len(method.constants)  # every weight is read only by device delegates
    result = run_program(EXAMPLES / f"{name}.pte", inputs=calls(name, "inputs"), calls=2, simulate_devices=True)
    for phase in ("call 0", "call 1"):
        copied = {e.source_value for e in result.events if e.phase == phase and e.direction is Direction.H2D}
        assert {c.value for c in eligible} <= copied


def test_two_gpu_example_uses_both_devices() -> None:
    result = run_program(EXAMPLES / "two_gpu_copy.pte", inputs=calls("two_gpu_copy", "inputs"), calls=1,
                         simulate_devices=True)
    assert {e.device for e in result.events if e.direction is Direction.H2D} == {"cuda:0", "cuda:1"}


def test_constants_inside_the_delegate_load_once() -> None:
    result = run_program(EXAMPLES / "mlp_inside_copy.pte", inputs=calls("mlp_inside_copy", "inputs"), calls=2,
                         simulate_devices=True)
    assert {e.cause for e in result.events if e.phase == "load"} == {Cause.DELEGATE_INIT}
    assert result.calls[-1].copies.h2d.count == 1  # only the method input crosses per call
    assert not [c for c in analyze_file(EXAMPLES / "mlp_inside_copy.pte").methods[0].constants if c.eligible]


@pytest.mark.parametrize("name", ["mlp_copy", "two_gpu_legacy", "mlp_inside_copy"])
def test_reference_blob_is_self_describing(name: str) -> None:
    with open_pte(EXAMPLES / f"{name}.pte") as pte:
        for plan in pte.program.execution_plan:
            for delegate in plan.delegates:
                assert delegate.id == "PteDevconstReference"
                blob = json.loads(bytes(pte.delegate_blob(delegate)))
                assert blob["format"] == "pte-devconst-reference" and blob["version"] == 1
                assert blob["target_device"] == delegate.compile_spec("target_device").decode()
                assert all(node["op"].startswith("aten::") for node in blob["nodes"])
                for constant in blob["constants"]:
                    assert pte.named_data(constant["key"]) is not None


def test_export_script_reproduces_a_committed_example(tmp_path: Path) -> None:
    module = load_export_script()
    (path,) = module.export_all(tmp_path, only={"mlp_legacy"})
    assert path.read_bytes() == (EXAMPLES / "mlp_legacy.pte").read_bytes()
    # Inputs and expected outputs are floats computed by eager PyTorch, whose last bits vary with the CPU's
    # vector units (6e-8 apart on one AMD machine): equal within a tolerance, not bit for bit.
    for kind in ("inputs", "expected"):
        got = torch.load(tmp_path / f"mlp_legacy.{kind}.pt", weights_only=True)["forward"]
        stored = calls("mlp_legacy", kind)
        assert len(got) == len(stored)
        for a, b in zip(got, stored):
            assert len(a) == len(b)
            for x, y in zip(a, b):
                torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-6)


def test_copy_style_export_needs_and_restores_the_clone_spec_patch() -> None:
    module = load_export_script()
    from executorch.exir.passes import propagate_device_pass

    original = propagate_device_pass._clone_spec_with_device
    with module.clone_spec_patch():
        assert propagate_device_pass._clone_spec_with_device is not original
    assert propagate_device_pass._clone_spec_with_device is original


@pytest.mark.slow
def test_export_script_reproduces_every_committed_example(tmp_path: Path) -> None:
    module = load_export_script()
    for path in module.export_all(tmp_path):
        assert path.read_bytes() == (EXAMPLES / path.name).read_bytes(), path.name


@pytest.mark.slow
def test_big_variant_has_at_least_256_mib_of_constants_outside_the_delegate(tmp_path: Path) -> None:
    module = load_export_script()
    (path,) = module.export_all(tmp_path, big=True, only={"mlp_big_legacy"})
    (method,) = analyze_file(path).methods
    assert sum(c.nbytes for c in method.constants if c.eligible) >= 256 * 1024 * 1024


def test_tests_never_collect_programs_the_tool_writes(tmp_path: Path) -> None:
    """The README's first command leaves NAME.devconst.pte in examples/models; the suite must ignore it."""
    for name in ("model", "model.devconst"):
        (tmp_path / f"{name}.pte").write_bytes(b"")
    (tmp_path / "model.inputs.pt").write_bytes(b"")
    assert shipped(tmp_path) == ["model"]
    assert not [n for n in NAMES if n.endswith(".devconst")]
