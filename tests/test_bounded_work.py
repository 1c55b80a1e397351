"""Bounded memory and time on any input (issue 19): inputs that cost orders of magnitude more to process than
their size, each refused in one line or finished within a few hundred MiB and near-linear time.

Every test here failed (ran past its bound, or ended in ``internal error: MemoryError``) on the code before
the fix it names.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cli_runner import invoke
from conftest import pte_path
from forge import aliased_values
from pte_devconst.schema import limits
from pte_devconst.schema import model as m
from pte_devconst.schema.pte_file import PteFile

ADDRESS_SPACE = 3_000_000 * 1024  # ``ulimit -v 3000000``, as in the issue


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def _cli(*args: object, timeout: float) -> tuple[subprocess.CompletedProcess, float]:
    """The real command line in a child process limited to 3 GB of address space, with its wall time."""
    start = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "pte_devconst", *map(str, args)], capture_output=True, text=True,
                            timeout=timeout, preexec_fn=_limited, env={**os.environ, "COLUMNS": "80"})
    return result, time.monotonic() - start


# --- a value table that aliases one tensor millions of times ------------------------------------------------------

def test_shared_tables_are_decoded_once_and_counted_each_time(tmp_path: Path) -> None:
    """200,000 values naming one tensor table (a 0.8 MB file) decode to one shared record, not 200,000 records,
    and the verifier's count still counts every reference (it is what the runtime's max_tables judges)."""
    copies = 200_000
    path = aliased_values(pte_path("v_a_dtypes_copy"), tmp_path / "aliased.pte", copies)
    with PteFile.open(path) as plain:
        base = len(plain.program.execution_plan[0].values)
    start = time.process_time()
    with PteFile.open(path) as pte:
        values = pte.program.execution_plan[0].values
        assert len(values) == base
        assert isinstance(values[-1], m.Tensor)
        assert all(v is values[-1] for v in values[-copies:])  # one record, shared
        assert pte.table_count == limits.count_tables(pte.program)
    assert time.process_time() - start < 5


def test_aliasing_past_the_readers_bound_is_refused_in_one_line(tmp_path: Path) -> None:
    """4,000,000 values naming one tensor (a 16 MB file; 8 million tables in the verifier's count): ``check`` and
    ``inspect`` under ``ulimit -v 3000000`` refuse it in one line naming the file, within seconds. Before, the
    reader made a record per reference: ``inspect`` ended in ``internal error: MemoryError`` after minutes."""
    path = aliased_values(pte_path("v_a_dtypes_copy"), tmp_path / "aliased.pte", 4_000_000)
    assert path.stat().st_size > 16_000_000
    for command in ("check", "inspect"):
        result, seconds = _cli(command, path, timeout=120)
        assert result.returncode == 2, (command, result.stderr[-2000:])
        errors = [line for line in result.stderr.splitlines() if line.startswith("pte-devconst: error:")]
        assert len(errors) == 1 and str(path) in errors[0], result.stderr
        assert f"more than {limits.READ_MAX_TABLES:,} flatbuffer tables" in errors[0]
        assert "Traceback" not in result.stderr and "internal error" not in result.stderr
        assert seconds < 60, (command, seconds)


def test_the_readers_bound_sits_above_the_runtimes() -> None:
    """A program the runtime's verifier refuses still opens (``check`` reports it, ``inspect`` warns) up to twice
    the verifier's limit; the reader's bound is only for what no runtime default loads."""
    assert limits.READ_MAX_TABLES == 2 * limits.MAX_TABLES


def test_text_tables_show_a_bounded_number_of_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    """A table in text or markdown shows at most ``MAX_TABLE_ROWS`` rows and counts the rest: a terminal table of
    a million constants took minutes and gigabytes to lay out (``--json`` still lists every row)."""
    from pte_devconst.cli import output

    monkeypatch.setattr(output, "MAX_TABLE_ROWS", 2)
    path = pte_path("v_a_dtypes_copy")
    with PteFile.open(path) as pte:
        constants = sum(1 for v in pte.program.execution_plan[0].values if isinstance(v, m.Tensor) and v.is_constant)
    assert constants > 3
    for extra in ((), ("--format", "markdown")):
        result = invoke("inspect", path, *extra, env={"COLUMNS": "300"})
        assert result.exit_code == 0, result.stderr
        assert "more rows (--json lists them all)" in result.stdout
    result = invoke("inspect", path, "--format", "json")
    import json
    document = json.loads(result.stdout)
    listed = sum(len(method["constants"]) for method in document["file"]["methods"])
    assert listed == constants
