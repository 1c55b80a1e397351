"""The self-check accepts exactly the folds the plan lists, and proves them: each wrong fold is refused.

Every wrong output is forced the way the bug behind it would make it (a plan changed after planning, a
program changed before the rewrite, or the computed bytes changed after the real apply), from the fold
fixtures; each refusal is one stderr line naming the difference, with the destination untouched.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from forge import edit_program
from pte_devconst.paths import sibling_ptd
from pte_devconst.rewriter.load import opened
from pte_devconst.rewriter.plan import RewriteOptions, RewritePlan, _instruction_maps
from pte_devconst.rewriter.rewrite import plan_file, rewrite_file
from pte_devconst.schema import model as m
from pte_devconst.schema.pte_file import open_pte
from pte_devconst.schema.pte_writer import ComputedPiece
from selfcheck_helpers import corrupt_apply, refused, use_plan

FOLD = Path(__file__).parent / "fixtures" / "fold"
REAL = Path(__file__).parent / "fixtures" / "real_models"
FOLDING = RewriteOptions(fold=True)


def _plan(path: Path, options: RewriteOptions = FOLDING) -> RewritePlan:
    with opened(path, sibling_ptd(path)) as (source, data):
        return plan_file(source, data, options)


def _with_edit(plan: RewritePlan, path: Path, **changes) -> RewritePlan:
    """``plan`` (of ``path``) with its first method's edit changed (the instruction maps follow ``removed``)."""
    edit = plan.methods[0]
    if "removed" in changes:
        with open_pte(path) as pte:
            changes["instruction_maps"] = _instruction_maps(pte.program.execution_plan[0], set(changes["removed"]))
    return replace(plan, methods=(replace(edit, **changes),) + plan.methods[1:])


def _instruction(path: Path, key: str) -> tuple[int, int]:
    with open_pte(path) as pte:
        plan = pte.program.execution_plan[0]
        for k, ins in enumerate(plan.chains[0].instructions):
            if isinstance(ins, m.KernelCall) and plan.operators[ins.op_index].qualified_name == key:
                return 0, k
    raise AssertionError(key)


def test_every_fold_fixture_and_real_model_passes_the_self_check_in_full(tmp_path: Path) -> None:
    for path in sorted(FOLD.glob("*_copy.pte")) + sorted(FOLD.glob("*_legacy.pte")) + \
            [REAL / "gpt2_mm_copy.pte", REAL / "t5_mm_legacy.pte"]:
        result = rewrite_file(path, tmp_path / f"{path.stem}.pte", ptd=sibling_ptd(path), options=FOLDING,
                              verify="full", durable=False)
        assert result.plan.folds or path.stem == "nan_copy", path  # nan: refused before anything is written


def test_folded_bytes_that_differ_from_the_recomputed_value(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The writer's computed piece loses one bit: the check recomputes the fold from the input and compares every
    byte (never sampled), so it sees it."""
    def flip_a_bit(source, program, contents):
        for content in contents:
            for i, (offset, piece) in enumerate(content.pieces):
                if isinstance(piece, ComputedPiece):
                    def damaged(produce=piece.produce):
                        data = bytearray(produce())
                        data[len(data) // 2] ^= 0x10
                        return data
                    content.pieces[i] = (offset, ComputedPiece(piece.size, damaged, piece.what))
        return program

    corrupt_apply(monkeypatch, flip_a_bit)
    refused(tmp_path, FOLD / "steps_legacy.pte", "select_copy at #0, permute_copy at #2",
            "its bytes differ from the value recomputed from the input", extra=("--fold",))


def test_a_plan_whose_chain_is_not_how_the_input_computes_the_value(monkeypatch: pytest.MonkeyPatch,
                                                                      tmp_path: Path) -> None:
    """The plan drops a kernel from a chain (so the writer computes something else): the check traces the value
    in the input program on its own and refuses the plan's chain."""
    plan = _plan(FOLD / "steps_copy.pte")
    edit = plan.methods[0]
    fold = next(f for f in edit.folds if len(f.chain.steps) == 4)
    shorter = replace(fold, chain=replace(fold.chain, steps=fold.chain.steps[1:]))
    use_plan(monkeypatch, _with_edit(plan, FOLD / "steps_copy.pte",
                                     folds=tuple(shorter if f is fold else f for f in edit.folds)))
    refused(tmp_path, FOLD / "steps_copy.pte", f"folded value {fold.value}: the plan's chain is not how the input "
                                               "computes it", extra=("--fold",))


def test_removing_a_kernel_that_is_on_no_folded_chain(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    path = FOLD / "shared_legacy.pte"
    plan = _plan(path)
    mul = _instruction(path, "aten::mul.out")
    use_plan(monkeypatch, _with_edit(plan, path, removed=tuple(sorted(set(plan.methods[0].removed) | {mul}))))
    refused(tmp_path, path, f"chain 0 instruction {mul[1]} was removed but is not an", "nor a kernel of a folded chain",
            extra=("--fold",))


def test_removing_a_kernel_whose_result_the_host_still_reads(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The transpose also feeds a host mul: the plan keeps it and folds a new value for the device. A plan that
    removes it leaves the mul reading memory nothing writes."""
    path = FOLD / "shared_legacy.pte"
    plan = _plan(path)
    permute = _instruction(path, "aten::permute_copy.out")
    (fold,) = plan.methods[0].folds
    assert fold.appended and permute not in plan.methods[0].removed  # what a correct plan does
    use_plan(monkeypatch, _with_edit(plan, path, removed=tuple(sorted(set(plan.methods[0].removed) | {permute}))))
    refused(tmp_path, path, f"value {fold.chain.result} is still read by host kernel aten::mul.out",
            "but only removed instructions wrote it", extra=("--fold",))


def test_a_folded_value_that_a_host_kernel_still_reads(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The plan puts the device's folded value in the transpose's own value, which the host mul also reads."""
    path = FOLD / "shared_legacy.pte"
    plan = _plan(path)
    (fold,) = plan.methods[0].folds
    in_place = replace(fold, value=fold.chain.result, appended=False)
    use_plan(monkeypatch, _with_edit(plan, path, folds=(in_place,)))
    refused(tmp_path, path, f"moved value {fold.chain.result} now lives on cuda:0 but is read by host kernel",
            extra=("--fold",))


def test_a_static_view_of_memory_only_removed_kernels_wrote(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A value planned where the transpose's result was, which no instruction writes (the emitter's static view),
    is also a method output: removing the transpose leaves it reading stale memory.  The analysis keeps the
    kernel for such a reader; a plan made without seeing the view is refused."""
    path = FOLD / "methods_legacy.pte"
    plan = _plan(path)
    fold = plan.methods[0].folds[0]

    def add_view(program: m.Program) -> m.Program:
        forward = program.execution_plan[0]
        view = forward.values[fold.chain.result]
        values = forward.values + (view,)
        first = replace(forward, values=values, outputs=forward.outputs + (len(forward.values),))
        return replace(program, execution_plan=(first,) + program.execution_plan[1:])

    forged = edit_program(path, tmp_path / "viewed.pte", add_view)
    keeps = _plan(forged).methods[0]  # the analysis of the forged program keeps the kernel for the view's reader
    step = keeps.folds[0].chain.steps[0]
    assert (step.chain, step.instruction) not in keeps.removed
    assert (step.chain, step.instruction) in plan.methods[0].removed
    use_plan(monkeypatch, plan)
    refused(tmp_path, forged, f"value {len(_values(path))} is still read by method output",
            "a view of memory only removed instructions wrote", extra=("--fold",))


def _values(path: Path) -> tuple[m.EValue, ...]:
    with open_pte(path) as pte:
        return pte.program.execution_plan[0].values


def test_releasing_a_constant_the_host_still_reads(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """GPT-2's tied embedding: the fold keeps the constant for the host's embedding kernel.  A plan that
    releases it (drops its bytes, unbinds it) leaves the embedding reading nothing."""
    path = REAL / "gpt2_mm_copy.pte"
    plan = _plan(path)
    (fold,) = plan.methods[0].folds
    source = fold.chain.source
    with open_pte(path) as pte:
        entry = pte.program.execution_plan[0].values[source].data_buffer_idx
    assert source not in plan.methods[0].released and entry not in plan.dropped_constants
    forced = replace(_with_edit(plan, path, released=(source,)),
                     dropped_constants=tuple(sorted(plan.dropped_constants + (entry,))))
    use_plan(monkeypatch, forced)
    refused(tmp_path, path, f"value {source} is still read by host kernel aten::embedding.out", extra=("--fold",))
