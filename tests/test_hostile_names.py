"""Names from a file never reach a terminal or a markdown report raw, in any command.

Two corpus programs get hostile names: method and tensor names (which every command shows, including
``run`` and ``validate``, which execute the program) and operator and backend names (shown by the
analysing commands).  Each name carries a backtick, ``<script>``, a markdown link, a bare URL, an ANSI
escape sequence and bidi controls.  Terminal output must show the control characters escaped; markdown
output, rendered by a CommonMark parser with GitHub's tables, must hold no HTML tag and no link.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from cli_runner import invoke
from conftest import pte_path
from pte_devconst.rewriter.rewrite import rewrite_file
from pte_devconst.schema import model as m
from pte_devconst.schema.pte_file import PteFile

try:
    from fuzz.mutate import assemble_pte
except ImportError:
    from tests.fuzz.mutate import assemble_pte

HOSTILE = "x`y<script>alert(1)</script>[click](http://evil.example) www.evil.example \x1b[31mred\u202eevil\u2066"
RAW_TERMINAL = re.compile("[\x1b\x07\u202a-\u202e\u2066-\u2069\u200e\u200f]")


def _hostile(tmp_path: Path, kernels: bool) -> Path:
    """v_c_shared_host_copy with hostile method and tensor names, or (``kernels``) operator and backend names."""
    data = pte_path("v_c_shared_host_copy").read_bytes()
    with PteFile.from_bytes(data) as pte:
        program = pte.program
    plan = program.execution_plan[0]
    if kernels:
        operators = tuple(replace(op, name=f"{op.name}{HOSTILE}") if op.name == "aten::mul" else op
                          for op in plan.operators)
        delegates = tuple(replace(d, id=f"{d.id}{HOSTILE}") for d in plan.delegates)
        plan = replace(plan, operators=operators, delegates=delegates)
    else:
        values = tuple(replace(v, extra_tensor_info=m.ExtraTensorInfo(fully_qualified_name=f"w{i}{HOSTILE}"))
                       if isinstance(v, m.Tensor) and v.is_constant else v for i, v in enumerate(plan.values))
        plan = replace(plan, name=f"fwd{HOSTILE}", values=values)
    path = tmp_path / ("kernels.pte" if kernels else "names.pte")
    path.write_bytes(assemble_pte(replace(program, execution_plan=(plan,)), data))
    return path


def _commands(tmp_path: Path, kernels: bool) -> dict[str, list]:
    path = _hostile(tmp_path, kernels)
    out = tmp_path / "out.pte"
    rewrite_file(path, out)
    commands = {"inspect": ["inspect", path], "rewrite": ["rewrite", path, "-o", tmp_path / "again.pte"],
                "rewrite --dry-run": ["rewrite", "--dry-run", path], "diff": ["diff", path, out],
                "check": ["check", path]}
    if not kernels:  # the runner needs the real kernels and backend
        commands["run"] = ["run", path, "--simulate-devices"]
        commands["validate"] = ["validate", path, out, "--simulate-devices"]
    return commands


def _render(markdown: str) -> str:
    return MarkdownIt("commonmark").enable("table").render(markdown)


@pytest.mark.parametrize("kernels", [False, True], ids=["method-and-tensor-names", "operator-and-backend-names"])
@pytest.mark.parametrize("fmt", ["text", "markdown"])
def test_hostile_names_are_escaped_in_every_command(kernels: bool, fmt: str, tmp_path: Path) -> None:
    for name, args in _commands(tmp_path, kernels).items():
        result = invoke(*args, "--format", fmt)
        assert result.exit_code in (0, 1), (name, result.exit_code, result.stderr)
        shown = result.stdout + result.stderr
        assert not RAW_TERMINAL.search(shown), (name, fmt, shown)
        html = _render(result.stdout) if fmt == "markdown" else shown
        # where the names appear at all: operator and backend names only in the constants' "read by"/"why" columns
        shows_names = not kernels or name == "inspect" or fmt == "text" and name.startswith("rewrite")
        if shows_names:
            assert "\\x1b[31mred\\u202eevil\\u2066" in html, (name, fmt, "the name is shown, escaped")
        if fmt == "markdown":
            assert "<script" not in html and "<a " not in html, (name, html)
            assert "alert(1)" in html or not shows_names  # the text is there, as text
            outside_code = re.sub(r"(`+)(?:(?!\1).)+\1", "", result.stdout)
            assert "http://" not in outside_code and "www.evil" not in outside_code, (name, outside_code)


def test_md_code_fences_any_number_of_backticks() -> None:
    from pte_devconst.cli.output import md_code, md_text
    for text in ["a`b", "``x``", "`", "plain", "a|b"]:
        html = _render(f"| c |\n|---|\n| {md_code(text).replace('|', chr(92) + '|')} |")
        code = re.search(r"<code>(.*)</code>", html).group(1)
        assert code.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&").strip() == text.strip(), html
    assert _render(md_text("[a](http://b) *c* <d>")).strip() == "<p>[a](http://b) *c* &lt;d&gt;</p>"
