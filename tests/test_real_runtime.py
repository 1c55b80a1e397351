"""Rewrites against the real ExecuTorch 1.5.1 runtime: the original's and the rewrite's CPU flips compute the
same bits, call after call (tests/real_runtime.py; docs/robustness.md, "The real-runtime check").

The programs are real exports whose device delegate is XNNPACK (tests/fixtures/xnnpack_device, made by
examples/xnnpack_device.py), in copy and legacy style.  Each encoding in ``ENCODINGS`` is checked on every
fixture, plain and with ``--fold`` where something folds.  The check itself is held to catching wrong files:
forged rewrites (a constant on an activation's bytes, two constants swapped), the probe on copies that run
every call, a first-call guard that never closes.
"""

from __future__ import annotations

import dataclasses
import gc
import hashlib
import json
from pathlib import Path
from typing import Any, Callable

import pytest
import torch
from executorch.exir._serialize import _program  # noqa: F401 - at collection: its first import takes ~15 s
from executorch.runtime import Runtime

from real_runtime import (assert_runtime_agrees, constant_copies, first_call_region, flip_to_cpu, method_names,
                          nbytes, planned, probe_constant_copies, read_program, runtime_disagreements, same_bits,
                          write_program)
from et_oracle import run_calls_with_executorch
from pte_devconst.api import rewrite

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "fixtures" / "xnnpack_device"
MANIFEST = json.loads((FIXTURES / "manifest.json").read_text())
ENTRIES = {entry["name"]: entry for entry in MANIFEST["fixtures"]}
NAMES = sorted(ENTRIES)
FOLDING = sorted(name for name, entry in ENTRIES.items() if entry["model"] == "fold")
# Eager PyTorch and XNNPACK sum in other orders: the flip is checked against eager within float32 noise.
RTOL, ATOL = 1e-4, 1e-5


@dataclasses.dataclass(frozen=True)
class Encoding:
    """One encoding ``rewrite`` writes: the API's keyword arguments that select it, whether copy-style moves
    become guarded first-call copies (the probe then holds them to running once), and whether it changes
    legacy-style programs at all."""

    name: str
    options: dict[str, Any]
    first_call_copies: bool
    changes_legacy: bool = True

    def __str__(self) -> str:
        return self.name

    def probes(self, style: str) -> bool:
        return self.first_call_copies and style == "copy"

    def changes(self, style: str) -> bool:
        return style == "copy" or self.changes_legacy


ENCODINGS = (
    Encoding("1.6", {}, first_call_copies=False),  # device tensors with initial data (the default)
    Encoding("1.5", {"runtime": "1.5"}, first_call_copies=True, changes_legacy=False),  # first-call copies
)


def program(name: str) -> bytes:
    return (FIXTURES / f"{name}.pte").read_bytes()


def calls_of(name: str, kind: str = "inputs") -> dict[str, list[Any]]:
    loaded: dict[str, list[Any]] = torch.load(FIXTURES / f"{name}.{kind}.pt", weights_only=True)
    return loaded


def rewritten(pte: bytes, encoding: Encoding, fold: bool = False) -> bytes:
    """``pte`` rewritten in memory in ``encoding`` (the input itself when nothing moves)."""
    result = rewrite(pte, fold=fold, **encoding.options)
    return result.data if result.data is not None else pte


# --- the fixtures --------------------------------------------------------------------------------------------


def test_the_fixtures_are_what_the_manifest_lists_and_stay_small() -> None:
    assert MANIFEST["versions"]["executorch"] == "1.5.1"
    total = 0
    for entry in ENTRIES.values():
        for file, facts in entry["files"].items():
            data = (FIXTURES / file).read_bytes()
            assert (len(data), hashlib.sha256(data).hexdigest()) == (facts["size"], facts["sha256"]), file
            total += len(data)
        calls = calls_of(entry["name"])
        assert sorted(calls) == sorted(entry["methods"]) == sorted(method_names(program(entry["name"])))
        assert all(len(method_calls) == entry["calls"] >= 3 for method_calls in calls.values())
    assert {entry["style"] for entry in ENTRIES.values()} == {"copy", "legacy"}
    listed = {file for entry in ENTRIES.values() for file in entry["files"]}
    assert {path.name for path in FIXTURES.iterdir()} == listed | {"README.md", "manifest.json"}
    assert total < 1_000_000


def eligible_constants(pte: Path) -> list[dict[str, Any]]:
    """The constants ``pte-devconst inspect`` calls eligible, over all methods (its JSON form)."""
    from pte_devconst.api import inspect

    methods = inspect(pte).to_json()["file"]["methods"]
    return [c for method in methods for c in method["constants"] if c["verdict"].startswith("eligible:")]


@pytest.mark.parametrize("name", NAMES)
def test_the_fixtures_constants_are_eligible_for_their_devices(name: str) -> None:
    """What the exporter means to make: the constants its models leave outside the delegates (``eligible``, by
    construction) are eligible for the devices it tagged; in copy style each is read by ``_h2d_copy.out``s."""
    entry = ENTRIES[name]
    eligible = eligible_constants(FIXTURES / f"{name}.pte")
    assert len(eligible) == entry["eligible"]
    assert {c["verdict"] for c in eligible} == {f"eligible:{device}" for device in entry["devices"]}
    if entry["style"] == "copy":
        assert all(reader.endswith("et_copy::_h2d_copy.out") for c in eligible for reader in c["readers"])


@pytest.mark.parametrize("name", NAMES)
def test_the_flip_runs_what_eager_pytorch_computes(name: str) -> None:
    """The flipped original runs in the real runtime and returns eager PyTorch's outputs (within float32
    noise): the flip keeps the program's meaning, so the comparisons below compare something real."""
    pte = flip_to_cpu(program(name))
    for method, calls in calls_of(name).items():
        got, expected = run_calls_with_executorch(pte, method, calls), calls_of(name, "expected")[method]
        assert len(got) == len(expected) == len(calls)
        for outputs, want in zip(got, expected):
            assert len(outputs) == len(want)
            for a, b in zip(outputs, want):
                torch.testing.assert_close(a, b, rtol=RTOL, atol=ATOL)


def test_the_unflipped_device_program_does_not_load_in_the_pip_runtime() -> None:
    """Why the flip exists: the pip runtime registers the et_copy kernels (and the kernels the flip and the
    probe put in their place), but 1.5.1's pybindings have no CUDA allocator to give them device memory."""
    operators = Runtime.get().operator_registry.operator_names
    assert {"et_copy::_h2d_copy.out", "et_copy::_d2h_copy.out", "aten::alias_copy.out", "aten::add.out"} <= operators
    with pytest.raises(RuntimeError, match="Failed to allocate .* on device 1:0"):
        run_calls_with_executorch(program("mlp_copy"), "forward", calls_of("mlp_copy")["forward"])


# --- every rewrite agrees with its original ------------------------------------------------------------------


@pytest.mark.parametrize("encoding", ENCODINGS, ids=str)
@pytest.mark.parametrize("name", NAMES)
def test_the_rewrite_agrees_with_the_original_in_the_real_runtime(name: str, encoding: Encoding) -> None:
    original, style = program(name), ENTRIES[name]["style"]
    after = rewritten(original, encoding)
    assert (after != original) == encoding.changes(style), "the rewrite moved nothing: this fixture checks nothing"
    assert_runtime_agrees(original, after, calls_of(name), probe=encoding.probes(style))


@pytest.mark.parametrize("encoding", ENCODINGS, ids=str)
@pytest.mark.parametrize("name", FOLDING)
def test_the_folded_rewrite_agrees_with_the_original_in_the_real_runtime(name: str, encoding: Encoding) -> None:
    original, style = program(name), ENTRIES[name]["style"]
    folded = rewritten(original, encoding, fold=True)
    assert (folded != rewritten(original, encoding)) == encoding.changes(style), "--fold folded nothing"
    assert_runtime_agrees(original, folded, calls_of(name), probe=encoding.probes(style))


COPY_STYLE = sorted(name for name, entry in ENTRIES.items() if entry["style"] == "copy")


@pytest.mark.parametrize("fold", [False, True], ids=["plain", "fold"])
@pytest.mark.parametrize("name", COPY_STYLE)
def test_every_conversion_agrees_with_the_original_in_the_real_runtime(name: str, fold: bool) -> None:
    """1.6 -> 1.5 -> 1.6 and 1.5 -> 1.6 -> 1.5 (plain and --fold): every file of the chain, flipped, computes the
    original's bits call after call, and each first-call file copies its constants once (the probe)."""
    if fold and name not in FOLDING:
        pytest.skip("nothing folds here: the plain chain covers it")
    original = program(name)
    by_runtime = {encoding.name: encoding for encoding in ENCODINGS}
    for first, second in (("1.6", "1.5"), ("1.5", "1.6")):
        current = original
        for runtime in (first, second, first):
            encoding = by_runtime[runtime]
            converted = rewritten(current, encoding, fold)
            assert converted != current, (runtime, "the conversion changed nothing")
            assert_runtime_agrees(original, converted, calls_of(name), probe=encoding.probes("copy"))
            current = converted


def test_every_fixture_model_has_a_fold_case_and_both_styles() -> None:
    assert FOLDING == ["fold_copy", "fold_legacy"]
    models = {entry["model"] for entry in ENTRIES.values()}
    assert {(model, style) for model in models for style in ("copy", "legacy")} == \
        {(entry["model"], entry["style"]) for entry in ENTRIES.values()}


# --- the check catches wrong rewrites ------------------------------------------------------------------------


def edited(pte: bytes, edit: Callable[[Any], None]) -> bytes:
    """``pte`` with ``edit(plan)`` applied to its first plan, through ExecuTorch's deserializer/serializer."""
    pte_file = read_program(pte)
    edit(pte_file.program.execution_plan[0])
    return write_program(pte_file)


def _written_every_call(plan: Any) -> set[int]:
    """Values written on every call: method inputs, kernels' outputs (their last argument)."""
    from executorch.exir import schema

    return set(plan.inputs) | {ins.instr_args.args[-1] for ins in plan.chains[0].instructions
                               if isinstance(ins.instr_args, schema.KernelCall)}


def constant_on_an_activation(plan: Any) -> None:
    """Move a resident constant (planned, with initial data) onto the bytes of a tensor written on every call,
    the largest constant that fits there."""
    residents = sorted((t for _, t in planned(plan) if t.data_buffer_idx > 0), key=nbytes, reverse=True)
    for constant in residents:
        for index, tensor in planned(plan):
            where = tensor.allocation_info
            if tensor.data_buffer_idx == 0 and index in _written_every_call(plan) and \
                    where.memory_offset + nbytes(constant) <= plan.non_const_buffer_sizes[where.memory_id]:
                constant.allocation_info = dataclasses.replace(where)
                return
    raise AssertionError("no activation to overlap")


def two_constants_swapped(plan: Any) -> None:
    """Swap the initial data of two resident constants of one shape: each is loaded with the other's bytes."""
    residents = [t for _, t in planned(plan) if t.data_buffer_idx > 0]
    a, b = next((a, b) for a in residents for b in residents if a is not b and a.sizes == b.sizes
                and a.scalar_type == b.scalar_type)
    a.data_buffer_idx, b.data_buffer_idx = b.data_buffer_idx, a.data_buffer_idx


@pytest.mark.parametrize("name, forge", [("mlp_copy", constant_on_an_activation),
                                         ("mlp_legacy", constant_on_an_activation),
                                         ("kv_cache_copy", two_constants_swapped)],
                         ids=["activation-copy", "activation-legacy", "swapped"])
def test_the_check_catches_a_forged_layout(name: str, forge: Callable[[Any], None]) -> None:
    original = program(name)
    good = rewritten(original, ENCODINGS[0])
    assert_runtime_agrees(original, good, calls_of(name), probe=False)
    wrong = runtime_disagreements(original, edited(good, forge), calls_of(name))
    assert wrong and wrong[0].call == 0, wrong  # wrong from the first call on


def first_call_copy_on_an_activation(plan: Any) -> None:
    """In a 1.5 rewrite: move a first-call copy's destination onto the bytes of a tensor written on every call, the
    largest that fits there (the copy fills it on the first call; the activation overwrites it)."""
    from executorch.exir import schema

    region = first_call_region(plan)
    assert region, "a 1.5 rewrite starts with its first-call prologue"
    instructions = plan.chains[0].instructions
    destinations = [plan.values[instructions[k].instr_args.args[1]].val for k in region
                    if isinstance(instructions[k].instr_args, schema.KernelCall)]
    for destination in sorted(destinations, key=nbytes, reverse=True):
        for index, tensor in planned(plan):
            where = tensor.allocation_info
            if tensor is not destination and index in _written_every_call(plan) and \
                    where.memory_id == destination.allocation_info.memory_id and \
                    where.memory_offset + nbytes(destination) <= plan.non_const_buffer_sizes[where.memory_id]:
                destination.allocation_info = dataclasses.replace(where)
                return
    raise AssertionError("no activation to overlap")


def guard_never_cleared(plan: Any) -> None:
    """In a 1.5 rewrite: the prologue's MoveCall copies a true Bool into the guard, so every call copies again."""
    from executorch.exir import schema

    region = first_call_region(plan)
    assert region
    move = plan.chains[0].instructions[region[-1]].instr_args
    assert isinstance(move, schema.MoveCall)
    plan.values[move.move_from].val = schema.Bool(True)


@pytest.mark.parametrize("name", ["mlp_copy", "attention_copy", "kv_cache_copy"])
def test_the_check_catches_a_wrong_first_call_encoding(name: str) -> None:
    """The 1.5 encoding forged two ways, each caught by the real runtime: a destination the layout lets an
    activation overwrite (wrong outputs), and a guard never cleared (right outputs, but
    the probe sees the copies run again)."""
    original, encoding = program(name), ENCODINGS[1]
    good = rewritten(original, encoding)
    assert_runtime_agrees(original, good, calls_of(name), probe=True)
    overwritten = runtime_disagreements(original, edited(good, first_call_copy_on_an_activation), calls_of(name))
    assert overwritten, "an activation over a first-call copy's destination went unseen"
    again = edited(good, guard_never_cleared)
    assert not runtime_disagreements(original, again, calls_of(name))  # the outputs alone cannot tell
    assert runtime_disagreements(original, again, calls_of(name), probe=True)


# --- the probe -----------------------------------------------------------------------------------------------


def fresh_region_output(plan: Any) -> None:
    """A new float32[16] method output in a fresh region at the end of arena 1 that no instruction writes."""
    from executorch.exir import schema

    offset = (plan.non_const_buffer_sizes[1] + 15) // 16 * 16
    plan.non_const_buffer_sizes[1] = offset + 64
    plan.values.append(schema.EValue(schema.Tensor(
        scalar_type=schema.ScalarType.FLOAT, storage_offset=0, sizes=[16], dim_order=[0], requires_grad=False,
        layout=0, data_buffer_idx=0, allocation_info=schema.AllocationDetails(1, offset, 0),
        shape_dynamism=schema.TensorShapeDynamism.STATIC)))
    plan.outputs.append(len(plan.values) - 1)


def test_a_freshly_loaded_method_starts_with_zeroed_arenas() -> None:
    """What the probe needs on the first call: a planned region holds zeros until something writes it, also
    after other programs wrote non-zero bytes and were freed (the pybindings allocate arenas as zeroed
    vectors, not from recycled memory)."""
    pte = flip_to_cpu(program("mlp_copy"))
    calls = calls_of("mlp_copy")["forward"]
    for _ in range(3):
        assert run_calls_with_executorch(pte, "forward", calls)[0][0].abs().sum() > 0  # the arenas get dirty
        gc.collect()
        extra = run_calls_with_executorch(edited(pte, fresh_region_output), "forward", calls)
        assert all(torch.equal(outputs[-1], torch.zeros(16)) for outputs in extra)


def test_the_probe_fails_on_the_original_whose_copies_run_every_call() -> None:
    original = flip_to_cpu(program("mlp_copy"))
    calls = calls_of("mlp_copy")["forward"]
    (plan,) = read_program(original).program.execution_plan
    assert len(constant_copies(plan)) == 4 and not constant_copies(plan, "first_call")
    plain = run_calls_with_executorch(original, "forward", calls)
    probed = run_calls_with_executorch(probe_constant_copies(original), "forward", calls)
    assert same_bits(plain[0][0], probed[0][0])  # call 1: the destinations held zeros, the add copied
    assert not same_bits(plain[1][0], probed[1][0])  # call 2: the copies ran again, the weights doubled
    assert not same_bits(plain[2][0], probed[2][0])


def first_call_by_hand(plan: Any, close: bool = True) -> None:
    """The first-call encoding (docs/file-format.md) made by hand on a plan whose constant copies'
    destinations no other tensor shares: the copies move into a prologue guarded by a Bool that starts true,
    and a MoveCall from a Bool(false) clears it (``close=False`` leaves it out: the copies run every call)."""
    from executorch.exir import schema

    copies = constant_copies(plan)
    regions = {k: (t.allocation_info.memory_id, t.allocation_info.memory_offset,
                   t.allocation_info.memory_offset + nbytes(t)) for k, t in planned(plan)}
    for index in copies:
        out = plan.chains[0].instructions[index].instr_args.args[1]
        mine = regions[out]
        assert not any(k != out and m == mine[0] and s < mine[2] and mine[1] < e for k, (m, s, e) in regions.items())
    plan.values.extend([schema.EValue(schema.Bool(True)), schema.EValue(schema.Bool(False))])
    guard, false = len(plan.values) - 2, len(plan.values) - 1
    instructions = plan.chains[0].instructions
    prologue = [instructions[k] for k in copies] + ([schema.Instruction(schema.MoveCall(false, guard))] if close
                                                   else [])
    rest = [ins for k, ins in enumerate(instructions) if k not in copies]
    jump = schema.Instruction(schema.JumpFalseCall(guard, 1 + len(prologue)))
    plan.chains[0].instructions = [jump, *prologue, *rest]
    plan.chains[0].stacktrace = None


def test_the_probe_holds_a_first_call_prologue_to_running_once() -> None:
    original, calls = program("mlp_copy"), calls_of("mlp_copy")
    by_hand = edited(original, first_call_by_hand)
    (plan,) = read_program(by_hand).program.execution_plan
    assert first_call_region(plan) == range(1, 6) and constant_copies(plan, "first_call") == [1, 2, 3, 4]
    assert_runtime_agrees(original, by_hand, calls, probe=True)
    never_closed = edited(original, lambda p: first_call_by_hand(p, close=False))
    assert_runtime_agrees(original, never_closed, calls, probe=False)  # outputs alone cannot tell
    wrong = runtime_disagreements(original, never_closed, calls, probe=True)
    assert wrong and {d.call for d in wrong} == {1, 2}, wrong  # the probe does, from the second call


def test_a_probe_with_nothing_to_probe_is_refused() -> None:
    original = program("mlp_copy")
    with pytest.raises(ValueError, match="no constant copy that runs on the first call only"):
        runtime_disagreements(original, rewritten(original, ENCODINGS[0]), calls_of("mlp_copy"), probe=True)


def test_the_check_wants_every_method_and_three_calls() -> None:
    original = program("two_methods_copy")
    calls = calls_of("two_methods_copy")
    with pytest.raises(ValueError, match="the program has the methods"):
        runtime_disagreements(original, original, {"forward": calls["forward"]})
    with pytest.raises(ValueError, match="at least 3 calls"):
        runtime_disagreements(original, original, {method: c[:2] for method, c in calls.items()})


def test_methods_of_one_loaded_program_share_host_arenas() -> None:
    """Why each method runs on a freshly loaded program: once flipped, every method is host-only, and the
    pybindings give all host-only methods of a program one set of arenas, so running ``encode`` overwrites
    the constants ``forward`` keeps resident (on a device, each method has arenas of its own)."""
    calls = calls_of("two_methods_copy")
    pte = flip_to_cpu(rewritten(program("two_methods_copy"), ENCODINGS[0]))
    alone = run_calls_with_executorch(pte, "forward", calls["forward"])
    loaded = Runtime.get().load_program(pte)
    forward, encode = loaded.load_method("forward"), loaded.load_method("encode")
    interleaved = []
    for forward_call, encode_call in zip(calls["forward"], calls["encode"]):
        interleaved.append([o.clone() for o in forward.execute(list(forward_call))])
        encode.execute(list(encode_call))
    assert not same_bits(interleaved[1][0], alone[1][0])


# --- what else the check could run ---------------------------------------------------------------------------


# Device programs of other folders whose every delegate the pip runtime registers (XNNPACK tagged cuda:0,
# tests/fixtures/xnnpack): checked here too, each call list repeated to three calls.
OTHER_RUNNABLE = ("tests/fixtures/xnnpack/mlp_device_copy.pte", "tests/fixtures/xnnpack/mlp_device_legacy.pte",
                  "examples/models/mlp_xnnpack_copy.pte")  # the README's step 8: a copy of this folder's mlp_copy


@pytest.mark.parametrize("encoding", ENCODINGS, ids=str)
@pytest.mark.parametrize("path", OTHER_RUNNABLE)
def test_other_runnable_device_programs_agree_in_the_real_runtime(path: str, encoding: Encoding) -> None:
    pte = ROOT / path
    original, style = pte.read_bytes(), "copy" if pte.stem.endswith("_copy") else "legacy"
    given = torch.load(pte.with_name(f"{pte.stem}.inputs.pt"), weights_only=True)
    calls = {method: [list(c) for c in (list(method_calls) * 3)[:max(3, len(method_calls))]]
             for method, method_calls in given.items()}
    after = rewritten(original, encoding)
    assert (after != original) == encoding.changes(style)
    assert_runtime_agrees(original, after, calls, probe=encoding.probes(style))


def test_no_other_committed_device_program_runs_in_the_pip_runtime() -> None:
    """The check applies to programs whose device delegates the pip runtime has: only this folder's (and
    tests/fixtures/refused and xnnpack_more, tests/test_executorch_engine.py's: programs the runtime refuses, and
    ones with a .ptd this check does not pass; tests/fixtures/binding, which tests/test_backend_binding.py runs in
    the runtime with edited blobs).  Every
    other committed program either has no delegate with a ``target_device`` (nothing moves) or delegates to
    the project's reference backend or ExecuTorch's demo backend, which the pip runtime does not register.
    A new committed program that the runtime could run fails here: add it to the check (``OTHER_RUNNABLE``)."""
    from pte_devconst.schema.pte_file import open_pte

    registered = set(Runtime.get().backend_registry.registered_backend_names)
    runnable, unregistered = [], set()
    for path in sorted([*(ROOT / "tests" / "fixtures").rglob("*.pte"), *(ROOT / "examples" / "models").glob("*.pte")]):
        if path.parent == FIXTURES or path.name.endswith(".devconst.pte") or \
                str(path.relative_to(ROOT)) in OTHER_RUNNABLE or \
                path.parent.name in ("refused", "xnnpack_more", "binding"):
            continue
        with open_pte(path) as pte:
            delegates = [d for plan in pte.program.execution_plan for d in plan.delegates or ()]
        on_device = [d for d in delegates if any(spec.key == "target_device" for spec in d.compile_specs or ())]
        unregistered |= {d.id for d in on_device if d.id not in registered}
        if on_device and all(d.id in registered for d in delegates):
            runnable.append(path.relative_to(ROOT))
    assert runnable == []
    assert unregistered == {"PteDevconstReference", "BackendWithCompilerDemo"}


# --- bigger models, exported now -----------------------------------------------------------------------------


def _exporter() -> Any:
    import importlib
    import sys

    sys.path.insert(0, str(ROOT / "examples"))
    try:
        return importlib.import_module("xnnpack_device")
    finally:
        sys.path.remove(str(ROOT / "examples"))


BIG = [model.name for model in _exporter().BIG]


@pytest.mark.slow
@pytest.mark.parametrize("model", BIG)
def test_bigger_models_exported_now_agree_in_the_real_runtime(model: str, tmp_path: Path) -> None:
    exporter = _exporter()
    (entry,) = [m for m in exporter.BIG if m.name == model]
    for written in exporter.export_model(entry, tmp_path):
        assert len(eligible_constants(tmp_path / f"{written['name']}.pte")) == written["eligible"]
        original = (tmp_path / f"{written['name']}.pte").read_bytes()
        calls = torch.load(tmp_path / f"{written['name']}.inputs.pt", weights_only=True)
        for encoding in ENCODINGS:
            for fold in (False, True):
                after = rewritten(original, encoding, fold)
                assert (after != original) == encoding.changes(written["style"])
                assert_runtime_agrees(original, after, calls, probe=encoding.probes(written["style"]))


@pytest.mark.slow
def test_the_exporter_still_makes_the_committed_fixtures(tmp_path: Path) -> None:
    """``examples/xnnpack_device.py`` run afresh writes the committed bytes (two models, both styles)."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, str(ROOT / "examples" / "xnnpack_device.py"), str(tmp_path),
                           "--only", "mlp", "--only", "fold"], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    made = {entry["name"]: entry for entry in json.loads((tmp_path / "manifest.json").read_text())["fixtures"]}
    assert sorted(made) == ["fold_copy", "fold_legacy", "mlp_copy", "mlp_legacy"]
    for name, entry in made.items():
        assert entry == ENTRIES[name]
