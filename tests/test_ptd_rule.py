"""One .ptd rule for every command: ``--ptd`` when given, else ``NAME.ptd`` next to ``NAME.pte``.

Without its data an external constant is *unknown* (never silently clean), and every hint about it
says how to pass the data.  ``check``'s pairing by path is in ``test_cli_check.py``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from cli_runner import invoke, invoke_json
from conftest import CORPUS

NAME = "v_g_external_copy"  # w and only_dev move to cuda:0 with their data; b is read on the host


def _lone(tmp_path: Path) -> Path:
    folder = tmp_path / "lone"
    folder.mkdir()
    return Path(shutil.copy(CORPUS / f"{NAME}.pte", folder / "model.pte"))


def test_rewrite_pairs_the_ptd_next_to_the_program(work_copy) -> None:
    """Was: 'nothing to move' unless --ptd was given, although NAME.ptd sat next to NAME.pte."""
    pte = work_copy(NAME)
    code, doc = invoke_json("rewrite", pte, "--dry-run")
    assert code == 0 and doc["changed"]
    assert sorted(p["name"] for p in doc["methods"][0]["moved"]) == ["only_dev", "w"]
    given = invoke_json("rewrite", pte, "--dry-run", "--ptd", pte.with_suffix(".ptd"))[1]
    assert given["methods"] == doc["methods"]


def test_inspect_pairs_the_ptd_next_to_the_program(work_copy) -> None:
    pte = work_copy(NAME)
    result = invoke("inspect", pte, "--format", "json")
    doc = json.loads(result.stdout)
    assert result.exit_code == 0 and doc["ptd"] == str(pte.with_suffix(".ptd")) and doc["unknown_constants"] == 0
    verdicts = {c["name"]: c["verdict"] for c in doc["file"]["methods"][0]["constants"]}
    assert verdicts["w"] == verdicts["only_dev"] == "eligible:cuda:0"
    assert f"data: {pte.with_suffix('.ptd')}" in invoke("inspect", pte).stdout


def test_without_its_ptd_a_constant_is_unknown_and_the_hint_says_how_to_pass_it(tmp_path: Path) -> None:
    pte = _lone(tmp_path)
    result = invoke("inspect", pte, "--format", "json")
    doc = json.loads(result.stdout)
    assert doc["ptd"] is None and doc["unknown_constants"] == 2 and doc["file"]["eligible_constants"] == 0
    verdicts = {c["name"]: c["verdict"] for c in doc["file"]["methods"][0]["constants"]}
    assert verdicts["w"].startswith("unknown: no .ptd given (pass --ptd)") and verdicts["w"].endswith("cuda:0")
    assert verdicts["b"] == "not eligible: read by host kernel aten::mul.out"
    text = invoke("inspect", pte, env={"COLUMNS": "200"}).stdout
    assert "2 external constants not judged" in text and "model.ptd next to it or pass --ptd" in text
    assert "No constant is copied" not in text  # not clean: unknown
    markdown = invoke("inspect", pte, "--format", "markdown").stdout
    assert "not judged" in markdown and "--ptd" in markdown
    rewrite = invoke("rewrite", pte, "--dry-run", env={"COLUMNS": "200"})
    assert rewrite.exit_code == 0 and "nothing to move" in rewrite.stdout
    assert "no .ptd given; pass --ptd" in rewrite.stdout  # the 'left in place' reason says how
    code, doc = invoke_json("rewrite", pte, "--dry-run")
    assert all("pass --ptd" in n["verdict"] for n in doc["methods"][0]["not_moved"] if n["name"] != "b")


def test_an_explicit_ptd_wins_over_the_sibling(work_copy, tmp_path: Path) -> None:
    pte = work_copy(NAME)
    other = CORPUS / "v_g_external_cpu.ptd"  # same keys; its data makes no difference to the verdicts...
    result = invoke("inspect", pte, "--ptd", other, "--format", "json")
    assert json.loads(result.stdout)["ptd"] == str(other)
    missing = invoke("inspect", pte, "--ptd", tmp_path / "nope.ptd")  # ...but a wrong name is an error
    assert missing.exit_code == 2 and "nope.ptd" in missing.stderr


# --- the rewrite's default output pairs with the original's data ---------------------------------

def test_the_default_rewrite_output_finds_the_original_ptd(work_copy) -> None:
    """Was: check X.devconst.pte did not look for X.ptd, although the rewrite keeps external bytes there."""
    pte = work_copy(NAME)
    data = pte.with_suffix(".ptd")
    # An output that still copies its external constants: nothing is large enough to move, so it is the input's twin
    # (a --device the program does not use is refused, not a way to write a twin).
    assert invoke("rewrite", pte, "--min-bytes", "1000000000").exit_code == 0
    twin = pte.with_name(f"{NAME}.devconst.pte")
    code, doc = invoke_json("check", twin)
    assert code == 1 and doc["files"][0]["ptd"] == str(data) and doc["unknown"] == 0
    assert sorted(f["name"] for f in doc["files"][0]["findings"]) == ["only_dev", "w"]
    assert f"data: {data}" in invoke("inspect", twin).stdout
    # Its own NAME.devconst.ptd wins when there is one.
    own = Path(shutil.copy(data, twin.with_suffix(".ptd")))
    assert invoke_json("check", twin)[1]["files"][0]["ptd"] == str(own)


def test_a_program_elsewhere_without_data_says_which_names_it_looked_for(work_copy, tmp_path: Path) -> None:
    pte = work_copy(NAME)
    folder = tmp_path / "out"
    folder.mkdir()
    moved = Path(shutil.copy(pte, folder / f"{NAME}.devconst.pte"))
    code, doc = invoke_json("check", moved)
    assert code == 3
    assert invoke("check", moved, "--strict").exit_code == 1  # copied per call either way: strict fails
    assert f"put {NAME}.devconst.ptd or {NAME}.ptd next to it or pass --ptd FILE.ptd" in doc["files"][0]["note"]


def test_run_and_validate_follow_the_rule(work_copy, tmp_path: Path) -> None:
    """Was: run and validate needed --ptd (and validate --rewritten-ptd) for data lying right there."""
    pytest.importorskip("torch")
    pte = work_copy(NAME)
    assert invoke("rewrite", pte).exit_code == 0
    rewritten = pte.with_name(f"{NAME}.devconst.pte")
    inputs = CORPUS / f"{NAME}.inputs.pt"
    run = invoke("run", rewritten, "--simulate-devices", "--inputs", inputs)
    assert run.exit_code == 0, run.stderr
    validate = invoke("validate", pte, rewritten, "--simulate-devices", "--inputs", inputs)
    assert validate.exit_code == 0, validate.stdout + validate.stderr
    # A rewrite written elsewhere has no sibling: --rewritten-ptd defaults to the original's data.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = elsewhere / "model.pte"
    assert invoke("rewrite", pte, "-o", out).exit_code == 0
    validate = invoke("validate", pte, out, "--simulate-devices", "--inputs", inputs)
    assert validate.exit_code == 0, validate.stdout + validate.stderr
    alone = invoke("run", out, "--simulate-devices", "--inputs", inputs)  # run has no original: it says how
    assert alone.exit_code == 2 and "pass it with --ptd" in alone.stderr
