"""The runner on real architectures: tests/fixtures/real_models, exported by examples/real_models.py.

CPU programs must agree with the real ExecuTorch 1.5.1 runtime (calls in order on one loaded method, so
KV caches carry over); every device program must pass ``rewrite`` then ``validate --simulate-devices``
with outputs matching eager PyTorch.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import sys
from pathlib import Path
from typing import Any, Iterator, Sequence

import pytest
import torch

from cli_runner import invoke, invoke_json
from et_oracle import run_calls_with_executorch
from pte_devconst.api import rewrite
from pte_devconst.rewriter import analyze_file
from pte_devconst.runner import method as runner_method
from pte_devconst.runner import run_program
from pte_devconst.runner.validate import ValidationResult, validate
from pte_devconst.schema.pte_file import open_pte

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "fixtures" / "real_models"
MANIFEST = json.loads((FIXTURES / "manifest.json").read_text())
ENTRIES = {entry["name"]: entry for entry in MANIFEST["fixtures"]}
CPU = sorted(name for name, entry in ENTRIES.items() if entry["style"] == "cpu")
DEVICE = sorted(name for name, entry in ENTRIES.items() if entry["style"] != "cpu")
ARCHITECTURES = ("resnet", "mobilenet_v2", "shufflenet_v2", "densenet", "lstm", "gru", "cond", "bert", "gpt2",
                 "llama", "t5", "vit", "whisper", "wav2vec2", "et_llama", "et_llama_static")
VARIANTS = ("cpu", "all_copy", "all_legacy", "mm_copy", "mm_legacy")
# The runner's ATen kernels and ExecuTorch's portable kernels may sum in other orders: a few float32 ulps.
RTOL, ATOL = 1e-5, 1e-6
# Every operator the fixtures call.  A new fixture that needs another one fails here: give the new
# operator a focused test (tests/test_runner_kernels.py) when it has an unusual calling convention.
OPERATORS = frozenset({
    "aten::_local_scalar_dense", "aten::_native_batch_norm_legit_no_training.out", "aten::_softmax.out",
    "aten::abs.out", "aten::add.out", "aten::addmm.out", "aten::alias_copy.out", "aten::any.out",
    "aten::arange.start_out", "aten::avg_pool2d.out", "aten::bitwise_and.Tensor_out", "aten::bmm.out",
    "aten::cat.out", "aten::convolution.out", "aten::copy_", "aten::cos.out", "aten::cumsum.out", "aten::div.out",
    "aten::embedding.out", "aten::eq.Scalar_out", "aten::eq.Tensor_out", "aten::expand_copy.out",
    "aten::flip.out", "aten::full.out", "aten::full_like.out", "aten::gather.out", "aten::ge.Scalar_out",
    "aten::gelu.out", "aten::gt.Scalar_out", "aten::hardtanh.out", "aten::index.Tensor_out",
    "aten::index_put.out", "aten::le.Tensor_out", "aten::log.out",
    "aten::logical_not.out", "aten::lt.Scalar_out", "aten::max_pool2d_with_indices.out", "aten::mean.out",
    "aten::minimum.out", "aten::mm.out", "aten::mul.Scalar_out", "aten::mul.out", "aten::native_group_norm.out",
    "aten::native_layer_norm.out", "aten::ne.Scalar_out", "aten::neg.out", "aten::permute_copy.out",
    "aten::pow.Tensor_Scalar_out", "aten::relu.out", "aten::repeat.out", "aten::rsqrt.out",
    "aten::scalar_tensor.out", "aten::select_copy.int_out", "aten::sigmoid.out", "aten::sin.out",
    "aten::slice_copy.Tensor_out", "aten::split_with_sizes_copy.out", "aten::squeeze_copy.dims_out",
    "aten::sub.out", "aten::sum.IntList_out", "aten::sym_size.int", "aten::tanh.out",
    "aten::unsqueeze_copy.out", "aten::view_copy.out", "aten::where.self_out",
    "dim_order_ops::_clone_dim_order.out", "dim_order_ops::_to_dim_order_copy.out", "et_copy::_d2h_copy.out",
    "et_copy::_h2d_copy.out", "executorch_prim::add.Scalar", "executorch_prim::et_view.default",
})


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread() -> Iterator[None]:
    """The models are tiny: torch's intra-op threads only add overhead (3x the time on a busy 2-core machine)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def load_calls(folder: Path, name: str, kind: str) -> list:
    return torch.load(folder / f"{name}.{kind}.pt", weights_only=True)["forward"]


def assert_outputs_agree(got: Sequence[Any], want: Sequence[Any], rtol: float, atol: float) -> None:
    """Floats within a tolerance; integers, bools and scalars exactly."""
    assert len(got) == len(want)
    for a, b in zip(got, want):
        if not isinstance(b, torch.Tensor):
            assert a == b
            continue
        assert isinstance(a, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape, (a, b)
        if b.dtype.is_floating_point:
            torch.testing.assert_close(a, b, rtol=rtol, atol=atol)
        else:
            assert torch.equal(a, b)


def max_abs_diff(got: Sequence[Any], want: Sequence[Any]) -> float:
    return max((float((a.double() - b.double()).abs().max()) for a, b in zip(got, want)
                if isinstance(b, torch.Tensor) and b.numel()), default=0.0)


def check_cpu_program(folder: Path, name: str, entry: dict) -> float:
    """Run ``name`` with the runner and with the real runtime, call by call; the largest difference."""
    inputs = load_calls(folder, name, "inputs")
    result = run_program(folder / f"{name}.pte", inputs=inputs, calls=len(inputs))
    live = run_calls_with_executorch(folder / f"{name}.pte", "forward", inputs)
    for call, runtime, eager in zip(result.calls, live, load_calls(folder, name, "expected")):
        assert_outputs_agree(call.outputs, runtime, RTOL, ATOL)
        assert_outputs_agree(call.outputs, eager, entry["rtol"], entry["atol"])
        assert call.copies.h2d.count == 0 and call.copies.d2h.count == 0
    return max(max_abs_diff(c.outputs, r) for c, r in zip(result.calls, live))


def rewrite_and_validate(folder: Path, name: str, entry: dict, tmp_path: Path) -> ValidationResult:
    """``rewrite`` then ``validate --simulate-devices`` over every call of the fixture, in order."""
    out = tmp_path / f"{name}.devconst.pte"
    rewrite(folder / f"{name}.pte", out, fsync=False)
    result = validate(folder / f"{name}.pte", out, inputs=folder / f"{name}.inputs.pt",
                      expected=folder / f"{name}.expected.pt", calls=entry["calls"], rtol=entry["rtol"],
                      atol=entry["atol"], simulate_devices=True)
    assert result.passed, [(c.name, c.detail) for mv in result.methods for c in mv.checks if not c.passed]
    return result


def test_the_fixtures_cover_every_architecture_in_every_variant_and_stay_small() -> None:
    assert not MANIFEST["failed"], MANIFEST["failed"]
    assert set(ENTRIES) == {f"{arch}_{variant}" for arch in ARCHITECTURES for variant in VARIANTS}
    total = 0
    for entry in ENTRIES.values():
        for file in entry["files"]:
            data = (FIXTURES / file["file"]).read_bytes()
            assert hashlib.sha256(data).hexdigest() == file["sha256"], file["file"]  # the manifest is current
            total += len(data)
        assert entry["calls"] == len(load_calls(FIXTURES, entry["name"], "inputs")) >= 2
    assert total < 6_000_000  # the repository travels to a GPU machine with a 64 MiB limit


@pytest.mark.parametrize("name", CPU)
def test_run_agrees_with_the_executorch_runtime(name: str) -> None:
    check_cpu_program(FIXTURES, name, ENTRIES[name])
    stored = load_calls(FIXTURES, name, "runtime")  # what the runtime gave when the fixture was made
    inputs = load_calls(FIXTURES, name, "inputs")
    result = run_program(FIXTURES / f"{name}.pte", inputs=inputs, calls=len(inputs))
    for call, want in zip(result.calls, stored):
        assert_outputs_agree(call.outputs, want, RTOL, ATOL)


@pytest.mark.parametrize("name", ["et_llama_cpu", "et_llama_static_cpu"])
def test_the_kv_cache_carries_over_between_decode_steps(name: str) -> None:
    # The same decode call on a fresh method (an empty cache) gives other logits than after the earlier calls.
    inputs = load_calls(FIXTURES, name, "inputs")
    in_order = run_program(FIXTURES / f"{name}.pte", inputs=inputs, calls=len(inputs)).calls[-1].outputs[0]
    alone = run_program(FIXTURES / f"{name}.pte", inputs=[inputs[-1]], calls=1).calls[0].outputs[0]
    assert not torch.allclose(in_order, alone, atol=1e-3)
    assert torch.allclose(in_order, load_calls(FIXTURES, name, "expected")[-1][0], atol=1e-5)


def test_the_dynamic_llama_prefills_then_decodes_in_one_program() -> None:
    shapes = [tuple(call[0].shape) for call in load_calls(FIXTURES, "et_llama_cpu", "inputs")]
    assert shapes[0] == (1, 3) and set(shapes[1:]) == {(1, 1)}
    with open_pte(FIXTURES / "et_llama_all_copy.pte") as pte:
        plan = pte.program.execution_plan[0]
        tokens = plan.values[plan.inputs[0]]
        assert tokens.shape_dynamism == 1 and tuple(tokens.sizes) == (1, 15)  # DYNAMIC_BOUND, upper bound 15


def _operators_by_fixture() -> dict[str, set[str]]:
    """For each fixture, the operators its program calls."""
    found = {}
    for name in ENTRIES:
        with open_pte(FIXTURES / f"{name}.pte") as pte:
            found[name] = {op.qualified_name for plan in pte.program.execution_plan for op in plan.operators or ()}
    return found


def test_every_operator_the_fixtures_use_resolves_and_executes(monkeypatch: pytest.MonkeyPatch) -> None:
    used = _operators_by_fixture()
    every = set().union(*used.values())
    assert every == OPERATORS, f"new: {sorted(every - OPERATORS)}; gone: {sorted(OPERATORS - every)}"
    executed: set[str] = set()
    resolve = runner_method.resolve_kernel

    def counting(operator: Any, where: str) -> Any:
        kernel = resolve(operator, where)

        def run(rv: Any, args: tuple[int, ...], at: str) -> None:
            kernel(rv, args, at)
            executed.add(operator.qualified_name)

        return run

    monkeypatch.setattr(runner_method, "resolve_kernel", counting)
    uncovered = set(every)
    while uncovered:  # a few fixtures that between them call every operator
        name = max(sorted(used), key=lambda n: len(used[n] & uncovered))
        inputs = load_calls(FIXTURES, name, "inputs")
        run_program(FIXTURES / f"{name}.pte", inputs=inputs, calls=len(inputs), simulate_devices=True)
        uncovered -= used[name]
    assert executed == every


@pytest.mark.parametrize("name", DEVICE)
def test_rewrite_then_validate_passes(name: str, tmp_path: Path) -> None:
    entry = ENTRIES[name]
    result = rewrite_and_validate(FIXTURES, name, entry, tmp_path)
    (method,) = result.methods
    if entry["partition"] == "all":  # every weight is read by the one delegate: all of them move
        assert method.moved and all(c.h2d_before - c.h2d_after == c.moved_bytes_copied_before > 0
                                    for c in method.calls)
        constants = analyze_file(FIXTURES / f"{name}.pte").methods[0].constants
        assert {c.value for c in method.moved if c.nbytes} == {c.value for c in constants if c.eligible and c.nbytes}


def _transposed_on_the_host(name: str) -> list:
    (method,) = analyze_file(FIXTURES / f"{name}.pte").methods
    return [c for c in method.constants if not c.eligible and "permute_copy" in " ".join(c.reasons)]


@pytest.mark.parametrize("arch", ["llama", "t5", "bert", "gpt2", "vit", "whisper", "wav2vec2", "lstm", "et_llama"])
def test_matmul_only_partitions_leave_weight_transposes_on_the_host(arch: str) -> None:
    # What the constant-folding issue builds on: the linear weights reach the delegate only through a
    # host permute_copy on every call, so they cannot move as they are.
    for style in ("copy", "legacy"):
        assert _transposed_on_the_host(f"{arch}_mm_{style}"), f"{arch}_mm_{style}"
        assert not _transposed_on_the_host(f"{arch}_all_{style}")


def test_the_command_line_runs_a_model_with_tensor_list_outputs() -> None:
    # split_with_sizes_copy.out stopped `run` on every LSTM; its outputs now match the runtime's.
    name = "lstm_cpu"
    code, report = invoke_json("run", FIXTURES / f"{name}.pte", "-i", FIXTURES / f"{name}.inputs.pt", "-n", "2")
    assert code == 0
    for call, want in zip(report["calls"], load_calls(FIXTURES, name, "runtime")):
        assert [o["shape"] for o in call["outputs"]] == [list(t.shape) for t in want]
        assert [o["sum"] for o in call["outputs"]] == pytest.approx([float(t.double().sum()) for t in want], abs=1e-5)


def test_the_command_line_rewrites_and_validates_a_real_model(tmp_path: Path) -> None:
    name = "gpt2_mm_copy"
    out = tmp_path / f"{name}.devconst.pte"
    assert invoke("rewrite", FIXTURES / f"{name}.pte", "-o", out, "--no-fsync").exit_code == 0
    result = invoke("validate", FIXTURES / f"{name}.pte", out, "-i", FIXTURES / f"{name}.inputs.pt",
                    "-e", FIXTURES / f"{name}.expected.pt", "--simulate-devices")
    assert result.exit_code == 0, result.stdout + result.stderr
    assert "PASS" in result.stdout


def load_generator() -> Any:
    """examples/ is not a package: the generator is imported from its folder, as ``python examples/...`` runs it."""
    if str(ROOT / "examples") not in sys.path:
        sys.path.insert(0, str(ROOT / "examples"))
    return importlib.import_module("real_models")


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["lstm", "et_llama", "gpt2"])
def test_the_generator_reexports_a_model_that_runs_and_validates(arch: str, tmp_path: Path) -> None:
    if arch == "gpt2":
        pytest.importorskip("transformers")
    generator = load_generator()
    manifest = generator.export_all(tmp_path, only={arch})
    assert not manifest["failed"], manifest["failed"]
    fresh = {entry["name"]: entry for entry in manifest["fixtures"]}
    assert set(fresh) == {f"{arch}_{variant}" for variant in VARIANTS}
    for name, entry in fresh.items():
        assert entry["operators"] == ENTRIES[name]["operators"]  # the same program as the committed one
        if entry["style"] == "cpu":
            check_cpu_program(tmp_path, name, entry)
        else:
            rewrite_and_validate(tmp_path, name, entry, tmp_path)
