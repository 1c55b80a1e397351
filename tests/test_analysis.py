"""Verdicts per constant against the corpus facts (computed by the generator from the exported graph)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from conftest import CASES, facts, ptd_path, pte_path
from pte_devconst.rewriter.model.analysis import analyze_program
from pte_devconst.rewriter.load import analyze_file
from pte_devconst.schema import model as m
from pte_devconst.schema.pte_file import open_pte


@pytest.mark.parametrize("name", CASES)
def test_verdicts_match_the_corpus_exactly(name: str) -> None:
    analysis = analyze_file(pte_path(name), ptd_path(name))
    expected = {(method, c["value"]): c["verdict"] for method, mf in facts(name)["methods"].items()
                for c in mf["constants"]}
    got = {(method.name, c.value): c.verdict for method in analysis.methods for c in method.constants}
    assert got == expected


@pytest.mark.parametrize("name", CASES)
def test_device_copies_found_are_the_exporters(name: str) -> None:
    """Every h2d copy of an eligible constant that analysis plans to remove is one the corpus lists."""
    analysis = analyze_file(pte_path(name), ptd_path(name))
    for method in analysis.methods:
        listed = {(d["instruction"], d["src"], d["dst"]) for d in facts(name)["methods"][method.name]["device_copies"]}
        for verdict in method.eligible:
            for copy in verdict.copies:
                assert (copy.instruction, copy.src, copy.dst) in listed


def test_external_constants_without_their_ptd_are_unknown_not_clean(tmp_path) -> None:
    """Without the .ptd a constant its readers would move is *unknown*; one they keep on the host stays known."""
    lone = tmp_path / "v_g_external_copy.pte"  # no .ptd next to it
    lone.write_bytes(pte_path("v_g_external_copy").read_bytes())
    analysis = analyze_file(lone)
    verdicts = {c.name: c for c in analysis.methods[0].constants}
    assert {name for name, c in verdicts.items() if c.unknown} == {"w", "only_dev"}
    assert all(c.pending_device == m.Device(m.DeviceType.CUDA, 0) and not c.eligible for c in analysis.unknown)
    assert all(c.verdict.startswith("unknown: no .ptd given (pass --ptd)") for c in analysis.unknown)
    assert verdicts["b"].verdict == "not eligible: read by host kernel aten::mul.out"  # the .ptd would not change it
    with_data = analyze_file(pte_path("v_g_external_copy"), ptd_path("v_g_external_copy"))
    assert {c.name for c in with_data.eligible} == {"w", "only_dev"} and not with_data.unknown


def test_legacy_style_per_call_copies_count_each_delegate_call() -> None:
    analysis = analyze_file(pte_path("v_j_cond_legacy"))
    w = next(c for c in analysis.methods[0].constants if c.value == 0)
    assert w.eligible and w.copies_per_call == 2 and not w.copies


def test_copy_style_lists_the_copies_to_remove() -> None:
    analysis = analyze_file(pte_path("v_j_cond_copy"))
    w = next(c for c in analysis.methods[0].constants if c.value == 0)
    assert [c.instruction for c in w.copies] == [1, 13]
    assert w.copies_per_call == 2


def test_a_device_copy_read_by_a_host_kernel_keeps_the_constant_on_the_host() -> None:
    """If the h2d copy's output also feeds a host kernel, moving the constant would break that kernel."""
    with open_pte(pte_path("v_i_kvcache_copy")) as pte:
        program = pte.program
    plan = program.execution_plan[0]
    analysis = analyze_program(program)
    copy = analysis.methods[0].constants[0].copies[0]
    chain = plan.chains[0]
    extra = m.KernelCall(0, (copy.dst, copy.dst, copy.dst))  # op 0 reads the device copy again
    plan = replace(plan, chains=(replace(chain, instructions=chain.instructions + (extra,)),))
    verdict = analyze_program(replace(program, execution_plan=(plan,))).methods[0].constants[0]
    assert not verdict.eligible
    assert verdict.reasons[0].startswith("its device copy is also read by host kernel")


def _with_target_device(value: bytes) -> m.Program:
    """``v_b_dtypes_legacy``'s program with its one delegate's ``target_device`` spec set to ``value``."""
    with open_pte(pte_path("v_b_dtypes_legacy")) as pte:
        program = pte.program
    plan = program.execution_plan[0]
    delegate = plan.delegates[0]
    specs = tuple(replace(s, value=value) if s.key == "target_device" else s for s in delegate.compile_specs)
    plan = replace(plan, delegates=(replace(delegate, compile_specs=specs),))
    return replace(program, execution_plan=(plan,))


def test_a_delegate_with_an_unparseable_target_device_runs_on_the_host() -> None:
    analysis = analyze_program(_with_target_device(b"tpu:x"))
    assert not analysis.eligible
    method = analysis.methods[0]
    assert method.delegates[0].device_error and "tpu:x" in method.delegates[0].device_error
    constant = method.constants[0]
    assert "unreadable target_device (host)" in constant.verdict and "without target_device" not in constant.verdict
    assert any("b'tpu:x'" in detail for detail in constant.details)


def test_inspect_shows_an_unreadable_target_device(tmp_path) -> None:
    from cli_runner import invoke
    from fuzz.mutate import assemble_pte

    broken = tmp_path / "broken.pte"
    broken.write_bytes(assemble_pte(_with_target_device(b"cuda:x"), pte_path("v_b_dtypes_legacy").read_bytes()))
    result = invoke("inspect", broken, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.stderr
    assert "cpu (unreadable target_device)" in result.stdout  # the delegates table
    assert "cpu, unreadable target_device)" in result.stdout  # who reads each constant says it too
    as_json = invoke("inspect", broken, "--format", "json")
    method = json.loads(as_json.stdout)["file"]["methods"][0]
    assert method["delegates"][0]["device"] == "cpu" and "cuda:x" in method["delegates"][0]["device_error"]
    assert all(c["verdict"].endswith("with an unreadable target_device (host)") for c in method["constants"])
    import jsonschema
    from test_report_schema import SCHEMA_FILE

    jsonschema.Draft202012Validator(json.loads(SCHEMA_FILE.read_text())).validate(json.loads(as_json.stdout))


def test_an_unreadable_target_device_is_one_rule_for_analysis_and_the_runner(tmp_path) -> None:
    """One parser (program/executorch.py): analysis keeps the constants on the host, the runner refuses, and both
    say the same thing about the spec."""
    from cli_runner import invoke
    from fuzz.mutate import assemble_pte

    program = _with_target_device(b"cuda:x")
    why = analyze_program(program).methods[0].delegates[0].device_error
    assert why == "unreadable target_device compile spec b'cuda:x': bad device index in 'cuda:x'"
    broken = tmp_path / "broken.pte"
    broken.write_bytes(assemble_pte(program, pte_path("v_b_dtypes_legacy").read_bytes()))
    refused = invoke("run", broken, "--simulate-devices")
    assert refused.exit_code == 2 and why in refused.stderr and "Traceback" not in refused.stderr


def test_host_placement_makes_host_read_constants_eligible_for_cpu() -> None:
    analysis = analyze_file(pte_path("v_h_cpu_only"), host_placement=True)
    assert {str(c.device) for c in analysis.eligible} == {"cpu"}
    assert len(analysis.eligible) == 3


def test_h2d_estimate_counts_copies_and_host_inputs_of_device_delegates() -> None:
    copy_style = analyze_file(pte_path("v_a_dtypes_copy")).methods[0]
    legacy = analyze_file(pte_path("v_b_dtypes_legacy")).methods[0]
    constants = sum(c.nbytes for c in copy_style.constants)
    # Same model: both styles move the 7 constants (208 B) and the 7 inputs (224 B) per call.
    assert constants == 208
    assert copy_style.h2d_bytes_per_call == legacy.h2d_bytes_per_call == 432
    assert analyze_file(pte_path("v_h_cpu_only")).methods[0].h2d_bytes_per_call == 0


@pytest.mark.parametrize("change", ["dtype", "sizes", "dim_order"])
def test_a_copy_into_a_tensor_of_another_dtype_or_shape_keeps_its_constant(change: str, tmp_path) -> None:
    """``_h2d_copy`` copies bytes; the delegates read the destination's dtype, sizes and dim order.  A constant
    put in its place would change them (the fuzzer's case: value 7, an int32 copy of a float32 constant, moved,
    and the delegate then read floats), so it stays, with its reason."""
    from forge import edit_plans, edit_program, with_value

    source = pte_path("v_k_cuda1_copy")
    moved = next(c for c in analyze_file(source).methods[0].constants if c.eligible and c.copies)
    constant, dst = moved.value, moved.copies[0].dst
    with open_pte(source) as pte:
        plan = pte.program.execution_plan[0]
    tensor = plan.values[dst]
    assert isinstance(tensor, m.Tensor)
    changed = {"dtype": m.replace(tensor, scalar_type=3),
               "sizes": m.replace(tensor, sizes=tuple(reversed(tensor.sizes)) + (1,),
                                  dim_order=tuple(range(len(tensor.sizes) + 1))),
               "dim_order": m.replace(tensor, dim_order=tuple(reversed(tensor.dim_order)))}[change]
    if change == "dim_order" and changed.dim_order == tensor.dim_order:
        pytest.skip("a one-dimensional tensor has one dim order")
    forged = edit_program(source, tmp_path / "forged.pte",
                          lambda program: edit_plans(program, lambda p: with_value(p, dst, changed)))
    verdict = next(c for c in analyze_file(forged).methods[0].constants if c.value == constant)
    assert not verdict.eligible
    assert "its device copy has another dtype, shape or dim order" in verdict.reasons
