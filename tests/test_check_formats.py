"""Every gate rule in every output format, in its own words (issue 35, item 3).

A finding is data (``gate/check.py: Diagnostic``): its rule, title, message, items, bytes and fix, made from the
rule's row (``gate/rules.py``).  One emitter per format renders any of them the same way.  This test builds
one check where every rule fires and reads each format back, per rule: the rule's id goes with its own words (what
it says of its items, its fix) and never with another rule's.  Before, ``check``'s GitHub annotation of a file that
needs 1.6 (PDC008) carried the words of a missing .ptd (PDC003), and its markdown row said "copied".
"""

from __future__ import annotations

import json
import re
from typing import Callable

import pytest

from pte_devconst.cli.check_cmd import (render_concise, render_github, render_markdown, render_text, sarif_document,
                                        summary_table)
from pte_devconst.cli.formats import View
from pte_devconst.program.runtime import Runtime
from pte_devconst.gate.check import Acceptance, CheckReport, FileCheck, Finding
from pte_devconst.gate.rules import RULES, GateRule

VIEW = View(False, False, 0)


def _finding(file: str, value: int, reason: str = "", per_call: bool = True) -> Finding:
    return Finding(file, "forward", value, f"weight_{value}", "cuda:0", 256 * (value + 1), 1 if per_call else 0,
                   reason)


def _report(runtime: Runtime = Runtime(1, 6), strict: bool = True) -> CheckReport:
    """One file per file rule (its items only), an unreadable file, a --device no program uses, an accept that
    matched nothing, and what --min-bytes left out."""
    files = (
        FileCheck("copied.pte", None, 2, (_finding("copied.pte", 0), _finding("copied.pte", 1)), devices=("cuda:0",)),
        FileCheck("stays.pte", None, 2, (), stays=(_finding("stays.pte", 2, "read by host kernel aten::mul.out"),
                                                   _finding("stays.pte", 3, "transposed on the host from w")),
                  strict=strict, devices=("cuda:0",)),
        FileCheck("unknown.pte", None, 1, (), unknown=(_finding("unknown.pte", 4),), strict=strict,
                  devices=("cuda:0",)),
        FileCheck("broken.pte", None, 0, (), error="broken.pte: not an ExecuTorch program (bad magic)"),
        FileCheck("filtered.pte", None, 1, (), filtered=(_finding("filtered.pte", 5, "below --min-bytes 4096"),),
                  devices=("cuda:0",)),
        FileCheck("newer.pte", None, 0, (), runtime_findings=(
            _finding("newer.pte", 6, "only ExecuTorch >= 1.6 loads device initial data", per_call=False),),
                  devices=("cuda:0",)),
    )
    return CheckReport(files, 4096, strict=strict, devices=("cuda:0", "cuda:7"), runtime=runtime,
                       unused_accepts=(Acceptance("models/*.pte", "legacy", constant="gone.*",
                                                  origin="pyproject.toml: accept[0]"),))


SELECTION = "--device cuda:0,cuda:7 and --min-bytes 4096"


def _own_words(report: CheckReport) -> dict[str, str]:
    """Each rule's distinctive words, read from its row of the table (not from what the gate made of it): what it
    says of its items, or, for a rule whose result is a message of its own, that message."""
    found = {}
    for d in report.diagnostics():
        rule = d.rule
        found[rule.id] = rule.what.format(runtime=report.runtime.value, selection=SELECTION, constant="constant") \
            if rule.what else d.message
    return found


def _fixes(report: CheckReport) -> dict[str, str]:
    return {d.rule.id: d.fix for d in report.diagnostics() if d.fix}


def _generic_fixes(report: CheckReport) -> dict[str, str]:
    """The fixes as a summary over files says them (``FILE`` for the file)."""
    return {d.rule.id: d.fix_for("FILE") for d in report.diagnostics() if d.fix}


def test_every_rule_fires_in_the_check_under_test() -> None:
    fired = {d.rule.id for d in _report().diagnostics()}
    assert fired == {rule.id for rule in RULES}  # a new rule must join this test


def _pieces_github(report: CheckReport) -> list[str]:
    return [a.line for a in render_github(report, VIEW).annotations]


def _pieces_sarif(report: CheckReport) -> list[str]:
    run = sarif_document(report)["runs"][0]
    results = [f"{r['ruleId']}: {r['message']['text']}" for r in run["results"]]
    notes = [f"{n['descriptor']['id']}: {n['message']['text']}"
             for n in run["invocations"][0]["toolExecutionNotifications"]]
    return results + notes


def _pieces_json(report: CheckReport) -> list[str]:
    return [f"{d['rule']}: {d['title']} {d['message']} {d['fix']}" for d in json.loads(json.dumps(
        report.to_json()))["diagnostics"]]


def _pieces_markdown(report: CheckReport) -> list[str]:
    text = "\n".join(render_markdown(report))
    return [line for line in text.splitlines() if re.match(r"^\*\*PDC\d{3} ", line)]


def _pieces_concise(report: CheckReport) -> list[str]:
    pieces = []
    for line in render_concise(report, VIEW).splitlines():
        pieces += [p for p in re.split(r"(?=PDC\d{3} )", line) if re.match(r"^PDC\d{3} ", p)]
    return pieces


def _pieces_text(report: CheckReport, capsys: pytest.CaptureFixture[str]) -> list[str]:
    render_text(report, VIEW)
    out = capsys.readouterr().out
    return [line[line.index("PDC"):] for line in out.splitlines() if re.search(r"(^|: )PDC\d{3} ", line)]


FORMATS: dict[str, Callable[..., list[str]]] = {
    "github": _pieces_github, "sarif": _pieces_sarif, "json": _pieces_json, "markdown": _pieces_markdown,
    "concise": _pieces_concise, "text": _pieces_text,
}


@pytest.mark.parametrize("runtime", [Runtime(1, 6), Runtime(1, 5)], ids=["default-runtime", "runtime-1.5"])
@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_every_rule_is_rendered_with_its_own_words_in_every_format(
        fmt: str, runtime: Runtime, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "100000")
    report = _report(runtime)
    words, fixes, generic = _own_words(report), _fixes(report), _generic_fixes(report)
    render = FORMATS[fmt]
    pieces = render(report, capsys) if fmt == "text" else render(report)
    seen: set[str] = set()
    for piece in pieces:
        ids = re.findall(r"PDC\d{3}", piece)
        assert ids, piece
        rule = ids[0]
        seen.add(rule)
        own = words[rule]
        assert own.split(";")[0][:60] in piece.replace("\\", ""), (fmt, rule, piece)
        row = next(r for r in RULES if r.id == rule)
        for other, text in words.items():
            if other != rule and text not in own and text not in row.title:
                assert text not in piece, (fmt, rule, f"carries {other}'s words", piece)
        if rule in fixes and fmt != "markdown":  # markdown puts the fix in code: checked below
            assert fixes[rule] in piece or generic[rule] in piece, (fmt, rule, piece)
    shown = {rule.id for rule in RULES if not (fmt in ("markdown", "concise", "text") and rule.id not in words)}
    assert seen >= shown - _not_shown(fmt), (fmt, sorted(shown - seen))


def _not_shown(fmt: str) -> set[str]:
    """Rules a format says in other words than a rule-tagged piece: none (every rule's results carry its id)."""
    return set()


def test_the_fix_names_the_projects_runtime_unless_it_is_the_default() -> None:
    for runtime, option in ((Runtime(1, 6), ""), (Runtime(1, 5), "--runtime 1.5 ")):
        fixes = _fixes(_report(runtime))
        for rule in ("PDC001", "PDC008"):
            assert fixes[rule].startswith(f"pte-devconst rewrite {option}--in-place "), (runtime, fixes[rule])
    folded = _fixes(CheckReport(_report().files, 0, fold=True, runtime=Runtime(1, 5)))
    assert folded["PDC001"].startswith("pte-devconst rewrite --runtime 1.5 --fold --in-place ")


def test_the_markdown_row_of_a_file_names_its_failing_rules() -> None:
    report = _report()
    rows = {line.split("|")[1].strip(): line.split("|")[2].strip() for line in summary_table(report).splitlines()[2:]}
    expected: dict[str, GateRule] = {d.file: d.rule for d in report.diagnostics() if d.file and not d.rule.once}
    for file, rule in expected.items():
        cell = next(cell for name, cell in rows.items() if file.replace(".", "") in name.replace(".", "").replace(
            "\\", ""))
        assert f"{rule.id} {rule.name}" in cell, (file, cell)
    # a file that needs a newer runtime says so, not "copied"
    assert "copied" not in next(cell for name, cell in rows.items() if "newer" in name)


def test_pdc008_in_github_reads_as_the_runtime_rule_not_a_missing_ptd() -> None:
    """The issue's case: a 1.6 file checked for a 1.5 project."""
    report = _report(Runtime(1, 5))
    (line,) = [a.line for a in render_github(report, VIEW).annotations if "PDC008" in a.line]
    assert "needs-newer-runtime" in line and "only a newer ExecuTorch than 1.5 loads" in line
    assert "--ptd" not in line and "not judged" not in line
    assert "pte-devconst rewrite --runtime 1.5 --in-place newer.pte" in line
