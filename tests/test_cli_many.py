"""``inspect`` and ``rewrite`` on several programs (files, patterns, folders), and rewrite's markdown report."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import jsonschema

from cli_runner import invoke, invoke_json
from conftest import EXAMPLES, pte_path
from test_report_schema import SCHEMA_FILE, assert_valid

VALIDATOR = jsonschema.Draft202012Validator(json.loads(SCHEMA_FILE.read_text()))

SHARED = "v_c_shared_host_copy"  # value 2 moves; values 0 and 1 are read by aten::mul.out and stay


def _folder(tmp_path: Path) -> Path:
    models = tmp_path / "models"
    (models / "sub").mkdir(parents=True)
    shutil.copy(EXAMPLES / "mlp_copy.pte", models / "mlp_copy.pte")
    shutil.copy(EXAMPLES / "mlp_cpu.pte", models / "sub" / "mlp_cpu.pte")
    return models


# --- rewrite --format markdown --------------------------------------------------------------------

def test_rewrite_markdown_names_the_output_and_what_was_left_in_place(tmp_path: Path) -> None:
    out = tmp_path / "out.pte"
    result = invoke("rewrite", pte_path(SHARED), "-o", out, "--format", "markdown")
    assert result.exit_code == 0
    text = result.stdout
    assert f"Wrote `{out}`" in text and "re-read and checked" in text and "dry run" not in text
    assert "**Left in place:**" in text
    assert "| `forward` | 0 | - | 96 | read by host kernel aten::mul.out |" in text  # no name: `value 0` is said once
    assert "| `forward` | 1 | - | 24 | read by host kernel aten::mul.out |" in text


def test_rewrite_markdown_says_when_it_is_a_dry_run() -> None:
    text = invoke("rewrite", pte_path(SHARED), "--dry-run", "--format", "markdown").stdout
    assert text.startswith(f"### pte-devconst rewrite: `{SHARED}.pte` (dry run)")
    assert "Dry run: no file written." in text and "would be removed" in text and "Wrote" not in text
    nothing = invoke("rewrite", pte_path("v_h_cpu_only"), "--dry-run", "--format", "markdown").stdout
    assert "Nothing to move. No file written (dry run)." in nothing and "**Left in place:**" in nothing


# --- several programs -----------------------------------------------------------------------------

def test_inspect_takes_several_files_and_patterns(tmp_path: Path) -> None:
    models = _folder(tmp_path)
    result = invoke("inspect", models / "mlp_copy.pte", str(models / "**" / "*.pte"))
    assert result.exit_code == 0
    headers = [line for line in result.stdout.splitlines() if line.endswith("method(s)")]
    assert [h.split(":")[0] for h in headers] == [str(models / "mlp_copy.pte"), str(models / "sub" / "mlp_cpu.pte")]
    code, doc = invoke_json("inspect", models)
    assert code == 0 and [Path(r["file"]["path"]).name for r in doc["reports"]] == ["mlp_copy.pte", "mlp_cpu.pte"]
    assert_valid(VALIDATOR, doc, "inspect")
    assert not VALIDATOR.is_valid({**doc, "reports": [{**doc["reports"][0], "surprise": 1}]})
    assert doc["reports"][0]["file"]["eligible_constants"] == 4


def test_inspect_reports_a_bad_file_and_still_shows_the_others(tmp_path: Path) -> None:
    models = _folder(tmp_path)
    (models / "broken.pte").write_bytes(b"not a program")
    result = invoke("inspect", models)
    assert result.exit_code == 2
    assert result.stderr.count("pte-devconst: error: ") == 1 and "broken.pte" in result.stderr
    assert str(models / "mlp_copy.pte") in result.stdout and str(models / "sub" / "mlp_cpu.pte") in result.stdout
    missing = invoke("inspect", models / "mlp_copy.pte", str(tmp_path / "nothing*.pte"))
    assert missing.exit_code == 2 and "no file matches this pattern" in missing.stderr


def test_rewrite_takes_a_folder_and_reports_each_output(tmp_path: Path) -> None:
    models = _folder(tmp_path)
    code, doc = invoke_json("rewrite", models)
    assert code == 0
    assert_valid(VALIDATOR, doc, "rewrite")
    outputs = [r["output"] for r in doc["results"]]
    assert outputs == [str(models / "mlp_copy.devconst.pte"), str(models / "sub" / "mlp_cpu.devconst.pte")]
    assert all(Path(o).is_file() for o in outputs) and [r["changed"] for r in doc["results"]] == [True, False]
    # Again, on a pattern that now also matches the outputs: they are the inputs' rewrites, not new inputs.
    again = invoke("rewrite", str(models / "**" / "*.pte"))
    assert again.exit_code == 0
    assert "mlp_copy.devconst.pte: skipped, it is the rewrite of another input" in again.stdout
    assert not list(models.rglob("*.devconst.devconst.pte"))
    text = invoke("rewrite", models, "--dry-run").stdout
    assert f"{models / 'mlp_copy.pte'} (dry run)" in text


def test_rewrite_several_in_place_and_never_with_one_output(tmp_path: Path) -> None:
    models = _folder(tmp_path)
    one = invoke("rewrite", models, "-o", tmp_path / "x.pte")
    assert one.exit_code == 2 and "--output names one output, but 2 program(s) were given" in one.stderr
    assert not (tmp_path / "x.pte").exists()
    before = (models / "mlp_copy.pte").read_bytes()
    assert invoke("-q", "rewrite", models, "--in-place").exit_code == 0
    assert (models / "mlp_copy.pte").read_bytes() != before and not list(models.rglob("*.devconst.pte"))
    assert invoke("check", models).exit_code == 0
    again = invoke("rewrite", models, "--in-place", env={"COLUMNS": "200"})
    assert again.exit_code == 0 and again.stdout.count("nothing to move; left as it is.") == 2


def test_rewrite_reports_a_bad_program_and_still_rewrites_the_others(tmp_path: Path) -> None:
    models = _folder(tmp_path)
    (models / "broken.pte").write_bytes(b"not a program")
    result = invoke("rewrite", models)
    assert result.exit_code == 2 and "broken.pte" in result.stderr
    assert (models / "mlp_copy.devconst.pte").is_file() and not (models / "broken.devconst.pte").exists()
