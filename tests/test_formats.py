"""One format registry (issue 29, item 3): one format enum, the set each command supports, one dispatch from
(command, format) to renderer, ``--json`` handled once, one naming helper for values, renderers typed with the
records they render; and a per-file fact shows in every format through one hook.

Before: three enums (``OutputFormat``, ``GateFormat``, ``RewriteFormat``), an if/elif chain per command,
``--json`` handled three times, ``fqn or f"value {i}"`` nine times, ``constant_label`` twice, renderers taking
``Any``.
"""

from __future__ import annotations

import ast
import dataclasses
import io
import json
import re
from contextlib import redirect_stdout
from pathlib import Path

import jsonschema
import pytest

from cli_runner import invoke
from conftest import EXAMPLES
from test_layers import FOLDERS
from test_report_schema import SCHEMA_FILE

ROOT = Path(__file__).resolve().parents[1]
SOURCES = [p for folder in FOLDERS
           for p in (ROOT / folder).rglob("*.py") if "generated" not in p.parts]


def _registry() -> dict:
    from pte_devconst.cli.check_cmd import CHECK
    from pte_devconst.cli.diff_cmd import DIFF
    from pte_devconst.cli.inspect_cmd import INSPECT
    from pte_devconst.cli.rewrite_cmd import REWRITE
    from pte_devconst.cli.run_cmd import RUN
    from pte_devconst.cli.validate_cmd import VALIDATE

    return {r.command: r for r in (INSPECT, REWRITE, DIFF, CHECK, RUN, VALIDATE)}


def test_one_format_enum() -> None:
    enums = [f"{path.relative_to(ROOT)}: {node.name}" for path in SOURCES for node in ast.walk(ast.parse(
        path.read_text())) if isinstance(node, ast.ClassDef) and "Format" in node.name
        and any("Enum" in ast.unparse(base) for base in node.bases)]
    assert enums == ["cli/formats.py: Format"]


def test_each_command_offers_the_formats_it_has_renderers_for() -> None:
    from pte_devconst.cli.commands import COMMAND_MODULES

    registry = _registry()
    assert len(registry) == len(COMMAND_MODULES)
    assert [f.value for f in registry["check"].formats] == ["text", "concise", "markdown", "json", "github", "sarif"]
    assert [f.value for f in registry["rewrite"].formats] == ["text", "concise", "markdown", "json"]
    for name, renderers in registry.items():
        offered = re.search(r"--output-format\s+\[([a-z|]+)\]", invoke(name, "--help", env={"COLUMNS": "200"}).stdout)
        assert offered and offered.group(1).split("|") == [f.value for f in renderers.formats], name
        refused = invoke(name, "x.pte", "x.pte", "--format", "yaml")
        assert refused.exit_code == 2 and "'yaml' is not one of " + ", ".join(
            f.value for f in renderers.formats) in refused.stderr


def test_json_flag_and_format_are_resolved_in_one_place() -> None:
    """Each command hands ``--format`` and ``--json`` to ``formats.resolve`` and prints through ``Output``."""
    for name in ("inspect_cmd", "rewrite_cmd", "diff_cmd", "check_cmd", "run_cmd", "validate_cmd"):
        source = (ROOT / "cli" / f"{name}.py").read_text()
        assert source.count("json_flag") == 2, name  # the parameter, and the call to resolve
        assert "resolve(" in source and "Output(" in source and "emit_json" not in source, name


def test_values_are_named_in_one_place() -> None:
    twice = [f"{p.relative_to(ROOT)}" for p in SOURCES if p.name != "labels.py"
             and re.search(r"""or f["']value \{""", p.read_text())]
    assert twice == []
    defined = [p.name for p in SOURCES if re.search(r"^def (constant_label|name_cell|value_name)\b", p.read_text(),
                                                    re.M)]
    assert defined == ["labels.py"]


def test_renderers_are_typed_with_the_records_they_render() -> None:
    untyped = []
    for path in (ROOT / "cli").glob("*_cmd.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and node.name.startswith("render") and node.args.args:
                annotation = node.args.args[0].annotation
                if annotation is None or ast.unparse(annotation) in ("Any", "object"):
                    untyped.append(f"{path.name}: {node.name}")
    assert untyped == []


FACT = "needs ExecuTorch >= 1.6: device initial data"


@pytest.mark.parametrize("fmt", ["text", "concise", "markdown", "json", "github", "sarif"])
def test_a_fact_about_each_file_shows_in_every_format(fmt: str) -> None:
    """The hook a per-file line (the oldest runtime that loads a file, say) is added through: one function."""
    from pte_devconst.api import check
    from pte_devconst.cli.formats import Fact, Format, Output, View

    renderers = dataclasses.replace(_registry()["check"], facts=lambda report: [
        Fact(f.file, "runtime", FACT, "1.6") for f in report.files])
    program = EXAMPLES / "mlp_copy.pte"
    output = Output(renderers, Format(fmt), View())
    captured = io.StringIO()
    with redirect_stdout(captured):
        output.add(check([program]))
        output.close()
    printed = captured.getvalue()
    assert (FACT.replace(">", "&gt;") if fmt == "markdown" else FACT) in printed
    if fmt == "json":
        document = json.loads(printed)
        assert document["facts"] == [{"file": str(program), "key": "runtime", "text": FACT, "value": "1.6"}]
        jsonschema.validate(document, json.loads(SCHEMA_FILE.read_text()))
    if fmt == "github":
        assert f"::notice file={program},title=pte-devconst%3A runtime::{FACT}" in printed.splitlines()
