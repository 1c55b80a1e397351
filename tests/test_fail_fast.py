"""``run`` and ``validate`` refuse option and file mistakes before torch or the runtime is imported (issue 45).

Each mistake is one line on stderr and exit 2, in a process that never imported torch; the extra to install is
the one the chosen engine needs; swapped arguments get a hint line and the same verdict.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cli_runner import invoke

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "models"
MLP = EXAMPLES / "mlp_copy.pte"
CPU = EXAMPLES / "mlp_cpu.pte"

PROBE = """
import sys
for name in sys.argv[1].split(",") if sys.argv[1] else ():
    sys.modules[name] = None  # as if it were not installed
from pte_devconst.cli.app import main
try:
    main(sys.argv[2:])
    code = 0
except SystemExit as done:
    code = done.code
print("LOADED:" + ",".join(m for m in ("torch", "executorch") if sys.modules.get(m) is not None), file=sys.stderr)
sys.exit(code)
"""


def _probe(args: list[str], hidden: str = "") -> tuple[int, list[str], str]:
    """Exit code, stderr lines before the probe's own, and what it loaded (CUDA_VISIBLE_DEVICES empty: no GPU)."""
    done = subprocess.run([sys.executable, "-c", PROBE, hidden, *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    *lines, loaded = done.stderr.splitlines()
    assert done.stdout == ""
    return done.returncode, lines, loaded.removeprefix("LOADED:")


@pytest.mark.parametrize("args, message", [
    (["validate", MLP, MLP, "--simulate-devices", "--inputs", "nope.pt"], "nope.pt: inputs file not found"),
    (["validate", MLP, MLP, "--simulate-devices", "--expected", "nope.pt"], "nope.pt: expected outputs file not found"),
    (["validate", MLP, MLP, "--simulate-devices", "--calls", "1"], "validate needs --calls of at least 2"),
    (["validate", MLP, "nope.pte", "--simulate-devices"], "nope.pte: cannot read"),
    (["validate", MLP, MLP], f"{MLP}: the program uses cuda:0 but this machine has no GPU; run with "
                             "--simulate-devices"),
    (["run", MLP, "--inputs", "nope.pt", "--simulate-devices"], "nope.pt: inputs file not found"),
    (["run", MLP, "--ptd", "nope.ptd", "--simulate-devices"], "nope.ptd: data (.ptd) file not found"),
    (["run", "nope.pte"], "nope.pte: cannot read"),
    (["run", MLP], f"{MLP}: the program uses cuda:0 but this machine has no GPU"),
], ids=["inputs", "expected", "calls", "program", "validate-gpu", "run-inputs", "run-ptd", "run-program", "run-gpu"])
def test_a_mistake_is_reported_before_torch_is_imported(args: list, message: str) -> None:
    code, lines, loaded = _probe([str(a) for a in args])
    assert (code, loaded, len(lines)) == (2, "", 1), lines
    assert lines[0].startswith(f"pte-devconst: error: {message}"), lines


@pytest.mark.parametrize("engine, hidden, extra", [
    ("runner", "torch", "pte-devconst[runner]"),
    ("executorch", "executorch", "pte-devconst[executorch]"),
    ("executorch", "torch,executorch", "pte-devconst[executorch]"),
])
def test_the_missing_extra_is_the_engines(engine: str, hidden: str, extra: str) -> None:
    code, lines, loaded = _probe(["validate", str(CPU), str(CPU), "--engine", engine], hidden)
    assert (code, loaded, len(lines)) == (2, "", 1), lines
    assert lines[0].endswith(f"pip install '{extra}'"), lines


def test_swapped_arguments_get_a_hint_and_the_same_verdict(tmp_path: Path) -> None:
    rewritten = tmp_path / "mlp_copy.devconst.pte"
    assert invoke("rewrite", MLP, "-o", rewritten).exit_code == 0
    inputs = ["--inputs", EXAMPLES / "mlp_copy.inputs.pt", "--simulate-devices"]
    right = invoke("validate", MLP, rewritten, *inputs)
    assert right.exit_code == 0 and "hint" not in right.stderr, right.stderr
    swapped = invoke("validate", rewritten, MLP, *inputs)
    hints = [line for line in swapped.stderr.splitlines() if line.startswith("pte-devconst: hint:")]
    assert len(hints) == 1 and "are the arguments swapped? validate takes ORIGINAL REWRITTEN" in hints[0], hints
    assert "3,488 B against 256 B" in hints[0]
    assert swapped.exit_code == 1 and "FAIL" in swapped.stdout  # the verdict is still the checks'
    assert "hint" not in invoke("validate", rewritten, MLP, *inputs, "-q").stderr
