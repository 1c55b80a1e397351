"""The delegate-boundary check of ``validate``, on delegates nobody can execute here (opaque) and on real ones.

Programs whose backends have no executor are the examples with their delegates renamed to ``CudaBackend``
or ``TensorRTBackend`` (blob kept).  Wrong rewrites are the tool's own correct rewrite with one thing broken.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from cli_runner import invoke
from forge import edit_plans, edit_program, flip_byte, with_backend, with_value
from pte_devconst.rewriter import rewrite_file
from pte_devconst.runner.transcript import ArgRecord, DelegateCallRecord, Resident, compare_calls
from pte_devconst.runner.validate import BOUNDARY_CHECK, moved_constants, validate
from pte_devconst.schema import model as m
from pte_devconst.program.dataflow import delegate_call_sites
from pte_devconst.util.errors import PteDevconstError
from pte_devconst.schema.pte_file import open_pte

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "models"
DEVICE_EXAMPLES = ["mlp_copy", "mlp_legacy", "transformer_copy", "transformer_legacy", "two_gpu_copy",
                   "two_gpu_legacy"]


def opaque_pair(name: str, tmp_path: Path, backend: str = "CudaBackend") -> tuple[Path, Path]:
    """An example with its delegates renamed to ``backend``, and the tool's rewrite of it."""
    original = with_backend(EXAMPLES / f"{name}.pte", tmp_path / f"{name}.{backend}.pte", backend)
    rewritten = tmp_path / f"{name}.{backend}.devconst.pte"
    rewrite_file(original, rewritten)
    return original, rewritten


def check(result, name: str):  # noqa: ANN001, ANN201 - a ValidationResult's one method's check by name
    (mv,) = result.methods
    return next(c for c in mv.checks if c.name == name)


def run_validate(original: Path, rewritten: Path, name: str, **options):  # noqa: ANN003, ANN201
    return validate(original, rewritten, inputs=EXAMPLES / f"{name}.inputs.pt", simulate_devices=True, **options)


@pytest.mark.parametrize("backend", ["CudaBackend", "TensorRTBackend"])
@pytest.mark.parametrize("name", DEVICE_EXAMPLES)
def test_rewrites_of_programs_without_an_executor_pass(name: str, backend: str, tmp_path: Path) -> None:
    original, rewritten = opaque_pair(name, tmp_path, backend)
    result = run_validate(original, rewritten, name)
    assert result.passed, [(c.name, c.detail) for c in result.methods[0].checks]
    (mv,) = result.methods
    assert mv.opaque_backends == [backend] and mv.moved
    assert check(result, BOUNDARY_CHECK).status.value == "pass"
    assert mv.boundary.delegate_calls >= 2 and not mv.boundary.differences
    # Every output comes from the opaque delegate: comparing it with eager PyTorch would be meaningless, so
    # expected outputs would compare nothing, which is an error (never a PASS that compared nothing).
    with pytest.raises(PteDevconstError, match=f"every output depends on opaque delegates \\({backend}\\)"):
        run_validate(original, rewritten, name, expected=EXAMPLES / f"{name}.expected.pt")


def _moved(original: Path, rewritten: Path) -> list:
    with open_pte(original) as a, open_pte(rewritten) as b:
        return moved_constants(a.program, b.program)["forward"]


def _outputs(path: Path) -> set[int]:
    """The values the program's delegate calls write (their outputs differ too when an input did)."""
    with open_pte(path) as pte:
        return {v for site in delegate_call_sites(pte.program.plan("forward")) for v in site.outputs}


def _causes(differences: list[dict], path: Path) -> list[tuple[int, int, str]]:
    """(call, value in the rewrite, what) of each difference in a delegate's inputs."""
    outputs = _outputs(path)
    return [(d["call"], d["value"]["after"], d["what"]) for d in differences if d["value"]["after"] not in outputs]


def _failure(original: Path, rewritten: Path, name: str) -> tuple[str, list[dict]]:
    """validate through the command line: must exit 1; returns the boundary row's detail and differences (JSON)."""
    done = invoke("validate", original, rewritten, "--inputs", EXAMPLES / f"{name}.inputs.pt", "--simulate-devices",
                  "--format", "json")
    assert done.exit_code == 1, done.output
    report = json.loads(done.stdout)
    (method,) = report["methods"]
    boundary = next(c for c in method["checks"] if c["name"] == BOUNDARY_CHECK)
    assert boundary["status"] == "fail"
    text = invoke("validate", original, rewritten, "--inputs", EXAMPLES / f"{name}.inputs.pt", "--simulate-devices")
    assert text.exit_code == 1 and "FAIL" in text.stdout
    differences = method["boundary"]["differences"]
    assert differences[0]["line"] in text.stdout  # the first difference, as one whole line
    assert boundary["detail"].startswith(differences[0]["line"])
    return boundary["detail"], differences


@pytest.mark.parametrize("name", ["mlp_copy", "mlp_legacy"])
def test_a_flipped_byte_in_a_moved_constant_fails(name: str, tmp_path: Path) -> None:
    original, rewritten = opaque_pair(name, tmp_path)
    weight = max(_moved(original, rewritten), key=lambda c: c.nbytes)
    with open_pte(rewritten) as pte:
        span = pte.tensor_span(pte.program.plan("forward").values[weight.value])
    broken = flip_byte(rewritten, tmp_path / "flipped.pte", span.offset + 100, 0x10)
    detail, differences = _failure(original, broken, name)
    # The byte reaches the (opaque) delegate in each call as the moved weight: that argument, its bytes.
    assert detail.startswith("method forward, call 0, delegate call 0 (instruction ")
    assert f"{weight.value}): bytes differ" in detail
    assert _causes(differences, broken) == [(0, weight.value, "bytes"), (1, weight.value, "bytes")]


def test_two_moved_constants_with_swapped_data_fail(tmp_path: Path) -> None:
    original, rewritten = opaque_pair("transformer_copy", tmp_path)
    moved = _moved(original, rewritten)
    with open_pte(rewritten) as pte:
        values = pte.program.plan("forward").values
        same_size = {}
        for c in moved:
            same_size.setdefault(c.nbytes, []).append(values[c.value].data_buffer_idx)
    first, second = next(sorted(set(v))[:2] for v in same_size.values() if len(set(v)) >= 2)

    def swap(program: m.Program) -> m.Program:
        (segment,) = program.mutable_data_segments
        offsets = list(segment.offsets)
        offsets[first], offsets[second] = offsets[second], offsets[first]
        return m.replace(program, mutable_data_segments=(m.replace(segment, offsets=tuple(offsets)),))

    broken = edit_program(rewritten, tmp_path / "swapped.pte", swap)
    _, differences = _failure(original, broken, "transformer_copy")
    swapped = {c.value for c in moved if values[c.value].data_buffer_idx in (first, second)}
    assert len(swapped) >= 2
    assert {value for _, value, _ in _causes(differences, broken)} == swapped
    assert {d["what"] for d in differences} == {"bytes"}


def test_a_moved_constant_loading_another_ones_data_fails(tmp_path: Path) -> None:
    original, rewritten = opaque_pair("mlp_copy", tmp_path)
    small, other = sorted(_moved(original, rewritten), key=lambda c: c.nbytes)[:2]  # b2 (32 B) reads b1's entry

    def point(program: m.Program) -> m.Program:
        plan = program.plan("forward")
        target = plan.values[other.value].data_buffer_idx
        return edit_plans(program, lambda p: with_value(p, small.value, m.replace(p.values[small.value],
                                                                                   data_buffer_idx=target)))

    broken = edit_program(rewritten, tmp_path / "pointed.pte", point)
    _, differences = _failure(original, broken, "mlp_copy")
    assert _causes(differences, broken) == [(0, small.value, "bytes"), (1, small.value, "bytes")]


def test_a_rewired_delegate_argument_fails(tmp_path: Path) -> None:
    original, rewritten = opaque_pair("mlp_copy", tmp_path)
    moved = {c.value for c in _moved(original, rewritten)}

    def rewire(plan: m.ExecutionPlan) -> m.ExecutionPlan:
        chain = plan.chains[0]
        (position, call) = next((i, ins) for i, ins in enumerate(chain.instructions) if isinstance(ins, m.DelegateCall))
        args = list(call.args)
        a, b = [i for i, v in enumerate(args) if v in moved][:2]
        args[a] = args[b]  # the first moved weight's place now gets another moved constant
        instructions = list(chain.instructions)
        instructions[position] = m.replace(call, args=tuple(args))
        return m.replace(plan, chains=(m.replace(chain, instructions=tuple(instructions)),))

    broken = edit_program(rewritten, tmp_path / "rewired.pte", lambda p: edit_plans(p, rewire))
    detail, differences = _failure(original, broken, "mlp_copy")
    assert ("argument 0 (value 5 -> 1): the rewrite passes moved constant 1, the original passed value 5 (copy "
            "of value 0), neither it nor a copy of it") in detail
    assert [what for call, value, what in _causes(differences, broken) if call == 0] == ["value", "shape", "bytes"]


def test_corruption_hidden_by_a_relu_fails_with_equal_outputs(tmp_path: Path) -> None:
    """The reference backend really executes the MLP; relu(fc1) zeroes a unit whose bias got corrupted."""
    name = "mlp_legacy"
    original = EXAMPLES / f"{name}.pte"
    rewritten = tmp_path / "mlp.devconst.pte"
    rewrite_file(original, rewritten)
    with open_pte(rewritten) as pte:
        values = pte.program.plan("forward").values
        bias = next(c for c in _moved(original, rewritten) if values[c.value].sizes == (32,))
        span = pte.tensor_span(values[bias.value])
        data = torch.frombuffer(bytearray(pte.read(span)), dtype=torch.float32)
    unit = int(torch.nonzero(data < 0)[0])  # with zero inputs, this unit's pre-activation is its bias: < 0
    broken = flip_byte(rewritten, tmp_path / "relu.pte", span.offset + 4 * unit)  # lowest mantissa bit: still < 0
    zeros = tmp_path / "zeros.pt"
    torch.save({"forward": [(torch.zeros(4, 16),), (torch.zeros(4, 16),)]}, zeros)
    result = validate(original, broken, inputs=zeros, simulate_devices=True)
    (mv,) = result.methods
    assert not mv.opaque_backends  # PteDevconstReference ran for real
    assert check(result, "outputs agree (bit-identical)").status.value == "pass"
    boundary = check(result, BOUNDARY_CHECK)
    assert boundary.status.value == "fail" and f"value {bias.value}): bytes differ" in boundary.detail
    assert not result.passed


# --- comparing transcripts, record by record ------------------------------------------------------------

def _arg(position: int, value: int, **kw) -> ArgRecord:
    fields = dict(kind="tensor", dtype="float32", shape=(4,), residence="cuda:0", digest=(1, 2))
    fields.update(kw)
    return ArgRecord(position, value, **fields)


def _call(*args: ArgRecord, instruction: int = 3, delegate: int = 0,
          backend: str = "CudaBackend") -> DelegateCallRecord:
    return DelegateCallRecord(0, 0, instruction, delegate, backend, True, tuple(args))


MOVED = {0: Resident("cuda:0")}


def _whats(before: list, after: list) -> list[str]:
    return [d.what for d in compare_calls(0, before, after, MOVED)]


def test_the_one_allowed_difference_in_both_styles() -> None:
    moved_arg = _arg(0, 0)  # the rewrite: constant 0, on its device
    copy_style = _arg(0, 7, h2d_source=0)  # the original: value 7, filled by an _h2d_copy of constant 0
    legacy_style = _arg(0, 0, residence="cpu")  # the original: constant 0 itself, on the host
    for original in (copy_style, legacy_style):
        assert _whats([_call(original, instruction=5)], [_call(moved_arg, instruction=1)]) == []


@pytest.mark.parametrize("before, after, whats", [
    (_arg(0, 7, h2d_source=3), _arg(0, 0), ["value"]),  # a copy of another constant
    (_arg(0, 7, h2d_source=0), _arg(0, 0, residence="cpu"), ["residence"]),  # moved, but not on its device
    (_arg(0, 7, h2d_source=0), _arg(0, 0, digest=(1, 3)), ["bytes"]),
    (_arg(0, 7, h2d_source=0), _arg(0, 0, dtype="float16"), ["dtype"]),
    (_arg(0, 7, h2d_source=0), _arg(0, 0, shape=(2, 2)), ["shape"]),
    (_arg(0, 9), _arg(0, 9, residence="cpu"), ["residence"]),  # anything else must be equal
    (_arg(0, 9), _arg(0, 8), ["value"]),
    (_arg(0, 9, h2d_source=4), _arg(0, 9), ["value"]),
    (_arg(0, 9), _arg(0, 9, kind="int", dtype=None, shape=None, residence=None, digest=None, literal="3"),
     ["residence", "kind"]),
    (_arg(0, 9, kind="int", literal="3"), _arg(0, 9, kind="int", literal="4"), ["value"]),
])
def test_every_other_difference_is_named(before: ArgRecord, after: ArgRecord, whats: list[str]) -> None:
    assert _whats([_call(before)], [_call(after)]) == whats


def test_structural_differences() -> None:
    one = _call(_arg(0, 9))
    assert _whats([one, one], [one]) == ["calls"]
    assert _whats([one], [_call(_arg(0, 9), delegate=1)]) == ["delegate"]
    assert _whats([one], [_call(_arg(0, 9), _arg(1, 10))]) == ["arguments"]
    (difference,) = compare_calls(2, [_call(_arg(0, 9), instruction=5)], [_call(_arg(0, 9, digest=(0, 0)),
                                                                                 instruction=1)], MOVED)
    assert difference.line("forward") == ("method forward, call 2, delegate call 0 (instruction 5 -> 1, delegate 0, "
                                          "CudaBackend), argument 0 (value 9): bytes differ (digest "
                                          "00000000000000010000000000000002 before, "
                                          "00000000000000000000000000000000 after)")
