"""The memory proof (program/replay.py) and the model fixes of issue 26, on programs built to break the model.

* Four programs (tests/attack_programs.py) that the rewrite at 0f78ed3 rewrote wrong, exit 0 and "re-read and
  checked": their rewrites from that commit are committed (tests/fixtures/attacks/*.rewrite_0f78ed3.pte).
  ``validate --simulate-devices`` executes their delegates (the reference backend's blob says which arguments
  it reads) and fails each; the byte replay rejects each without executing anything, so ``validate
  --opaque-delegates`` fails them too; the fixed model rewrites each correctly; with the model as it was, the
  self-check now refuses each (exit 2, naming the instruction).
* A forged overlap that the lifetime model passes (a value read after a jump that can skip its write carries
  state across calls): the self-check refuses it, and ``validate --opaque-delegates`` fails it.
* The first-call ("1.5") encoding: a prologue copying each constant once, guarded by a Bool a MoveCall clears,
  proven across calls; broken variants rejected.
* Cost: linear in the program, in the budget's steps and in memory.
"""

from __future__ import annotations

import subprocess
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Callable

import pytest
import torch

from attack_programs import NBYTES, jump_skipped_write
from cli_runner import invoke
from et_oracle import run_calls_with_executorch
from real_runtime import compare_runs
from conftest import EXAMPLES, FIXTURES
from forge import edit_plans, edit_program
from pte_devconst import api
from pte_devconst.program import dataflow, effects, kernel_effects, memory
from pte_devconst.program.layout import layout_problems
from pte_devconst.program.memory import storage_groups, view_reads
from pte_devconst.program.once import once_length
from pte_devconst.program.replay import Budget, Origin, budget_for, match_instructions, prove_same_reads
from pte_devconst.program import method_context
from pte_devconst.rewriter import rewrite as rewrite_module
from pte_devconst.program.layout import BufferGrowth
from pte_devconst.rewriter.plan import MethodEdit, RewriteOptions, RewritePlan
from pte_devconst.runner.validate import PROOF_CHECK
from pte_devconst.schema import model as m
from pte_devconst.schema.pte_file import open_pte
from pte_devconst.util.errors import UnsupportedProgramError
from selfcheck_helpers import refused, use_plan

ATTACKS = FIXTURES / "attacks"
NAMES = ("move_call", "view_read_again", "view_of_resident", "output_on_copy")
# Where the byte replay finds each old rewrite wrong: (the instruction and argument, the call)
FIRST_WRONG_READ = {
    "move_call": ("chain 0 instruction 7 (now instruction 5), delegate 2, argument 0 (value 5)", 1),
    "view_read_again": ("chain 0 instruction 4 (now instruction 3), delegate 2, argument 1 (value 6)", 1),
    "view_of_resident": ("chain 0 instruction 2 (now instruction 1), delegate 0, argument 1 (value 3)", 1),
    "output_on_copy": ("chain 0 instruction 2 (now instruction 1), delegate 0, argument 0 (value 2)", 2),
}


def _plan(path: Path) -> m.ExecutionPlan:
    with open_pte(path) as pte:
        return pte.program.execution_plan[0]


def _rows(result: object) -> dict[str, object]:
    return {c.name: c for method in result.methods for c in method.checks}  # type: ignore[attr-defined]


# --- the four classes: what 0f78ed3 wrote ------------------------------------------------------------------------

@pytest.mark.parametrize("name", NAMES)
def test_executing_the_delegates_shows_each_old_rewrite_computes_something_else(name: str) -> None:
    """The bug is real: run with the reference backend, the 0f78ed3 rewrite disagrees with its input."""
    result = api.validate(ATTACKS / f"{name}.pte", ATTACKS / f"{name}.rewrite_0f78ed3.pte", simulate_devices=True,
                          calls=3)
    assert not result.passed
    assert not _rows(result)["delegate boundaries match"].passed


@pytest.mark.parametrize("name", NAMES)
def test_the_byte_replay_rejects_each_old_rewrite_naming_the_read(name: str) -> None:
    mismatch = prove_same_reads(_plan(ATTACKS / f"{name}.pte"), _plan(ATTACKS / f"{name}.rewrite_0f78ed3.pte"))
    assert mismatch is not None
    where, call = FIRST_WRONG_READ[name]
    assert (mismatch.where, mismatch.call) == (where, call), mismatch


@pytest.mark.parametrize("name", NAMES)
def test_validate_with_opaque_delegates_fails_each_old_rewrite(name: str) -> None:
    """How a real CUDA backend is validated: no delegate executes; the static replay row fails it."""
    result = api.validate(ATTACKS / f"{name}.pte", ATTACKS / f"{name}.rewrite_0f78ed3.pte", simulate_devices=True,
                          opaque_delegates=True, calls=3)
    row = _rows(result)[PROOF_CHECK]
    assert not result.passed and not row.passed  # type: ignore[attr-defined]
    assert FIRST_WRONG_READ[name][0] in row.detail  # type: ignore[attr-defined]


@pytest.mark.parametrize("name", NAMES)
def test_the_fixed_model_rewrites_each_correctly(name: str, tmp_path: Path) -> None:
    """The self-check (with the replay) passes and executing the delegates agrees over three calls; the copy
    that a delegate writes stays (class 4)."""
    result = api.rewrite(ATTACKS / f"{name}.pte", tmp_path / "out.pte", fsync=False)
    assert result.verified
    assert len(result.plan.placements) == (0 if name == "output_on_copy" else 1)
    validation = api.validate(ATTACKS / f"{name}.pte", tmp_path / "out.pte", simulate_devices=True, calls=3)
    assert validation.passed, validation.to_json()
    assert _rows(validation)[PROOF_CHECK].passed  # type: ignore[attr-defined]


# The model as it was at 0f78ed3, one class at a time (the functions the fixes added, made to say nothing).
OLD_MODEL: dict[str, Callable[[pytest.MonkeyPatch], None]] = {
    "move_call": lambda mp: mp.setattr(memory, "storage_aliases", lambda effects: []),
    "view_read_again": lambda mp: mp.setattr(memory, "outputs_that_may_be_views", lambda effects: {}),
    "view_of_resident": lambda mp: mp.setattr(memory, "held_before_any_instruction",
                                              lambda e: [i for i in e.inputs if e.values[i].allocation_info]),
    "output_on_copy": lambda mp: _per_call_split(mp),
}


def _per_call_split(mp: pytest.MonkeyPatch) -> None:
    """Each delegate call split by its own arguments, and no blob read, wherever the model's split is made (the
    analysis makes it once for the method's effects; the rest through ``MethodEffects``).  The byte replay keeps
    its own split: what catches the old model must not ask it."""
    def per_call(plan: m.ExecutionPlan, **_: object) -> list[dataflow.DelegateCallSite]:
        return dataflow.delegate_call_sites(plan, per_call=True)

    mp.setattr(effects, "delegate_call_sites", per_call)
    mp.setattr(method_context, "delegate_call_sites", per_call)


# The classes whose wrong read comes from the re-layout: the rewrite falls back to the input's offsets.
FROM_THE_LAYOUT = ("move_call", "view_read_again", "view_of_resident")


@pytest.mark.parametrize("name", NAMES)
def test_with_the_old_model_the_replay_catches_each_naming_the_instruction(name: str, tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """The layout check asks the model that made the layout, so it passes; the replay asks nothing of it.  Where
    the wrong read comes from the re-layout, the rewrite keeps the input's offsets, says why, and then computes
    what the input does (executed over three calls); otherwise the self-check refuses and nothing is written."""
    OLD_MODEL[name](monkeypatch)
    fragment, call = FIRST_WRONG_READ[name]
    if name not in FROM_THE_LAYOUT:
        line = refused(tmp_path, ATTACKS / f"{name}.pte", "the byte replay: ", fragment)
        assert f"call {call}:" in line
        return
    out = tmp_path / "out.pte"
    result = invoke("rewrite", ATTACKS / f"{name}.pte", "-o", out)
    assert result.exit_code == 0, result.stderr
    shown = " ".join(result.stdout.split())
    assert "kept offsets (replay)" in shown and "the byte replay found a read it changes" in shown
    assert fragment in shown and f"call {call}:" in shown, shown
    rewritten = api.rewrite(ATTACKS / f"{name}.pte", tmp_path / "api.pte", fsync=False)
    assert not any(g.relaid for edit in rewritten.plan.methods for g in edit.buffers)
    assert len(rewritten.plan.memory.kept_offsets) == 1 and "byte replay" in rewritten.plan.memory.kept_offsets[0]
    validation = api.validate(ATTACKS / f"{name}.pte", out, simulate_devices=True, calls=3)
    assert validation.passed, validation.to_json()


def test_a_wrong_read_that_is_not_the_layout_s_is_refused_even_with_the_offsets_kept(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The fallback is for the layout only: a plan whose placement is wrong fails the replay again with the input's
    offsets, and the rewrite refuses (``output_on_copy`` with the old model moves a copy a delegate writes)."""
    OLD_MODEL["output_on_copy"](monkeypatch)
    plans: list[RewritePlan] = []
    real = rewrite_module.plan_file

    def counted(*args: object, **kwargs: object) -> RewritePlan:
        plans.append(real(*args, **kwargs))  # type: ignore[arg-type]
        return plans[-1]

    monkeypatch.setattr(rewrite_module, "plan_file", counted)
    refused(tmp_path, ATTACKS / "output_on_copy.pte", "the byte replay: ", FIRST_WRONG_READ["output_on_copy"][0])
    assert [p.options.relayout for p in plans] in ([True], [True, False])


# --- the model's fixes, asked directly ---------------------------------------------------------------------------

def test_a_move_makes_one_storage_group_of_source_and_destination() -> None:
    plan = _plan(ATTACKS / "move_call.pte")
    groups = storage_groups(effects.MethodEffects(plan), [2])[2]
    assert any({4, 5} <= set(g.members) for g in groups)  # T (4) moved into M (5): one group, M's uses its own


def test_a_delegate_output_on_exactly_a_region_written_before_is_a_view_read() -> None:
    plan = _plan(ATTACKS / "view_read_again.pte")
    reads = view_reads(effects.MethodEffects(plan))
    assert reads[4] == [(6, (0, 4))]  # V (6), an output by the split, on T's (4) bytes
    sites = dataflow.delegate_call_sites(plan)
    assert sites[-1].sure == (2,) and sites[-1].read == (0,)  # the split: V (1) and the new last (2) are outputs


def test_initial_data_holds_its_place_for_views() -> None:
    reads = view_reads(effects.MethodEffects(_plan(ATTACKS / "view_of_resident.pte")))
    assert reads[1] == [(3, (0, 2))]  # V (3) reads the resident C (1)


def test_every_call_of_one_delegate_has_one_signature() -> None:
    plan = _plan(ATTACKS / "output_on_copy.pte")
    per_call = [(s.instruction, s.read) for s in dataflow.delegate_call_sites(plan, per_call=True)]
    assert per_call == [(2, (0,)), (3, (0, 1)), (4, (0, 1))]  # the second call of delegate 0: D mentioned before
    assert [(s.instruction, s.read) for s in dataflow.delegate_call_sites(plan)] == [(2, (0,)), (3, (0,)),
                                                                                     (4, (0, 1))]
    assert 2 in effects.MethodEffects(plan).writes[3]  # so the second call writes D, and the copy stays


def test_list_outs_are_written_not_read() -> None:
    """native_layer_norm.out returns its three outs as one list value; split_with_sizes_copy.out passes its list
    of outs twice, as two list values with the same items."""
    items = {10: (5, 6, 7), 11: (5, 6, 7)}.get
    assert kernel_effects.kernel_writes("aten::native_layer_norm.out", (1, 2, 3, 4, 9, 5, 6, 7, 10),
                                 lambda v: items(v) or ()) == (5, 6, 7, 10)
    assert kernel_effects.kernel_writes("aten::split_with_sizes_copy.out", (1, 2, 3, 10, 11),
                                 lambda v: items(v) or ()) == (10, 11)


def test_the_tools_own_output_rewritten_again_is_proven(tmp_path: Path) -> None:
    """A file that already holds resident constants (--min-bytes left some behind): its re-layout moves them,
    and the second rewrite is proven and validates."""
    source = FIXTURES / "real_models" / "vit_all_copy.pte"
    first = api.rewrite(source, tmp_path / "first.pte", min_bytes=200, fsync=False)
    assert first.plan.placements and first.plan.skipped
    second = api.rewrite(tmp_path / "first.pte", tmp_path / "second.pte", fsync=False)
    assert second.verified and second.plan.placements
    validation = api.validate(source, tmp_path / "second.pte", simulate_devices=True,
                              inputs=source.with_suffix(".inputs.pt"))
    assert validation.passed, validation.to_json()


# --- a forged overlap the lifetime model passes ------------------------------------------------------------------

FORGED = {6: 64, 8: 16, 9: 80}  # xd2 elsewhere, P on xd's bytes (xd is dead before P's write), out elsewhere
FORGED_SIZE = 96


def _forge_layout(plan: m.ExecutionPlan) -> m.ExecutionPlan:
    values = list(plan.values)
    for index, offset in FORGED.items():
        values[index] = m.replace(values[index], allocation_info=m.AllocationDetails(2, offset))
    sizes = list(plan.non_const_buffer_sizes)
    sizes[2] = FORGED_SIZE
    return m.replace(plan, values=tuple(values), non_const_buffer_sizes=tuple(sizes))


def _flag_calls() -> dict[str, list[tuple[torch.Tensor, torch.Tensor]]]:
    x = torch.arange(4, dtype=torch.float32).reshape(2, 2)
    return {"forward": [(x, torch.tensor(True)), (x + 1, torch.tensor(False))]}


def test_the_forged_overlap_passes_the_lifetime_model_and_fails_validate(tmp_path: Path) -> None:
    source = jump_skipped_write(tmp_path / "jump.pte")
    api.rewrite(source, tmp_path / "good.pte", fsync=False)
    forged = edit_program(tmp_path / "good.pte", tmp_path / "forged.pte", lambda p: edit_plans(p, _forge_layout))
    plan = _plan(forged)
    assert plan.values[3].allocation_info == plan.values[8].allocation_info  # xd and P share bytes
    assert layout_problems(storage_groups(effects.MethodEffects(plan), [2])[2], FORGED_SIZE) == []
    opaque = api.validate(source, forged, simulate_devices=True, opaque_delegates=True, inputs=_flag_calls())
    rows = _rows(opaque)
    assert rows["device memory: no two live values share bytes"].passed  # type: ignore[attr-defined]
    assert not opaque.passed and not rows[PROOF_CHECK].passed  # type: ignore[attr-defined]
    # A call that skips P's write reads what is there: the last call's P, or x in the forged file.
    assert "chain 0 instruction 7 (now instruction 5), delegate 2, argument 0 (value 8), call 1" \
        in rows[PROOF_CHECK].detail  # type: ignore[attr-defined]
    executed = api.validate(source, forged, simulate_devices=True, inputs=_flag_calls())
    assert not executed.passed  # call 2 skips P's write: it reads x there, not the last call's mm(x, W)
    assert api.validate(source, tmp_path / "good.pte", simulate_devices=True, inputs=_flag_calls()).passed


def test_the_self_check_refuses_the_forged_overlap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The plan forced to the forged layout: every structural check and the layout check pass it."""
    from pte_devconst.schema.pte_file import PteFile

    source = jump_skipped_write(tmp_path / "jump.pte")
    with PteFile.open(source) as opened:
        plan = rewrite_module.plan_file(opened, None, api.rewrite_options())
    edit = plan.methods[0]
    relocations = tuple((v, 2, FORGED.get(v, o)) for v, _, o in edit.relocations)
    relocations += tuple((v, 2, o) for v, o in FORGED.items() if v not in {r[0] for r in edit.relocations})
    buffers = tuple(m.replace(g, new_size=FORGED_SIZE) if g.memory_id == 2 else g for g in edit.buffers)
    forced: RewritePlan = m.replace(plan, methods=(m.replace(edit, relocations=relocations, buffers=buffers),))
    assert isinstance(forced.methods[0], MethodEdit) and isinstance(buffers[0], BufferGrowth)
    use_plan(monkeypatch, forced)
    refused(tmp_path, source, "the byte replay: chain 0 instruction 7 (now instruction 5), delegate 2, argument 0 "
                              "(value 8), call 1: reads")


# --- the first-call ("1.5") encoding ----------------------------------------------------------------------------

MLP = EXAMPLES / "mlp_copy.pte"  # constants 0-3 copied to 5, 6, 8, 9; input 4 copied to 7; delegate; d2h


def _first_call(plan: m.ExecutionPlan, guard_value: bool = True, move_to: dict[int, int] | None = None
                ) -> m.ExecutionPlan:
    """``plan`` in the first-call encoding: each constant's _h2d_copy moved into a prologue guarded by a new
    Bool G (stored ``guard_value``) that a MoveCall from a new Bool(false) clears; ``move_to`` re-places values."""
    values = list(plan.values)
    for index, offset in (move_to or {}).items():
        values[index] = m.replace(values[index], allocation_info=m.AllocationDetails(2, offset))
    guard, cleared = len(values), len(values) + 1
    values += [m.Bool(guard_value), m.Bool(False)]
    instructions = plan.chains[0].instructions
    constants = {i for i, v in enumerate(plan.values) if isinstance(v, m.Tensor) and v.is_constant}
    copies = [ins for ins in instructions if isinstance(ins, m.KernelCall) and ins.args[0] in constants]
    rest = [ins for ins in instructions if ins not in copies]
    prologue = [m.JumpFalseCall(guard, len(copies) + 2), *copies, m.MoveCall(cleared, guard)]
    chain = m.replace(plan.chains[0], instructions=tuple(prologue + rest), stacktrace=None)
    return m.replace(plan, values=tuple(values), chains=(chain,))


def test_the_first_call_encoding_is_proven_across_calls() -> None:
    original = _plan(MLP)
    encoded = _first_call(original)
    assert once_length(encoded) == 6
    assert match_instructions(original, encoded) == [[None] * 6 + [2, 5, 6]]
    assert prove_same_reads(original, encoded) is None


@pytest.mark.parametrize("how, wrong", [
    ("the guard stored false: the prologue never runs (and is no prologue: its copies are the input's)",
     (dict(guard_value=False), "chain 0 instruction 0, call 1: runs in the input but not in the rewrite")),
    # first_call_prologue does not call it a prologue (a destination shares bytes): its copies are the input's,
    # skipped from the second call on
    ("a device copy on the delegate's output: the copy is there for the first call only",
     (dict(move_to={9: 3328}), "chain 0 instruction 0, call 2: runs in the input but not in the rewrite")),
])
def test_a_broken_first_call_encoding_is_rejected(how: str, wrong: tuple[dict, str]) -> None:
    kwargs, expected = wrong
    mismatch = prove_same_reads(_plan(MLP), _first_call(_plan(MLP), **kwargs))
    assert mismatch is not None and expected in str(mismatch), (how, str(mismatch))


def test_a_folded_value_stands_for_what_the_input_computed() -> None:
    """stands_for: the new value's load-time data is the input's write at the step it replaced."""
    original = _plan(MLP)
    values = list(original.values)
    folded = len(values)
    values.append(m.replace(values[2], data_buffer_idx=1))  # a new constant standing for the copy of value 2
    instructions = list(original.chains[0].instructions)
    instructions[3] = m.KernelCall(instructions[3].op_index, (folded, 8, 8))
    rewrite = m.replace(original, values=tuple(values),
                        chains=(m.replace(original.chains[0], instructions=tuple(instructions)),))
    assert prove_same_reads(original, rewrite, stands_for={folded: Origin(value=2)}) is None
    wrong = prove_same_reads(original, rewrite, stands_for={folded: Origin(value=1)})
    assert wrong is not None and "reads the load-time data of value 1 where the input reads the load-time data " \
        "of value 2" in str(wrong)
    assert prove_same_reads(original, rewrite) is None  # not given: what the first read of it reads


# --- cost --------------------------------------------------------------------------------------------------------

def _proof_cost(n_constants: int) -> tuple[int, float, int]:
    from bench.synth import seed_program

    plan = seed_program(n_constants)[0].execution_plan[0]
    budget = budget_for(plan, plan)
    tracemalloc.start()
    started = time.process_time()
    assert prove_same_reads(plan, plan, budget=budget) is None
    seconds = time.process_time() - started
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return budget.limit - budget.left, seconds, peak


def test_the_replay_is_linear_in_steps_and_memory() -> None:
    """The seed's shape (N weights, each copied to the device, one delegate): 10x the values, 10x the steps
    and about 10x the memory (dicts and lists grow by doubling, so a step of up to 2x either way; a quadratic
    would show 100x), under 2 KiB a value."""
    small_steps, _, small_peak = _proof_cost(500)
    large_steps, _, large_peak = _proof_cost(5_000)
    assert large_steps <= 11 * small_steps, (small_steps, large_steps)
    assert large_peak <= 20 * small_peak and large_peak < 2048 * 10_004, (small_peak, large_peak)


@pytest.mark.slow
def test_the_replay_at_100k_values() -> None:
    """100,004 values, 50,003 instructions, one delegate call of 50,002 arguments, two calls of each program:
    printed for docs/robustness.md; bounded so that a quadratic step would show."""
    steps, seconds, peak = _proof_cost(50_000)
    print(f"100k values: {steps:,} steps, {seconds:.1f} s CPU (traced), peak {peak / 2**20:.0f} MiB")
    assert steps < 2_000_000 and peak < 200 * 2**20


def test_a_program_past_the_budget_is_refused() -> None:
    plan = _plan(MLP)
    with pytest.raises(UnsupportedProgramError, match="the memory proof needed more than 50 steps"):
        prove_same_reads(plan, plan, budget=Budget(50))


def test_a_loop_settles_and_is_replayed_each_round() -> None:
    """A chain whose jump goes back (a loop on an input flag): the replay goes round until nothing changes."""
    plan = _plan(MLP)
    flag = len(plan.values)
    values = plan.values + (m.Tensor(m.ScalarType.BOOL, sizes=(), dim_order=(),
                                     allocation_info=m.AllocationDetails(1, 240)),)
    instructions = plan.chains[0].instructions
    looped = instructions[:6] + (m.JumpFalseCall(flag, 5),) + instructions[6:]  # the delegate again, maybe
    plan = m.replace(plan, values=values, inputs=plan.inputs + (flag,),
                     chains=(m.replace(plan.chains[0], instructions=looped, stacktrace=None),))
    assert prove_same_reads(plan, plan) is None
    assert NBYTES == 16  # the attack programs' tensor size, which the forged offsets above assume


def test_any_two_methods_give_a_mismatch_or_a_proof_never_an_error() -> None:
    """validate compares whatever two files it is given: methods of other programs, other shapes."""
    plans = []
    for path in sorted([*(FIXTURES / "corpus").glob("*.pte"), *ATTACKS.glob("*.pte")]):
        with open_pte(path) as pte:
            plans += list(pte.program.execution_plan)
    outcomes = [prove_same_reads(a, b) for a in plans for b in plans]
    assert sum(o is None for o in outcomes) >= len(plans)  # every method against itself
    assert sum(o is not None for o in outcomes) > len(plans)


def test_a_matching_that_pairs_other_instructions_is_a_mismatch() -> None:
    plan = _plan(MLP)
    n = len(plan.chains[0].instructions)
    twice = prove_same_reads(plan, plan, matching=[[0] * n])
    assert twice is not None and "matched twice" in twice.detail
    shifted = prove_same_reads(plan, plan, matching=[[*range(1, n), None]])  # a copy paired with the delegate
    assert shifted is not None and "another instruction" in shifted.detail


# --- et_view: a view kernel's out points at its input's bytes -----------------------------------------------------

LLAMA = FIXTURES / "real_models" / "et_llama_cpu.pte"  # a real 1.5.1 export with dynamic shapes: et_view kernels


def _et_views(plan: m.ExecutionPlan) -> list[tuple[int, int]]:
    ops = [f"{op.name}.{op.overload}" if op.overload else op.name for op in plan.operators or ()]
    return [(ins.args[0], ins.args[-1]) for chain in plan.chains or () for ins in chain.instructions or ()
            if isinstance(ins, m.KernelCall) and ops[ins.op_index] in kernel_effects.ET_VIEW]


def test_an_et_view_s_out_shares_its_input_s_storage_group() -> None:
    """The runtime's et_view points the out at self's data (set_tensor_data), writing nothing: one storage."""
    plan = _plan(LLAMA)
    views = _et_views(plan)
    assert len(views) >= 10
    groups = storage_groups(effects.MethodEffects(plan), [1])[1]
    group_of = {member: k for k, g in enumerate(groups) for member in g.members}
    assert all(group_of[source] == group_of[out] for source, out in views if source in group_of)


def _host_rewrite(tmp_path: Path) -> tuple[Path, RewritePlan]:
    out = tmp_path / "host.pte"
    result = rewrite_module.rewrite_file(LLAMA, out, options=RewriteOptions(host_placement=True), durable=False)
    return out, result.plan


def test_a_re_layout_around_et_views_is_proven_and_runs_bit_identically_in_the_real_runtime(tmp_path: Path) -> None:
    """Host placement lays the CPU buffer out again (the layout's model, on a real export); the byte replay
    proves it, and the real 1.5.1 runtime computes the same bits over four calls (the KV cache carries over)."""
    out, plan = _host_rewrite(tmp_path)
    buffers = [g for edit in plan.methods for g in edit.buffers]
    assert any(g.relaid for g in buffers) and not any(g.kept_offsets for g in buffers)
    calls = torch.load(LLAMA.with_suffix(".inputs.pt"))["forward"]
    before = run_calls_with_executorch(LLAMA, "forward", calls)
    after = run_calls_with_executorch(out, "forward", calls)
    assert compare_runs("forward", before, after) == []


def test_a_model_that_reads_et_view_as_a_write_fails_the_replay_and_keeps_the_offsets(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The model before the fix (an et_view's out its own storage, the input's lifetime ending at its last direct
    read) separates them; the replay, which binds the out to the input's bytes, catches it, and the rewrite keeps
    the input's offsets."""
    monkeypatch.setattr(effects, "kernel_alias", lambda name, args: None)
    _, plan = _host_rewrite(tmp_path)
    buffers = [g for edit in plan.methods for g in edit.buffers]
    assert not any(g.relaid for g in buffers)
    assert any(g.kept_offsets.startswith("the byte replay found a read it changes (method 0 ('forward'): chain 0 ")
               for g in buffers)


def test_a_delegate_called_thousands_of_times_on_one_input_is_refused_within_bounds(tmp_path: Path) -> None:
    """Each call of a delegate may write its variable inputs, so their bytes may hold any of the calls' writes:
    a set that grows by one per call.  5,000 copies of one call made that quadratic (3.4 GB and 33 s on a 294 KB
    file, the fuzzer's case); each definition in a set is charged to the budget, so the proof refuses it fast."""
    source = FIXTURES / "real_models" / "et_llama_static_mm_legacy.pte"

    def repeated(plan: m.ExecutionPlan) -> m.ExecutionPlan:
        chain = plan.chains[0]
        body = list(chain.instructions)
        assert isinstance(body[164], m.DelegateCall)
        body[164:164] = [body[164]] * 5000
        return m.replace(plan, chains=(m.replace(chain, instructions=tuple(body)), *plan.chains[1:]))

    forged = edit_program(source, tmp_path / "repeated.pte", lambda program: edit_plans(program, repeated))
    child = subprocess.run([sys.executable, "-c", _REFUSED_IN_A_CHILD, str(forged), str(tmp_path / "out.pte")],
                           capture_output=True, text=True, timeout=120)
    assert child.returncode == 0, child.stderr
    seconds, peak_mib, error = child.stdout.split(" ", 2)
    assert "the memory proof needed more than" in error
    assert float(seconds) < 15 and int(peak_mib) < 1024, (seconds, peak_mib)
    assert not (tmp_path / "out.pte").exists()


_REFUSED_IN_A_CHILD = """
import resource, sys, time
from pathlib import Path
from pte_devconst.rewriter.plan import RewriteOptions
from pte_devconst.rewriter.rewrite import rewrite_file
from pte_devconst.util.errors import UnsupportedProgramError
start = time.process_time()
try:
    rewrite_file(Path(sys.argv[1]), Path(sys.argv[2]), options=RewriteOptions(host_placement=True), durable=False)
    error = "not refused"
except UnsupportedProgramError as refused:
    error = str(refused)
seconds = time.process_time() - start
print(f"{seconds:.2f} {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss >> 10} {error}")
"""
