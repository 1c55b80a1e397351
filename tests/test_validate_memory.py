"""``validate`` holds a model once (issue 43): its peak memory is bounded by the program, not multiplied by it.

A real XNNPACK-as-``cuda:0`` export of 48 MiB (examples/xnnpack_device.py's ``Stack``, made here with the 1.5.1
exporter) is rewritten in both encodings and validated in a subprocess; the largest process of the tree (the
command, or its child that runs the ExecuTorch runtime) may use at most 1.5 times the larger program above what
importing torch and the runtime costs.  Before the runner held arguments in shared memory it pickled each delegate
argument's whole arena per call: this program then took over 40 times its size.  The same pair with a flipped
byte in a moved constant, or two moved constants' data swapped, still fails.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("executorch.runtime")

from forge import flip_byte, moved_spans, swapped_moved_constants  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
BOUND = 1.5  # peak above the imports, in programs
LAYERS, WIDTH, HIDDEN = 4, 1024, 3072  # 4 weights of 12 MiB and their biases: 48 MiB

# The peak RSS of the largest process a command starts (RUSAGE_CHILDREN: the largest of them, each counted alone).
MEASURE = r"""
import resource, subprocess, sys
done = subprocess.run(sys.argv[1:], capture_output=True, text=True)
sys.stdout.write(done.stdout)
sys.stderr.write(done.stderr)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024, file=sys.stderr)
raise SystemExit(done.returncode)
"""

# What importing torch, the runner and the runtime costs: the child that runs the runtime imports all three.
BASELINE = ("import torch, executorch.runtime; from executorch.runtime import Runtime; Runtime.get(); "
            "import pte_devconst.cli.app, pte_devconst.runner.validate")

EXPORT = r"""
import sys, torch
sys.path.insert(0, sys.argv[1])
from xnnpack_device import Model, Stack, _one, export_program, make_calls
layers, width, hidden = (int(a) for a in sys.argv[3:6])
model = Model("stack", "", lambda: Stack(layers, width, hidden), _one(4, width))
module, calls = make_calls(model)
open(sys.argv[2], "wb").write(export_program(model, module, {"forward": calls["forward"][0]}, "copy"))
torch.save(calls, sys.argv[2] + ".inputs.pt")
"""


def _measured(*args: str) -> tuple[int, str, str, int]:
    """(exit code, stdout, stderr, peak RSS in bytes of the largest process) of ``pte-devconst ARGS``."""
    done = subprocess.run([sys.executable, "-c", MEASURE, sys.executable, "-m", "pte_devconst", *args],
                          capture_output=True, text=True, timeout=600)
    *said, peak = done.stderr.strip().splitlines()
    return done.returncode, done.stdout, "\n".join(said), int(peak)


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("stack48")
    original = folder / "stack_copy.pte"
    subprocess.run([sys.executable, "-c", EXPORT, str(ROOT / "examples"), str(original), str(LAYERS), str(WIDTH),
                    str(HIDDEN)], check=True, capture_output=True, timeout=600)
    made = {"original": original, "inputs": Path(f"{original}.inputs.pt")}
    for runtime in ("1.6", "1.5"):
        out = folder / f"stack.v{runtime.replace('.', '')}.pte"
        subprocess.run([sys.executable, "-m", "pte_devconst", "rewrite", str(original), "-o", str(out), "-q",
                        "--runtime", runtime], check=True, capture_output=True, timeout=600)
        made[runtime] = out
    return made


@pytest.fixture(scope="module")
def baseline() -> int:
    done = subprocess.run([sys.executable, "-c", MEASURE, sys.executable, "-c", BASELINE], capture_output=True,
                          text=True, timeout=600)
    return int(done.stderr.strip().splitlines()[-1])


@pytest.mark.parametrize("runtime", ["1.6", "1.5"])
def test_the_runner_holds_the_model_once(made: dict[str, Path], baseline: int, runtime: str) -> None:
    code, out, err, peak = _measured("validate", str(made["original"]), str(made[runtime]), "--inputs",
                                     str(made["inputs"]), "--simulate-devices", "--calls", "3", "-q")
    assert code == 0, out + err
    size = max(made["original"].stat().st_size, made[runtime].stat().st_size)
    assert size > 40 << 20
    assert peak - baseline <= BOUND * size, (f"peak {peak:,} B is {(peak - baseline) / size:.2f}x the program "
                                             f"({size:,} B) above the imports ({baseline:,} B)")


def _planted(made: dict[str, Path], tmp_path: Path, how: str) -> Path:
    """The 1.6 rewrite with a byte of its largest moved constant flipped, or two moved constants' data swapped."""
    if how == "swapped":
        return swapped_moved_constants(made["1.6"], tmp_path / "swapped.pte")
    offset, size = max(moved_spans(made["1.6"]), key=lambda span: span[1])
    return flip_byte(made["1.6"], tmp_path / "flipped.pte", offset + size // 2, 0x10)


@pytest.mark.parametrize("how", ["flipped", "swapped"])
@pytest.mark.parametrize("engine", ["runner", "executorch"])
def test_a_planted_wrong_rewrite_still_fails(made: dict[str, Path], tmp_path: Path, how: str, engine: str) -> None:
    wrong = _planted(made, tmp_path, how)
    extra = ["--simulate-devices"] if engine == "runner" else ["--engine", "executorch"]
    code, out, err, _ = _measured("validate", str(made["original"]), str(wrong), "--inputs", str(made["inputs"]),
                                  *extra, "--format", "json")
    assert code == 1, out + err
    assert json.loads(out)["verdict"] == "fail"


# The runner's own executors hold a model once too: the bench's chain ``x + p0 + ... + p47`` (48 weights of 2 MiB,
# BackendWithCompilerDemo on cuda:0, exported by bench/export_big.py), run in-process.  The demo executor kept
# every intermediate sum of the chain: another copy of the model per call (1.90x at 1 GiB).
TORCH_ONLY = "import torch; import pte_devconst.cli.app, pte_devconst.runner.validate"


def test_an_executor_chain_holds_the_model_once(tmp_path: Path) -> None:
    original, rewritten = tmp_path / "chain.pte", tmp_path / "chain.v16.pte"
    subprocess.run([sys.executable, "-m", "bench.export_big", str(original), "--params", "48", "--rows", "512"],
                   check=True, capture_output=True, timeout=600, cwd=ROOT)
    subprocess.run([sys.executable, "-m", "pte_devconst", "rewrite", str(original), "-o", str(rewritten), "-q"],
                   check=True, capture_output=True, timeout=600)
    done = subprocess.run([sys.executable, "-c", MEASURE, sys.executable, "-c", TORCH_ONLY], capture_output=True,
                          text=True, timeout=600)
    baseline = int(done.stderr.strip().splitlines()[-1])
    code, out, err, peak = _measured("validate", str(original), str(rewritten), "--simulate-devices", "-q")
    assert code == 0, out + err
    size = max(original.stat().st_size, rewritten.stat().st_size)
    assert size > 40 << 20
    assert peak - baseline <= BOUND * size, (f"peak {peak:,} B is {(peak - baseline) / size:.2f}x the program "
                                             f"({size:,} B) above the imports ({baseline:,} B)")
