"""Reports sized for where they go (issue 28, item 2), on 85 programs laid out as a user's repository holds them.

Before: only ``check``'s markdown was capped (``rewrite --in-place --format markdown`` of 32 files was 130,357
characters, ``inspect`` 183,559, past GitHub's 65,536 for a comment); ``--format github`` printed one warning per
file for what ``--min-bytes`` left out, uncapped also with ``--max-annotations``; SARIF held one result per
constant (85 files: 1,610 results).  Now every command's markdown stays under the limit saying what it left out,
annotations are at most 10 per level (errors first), what the options left out is one notice, and SARIF holds
one result per file and rule with a fingerprint that does not change with the counts.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import CORPUS, EXAMPLES, FIXTURES

LIMIT = 65_536
SEED_CONSTANTS = 1500  # one program with as many constants: its tables alone are past the limit


def cli(cwd: Path, *args: str, encoding: str = "utf-8") -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "pte_devconst", *args], cwd=cwd, capture_output=True, timeout=300,
                          env={"NO_COLOR": "1", "PATH": "/usr/bin:/bin", "PYTHONIOENCODING": encoding})
    assert "Traceback" not in done.stderr.decode("utf-8", "replace"), done.stderr
    return done


def text(done: subprocess.CompletedProcess) -> str:
    return done.stdout.decode("utf-8")


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``models/`` with 85 programs: the real models, the corpus and the examples under names of their own, and
    one program of 1,500 constants (its rewrite beside it, elsewhere, for ``diff``)."""
    from bench.synth import write_seed_program

    root = tmp_path_factory.mktemp("repository")
    models = root / "models"
    models.mkdir()
    sources = [p for folder in (FIXTURES / "real_models", CORPUS, EXAMPLES) for p in sorted(folder.glob("*.pte"))
               if not p.name.startswith("v_g") and ".devconst." not in p.name]
    for index, source in enumerate(sources[:84]):
        shutil.copy(source, models / f"m{index:02d}_{source.name}")
    write_seed_program(str(models / "seed.pte"), SEED_CONSTANTS)
    assert len(list(models.glob("*.pte"))) == 85
    done = cli(root, "rewrite", "models/seed.pte", "-o", "seed.devconst.pte", "-q")
    assert done.returncode == 0, done.stderr
    return root


def _well_formed(markdown: str) -> None:
    """Nothing a cut could leave open: every <details> closed, every code fence closed."""
    assert markdown.count("<details>") == markdown.count("</details>")
    assert sum(1 for line in markdown.splitlines() if line.lstrip().startswith("```")) % 2 == 0


@pytest.mark.parametrize("args", [("inspect", "models"), ("rewrite", "models", "--dry-run"), ("check", "models"),
                                  ("diff", "models/seed.pte", "seed.devconst.pte")],
                         ids=["inspect", "rewrite", "check", "diff"])
def test_markdown_of_every_command_fits_a_pull_request_comment(repository: Path, args: tuple[str, ...]) -> None:
    done = cli(repository, *args, "--format", "markdown")
    assert done.returncode in (0, 1), done.stderr
    markdown = text(done)
    assert len(markdown) < LIMIT
    _well_formed(markdown)
    # It was too long whole: it says how much it left out, and where the full report is.
    assert re.search(r"and [\d,]+ more (lines?|files?|programs?)", markdown), markdown[-500:]
    assert "`--format json` has the full report" in markdown or "`--format json` has them all" in markdown \
        or "`--format json` lists them all" in markdown


def test_markdown_of_many_validations_fits_too(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """validate of 85 pairs in one document (several pairs print one): cut to the limit as every command's."""
    from pte_devconst import api
    from pte_devconst.cli.formats import Format, Output, View
    from pte_devconst.cli.run_cmd import RUN
    from pte_devconst.cli.validate_cmd import VALIDATE

    rewritten = tmp_path / "mlp.devconst.pte"
    api.rewrite(EXAMPLES / "mlp_copy.pte", rewritten)
    result = api.validate(EXAMPLES / "mlp_copy.pte", rewritten, simulate_devices=True, opaque_delegates=True)
    output = Output(VALIDATE, Format.MARKDOWN, View(), several=True)
    for _ in range(85):
        output.add(result)
    output.close()
    markdown = capsys.readouterr().out
    assert len(markdown) < LIMIT and markdown.count("### pte-devconst validate") < 85
    assert re.search(r"and [\d,]+ more pairs left out to keep the report under 65,536 characters", markdown)
    _well_formed(markdown)
    ran = Output(RUN, Format.MARKDOWN, View())
    ran.add(api.run(EXAMPLES / "mlp_copy.pte", simulate_devices=True, opaque_delegates=True))
    ran.close(limit=400)  # run's document is small; the same cut holds it to any limit
    assert len(capsys.readouterr().out) < 400


def _levels(stdout: str) -> list[str]:
    return [line.split(" ", 1)[0].split("::")[1] for line in stdout.splitlines() if line.startswith("::")]


@pytest.mark.parametrize("extra, most", [((), 10), (("--min-bytes", "1024"), 10), (("--max-annotations", "3"), 3),
                                         (("--min-bytes", "1024", "--strict", "--max-annotations", "3"), 3)])
def test_github_shows_at_most_ten_annotations_per_level_findings_first(repository: Path, extra: tuple[str, ...],
                                                                      most: int) -> None:
    done = cli(repository, "check", "models", "--format", "github", *extra)
    assert done.returncode == 1, done.stderr
    stdout = text(done)
    levels = _levels(stdout)
    for level in ("error", "warning", "notice"):
        assert levels.count(level) <= most, (level, levels)
    assert levels == sorted(levels, key=["error", "warning", "notice"].index)  # findings before notices
    assert re.search(rf"[\d,]+ more errors not annotated \(GitHub shows {most} of each level", stdout)
    left_out = [line for line in stdout.splitlines() if "left out by" in line and line.startswith("::")]
    if "--min-bytes" in extra:  # one line for what the option left out, never one per file
        (line,) = left_out
        assert line.startswith("::notice title=pte-devconst PDC006 left-out") and "--min-bytes 1024" in line
        assert re.search(r"in [\d,]+ files\)", line)
    else:
        assert not left_out


def test_sarif_is_one_result_per_file_and_rule_with_stable_fingerprints(repository: Path) -> None:
    first = json.loads(text(cli(repository, "check", "models", "--format", "sarif")))
    results = first["runs"][0]["results"]
    keys = [(r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"], r["ruleId"]) for r in results]
    assert len(keys) == len(set(keys)) and len({uri for uri, _ in keys}) > 40
    constants = sum(len(r["properties"].get("constants", ())) for r in results)
    assert constants > 2 * len(results)  # the constants ride in the results' properties, not a result each
    assert all(len(r["partialFingerprints"]["pteDevconst/v1"]) == 32 for r in results)
    fewer = json.loads(text(cli(repository, "check", "models", "--format", "sarif", "--min-bytes", "1024")))
    prints = {key: r["partialFingerprints"] for key, r in zip(keys, results)}
    later = {(r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"], r["ruleId"]): r
             for r in fewer["runs"][0]["results"]}
    changed = [key for key, r in later.items() if key in prints and r["properties"] != results[keys.index(key)][
        "properties"]]
    assert changed and all(later[key]["partialFingerprints"] == prints[key] for key in changed)  # counts moved, not ids
    (left_out,) = [n for n in fewer["runs"][0]["invocations"][0]["toolExecutionNotifications"]
                   if n["descriptor"]["id"] == "PDC006"]
    assert "--min-bytes 1024" in left_out["message"]["text"]


# --------------------------------------------------------------------------------- UTF-8 whatever the locale

NO_TORCH = [("inspect", "{a}"), ("rewrite", "{a}", "--dry-run"), ("diff", "{a}", "{b}"), ("check", "{a}", "{b}")]


def _args(args: tuple[str, ...], a: Path, b: Path) -> list[str]:
    return [arg.format(a=a, b=b) for arg in args]


@pytest.mark.parametrize("args", NO_TORCH, ids=[args[0] for args in NO_TORCH])
def test_every_format_survives_a_cp1252_stdout(args: tuple[str, ...], tmp_path: Path) -> None:
    """Windows Python writes redirected output in the ANSI code page: markdown of check and diff ended in
    ``internal error: UnicodeEncodeError`` (❌, →).  Now stdout is UTF-8 whatever the locale."""
    from pte_devconst.cli.check_cmd import CHECK
    from pte_devconst.cli.diff_cmd import DIFF
    from pte_devconst.cli.inspect_cmd import INSPECT
    from pte_devconst.cli.rewrite_cmd import REWRITE

    a = EXAMPLES / "mlp_copy.pte"
    b = tmp_path / "mlp.devconst.pte"
    assert cli(tmp_path, "rewrite", str(a), "-o", str(b), "-q").returncode == 0
    renderers = {"inspect": INSPECT, "rewrite": REWRITE, "diff": DIFF, "check": CHECK}[args[0]]
    for fmt in renderers.formats:
        done = cli(tmp_path, *_args(args, a, b), "--format", fmt.value, encoding="cp1252")
        assert done.returncode in (0, 1), (fmt, done.stderr)
        out = done.stdout.decode("utf-8")  # UTF-8, not the code page
        assert out.strip() and b"UnicodeEncodeError" not in done.stderr, fmt
        if fmt.value == "markdown" and args[0] in ("check", "diff"):
            assert "❌" in out or "→" in out


@pytest.mark.parametrize("fmt", ["text", "markdown", "json"])
@pytest.mark.parametrize("command", ["run", "validate"])
def test_every_format_of_the_runner_commands_survives_a_cp1252_stdout(command: str, fmt: str, tmp_path: Path) -> None:
    a = EXAMPLES / "mlp_copy.pte"
    b = tmp_path / "mlp.devconst.pte"
    assert cli(tmp_path, "rewrite", str(a), "-o", str(b), "-q").returncode == 0
    args = ["run", str(a)] if command == "run" else ["validate", str(a), str(b), "--opaque-delegates"]
    done = cli(tmp_path, *args, "--simulate-devices", "--format", fmt, encoding="cp1252")
    assert done.returncode == 0, done.stderr
    out = done.stdout.decode("utf-8")
    assert out.strip()
    if command == "validate" and fmt == "markdown":
        assert "→" in out and "✅" in out


def test_a_terminal_that_cannot_show_utf8_gets_ascii_stand_ins() -> None:
    """On a terminal whose encoding cannot hold a report's symbols, they become ASCII, never an error."""
    import io

    from pte_devconst.cli.output import utf8_stdout

    class Terminal(io.TextIOWrapper):
        def isatty(self) -> bool:
            return True

    raw = io.BytesIO()
    stream = Terminal(raw, encoding="cp1252")
    utf8_stdout(stream)
    stream.write("### ❌ pte-devconst check → ✅ ok … naïve ✓\n")
    stream.flush()
    # cp1252 holds "…" and "ï" itself: only what it cannot hold is replaced
    assert raw.getvalue().decode("cp1252") == "### [x] pte-devconst check -> [ok] ok … naïve \\u2713\n"
    pipe = io.TextIOWrapper(io.BytesIO(), encoding="cp1252")
    utf8_stdout(pipe)
    assert pipe.encoding == "utf-8"
