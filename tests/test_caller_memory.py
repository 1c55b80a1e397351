"""Tensors the caller owns (``MemoryPlanningPass(alloc_graph_input=False, alloc_graph_output=False)``).

The fixtures (``tests/fixtures/caller_memory``, ``examples/caller_memory_fixtures.py``) are a tiny Gemma 3
decoder from ``transformers`` exported by the real 1.5.1 exporter, on the host and with every op delegated
to the reference backend on ``cuda:0`` in both styles.  Unplanned inputs are bound as the caller gives them
(``set_input``), unplanned outputs to a host buffer (``set_output_data_ptr``), and in copy style the
delegate outputs the exporter leaves unplanned to a buffer on the delegate's device; before, ``validate``
stopped there with ``value 84 is used but has no data (not bound)``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from cli_runner import invoke
from et_oracle import run_calls_with_executorch
from forge import edit_plans, edit_program, with_value
from pte_devconst.rewriter import rewrite_file
from pte_devconst.runner import RunnerError, run_program
from pte_devconst.runner.memory import CallerRole
from pte_devconst.runner.validate import validate
from pte_devconst.schema import model as m
from pte_devconst.schema.pte_file import open_pte
from pte_devconst.util.errors import PteDevconstError
from test_report_schema import SCHEMA_FILE, assert_valid

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "caller_memory"
INPUTS, EXPECTED = FIXTURES / "gemma3.inputs.pt", FIXTURES / "gemma3.expected.pt"
DELEGATE_OUTPUT = 84  # the device delegate's output the copy-style exports leave unplanned


def _calls() -> list:
    return torch.load(INPUTS, weights_only=True)["forward"]


def _unplanned(path: Path) -> tuple[set[int], set[int]]:
    """(method inputs, method outputs) of ``path`` that have no planned memory."""
    with open_pte(path) as pte:
        plan = pte.program.execution_plan[0]
        return ({i for i in plan.inputs if plan.values[i].allocation_info is None},
                {i for i in plan.outputs if plan.values[i].allocation_info is None})


@pytest.mark.parametrize("plan", ["out", "inout"])
def test_caller_owned_host_programs_compute_what_the_runtime_computes(plan: str) -> None:
    """Real ExecuTorch runs the CPU programs with the caller's tensors; the runner gives the same outputs."""
    path = FIXTURES / f"gemma3_{plan}_cpu.pte"
    inputs, outputs = _unplanned(path)
    assert outputs and bool(inputs) == (plan == "inout")
    calls = _calls()
    given = [tuple(t.clone() for t in call) for call in calls]
    live = run_calls_with_executorch(path, "forward", calls)
    result = run_program(path, inputs=given, calls=len(calls))
    for call, want in zip(result.calls, live):
        torch.testing.assert_close(call.outputs[0], want[0], rtol=1e-5, atol=1e-6)
    assert all(torch.equal(a[0], b[0]) for a, b in zip(given, calls))  # the caller's inputs are left alone
    assert [(c.value, c.role, str(c.device)) for c in result.caller_memory] == [(min(outputs), CallerRole.OUTPUT,
                                                                               "cpu")]


@pytest.mark.parametrize("name", ["gemma3_out_all_copy", "gemma3_inout_all_copy", "gemma3_out_all_legacy",
                                  "gemma3_inout_all_legacy"])
def test_device_programs_the_caller_owns_memory_of_rewrite_and_validate(name: str, tmp_path: Path) -> None:
    """Every op on the device: the rewrite moves the weights and validates against eager outputs.  In copy style
    the delegate's output is unplanned in both programs and bound on its device."""
    out = tmp_path / f"{name}.devconst.pte"
    rewrite_file(FIXTURES / f"{name}.pte", out)
    result = validate(FIXTURES / f"{name}.pte", out, inputs=INPUTS, expected=EXPECTED, simulate_devices=True)
    method = result.methods[0]
    assert result.passed, [(c.name, c.detail) for c in method.checks]
    assert len(method.moved) > 30 and method.calls[-1].h2d_after < method.calls[-1].h2d_before
    for run in (method.original, method.rewritten):
        bound = {(c.value, c.role, str(c.device)) for c in run.caller_memory if c.role is CallerRole.DELEGATE_OUTPUT}
        assert bound == ({(DELEGATE_OUTPUT, CallerRole.DELEGATE_OUTPUT, "cuda:0")} if "copy" in name else set())


def test_reports_list_the_memory_the_runner_bound_for_the_caller() -> None:
    path = FIXTURES / "gemma3_out_all_copy.pte"
    done = invoke("run", path, "--simulate-devices", "--inputs", INPUTS, "--format", "json")
    report = json.loads(done.stdout)
    import jsonschema

    assert_valid(jsonschema.Draft202012Validator(json.loads(SCHEMA_FILE.read_text())), report, "run")
    roles = {(c["value"], c["role"], c["device"], c["delegate"]) for c in report["caller_memory"]}
    assert (DELEGATE_OUTPUT, "delegate output", "cuda:0", 0) in roles
    text = invoke("run", path, "--simulate-devices", "--inputs", INPUTS)
    assert text.exit_code == 0 and f"value {DELEGATE_OUTPUT} (delegate #0, cuda:0), 1,024 B" in text.stdout


def test_a_tensor_a_kernel_writes_without_memory_is_still_refused(tmp_path: Path) -> None:
    """Only a delegate's outputs are bound: a host kernel writing an unplanned intermediate (a program no runtime
    runs) stops with the value named, as before."""
    source = FIXTURES / "gemma3_out_cpu.pte"
    with open_pte(source) as pte:
        plan = pte.program.execution_plan[0]
        first = next(i for i in plan.chains[0].instructions if isinstance(i, m.KernelCall))
        target = first.args[-1]
    forged = edit_program(source, tmp_path / "forged.pte", lambda p: edit_plans(p, lambda plan: with_value(
        plan, target, m.replace(plan.values[target], allocation_info=None))))
    with pytest.raises(RunnerError, match=rf"value {target} is used but has no data \(not bound\)"):
        run_program(forged, inputs=_calls())


def test_a_forged_size_of_a_caller_owned_tensor_is_refused_before_allocating(tmp_path: Path) -> None:
    source = FIXTURES / "gemma3_out_all_copy.pte"
    forged = edit_program(source, tmp_path / "forged.pte", lambda p: edit_plans(p, lambda plan: with_value(
        plan, DELEGATE_OUTPUT, m.replace(plan.values[DELEGATE_OUTPUT], sizes=(1 << 20, 1 << 20, 1 << 10)))))
    with pytest.raises(PteDevconstError, match=r"caller-owned tensors need \d+ bytes, more than this machine"):
        run_program(forged, inputs=_calls(), simulate_devices=True)
