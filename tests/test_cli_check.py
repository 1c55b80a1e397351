"""``pte-devconst check``: the CI gate's exit codes, listings, patterns, .ptd pairing and formats."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pte_devconst import api
from cli_runner import invoke, invoke_json, rendered
from conftest import CASES, CORPUS, facts, pte_path


def _expected_findings(stem: str) -> set[tuple[str, int, str, int]]:
    """(method, value, device, nbytes) of every constant the corpus facts call eligible."""
    return {(method, c["value"], c["verdict"].split(":", 1)[1], c["nbytes"])
            for method, body in facts(stem)["methods"].items() for c in body["constants"]
            if c["verdict"].startswith("eligible:")}


def test_clean_program_exits_0(tmp_path: Path) -> None:
    result = invoke("check", pte_path("v_h_cpu_only"))
    assert result.exit_code == 0, result.output
    assert "no constant is copied to a device on every call" in result.stdout


def test_findings_exit_1_and_list_file_method_constant_bytes() -> None:
    result = invoke("check", pte_path("v_c_shared_host_copy"))
    assert result.exit_code == 1
    # v2 `b` (96 bytes) is the one eligible constant; w and gain are also read on the host.
    assert "v_c_shared_host_copy.pte" in result.stdout
    assert "forward" in result.stdout and "value 2" in result.stdout and "96 B" in result.stdout
    copied = result.stdout.split("PDC002")[0]  # the findings' table; value 0 stays (its own rule's line)
    assert "PDC001 copied-every-call" in copied and "value 0" not in copied


def test_every_corpus_finding_matches_the_eligible_verdicts() -> None:
    code, doc = invoke_json("check", *(CORPUS / f"{name}.pte" for name in CASES))
    assert code == 1 and doc["exit_code"] == 1
    by_file = {Path(f["file"]).stem: f for f in doc["files"]}
    assert set(by_file) == set(CASES)
    for stem, entry in by_file.items():
        listed = {(x["method"], x["value"], x["device"], x["nbytes"]) for x in entry["findings"]}
        assert listed == _expected_findings(stem), stem
        assert entry["bytes_per_call"] == sum(x["bytes_per_call"] for x in entry["findings"])


def test_after_rewrite_check_passes(work_copy) -> None:
    pte = work_copy("v_f_multi_method_legacy")
    assert invoke("check", pte).exit_code == 1
    assert invoke("rewrite", pte).exit_code == 0
    result = invoke("check", pte.with_name("v_f_multi_method_legacy.devconst.pte"))
    assert result.exit_code == 0, result.output


def test_unreadable_file_is_an_error_but_every_file_is_reported(tmp_path: Path) -> None:
    bad = tmp_path / "bad.pte"
    bad.write_bytes(b"not a program at all, just some bytes" * 4)
    code, doc = invoke_json("check", pte_path("v_h_cpu_only"), bad, tmp_path / "missing.pte",
                            pte_path("v_a_dtypes_copy"))
    assert code == 2 and doc["exit_code"] == 2 and not doc["passed"]
    statuses = [(Path(f["file"]).name, f["status"]) for f in doc["files"]]
    assert statuses == [("v_h_cpu_only.pte", "ok"), ("bad.pte", "error"), ("missing.pte", "error"),
                        ("v_a_dtypes_copy.pte", "findings")]
    result = invoke("check", bad, pte_path("v_h_cpu_only"))
    assert result.exit_code == 2
    errors = [line for line in result.stderr.splitlines() if line]
    assert len(errors) == 1 and errors[0].startswith("pte-devconst: error: ") and "bad.pte" in errors[0]
    assert "Traceback" not in result.output


def test_patterns_are_expanded_when_the_shell_did_not(tmp_path: Path) -> None:
    for name in ("v_h_cpu_only", "v_h_xnnpack", "v_a_dtypes_copy"):
        shutil.copy(pte_path(name), tmp_path / f"{name}.pte")
    (tmp_path / "sub").mkdir()
    shutil.copy(pte_path("v_k_cuda1_copy"), tmp_path / "sub" / "k.pte")
    code, doc = invoke_json("check", str(tmp_path / "v_h_*.pte"))
    assert code == 0 and [Path(f["file"]).name for f in doc["files"]] == ["v_h_cpu_only.pte", "v_h_xnnpack.pte"]
    code, doc = invoke_json("check", str(tmp_path / "**" / "*.pte"))
    assert code == 1 and {Path(f["file"]).name for f in doc["files"]} == {
        "v_h_cpu_only.pte", "v_h_xnnpack.pte", "v_a_dtypes_copy.pte", "k.pte"}
    code, doc = invoke_json("check", tmp_path)  # a directory: every .pte below it
    assert code == 1 and len(doc["files"]) == 4
    code, doc = invoke_json("check", str(tmp_path / "nothing_*.pte"))
    assert code == 2 and "no file matches" in doc["files"][0]["error"]


def test_external_constants_need_their_ptd(tmp_path: Path, work_copy) -> None:
    pte = work_copy("v_g_external_legacy")
    # Next to the program, NAME.ptd is found on its own.
    code, doc = invoke_json("check", pte)
    assert code == 1 and doc["files"][0]["ptd"].endswith("v_g_external_legacy.ptd")
    assert {x["name"] for x in doc["files"][0]["findings"]} == {"w", "only_dev"}
    # Elsewhere, --ptd names it; without it the constants are unknown (exit 3), never clean.
    lone = tmp_path / "lone"
    lone.mkdir()
    shutil.copy(pte, lone / "model.pte")
    code, doc = invoke_json("check", lone / "model.pte")
    assert code == 3 and doc["exit_code"] == 3 and not doc["passed"] and doc["unknown"] == 2
    entry = doc["files"][0]
    assert entry["status"] == "unknown" and entry["ptd"] is None and not entry["findings"]
    assert {(x["name"], x["device"]) for x in entry["unknown"]} == {("w", "cuda:0"), ("only_dev", "cuda:0")}
    assert "pass --ptd" in entry["note"] and "model.ptd" in entry["note"]
    text = invoke("check", lone / "model.pte")
    assert text.exit_code == 3 and "not judged" in text.stdout and "--ptd" in text.stdout
    code, doc = invoke_json("check", lone / "model.pte", "--ptd", pte.with_suffix(".ptd"))
    assert code == 1 and len(doc["files"][0]["findings"]) == 2 and not doc["files"][0]["unknown"]
    # A --ptd that belongs to none of several programs is reported, not ignored.
    code, doc = invoke_json("check", lone / "model.pte", pte_path("v_h_cpu_only"), "--ptd", pte.with_suffix(".ptd"))
    assert code == 2 and "matches no program" in doc["files"][-1]["error"]


def test_ptd_pairs_by_path_not_by_stem(tmp_path: Path) -> None:
    """Two programs named model.pte in two folders: a/model.ptd judges a/model.pte only (was: both, by stem)."""
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        shutil.copy(pte_path("v_g_external_legacy"), tmp_path / folder / "model.pte")
    data = tmp_path / "data.ptd"  # not next to either program
    shutil.copy(CORPUS / "v_g_external_legacy.ptd", data)
    a, b = tmp_path / "a" / "model.pte", tmp_path / "b" / "model.pte"
    shutil.copy(data, tmp_path / "a" / "model.ptd")
    code, doc = invoke_json("check", a, b, "--ptd", tmp_path / "a" / "model.ptd")
    by_file = {f["file"]: f for f in doc["files"]}
    assert by_file[str(a)]["ptd"] == str(tmp_path / "a" / "model.ptd") and len(by_file[str(a)]["findings"]) == 2
    assert by_file[str(b)]["ptd"] is None and by_file[str(b)]["status"] == "unknown"  # b is not judged with a's data
    assert code == 1 and len(doc["files"]) == 2
    # Explicit pairs: PROGRAM=DATA, for data that sits anywhere.
    code, doc = invoke_json("check", a, b, "--ptd", f"{b}={data}")
    by_file = {f["file"]: f for f in doc["files"]}
    assert by_file[str(b)]["ptd"] == str(data) and by_file[str(a)]["ptd"] == str(tmp_path / "a" / "model.ptd")
    assert all(len(f["findings"]) == 2 for f in doc["files"])
    # A data file that pairs with nothing, or twice with one program, is an error, not a guess.
    code, doc = invoke_json("check", a, b, "--ptd", data)
    assert code == 2 and "matches no program" in doc["files"][-1]["error"]
    code, doc = invoke_json("check", a, "--ptd", f"{a}={data}", "--ptd", tmp_path / "a" / "model.ptd")
    assert code == 2 and "already has" in doc["files"][-1]["error"]


def test_check_expands_symlink_loops_once_per_real_file(tmp_path: Path) -> None:
    """``check 'tree/**/*.pte'`` over folders that link back to their parents ends, and checks each file once."""
    tree = tmp_path / "tree"
    (tree / "a" / "b").mkdir(parents=True)
    shutil.copy(pte_path("v_h_cpu_only"), tree / "a" / "m.pte")
    shutil.copy(pte_path("v_c_shared_host_copy"), tree / "a" / "b" / "n.pte")
    (tree / "a" / "b" / "up").symlink_to("../..")  # a loop: tree/a/b/up/a/b/up/...
    (tree / "a" / "again").symlink_to(tree / "a")
    (tree / "alias.pte").symlink_to(tree / "a" / "m.pte")  # the same file under another name
    # In a child process with a time limit: the expansion used to run away (exponentially many paths).
    done = subprocess.run([sys.executable, "-m", "pte_devconst", "check", str(tree / "**" / "*.pte"), "--json"],
                          capture_output=True, text=True, timeout=60)
    doc = json.loads(done.stdout)
    names = sorted(Path(f["file"]).name for f in doc["files"])
    assert names == ["m.pte", "n.pte"] and done.returncode == 1  # n.pte has a finding; m.pte (and its alias) once
    code, doc = invoke_json("check", tree)  # a directory: the same walk
    assert sorted(Path(f["file"]).name for f in doc["files"]) == ["m.pte", "n.pte"]
    code, doc = invoke_json("check", str(tree / "*" / "*.pte"))  # one level: no recursion at all
    assert sorted(Path(f["file"]).name for f in doc["files"]) == ["m.pte"]
    code, doc = invoke_json("check", tree / "a" / "m.pte", tree / "alias.pte")  # two names, one file
    assert len(doc["files"]) == 1


def test_glob_skips_data_files(work_copy) -> None:
    pte = work_copy("v_g_external_copy")
    code, doc = invoke_json("check", str(pte.parent / "v_g_external_copy.*"))
    assert code == 1 and [Path(f["file"]).name for f in doc["files"]] == ["v_g_external_copy.pte"]


def test_min_bytes_and_device_filters() -> None:
    pte = pte_path("v_e_two_devices_copy")  # w0 -> cuda:0, w1 -> cuda:1, 64 B each
    assert invoke("check", pte, "--min-bytes", "65").exit_code == 0
    code, doc = invoke_json("check", pte, "--device", "cuda:1")
    assert code == 1 and [x["device"] for x in doc["files"][0]["findings"]] == ["cuda:1"]
    bad = invoke("check", pte, "--device", "cpu")
    assert bad.exit_code == 2 and "non-CPU" in bad.stderr
    assert invoke("check", pte, "--min-bytes", "-1").exit_code == 2


def test_markdown_is_a_pull_request_summary() -> None:
    result = invoke("check", pte_path("v_c_shared_host_copy"), pte_path("v_h_cpu_only"), "--format", "markdown")
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    assert lines[0].startswith("### ") and "check" in lines[0]
    # The summary first: one row per file, numbers right-aligned, then each file's details, collapsed.
    header = lines.index("| file | status | still copied | bytes/call | cannot move | accepted | fold gain "
                         "| device memory now | after a rewrite |")
    assert lines[header + 1] == "|---|---|---:|---:|---:|---:|---:|---:|---:|"
    html = rendered(result.stdout)
    assert f"<td><code>{pte_path('v_c_shared_host_copy')}</code></td>\n<td>❌ PDC001 copied-every-call</td>" in html
    assert f"<td><code>{pte_path('v_h_cpu_only')}</code></td>\n<td>✅ ok</td>" in html
    assert lines[header + 2].endswith("| 288 B | 384 B |") and lines[header + 3].endswith("| - | - |")
    details = lines.index("| method | value | device | bytes/call |")
    assert details > header
    assert lines[details + 2] == "| <code>forward</code> | <code>value 2</code> | <code>cuda:0</code> | 96 B |"
    assert result.stdout.index("<details><summary>") > result.stdout.index("| file | status |")
    ok = invoke("check", pte_path("v_h_cpu_only"), "-f", "markdown")
    assert ok.exit_code == 0 and "✅" in ok.stdout.splitlines()[0]


def test_quiet_prints_one_line_per_finding_and_nothing_when_clean() -> None:
    result = invoke("--quiet", "check", pte_path("v_e_two_devices_legacy"))
    assert result.exit_code == 1
    assert result.stdout.splitlines() == [
        f"{pte_path('v_e_two_devices_legacy')}: forward: value 1 -> PDC001 cuda:0: 64 B per call",
        f"{pte_path('v_e_two_devices_legacy')}: forward: value 2 -> PDC001 cuda:1: 64 B per call",
    ]
    clean = invoke("-q", "check", pte_path("v_h_cpu_only"))
    assert clean.exit_code == 0 and clean.stdout == ""


def test_verbose_lists_clean_files_too() -> None:
    result = invoke("--verbose", "check", pte_path("v_h_cpu_only"), pte_path("v_h_xnnpack"))
    assert result.exit_code == 0
    assert "ok  " in result.stdout and "v_h_xnnpack.pte (1 constant examined)" in result.stdout


def test_report_lines_do_not_wrap_in_a_narrow_terminal() -> None:
    """A CI log is often 80 columns and paths are long: each file's line must stay whole for grep."""
    files = (pte_path("v_h_cpu_only"), pte_path("v_e_two_devices_legacy"))
    result = invoke("--verbose", "check", *files, env={"COLUMNS": "40"})
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    assert f"ok  {files[0]} (3 constants examined)" in lines
    assert any(line.startswith(f"{files[1]}: PDC001 copied-every-call: 2 constants copied") for line in lines), \
        result.stdout


@pytest.mark.parametrize("args", [(), ("--format", "yaml")])
def test_usage_errors_exit_2(args: tuple[str, ...]) -> None:
    assert invoke("check", *args).exit_code == 2


# --- the gate never says "clean" when it is not (issue 19, item 2) ----------------------------------------

FORMATS = ["text", "markdown", "json", "github"]


@pytest.mark.parametrize("fmt", FORMATS)
def test_min_bytes_that_filters_every_finding_says_what_it_left_out(fmt: str) -> None:
    """Was: "no constant is copied to a device on every call", exit 0, with every copy filtered out."""
    pte = pte_path("v_c_shared_host_copy")  # v2 moves (96 B), v0 stays copied (96 B): 192 B per call
    _, whole = invoke_json("check", pte)
    copied = whole["bytes_per_call"] + whole["stays_bytes_per_call"]
    assert copied == 192
    result = invoke("check", pte, "--min-bytes", "100000", "--format", fmt)
    assert result.exit_code == 0, result.output
    assert "no constant is copied" not in result.stdout
    if fmt == "json":
        doc = json.loads(result.stdout)
        assert doc["filtered"] == 2 and doc["filtered_bytes_per_call"] == copied
        assert {f["reason"] for f in doc["files"][0]["filtered"]} == {"96 bytes is below --min-bytes 100000"}
    else:
        assert "left out by --min-bytes 100000" in result.stdout and "192 B per call" in result.stdout, result.stdout
    quiet = invoke("-q", "check", pte, "--min-bytes", "100000")
    assert quiet.exit_code == 0 and quiet.stdout.count("PDC006 cuda:0: 96 B per call: 96 bytes is below --min-bytes "
                                                       "100000") == 2


def test_a_device_filter_reports_what_it_left_out() -> None:
    pte = pte_path("v_e_two_devices_copy")  # w1 -> cuda:0, w2 -> cuda:1, 64 B each; w0 copied to both, stays
    code, doc = invoke_json("check", pte, "--device", "cuda:1")
    filtered = doc["files"][0]["filtered"]
    # Each per-call copy to cuda:0 (w1, and w0's copy there, which stays): the copy of w0 to cuda:1 is judged,
    # its copy to cuda:0 is left out all the same (it was lost, matched by value alone).
    assert code == 1 and sorted((f["value"], f["device"]) for f in filtered) == [(0, "cuda:0"), (1, "cuda:0")]
    assert {f["reason"] for f in filtered} == {"device cuda:0 not selected (--device)"}
    assert doc["devices"] == ["cuda:1"] and doc["device_problems"] == [] and doc["warnings"] == []


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("strict", [False, True], ids=["plain", "strict"])
def test_a_device_no_program_uses_is_an_error(fmt: str, strict: bool) -> None:
    """Was: --device cuda:7 on a cuda:0 program (a typo in CI) passed, also with --strict.  A bad option value:
    one line on stderr, exit 2, and no report in any format (issue 38)."""
    pte = pte_path("v_c_shared_host_copy")
    result = invoke("check", pte, "--device", "cuda:7", "--format", fmt, *(["--strict"] if strict else []))
    assert result.exit_code == 2, result.output
    assert result.stderr.splitlines() == ["pte-devconst: error: --device cuda:7: no program checked uses this device "
                                          "(they use cuda:0): nothing was judged for it"]
    assert result.stdout == ""
    report = api.check([pte], devices=["cuda:7"])  # the API still reports it, with its rule
    assert report.device_problems and report.exit_code == 2


def test_a_file_that_uses_none_of_the_devices_is_a_warning() -> None:
    """Another file uses the device, so the selection is no typo; the file that does not is named."""
    zero, one = pte_path("v_c_shared_host_copy"), pte_path("v_k_cuda1_copy")
    result = invoke("check", zero, one, "--device", "cuda:1")
    assert result.exit_code == 1, result.output  # v_k_cuda1_copy's findings
    assert f"pte-devconst: warning: {zero}: uses none of the devices selected (--device cuda:1); it uses cuda:0" \
        in result.stderr
    assert str(one) not in result.stderr
    assert invoke("-q", "check", zero, one, "--device", "cuda:1").stderr == ""


def test_one_check_writes_its_other_reports_to_files(tmp_path: Path) -> None:
    """``--report FORMAT=FILE``: the CI gate checks once (issue 28: it ran check twice) and keeps the markdown
    summary, the SARIF and the JSON beside the annotations; each file is what ``--format`` prints, UTF-8."""
    programs = [pte_path("v_c_shared_host_copy"), pte_path("v_h_cpu_only")]
    files = {fmt: tmp_path / f"out {fmt}.txt" for fmt in ("markdown", "sarif", "json")}
    result = invoke("check", *programs, "--format", "github", *(f for fmt, path in files.items()
                                                                 for f in ("--report", f"{fmt}={path}")))
    assert result.exit_code == 1 and result.stdout.startswith("::error file=")
    for fmt, path in files.items():
        alone = invoke("check", *programs, "--format", fmt)
        assert path.read_bytes() == alone.stdout.encode("utf-8"), fmt
    assert "❌" in files["markdown"].read_text(encoding="utf-8")
    assert json.loads(files["json"].read_text())["exit_code"] == 1


@pytest.mark.parametrize("entry, why", [("text=out.txt", "FORMAT one of markdown, json, sarif"),
                                        ("markdown", "expected FORMAT=FILE"), ("sarif=", "expected FORMAT=FILE"),
                                        ("json={folder}", "not a regular file")])
def test_a_report_file_that_cannot_be_written_is_refused_before_checking(tmp_path: Path, entry: str,
                                                                          why: str) -> None:
    result = invoke("check", pte_path("v_h_cpu_only"), "--report", entry.format(folder=tmp_path))
    assert result.exit_code == 2 and why in result.stderr and result.stdout == ""
