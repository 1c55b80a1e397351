"""The benchmark's input programs: where they are, and building them once.

``Inputs.cached()`` names the real inputs under bench/cache/ (git-ignored), which ``prepare`` builds on first
use: the 1 GiB program with the real ExecuTorch 1.5.1 exporter (bench/export_big.py), its 4 MiB and 4 GiB
variants and the analysis and seed programs with this project's writer (bench/synth.py), the runner's
big examples (examples/export_examples.py --big), and the validate section's programs: XNNPACK ones of 20 MiB,
256 MiB and 1 GiB (examples/xnnpack_device.py --set large) and a 4 GiB export of bench/export_big.py.
``Inputs.tiny(folder)`` builds the same roles at a few KiB in seconds, without torch, so that
tests/test_bench_smoke.py can run every section.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from bench.common import HERE, PY, ROOT, child_module

CACHE = HERE / "cache"
FIXTURES = ROOT / "tests" / "fixtures"
SEED_KEYS = ("copy 10k", "copy 100k", "legacy 10k", "legacy 100k")
XNNPACK = CACHE / "xnnpack"
XNNPACK_LARGE = ("stack_20m", "stack_256m", "stack_1g")  # examples/xnnpack_device.py's LARGE set (section 10)


@dataclass(frozen=True)
class RunnerExample:
    """A program the runner section validates, with its inputs and expected outputs (torch .pt files)."""

    pte: Path
    inputs: Path
    expected: Path


@dataclass(frozen=True)
class Inputs:
    """Every input file a section reads, and the folder its outputs go to (deleted after the run)."""

    big_1g: Path  # the exported program (section 1, 3, 8)
    big_4g: Path  # the same program, 2048-row tensors (sections 1, 2)
    big_4m: Path  # the same program, 2-row tensors (section 2)
    big_100m: Path  # the same program, 50-row tensors: 100 MiB, the size most models are (section 1)
    big_t: Path  # transposed weights for --fold (section 7)
    fold_tiny: Path  # 1.5 KiB of folds (section 7's fixed cost of torch)
    analysis: dict[str, Path]  # "10k", "100k" (section 4)
    seed: dict[str, Path]  # SEED_KEYS (section 8)
    runner: dict[str, RunnerExample]  # "copy", "legacy" (section 6)
    xnnpack: dict[str, RunnerExample]  # copy-style programs the installed runtime runs, by model name (section 10)
    demo: dict[str, Path]  # copy-style programs only the runner runs (BackendWithCompilerDemo), by name (section 10)
    corpus_small: Path  # section 5's input
    corpus_other: Path  # section 5's diff partner
    out: Path
    startup_warmups: int = 2  # untimed runs of every start-up command first (.pyc files, page cache)
    layout_sizes: tuple[int, int, int] = (1_000, 10_000, 100_000)  # device values per buffer (section 9)

    @classmethod
    def cached(cls) -> Inputs:
        """The real inputs, under bench/cache/ (``prepare`` builds what is missing)."""
        examples = CACHE / "examples"
        return cls(
            big_1g=CACHE / "big_1g.pte", big_4g=CACHE / "big_4g.pte", big_4m=CACHE / "big_4m.pte",
            big_100m=CACHE / "big_100m.pte",
            big_t=CACHE / "big_transposed_1g.pte", fold_tiny=FIXTURES / "fold" / "steps_copy.pte",
            analysis={"10k": CACHE / "analysis_10k.pte", "100k": CACHE / "analysis_100k.pte"},
            seed={key: CACHE / f"seed_{key.split()[0]}_{key.split()[1]}.pte" for key in SEED_KEYS},
            runner={style: RunnerExample(examples / f"mlp_big_{style}.pte", examples / f"mlp_big_{style}.inputs.pt",
                                         examples / f"mlp_big_{style}.expected.pt") for style in ("copy", "legacy")},
            xnnpack={name: RunnerExample(XNNPACK / f"{name}_copy.pte", XNNPACK / f"{name}_copy.inputs.pt",
                                         XNNPACK / f"{name}_copy.expected.pt") for name in XNNPACK_LARGE},
            demo={"big_1g": CACHE / "big_1g.pte", "big_4g_export": CACHE / "big_4g_export.pte"},
            corpus_small=FIXTURES / "corpus" / "v_a_dtypes_copy.pte",
            corpus_other=FIXTURES / "corpus" / "v_b_dtypes_legacy.pte",
            out=CACHE / "out")

    @classmethod
    def tiny(cls, folder: Path) -> Inputs:
        """Every role at a few KiB, written now into ``folder`` by this project's writer (no torch, seconds).

        The exported program's stand-in is the seed's shape (bench/synth.py ``seed_program``): one first
        dimension for every tensor, as ``scaled_copy`` needs, and eligible constants like the export's.
        The runner's examples are committed fold fixtures with their inputs and expected outputs; the validate
        section's are the committed XNNPACK-as-device MLP and a committed demo-backend corpus program.
        """
        from bench.synth import scaled_copy, write_analysis_program, write_seed_program

        folder.mkdir(parents=True, exist_ok=True)
        big = folder / "big.pte"
        write_seed_program(str(big), 32, "copy", rows=8)
        scaled_copy(str(big), str(folder / "big_4g.pte"), 32)
        scaled_copy(str(big), str(folder / "big_4m.pte"), 2)
        scaled_copy(str(big), str(folder / "big_100m.pte"), 4)
        analysis = {"10k": folder / "analysis_10k.pte", "100k": folder / "analysis_100k.pte"}
        for key, n in (("10k", 200), ("100k", 1000)):
            write_analysis_program(str(analysis[key]), n)
        seed = {}
        for key in SEED_KEYS:
            style, size = key.split()
            seed[key] = folder / f"seed_{style}_{size}.pte"
            write_seed_program(str(seed[key]), 20 if size == "10k" else 200, style)
        fold = FIXTURES / "fold"
        models = ROOT / "examples" / "models"  # small programs that move constants without --fold (section 6)
        xnnpack = FIXTURES / "xnnpack_device"  # a real XNNPACK-as-cuda:0 export the runtime runs (section 10)
        return cls(
            big_1g=big, big_4g=folder / "big_4g.pte", big_4m=folder / "big_4m.pte", big_100m=folder / "big_100m.pte",
            big_t=fold / "steps_copy.pte", fold_tiny=fold / "steps_copy.pte", analysis=analysis, seed=seed,
            runner={style: RunnerExample(models / f"mlp_{style}.pte", models / f"mlp_{style}.inputs.pt",
                                         models / f"mlp_{style}.expected.pt") for style in ("copy", "legacy")},
            xnnpack={"mlp": RunnerExample(xnnpack / "mlp_copy.pte", xnnpack / "mlp_copy.inputs.pt",
                                          xnnpack / "mlp_copy.expected.pt")},
            demo={"v_a_dtypes_copy": FIXTURES / "corpus" / "v_a_dtypes_copy.pte"},
            corpus_small=FIXTURES / "corpus" / "v_a_dtypes_copy.pte",
            corpus_other=FIXTURES / "corpus" / "v_b_dtypes_legacy.pte",
            out=folder / "out", startup_warmups=0, layout_sizes=(20, 200, 2_000))


def _export_big(path: Path, *extra: str) -> None:
    subprocess.run(child_module("bench.export_big", str(path), *extra), check=True, cwd=ROOT)


def prepare(inputs: Inputs, sections: set[str]) -> None:
    """Build the cached inputs the chosen ``sections`` need and are missing, and byte-compile the package."""
    from bench.synth import scaled_copy, write_analysis_program, write_seed_program

    CACHE.mkdir(exist_ok=True)
    inputs.out.mkdir(exist_ok=True)
    # Byte-compile the package as `pip install` does, so that no measured start-up includes compiling a
    # module (an editable install compiles on first import, or on every import if PYTHONDONTWRITEBYTECODE
    # is set, as it is on these machines).
    subprocess.run([PY, "-m", "compileall", "-q", *(str(ROOT / d) for d in ("schema", "program", "rewriter", "cli",
                                                                              "runner", "pte_devconst"))], check=True)
    if not inputs.big_1g.exists() and sections & {"rewrite", "dryrun", "executorch", "seed", "validate"}:
        print("exporting the 1 GiB program with ExecuTorch 1.5.1 (about 1.5 minutes, 2.5 GB RAM)...", flush=True)
        _export_big(inputs.big_1g)
    if not inputs.big_4g.exists() and sections & {"rewrite", "dryrun"}:
        print("writing the 4 GiB variant...", flush=True)
        scaled_copy(str(inputs.big_1g), str(inputs.big_4g), 2048)
    if not inputs.big_100m.exists() and "rewrite" in sections:
        scaled_copy(str(inputs.big_1g), str(inputs.big_100m), 50)
    if not inputs.big_4m.exists() and "dryrun" in sections:
        scaled_copy(str(inputs.big_1g), str(inputs.big_4m), 2)
    if not inputs.big_t.exists() and "fold" in sections:
        print("exporting the 1 GiB transposed-weights program with ExecuTorch 1.5.1 (about 1 minute)...", flush=True)
        _export_big(inputs.big_t, "--transposed")
    if "analysis" in sections:
        for key, n in (("10k", 10_000), ("100k", 100_000)):
            if not inputs.analysis[key].exists():
                write_analysis_program(str(inputs.analysis[key]), n)
    if "seed" in sections:
        for key, path in inputs.seed.items():
            if not path.exists():
                style, size = key.split()
                write_seed_program(str(path), int(size[:-1]) * 1000, style)
    if "runner" in sections and not inputs.runner["copy"].pte.exists():
        print("exporting the runner's big examples (about 1 minute)...", flush=True)
        subprocess.run([PY, str(ROOT / "examples" / "export_examples.py"), "--big", "--only", "mlp_big_copy",
                        "--only", "mlp_big_legacy", "--out", str(inputs.runner["copy"].pte.parent)],
                       check=True, cwd=ROOT)
    big_4g_export = inputs.demo.get("big_4g_export")
    if "validate" in sections and big_4g_export is not None and not big_4g_export.exists():
        # big_4g is the 1 GiB program scaled by this project's writer: its delegate blob still says 512 rows, so
        # nothing can run it.  The runner needs the real export: 2048 parameters of 512x1024.
        print("exporting the 4 GiB program with ExecuTorch 1.5.1 (about 1 minute, 9 GB RAM)...", flush=True)
        _export_big(big_4g_export, "--params", "2048")
    missing = [name for name, example in inputs.xnnpack.items()
               if not (example.pte.exists() and example.inputs.exists() and example.expected.exists())]
    if "validate" in sections and missing:
        print(f"exporting {', '.join(missing)} with XNNPACK as the cuda:0 delegate (about 1.5 minutes, 4.6 GB RAM)...",
              flush=True)
        subprocess.run([PY, str(ROOT / "examples" / "xnnpack_device.py"), str(XNNPACK), "--set", "large",
                        *(arg for name in missing for arg in ("--only", name))], check=True, cwd=ROOT)
