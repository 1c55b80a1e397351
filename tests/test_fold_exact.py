"""Folding computes what ExecuTorch 1.5.1's portable kernels compute, byte for byte (the real runtime decides).

``tests/fixtures/fold/oracle_cpu.pte`` returns chains of table kernels applied to constants of several dtypes
(every kernel the exporter emits, casts between float32/float16/bfloat16/float64/int/bool with infinities,
-0.0, subnormals, ties and overflow, contiguous <-> channels-last).  The kernels the exporter never emits
(t_copy, transpose_copy, view_copy, squeeze_copy.dim, clone, alias_copy, _to_copy) are forged into it in
their place.  For every output the fold's bytes must equal the runtime's; and a host-placement fold of
``oracle_mul_cpu.pte`` (each chain read by a host kernel) must run on the real runtime bit-identically.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional

import pytest
import torch

from et_oracle import run_with_executorch
from forge import edit_program
from pte_devconst.rewriter.fold import FOLD_KERNELS, Tracer, recipe_of
from pte_devconst.rewriter.fold.compute import SourceBytes, fold_bytes
from pte_devconst.rewriter.plan import RewriteOptions
from pte_devconst.rewriter.rewrite import rewrite_file
from pte_devconst.program.dtypes import torch_dtype
from pte_devconst.schema import model as m
from pte_devconst.schema.pte_file import open_pte

FOLD = Path(__file__).parent / "fixtures" / "fold"
ORACLE, ORACLE_MUL = FOLD / "oracle_cpu.pte", FOLD / "oracle_mul_cpu.pte"
ONES = (torch.ones(1),)
INPUT = (torch.tensor([0.25, -2.0]),)


# --- forging the kernels the exporter does not emit --------------------------------------------------


class _Plan:
    """A plan being edited: new values and operators are appended, instructions replaced."""

    def __init__(self, plan: m.ExecutionPlan) -> None:
        self.plan = plan
        self.values = list(plan.values)
        self.operators = list(plan.operators)
        self.instructions = list(plan.chains[0].instructions)

    def value(self, value: m.EValue) -> int:
        self.values.append(value)
        return len(self.values) - 1

    def ints(self, *items: int) -> int:
        return self.value(m.IntList(tuple(self.value(m.Int(i)) for i in items)))

    def find(self, key: str, test: Callable[[tuple[int, ...]], bool] = lambda args: True, nth: int = 0) -> int:
        """The nth instruction calling ``key`` whose arguments pass ``test``."""
        names = [o.qualified_name for o in self.operators]
        found = [k for k, ins in enumerate(self.instructions) if isinstance(ins, m.KernelCall)
                 and names[ins.op_index] == key and test(tuple(ins.args))]
        return found[nth]

    def replace(self, index: int, key: str, make_args: Callable[[tuple[int, ...]], tuple[int, ...]]) -> None:
        name, _, overload = key.partition(".")
        self.operators.append(m.Operator(name, overload))
        old = self.instructions[index]
        self.instructions[index] = m.KernelCall(len(self.operators) - 1, make_args(tuple(old.args)))

    def result(self) -> m.ExecutionPlan:
        chain = m.replace(self.plan.chains[0], instructions=tuple(self.instructions))
        return m.replace(self.plan, values=tuple(self.values), operators=tuple(self.operators), chains=(chain,))


def _constant(index: int) -> Callable[[tuple[int, ...]], bool]:
    return lambda args: args[0] == index


def forge_all(plan: m.ExecutionPlan, alias: bool) -> m.ExecutionPlan:
    """t_copy, transpose_copy, view_copy, squeeze_copy.dim, _to_copy, and clone (or alias_copy) in place of
    exported kernels that compute the same (the runtime then decides what they compute)."""
    p = _Plan(plan)
    p.replace(p.find("aten::permute_copy.out", _constant(0)), "aten::t_copy.out", lambda a: (a[0], a[-2], a[-1]))
    p.replace(p.find("aten::permute_copy.out", _constant(0), nth=1), "aten::transpose_copy.int_out",
              lambda a: (a[0], p.value(m.Int(1)), p.value(m.Int(0)), a[-2], a[-1]))
    p.replace(p.find("aten::unsqueeze_copy.out", lambda a: a[0] == 0 and plan.values[a[1]] == m.Int(1)),
              "aten::view_copy.out", lambda a: (a[0], p.ints(4, -1, 6), a[-2], a[-1]))
    p.replace(p.find("aten::squeeze_copy.dims_out"), "aten::squeeze_copy.dim_out",
              lambda a: (a[0], p.value(m.Int(-2)), a[-2], a[-1]))
    p.replace(p.find("dim_order_ops::_to_dim_order_copy.out",
                     lambda a: a[0] == 0 and plan.values[a[-1]].scalar_type == m.ScalarType.HALF),
              "aten::_to_copy.out", lambda a: (a[0], p.value(m.Bool(False)), p.value(m.Null()), a[-2], a[-1]))
    clone = p.find("dim_order_ops::_clone_dim_order.out",
                   lambda a: isinstance(plan.values[a[0]], m.Tensor) and not plan.values[a[0]].is_constant)
    if alias:
        p.replace(clone, "aten::alias_copy.out", lambda a: (a[0], a[-2], a[-1]))
    else:
        p.replace(clone, "aten::clone.out", lambda a: (a[0], p.value(m.Int(0)), a[-2], a[-1]))
    return p.result()


def _forged(source: Path, tmp_path: Path, alias: bool) -> Path:
    return edit_program(source, tmp_path / f"{source.stem}.forged{'_alias' if alias else ''}.pte",
                        lambda program: m.replace(program, execution_plan=(forge_all(program.execution_plan[0],
                                                                                      alias),)))


def _constant_chains_left(path: Path) -> list[int]:
    """Instructions of table kernels whose result is computed from constants alone (what a fold removes)."""
    with open_pte(path) as pte:
        plan = pte.program.execution_plan[0]
        tracer = Tracer(plan)
        return [k for k, i in enumerate(plan.chains[0].instructions) if isinstance(i, m.KernelCall)
                and plan.operators[i.op_index].qualified_name in FOLD_KERNELS and tracer.trace(i.args[-1]) is not None]


def _kernels(path: Path) -> set[str]:
    with open_pte(path) as pte:
        plan = pte.program.execution_plan[0]
        return {plan.operators[i.op_index].qualified_name for i in plan.chains[0].instructions
                if isinstance(i, m.KernelCall)}


# --- what the runtime returns against what fold computes ---------------------------------------------


def _bits(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.detach().contiguous().reshape(-1).view(torch.uint8)


def _folded_outputs(path: Path) -> dict[int, torch.Tensor]:
    """Output position -> the fold's bytes of it, as a logical tensor (dim order strides), for every output
    the program computes from a constant with table kernels only."""
    found = {}
    with open_pte(path) as pte:
        plan = pte.program.execution_plan[0]
        tracer = Tracer(plan)
        for position, value in enumerate(plan.outputs):
            traced = tracer.trace(value)
            if traced is None:
                continue
            tensor = plan.values[value]
            data = fold_bytes(recipe_of(plan.values[traced.source], traced.steps, tensor), SourceBytes(pte))
            sizes = tuple(tensor.sizes)
            flat = torch.frombuffer(data, dtype=torch_dtype(tensor.scalar_type)) if data else \
                torch.empty(0, dtype=torch_dtype(tensor.scalar_type))
            found[position] = flat.as_strided(sizes, m.dim_order_strides(sizes, tuple(tensor.dim_order)))
    return found


def _assert_runtime_agrees(path: Path, expected_kernels: set[str]) -> None:
    outputs = run_with_executorch(path, "forward", list(INPUT))
    folded = _folded_outputs(path)
    assert expected_kernels <= _kernels(path)
    assert len(folded) == len(outputs) - 1  # every chain traced; only x + 1 is not a chain
    wrong = [p for p, tensor in folded.items() if outputs[p].dtype != tensor.dtype or outputs[p].shape != tensor.shape
             or not torch.equal(_bits(outputs[p]), _bits(tensor))]
    assert not wrong, [(p, outputs[p], folded[p]) for p in wrong[:3]]


EXPORTED = {"aten::permute_copy.out", "aten::unsqueeze_copy.out", "aten::expand_copy.out",
            "aten::squeeze_copy.dims_out", "aten::slice_copy.Tensor_out", "aten::select_copy.int_out",
            "dim_order_ops::_to_dim_order_copy.out", "dim_order_ops::_clone_dim_order.out"}
FORGED = {"aten::t_copy.out", "aten::transpose_copy.int_out", "aten::view_copy.out", "aten::squeeze_copy.dim_out",
          "aten::_to_copy.out"}


def test_fold_computes_what_the_runtime_returns_for_every_exported_kernel_and_cast() -> None:
    _assert_runtime_agrees(ORACLE, EXPORTED)


@pytest.mark.parametrize("alias", [False, True], ids=["clone", "alias_copy"])
def test_fold_computes_what_the_runtime_returns_for_the_kernels_the_exporter_does_not_emit(
        tmp_path: Path, alias: bool) -> None:
    forged = _forged(ORACLE, tmp_path, alias)
    _assert_runtime_agrees(forged, FORGED | {"aten::alias_copy.out" if alias else "aten::clone.out"})


def test_every_table_kernel_is_run_by_these_tests() -> None:
    assert set(FOLD_KERNELS) == EXPORTED | FORGED | {"aten::clone.out", "aten::alias_copy.out"}


@pytest.mark.parametrize("alias", [None, False, True], ids=["exported", "forged", "forged_alias"])
def test_a_host_placement_fold_runs_bit_identically_on_the_real_runtime(tmp_path: Path, alias: Optional[bool]) -> None:
    """Every chain read by a host kernel folds into planned CPU memory with initial data, which ExecuTorch
    1.5.1 loads; the kernels are gone and every output keeps its bits."""
    source = ORACLE_MUL if alias is None else _forged(ORACLE_MUL, tmp_path, alias)
    out = tmp_path / "folded.pte"
    result = rewrite_file(source, out, options=RewriteOptions(host_placement=True, fold=True), durable=False)
    assert len(result.plan.folds) == 33 and not result.plan.fold_skipped
    assert _constant_chains_left(source) and not _constant_chains_left(out)
    before = run_with_executorch(source, "forward", list(ONES))
    after = run_with_executorch(out, "forward", list(ONES))
    assert len(before) == len(after) == 33
    assert all(torch.equal(_bits(a), _bits(b)) for a, b in zip(before, after))
