"""What ``check`` and ``inspect`` say is copied on every call: the gate's findings apart from what stays, and why.

Before: on a rewritten file whose host-read constants were still copied on every call, both printed
"no constant is copied to a device on every call" and ``check`` exited 0 however strict one wanted it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest

from cli_runner import invoke, invoke_json
from conftest import CORPUS, FIXTURES, pte_path
from test_report_schema import SCHEMA_FILE, assert_valid

WIDE = {"COLUMNS": "200"}


@pytest.fixture
def rewritten(tmp_path: Path) -> Path:
    """v_c_shared_host_copy rewritten: its movable constant moved, value 0 (96 B, also read by aten::mul.out)
    still copied to cuda:0 on every call."""
    out = tmp_path / "shared.devconst.pte"
    assert invoke("rewrite", pte_path("v_c_shared_host_copy"), "-o", out).exit_code == 0
    return out


def test_check_passes_but_says_what_stays_copied_and_why(rewritten: Path) -> None:
    result = invoke("check", rewritten, env=WIDE)
    assert result.exit_code == 0, result.output
    assert "no constant is copied" not in result.stdout
    assert "nothing left that the rewrite can move" in result.stdout
    assert ("1 constant-derived value copied on every call that the rewrite cannot move in 1 file "
            "(96 B per call): read by host kernel aten::mul.out (--strict fails on them)") in " ".join(
        result.stdout.split())


def test_strict_fails_on_what_stays_and_lists_each_with_its_reason(rewritten: Path) -> None:
    result = invoke("check", rewritten, "--strict", env=WIDE)
    assert result.exit_code == 1
    assert re.search(r"forward\s+│\s+value 0\s+│\s+cuda:0\s+│\s+96 B\s+│\s+read by host kernel aten::mul.out",
                     result.stdout), result.stdout
    quiet = invoke("-q", "check", rewritten, "--strict")
    assert quiet.exit_code == 1
    assert quiet.stdout == (f"{rewritten}: forward: value 0 -> PDC002 cuda:0: 96 B per call: read by host kernel "
                            "aten::mul.out\n")
    assert invoke("-q", "check", rewritten).stdout == ""  # not strict: nothing fails, nothing printed
    code, doc = invoke_json("check", rewritten, "--strict")
    assert code == doc["exit_code"] == 1 and doc["strict"] and not doc["passed"]
    assert_valid(jsonschema.Draft202012Validator(json.loads(SCHEMA_FILE.read_text())), doc, "check")
    assert doc["findings"] == 0 and doc["stays"] == 1 and doc["stays_bytes_per_call"] == 96
    (entry,) = doc["files"]
    assert entry["status"] == "findings"
    assert entry["stays"] == [{"rule": "PDC002", "method": "forward", "value": 0, "name": "value 0", "device": "cuda:0",
                               "nbytes": 96, "copies_per_call": 1, "bytes_per_call": 96,
                               "reason": "read by host kernel aten::mul.out"}]


def test_strict_fails_on_a_weight_transposed_on_the_host(tmp_path: Path) -> None:
    """mm partitions transpose every linear weight on the host: copied every call, and no rewrite moves it."""
    source = FIXTURES / "real_models" / "gpt2_mm_copy.pte"
    out = tmp_path / "gpt2.pte"
    assert invoke("rewrite", source, "-o", out).exit_code == 0
    code, doc = invoke_json("check", out)
    assert code == 0 and doc["stays"] > 0
    assert all(s["reason"].startswith("transposed on the host from ") for s in doc["files"][0]["stays"])
    assert invoke("check", out, "--strict").exit_code == 1
    assert invoke("check", out, "--strict", "--min-bytes", "1000000").exit_code == 0  # the filters apply too


def test_strict_passes_where_nothing_constant_derived_is_copied(tmp_path: Path) -> None:
    out = tmp_path / "mlp.pte"
    model = CORPUS.parent.parent.parent / "examples" / "models" / "mlp_copy.pte"
    assert invoke("rewrite", model, "-o", out).exit_code == 0
    result = invoke("check", out, "--strict")
    assert result.exit_code == 0 and "no constant is copied to a device on every call" in result.stdout


def test_inspect_separates_what_can_move_from_what_stays(rewritten: Path) -> None:
    before = invoke("inspect", pte_path("v_c_shared_host_copy"), env=WIDE).stdout
    assert "1 constant could move to device memory, saving 96 B" in before
    assert "1 constant-derived value stays copied to a device on every call (96 B per call); the rewrite " \
           "cannot move them: read by host kernel aten::mul.out." in before
    after = invoke("inspect", rewritten, env=WIDE).stdout
    assert "No constant is copied" not in after and "could move" not in after
    assert "constant-derived copies on every call that the rewrite cannot move" in after
    code, doc = invoke_json("inspect", rewritten)
    assert [c["status"] for c in doc["file"]["methods"][0]["per_call_copies"]] == ["stays"]
    markdown = invoke("inspect", rewritten, "--format", "markdown").stdout
    assert "No constant is copied" not in markdown and "read by host kernel aten::mul.out" in markdown


def test_check_markdown_lists_what_stays(rewritten: Path) -> None:
    result = invoke("check", rewritten, pte_path("v_c_shared_host_copy"), "--format", "markdown")
    assert result.exit_code == 1
    assert "**PDC002 copy-stays** (note): 1 constant-derived value copied on every call that the rewrite cannot " \
        "move:" in result.stdout
    assert result.stdout.count("| read by host kernel aten::mul.out |") == 2


# --- --format github ------------------------------------------------------------------------------

def test_github_format_is_one_annotation_per_file_and_rule(rewritten: Path) -> None:
    copying = pte_path("v_c_shared_host_copy")
    result = invoke("check", copying, rewritten, "--format", "github")
    assert result.exit_code == 1  # exit codes do not change with the format
    lines = result.stdout.splitlines()
    assert lines[0] == (f"::error file={copying},title=pte-devconst PDC001 copied-every-call%3A 1 constant copied "
                        "to a device on every call::1 constant copied to a device on every call (96 B per call); the "
                        f"largest: forward: value 2, 96 B per call to cuda:0. Fix: pte-devconst rewrite --in-place "
                        f"{copying}.")
    # What stays without --strict fails nothing: a notice per file (rule PDC002 at its advisory level), after the
    # findings.
    annotations = [line for line in lines if line.startswith("::")]
    assert [line.split(" ", 1)[0] for line in annotations] == ["::error", "::notice", "::notice"]
    assert all("PDC002 copy-stays" in line for line in annotations[1:])
    assert not lines[-1].startswith("::")  # the summary, a plain log line
    strict = invoke("check", rewritten, "--format", "github", "--strict")
    assert strict.exit_code == 1 and strict.stdout.startswith(f"::error file={rewritten},")
    assert "read by host kernel aten::mul.out" in strict.stdout.splitlines()[0]
    assert invoke("check", rewritten, "--format", "github").exit_code == 0


def test_github_format_warns_on_unknown_and_errors_on_unreadable(tmp_path: Path) -> None:
    lone = tmp_path / "model.pte"
    lone.write_bytes(pte_path("v_g_external_copy").read_bytes())
    bad = tmp_path / "bad,name:1.pte"
    bad.write_bytes(b"no program here")
    result = invoke("check", lone, bad, "--format", "github")
    assert result.exit_code == 2
    warnings = [line for line in result.stdout.splitlines() if line.startswith("::warning ")]
    (warning,) = warnings  # one per file: its two constants not judged, with the totals
    assert "2 constants not judged" in warning
    assert "put model.ptd next to it or pass --ptd FILE.ptd" in warning
    (error,) = [line for line in result.stdout.splitlines() if line.startswith("::error ")]
    # ',' and ':' end a property, so a file name holding them is escaped there (%2C, %3A), not in the message
    assert error.startswith(f"::error file={str(bad).replace(':', '%3A').replace(',', '%2C')},title=")


def test_github_annotations_escape_what_would_start_a_command() -> None:
    from pte_devconst.cli.output import github_annotation

    line = github_annotation("error", "100% done\n::error::forged", file="a,b:c.pte", title="t: x")
    assert line == "::error file=a%2Cb%3Ac.pte,title=t%3A x::100%25 done\\x0a::error::forged"
    assert "\n" not in line


def test_strict_fails_on_external_constants_not_judged(tmp_path: Path) -> None:
    """Copied per call whether or not they could move: --strict fails (1), not 'unknown' (3)."""
    lone = tmp_path / "model.pte"
    lone.write_bytes(pte_path("v_g_external_copy").read_bytes())
    assert invoke("check", lone).exit_code == 3
    strict = invoke("check", lone, "--strict", "--format", "github")
    assert strict.exit_code == 1
    annotations = [line for line in strict.stdout.splitlines() if line.startswith("::")]
    assert [line.split(" ", 1)[0] for line in annotations] == ["::error", "::error"]  # not judged, and what stays
    assert "PDC003 not-judged" in annotations[0] and "PDC002 copy-stays" in annotations[1]
