"""``validate --engine executorch`` (issue 36): the proof in the user's own ExecuTorch, and real backends that never
take the process down.

The engine flips both programs to the CPU with the project's own writer, runs them in the installed runtime (in
a child process) over >= 3 calls per method, compares outputs bit for bit, and probes each first-call copy.  It
passes the project's rewrites in both encodings, conversions and --fold, and fails (exit 1) planted wrong ones: a
flipped byte in a moved constant, two moved constants' bytes swapped, a guard that never clears.  A backend that
crashes is an error naming the delegate and the signal; one that refuses its blob, its own message; a call its
blob binds past is refused before anything runs.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import jsonschema
import pytest

from cli_runner import invoke
from conftest import EXAMPLES, pte_path
from forge import edit_program, flip_byte, moved_spans, swapped_moved_constants
from pte_devconst import api
from pte_devconst.rewriter.encodings.first_call import first_call_prologue
from pte_devconst.program.dataflow import Declaration
from pte_devconst.program.delegate_blobs import unbindable_calls
from pte_devconst.program.moves import moved_values
from pte_devconst.runner.executorch_engine import flip, kernel_holders, probed_copies
from pte_devconst.runner.isolated import RuntimeDied, RuntimeWorker, worker
from pte_devconst.runner.verdict import ValidationResult
from pte_devconst.schema import model as m
from pte_devconst.schema.pte_file import open_pte
from pte_devconst.util.errors import PteDevconstError

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "xnnpack_device"
SCHEMA = json.loads((ROOT / "cli" / "report.schema.json").read_text())


def _inputs(name: str) -> Path:
    return FIXTURES / f"{name}.inputs.pt"


def _engine(original: Path, rewritten: Path, name: str) -> ValidationResult:
    return api.validate(original, rewritten, inputs=_inputs(name), engine="executorch")


def _failed(result: ValidationResult) -> dict[str, str]:
    return {c.name: c.detail for mv in result.methods for c in mv.checks if not c.passed}


# --- correct rewrites pass ------------------------------------------------------------------------------------


@pytest.mark.parametrize("runtime", ["1.6", "1.5"])
@pytest.mark.parametrize("name, fold", [("mlp_copy", False), ("two_methods_copy", False), ("kv_cache_copy", False),
                                        ("cond_copy", False), ("dynamic_copy", False), ("fold_copy", True),
                                        ("mlp_legacy", False), ("attention_copy", False)])
def test_the_projects_rewrites_pass_in_the_real_runtime(name: str, fold: bool, runtime: str, tmp_path: Path) -> None:
    source, out = FIXTURES / f"{name}.pte", tmp_path / "out.pte"
    plan = api.rewrite(source, out, runtime=runtime, fold=fold).plan
    result = _engine(source, out, name)
    legacy_15 = name.endswith("_legacy") and runtime == "1.5"  # a 1.5 runtime cannot skip a legacy copy
    assert result.verdict.value == ("nothing moved" if legacy_15 else "pass"), _failed(result)
    engine = result.engine
    assert engine is not None and engine.runtime == "1.5.1" and engine.delegates == ("XnnpackBackend",)
    assert result.calls >= 3 and all(mv.runs is None for mv in result.methods)  # the runner measured nothing
    if runtime == "1.5" and not legacy_15:
        assert engine.probed == sum(e.payload.copies for e in plan.methods) > 0
    assert {mv.method for mv in result.methods} == set(json.loads(json.dumps(
        [p.name for p in open_pte(source).program.execution_plan])))


@pytest.mark.parametrize("runtime", ["1.6", "1.5"])
def test_the_engine_says_when_the_installed_runtime_is_older_than_the_file_needs(runtime: str, tmp_path: Path
                                                                               ) -> None:
    """A 1.6 file passes in the 1.5.1 runtime flipped to the CPU, but that runtime cannot load it on a device:
    the report says so (what the flip proves and what it cannot), in its warnings and in the JSON; a 1.5 file
    has nothing to say."""
    source, out = FIXTURES / "mlp_copy.pte", tmp_path / "out.pte"
    api.rewrite(source, out, runtime=runtime)
    done = invoke("validate", source, out, "--engine", "executorch", "--inputs", _inputs("mlp_copy"),
                  "--format", "json")
    assert done.exit_code == 0, done.stdout + done.stderr
    warnings = json.loads(done.stdout)["warnings"]
    if runtime == "1.5":
        assert warnings == []
        return
    (warning,) = warnings
    assert "needs ExecuTorch >= 1.6: device initial data" in warning and "ExecuTorch 1.5.1" in warning
    assert "proves its outputs" in warning and "--runtime 1.5" in warning


MORE = ROOT / "tests" / "fixtures" / "xnnpack_more"


@pytest.mark.parametrize("runtime", ["1.6", "1.5"])
@pytest.mark.parametrize("name", ["ext_copy", "fp16_copy"])
def test_external_constants_and_float16_pass(name: str, runtime: str, tmp_path: Path) -> None:
    """A program whose constants live in a .ptd (the runtime gets it as its data file) and a float16 one."""
    source, out = MORE / f"{name}.pte", tmp_path / f"{name}.pte"
    if source.with_suffix(".ptd").exists():
        (tmp_path / f"{name}.ptd").write_bytes(source.with_suffix(".ptd").read_bytes())  # NAME.ptd beside it
    assert api.rewrite(source, out, runtime=runtime).changed
    result = api.validate(source, out, inputs=MORE / f"{name}.inputs.pt", engine="executorch")
    assert result.verdict.value == "pass", _failed(result)


def test_a_conversion_passes_against_its_input_and_the_original(tmp_path: Path) -> None:
    source, at_load, once = FIXTURES / "kv_cache_copy.pte", tmp_path / "at_load.pte", tmp_path / "once.pte"
    api.rewrite(source, at_load)
    api.rewrite(at_load, once, runtime="1.5")
    for before, after in ((at_load, once), (source, once)):
        result = _engine(before, after, "kv_cache_copy")
        assert result.passed, _failed(result)


# --- wrong rewrites fail --------------------------------------------------------------------------------------


@pytest.mark.parametrize("runtime", ["1.6", "1.5"])
def test_a_flipped_byte_in_a_moved_constant_fails(runtime: str, tmp_path: Path) -> None:
    source, good = FIXTURES / "mlp_copy.pte", tmp_path / "good.pte"
    api.rewrite(source, good, runtime=runtime)
    offset, size = max(moved_spans(good), key=lambda span: span[1])
    wrong = flip_byte(good, tmp_path / "wrong.pte", offset + size // 2, 0x40)
    result = _engine(source, wrong, "mlp_copy")
    assert result.verdict.value == "fail"
    assert "outputs bit-identical in the ExecuTorch runtime" in _failed(result)
    done = invoke("validate", source, wrong, "--engine", "executorch", "--inputs", _inputs("mlp_copy"))
    assert done.exit_code == 1 and "FAIL" in done.stdout


def test_two_moved_constants_swapped_fail(tmp_path: Path) -> None:
    source, good = FIXTURES / "kv_cache_copy.pte", tmp_path / "good.pte"
    api.rewrite(source, good)
    wrong = swapped_moved_constants(good, tmp_path / "swapped.pte")
    result = _engine(source, wrong, "kv_cache_copy")
    assert result.verdict.value == "fail" and "outputs bit-identical in the ExecuTorch runtime" in _failed(result)


def test_a_guard_that_never_clears_fails_the_probe_not_the_outputs(tmp_path: Path) -> None:
    source, good = FIXTURES / "mlp_copy.pte", tmp_path / "good.pte"
    api.rewrite(source, good, runtime="1.5")

    def never(program: m.Program) -> m.Program:
        plan = program.execution_plan[0]  # type: ignore[index]
        found = first_call_prologue(plan)
        assert found is not None
        values = list(plan.values or ())
        values[found.cleared_from] = m.Bool(True)
        return m.replace(program, execution_plan=(m.replace(plan, values=tuple(values)),))

    wrong = edit_program(good, tmp_path / "never.pte", never)
    result = _engine(source, wrong, "mlp_copy")
    failed = _failed(result)
    assert result.verdict.value == "fail"
    assert "outputs bit-identical in the ExecuTorch runtime" not in failed  # the outputs alone cannot tell
    assert "a first-call copy ran again: call 2" in failed["moved constants copied once (accumulating probe)"]


def test_a_swapped_first_call_destination_fails(tmp_path: Path) -> None:
    """Two first-call copies of one shape with their destinations swapped: each constant lands in the other's
    device memory."""
    source, good = FIXTURES / "kv_cache_copy.pte", tmp_path / "good.pte"
    api.rewrite(source, good, runtime="1.5")

    def swap(program: m.Program) -> m.Program:
        plan = program.execution_plan[0]  # type: ignore[index]
        found = first_call_prologue(plan)
        assert found is not None
        instructions = list(plan.chains[0].instructions or ())  # type: ignore[index]
        values = plan.values or ()
        copies = [(k, instructions[k]) for k in found.copies]
        (a, x), (b, y) = next(((a, x), (b, y)) for a, x in copies for b, y in copies if a < b
                              and values[x.args[1]].sizes == values[y.args[1]].sizes)  # type: ignore[union-attr]
        instructions[a] = m.replace(x, args=(x.args[0], y.args[1], y.args[2]))  # type: ignore[union-attr]
        instructions[b] = m.replace(y, args=(y.args[0], x.args[1], x.args[2]))  # type: ignore[union-attr]
        chain = m.replace(plan.chains[0], instructions=tuple(instructions))  # type: ignore[index]
        return m.replace(program, execution_plan=(m.replace(plan, chains=(chain,)),))

    wrong = edit_program(good, tmp_path / "swapped.pte", swap)
    result = _engine(source, wrong, "kv_cache_copy")
    assert result.verdict.value == "fail" and "outputs bit-identical in the ExecuTorch runtime" in _failed(result)


# --- what the engine needs, and what it refuses ----------------------------------------------------------------


@pytest.mark.parametrize("runtime", ["1.6", "1.5"])
def test_a_pair_given_in_the_wrong_order_fails_in_both_engines_with_one_row(runtime: str, tmp_path: Path) -> None:
    """The rewrite first, the original second: nothing moved forwards but something moved back.  Both engines fail
    it with the same row (the runner used to fail on its copy counters alone, the engine to say "nothing moved");
    the same pair in the right order passes, and an identical copy is still "nothing moved"."""
    source, out = FIXTURES / "mlp_copy.pte", tmp_path / "out.pte"
    api.rewrite(source, out, runtime=runtime)
    rows = []
    for engine in ("runner", "executorch"):
        result = api.validate(out, source, inputs=_inputs("mlp_copy"), engine=engine,
                              **({"simulate_devices": True} if engine == "runner" else {}))
        assert result.verdict.name == "FAIL"
        rows.append(_failed(result).get("the rewrite keeps on its devices what the original does"))
        assert api.validate(source, out, inputs=_inputs("mlp_copy"), engine=engine,
                            **({"simulate_devices": True} if engine == "runner" else {})).passed
    assert rows[0] is not None and rows[0] == rows[1] and "look swapped" in rows[0]
    same = api.validate(source, source, inputs=_inputs("mlp_copy"), engine="executorch")
    assert same.verdict.name == "NOTHING_MOVED" and same.identical and "byte for byte" in same.why_nothing_moved
    assert not api.validate(source, out, inputs=_inputs("mlp_copy"), engine="executorch").identical


def test_the_flip_moves_every_placement_to_the_cpu() -> None:
    with open_pte(FIXTURES / "mlp_copy.pte") as pte:
        flipped, changes = flip(pte.program)
    (plan,) = flipped.execution_plan  # type: ignore[misc]
    assert plan.non_const_buffer_device is None
    assert all(v.extra_tensor_info is None or v.extra_tensor_info.device_type == m.DeviceType.CPU
               for v in plan.values or () if isinstance(v, m.Tensor))
    assert "et_copy::_h2d_copy.out" not in [op.qualified_name for op in plan.operators or ()]
    assert changes.buffers == 1 and changes.copies == 6 and changes.tensors > 0
    with open_pte(FIXTURES / "mlp_copy.pte") as pte:
        plan = pte.program.execution_plan[0]  # type: ignore[index]
        assert probed_copies(plan, kernel_holders(moved_values(plan, plan))) == []  # per-call copies, nothing moved


def test_without_executorch_one_line_says_how_to_get_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "executorch" else real(name, *a))
    with pytest.raises(PteDevconstError, match=r'pip install "pte-devconst\[executorch\]"'):
        api.validate(FIXTURES / "mlp_copy.pte", FIXTURES / "mlp_copy.pte", engine="executorch")


def test_a_backend_the_runtime_does_not_register_is_refused_up_front(tmp_path: Path) -> None:
    done = invoke("validate", EXAMPLES / "mlp_copy.pte", EXAMPLES / "mlp_copy.devconst.pte", "--engine", "executorch",
                  "--inputs", EXAMPLES / "mlp_copy.inputs.pt")
    assert done.exit_code == 2 and len(done.stderr.strip().splitlines()) == 1
    assert "does not register PteDevconstReference" in done.stderr and "--engine runner can" in done.stderr


def test_the_runners_options_are_refused_with_the_engine() -> None:
    done = invoke("validate", FIXTURES / "mlp_copy.pte", FIXTURES / "mlp_copy.pte", "--engine", "executorch",
                  "--expected", FIXTURES / "mlp_copy.expected.pt")
    assert done.exit_code == 2 and "expected: the runner's options" in done.stderr


def test_the_json_report_follows_the_schema(tmp_path: Path) -> None:
    out = tmp_path / "out.pte"
    api.rewrite(FIXTURES / "two_methods_copy.pte", out, runtime="1.5")
    done = invoke("validate", FIXTURES / "two_methods_copy.pte", out, "--engine", "executorch", "--inputs",
                  _inputs("two_methods_copy"), "--format", "json")
    document = json.loads(done.stdout)
    jsonschema.validate(document, SCHEMA)
    assert done.exit_code == 0 and document["engine"] == "executorch" and document["probed_copies"] == 8
    assert [m["method"] for m in document["methods"]] == ["encode", "forward"]


def test_both_engines_return_one_record_with_one_verdict_rule(tmp_path: Path) -> None:
    """One ``ValidationResult`` whichever engine ran the pair: the same per-method record, verdict and exit code,
    the runtime's facts in ``engine``, the runner's measurements in each method's ``runs``."""
    source, out = FIXTURES / "mlp_copy.pte", tmp_path / "out.pte"
    api.rewrite(source, out, runtime="1.5")
    runner = api.validate(source, out, inputs=_inputs("mlp_copy"), simulate_devices=True, calls=3)
    engine = _engine(source, out, "mlp_copy")
    assert type(runner) is type(engine) is ValidationResult
    assert runner.engine is None and engine.engine is not None
    assert [type(mv) for mv in runner.methods] == [type(mv) for mv in engine.methods]
    assert runner.verdict is engine.verdict and runner.verdict.value == "pass" and runner.verdict.exit_code == 0
    assert [c.held_by for c in runner.methods[0].moved] == [c.held_by for c in engine.methods[0].moved]
    assert runner.methods[0].runs is not None and engine.methods[0].runs is None
    assert "engine" not in runner.to_json() and engine.to_json()["engine"] == "executorch"


def test_two_folders_validate_in_the_real_runtime_and_their_json_follows_the_schema(tmp_path: Path) -> None:
    """Several pairs with the engine: NAME.expected.pt found beside a program is the runner's and is not asked for
    (it was refused as if --expected had been given: exit 2), and each result is the engine's, as the schema says
    (it described only the runner's results)."""
    folder = tmp_path / "models"
    folder.mkdir()
    for name in ("mlp_copy", "kv_cache_copy"):
        for suffix in (".pte", ".inputs.pt", ".expected.pt"):
            if (FIXTURES / f"{name}{suffix}").exists():
                (folder / f"{name}{suffix}").write_bytes((FIXTURES / f"{name}{suffix}").read_bytes())
        (folder / f"{name}.expected.pt").write_bytes(b"not the engine's")  # never read by the engine
        api.rewrite(folder / f"{name}.pte", folder / f"{name}.devconst.pte", runtime="1.5")
    done = invoke("validate", folder, folder, "--engine", "executorch", "--format", "json")
    document = json.loads(done.stdout)
    jsonschema.validate(document, SCHEMA)
    assert done.exit_code == 0, done.output
    assert [(Path(r["original"]).name, r["engine"], r["verdict"]) for r in document["results"]] == [
        ("kv_cache_copy.pte", "executorch", "pass"), ("mlp_copy.pte", "executorch", "pass")]
    given = invoke("validate", folder, folder, "--engine", "executorch", "--expected", folder / "mlp_copy.expected.pt")
    assert given.exit_code == 2 and "the runner's options" in given.stderr  # named: still refused


# --- real backends never take the process down ---------------------------------------------------------------


def _swapped_blob(tmp_path: Path) -> Path:
    """attention_copy with delegate 1 pointing at delegate 0's blob: the call passes 4 arguments, the blob binds
    5 (the 1.5.1 runtime's XNNPACK reads past the argument list: a SIGSEGV on one machine, an invalid-parameter
    error on another)."""

    def swap(program: m.Program) -> m.Program:
        plan = program.execution_plan[0]  # type: ignore[index]
        delegates = list(plan.delegates or ())
        delegates[1] = m.replace(delegates[1], processed=delegates[0].processed)
        return m.replace(program, execution_plan=(m.replace(plan, delegates=tuple(delegates)),))

    return edit_program(FIXTURES / "attention_copy.pte", tmp_path / "swapped.pte", swap)


def test_a_call_its_blob_binds_past_is_refused_before_anything_runs(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """What the runtime does with such a call is undefined (the case crashed here and was refused on another
    machine), so neither engine nor ``run`` hands it to the runtime: one line naming the delegate and the counts,
    the same on every machine, and the runtime's child is never asked to execute anything."""
    swapped = _swapped_blob(tmp_path)
    asked: list[str] = []
    ask = RuntimeWorker.request

    def recorded(self: RuntimeWorker, kind: str, *args: object, what: str, where: str = "") -> object:
        asked.append(kind)
        return ask(self, kind, *args, what=what, where=where)

    monkeypatch.setattr(RuntimeWorker, "request", recorded)
    refusal = ("swapped.pte: method 'forward': delegate 1 (XnnpackBackend) at instruction 8 passes 4 arguments, "
               "and its blob binds 5 (3 read, 2 written): its backend would read past the call's arguments")
    for command in (("validate", swapped, swapped, "--simulate-devices", "--inputs", _inputs("attention_copy")),
                    ("validate", swapped, swapped, "--engine", "executorch", "--inputs", _inputs("attention_copy")),
                    ("validate", FIXTURES / "attention_copy.pte", swapped, "--simulate-devices"),
                    ("run", swapped, "--simulate-devices")):
        done = invoke(*command)
        assert done.exit_code == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert refusal in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert "execute" not in asked and "load" not in asked
    # a blob that binds fewer arguments than the call passes reads nothing that is not there: not refused here
    plan = open_pte(FIXTURES / "attention_copy.pte").program.execution_plan[0]  # type: ignore[index]
    declared = {0: Declaration("XnnpackBackend", (0,), (1,))}
    assert unbindable_calls([plan], ["forward"], [declared]) == []
    assert unbindable_calls([plan], ["forward"], [{0: Declaration("XnnpackBackend", (0, 1, 2, 3, 4, 5, 6), (7,))}])


@pytest.mark.parametrize("engine", ["runner", "executorch"])
def test_a_backend_that_crashes_is_an_error_naming_the_delegate_and_the_signal(engine: str,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The runtime's child dies by SIGSEGV as it is asked to execute (sent by the test, so the same on every
    machine): one error line naming what ran and the signal, and the next request starts a new child."""
    ask = RuntimeWorker.request

    def crashing(self: RuntimeWorker, kind: str, *args: object, what: str, where: str = "") -> object:
        if kind == "execute":
            os.kill(self.process.pid, signal.SIGSEGV)
            self.process.wait()
        return ask(self, kind, *args, what=what, where=where)

    monkeypatch.setattr(RuntimeWorker, "request", crashing)
    program = FIXTURES / "attention_copy.pte"
    done = invoke("validate", program, program, "--simulate-devices", "--engine", engine,
                  "--inputs", _inputs("attention_copy"))
    assert done.exit_code == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "died by SIGSEGV (signal 11)" in done.stderr and "Traceback" not in done.stderr, done.stderr
    named = ("(delegate 0, XnnpackBackend)" if engine == "runner"
             else "while it was asked to run call 1 of method 'forward' of the original")
    assert named in done.stderr, done.stderr
    monkeypatch.setattr(RuntimeWorker, "request", ask)
    # the next request starts a new child: the process goes on
    assert api.validate(FIXTURES / "mlp_copy.pte", FIXTURES / "mlp_copy.pte", inputs=_inputs("mlp_copy"),
                        engine="executorch").verdict.value == "nothing moved"


def test_inspect_and_check_warn_of_a_blob_of_another_call_site(tmp_path: Path) -> None:
    swapped = _swapped_blob(tmp_path)
    warning = ("delegate 1 (XnnpackBackend) is called with 4 arguments, but its blob declares 3 inputs and 2 "
               "outputs (5)")
    assert warning in " ".join(invoke("inspect", swapped).stdout.split())
    assert warning in " ".join(invoke("check", swapped).stdout.split())
    for name in ("attention_copy", "gru_copy", "two_methods_copy", "cond_copy", "deep_copy"):  # no false alarm
        assert "its blob declares" not in invoke("check", FIXTURES / f"{name}.pte").stdout


def test_a_child_that_aborts_is_an_error_and_the_next_request_restarts_it() -> None:
    child = worker()
    child.request("backends", what="list its backends")
    os.kill(child.process.pid, signal.SIGABRT)
    child.process.wait()
    with pytest.raises(RuntimeDied, match=r"died by SIGABRT \(signal 6\) while it was asked to list"):
        child.request("backends", what="list its backends")
    assert worker() is not child and worker().request("backends", what="list its backends")[0] == "1.5.1"


def test_a_backend_that_fails_to_start_gives_its_own_error() -> None:
    """The docs' recipe on a Conv2d with a bias: XNNPACK refuses the graph, and validate says so in its words
    instead of running a stand-in."""
    conv = ROOT / "tests" / "fixtures" / "refused" / "conv2d_bias_copy.pte"
    inputs = conv.with_name("conv2d_bias_copy.inputs.pt")
    done = invoke("validate", conv, conv, "--simulate-devices", "--inputs", inputs)
    assert done.exit_code == 2 and "Failed to create convolution node" in done.stderr
    assert "xnn_status_invalid_parameter" in done.stderr and "opaque" not in done.stderr


def test_the_corpus_external_program_is_refused_for_its_backend() -> None:
    external = pte_path("v_g_external_copy")
    done = invoke("validate", external, external, "--engine", "executorch")
    assert done.exit_code == 2 and "does not register" in done.stderr
