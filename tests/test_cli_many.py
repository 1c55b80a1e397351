"""``inspect`` and ``rewrite`` on several programs (files, patterns, folders), and rewrite's markdown report."""

from __future__ import annotations

import json
import re
import os
import shutil
from pathlib import Path

import jsonschema
import pytest

from cli_runner import invoke, invoke_json, rendered
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
    text = rendered(result.stdout)
    assert f"Wrote <code>{out}</code>" in text and "re-read and checked" in text and "dry run" not in text
    assert "<strong>Left in place:</strong>" in text
    for value, nbytes in ((0, 96), (1, 24)):  # no name: `value N` is said once, the name cell is "-"
        assert (f"<td><code>forward</code></td>\n<td>{value}</td>\n<td>-</td>\n"
                f"<td>{nbytes} B</td>\n<td>read by host kernel aten::mul.out</td>") in text


def test_rewrite_markdown_says_when_it_is_a_dry_run() -> None:
    text = invoke("rewrite", pte_path(SHARED), "--dry-run", "--format", "markdown").stdout
    assert rendered(text).startswith(f"<h3>pte-devconst rewrite: <code>{SHARED}.pte</code> (dry run)</h3>")
    assert "Dry run: no file written." in text and "would be removed" in text and "Wrote" not in text
    nothing = invoke("rewrite", pte_path("v_h_cpu_only"), "--dry-run", "--format", "markdown").stdout
    assert "Nothing to move. No file written (dry run)." in nothing and "**Left in place:**" in nothing


# --- several programs -----------------------------------------------------------------------------

def test_inspect_takes_several_files_and_patterns(tmp_path: Path) -> None:
    models = _folder(tmp_path)
    result = invoke("inspect", models / "mlp_copy.pte", str(models / "**" / "*.pte"))
    assert result.exit_code == 0
    headers = [line for line in result.stdout.splitlines() if re.search(r", \d+ methods?$", line)]
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
    assert one.exit_code == 2 and "--output names one output, but 2 programs were given" in one.stderr
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


# --- one program under two names, each with its own .ptd (issue 19, item 4) ---------------------------------

def _two_names(tmp_path: Path, link: str) -> tuple[Path, Path]:
    """a.pte without data, b.pte the same file (a hard link or a symlink) with its .ptd next to it."""
    from conftest import CORPUS

    a = Path(shutil.copy(CORPUS / "v_g_external_copy.pte", tmp_path / "a.pte"))
    b = tmp_path / "b.pte"
    if link == "hard":
        os.link(a, b)
    else:
        b.symlink_to(a.name)
    shutil.copy(CORPUS / "v_g_external_copy.ptd", tmp_path / "b.ptd")
    return a, b


@pytest.mark.parametrize("link", ["hard", "symlink"])
def test_check_judges_each_name_with_its_own_data(link: str, tmp_path: Path) -> None:
    """Was: b dropped as "the same file", a judged without data: exit 3 instead of 1."""
    a, b = _two_names(tmp_path, link)
    code, doc = invoke_json("check", a, b)
    assert code == 1, doc
    files = {Path(f["file"]).name: f for f in doc["files"]}
    assert set(files) == {"a.pte", "b.pte"}
    assert files["a.pte"]["status"] == "unknown" and files["b.pte"]["status"] == "findings"
    assert files["b.pte"]["ptd"] == str(tmp_path / "b.ptd")
    code, doc = invoke_json("check", tmp_path)  # a folder: the same
    assert code == 1 and {Path(f["file"]).name for f in doc["files"]} == {"a.pte", "b.pte"}
    # With the same data (--ptd for both), the two names are one program again.
    code, doc = invoke_json("check", a, b, "--ptd", f"{a}={tmp_path / 'b.ptd'}")
    assert code == 1 and [Path(f["file"]).name for f in doc["files"]] == ["a.pte"]
    (tmp_path / "b.ptd").unlink()
    code, doc = invoke_json("check", a, b)
    assert code == 3 and [Path(f["file"]).name for f in doc["files"]] == ["a.pte"]


@pytest.mark.parametrize("link", ["hard", "symlink"])
def test_rewrite_writes_each_name_with_its_own_data(link: str, tmp_path: Path) -> None:
    """Was: ``rewrite a b`` wrote nothing for b and said nothing."""
    a, b = _two_names(tmp_path, link)
    done = invoke("rewrite", a, b)
    assert done.exit_code == 3, done.output  # a has no data: not judged, so not written (as check says of it)
    assert not (tmp_path / "a.devconst.pte").exists() and (tmp_path / "b.devconst.pte").exists()
    code, doc = invoke_json("check", tmp_path / "b.devconst.pte")  # b's rewrite moved its external constants
    assert code == 0, doc
    # The same data for both: the second name is one program with the first, and says so.
    (tmp_path / "b.ptd").unlink()
    for out in tmp_path.glob("*.devconst.pte"):
        out.unlink()
    done = invoke("rewrite", a, b)
    assert done.exit_code == 3 and f"{b}: skipped, the same file as {a}" in done.stdout
    code, doc = invoke_json("rewrite", a, b)
    assert doc["skipped_inputs"] == [f"{b}: skipped, the same file as {a}"]
