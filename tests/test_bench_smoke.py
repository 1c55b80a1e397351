"""The benchmark runs: every bench module imports, every child measures, every section writes its figures.

``python -m bench`` takes a quarter of an hour on big inputs; nothing else runs its code, so a child or a
section that broke would go unnoticed until the next full run.  Here each runs once on the tiny inputs of
``bench.inputs.Inputs.tiny`` (a few KiB, built in about a second): the children in-process (they are
plain functions), the command lines of the children in a subprocess, and one section end to end.  The
other sections start dozens of processes each (several import torch or executorch): ``-m slow`` runs
them all at tiny size, as ``python -m bench --tiny`` does.
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import pytest

import bench
from bench.children import analysis, bare_copy, cli_probe, layout, open_plan, profile_step, self_check, syscalls
from bench.common import Report, Series, child_module, ratio_series, run_child
from bench.inputs import Inputs
from bench.sections import SECTIONS

ROOT = Path(__file__).resolve().parents[1]
# "median unit (min-max)"; section 7's memory growth can be below zero at tiny size (the same input twice).
NUMBER = re.compile(r"^(-?\d+\.\d+) \S* ?\((-?\d+\.\d+)-(-?\d+\.\d+)\)$")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Inputs:
    inputs = Inputs.tiny(tmp_path_factory.mktemp("bench"))
    inputs.out.mkdir(exist_ok=True)
    return inputs


def _modules() -> list[str]:
    return sorted(info.name for info in pkgutil.walk_packages(bench.__path__, "bench."))


def test_every_bench_module_imports_and_its_functions_are_typed_and_documented() -> None:
    names = _modules()
    assert {"bench.run", "bench.common", "bench.inputs", "bench.children.self_check",
            "bench.sections.rewrite"} <= set(names)
    undocumented = []
    for name in names:
        if name == "bench.__main__":  # running it runs the benchmark
            continue
        module = importlib.import_module(name)
        assert module.__doc__, f"{name} has no docstring"
        if not name.startswith(("bench.children", "bench.sections")):
            continue
        for fname, function in inspect.getmembers(module, inspect.isfunction):
            if function.__module__ != name or fname.startswith("_"):
                continue
            if "return" not in function.__annotations__:
                undocumented.append(f"{name}.{fname}: no return type")
            if not function.__doc__ and fname != "main":
                undocumented.append(f"{name}.{fname}: no docstring")
    assert not undocumented, undocumented


def test_no_child_is_code_in_a_string() -> None:
    """Children are modules run with ``-m``: the only ``-c`` left are the two baselines the report names."""
    found = []
    for path in sorted((ROOT / "bench").rglob("*.py")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if ('"-c"' in line and '"sh"' not in line and "import typer, rich, flatbuffers" not in line
                    and '"import torch"' not in line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not found, found


def test_list_and_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    from bench.run import main

    assert main(["--list"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in listed] == list(SECTIONS)
    for bad in (["--only", "rewrite,nope"], ["--rounds", "0"]):
        with pytest.raises(SystemExit) as stop:
            main(bad)
        assert stop.value.code == 2


def test_tiny_inputs_keep_the_roles(tiny: Inputs) -> None:
    """The 4 GiB and 4 MiB stand-ins are the 1 GiB one's program scaled: bigger and smaller, same constants."""
    from pte_devconst.schema.pte_file import open_pte

    assert tiny.big_4m.stat().st_size < tiny.big_1g.stat().st_size < tiny.big_4g.stat().st_size
    counts = []
    for path in (tiny.big_4m, tiny.big_1g, tiny.big_4g):
        with open_pte(path) as pte:
            counts.append(len(pte.program.execution_plan[0].values))
    assert counts[0] == counts[1] == counts[2]


def test_bare_copy(tiny: Inputs) -> None:
    dst = tiny.out / "bare.pte"
    assert bare_copy.copy(str(tiny.big_4g), str(dst)) == tiny.big_4g.stat().st_size
    assert dst.read_bytes() == tiny.big_4g.read_bytes()


def test_self_check_times_copy_and_check_apart(tiny: Inputs) -> None:
    data = self_check.measure(str(tiny.big_1g), str(tiny.out / "sc.pte"), 2)
    assert set(data) == {"sampled", "full"}
    for samples in data.values():
        assert len(samples) == 2  # the warm-up round is dropped
        for figures in samples:
            assert figures["copy"] > 0 and figures["check"] > 0
            assert figures["read"] > 0  # the check re-reads both files (what reading rchar costs is taken off)
    assert data["full"][-1]["read"] >= data["sampled"][-1]["read"]
    ratio = ratio_series(Series([s["check"] for s in data["sampled"]]), Series([s["copy"] for s in data["sampled"]]))
    assert ratio.median > 0


def test_self_check_refuses_a_program_that_moves_nothing(tiny: Inputs) -> None:
    """A rewrite that only copies the file has no copy/check split to time: a clear error, not a KeyError."""
    with pytest.raises(RuntimeError, match="moved nothing"):
        # folds only: a plain rewrite copies
        self_check.measure(str(tiny.big_t), str(tiny.out / "x.pte"), 1)


def test_syscall_counts_and_os_restored(tiny: Inputs) -> None:
    real_write = os.write
    counts = syscalls.measure(str(tiny.big_1g), str(tiny.out / "sys.pte"))
    assert os.write is real_write and os.copy_file_range is not None
    assert counts["output"] == (tiny.out / "sys.pte").stat().st_size
    assert counts["copy_file_range"] > 0  # the constants go through the kernel
    assert counts.get("write", 0) < counts["output"]
    assert counts["calls"]["copy_file_range"] >= 1 and counts["calls"]["fsync"] >= 1  # calls counted too


def test_open_plan_and_analysis(tiny: Inputs) -> None:
    paths = {"4M": str(tiny.big_4m), "4G": str(tiny.big_4g)}
    times = open_plan.measure(paths, 2)
    assert set(times) == {"4M", "4G"} and all(len(v) == 2 and min(v) > 0 for v in times.values())
    with pytest.raises(ValueError, match="KEY=PATH"):
        open_plan.parse_paths(["no-equals-sign"])
    data = analysis.measure({k: str(v) for k, v in tiny.analysis.items()}, 1)
    for key in ("10k", "100k"):
        for part in ("open", "analyze", "plan", "total"):
            assert len(data[f"{key} {part}"]) == 1 and data[f"{key} {part}"][0] > 0
    small, large = data["10k meta"], data["100k meta"]
    assert 0 < small[0] < large[0] and 0 < small[2] < large[2]  # values, eligible constants


def test_layout_child() -> None:
    """Section 9's figures: both shapes at every size, laid out within the bound's 10% and the budget."""
    data = layout.measure([20, 200], 1)
    assert set(data) == {"live 20", "short 20", "live 200", "short 200"}
    for key, entry in data.items():
        assert len(entry["seconds"]) == 1 and entry["seconds"][0] >= 0 and 0 < entry["steps"]
        assert entry["bound"] <= entry["size"] <= 1.10 * entry["bound"], key
    assert data["live 200"]["groups"] > 200 and data["short 200"]["groups"] == 200  # live: and the input, output


def test_seed_and_roundtrip(tiny: Inputs) -> None:
    from bench import roundtrip, seed
    from pte_devconst.schema.pte_file import open_pte

    data = seed.measure([str(tiny.seed["copy 10k"]), str(tiny.seed["legacy 10k"])], 1)
    copy, legacy = data[str(tiny.seed["copy 10k"])], data[str(tiny.seed["legacy 10k"])]
    assert copy["moved"] == copy["eligible"] == 20 and legacy["before"] == 0 < legacy["after"]
    assert len(copy["total"]) == 1 and copy["total"][0] > 0
    dst = tiny.out / "rt.pte"
    figures = roundtrip.roundtrip(str(tiny.big_1g), str(dst))
    assert figures["total"] >= figures["open"] > 0
    with open_pte(dst) as again, open_pte(tiny.big_1g) as original:
        assert again.program == original.program


def test_profile_child(tiny: Inputs) -> None:
    text = profile_step.profile("open", [str(tiny.analysis["10k"])], top=5)
    assert "function calls" in text and "tottime" in text
    text = profile_step.profile("rewrite", [str(tiny.big_1g), str(tiny.out / "prof.pte")], top=5)
    assert "function calls" in text and (tiny.out / "prof.pte").exists()


def test_cli_probe(tiny: Inputs, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_probe.run_cli(["inspect", str(tiny.corpus_small)]) == 0
    assert "v_a_dtypes_copy" in capsys.readouterr().out
    assert cli_probe.run_cli(["inspect", str(tiny.out / "missing.pte")]) == 2
    # Whether torch was imported is a fresh process's question (this one may hold torch already).
    proc = subprocess.run(child_module("cli_probe", "torch", "inspect", str(tiny.corpus_small)), cwd=ROOT,
                          capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stderr.strip().splitlines()[-1] == "TORCH=False"


def test_child_command_lines(tiny: Inputs) -> None:
    """The children as the sections start them: ``python -m``, JSON on stdout, timed with their peak RSS."""
    sample = run_child(child_module("open_plan", "1", f"4M={tiny.big_4m}"))
    assert sample.wall > 0 and sample.rss_kib > 0 and list(json.loads(sample.stdout)) == ["4M"]
    sample = run_child([sys.executable, "-S", "-m", "bench.children.bare_copy", str(tiny.big_4m),
                        str(tiny.out / "c.pte")])
    assert (tiny.out / "c.pte").read_bytes() == tiny.big_4m.read_bytes()
    with pytest.raises(RuntimeError, match="failed"):
        run_child(child_module("self_check", "too", "few"))


def _check_section(name: str, tiny: Inputs) -> Report:
    report = Report()
    SECTIONS[name](1, report, tiny)
    assert report.lines and report.lines[0].startswith("## ")
    text = "\n".join(report.lines)
    assert "nan" not in text.lower().split() and "Traceback" not in text
    for target, figure, limit, ok in report.summary:
        match = NUMBER.match(figure)
        assert match, (target, figure)
        assert float(match[2]) <= float(match[1]) <= float(match[3]) and isinstance(ok, bool) and limit
    return report


def test_seed_section(tiny: Inputs) -> None:
    report = _check_section("seed", tiny)
    assert [t for t, *_ in report.summary] == [
        "8. seed shape (copy), 100k / 10k constants, analyze_program",
        "8. seed shape (copy), 100k / 10k constants, open + analyze + plan",
        "8. seed shape (legacy), 100k / 10k constants, analyze_program",
        "8. seed shape (legacy), 100k / 10k constants, open + analyze + plan",
        "8. device memory after / before, 1 GiB export"]
    rows = [line for line in report.lines if line.startswith(("| copy 10k |", "| legacy 100k |"))]
    assert len(rows) == 2  # every tiny seed program's constants all move, within the device memory target
    assert rows[0].startswith("| copy 10k | 20 / 20 |") and rows[1].startswith("| legacy 100k | 200 / 200 |")
    assert all(row.endswith("| met |") for row in rows)


SUMMARY_PREFIX = {"rewrite": "1.", "dryrun": "2.", "executorch": "3.", "analysis": "4.", "startup": "5.", "fold": "7.",
                  "layout": "9.", "validate": "10."}


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in SECTIONS if n != "seed"])
def test_every_section_at_tiny_size(name: str, tiny: Inputs) -> None:
    report = _check_section(name, tiny)
    if name in SUMMARY_PREFIX:
        assert report.summary and all(t.startswith(SUMMARY_PREFIX[name]) for t, *_ in report.summary)
    else:  # the runner has byte counts, no target
        assert any(line.startswith("| mlp_big_copy |") and "passed" in line for line in report.lines)
    if name == "startup":
        assert "top-level imports in all: 0 us" not in "\n".join(report.lines)
    if name == "validate":  # every pair passed, with each engine, and the runtime ran the program once
        text = "\n".join(report.lines)
        assert "installed runtime: load + 1 call" in text and "**error**" not in text
        rows = [line for line in report.lines if "| validate " in line]
        assert len(rows) == 5 and all(row.endswith("| PASS |") for row in rows)


@pytest.mark.slow
def test_the_whole_tiny_run_writes_a_report(tmp_path: Path) -> None:
    results = tmp_path / "RESULTS.md"
    proc = subprocess.run([sys.executable, "-m", "bench", "--tiny", "--rounds", "1", "--results", str(results)],
                          cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    text = results.read_text()
    headings = [line for line in text.splitlines() if line.startswith("## ")]
    assert headings[0] == "## Summary" and [h.split()[1] for h in headings[1:]] == [f"{i}." for i in range(1, 11)]


def test_validate_section_reads_and_renders_without_running(tiny: Inputs) -> None:
    """Section 10's parts that run no process: its command lines, verdicts, ratios and rows (the section itself
    starts a dozen processes that import torch: ``-m slow``)."""
    from bench.sections import validate as section

    example = tiny.xnnpack["mlp"]
    runner = section.validate_cmd(example.pte, tiny.out / "r.pte", section.RUNNER, example.inputs, example.expected)
    engine = section.validate_cmd(example.pte, tiny.out / "r.pte", section.ENGINE, example.inputs, example.expected)
    assert "--simulate-devices" in runner and "-e" in runner and "--engine" not in runner
    assert engine[-2:] == ["--engine", "executorch"] and "-e" not in engine and "-i" in engine
    assert section.verdict_of('{"verdict": "pass"}') == "pass" and section.verdict_of("oops") == "unreadable"
    assert section.size_text(20 << 20) == "20.0 MiB" and section.size_text(3 << 29) == "1.5 GiB"
    assert section.failure("pte-devconst validate a b failed (2): a warning\npte-devconst: error: a | b\n") == \
        "exit 2: pte-devconst: error: a / b"  # the line that says why, never a table's cell separator

    def figures(walls: list[float], rss_mib: list[float], outcome: str = "pass") -> section.Figures:
        made = section.Figures()
        for wall, rss in zip(walls, rss_mib):
            made.add(wall, rss * 1024, outcome)
        return made

    size = 100 << 20
    program = section.Program(
        "m", size, {"1.6": size, "1.5": size}, figures([1, 1], [300, 300]), figures([2, 2], [400, 400]),
        {("1.6", section.RUNNER): figures([30, 20], [400, 450]), ("1.6", section.ENGINE): figures([10, 10], [500, 500]),
         ("1.5", section.RUNNER): figures([9, 9], [350, 350], "fail"), ("1.5", section.ENGINE): section.Figures()}, 2)
    program.runs["1.5", section.ENGINE].error = "died"
    assert program.time_ratio("1.6").values == [3.0, 2.0] and not program.time_ratio("1.5").values
    assert program.memory(("1.6", section.RUNNER)).values == [1.0, 1.5]
    rows = program.rows()
    assert len(rows) == 5 and "installed runtime" in rows[0] and "1.00 x (1.00-1.00) met" in rows[0]
    assert "2.50 x (2.00-3.00) **missed**" in rows[1] and rows[1].endswith("| PASS |")  # runner / engine, wall
    assert rows[3].endswith("| **FAIL** |") and "**error**: died" in rows[4]
    broken = section.Program("b", size, {"1.6": size}, section.Figures(), None,
                             {("1.6", section.RUNNER): section.Figures()}, 0)
    broken.fail(section.setup([[sys.executable, "-m", "bench.children.runtime_once"]]))  # exits 2 with its usage
    assert broken.rows()[0].endswith("| **error**: setup exit 2: usage: python -m bench.children.runtime_once"
                                     " {stage SRC DST,run PTE INPUTS,baseline} |")
    report = Report()
    section.summarise(report, [program], [])
    assert [t for t, *_ in report.summary] == [
        "10. validate runner / --engine executorch, wall, m (rewrite 1.6)",
        "10. validate (runner) peak RSS above baseline / file, m",
        "10. validate (executorch) peak RSS above baseline / file, m"]
    assert [ok for *_, ok in report.summary] == [False, True, False]
