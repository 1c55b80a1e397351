"""Delegates the installed ExecuTorch runtime registers run through it, for real (runner/runtime_backend.py).

XNNPACK, the default CPU backend, is the one the 1.5.1 wheel registers.  The fixtures
(``tests/fixtures/xnnpack``, ``examples/xnnpack_fixtures.py``) are real exports: XNNPACK alone (static and
dynamic shapes, weights inside or outside the delegate), XNNPACK tagged with a device, and XNNPACK on the host
next to the reference backend on ``cuda:0``.  ``NAME.runtime.pt`` holds the real runtime's outputs of the whole
program, which the runner must reproduce bit for bit.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from cli_runner import invoke
from conftest import CORPUS, pte_path
from et_oracle import run_calls_with_executorch
from forge import flip_byte
from pte_devconst.rewriter import rewrite_file
from pte_devconst.runner import RunnerError, run_program
from pte_devconst.runner.delegates import Execution, OpaquePolicy
from pte_devconst.runner import one_delegate
from pte_devconst.runner.staging import staged_program
from pte_devconst.runner.one_delegate import delegate_program, named_keys_in
from pte_devconst.runner.validate import validate
from pte_devconst.program.dataflow import delegate_call_sites
from pte_devconst.schema import model as m
from pte_devconst.schema.pte_file import open_pte
from test_report_schema import SCHEMA_FILE, assert_valid

XNNPACK = Path(__file__).resolve().parent / "fixtures" / "xnnpack"
RUNTIME = "ExecuTorch runtime"


def _load(path: Path) -> list:
    return torch.load(path, weights_only=True)["forward"]


def _bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.view(torch.int32), b.view(torch.int32))


@pytest.mark.parametrize("path", [CORPUS / "v_h_xnnpack.pte", XNNPACK / "mlp_cpu.pte",
                                  XNNPACK / "mlp_dynamic_cpu.pte", XNNPACK / "mlp_nonstatic_cpu.pte"],
                         ids=lambda p: p.stem)
def test_xnnpack_programs_run_bit_for_bit_as_the_runtime_runs_them(path: Path) -> None:
    """The runner's outputs are the recorded runtime outputs, call after call (the dynamic program's calls have 8,
    3 and 1 rows: the runtime resizes the delegate's outputs and the runner follows)."""
    calls = _load(path.with_suffix(".inputs.pt"))
    recorded = _load(path.with_suffix(".runtime.pt"))
    result = run_program(path, inputs=calls, calls=len(calls))
    for call, want in zip(result.calls, recorded):
        assert len(call.outputs) == len(want) and all(_bits(a, b) for a, b in zip(call.outputs, want))
    assert {d.execution for d in result.delegates} == {Execution.RUNTIME} and not result.opaque_backends


def test_the_recorded_outputs_are_the_live_runtime_s() -> None:
    calls = _load(XNNPACK / "mlp_dynamic_cpu.inputs.pt")
    live = run_calls_with_executorch(XNNPACK / "mlp_dynamic_cpu.pte", "forward", calls)
    result = run_program(XNNPACK / "mlp_dynamic_cpu.pte", inputs=calls, calls=len(calls))
    assert [tuple(o[0].shape) for o in live] == [(8, 16), (3, 16), (1, 16)]
    assert all(_bits(call.outputs[0], want[0]) for call, want in zip(result.calls, live))


def test_validate_expected_on_a_real_xnnpack_program_is_bit_for_bit(tmp_path: Path) -> None:
    """``--expected`` was refused on XNNPACK programs (every output came from a stand-in); now it compares the
    runtime's outputs with rtol=atol=0, and one ulp off in the expected outputs fails the check."""
    path = XNNPACK / "mlp_cpu.pte"
    inputs, expected = path.with_suffix(".inputs.pt"), path.with_suffix(".runtime.pt")
    result = validate(path, path, inputs=inputs, expected=expected, rtol=0.0, atol=0.0)
    checks = {c.name: c for c in result.methods[0].checks}
    assert result.passed and checks["outputs match expected"].status.value == "pass"
    assert "not compared" not in checks["outputs match expected"].detail
    off = [[torch.nextafter(o[0], torch.tensor(float("inf")))] for o in _load(expected)]
    torch.save({"forward": off}, tmp_path / "off.pt")
    failed = validate(path, path, inputs=inputs, expected=tmp_path / "off.pt", rtol=0.0, atol=0.0)
    assert not failed.passed
    assert {c.name: c for c in failed.methods[0].checks}["outputs match expected"].status.value == "fail"


@pytest.mark.parametrize("style", ["copy", "legacy"])
def test_xnnpack_as_a_device_delegate_validates_bit_for_bit_after_its_rewrite(style: str, tmp_path: Path) -> None:
    """XNNPACK tagged ``target_device=cuda:0``, its weights outside: the rewrite makes them device-resident, and
    the runtime's XNNPACK, given them from (simulated) device memory, computes what it computes on the host."""
    name = f"mlp_device_{style}"
    out = tmp_path / f"{name}.devconst.pte"
    rewrite_file(XNNPACK / f"{name}.pte", out)
    result = validate(XNNPACK / f"{name}.pte", out, inputs=XNNPACK / f"{name}.inputs.pt",
                      expected=XNNPACK / "mlp_nonstatic_cpu.runtime.pt", rtol=0.0, atol=0.0, simulate_devices=True)
    method = result.methods[0]
    assert result.passed, [(c.name, c.detail) for c in method.checks]
    assert len(method.moved) == 5 and method.calls[-1].h2d_after < method.calls[-1].h2d_before
    assert [(d.backend_id, d.device, d.execution) for d in method.rewritten.delegates] == [
        ("XnnpackBackend", "cuda:0", Execution.RUNTIME)]


@pytest.mark.parametrize("style", ["copy", "legacy"])
def test_a_mixed_program_validates_with_xnnpack_executed_for_real(style: str, tmp_path: Path) -> None:
    """XNNPACK on the host, the reference backend on cuda:0: every output is computed (none is a stand-in), so
    the expected outputs are compared, and the reports say which delegate ran where."""
    name = f"mlp_mixed_{style}"
    out = tmp_path / f"{name}.devconst.pte"
    rewrite_file(XNNPACK / f"{name}.pte", out)
    args = [XNNPACK / f"{name}.pte", out, "--simulate-devices", "--inputs", XNNPACK / f"{name}.inputs.pt",
            "--expected", XNNPACK / f"{name}.expected.pt"]
    done = invoke("validate", *args, "--format", "json")
    assert done.exit_code == 0, done.output
    report = json.loads(done.stdout)
    assert_valid(_validator(), report, "validate")
    method = report["methods"][0]
    assert method["opaque_backends"] == [] and method["moved_constants"]
    runs = {(d["backend"], d["device"], d["execution"]) for d in method["delegates"]["rewritten"]}
    assert runs == {("XnnpackBackend", "cpu", RUNTIME), ("PteDevconstReference", "cuda:0", "runner executor")}
    expected = {c["name"]: c for c in method["checks"]}["outputs match expected"]
    assert expected["status"] == "pass" and "not compared" not in expected["detail"]
    text = invoke("validate", *args)
    assert text.exit_code == 0 and f"XnnpackBackend (cpu) #0, #2, #4: {RUNTIME}" in text.stdout
    assert "PteDevconstReference (cuda:0) #1, #3: runner executor" in text.stdout


def test_opaque_delegates_still_make_every_delegate_a_stand_in() -> None:
    result = run_program(XNNPACK / "mlp_mixed_copy.pte", simulate_devices=True, opaque=OpaquePolicy.ALWAYS)
    assert {d.execution for d in result.delegates} == {Execution.STAND_IN}
    assert result.opaque_backends == ["PteDevconstReference", "XnnpackBackend"]


def _validator():  # type: ignore[no-untyped-def]
    import jsonschema

    return jsonschema.Draft202012Validator(json.loads(SCHEMA_FILE.read_text()))


def _broken_blob(tmp_path: Path) -> Path:
    """v_h_xnnpack with its blob's magic (``XH00``) changed: a blob XNNPACK refuses at init."""
    data = pte_path("v_h_xnnpack").read_bytes()
    return flip_byte(pte_path("v_h_xnnpack"), tmp_path / "broken.pte", data.index(b"XH00") + 1)


def test_a_blob_the_runtime_cannot_load_is_an_error_in_run_and_in_validate(
        tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """A backend that refuses its blob is the backend's own error everywhere: validate does not swap in a stand-in
    (which would pass a program the real backend refuses)."""
    broken = _broken_blob(tmp_path)
    with pytest.raises(RunnerError, match=r"delegate 0 \(XnnpackBackend\).*ExecuTorch runtime failed to load"):
        run_program(broken)
    with pytest.raises(RunnerError, match=r"delegate 0 \(XnnpackBackend\).*Serialization Format version"):
        validate(broken, broken, inputs=CORPUS / "v_h_xnnpack.inputs.pt")
    for command in ("run", "validate"):
        args = (broken,) if command == "run" else (broken, broken, "--inputs", CORPUS / "v_h_xnnpack.inputs.pt")
        done = invoke(command, *args)
        assert done.exit_code == 2 and len(done.stderr.strip().splitlines()) == 1, (command, done.stderr)
        assert "ExecuTorch runtime failed to load the delegate" in done.stderr
    native = capfd.readouterr()
    assert "cpuinfo" not in native.err and "[method.cpp" not in native.err  # the runtime's log is quoted, not echoed


def test_run_reports_say_what_ran_each_delegate() -> None:
    path = XNNPACK / "mlp_mixed_legacy.pte"
    done = invoke("run", path, "--simulate-devices", "--format", "json")
    report = json.loads(done.stdout)
    assert_valid(_validator(), report, "run")
    assert [(d["index"], d["execution"]) for d in report["delegates"]] == [
        (0, RUNTIME), (1, "runner executor"), (2, RUNTIME), (3, "runner executor"), (4, RUNTIME)]
    markdown = invoke("run", path, "--simulate-devices", "--format", "markdown").stdout
    assert f"> delegates: XnnpackBackend (cpu) \\#0, \\#2, \\#4: {RUNTIME}" in markdown


def test_the_one_delegate_program_holds_the_blob_its_call_and_the_named_data_it_names() -> None:
    """What the runtime loads, read back with the project's reader: one method per call, the call's inputs and
    outputs as the method's, outputs planned and inputs it only reads unplanned (the runtime reads them where the
    caller keeps them), the blob unchanged, and only the named data the blob names."""
    with open_pte(XNNPACK / "mlp_nonstatic_cpu.pte") as pte:
        plan = pte.program.execution_plan[0]
        (delegate,) = plan.delegates
        blob = bytes(pte.delegate_blob(delegate))
        keys = tuple(e.key for e in pte.program.named_data or ())
        sites = delegate_call_sites(plan)
        built = delegate_program(delegate.id, blob, {}, sites, plan.values, pte.named_data, keys + ("unused",))
    with staged_program(built.program, built.contents) as path, open_pte(path) as one:  # as the executor loads it
        (method,) = one.program.execution_plan
        assert bytes(one.delegate_blob(method.delegates[0])) == blob
        assert [e.key for e in one.program.named_data or ()] == [k for k in keys if k.encode() in blob]
        (site,) = sites
        call = built.methods[site.args]
        assert [method.values[i].sizes for i in method.inputs] == [plan.values[i].sizes for i in call.inputs]
        assert call.inputs == site.inputs and call.outputs == site.outputs
        assert all(v.data_buffer_idx == 0 for v in method.values if isinstance(v, m.Tensor))
        assert all(method.values[i].allocation_info is None for i in method.inputs)
        assert all(method.values[i].allocation_info is not None for i in method.outputs)


def test_named_data_keys_are_found_as_strings_then_anywhere_within_a_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    """A key a flatbuffer names is a NUL-delimited token (one pass); a key inside other bytes is found by a
    search whose cost is bounded, past which it is not looked for (the runtime would then refuse the init)."""
    blob = b"\x40\x00\x00\x00" + b"a" * 64 + b"\x00junk[inner-key]junk\x00"
    keys = ["b" * 64, "inner-key", "a" * 64, "a" * 64, "missing"]
    assert named_keys_in([blob], keys) == ["inner-key", "a" * 64]
    assert named_keys_in([blob, b"spec-key"], ["spec-key"]) == ["spec-key"]  # a compile spec's value counts
    monkeypatch.setattr(one_delegate, "SEARCH_BUDGET", 0)
    assert named_keys_in([blob], keys) == ["a" * 64]
