"""check's reports as GitHub shows them: the markdown of 60 programs fits a pull-request comment (65,536
characters) and renders to HTML with the summary table first; a report of any size stays under the limit, the
longest details cut with a line saying so; ``--format github`` annotates each file and rule once, at most 10 of
each level unless asked; ``--format sarif`` is structurally SARIF 2.1.0, one result per file and rule;
``--output-format`` is ``--format``."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import CORPUS, EXAMPLES
from pte_devconst.api import CheckReport, FileCheck, Finding
from pte_devconst.cli.check_cmd import render_github, sarif_document
from pte_devconst.cli.check_cmd import render_markdown as markdown_lines
from pte_devconst.cli.formats import View, capped
from pte_devconst.cli.markdown import MARKDOWN_LIMIT

LIMIT = 65_536  # GitHub's limit on a pull-request comment


def cli(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pte_devconst", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env={"NO_COLOR": "1", "PATH": "/usr/bin:/bin"})


@pytest.fixture(scope="module")
def sixty(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """60 programs under names of their own: the corpus's and the examples', copied again and again (links to one
    file would be one program: check lists each real file once)."""
    folder = tmp_path_factory.mktemp("sixty") / "models"
    folder.mkdir()
    sources = sorted(p for p in [*CORPUS.glob("*.pte"), *EXAMPLES.glob("*.pte")] if not p.name.startswith("v_g"))
    for index in range(60):
        source = sources[index % len(sources)]
        shutil.copy(source, folder / f"team{index // 10}_{index:02d}_{source.name}")
    return folder


def render_markdown(report: CheckReport, limit: int = MARKDOWN_LIMIT) -> str:
    return "\n".join(markdown_lines(report, View(), limit))


def github(report: CheckReport, most: int = 10) -> list[str]:
    """The github format's lines as ``Output`` prints them: the annotations capped per level, then the summary."""
    rendered = render_github(report, View(max_annotations=most))
    return capped(rendered.annotations, most) + rendered.lines


def _html(markdown: str) -> str:
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark").enable("table").render(markdown)


def test_sixty_programs_fit_a_comment_and_render_summary_first(sixty: Path) -> None:
    done = cli(sixty.parent, "check", "models", "--format", "markdown")
    assert done.returncode == 1, done.stderr
    markdown = done.stdout
    assert len(markdown) < LIMIT
    html = _html(markdown)
    assert html.index("<table>") < html.index("<details>")  # the summary table first
    summary = html[html.index("<table>"):html.index("</table>")]
    rows = re.findall(r"<tr>(.*?)</tr>", summary, re.S)
    assert len(rows) == 61  # the header and one row per file
    names = sorted(p.name for p in sixty.iterdir())
    assert [re.search(r"<code>models/([^<]+)</code>", row).group(1) for row in rows[1:]] == names
    assert 'style="text-align:right"' in rows[1]  # numbers right-aligned
    copying = [row for row in rows[1:] if "❌" in row]
    assert copying and html.count("<details>") >= len(copying)  # details for each file with findings
    assert "KiB" in summary or " B<" in summary  # units with the numbers


def _report(files: int, findings: int, name: str = "layers.{}.attention.query_key_value.weight") -> CheckReport:
    checks = []
    for index in range(files):
        file = f"models/model_{index:05d}.pte"
        found = tuple(Finding(file, "forward", v, name.format(v), "cuda:0", 4096 * (v + 1), 1)
                      for v in range(findings if index % 3 else findings * 4))
        checks.append(FileCheck(file, None, len(found) + 2, found))
    return CheckReport(tuple(checks), 0)


@pytest.mark.parametrize("files, findings", [(5, 400), (60, 200), (1500, 3)])
def test_markdown_stays_under_the_limit_and_says_what_was_cut(files: int, findings: int) -> None:
    report = _report(files, findings)
    markdown = render_markdown(report)
    assert MARKDOWN_LIMIT == LIMIT and len(markdown) < LIMIT
    assert "characters) left out to keep the report under 65,536" in markdown or "more files" in markdown
    html = _html(markdown)
    assert html.index("<table>") < html.index("<details>") if "<details>" in html else "<table>" in html
    assert markdown.count("<details>") == markdown.count("</details>")  # every block closed, cut or not
    cuts = [int(n.replace(",", "")) for n in re.findall(r"more lines? \(([\d,]+) characters\)", markdown)]
    if cuts:  # what was cut plus what is shown is the whole
        assert len(render_markdown(report, limit=10 ** 9)) > len(markdown) + sum(cuts) * 0.9


def test_markdown_is_whole_when_it_fits() -> None:
    report = _report(4, 3)
    markdown = render_markdown(report)
    assert "left out" not in markdown and markdown.count("<details>") == 4
    assert markdown == render_markdown(report, limit=10 ** 9)


def test_github_annotates_each_file_once_at_most_ten_unless_asked() -> None:
    report = _report(25, 3)
    lines = github(report)
    annotations = [line for line in lines if line.startswith("::")]
    assert len(annotations) == 10
    # The worst first: files whose every third... (index % 3 == 0) copy four times as many constants.
    assert all("12 constants" in line for line in annotations[:9])
    assert "15 more errors not annotated (GitHub shows 10 of each level per step; --max-annotations 25 shows them " \
           "all)" in lines
    every = [line for line in github(report, 0) if line.startswith("::")]
    assert len(every) == 25 and len({line.split(",")[0] for line in every}) == 25  # one per file
    clean = CheckReport((FileCheck("models/ok.pte", None, 3, ()),), 0)
    assert not [line for line in github(clean) if line.startswith("::")]  # nothing found, nothing annotated


def test_max_annotations_on_the_command_line(sixty: Path) -> None:
    default = cli(sixty.parent, "check", "models", "--output-format", "github")
    levels = [line.split(" ", 1)[0] for line in default.stdout.splitlines() if line.startswith("::")]
    assert levels.count("::error") == 10 and levels.count("::notice") == 10  # findings, then what stays
    assert levels == sorted(levels, key=["::error", "::warning", "::notice"].index)  # findings before notices
    three = cli(sixty.parent, "check", "models", "--format", "github", "--max-annotations", "3")
    levels = [line.split(" ", 1)[0] for line in three.stdout.splitlines() if line.startswith("::")]
    assert levels == ["::error"] * 3 + ["::notice"] * 3  # every level capped


def _assert_sarif(document: dict) -> None:
    """The structure SARIF 2.1.0 requires of what code scanning reads (the schema's required properties)."""
    assert document["version"] == "2.1.0" and document["$schema"].endswith("sarif-2.1.0.json")
    (run,) = document["runs"]
    driver = run["tool"]["driver"]
    assert driver["name"] == "pte-devconst" and isinstance(driver["version"], str)
    rule_ids = [rule["id"] for rule in driver["rules"]]
    assert len(set(rule_ids)) == len(rule_ids)
    for rule in driver["rules"]:
        assert rule["shortDescription"]["text"] and rule["help"]["text"]
    for result in run["results"]:
        assert result["ruleId"] in rule_ids and rule_ids[result["ruleIndex"]] == result["ruleId"]
        assert result["level"] in ("none", "note", "warning", "error")
        assert result["message"]["text"]
        (location,) = result["locations"]
        uri = location["physicalLocation"]["artifactLocation"]["uri"]
        assert uri and " " not in uri and not uri.startswith("/")
        for suppression in result.get("suppressions", []):
            assert suppression["kind"] in ("inSource", "external") and suppression["justification"]


def test_sarif_is_one_result_per_file_and_rule_with_rule_ids_and_file_locations(tmp_path: Path) -> None:
    (tmp_path / "models").mkdir()
    shutil.copy(EXAMPLES / "mlp_copy.pte", tmp_path / "models" / "my detector.pte")
    shutil.copy(EXAMPLES / "mlp_cpu.pte", tmp_path / "models" / "classifier.pte")
    (tmp_path / "models" / "broken.pte").write_bytes(b"not a program")
    done = cli(tmp_path, "check", "models", "--format", "sarif")
    assert done.returncode == 2  # the exit code does not change with the format
    document = json.loads(done.stdout)
    _assert_sarif(document)
    results = document["runs"][0]["results"]
    (copied,) = [r for r in results if r["ruleId"] == "PDC001"]  # one result for the file's four constants
    assert copied["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "models/my%20detector.pte"
    assert [c["bytesPerCall"] for c in copied["properties"]["constants"]] == [2048, 128, 1024, 32]
    assert copied["properties"]["bytesPerCall"] == 3232
    assert "4 constants copied to a device on every call (3,232 B per call)" in copied["message"]["text"]
    assert "value 0 in forward (2,048 B per call to cuda:0)" in copied["message"]["text"]
    (broken,) = [r for r in results if r["ruleId"] == "PDC004"]
    assert broken["level"] == "error" and broken["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] \
        == "models/broken.pte"
    invocation = document["runs"][0]["invocations"][0]
    assert (invocation["executionSuccessful"], invocation["exitCode"]) == (False, 2)
    again = json.loads(cli(tmp_path, "check", "models", "--format", "sarif").stdout)["runs"][0]["results"]
    assert [r["partialFingerprints"] for r in again] == [r["partialFingerprints"] for r in results]  # stable
    _assert_sarif(sarif_document(_report(3, 2)))


def test_output_format_is_format_on_every_command(tmp_path: Path) -> None:
    program = EXAMPLES / "mlp_copy.pte"
    for args in (["inspect", str(program)], ["check", str(program)],
                 ["rewrite", str(program), "--dry-run"], ["diff", str(program), str(program)]):
        done = cli(tmp_path, *args, "--output-format", "json")
        assert done.returncode in (0, 1), (args, done.stderr)
        assert json.loads(done.stdout)["command"] == args[0]


def test_hostile_names_stay_text_in_the_summary_table_and_the_details() -> None:
    """The details' ``<summary>`` is HTML, where markdown escaping does not hold: names are HTML-escaped there."""
    name = "models/</summary></details><script>alert(1)</script>`|x.pte"
    finding = Finding(name, "forward", 0, "<img src=x onerror=alert(1)>", "cuda:0", 8, 1)
    markdown = render_markdown(CheckReport((FileCheck(name, None, 1, (finding,)),), 0))
    html = _html(markdown)
    assert "<script>" not in html and "<img" not in html  # in code spans and escaped HTML: text
    assert html.count("<details>") == html.count("</details>") == 1
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
