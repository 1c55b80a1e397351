"""Names from a file never reach a terminal or a markdown report raw, in any command and any format.

Four corpus programs get hostile names: method and tensor names (which every command shows, including
``run`` and ``validate``, which execute the program), operator and backend names (shown by the analysing
commands), external constants' .ptd keys (the .pte's fqns and the .ptd's keys, renamed alike, so the
program still runs) and the keys of a program's own named data (shown by ``diff``).  Each name carries a
backtick, ``<script>``, ``<img>``, markdown links (to http and https), emphasis, a table pipe, a bare URL,
an ANSI escape sequence, bidi controls and rich markup.  Every command runs in every format it has:

* text and github: no control character reaches the terminal raw; rich markup is shown, not applied;
* markdown: the source holds no HTML tag and no link (not even escaped-but-raw ``<img``), and rendered by a
  CommonMark parser with GitHub's tables it has none either;
* json: no raw control character in the document, and the names come back exactly.
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from markdown_it import MarkdownIt

from cli_runner import invoke
from conftest import CORPUS, pte_path
from pte_devconst.rewriter.rewrite import rewrite_file
from pte_devconst.schema import model as m
from pte_devconst.schema.ptd_file import PtdFile
from pte_devconst.schema.pte_file import PteFile

try:
    from fuzz.mutate import assemble_pte, assemble_ptd
except ImportError:
    from tests.fuzz.mutate import assemble_pte, assemble_ptd

HOSTILE = ("x`y<script>alert(1)</script><img src=x onerror=alert(2)>[click](http://evil.example)"
           "[c2](https://evil.example/a) *em* _u_ a|b www.evil.example \x1b[31mred\u202eevil\u2066 [bold red]loud[/]")
RAW_TERMINAL = re.compile("[\x00-\x08\x0b-\x1f\x7f\x9b\u202a-\u202e\u2066-\u2069\u200e\u200f]")
RAW_MARKDOWN = ("<script", "<img", "](http", "http://", "https://", "www.evil", "<a ")
VARIANTS = ["names", "kernels", "data-keys", "named-data"]
# Each command with each of its formats.
FORMATS = {"inspect": ["text", "markdown", "json"], "rewrite": ["text", "markdown", "json"],
           "rewrite --dry-run": ["text", "markdown", "json"], "diff": ["text", "markdown", "json"],
           "check": ["text", "markdown", "json", "github"], "run": ["text", "markdown", "json"],
           "validate": ["text", "markdown", "json"]}


def _forge(tmp_path: Path, name: str, change: Any, out: str) -> Path:
    data = pte_path(name).read_bytes()
    with PteFile.from_bytes(data) as pte:
        program = pte.program
    path = tmp_path / out
    path.write_bytes(assemble_pte(change(program), data))
    return path


def _hostile(tmp_path: Path, variant: str) -> Path:
    """A corpus program with hostile names of one kind (``VARIANTS``)."""
    if variant == "names":
        def rename(program: m.Program) -> m.Program:
            plan = program.execution_plan[0]
            values = tuple(replace(v, extra_tensor_info=m.ExtraTensorInfo(fully_qualified_name=f"w{i}{HOSTILE}"))
                           if isinstance(v, m.Tensor) and v.is_constant else v for i, v in enumerate(plan.values))
            return replace(program, execution_plan=(replace(plan, name=f"fwd{HOSTILE}", values=values),))
        return _forge(tmp_path, "v_c_shared_host_copy", rename, "names.pte")
    if variant == "kernels":
        def rename(program: m.Program) -> m.Program:
            plan = program.execution_plan[0]
            operators = tuple(replace(op, name=f"{op.name}{HOSTILE}") if op.name == "aten::mul" else op
                              for op in plan.operators)
            delegates = tuple(replace(d, id=f"{d.id}{HOSTILE}") for d in plan.delegates)
            return replace(program, execution_plan=(replace(plan, operators=operators, delegates=delegates),))
        return _forge(tmp_path, "v_c_shared_host_copy", rename, "kernels.pte")
    if variant == "data-keys":  # the .pte's external fqns and the .ptd's keys alike: the program still runs
        def rename(program: m.Program) -> m.Program:
            plan = program.execution_plan[0]
            values = tuple(replace(v, extra_tensor_info=replace(v.extra_tensor_info, fully_qualified_name=
                                                                 f"{v.extra_tensor_info.fully_qualified_name}{HOSTILE}"))
                           if isinstance(v, m.Tensor) and v.is_external else v for v in plan.values)
            return replace(program, execution_plan=(replace(plan, values=values),))
        path = _forge(tmp_path, "v_g_external_copy", rename, "keys.pte")
        source = (CORPUS / "v_g_external_copy.ptd").read_bytes()
        with PtdFile.from_bytes(source) as ptd:
            flat = ptd.flat_tensor
        keyed = replace(flat, named_data=tuple(replace(e, key=f"{e.key}{HOSTILE}") for e in flat.named_data))
        path.with_suffix(".ptd").write_bytes(assemble_ptd(keyed, source))
        return path

    def rekey(program: m.Program) -> m.Program:  # named-data: the .pte's own named data (a delegate's)
        return replace(program, named_data=tuple(replace(e, key=f"k{i}{HOSTILE}")
                                                 for i, e in enumerate(program.named_data)))
    return _forge(tmp_path, "v_h_xnnpack", rekey, "named.pte")


def _commands(tmp_path: Path, variant: str) -> dict[str, list]:
    path = _hostile(tmp_path, variant)
    out = tmp_path / "out.pte"
    if variant == "named-data":  # nothing moves in an XNNPACK program: diff it with the original's named data
        shutil.copy(pte_path("v_h_xnnpack"), out)
    else:
        ptd = path.with_suffix(".ptd")
        rewrite_file(path, out, ptd=ptd if ptd.exists() else None)
    commands = {"inspect": ["inspect", path], "rewrite": ["rewrite", path, "-o", tmp_path / "again.pte"],
                "rewrite --dry-run": ["rewrite", "--dry-run", path], "diff": ["diff", out, path],
                "check": ["check", path]}
    if variant in ("names", "data-keys"):  # the runner needs the real kernels and backend
        commands["run"] = ["run", path, "--simulate-devices"]
        commands["validate"] = ["validate", path, out, "--simulate-devices"]
    return commands


def _render(markdown: str) -> str:
    return MarkdownIt("commonmark").enable("table").render(markdown)


def _strings(document: Any) -> list[str]:
    if isinstance(document, dict):
        return [s for k, v in document.items() for s in _strings(k) + _strings(v)]
    if isinstance(document, list):
        return [s for v in document for s in _strings(v)]
    return [document] if isinstance(document, str) else []


@pytest.mark.parametrize("variant", VARIANTS)
def test_hostile_names_are_escaped_in_every_command_and_format(variant: str, tmp_path: Path) -> None:
    ran, showing = set(), set()  # the formats that show a name at all: the escaping is exercised in each
    for name, args in _commands(tmp_path, variant).items():
        for fmt in FORMATS[name]:
            if (tmp_path / "again.pte").exists():
                (tmp_path / "again.pte").unlink()
            result = invoke(*args, "--format", fmt, env={"COLUMNS": "1000"})  # no folded cells
            where = (variant, name, fmt)
            assert result.exit_code in (0, 1), (where, result.exit_code, result.stderr)
            shown = result.stdout + result.stderr
            assert not RAW_TERMINAL.search(shown), (where, shown)
            ran.add((name, fmt))
            if fmt == "json":
                document = json.loads(result.stdout)
                assert all(HOSTILE in s for s in _strings(document) if "alert(1)" in s), where  # exactly, nothing lost
            if fmt == "markdown":
                for raw in RAW_MARKDOWN:
                    assert raw not in result.stdout, (where, raw, result.stdout)
                html = _render(result.stdout)
                assert "<script" not in html and "<img" not in html and "<a " not in html, (where, html)
                if "alert(1)" in html:  # a name is shown: all of it, as text
                    assert "\\x1b[31mred\\u202eevil\\u2066" in html and "[click](http" in html, (where, html)
                    assert "a|b" in html and "*em*" in html and "&lt;img src=x" in html, (where, html)
            if fmt == "text" and "alert(1)" in result.stdout:  # rich markup shown, not applied
                assert "[bold red]loud[/]" in result.stdout.replace("\n", ""), (where, result.stdout)
            if fmt == "github":
                for line in result.stdout.splitlines():
                    assert not line.startswith("::") or re.match(r"::(error|warning|notice)[ :]", line), line
            if "alert(1)" in result.stdout:
                showing.add(fmt)
    assert showing == {"text", "markdown", "json"} | ({"github"} if variant != "named-data" else set()), showing
    expected = {(name, fmt) for name, formats in FORMATS.items() for fmt in formats
                if variant in ("names", "data-keys") or name not in ("run", "validate")}
    assert ran == expected


def test_md_code_and_md_text_render_the_text_itself() -> None:
    from pte_devconst.cli.output import markdown_table, md_code, md_text
    for text in ["a`b", "``x``", "`", "plain", "a|b", "<img src=x>", "&lt;", "[a](https://b)", "*c* _d_ ~e~"]:
        html = _render(markdown_table(["c"], [[md_code(text)]]))
        code = re.search(r"<code>(.*)</code>", html).group(1)
        assert code.replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", '"').replace("&amp;", "&") == text, html
        cell = re.search(r"<td>(.*)</td>", _render(markdown_table(["c"], [[text]]))).group(1)
        assert cell.replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", '"').replace("&amp;", "&") == text
    assert _render(md_text("[a](http://b) *c* <d>")).strip() == "<p>[a](http://b) *c* &lt;d&gt;</p>"
