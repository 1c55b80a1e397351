"""Structured mutations of programs with chains: inspect, rewrite --fold --duplicate-shared and check --fold
never crash and never fail their self-check.

Each case changes one to three things of a fold fixture or a real model (an Int or IntList literal, a tensor's
sizes, dim order or dtype, an operator renamed to another foldable kernel, kernel arguments swapped or
redirected, an instruction dropped or repeated) and runs the three commands: exit 0, 1 (check's findings) or
2 with one line, never a traceback nor an "internal error".  The default run is small; ``-m slow`` runs 400.
Found this way: a literal of the wrong kind reaching a shape rule (a TypeError), and a device copy read
through a static view (the self-check refused the rewrite: the analysis now keeps that constant).
"""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import pytest

from cli_runner import invoke
from pte_devconst.rewriter.fold import FOLD_KERNELS
from pte_devconst.schema import model as m
from pte_devconst.schema.pte_file import PteFile

try:
    from fuzz.mutate import assemble_pte
except ImportError:
    from tests.fuzz.mutate import assemble_pte

FIXTURES = Path(__file__).parent / "fixtures"
SEEDS = sorted((FIXTURES / "fold").glob("*_copy.pte")) + sorted((FIXTURES / "fold").glob("*_legacy.pte")) + [
    FIXTURES / "real_models" / "gpt2_mm_copy.pte", FIXTURES / "real_models" / "t5_mm_legacy.pte",
    FIXTURES / "fold" / "oracle_mul_cpu.pte"]


def _mutate(plan: m.ExecutionPlan, rng: random.Random) -> m.ExecutionPlan:
    values, ops, instructions = list(plan.values), list(plan.operators), list(plan.chains[0].instructions)
    for _ in range(rng.randint(1, 3)):
        kind = rng.randrange(8)
        if kind == 0:
            ints = [i for i, v in enumerate(values) if isinstance(v, m.Int)]
            values[rng.choice(ints)] = m.Int(rng.choice([-3, -2, -1, 0, 1, 2, 3, 7, 2**31, -2**40]))
        elif kind == 1:
            i = rng.choice([i for i, v in enumerate(values) if isinstance(v, m.Tensor) and v.sizes])
            t = values[i]
            change = rng.randrange(3)
            if change == 0:
                sizes = list(t.sizes)
                sizes[rng.randrange(len(sizes))] = rng.choice([0, 1, 2, 5])
                values[i] = replace(t, sizes=tuple(sizes))
            elif change == 1:
                values[i] = replace(t, dim_order=tuple(rng.sample(list(t.dim_order), len(t.dim_order))))
            else:
                values[i] = replace(t, scalar_type=rng.choice([0, 1, 3, 4, 5, 6, 7, 11, 15, 12, 27]))
        elif kind == 2:
            name, _, overload = rng.choice(sorted(FOLD_KERNELS)).partition(".")
            ops[rng.randrange(len(ops))] = m.Operator(name, overload)
        elif kind in (3, 4):
            k = rng.randrange(len(instructions))
            ins = instructions[k]
            if isinstance(ins, (m.KernelCall, m.DelegateCall)) and len(ins.args or ()) > 2:
                args = list(ins.args)
                if kind == 3:
                    x, y = rng.sample(range(len(args)), 2)
                    args[x], args[y] = args[y], args[x]
                else:
                    args[rng.randrange(len(args))] = rng.randrange(len(values))
                instructions[k] = replace(ins, args=tuple(args))
        elif kind == 5:
            lists = [i for i, v in enumerate(values) if isinstance(v, m.IntList) and v.items]
            if lists:
                i = rng.choice(lists)
                items = list(values[i].items)
                items[rng.randrange(len(items))] = rng.randrange(len(values))
                values[i] = m.IntList(tuple(items))
        elif kind == 6 and len(instructions) > 1:
            del instructions[rng.randrange(len(instructions))]
        elif kind == 7:
            k = rng.randrange(len(instructions))
            instructions.insert(k, instructions[k])
    chain = replace(plan.chains[0], instructions=tuple(instructions), stacktrace=None)
    return replace(plan, values=tuple(values), operators=tuple(ops), chains=(chain,))


def _run(cases: int, seed: int, tmp_path: Path) -> None:
    rng = random.Random(seed)
    failures = []
    for case in range(cases):
        source = rng.choice(SEEDS)
        data = source.read_bytes()
        with PteFile.from_bytes(data) as pte:
            program = pte.program
        mutated = replace(program, execution_plan=(_mutate(program.execution_plan[0], rng),)
                          + tuple(program.execution_plan[1:]))
        path = tmp_path / f"case{case}.pte"
        path.write_bytes(assemble_pte(mutated, data))
        ptd = ["--ptd", str(source.with_suffix(".ptd"))] if source.with_suffix(".ptd").exists() else []
        for args in (("inspect", path, *ptd), ("rewrite", path, "--fold", "--duplicate-shared", "-o",
                                               tmp_path / f"out{case}.pte", *ptd), ("check", "--fold", path, *ptd)):
            result = invoke(*args)
            lines = result.stderr.strip().splitlines()
            if result.exit_code not in (0, 1, 2) or "Traceback" in result.stderr or "internal error" in result.stderr \
                    or result.exit_code == 2 and len(lines) != 1 or result.exit_code == 1 and args[0] != "check":
                failures.append((case, source.name, args[0], result.exit_code, result.stderr[-300:]))
    assert not failures, failures[:5]


def test_mutated_fold_programs_never_crash(tmp_path: Path) -> None:
    _run(24, 0, tmp_path)


@pytest.mark.slow
def test_mutated_fold_programs_never_crash_long_run(tmp_path: Path) -> None:
    _run(400, 1, tmp_path)
