"""Every command's JSON output, on every corpus file, validates against cli/report.schema.json."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import jsonschema
import pytest

from cli_runner import invoke, invoke_json
from conftest import CASES, ptd_path

SCHEMA_FILE = Path(__file__).resolve().parents[1] / "cli" / "report.schema.json"
COMMANDS = {"inspect", "rewrite", "diff", "check", "run", "validate"}


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft202012Validator:
    schema = json.loads(SCHEMA_FILE.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def assert_valid(validator: jsonschema.Draft202012Validator, document: dict, command: str) -> None:
    assert document["command"] == command and document["format_version"] == 1
    errors = sorted(validator.iter_errors(document), key=lambda e: list(e.absolute_path))
    assert not errors, "\n".join(f"{e.json_path}: {e.message[:300]}" for e in errors[:5])


def test_schema_is_draft_2020_12_and_names_every_command(validator) -> None:
    schema = validator.schema
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert set(schema["properties"]["command"]["enum"]) == COMMANDS
    assert COMMANDS <= set(schema["$defs"])


def test_schema_ships_with_the_package() -> None:
    """pyproject's package-data puts it next to the cli modules, so installed copies can validate too."""
    shipped = resources.files("pte_devconst.cli").joinpath("report.schema.json")
    assert json.loads(shipped.read_text()) == json.loads(SCHEMA_FILE.read_text())


def test_schema_rejects_what_it_should(validator) -> None:
    """The schema is not vacuous: a wrong type, a missing field or an unknown command fails."""
    _, good = invoke_json("check", ptd_path("v_g_external_copy").with_suffix(".pte"))
    assert validator.is_valid(good)
    for broken in ({**good, "passed": "yes"}, {k: v for k, v in good.items() if k != "files"},
                   {**good, "command": "frobnicate"}, {**good, "format_version": 2}, {**good, "surprise": 1}):
        assert not validator.is_valid(broken)


@pytest.mark.parametrize("name", CASES)
def test_every_command_json_validates(name: str, tmp_path: Path, validator, work_copy) -> None:
    pte = work_copy(name)
    ptd = ptd_path(name)
    data = ["--ptd", str(pte.with_suffix(".ptd"))] if ptd else []
    out = pte.with_name(f"{name}.devconst.pte")

    _, doc = invoke_json("inspect", pte, *data)
    assert_valid(validator, doc, "inspect")
    _, doc = invoke_json("rewrite", pte, "--dry-run", *data)
    assert_valid(validator, doc, "rewrite")
    assert doc["output"] is None
    code, doc = invoke_json("rewrite", pte, *data)
    assert code == 0
    assert_valid(validator, doc, "rewrite")
    for a, b in ((pte, out), (pte, pte)):
        _, doc = invoke_json("diff", a, b)
        assert_valid(validator, doc, "diff")
    for target in (pte, out):
        code, doc = invoke_json("check", target, *data)
        assert_valid(validator, doc, "check")
        assert code == doc["exit_code"]

    probe = invoke("run", pte, "--simulate-devices", *data, "--format", "json")
    if probe.exit_code == 2 and "no delegate executor" in probe.stderr:  # e.g. XNNPACK: no executor here
        probe = invoke("run", pte, "--simulate-devices", "--opaque-delegates", *data, "--format", "json")
    assert probe.exit_code == 0, probe.stderr
    assert_valid(validator, json.loads(probe.stdout), "run")
    code, doc = invoke_json("validate", pte, out, "--simulate-devices", *data)
    assert_valid(validator, doc, "validate")
    assert code == doc["exit_code"] == {"pass": 0, "fail": 1, "nothing moved": 3}[doc["verdict"]]


def test_check_error_report_validates(tmp_path: Path, validator) -> None:
    bad = tmp_path / "bad.pte"
    bad.write_bytes(b"\0" * 100)
    code, doc = invoke_json("check", bad, tmp_path / "*.nothing")
    assert code == 2
    assert_valid(validator, doc, "check")


FOLD = Path(__file__).resolve().parent / "fixtures" / "fold"


@pytest.mark.parametrize("name", ["steps_copy", "shared_legacy", "nan_copy", "methods_copy"])
def test_fold_json_validates(name: str, tmp_path: Path, validator) -> None:
    """rewrite --fold (dry run and real), inspect with chains, check --fold, diff of a fold and validate of it."""
    pte = FOLD / f"{name}.pte"
    out = tmp_path / "folded.pte"
    for args in (("inspect", pte), ("rewrite", pte, "--fold", "--dry-run"), ("rewrite", pte, "--dry-run"),
                 ("rewrite", pte, "--fold", "-o", out), ("check", "--fold", pte), ("check", pte),
                 ("diff", pte, out)):
        _, doc = invoke_json(*args)
        assert_valid(validator, doc, args[0])
    code, doc = invoke_json("validate", pte, out, "--simulate-devices", "--inputs",
                            FOLD / f"{name}.inputs.pt")
    assert_valid(validator, doc, "validate")
