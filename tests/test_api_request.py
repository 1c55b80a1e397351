"""One request, one plan: a command resolves its options once, pairs each program with its data once, makes its
plan once, and the API is a facade over the rewriter's gate (issue 21, items 3, 4 and 6)."""

from __future__ import annotations

import ast
import inspect
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from cli_runner import invoke, invoke_json
from conftest import FIXTURES, pte_path
from test_layers import FOLDERS

ROOT = Path(__file__).resolve().parents[1]
FOLDS = FIXTURES / "fold" / "both_copy.pte"  # has chains a fold would move: the fold hint needs its plan
PLAIN = ROOT / "examples" / "models" / "transformer_copy.pte"  # nothing to fold: no fold plan at all
NAMES = FIXTURES / "names"
PLAN_USERS = ("pte_devconst.api", "pte_devconst.gate.check", "pte_devconst.rewriter.rewrite",
              "pte_devconst.rewriter.plan")


def _count_plans(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Count ``make_plan`` calls, wherever a module took it by name: ``plain`` and ``fold`` plans apart."""
    import importlib

    from pte_devconst.rewriter import plan as plan_module

    original = plan_module.make_plan
    made: Counter[str] = Counter()

    def counting(program: Any, analysis: Any, options: Any = plan_module.RewriteOptions(), *rest: Any) -> Any:
        made["fold" if options.fold else "plain"] += 1
        return original(program, analysis, options, *rest)

    for name in PLAN_USERS:
        module = importlib.import_module(name)
        if getattr(module, "make_plan", None) is original:
            monkeypatch.setattr(module, "make_plan", counting)
    return made


@pytest.mark.parametrize("args, fold_plans", [
    (["inspect", FOLDS], 1),  # the plain plan, and the folded one for the hint
    (["inspect", PLAIN], 0),  # nothing folds: no folded plan
    (["check", FOLDS], 1),
    (["check", FOLDS, "--device", "cuda:0"], 1),  # what --device leaves out is read from the same plan
    (["check", FOLDS, "--min-bytes", "64"], 1),
    (["check", PLAIN, "--device", "cuda:0", "--min-bytes", "1"], 0),
    (["rewrite", FOLDS, "--dry-run"], 1),
    (["rewrite", PLAIN, "--dry-run"], 0),
    (["rewrite", PLAIN, "--dry-run", "--etrecord", NAMES / "mixed.etrecord"], 0),
    (["rewrite", NAMES / "mixed.pte", "--dry-run", "--etrecord", NAMES / "mixed.etrecord"], None),
])
def test_every_command_makes_its_plan_once(args: list[Any], fold_plans: int | None,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """One plain plan per program; a folded plan only for the fold hint, and only when something could fold.
    (``check --device`` made a second plain plan to find what the option left out; ``rewrite --etrecord`` made a
    second one over the named program.)"""
    made = _count_plans(monkeypatch)
    result = invoke(*args, "--isolated") if args[0] != "inspect" else invoke(*args)
    assert result.exit_code in (0, 1), result.stderr
    assert made["plain"] == 1, made
    assert made["fold"] == fold_plans if fold_plans is not None else made["fold"] <= 1, made


@pytest.mark.parametrize("args", [["check", FOLDS, "--fold"], ["rewrite", FOLDS, "--fold", "--dry-run"]])
def test_a_fold_makes_only_the_folded_plan(args: list[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    made = _count_plans(monkeypatch)
    result = invoke(*args, "--isolated")
    assert result.exit_code in (0, 1), result.stderr
    assert made == Counter({"fold": 1}), made


def test_what_device_selection_leaves_out_is_the_second_plans_difference(monkeypatch: pytest.MonkeyPatch) -> None:
    """From one plan, ``filtered`` is what a check without the options would add: its findings and copies."""
    _, everything = invoke_json("check", FOLDS, "--isolated")
    _, selected = invoke_json("check", FOLDS, "--isolated", "--min-bytes", str(10**9))
    whole, part = everything["files"][0], selected["files"][0]
    keys = {(f["method"], f["value"]) for kind in ("findings", "unknown", "stays") for f in whole[kind]}
    assert keys and {(f["method"], f["value"]) for f in part["filtered"]} == keys
    assert all("below --min-bytes" in f["reason"] for f in part["filtered"])
    assert not part["findings"] and not part["stays"]


def test_the_data_of_a_program_is_looked_up_once(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """``programs`` pairs each program with its .ptd; the API takes the answer as it is (it looked again)."""
    from pte_devconst import paths

    original = paths.sibling_ptd
    asked: list[str] = []

    def counting(pte: Any) -> Any:
        asked.append(str(pte))
        return original(pte)

    monkeypatch.setattr(paths, "sibling_ptd", counting)
    # with its .ptd next to it, and without one (where "no data" was taken for "not looked up yet")
    for program in (pte_path("v_g_external_copy"), pte_path("v_a_dtypes_copy")):
        for args in (["inspect", program], ["rewrite", program, "--dry-run", "--isolated"]):
            asked.clear()
            result = invoke(*args)
            assert result.exit_code == 0, result.stderr
            assert asked == [str(program)], (args, asked)


def test_devices_are_parsed_once_per_command(monkeypatch: pytest.MonkeyPatch) -> None:
    """The command line parses --device once into the plan's options; the API took them apart again per program."""
    from pte_devconst import api

    original = api.parse_devices
    parsed: list[Any] = []

    def counting(devices: Any, option: str = "devices") -> Any:
        parsed.append(list(devices) if devices is not None else None)
        return original(devices, option)

    monkeypatch.setattr(api, "parse_devices", counting)
    programs = [pte_path("v_a_dtypes_copy"), pte_path("v_f_multi_method_copy")]
    result = invoke("rewrite", *programs, "--dry-run", "--device", "cuda:0", "--isolated")
    assert result.exit_code == 0, result.stderr
    assert parsed == [["cuda:0"]]


def test_the_verify_mode_is_one_enum_from_the_option_to_the_result(tmp_path: Path) -> None:
    from pte_devconst import api
    from pte_devconst.cli import rewrite_cmd
    from pte_devconst.rewriter.request import VerifyMode

    assert rewrite_cmd.VerifyMode is VerifyMode  # the option's type is the request's
    result = api.rewrite(pte_path("v_a_dtypes_copy"), tmp_path / "out.pte", verify="full")
    assert result.verified is VerifyMode.FULL
    assert api.rewrite_request(pte_path("v_a_dtypes_copy"), verify=None).verify in tuple(VerifyMode)
    with pytest.raises(api.PteDevconstError, match="verify must be one of sampled, full"):
        api.rewrite_request(pte_path("v_a_dtypes_copy"), verify="every")


def test_the_destination_is_decided_once_in_the_request(tmp_path: Path) -> None:
    from pte_devconst import api

    program = pte_path("v_a_dtypes_copy")
    assert api.rewrite_request(program).destination == program.with_name(f"{program.stem}.devconst.pte")
    assert api.rewrite_request(program, in_place=True).destination == program
    assert api.rewrite_request(program, dry_run=True).destination is None
    assert api.rewrite_request(program.read_bytes()).destination is None
    with pytest.raises(api.PteDevconstError, match="in memory"):
        api.rewrite_request(program.read_bytes(), tmp_path / "o.pte")


def test_checks_model_lives_in_the_gate_and_the_api_re_exports_it() -> None:
    from pte_devconst import api
    from pte_devconst.gate import check as gate

    for name in ("Finding", "FileCheck", "CheckReport", "CheckStatus", "Acceptance"):
        assert getattr(api, name) is getattr(gate, name)
        assert getattr(gate, name).__module__ == "pte_devconst.gate.check"
    defined = [node.name for node in ast.parse((ROOT / "pte_devconst" / "api.py").read_text()).body
               if isinstance(node, ast.ClassDef)]
    assert defined == ["InspectReport"], defined  # the API's one record of its own


def _calls(path: Path) -> set[str]:
    return {node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.Call)}


def test_one_way_to_expand_and_pair_paths() -> None:
    """Only ``paths.programs`` expands arguments, pairs data and drops repeated programs."""
    sources = [ROOT / "pte_devconst" / "api.py", *sorted((ROOT / "cli").glob("*.py"))]
    for source in sources:
        assert not _calls(source) & {"expand", "pair_data", "distinct_pairs", "excluded"}, source


def _exit_literals(path: Path) -> list[str]:
    """``typer.Exit(2)``, ``SystemExit(130)``, ``EXIT_X = ...``: an exit code spelled outside ``ExitCode``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) in
                ("Exit", "SystemExit") and node.args and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, int)):
            found.append(f"{path.name}:{node.lineno}")
        if isinstance(node, ast.Assign):
            names = [t.id for t in node.targets if isinstance(t, ast.Name)]
            names += [e.id for t in node.targets if isinstance(t, ast.Tuple) for e in t.elts if isinstance(e, ast.Name)]
            found += [f"{path.name}:{node.lineno} {n}" for n in names if n.startswith("EXIT_")]
    return found


def test_one_exit_code_enum_for_the_whole_tool() -> None:
    from pte_devconst.util.exit_code import ExitCode

    sources = [p for folder in ("cli", "pte_devconst", "rewriter", "runner", "gate", "compare", "inventory")
               for p in sorted((ROOT / folder).glob("*.py"))]
    assert not [hit for source in sources for hit in _exit_literals(source)]
    documented = (ROOT / "docs" / "cli.md").read_text()
    for code in ExitCode:
        assert re.search(rf"\|\s*{code.value}\s*\|", documented), f"docs/cli.md does not list exit code {code.value}"


def test_check_reports_exit_codes_as_the_enum(tmp_path: Path) -> None:
    from pte_devconst import api
    from pte_devconst.util.exit_code import ExitCode

    assert api.check([pte_path("v_a_dtypes_copy")]).exit_code is ExitCode.FINDINGS
    assert api.check([tmp_path / "missing.pte"]).exit_code is ExitCode.ERROR
    code, document = invoke_json("check", pte_path("v_h_cpu_only"), "--isolated")
    assert code == ExitCode.OK and document["exit_code"] == 0 and type(document["exit_code"]) is int


# ------------------------------------------------------------------------------------------ leftovers (item 6)


def test_rewrite_render_text_has_no_dead_quiet_parameter() -> None:
    from pte_devconst.cli.rewrite_cmd import render_text

    assert "quiet" not in inspect.signature(render_text).parameters


def test_the_lazy_exports_docstring_names_the_packages_that_use_them() -> None:
    """``_lazy.py`` said "every package"; it names the packages whose ``__init__`` exports lazily, and no other."""
    from pte_devconst import _lazy

    users = {folder for folder in FOLDERS
             if "lazy_exports(" in (ROOT / folder / "__init__.py").read_text()}
    doc = _lazy.__doc__ or ""
    assert "every package" not in doc
    named = set(re.findall(r"``(\w+)``", doc)) & set(FOLDERS)
    assert named == users, (named, users)


def test_named_enums_docstring_gives_the_python_version_where_plain_enums_changed() -> None:
    """A plain ``(str, Enum)`` formats as ``Class.MEMBER`` from Python 3.11 on (the docstring said 3.12)."""
    import enum

    from pte_devconst.util import named_enum

    class Plain(str, enum.Enum):
        X = "x"

    claimed = re.search(r"from 3\.(\d+) on", named_enum.__doc__ or "")
    assert claimed, named_enum.__doc__
    changed = format(Plain.X) != "x"
    assert changed == (sys.version_info[:2] >= (3, int(claimed.group(1)))), (claimed.group(0), format(Plain.X))


def test_every_reader_of_the_tools_environment_switches_uses_env_flag() -> None:
    """``PTE_DEVCONST_DEBUG=0`` is off: each switch is read by ``util.env.env_flag``, never by ``os.environ``."""
    readers = []
    for folder in FOLDERS:
        for source in sorted((ROOT / folder).rglob("*.py")):
            text = source.read_text()
            if re.search(r"(environ(\.get)?|getenv)\(?\[?\s*[\"']PTE_DEVCONST_", text):
                readers.append(str(source.relative_to(ROOT)))
    assert not readers
    result = invoke("inspect", ROOT / "missing.pte", env={"PTE_DEVCONST_DEBUG": "0"})
    assert result.exit_code == 2 and "Traceback" not in result.stderr + result.stdout


def test_the_fixed_defects_stay_fixed(tmp_path: Path) -> None:
    """Already fixed; still so: ``-o -v`` keeps its value, ``RewriteCheckError`` is a bug not a user error."""
    from pte_devconst.cli.app import hoist_global_flags
    from pte_devconst.rewriter.verify import RewriteCheckError
    from pte_devconst.util.errors import PteDevconstError

    assert hoist_global_flags(["rewrite", "m.pte", "--dry-run", "-o", "-v"])[-2:] == ["-o", "-v"]
    assert not issubclass(RewriteCheckError, PteDevconstError)
