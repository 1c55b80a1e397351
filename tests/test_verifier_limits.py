"""``schema/limits.py`` counts tables exactly as ExecuTorch's program verifier does, and rewrites respect the limit.

The ground truth is the real ExecuTorch 1.5.1 runtime: a corpus program padded to exactly
``MAX_TABLES`` tables (by our count) loads with ``Verification.InternalConsistency``, one table more
does not.  Padding a program to a million tables takes seconds, so these run with ``-m slow``.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from conftest import CASES, pte_path
from pte_devconst.schema import limits
from pte_devconst.schema import model as m
from pte_devconst.schema.pte_file import PteFile

try:
    from fuzz.mutate import assemble_pte
except ImportError:
    from tests.fuzz.mutate import assemble_pte


def _padded(name: str, tables: int, path: Path) -> Path:
    """``name`` with Null values (two tables each) and, for an odd difference, one named-data entry added."""
    data = pte_path(name).read_bytes()
    with PteFile.from_bytes(data) as pte:
        program = pte.program
    missing = tables - limits.count_tables(program)
    assert missing > 0
    plan = program.execution_plan[0]
    plan = replace(plan, values=plan.values + (m.Null(),) * (missing // 2))
    named = program.named_data or ()
    if missing % 2:
        named += (m.NamedData("padding", 0),)
    padded = replace(program, execution_plan=(plan,) + program.execution_plan[1:], named_data=named or None)
    assert limits.count_tables(padded) == tables
    path.write_bytes(assemble_pte(padded, data))
    return path


def _loads_with_verification(path: Path) -> bool:
    from executorch.extension.pybindings import portable_lib

    try:
        portable_lib._load_program(str(path), program_verification=portable_lib.Verification.InternalConsistency)
    except RuntimeError:
        return False
    return True


def test_the_count_is_the_decoders_on_real_and_changed_programs() -> None:
    """The generated counter (``generated/table_counts.py``) and the decoder, which counts every table it reaches,
    agree on every corpus program, on a hole in each of its vectors of tables, and on 300 randomly changed
    programs (values and instructions that are None, lists emptied or dropped)."""
    from forge import changed_programs
    from fuzz.mutate import _apply, _sites
    from pte_devconst.schema.decode import decode_program_counted
    from pte_devconst.schema.encode import encode_program

    programs = []
    for name in CASES:
        with PteFile.from_bytes(pte_path(name).read_bytes()) as pte:
            assert limits.count_tables(pte.program) == pte.table_count, name
            programs.append(pte.program)
    holes = 0
    for path, kind, current in _sites(programs[0]):  # a hole (None) in each vector of tables is an empty table
        if kind == "table-vector":
            holed = _apply(programs[0], path, (None,) + current[1:])
            assert limits.count_tables(holed) == decode_program_counted(encode_program(holed))[1], path
            holes += 1
    assert holes >= 8  # execution plans, values, chains, instructions, operators, delegates, specs, segments, ...
    compared = 0
    for program in changed_programs(programs, 14, 300):
        try:
            data = encode_program(program)
        except Exception:  # a value the format cannot hold: nothing to count
            continue
        assert limits.count_tables(program) == decode_program_counted(data)[1]
        compared += 1
    assert compared > 200


def test_the_count_of_small_programs() -> None:
    """Hand-counted: an empty program is one table; a value is two (EValue and its member), a tensor's
    allocation and extra info one each; an instruction two; a delegate one, plus its reference and specs."""
    assert limits.count_tables(m.Program(execution_plan=(), segments=())) == 1
    tensor = m.Tensor(allocation_info=m.AllocationDetails(1, 0), extra_tensor_info=m.ExtraTensorInfo())
    plan = m.ExecutionPlan(values=(m.Int(1), tensor, None), chains=(m.Chain(instructions=(m.FreeCall(0),)),),
                           delegates=(m.BackendDelegate("x", m.BackendDelegateDataReference(),
                                                        (m.CompileSpec("k", b"v"),)),),
                           operators=(m.Operator("op"),))
    # Program + plan + values (2 + 4 + 1) + chain + instruction (2) + delegate (3) + operator
    assert limits.count_tables(m.Program(execution_plan=(plan,))) == 1 + 1 + 7 + 1 + 2 + 3 + 1
    assert limits.over_runtime_limits(m.Program()) is None


@pytest.mark.slow
@pytest.mark.parametrize("name", ["v_a_dtypes_copy", "v_f_multi_method_copy", "v_i_kvcache_copy"])
def test_the_count_matches_the_runtime_verifier_at_its_limit(name: str, tmp_path: Path) -> None:
    at_limit = _padded(name, limits.MAX_TABLES, tmp_path / "at.pte")
    assert _loads_with_verification(at_limit)
    over = _padded(name, limits.MAX_TABLES + 1, tmp_path / "over.pte")
    assert not _loads_with_verification(over)


@pytest.mark.slow
def test_a_rewrite_that_would_cross_the_limit_is_refused(tmp_path: Path) -> None:
    """Legacy style: moving 7 constants adds their allocation and device tables to a program 5 under the limit."""
    from cli_runner import invoke
    source = _padded("v_b_dtypes_legacy", limits.MAX_TABLES - 5, tmp_path / "near.pte")
    assert _loads_with_verification(source)
    result = invoke("rewrite", source, "-o", tmp_path / "out.pte")
    lines = result.stderr.splitlines()
    assert result.exit_code == 2 and len(lines) == 1 and "internal error" not in lines[0], result.stderr
    assert "1,000,005 flatbuffer tables" in lines[0] and "1,000,000" in lines[0], lines[0]
    assert not (tmp_path / "out.pte").exists() and list(tmp_path.iterdir()) == [source]
