"""Limits the ExecuTorch runtime enforces on a program's flatbuffer, checked before a program is written.

``Program::load`` with ``Verification::InternalConsistency`` (the default of
ExecuTorch's Python runtime, ``executorch.runtime.Runtime.load_program``) runs
the flatbuffers verifier with its default options: at most 1,000,000 tables and
a nesting depth of at most 64.  The verifier counts a table each time it visits
one, shared or not, which is what ``count_tables`` counts on the decoded model
(the decoder, like the verifier, follows every reference).  The depth is bounded
by the schema itself, which has no recursive table: Program > ExecutionPlan >
Chain > FrameList > Frame (or EValue > Tensor > ExtraTensorInfo) is 5 deep.

``tests/test_verifier_limits.py`` holds ``count_tables`` equal to the real
verifier's count at the limit (a program of exactly 1,000,000 tables loads, one
more does not).
"""

from __future__ import annotations

from . import model as m
from .generated.table_counts import count_program
from .validate import MAX_TENSOR_BYTES

MAX_TABLES = 1_000_000  # flatbuffers::Verifier::Options::max_tables
# The reader's own bound, in the verifier's count: twice what the runtime's verifying loader accepts. A program
# between the two still opens (the C++ Module loads with Verification::Minimal; ``check`` reports it, ``inspect``
# warns); past it the reader refuses before decoding more, so a file whose offsets name the same tables millions
# of times (4 bytes a reference) cannot make every later step hold millions of values.
READ_MAX_TABLES = 2 * MAX_TABLES


def count_tables(program: m.Program) -> int:
    """The number of tables the flatbuffers verifier visits in ``program`` once encoded (the encoder shares none).

    Generated from the schema (``generated/table_counts.py``): EValue and Instruction are tables wrapping a
    union whose member is a table too (the model flattens them, so each counts twice unless its member is
    NONE). The decoder counts the same way while it reads (``PteFile.table_count``), shared tables each time
    they are reached.
    """
    return count_program(program)


def table_limit_problem(tables: int) -> str | None:
    """``N flatbuffer tables, over the ...`` when the verifier refuses that many tables, else None."""
    if tables <= MAX_TABLES:
        return None
    return (f"{tables:,} flatbuffer tables, over the {MAX_TABLES:,} that ExecuTorch's program verifier accepts "
            "(Program::load with Verification::InternalConsistency, the default of its Python runtime)")


def verifier_refusal(tables: int) -> str | None:
    """Why the runtime's verifying loader refuses a program of ``tables`` tables (as read), or None."""
    problem = table_limit_problem(tables)
    return None if problem is None else f"the program has {problem}, so it would not load"


def over_runtime_limits(program: m.Program) -> str | None:
    """Why the runtime (or the reader, which holds the same limits) would refuse ``program``; None when within all.

    Besides the verifier's table count: a planned buffer may not exceed 2^62 bytes (``schema/validate.py``),
    which a rewrite that appends to a buffer near that size would cross.
    """
    problem = table_limit_problem(count_tables(program))
    if problem:
        return problem
    for index, plan in enumerate(program.execution_plan or ()):
        for memory_id, size in enumerate(plan.non_const_buffer_sizes or ()):
            if size > MAX_TENSOR_BYTES:
                return (f"a planned buffer of {size:,} bytes (method {index} ({plan.name!r}) buffer {memory_id}), "
                        "over the 2^62 bytes a program may plan")
    return None
