"""A first run users can trust: ``run`` works on a fresh ``pip install "pte-devconst[runner]"``.

torch's CPU wheel does not bring numpy; ``run`` used ``Tensor.numpy()`` for its output checksums and failed with
"internal error: RuntimeError: Numpy is not available" on such an install.  Here numpy is made unimportable.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys

import pytest

from conftest import EXAMPLES

pytest.importorskip("torch")

WITHOUT_NUMPY = ("import sys; sys.modules['numpy'] = None\n"  # `import numpy` now raises ImportError
                 "from pte_devconst.cli.app import main; main()")


def test_run_needs_no_numpy() -> None:
    from pte_devconst.runner import run_program

    pte, inputs = EXAMPLES / "mlp_copy.pte", EXAMPLES / "mlp_copy.inputs.pt"
    run = subprocess.run([sys.executable, "-c", WITHOUT_NUMPY, "run", str(pte), "--simulate-devices", "--inputs",
                          str(inputs), "--json"], capture_output=True, text=True, timeout=300,
                         env={"NO_COLOR": "1", "PATH": "/usr/bin:/bin"})
    assert run.returncode == 0, run.stderr
    output = json.loads(run.stdout)["calls"][0]["outputs"][0]
    expected = run_program(pte, inputs=inputs, simulate_devices=True).calls[0].outputs[0]
    assert output["sha256"] == hashlib.sha256(expected.contiguous().numpy().tobytes()).hexdigest()
