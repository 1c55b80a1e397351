"""The gate's rules are data (issue 29, item 2): one table (``gate/rules.py``) that the status, the exit
code, the JSON, SARIF, GitHub and markdown all read.

Before: the rule ids ``PDC001..004`` and ``SARIF_RULES`` were literals in ``cli/check_cmd.py``, the levels were
written in each renderer, and the status and exit code were if-chains in ``gate/check.py``.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import re
from pathlib import Path

import pytest

from cli_runner import invoke, invoke_json
from conftest import EXAMPLES
from test_layers import FOLDERS
from pte_devconst.gate import check as gate, rules as gate_rules
from pte_devconst.gate.rules import RULES, Level
from pte_devconst.util.exit_code import ExitCode

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = FOLDERS
TABLE = ROOT / "gate" / "rules.py"
LEVELS = {"error", "warning", "note", "notice"}


def test_the_table_names_each_rule_once() -> None:
    ids = [rule.id for rule in RULES]
    assert ids == sorted(ids) and len(set(ids)) == len(ids) and all(re.fullmatch(r"PDC\d{3}", i) for i in ids)
    assert len({rule.name for rule in RULES}) == len(RULES) and len({rule.covers for rule in RULES}) == len(RULES)
    for rule in RULES:  # what it covers is a field of the record of its scope
        record = gate.FileCheck if rule.scope == "file" else gate.CheckReport
        assert rule.covers in {f.name for f in dataclasses.fields(record)} | {
            name for name in dir(record) if isinstance(getattr(record, name, None), property)}, rule


def test_no_rule_id_is_written_outside_the_table() -> None:
    """An id appears only in the table (and in docs and tests, which quote it)."""
    for folder in PACKAGE:
        for path in (ROOT / folder).rglob("*.py"):
            if path == TABLE or "generated" in path.parts:
                continue
            assert not re.search(r"PDC\d{3}", path.read_text()), path


def _level_literals(path: Path) -> list[str]:
    """Levels written as literals where a renderer picks one: the first argument of an annotation, a ``level``
    keyword or key."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):
            name = getattr(node.func, "id", getattr(node.func, "attr", ""))
            if name in ("github_annotation", "Annotation") and node.args and isinstance(node.args[0], ast.Constant):
                found.append(f"{path.name}:{node.lineno} {name}({node.args[0].value!r})")
            found += [f"{path.name}:{node.lineno} level={k.value.value!r}" for k in node.keywords
                      if k.arg == "level" and isinstance(k.value, ast.Constant)]
        if isinstance(node, ast.Dict):
            found += [f"{path.name}:{node.lineno} 'level': {v.value!r}" for k, v in zip(node.keys, node.values)
                      if isinstance(k, ast.Constant) and k.value == "level" and isinstance(v, ast.Constant)
                      and v.value in LEVELS]
    return found


def test_no_level_is_written_outside_the_table() -> None:
    assert _level_literals(ROOT / "cli" / "check_cmd.py") == []
    assert _level_literals(ROOT / "gate" / "check.py") == []


@pytest.fixture
def copied_is_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    """The table with PDC001 a warning that leaves the gate's exit code at 3: every reader must follow."""
    changed = tuple(dataclasses.replace(rule, level=Level.WARNING, exit_code=ExitCode.UNKNOWN)
                    if rule.id == "PDC001" else rule for rule in RULES)
    for module in (gate_rules, gate):
        monkeypatch.setattr(module, "RULES", changed)
        monkeypatch.setattr(module, "FILE_RULES", tuple(r for r in changed if r.scope == "file"))
    monkeypatch.setattr(gate, "REPORT_RULES", tuple(r for r in changed if r.scope == "report"))


def test_every_reader_follows_the_table(copied_is_a_warning: None) -> None:
    program = EXAMPLES / "mlp_copy.pte"  # four constants copied on every call: PDC001
    code, document = invoke_json("check", program)
    assert code == 3 and document["exit_code"] == 3 and document["files"][0]["status"] == "unknown"
    assert {r["id"]: r["level"] for r in document["rules"]}["PDC001"] == "warning"
    assert document["files"][0]["findings"][0]["rule"] == "PDC001"
    sarif = json.loads(invoke("check", program, "--format", "sarif").stdout)
    (result,) = sarif["runs"][0]["results"]
    assert result["ruleId"] == "PDC001" and result["level"] == "warning"
    assert sarif["runs"][0]["tool"]["driver"]["rules"][0]["defaultConfiguration"]["level"] == "warning"
    github = invoke("check", program, "--format", "github").stdout
    assert github.startswith("::warning file=") and "PDC001 copied-every-call" in github
    markdown = invoke("check", program, "--format", "markdown").stdout
    assert "**PDC001 copied-every-call** (warning):" in markdown


def test_strict_only_rules_take_their_level_from_the_table() -> None:
    """PDC002 (a copy that stays) is a note without --strict and an error with it, in JSON, SARIF and GitHub."""
    from conftest import pte_path

    program = pte_path("v_c_shared_host_copy")  # one constant moves, one stays (read on the host too)
    for strict, level, github in ((False, "note", "::notice"), (True, "error", "::error")):
        args = ("--strict",) if strict else ()
        _, document = invoke_json("check", program, *args)
        assert {r["id"]: r["level"] for r in document["rules"]}["PDC002"] == level
        sarif = json.loads(invoke("check", program, "--format", "sarif", *args).stdout)
        assert {r["ruleId"]: r["level"] for r in sarif["runs"][0]["results"]}["PDC002"] == level
        lines = invoke("check", program, "--format", "github", *args).stdout.splitlines()
        assert any(line.startswith(github) and "PDC002 copy-stays" in line for line in lines)
