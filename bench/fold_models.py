"""Per-call host-to-device bytes of the real-model ``mm`` fixtures: before, after a plain rewrite, after ``--fold``.

    python -m bench.fold_models          # the README's table (markdown), measured by the runner

Each program runs twice with simulated devices (the counts are exact and the same on a GPU); the figures
are the second call's: all host-to-device bytes, and the constant-derived ones (runner/derivation.py).
``tests/test_fold.py`` holds the README's rows equal to what it measures.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "real_models"
ARCHITECTURES = ("llama", "t5", "bert", "gpt2", "vit", "whisper", "wav2vec2", "lstm")


def measure(name: str, workdir: Path) -> list[int]:
    """[H2D, constant-derived] per call: before, after a plain rewrite, after --fold."""
    from pte_devconst.rewriter.plan import RewriteOptions
    from pte_devconst.rewriter.rewrite import rewrite_file
    from pte_devconst.runner.run import run_program

    source = FIXTURES / f"{name}.pte"
    inputs = FIXTURES / f"{name}.inputs.pt"
    paths = [source]
    for label, options in (("plain", RewriteOptions()), ("fold", RewriteOptions(fold=True))):
        out = workdir / f"{name}.{label}.pte"
        rewrite_file(source, out, options=options, durable=False)
        paths.append(out)
    figures = []
    for path in paths:
        copies = run_program(path, inputs=inputs, calls=2, simulate_devices=True).calls[-1].copies
        figures += [copies.h2d.nbytes, copies.constant_derived_h2d.nbytes]
    return figures


def main() -> int:
    print("| program | H2D per call, before | of which constant-derived | after a plain rewrite | "
          "of which constant-derived | after `--fold` | of which constant-derived |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as workdir:
        for arch in ARCHITECTURES:
            for style in ("copy", "legacy"):
                name = f"{arch}_mm_{style}"
                cells = " | ".join(f"{n:,} B" for n in measure(name, Path(workdir)))
                print(f"| `{name}` | {cells} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
