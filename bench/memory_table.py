"""Planned device memory before and after a rewrite (plain and ``--fold``) of every committed real-model export.

``python -m bench.memory_table`` prints a markdown table (the README's and bench/RESULTS.md's): per program, the
device bytes the input plans, what the rewrite plans (read back from the written file by this project's reader,
not taken from the plan), the bound (resident + the peak of everything else live at once) and the verdict of the
target after <= max(before, 1.10 x bound).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REAL = ROOT / "tests" / "fixtures" / "real_models"
SEED = ROOT / "tests" / "fixtures" / "seed"


def rows() -> list[str]:
    from pte_devconst import api
    from pte_devconst.program.layout import planned_device_bytes
    from pte_devconst.rewriter.fold import torch_found
    from pte_devconst.schema.pte_file import open_pte

    programs = sorted(p for p in [*REAL.glob("*_copy.pte"), *REAL.glob("*_legacy.pte"), *SEED.glob("*.pte")])
    lines = []
    with tempfile.TemporaryDirectory() as folder:
        for path in programs:
            cells = [f"`{path.stem}`"]
            verdicts = []
            for fold in (False, True):
                if fold and not torch_found():
                    cells += ["-"] * 2
                    continue
                out = Path(folder) / f"{path.stem}.{int(fold)}.pte"
                result = api.rewrite(path, out, fsync=False, fold=fold)
                memory = result.plan.memory
                after = memory.before
                if result.changed:
                    with open_pte(out) as written:
                        after = planned_device_bytes(written.program)
                verdicts.append(after <= max(memory.before, 1.10 * memory.bound) or not result.changed)
                if not fold:
                    cells.append(f"{memory.before:,}")
                cells += [f"{after:,}", f"{memory.bound:,}" if result.changed else "-"]
            cells.append("met" if all(verdicts) else "**missed**")
            lines.append("| " + " | ".join(cells) + " |")
    return lines


def main() -> None:
    print("| program | before | after | bound | after, --fold | bound, --fold | after <= max(before, 1.1 x bound) |")
    print("|---|---|---|---|---|---|---|")
    for line in rows():
        print(line)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
