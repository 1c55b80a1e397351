"""The Python API: plain functions returning the objects the command line renders; no torch until validate."""

from __future__ import annotations

import inspect as pyinspect
import json
import subprocess
import sys
from pathlib import Path

import pytest

import pte_devconst
from cli_runner import invoke_json
from conftest import CASES, pte_path, ptd_path
from pte_devconst import CheckReport, analyze, check, diff, rewrite, validate
from pte_devconst.util.jsonable import to_jsonable
from pte_devconst.compare.diff import ProgramDiff
from pte_devconst.inventory.summary import ProgramSummary
from pte_devconst.rewriter.rewrite import RewriteResult
from pte_devconst.util.errors import PteDevconstError

API = ("analyze", "inspect", "rewrite", "diff", "check", "run", "validate")


def test_import_is_light_and_never_imports_torch() -> None:
    code = ("import sys, pte_devconst; assert 'pte_devconst.rewriter' not in sys.modules; "
            "from pte_devconst import analyze, rewrite, diff, check; "
            f"analyze({str(pte_path('v_a_dtypes_copy'))!r}); check([{str(pte_path('v_h_cpu_only'))!r}]); "
            "print('torch' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


@pytest.mark.parametrize("name", API)
def test_api_functions_are_typed_and_documented(name: str) -> None:
    function = getattr(pte_devconst, name)
    assert function.__doc__ and len(function.__doc__.split()) > 5
    signature = pyinspect.signature(function)
    assert signature.return_annotation is not pyinspect.Signature.empty
    assert all(p.annotation is not pyinspect.Parameter.empty for p in signature.parameters.values())
    assert name in pte_devconst.__all__ and name in dir(pte_devconst)


PUBLIC_TYPES = {
    "ProgramSummary": "pte_devconst.inventory.summary", "InspectReport": "pte_devconst.api",
    "RewriteResult": "pte_devconst.rewriter.rewrite", "ProgramDiff": "pte_devconst.compare.diff",
    "CheckReport": "pte_devconst.gate.check", "FileCheck": "pte_devconst.gate.check",
    "Finding": "pte_devconst.gate.check", "PteDevconstError": "pte_devconst.util.errors",
    "FormatError": "pte_devconst.util.errors", "UnsupportedProgramError": "pte_devconst.util.errors",
    "OutputError": "pte_devconst.util.errors", "InternalError": "pte_devconst.util.errors",
}


def test_the_errors_and_records_import_from_the_package(tmp_path: Path) -> None:
    """``from pte_devconst import PteDevconstError`` (issue 28: it failed; the errors lived in pte_devconst.util.errors,
    which no document named), each record a function returns, and ``import *`` without loading torch."""
    for name, home in PUBLIC_TYPES.items():
        assert name in pte_devconst.__all__ and name in dir(pte_devconst)
        assert getattr(pte_devconst, name).__module__ == home
    assert issubclass(pte_devconst.FormatError, pte_devconst.PteDevconstError)
    assert not issubclass(pte_devconst.InternalError, pte_devconst.PteDevconstError)  # a bug, never the user's fault
    bad = tmp_path / "bad.pte"
    bad.write_bytes(b"not a program")
    with pytest.raises(pte_devconst.PteDevconstError):
        pte_devconst.analyze(bad)
    code = ("import sys; from pte_devconst import *; "
            "assert issubclass(FormatError, PteDevconstError) and RewriteResult and ProgramDiff; "
            "from pte_devconst import RunResult, ValidationResult; print('torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "True"  # the runner's records load torch, only when named


def test_unknown_attribute_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError):
        pte_devconst.not_a_function  # noqa: B018


def test_analyze_returns_what_inspect_renders() -> None:
    summary = analyze(pte_path("v_c_shared_host_copy"))
    assert isinstance(summary, ProgramSummary)
    _, document = invoke_json("inspect", pte_path("v_c_shared_host_copy"))
    assert to_jsonable(summary) == document["file"]
    verdicts = {c.value: c.verdict for c in summary.methods[0].constants}
    assert verdicts[2] == "eligible:cuda:0" and verdicts[0].startswith("not eligible")


def test_rewrite_diff_check_from_an_export_script(work_copy, tmp_path: Path) -> None:
    pte = work_copy("v_j_cond_copy")
    before = check([pte])
    assert isinstance(before, CheckReport) and before.exit_code == 1 and not before.passed
    assert [(f.method, f.value, f.device) for f in before.findings] == [("forward", 0, "cuda:0")]

    planned = rewrite(pte, dry_run=True)
    assert isinstance(planned, RewriteResult) and planned.output is None and planned.changed
    result = rewrite(pte, tmp_path / "out.pte")
    assert result.output == str(tmp_path / "out.pte") and result.plan.bytes_per_call_saved > 0
    _, document = invoke_json("rewrite", pte, "-o", tmp_path / "cli.pte")
    payload = json.loads(json.dumps(result.to_json()))
    assert {k: v for k, v in payload.items() if k != "output"} == \
        {k: v for k, v in document.items() if k not in ("output", "format_version", "command", "tool_version")}

    changes = diff(pte, result.output)
    assert isinstance(changes, ProgramDiff) and changes.moved_constants == 1 and not changes.identical
    assert diff(pte, pte).identical
    after = check([result.output])
    assert after.passed and after.exit_code == 0


def test_rewrite_options_and_errors(work_copy, tmp_path: Path) -> None:
    pte = work_copy("v_e_two_devices_legacy")
    only_one = rewrite(pte, dry_run=True, devices=["cuda:1"])
    assert {str(p.device) for p in only_one.plan.placements} == {"cuda:1"}
    assert rewrite(pte, dry_run=True, min_bytes=1 << 20).changed is False
    with pytest.raises(PteDevconstError):
        rewrite(pte, dry_run=True, devices=["cpu"])
    with pytest.raises(PteDevconstError):
        analyze(tmp_path / "missing.pte")
    with pytest.raises(PteDevconstError):
        rewrite(pte, tmp_path / "x.pte", in_place=True)


def test_check_reports_bad_files_instead_of_raising(tmp_path: Path) -> None:
    junk = tmp_path / "junk.pte"
    junk.write_bytes(b"junk" * 64)
    report = check([junk, pte_path("v_h_cpu_only")])
    assert report.exit_code == 2 and [f.status for f in report.files] == ["error", "ok"]
    assert "junk.pte" in report.files[0].error


def test_validate_delegates_to_the_runner(work_copy) -> None:
    pytest.importorskip("torch")
    pte = work_copy("v_k_cuda1_legacy")
    out = rewrite(pte).output
    result = validate(pte, out, simulate_devices=True)
    from pte_devconst.runner.validate import ValidationResult

    assert isinstance(result, ValidationResult) and result.passed
    assert sum(len(m.moved) for m in result.methods) == 2


FOLD_FIXTURES = Path(__file__).resolve().parent / "fixtures" / "fold"


def _moves(result: RewriteResult) -> list[tuple[str, int]]:
    plan = result.plan
    return sorted([(p.method, p.value) for p in plan.placements] + [(f.method, f.value) for f in plan.folds])


@pytest.mark.parametrize("path", [pte_path(name) for name in CASES] + sorted(FOLD_FIXTURES.glob("*.pte")),
                         ids=lambda p: p.stem)
def test_check_reports_exactly_what_rewrite_would_move(path: Path) -> None:
    """One rule decides what can move: check's findings are the rewrite plan's placements (and folds), with
    every selection option, so a program check passes is one rewrite leaves as it is, and the reverse."""
    data = ptd_path(path.stem) if path.parent == pte_path(path.stem).parent else None
    first = rewrite(path, ptd=data, dry_run=True)
    smallest = min((p.nbytes for p in first.plan.placements), default=0)
    for options in ({}, {"fold": True}, {"min_bytes": smallest + 1}, {"devices": ["cuda:1"]},
                    {"devices": ["cuda:0"], "fold": True}):
        try:
            planned = rewrite(path, ptd=data, dry_run=True, **options)
        except PteDevconstError:  # e.g. a fold that needs data it refuses: check reports the same file as an error
            assert check([path], ptd=data, **options).exit_code == 2
            continue
        report = check([path], ptd=data, **options)
        (file,) = report.files
        assert file.error is None, file.error
        assert sorted((f.method, f.value) for f in file.findings) == _moves(planned), options
        assert file.bytes_per_call == planned.plan.bytes_per_call_saved, options


def test_every_command_prints_its_results_own_json(tmp_path: Path) -> None:
    """The CLI renders the API: each command's JSON is its result's ``to_json()`` inside the envelope."""
    from pte_devconst import inspect

    pte = pte_path("v_g_external_copy")
    data = ptd_path("v_g_external_copy")
    envelope = ("format_version", "command", "tool_version")
    _, document = invoke_json("inspect", pte)
    assert {k: v for k, v in document.items() if k not in envelope} == json.loads(json.dumps(inspect(pte).to_json()))
    assert inspect(pte).ptd == str(data)  # the .ptd rule: NAME.ptd next to NAME.pte
    _, document = invoke_json("check", pte)
    assert {k: v for k, v in document.items() if k not in envelope} == check([pte]).to_json()
    out = rewrite(pte, tmp_path / "out.pte").output
    _, document = invoke_json("diff", pte, out)
    assert {k: v for k, v in document.items() if k not in envelope} == json.loads(json.dumps(diff(pte, out).to_json()))
