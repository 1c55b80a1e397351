"""One consistent command line (issue 28, items 3, 6 and 7): units and plurals from one formatter, metavars in one
style, the same words for a missing argument, one version everywhere, ``-V``, ``diff --exit-code``, ``diff``'s
unused values, ``CLICOLOR_FORCE``, ``run -o``, ``validate`` of many pairs in one process, progress when asked;
and no silent no-ops: a ``--device`` nothing uses, a folder without programs, lists that leave items out."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from cli_runner import invoke, invoke_json
from conftest import CORPUS, EXAMPLES, pte_path
from test_report_schema import SCHEMA_FILE, assert_valid

MLP = EXAMPLES / "mlp_copy.pte"
INPUTS = EXAMPLES / "mlp_copy.inputs.pt"


@pytest.fixture(scope="module")
def rewritten(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("rewritten") / "mlp_copy.devconst.pte"
    assert invoke("rewrite", MLP, "-o", out).exit_code == 0
    return out


# --------------------------------------------------------------------------------- one formatter

# What one formatter never writes: "(s)" plurals, a singular count with a plural noun, a byte figure of four or
# more digits without separators, bytes spelled out beside binary units.
INCONSISTENT = re.compile(r"\w\((s|es|ies)\)|\b1 (constants|files|values|copies|entries|tensors|methods|calls|slots|"
                          r"instructions)\b|(?<![\d,.])\d{4,} B\b|\d bytes per call")


def test_units_and_plurals_come_from_one_formatter(rewritten: Path) -> None:
    """Was: ``entr(ies)``, ``copy(ies)``, ``1 delegate output slots``, ``3232 B`` beside ``3,232 B``, ``64.0 KiB
    per call`` beside ``65,536 bytes per call``."""
    outputs = [invoke("inspect", MLP).stdout, invoke("rewrite", MLP, "--dry-run").stdout,
               invoke("rewrite", MLP, "--dry-run", "-f", "markdown").stdout, invoke("diff", MLP, rewritten).stdout,
               invoke("check", MLP, rewritten, pte_path("v_c_shared_host_copy")).stdout,
               invoke("check", MLP, rewritten, "-f", "markdown").stdout, invoke("check", MLP, "-f", "github").stdout,
               invoke("check", MLP, rewritten, "-f", "concise").stdout,
               invoke("inspect", CORPUS / "v_a_dtypes_copy.pte", "-f", "markdown").stdout]
    for fmt in ("text", "markdown"):
        outputs.append(invoke("validate", MLP, rewritten, "--inputs", INPUTS, "--simulate-devices", "-f", fmt,
                              env={"COLUMNS": "200"}).stdout)
    for output in outputs:
        assert output.strip()
        found = INCONSISTENT.search(output)
        assert found is None, (found.group(), output[max(0, found.start() - 200):found.end() + 50])


def test_the_formatter() -> None:
    from pte_devconst.util.units import exact_bytes, human_bytes, listing, plural

    assert [plural(n, "constant") for n in (0, 1, 2, 1500)] == ["0 constants", "1 constant", "2 constants",
                                                                "1,500 constants"]
    assert plural(2, "initial-data entry") == "2 initial-data entries" and plural(3, "copy") == "3 copies"
    assert plural(2, "delegate output slot") == "2 delegate output slots" and plural(1, "copy") == "1 copy"
    assert (human_bytes(65_536), exact_bytes(3_232), exact_bytes(3 << 20)) == ("64.0 KiB", "3,232 B",
                                                                               "3,145,728 B (3.0 MiB)")
    assert listing([f"m{i}.pte" for i in range(13)]) == "m0.pte, m1.pte, m2.pte and 10 more"
    assert listing(["a", "b"]) == "a, b"


# ------------------------------------------------------------------------------------- one style

COMMANDS = ("inspect", "rewrite", "diff", "check", "run", "validate")


def test_help_metavars_are_in_one_style() -> None:
    """Was: ``--ptd <str>``, ``--min-bytes <int range>``, ``--etrecord <path>`` beside ``FILE``."""
    import typer

    from pte_devconst.cli.app import app

    group = typer.main.get_command(app)
    # FILE, OUT.pt, FORMAT=FILE (an option's KEY=VALUE), [sampled|full]
    style = re.compile(r"^([A-Z][A-Z0-9_]*(\.[a-z]+)?([ =][A-Z][A-Z0-9_]*)*(\.\.\.)?|\[[a-z|]+\])$")
    for name in COMMANDS:
        command = group.commands[name]  # type: ignore[attr-defined]
        help_text = invoke(name, "--help", env={"COLUMNS": "120"}).stdout
        assert not re.search(r"<\w[\w ]*>", help_text), (name, re.findall(r"<\w[\w ]*>", help_text))
        for param in command.params:
            if getattr(param, "is_flag", False) or getattr(param, "count", False):
                continue
            if getattr(param, "param_type_name", "") == "option" and getattr(param, "is_bool_flag", False):
                continue
            metavar = param.make_metavar(group.make_context(name, [], resilient_parsing=True)) \
                if param.metavar is None else param.metavar
            assert style.match(metavar), (name, param.name, metavar)


@pytest.mark.parametrize("command", ["inspect", "rewrite", "check"])
def test_a_command_without_programs_explains_like_the_others(command: str) -> None:
    """Was: ``inspect`` said ``Missing argument 'files'.`` where the others explained."""
    done = invoke(command, *(() if command == "inspect" else ("--isolated",)))
    assert done.exit_code == 2
    assert "Missing argument 'FILE...' (name the programs: .pte files, glob patterns or folders" in done.stderr


def test_one_version_for_the_flags_the_metadata_and_every_report(tmp_path: Path) -> None:
    """``-V`` was refused; the version is written once (pte_devconst.__version__), read by the package metadata,
    ``--version``, the JSON envelope and SARIF."""
    from importlib.metadata import version

    expected = f"pte-devconst {version('pte-devconst')}"
    assert invoke("-V").stdout.strip() == invoke("--version").stdout.strip() == expected
    anywhere = subprocess.run([sys.executable, "-m", "pte_devconst", "check", str(MLP), "-V"], capture_output=True,
                              text=True, timeout=120)
    assert anywhere.stdout.strip() == expected  # a global flag, wherever it stands
    _, document = invoke_json("inspect", MLP)
    sarif = json.loads(invoke("check", MLP, "--format", "sarif").stdout)
    assert f"pte-devconst {document['tool_version']}" == expected
    assert f"pte-devconst {sarif['runs'][0]['tool']['driver']['version']}" == expected


def test_diff_exit_code_says_whether_the_programs_differ(rewritten: Path) -> None:
    """As ``git diff --exit-code``: 1 when they differ, 0 when identical; without the flag always 0."""
    assert invoke("diff", MLP, rewritten).exit_code == 0
    assert invoke("diff", MLP, rewritten, "--exit-code").exit_code == 1
    assert invoke("diff", MLP, MLP, "--exit-code").exit_code == 0
    assert invoke("diff", MLP, rewritten, "--exit-code", "--json").exit_code == 1


def test_diff_calls_the_outputs_of_removed_copies_unused_not_inputs(rewritten: Path) -> None:
    """Was: ``input (cuda:0)`` for values 5, 6, 8 and 9, the outputs of the four copies the rewrite removed."""
    _, document = invoke_json("diff", MLP, rewritten)
    tensors = {t["value"]: t for t in document["diff"]["methods"][0]["tensors"]}
    assert [v for v, t in sorted(tensors.items()) if t["after"]["kind"] == "unused"] == [5, 6, 8, 9]
    assert not any(t["after"] and t["after"]["kind"] == "input" for t in tensors.values())
    assert "unused (cuda:0)" in invoke("diff", MLP, rewritten).stdout


def test_clicolor_force_and_no_color(rewritten: Path) -> None:
    """Was: ``CLICOLOR_FORCE`` ignored in a pipe.  ``NO_COLOR`` wins over it."""
    plain = invoke("check", MLP)
    assert "\x1b[" not in plain.stdout
    forced = invoke("check", MLP, env={"CLICOLOR_FORCE": "1"})
    assert "\x1b[" in forced.stdout and forced.exit_code == 1
    assert "\x1b[" not in invoke("check", MLP, env={"CLICOLOR_FORCE": "1", "NO_COLOR": "1"}).stdout
    assert "\x1b[" not in invoke("check", MLP, env={"CLICOLOR_FORCE": "0"}).stdout


def test_run_saves_its_outputs_for_validate(tmp_path: Path, rewritten: Path) -> None:
    """``run -o OUTPUTS.pt`` (was: no way to save them) writes what ``validate --expected`` reads."""
    import torch

    saved = tmp_path / "expected.pt"
    done = invoke("run", MLP, "--inputs", INPUTS, "--calls", "2", "--simulate-devices", "-o", saved)
    assert done.exit_code == 0, done.output
    outputs = torch.load(saved, weights_only=True)
    assert list(outputs) == ["forward"] and len(outputs["forward"]) == 2
    assert all(isinstance(t, torch.Tensor) and t.shape == (4, 8) for call in outputs["forward"] for t in call)
    check = invoke("validate", MLP, rewritten, "--inputs", INPUTS, "--expected", saved, "--simulate-devices")
    assert check.exit_code == 0 and check.stdout.splitlines()[-1] == "PASS", check.output
    refused = invoke("run", MLP, "-o", MLP, "--simulate-devices")  # never over the program it runs
    assert refused.exit_code == 2 and "refusing to overwrite" in refused.stderr


def test_validate_many_pairs_in_one_process(tmp_path: Path) -> None:
    """Was: one pair per process (32 pairs imported torch 32 times).  A list of pairs, or a folder of originals
    and a folder of rewrites (NAME.pte with NAME.devconst.pte), each with its NAME.inputs.pt."""
    originals, rewrites = tmp_path / "models", tmp_path / "rewritten"
    originals.mkdir()
    for name in ("mlp_copy", "mlp_legacy"):
        shutil.copy(EXAMPLES / f"{name}.pte", originals)
        shutil.copy(EXAMPLES / f"{name}.inputs.pt", originals)
    shutil.copy(EXAMPLES / "mlp_cpu.pte", originals)  # no rewrite of it: one line, the others still validated
    assert invoke("rewrite", originals / "mlp_copy.pte", originals / "mlp_legacy.pte", "--dry-run").exit_code == 0
    rewrites.mkdir()
    for name in ("mlp_copy", "mlp_legacy"):
        assert invoke("rewrite", originals / f"{name}.pte", "-o", rewrites / f"{name}.devconst.pte").exit_code == 0
    pairs = invoke("validate", originals / "mlp_copy.pte", rewrites / "mlp_copy.devconst.pte",
                   originals / "mlp_legacy.pte", rewrites / "mlp_legacy.devconst.pte", "--simulate-devices",
                   "--opaque-delegates", "--format", "json")
    assert pairs.exit_code == 0, pairs.output
    document = json.loads(pairs.stdout)
    assert_valid(jsonschema.Draft202012Validator(json.loads(SCHEMA_FILE.read_text())), document, "validate")
    assert [Path(r["original"]).name for r in document["results"]] == ["mlp_copy.pte", "mlp_legacy.pte"]
    assert all(r["verdict"] == "pass" for r in document["results"])
    folders = invoke("validate", originals, rewrites, "--simulate-devices", "--opaque-delegates")
    assert folders.exit_code == 2  # mlp_cpu.pte has no rewrite there
    assert f"{originals / 'mlp_cpu.pte'}: no rewrite found" in folders.stderr
    assert folders.stdout.splitlines()[-1] == ("3 pairs validated: 2 passed, 0 failed, 0 with nothing moved, 1 could "
                                               "not be validated.")
    assert folders.stdout.count("PASS") == 2
    odd = invoke("validate", MLP, MLP, MLP)
    assert odd.exit_code == 2 and "ORIGINAL REWRITTEN pairs" in odd.stderr


def test_progress_on_long_runner_work_when_asked(rewritten: Path) -> None:
    """Progress is drawn on stderr on a terminal; ``--progress`` also writes it where stderr is a log."""
    quiet = invoke("validate", MLP, rewritten, "--simulate-devices", "--opaque-delegates")
    assert quiet.exit_code == 0 and "call 1/2" not in quiet.stderr
    asked = invoke("validate", MLP, rewritten, "--simulate-devices", "--opaque-delegates", "--progress")
    assert asked.exit_code == 0
    assert "validating mlp_copy.pte: forward: original, call 1/2 (the load copied 0 B to devices) (1/4)" in \
        asked.stderr.splitlines()
    assert any(line.startswith("validating mlp_copy.pte: forward: original, call 2/2 (the call before copied ")
               for line in asked.stderr.splitlines())
    assert "validating mlp_copy.pte: forward: rewrite, call 2/2 (the call before copied 256 B to devices, " \
        "128 B back) (4/4)" in asked.stderr.splitlines()
    ran = invoke("run", MLP, "--simulate-devices", "--calls", "3", "--progress")
    assert ran.exit_code == 0
    assert any(line.startswith("running mlp_copy.pte: call 3/3 (the call before copied ") and line.endswith("(3/3)")
               for line in ran.stderr.splitlines()), ran.stderr
    assert "call" not in invoke("-q", "run", MLP, "--simulate-devices", "--calls", "3", "--progress").stderr


# ------------------------------------------------------------------------------------ no silent no-ops

def test_rewrite_refuses_a_device_the_program_does_not_use(tmp_path: Path) -> None:
    """Was: ``rewrite --device cuda:9`` wrote an identical copy and exited 0."""
    out = tmp_path / "out.pte"
    done = invoke("rewrite", MLP, "--device", "cuda:9", "-o", out)
    assert done.exit_code == 2 and not out.exists()
    assert "--device cuda:9: the program uses none of the devices selected (it uses cuda:0)" in done.stderr
    assert invoke("rewrite", MLP, "--device", "cuda:9", "--dry-run").exit_code == 2
    # several programs: one that uses none of the devices is skipped with a warning; a device none uses is exit 2
    models = tmp_path / "models"
    models.mkdir()
    shutil.copy(pte_path("v_c_shared_host_copy"), models / "zero.pte")  # cuda:0
    shutil.copy(pte_path("v_k_cuda1_copy"), models / "one.pte")  # cuda:1
    some = invoke("rewrite", models, "--device", "cuda:1")
    assert some.exit_code == 0, some.output
    assert (models / "one.devconst.pte").exists() and not (models / "zero.devconst.pte").exists()
    assert f"pte-devconst: warning: {models / 'zero.pte'}: --device cuda:1: the program uses none" in some.stderr
    (models / "one.devconst.pte").unlink()
    none = invoke("rewrite", models, "--device", "cuda:9")
    assert none.exit_code == 2 and not list(models.glob("*.devconst.pte"))
    assert "pte-devconst: error: --device cuda:9: no program rewritten uses this device" in none.stderr


@pytest.mark.parametrize("command", ["check", "inspect", "rewrite"])
def test_a_folder_without_programs_is_a_warning_not_an_error(command: str, tmp_path: Path) -> None:
    """Was: ``check`` of a folder with no .pte exited 2 (ruff and black exit 0 with a warning)."""
    (tmp_path / "empty").mkdir()
    done = invoke(command, tmp_path / "empty")
    assert done.exit_code == 0, done.output
    assert done.stderr == f"pte-devconst: warning: {tmp_path / 'empty'}: no .pte file in this directory\n"
    assert invoke("-q", command, tmp_path / "empty").stderr == ""
    both = invoke(command, tmp_path / "empty", MLP, "--format", "json")
    assert both.exit_code in (0, 1) and "no .pte file in this directory" in both.stderr
    assert json.loads(both.stdout)["command"] == command


def test_a_list_that_leaves_items_out_says_how_many() -> None:
    """Was: "a rewrite would grow it in 13 file(s): a.pte, b.pte, c.pte" (three named, no word of ten more)."""
    from pte_devconst.api import CheckReport, FileCheck
    from pte_devconst.cli.check_cmd import render_markdown
    from pte_devconst.program.layout import DeviceMemory

    files = tuple(FileCheck(f"models/m{i:02d}.pte", None, 1, (), device_memory=DeviceMemory(288, 384))
                  for i in range(13))
    markdown = "\n".join(render_markdown(CheckReport(files, 0)))
    assert "a rewrite would grow it in 13 files: models/m00.pte, models/m01.pte, models/m02.pte and 10 more." \
        in markdown
