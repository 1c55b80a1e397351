"""Section 5 (target 5): start-up of the commands against importing their libraries; commands that run no model
never import torch."""

from __future__ import annotations

import subprocess
from pathlib import Path

from bench.common import PY, ROOT, SCRIPT, Report, Series, child_module, ratio_series, run_child, verdict
from bench.inputs import Inputs

BASELINE = "python -c 'import typer, rich, flatbuffers'"


def cli_args(small: Path, other: Path, dst: Path) -> dict[str, list[str]]:
    """The measured commands' arguments, by name."""
    return {
        "pte-devconst --help": ["--help"],
        "pte-devconst inspect": ["inspect", str(small)],
        "pte-devconst rewrite": ["-q", "rewrite", str(small), "-o", str(dst)],
        "pte-devconst diff": ["diff", str(small), str(other)],
    }


def import_tree(*args: str) -> list[tuple[int, str]]:
    """``python -X importtime -m bench.children.cli_probe ARGS``: (cumulative microseconds, indented name) per
    import."""
    err = subprocess.run([PY, "-X", "importtime", *child_module("cli_probe", *args)[1:]], capture_output=True,
                         text=True, cwd=ROOT).stderr
    rows = []
    for line in err.splitlines():
        if line.startswith("import time:") and "cumulative" not in line:
            _, cumulative, name = line[len("import time:"):].split("|")
            rows.append((int(cumulative), name[1:].rstrip()))  # after the separator's space, one space per level
    return rows


def import_profile(small: Path, top: int = 18) -> str:
    """The largest cumulative imports of ``inspect`` that ``import typer, rich, flatbuffers`` does not make.

    Both run through bench/children/cli_probe.py, so what starting that module imports cancels out.
    """
    base = {name.strip() for _, name in import_tree("baseline")}
    rows = [(c, n) for c, n in import_tree("run", "inspect", str(small)) if n.strip() not in base]
    total = sum(c for c, n in rows if not n.startswith(" "))
    rows.sort(reverse=True)
    return "\n".join(f"{c:>9}   {n}" for c, n in rows[:top]) + f"\n(top-level imports in all: {total} us)"


def torch_imports(args: dict[str, list[str]], dst: Path) -> dict[str, bool]:
    """Whether each command imported torch (bench/children/cli_probe.py ``torch``); no answer counts as yes."""
    found = {}
    for name, argv in args.items():
        proc = subprocess.run(child_module("cli_probe", "torch", *argv), capture_output=True, text=True, cwd=ROOT)
        found[name] = "TORCH=True" in proc.stderr or "TORCH=" not in proc.stderr
        dst.unlink(missing_ok=True)
    return found


def run(rounds: int, report: Report, inputs: Inputs) -> None:
    """Target 5: start-up of --help, inspect, rewrite, diff vs importing typer, rich, flatbuffers; no torch."""
    small, other = inputs.corpus_small, inputs.corpus_other
    dst = inputs.out / "startup.pte"
    args = cli_args(small, other, dst)
    cases = {BASELINE: [PY, "-c", "import typer, rich, flatbuffers"]}  # the measured command itself, as it reads
    cases.update({name: [SCRIPT, *argv] for name, argv in args.items()})
    walls = {n: Series() for n in cases}
    for _ in range(inputs.startup_warmups):  # .pyc files and the page cache
        for cmd in cases.values():
            run_child(cmd)
    for _ in range(rounds):
        for name, cmd in cases.items():
            dst.unlink(missing_ok=True)
            walls[name].values.append(run_child(cmd).wall)
    dst.unlink(missing_ok=True)
    base = walls[BASELINE]
    torch_free = torch_imports(args, dst)
    imports = import_profile(small)
    rows = []
    for name in list(cases)[1:]:
        ratio = ratio_series(walls[name], base)
        report.summarise(f"5. {name} / {BASELINE}", ratio, "x", "<= 1.5x", ratio.median <= 1.5)
        rows.append(f"| {name} / baseline | {ratio.text('x', digits=2)} | <= 1.5x | {verdict(ratio.median <= 1.5)} |"
                    f" {'no' if not torch_free[name] else '**YES**'} |")
    report.add([
        "## 5. Start-up, and no torch",
        "",
        f"Baseline `{PY} -c \"import typer, rich, flatbuffers\"`; commands run through the console script"
        f" `{SCRIPT}` directly (not a pyenv shim), on the 6.8 KB corpus file `v_a_dtypes_copy.pte`"
        " (`diff` against `v_b_dtypes_legacy.pte`). Two warm-up rounds, then the rounds alternate.",
        "",
        "| figure | median (min-max) | target | verdict | imports torch |",
        "|---|---|---|---|---|",
        *rows,
        "",
        "Absolute (context): " + "; ".join(f"{n} {w.text()}" for n, w in walls.items()) + ".",
        "",
        "How: `--help` imports only typer (command modules import the rewriter, the schema layer and rich inside"
        " the command functions; typer is pinned below 0.29, which imports pydantic to run any command). A command"
        " that works loads only what it needs, and that was made cheap: the schema model and the rewriter's records"
        " are `@record` classes (`util/record.py`), which cost about a tenth of a frozen dataclass to define (the"
        " model went from about 40 ms to 6 ms); `rewrite` encodes with the project's own flatbuffer builder"
        " (`schema/flatbuf_builder.py`), so it never imports the `flatbuffers` package and numpy, which the baseline"
        " does. What remains is the decoder and analysis, rich's console and table rendering (the largest item for"
        " `diff`, which renders the most tables), and for `rewrite` the write, fsync and re-read. The package is"
        " byte-compiled before measuring, as `pip install` does.",
        "",
        "Where `inspect`'s start-up goes (`python -X importtime`, one run of `inspect` on the same file; microseconds,"
        " cumulative, the largest imports that the baseline does not make):",
        "",
        "```",
        imports,
        "```",
        "",
    ])
