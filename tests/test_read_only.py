"""Reading never loads writing: ``inspect`` and ``check`` (and the readers themselves) import no writer module.

The readers (``schema/pte_file.py``, ``ptd_file.py``) stand on ``span.py``
for byte ranges; the writers (``pte_writer``, ``ptd_writer``, the encoder, the
builder, the atomic output) stand on the readers, never the other way round.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conftest import pte_path

WRITERS = ("pte_devconst.schema.pte_writer", "pte_devconst.schema.ptd_writer", "pte_devconst.schema.encode",
           "pte_devconst.schema.generated.encoders", "pte_devconst.schema.flatbuf_builder",
           "pte_devconst.util.atomic", "pte_devconst.rewriter.apply", "pte_devconst.rewriter.rewrite")

PROBE = """
import sys
from pte_devconst.cli.app import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print("WRITERS:" + ",".join(sorted(m for m in sys.modules if m in {writers!r})), file=sys.stderr)
"""


def _writers_loaded(code: str, *args: str) -> list[str]:
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120)
    line = [x for x in done.stderr.splitlines() if x.startswith("WRITERS:")]
    assert line, done.stderr
    return [name for name in line[-1][len("WRITERS:"):].split(",") if name]


@pytest.mark.parametrize("args", [
    ["inspect", "{a}"],
    ["inspect", "--json", "{external}"],
    ["check", "{clean}"],
    ["check", "{a}", "{external}"],
    ["diff", "{a}", "{b}"],
], ids=" ".join)
def test_reading_commands_load_no_writer(args: list[str]) -> None:
    paths = {"a": pte_path("v_a_dtypes_copy"), "b": pte_path("v_b_dtypes_legacy"), "clean": pte_path("v_h_cpu_only"),
             "external": pte_path("v_g_external_copy")}  # the last one with its .ptd next to it
    assert _writers_loaded(PROBE.format(writers=WRITERS), *[a.format(**paths) for a in args]) == []


def test_the_probe_sees_a_writer(tmp_path: Path) -> None:
    """The same probe on ``rewrite`` lists the writer modules, so an empty list above means none was loaded."""
    loaded = _writers_loaded(PROBE.format(writers=WRITERS), "rewrite", str(pte_path("v_a_dtypes_copy")),
                             "-o", str(tmp_path / "out.pte"))
    assert {"pte_devconst.schema.pte_writer", "pte_devconst.schema.encode", "pte_devconst.util.atomic"} <= set(loaded)


def test_the_readers_import_no_writer() -> None:
    code = ("import sys; import pte_devconst.schema.pte_file, pte_devconst.schema.ptd_file;"
            f"print('WRITERS:' + ','.join(sorted(m for m in sys.modules if m in {WRITERS!r})), file=sys.stderr)")
    assert _writers_loaded(code) == []
