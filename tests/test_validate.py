"""``validate``: rewritten corpus files and examples keep their outputs and stop copying moved constants."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from conftest import CASES, EXAMPLES, facts, pte_path, ptd_path, shipped
from forge import with_backend
from pte_devconst.cli.app import app
from pte_devconst.rewriter import rewrite_file
from pte_devconst.runner.copies import LOAD, Cause, CopyEvent, Direction, PhaseCopies
from pte_devconst.runner.run import CallResult, RunResult
from pte_devconst.runner.validate import MovedConstant, _check_method, _outputs_equal, moved_constants, validate
from pte_devconst.util.errors import PteDevconstError
from pte_devconst.schema.pte_file import open_pte

CORPUS = pte_path(CASES[0]).parent
REWRITABLE = [n for n in CASES if facts(n)["style"] in ("copy", "legacy")]


def rewritten(name: str, tmp_path: Path, folder: Path = CORPUS) -> Path:
    out = tmp_path / f"{name}.devconst.pte"
    ptd = folder / f"{name}.ptd"
    rewrite_file(folder / f"{name}.pte", out, ptd=ptd if ptd.exists() else None)
    return out


@pytest.mark.parametrize("name", REWRITABLE)
def test_rewritten_corpus_validates(name: str, tmp_path: Path) -> None:
    out = rewritten(name, tmp_path)
    result = validate(pte_path(name), out, ptd=ptd_path(name), inputs=CORPUS / f"{name}.inputs.pt",
                      expected=CORPUS / f"{name}.expected.pt", calls=3, simulate_devices=True)
    assert result.passed, [(c.name, c.detail) for mv in result.methods for c in mv.checks if not c.passed]
    eligible = {(method, c["value"]) for method, d in facts(name)["methods"].items() for c in d["constants"]
                if c["verdict"].startswith("eligible") and c["nbytes"] > 0}
    moved = {(mv.method, c.value) for mv in result.methods for c in mv.moved}
    assert eligible <= moved  # every eligible, non-empty constant moved
    for mv in result.methods:
        assert mv.bit_identical_required
        moved_ids = {c.value for c in mv.moved}
        for phase in (f"call {i}" for i in range(3)):
            before = [e for e in mv.original.events if e.phase == phase and e.source_value in moved_ids
                      and e.direction is Direction.H2D]
            after = [e for e in mv.rewritten.events if e.phase == phase and e.source_value in moved_ids]
            assert before and not after  # per-call copies of the moved constants go to zero
        assert mv.calls[-1].h2d_before - mv.calls[-1].h2d_after == mv.calls[-1].moved_bytes_copied_before > 0


@pytest.mark.parametrize("name", [n for n in shipped(EXAMPLES) if not n.endswith("_cpu") and "inside" not in n])
def test_rewritten_examples_validate(name: str, tmp_path: Path) -> None:
    out = rewritten(name, tmp_path, EXAMPLES)
    result = validate(EXAMPLES / f"{name}.pte", out, inputs=EXAMPLES / f"{name}.inputs.pt",
                      expected=EXAMPLES / f"{name}.expected.pt", calls=2, simulate_devices=True)
    assert result.passed
    (mv,) = result.methods
    assert mv.moved and mv.load_h2d_after == sum(c.nbytes for c in mv.moved)
    # Weights outside the delegate: each moved constant was copied once per call before, never after.
    assert mv.calls[-1].h2d_before - mv.calls[-1].h2d_after == sum(c.nbytes for c in mv.moved)


def test_moved_constants_come_from_the_two_programs(tmp_path: Path) -> None:
    out = rewritten("v_c_shared_host_copy", tmp_path)
    with open_pte(pte_path("v_c_shared_host_copy")) as a, open_pte(out) as b:
        moved = moved_constants(a.program, b.program)
    # no FQN in the .pte
    assert [(c.value, c.name, c.device, c.nbytes) for c in moved["forward"]] == [(2, None, "cuda:0", 96)]


def test_corrupted_initial_data_fails(tmp_path: Path) -> None:
    out = rewritten("v_f_multi_method_copy", tmp_path)
    with open_pte(out) as pte:
        plan = pte.program.plan("forward")
        moved = moved_constants(open_pte(pte_path("v_f_multi_method_copy")).program, pte.program)["forward"]
        span = pte.tensor_span(plan.values[moved[0].value])
    data = bytearray(out.read_bytes())
    data[span.offset: span.offset + 4] = bytes(x ^ 0x40 for x in data[span.offset: span.offset + 4])
    broken = tmp_path / "broken.pte"
    broken.write_bytes(bytes(data))
    result = validate(pte_path("v_f_multi_method_copy"), broken, inputs=CORPUS / "v_f_multi_method_copy.inputs.pt",
                      simulate_devices=True)
    assert not result.passed
    failed = {c.name for mv in result.methods for c in mv.checks if not c.passed}
    assert failed == {"outputs agree (bit-identical)", "delegate boundaries match"}


def _run(events: list[CopyEvent], calls: int = 2) -> RunResult:
    phases = [CallResult(i, [torch.ones(2)], PhaseCopies.of(f"call {i}", [e for e in events if e.phase == f"call {i}"]),
                         0.0) for i in range(calls)]
    return RunResult("x.pte", "forward", True, PhaseCopies.of(LOAD, [e for e in events if e.phase == LOAD]), phases,
                     events)


def _h2d(phase: str, cause: Cause, nbytes: int, value: int) -> CopyEvent:
    return CopyEvent(phase, "forward", Direction.H2D, cause, nbytes, "cuda:0", value)


def test_checks_catch_a_constant_still_copied_per_call() -> None:
    moved = [MovedConstant("forward", 0, "w", "cuda:0", 64)]
    before = _run([_h2d(f"call {i}", Cause.H2D_KERNEL, 64, 0) for i in range(2)])
    good = _run([_h2d(LOAD, Cause.LOAD_INITIAL_DATA, 64, 0)])
    assert _check_method("forward", before, good, moved, True, None, 1e-4, 1e-5).passed
    still = _run([_h2d(LOAD, Cause.LOAD_INITIAL_DATA, 64, 0)] + [_h2d(f"call {i}", Cause.H2D_KERNEL, 64, 0)
                                                                for i in range(2)])
    failed = {c.name for c in _check_method("forward", before, still, moved, True, None, 1e-4, 1e-5).checks
              if not c.passed}
    assert failed == {"no per-call copies of moved constants", "per-call H2D bytes fell by the moved constants' bytes"}
    twice = _run([_h2d(LOAD, Cause.LOAD_INITIAL_DATA, 64, 0)] * 2)
    failed = {c.name for c in _check_method("forward", before, twice, moved, True, None, 1e-4, 1e-5).checks
              if not c.passed}
    assert failed == {"moved constants copied to their device once"}


def test_calls_below_two_are_refused() -> None:
    with pytest.raises(Exception, match="at least 2"):
        validate(pte_path("v_h_cpu_only"), pte_path("v_h_cpu_only"), calls=1)


# --- the command line --------------------------------------------------------------------------------


def invoke(*args: str, env: dict | None = None):
    return CliRunner().invoke(app, [str(a) for a in args], env=env)


def test_cli_validate_passes_and_prints_json(tmp_path: Path) -> None:
    out = rewritten("mlp_legacy", tmp_path, EXAMPLES)
    done = invoke("validate", EXAMPLES / "mlp_legacy.pte", out, "--inputs", EXAMPLES / "mlp_legacy.inputs.pt",
                  "--expected", EXAMPLES / "mlp_legacy.expected.pt", "--simulate-devices", "--format", "json")
    assert done.exit_code == 0, done.output
    report = json.loads(done.output)
    assert report["command"] == "validate" and report["passed"] is True
    call = report["methods"][0]["calls"][-1]
    assert call["h2d_bytes"]["before"] - call["h2d_bytes"]["after"] == call["h2d_bytes"]["moved_constants_before"]


def test_cli_validate_text_and_markdown(tmp_path: Path) -> None:
    out = rewritten("v_e_two_devices_copy", tmp_path)
    done = invoke("validate", pte_path("v_e_two_devices_copy"), out, "--simulate-devices", "--calls", "3")
    assert done.exit_code == 0 and "PASS" in done.output and "H2D per call" in done.output
    done = invoke("validate", pte_path("v_e_two_devices_copy"), out, "--simulate-devices", "--format", "markdown")
    assert done.exit_code == 0 and "| H2D per call |" in done.output


def test_cli_validate_failure_exits_1(tmp_path: Path) -> None:
    out = rewritten("v_c_shared_host_legacy", tmp_path)
    wrong = tmp_path / "expected.pt"
    torch.save({"forward": [[torch.zeros(4, 6), torch.zeros(4, 6)]]}, wrong)
    done = invoke("validate", pte_path("v_c_shared_host_legacy"), out, "--simulate-devices", "--expected", wrong,
                  "--inputs", CORPUS / "v_c_shared_host_legacy.inputs.pt")
    assert done.exit_code == 1 and "FAIL" in done.output


@pytest.mark.parametrize("args, message", [
    (["--calls", "1"], "at least 2"),
    (["--inputs", "missing.pt"], "not found"),
    (["--rtol", "-1"], "must not be negative"),
])
def test_cli_validate_bad_input_exits_2(args: list[str], message: str, tmp_path: Path) -> None:
    done = invoke("validate", pte_path("v_h_cpu_only"), pte_path("v_h_cpu_only"), *args)
    assert done.exit_code == 2
    assert message in done.output and "Traceback" not in done.output


def test_cli_validate_garbage_file_exits_2(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.pte"
    garbage.write_bytes(b"not a program" * 10)
    done = invoke("validate", pte_path("v_h_cpu_only"), garbage)
    assert done.exit_code == 2 and "garbage.pte" in done.output


def test_cli_run_prints_outputs_and_copies() -> None:
    done = invoke("run", pte_path("v_k_cuda1_copy"), "--simulate-devices", "--calls", "2",
                  "--inputs", CORPUS / "v_k_cuda1_copy.inputs.pt")
    assert done.exit_code == 0, done.output
    assert "_h2d_copy kernel" in done.output and "float32" in done.output and "[3, 5]" in done.output
    done = invoke("run", pte_path("v_g_external_cpu"), "--ptd", ptd_path("v_g_external_cpu"), "--format", "json")
    report = json.loads(done.output)
    assert report["command"] == "run" and report["calls"][0]["outputs"][0]["shape"] == [4, 4]


def test_cli_run_bad_inputs_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.pt"
    torch.save((torch.zeros(2, 2),), bad)
    done = invoke("run", pte_path("v_h_cpu_only"), "--inputs", bad)
    assert done.exit_code == 2 and "expected shape [3, 6], got [2, 2]" in done.output
    done = invoke("run", with_backend(pte_path("v_h_xnnpack"), tmp_path / "vendor.pte", "VendorBackend"))
    assert done.exit_code == 2 and "VendorBackend" in done.output


# --- what validate does not check is reported, never dropped (issues 11 and 13) ---------------------------

def _only_forward(tmp_path: Path, kind: str) -> Path:
    data = torch.load(CORPUS / f"v_f_multi_method_copy.{kind}.pt", weights_only=True)
    path = tmp_path / f"{kind}.pt"
    torch.save({"forward": data["forward"]}, path)
    return path


def test_expected_outputs_without_an_entry_for_a_method_fail_that_method(tmp_path: Path) -> None:
    out = rewritten("v_f_multi_method_copy", tmp_path)
    expected = _only_forward(tmp_path, "expected")
    args = ("validate", pte_path("v_f_multi_method_copy"), out, "--simulate-devices", "--inputs",
            CORPUS / "v_f_multi_method_copy.inputs.pt", "--expected", expected)
    done = invoke(*args, "--format", "json")
    assert done.exit_code == 1, done.output
    report = json.loads(done.stdout)
    rows = {m["method"]: {c["name"]: c for c in m["checks"]} for m in report["methods"]}
    assert rows["forward"]["outputs match expected"]["status"] == "pass"
    missing = rows["other"]["outputs match expected"]
    assert missing["status"] == "fail" and missing["passed"] is False and report["passed"] is False
    assert "no entry for method 'other'" in missing["detail"]
    text = invoke(*args)
    assert text.exit_code == 1 and "FAIL" in text.stdout and "PASS" not in text.stdout
    # Naming the method makes the missing entry an error, not a failed row.
    named = invoke(*args, "--method", "other")
    assert named.exit_code == 2 and "no entry for method 'other'" in named.output


@pytest.mark.parametrize("content", [{}, {"forwrad": [[torch.zeros(4, 4)]]}], ids=["empty", "wrong-key"])
def test_expected_outputs_that_compare_nothing_are_an_error(content: dict, tmp_path: Path) -> None:
    """--expected given but no method's outputs compared with it: exit 2 (it used to print PASS)."""
    out = rewritten("v_f_multi_method_copy", tmp_path)
    expected = tmp_path / "expected.pt"
    torch.save(content, expected)
    for fmt in ("text", "json", "markdown"):
        done = invoke("validate", pte_path("v_f_multi_method_copy"), out, "--simulate-devices", "--inputs",
                      CORPUS / "v_f_multi_method_copy.inputs.pt", "--expected", expected, "--format", fmt)
        assert done.exit_code == 2, done.output
        assert "expected.pt" in done.stderr and "no entry for any of the methods 'forward', 'other'" in done.stderr
        assert "nothing would be compared" in done.stderr and not done.stdout and "Traceback" not in done.output


def test_integer_and_bool_outputs_compare_exactly() -> None:
    """Token ids all off by one are within any relative tolerance of large ids; they must not match."""
    ids = torch.tensor([50_000, 120_000, 250_000])
    assert "3 of 3 int64 elements differ" in _outputs_equal([ids], [ids + 1], False, 1e-4, 1e-5)
    assert _outputs_equal([ids], [ids + 1], False, None, None) is not None  # the defaults too
    assert _outputs_equal([ids], [ids.clone()], False, None, None) is None
    mask = torch.tensor([True, False, True])
    assert "bool elements differ" in _outputs_equal([mask], [~mask], False, 1.0, 1.0)
    assert _outputs_equal([torch.tensor([0.5, 1.0])], [torch.tensor([0.5, 1.0001])], False, 1e-3, 1e-5) is None


def test_default_tolerance_depends_on_the_dtype() -> None:
    """torch.testing.assert_close's defaults: float32 rtol 1.3e-6, float16 1e-3, bfloat16 1.6e-2."""
    one = torch.ones(4)
    assert _outputs_equal([one], [one * (1 + 5e-5)], False, None, None) is not None  # float32: beyond 1.3e-6 + 1e-5
    half = one.half()
    assert _outputs_equal([half], [half * (1 + 2 ** -10)], False, None, None) is None  # float16: one ulp, within 1e-3
    brain = one.bfloat16()
    assert _outputs_equal([brain], [brain * (1 + 2 ** -7)], False, None, None) is None  # bfloat16: one ulp
    assert _outputs_equal([brain], [brain * (1 + 2 ** -7)], False, 1e-4, None) is not None  # --rtol overrides
    assert _outputs_equal([one], [one * (1 + 5e-5)], False, 1e-4, None) is None


def test_the_report_states_each_outputs_tolerance(tmp_path: Path) -> None:
    """v_a_dtypes_copy has float32, float16, bfloat16, int8 and int64 outputs; each is compared by its dtype."""
    import jsonschema

    out = rewritten("v_a_dtypes_copy", tmp_path)
    args = ("validate", pte_path("v_a_dtypes_copy"), out, "--simulate-devices", "--inputs",
            CORPUS / "v_a_dtypes_copy.inputs.pt", "--expected", CORPUS / "v_a_dtypes_copy.expected.pt")
    done = invoke(*args, "--format", "json")
    assert done.exit_code == 0, done.output
    report = json.loads(done.stdout)
    schema = json.loads((Path(__file__).resolve().parents[1] / "cli" / "report.schema.json").read_text())
    jsonschema.validate(report, schema)
    assert report["tolerance"]["rtol"] is None and report["tolerance"]["atol"] is None
    found = {t["dtype"]: (t["exact"], t["rtol"], t["atol"], t["source"])
             for t in report["methods"][0]["output_tolerances"]}
    assert found == {"float32": (False, 1.3e-6, 1e-5, "dtype default"), "float16": (False, 1e-3, 1e-5, "dtype default"),
                     "bfloat16": (False, 1.6e-2, 1e-5, "dtype default"), "int8": (True, None, None, "exact"),
                     "int64": (True, None, None, "exact")}
    expected_row = next(c for c in report["methods"][0]["checks"] if c["name"] == "outputs match expected")
    assert "int64 exactly" in expected_row["detail"]
    assert "float16 within rtol=0.001, atol=1e-05" in expected_row["detail"]
    for fmt in ("text", "markdown"):
        shown = invoke(*args, "--format", fmt, env={"COLUMNS": "400"}).stdout
        assert "int64 exactly" in shown and "float32 within rtol=1.3e-06" in shown, shown
    given = json.loads(invoke(*args, "--rtol", "0.5", "--format", "json").stdout)
    assert given["tolerance"]["rtol"] == 0.5
    sources = {t["dtype"]: (t["rtol"], t["source"]) for t in given["methods"][0]["output_tolerances"]}
    assert sources["float32"] == (0.5, "given") and sources["int64"] == (None, "exact")


def test_integer_outputs_off_by_one_fail_expected_whatever_the_tolerance(tmp_path: Path) -> None:
    out = rewritten("v_a_dtypes_copy", tmp_path)
    data = torch.load(CORPUS / "v_a_dtypes_copy.expected.pt", weights_only=True)
    calls = [list(call) for call in data["forward"]]
    for call in calls:
        call[4] = call[4] + 1  # the int64 output, every element off by one (|values| >= 112: within rtol 0.01)
    wrong = tmp_path / "wrong.pt"
    torch.save({"forward": calls}, wrong)
    done = invoke("validate", pte_path("v_a_dtypes_copy"), out, "--simulate-devices", "--inputs",
                  CORPUS / "v_a_dtypes_copy.inputs.pt", "--expected", wrong, "--rtol", "0.01", "--format", "json")
    assert done.exit_code == 1, done.output
    row = next(c for c in json.loads(done.stdout)["methods"][0]["checks"] if c["name"] == "outputs match expected")
    assert row["status"] == "fail" and "output 4: 12 of 12 int64 elements differ (compared exactly" in row["detail"]


def test_methods_without_inputs_are_listed_as_not_validated(tmp_path: Path) -> None:
    out = rewritten("v_f_multi_method_copy", tmp_path)
    inputs = _only_forward(tmp_path, "inputs")
    result = validate(pte_path("v_f_multi_method_copy"), out, inputs=inputs, simulate_devices=True)
    assert [mv.method for mv in result.methods] == ["forward"]
    assert result.skipped_methods == [("other", "the inputs file has no entry for it")]
    done = invoke("validate", pte_path("v_f_multi_method_copy"), out, "--simulate-devices", "--inputs", inputs)
    assert done.exit_code == 0 and "method other not validated: the inputs file has no entry for it" in done.stdout


def test_expected_without_inputs_is_refused() -> None:
    done = invoke("validate", EXAMPLES / "mlp_copy.pte", EXAMPLES / "mlp_copy.pte", "--simulate-devices",
                  "-e", EXAMPLES / "mlp_copy.expected.pt")
    assert done.exit_code == 2 and "--expected needs --inputs" in done.output and "Traceback" not in done.output


def test_a_file_validated_against_itself_says_nothing_moved_in_its_verdict(tmp_path: Path) -> None:
    """Was: PASS, exit 0, with the row "per-call H2D bytes fell by the moved constants' bytes: pass, 3488 B -> 3488 B"
    (a rewrite that did nothing vouched for).  Two files of the same bytes (what rewrite writes where nothing can
    move) are said to be so; another pair where nothing moved asks whether the second is the first one's rewrite."""
    done = invoke("validate", EXAMPLES / "mlp_copy.pte", EXAMPLES / "mlp_copy.pte", "--simulate-devices",
                  env={"COLUMNS": "200"})
    assert done.exit_code == 3, done.output  # ExitCode.UNKNOWN: no check failed, nothing was vouched for
    assert "PASS" not in done.stdout and done.stdout.splitlines()[-1].startswith(
        "NOTHING MOVED: the two files hold the same program, byte for byte")
    padded = tmp_path / "padded.pte"  # the same program, and bytes after it: not the same file
    padded.write_bytes((EXAMPLES / "mlp_copy.pte").read_bytes() + bytes(16))
    other = invoke("validate", EXAMPLES / "mlp_copy.pte", padded, "--simulate-devices")  # the runtime engine's:
    assert other.exit_code == 3 and other.stdout.splitlines()[-1].startswith(  # tests/test_executorch_engine.py
        "NOTHING MOVED: no constant of") and "first one's rewrite?" in other.stdout, other.output
    assert re.search(r"per-call H2D bytes fell by the moved constants' bytes\s+│\s+skipped\s+│\s+nothing moved",
                     done.stdout), done.stdout
    report = json.loads(invoke("validate", EXAMPLES / "mlp_copy.pte", EXAMPLES / "mlp_copy.pte", "--simulate-devices",
                               "--format", "json").stdout)
    assert report["verdict"] == "nothing moved" and report["exit_code"] == 3 and report["passed"]
    checks = {c["name"]: c["status"] for c in report["methods"][0]["checks"]}
    assert checks["moved constants copied to their device once"] == checks["no per-call copies of moved constants"] == \
        checks["per-call H2D bytes fell by the moved constants' bytes"] == "skipped"
    quiet = invoke("-q", "validate", EXAMPLES / "mlp_copy.pte", EXAMPLES / "mlp_copy.pte", "--simulate-devices")
    assert quiet.exit_code == 3 and quiet.stdout.strip() == "NOTHING MOVED" and not quiet.stderr


def test_bit_identical_means_bit_patterns() -> None:
    nan = torch.tensor([float("nan"), 1.0])
    assert _outputs_equal([nan], [nan.clone()], True, 0, 0) is None  # torch.equal would call NaN != NaN
    assert "not bit-identical" in _outputs_equal([torch.tensor([0.0])], [torch.tensor([-0.0])], True, 0, 0)
    other_nan = nan.clone()
    other_nan.view(torch.int32)[0] ^= 1  # another NaN payload: a different bit pattern
    assert "not bit-identical" in _outputs_equal([nan], [other_nan], True, 0, 0)


def test_profiler_figures_sit_next_to_the_ledger(tmp_path: Path) -> None:
    """--profile on a GPU: the profiler's per-call bytes in the JSON (schema-valid) and the tables."""
    import jsonschema

    from pte_devconst.cli.validate_cmd import summary_rows
    from pte_devconst.runner.profiling import ProfiledCopies
    from pte_devconst.runner.validate import ValidationResult

    def profiled(run: RunResult, h2d: int) -> RunResult:
        calls = [CallResult(c.index, c.outputs, c.copies, c.wall_s, ProfiledCopies(1, h2d, 1, 16)) for c in run.calls]
        return RunResult(run.path, run.method, False, run.load, calls, run.events)

    moved = [MovedConstant("forward", 0, "w", "cuda:0", 64)]
    before = profiled(_run([_h2d(f"call {i}", Cause.H2D_KERNEL, 64, 0) for i in range(2)]), 64)
    after = profiled(_run([_h2d(LOAD, Cause.LOAD_INITIAL_DATA, 64, 0)]), 0)
    mv = _check_method("forward", before, after, moved, True, None, 1e-4, 1e-5)
    rows = {row[0]: row[1:] for row in summary_rows(mv)}
    assert rows["H2D per call (profiler)"] == ["64 B", "0 B"] and rows["D2H per call (profiler)"] == ["16 B", "16 B"]
    report = ValidationResult("a.pte", "b.pte", False, 2, [mv]).to_json()
    assert report["methods"][0]["calls"][1]["profiler"]["before"]["h2d"] == {"count": 1, "bytes": 64}
    schema = json.loads((Path(__file__).resolve().parents[1] / "cli" / "report.schema.json").read_text())
    jsonschema.validate({"format_version": 1, "command": "validate", "tool_version": "0", **report}, schema)


@pytest.mark.parametrize("name", REWRITABLE)
def test_rewritten_corpus_validates_with_every_delegate_opaque(name: str, tmp_path: Path) -> None:
    """--opaque-delegates: no delegate executes, yet the boundary check covers every call (the CI gate)."""
    out = rewritten(name, tmp_path)
    result = validate(pte_path(name), out, ptd=ptd_path(name), inputs=CORPUS / f"{name}.inputs.pt", calls=2,
                      simulate_devices=True, opaque_delegates=True)
    assert result.passed, [(c.name, c.detail) for mv in result.methods for c in mv.checks if not c.passed]
    for mv in result.methods:
        assert mv.opaque_backends == ["BackendWithCompilerDemo"]
        rows = {c.name: c.status.value for c in mv.checks}
        assert rows["delegate boundaries match"] == "pass" and "outputs match expected" not in rows
        assert mv.boundary.delegate_calls >= 2


def test_expected_outputs_that_only_stand_ins_would_meet_are_an_error(tmp_path: Path) -> None:
    """Every output depends on an opaque delegate: --expected compares nothing, and says so (exit 2), never PASS."""
    name = "v_c_shared_host_copy"
    out = rewritten(name, tmp_path)
    with pytest.raises(PteDevconstError, match="no output was compared with the expected outputs: every output "
                                               r"depends on opaque delegates \(BackendWithCompilerDemo\)"):
        validate(pte_path(name), out, inputs=CORPUS / f"{name}.inputs.pt", expected=CORPUS / f"{name}.expected.pt",
                 simulate_devices=True, opaque_delegates=True)
    done = invoke("validate", pte_path(name), out, "--simulate-devices", "--opaque-delegates", "--inputs",
                  CORPUS / f"{name}.inputs.pt", "--expected", CORPUS / f"{name}.expected.pt", "--format", "json")
    assert done.exit_code == 2 and not done.stdout and f"{name}.expected.pt: no output was compared" in done.stderr


def test_a_delegate_writing_its_output_over_an_input_is_compared_on_what_it_was_given(tmp_path: Path) -> None:
    """An in-place delegate call: the forged program plans delegate 1's output (value 127) on the bytes of its
    weight's device copy (value 122), which the call then overwrites.  The rewrite's re-layout gives the two bytes
    of their own; the boundary check compares what each call was given (its inputs as it starts), not what the
    original's call left in its input (a false failure the fuzzer found)."""
    from forge import edit_plans, edit_program, with_value
    from pte_devconst.schema import model as m

    def output_over_weight(plan: m.ExecutionPlan) -> m.ExecutionPlan:
        weight, output = plan.values[122], plan.values[127]
        assert isinstance(weight, m.Tensor) and isinstance(output, m.Tensor) and weight.allocation_info
        return with_value(plan, 127, m.replace(output, allocation_info=weight.allocation_info))

    source = Path(__file__).parent / "fixtures" / "real_models" / "vit_mm_copy.pte"
    forged = edit_program(source, tmp_path / "in_place.pte", lambda program: edit_plans(program, output_over_weight))
    rewrite_file(forged, tmp_path / "out.pte", durable=False)
    with open_pte(tmp_path / "out.pte") as out:  # laid out again, the two live values no longer share bytes
        values = out.program.execution_plan[0].values
        assert values[127].allocation_info != values[122].allocation_info  # type: ignore[union-attr]
    outcome = validate(forged, tmp_path / "out.pte", simulate_devices=True, calls=2)
    assert outcome.passed, outcome.to_json()


def test_times_are_not_shown_as_a_comparison(tmp_path: Path) -> None:
    """The two programs run one after the other (never both held: issue 43), so whichever runs first also warms
    the process: their times are a note that says so, not a column beside the byte counts (issue 45)."""
    pte, inputs, out = EXAMPLES / "mlp_copy.pte", EXAMPLES / "mlp_copy.inputs.pt", tmp_path / "out.pte"
    rewrite_file(pte, out, durable=False)
    result = CliRunner().invoke(app, ["validate", str(pte), str(out), "--inputs", str(inputs), "--simulate-devices"])
    assert result.exit_code == 0, result.stdout
    text = " ".join(result.stdout.split())
    assert "time per call (mean" not in text
    assert re.search(r"time per call, calls 2 and later \(mean\): original [\d.]+ ms, rewritten [\d.]+ ms; the "
                     r"programs ran one after the other, so this is no comparison of their speed", text), text


def test_an_inputs_file_that_is_no_torch_file_says_why_without_torchs_advice() -> None:
    """torch.load's refusal ends in advice to load the file with weights_only=False (which runs the file's code);
    the error quotes the unpickler's reason instead, cut nowhere mid-sentence."""
    pte = EXAMPLES / "mlp_copy.pte"
    result = CliRunner().invoke(app, ["validate", str(pte), str(pte), "--inputs", str(EXAMPLES.parent.parent /
                                                                                      "README.md"),
                                      "--simulate-devices"])
    assert result.exit_code == 2
    (line,) = result.stderr.splitlines()
    assert "cannot read inputs (expected a torch.save file of tensors): torch.load with weights_only=True refused " \
           "it (" in line and line.endswith(")")
    assert "weights_only` set to `False" not in line


def test_inputs_with_more_calls_than_run_are_said(tmp_path: Path) -> None:
    """An inputs file of 3 calls validated with the default 2: a warning says the third did not run, and how to
    run it; with --calls 3 nothing is said."""
    from pte_devconst.runner.validate import validate as run_validation

    source = Path(__file__).parent / "fixtures" / "xnnpack_device" / "mlp_copy.pte"
    inputs = source.with_name("mlp_copy.inputs.pt")
    out = tmp_path / "out.pte"
    rewrite_file(source, out, durable=False)
    two = run_validation(source, out, inputs=inputs, simulate_devices=True, opaque_delegates=True)
    assert two.warnings == ["method 'forward': the inputs hold 3 calls and validate ran the first 2 (--calls 3 runs "
                            "them all)"]
    three = run_validation(source, out, inputs=inputs, simulate_devices=True, opaque_delegates=True, calls=3)
    assert three.warnings == [] and three.passed
