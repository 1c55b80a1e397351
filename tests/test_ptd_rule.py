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
    assert rewrite.exit_code == 3 and "nothing to move" in rewrite.stdout  # not judged, as check says (issue 38)
    assert "no .ptd given; pass --ptd" in rewrite.stdout  # the 'left in place' reason says how
    code, doc = invoke_json("rewrite", pte, "--dry-run")
    assert all("pass --ptd" in n["verdict"] for n in doc["methods"][0]["not_moved"] if n["name"] != "b")


# --- one rule for missing external data: rewrite says what it could not judge, as check does (issue 38) ---------

@pytest.mark.parametrize("fmt", ["text", "concise", "markdown", "json"])
def test_rewrite_without_its_ptd_writes_nothing_and_exits_as_check_does(tmp_path: Path, fmt: str) -> None:
    """Was: exit 0 and an identical NAME.devconst.pte, where ``check`` exits 3: "nothing to move" was not known."""
    pte = _lone(tmp_path)
    before = sorted(p.name for p in pte.parent.iterdir())
    result = invoke("rewrite", pte, "--format", fmt, env={"COLUMNS": "300"})
    check = invoke("check", pte)
    assert result.exit_code == check.exit_code == 3, result.output
    assert sorted(p.name for p in pte.parent.iterdir()) == before  # no NAME.devconst.pte, no temporary
    if fmt == "json":
        doc = json.loads(result.stdout)
        assert doc["written"] is False and doc["changed"] is False
        assert sorted((c["name"], c["device"]) for c in doc["not_judged"]) == [("only_dev", "cuda:0"),
                                                                              ("w", "cuda:0")]
    else:
        shown = result.stdout.replace("\\", "")  # markdown escapes '_'
        assert "no file written" in shown.lower()
        assert "2 external constants not judged" in shown and "only_dev" in shown
        assert "model.ptd next to it or pass --ptd" in shown
    in_place = invoke("rewrite", pte, "--in-place")
    assert in_place.exit_code == 3 and pte.read_bytes() == (CORPUS / f"{NAME}.pte").read_bytes()


def test_rewrite_of_several_reports_the_missing_data_per_file(work_copy, tmp_path: Path) -> None:
    """The batch form: the program with its data is rewritten, the other is listed as not judged, exit 3."""
    lone = _lone(tmp_path)
    paired = work_copy(NAME)
    folder = lone.parent
    for suffix in (".pte", ".ptd"):
        shutil.copy(paired.with_suffix(suffix), folder / f"paired{suffix}")
    result = invoke("rewrite", folder, "--format", "concise")
    assert result.exit_code == 3, result.output
    lines = {line.split(":", 1)[0]: line for line in result.stdout.splitlines()}
    assert "no file written; 2 external constants not judged" in lines[str(folder / "model.pte")]
    assert "moved to device memory" in lines[str(folder / "paired.pte")]
    assert (folder / "paired.devconst.pte").exists() and not (folder / "model.devconst.pte").exists()
    code, doc = invoke_json("rewrite", folder, "--dry-run")
    assert code == 3
    by_name = {Path(r["input"]).name: r for r in doc["results"]}
    assert len(by_name["model.pte"]["not_judged"]) == 2 and by_name["paired.pte"]["not_judged"] == []
    changed = invoke("rewrite", folder, "--dry-run", "--exit-non-zero-on-change")
    assert changed.exit_code == 1  # a change the hook must re-stage outranks what could not be judged


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
