"""The Mermaid picture of the markdown reports: present where it helps, well-formed, escaped, and small.

Each diagram is parsed here with the grammar the renderer promises (a subset of Mermaid's flowchart syntax):
``flowchart LR``, subgraphs with quoted titles, quoted node labels, quoted edge labels, every edge between
declared nodes, subgraphs closed.  A quote, bracket, brace, pipe, ``<``, ``>``, ``#`` or backtick from a file
may appear in a label only as an entity code.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cli_runner import invoke
from conftest import pte_path

from pte_devconst.cli.mermaid import GROUPS_SHOWN, method_diagram, mermaid_text
from pte_devconst.rewriter.flows import Flow, MethodFlows

HERE = Path(__file__).parent / "fixtures" / "names"
PTE, RECORD = HERE / "mixed.pte", HERE / "mixed.etrecord"

LABEL = r'"((?:[^"\[\]{}|`<>#]|#\d+;|<br/>)*)"'
SUBGRAPH = re.compile(rf"^\s*subgraph (\w+)\[{LABEL}\]$")
NODE = re.compile(rf"^\s*(\w+)\[{LABEL}\]$")
EDGE = re.compile(rf"^\s*(\w+) (-->|==>)\|{LABEL}\| (\w+)$")


def blocks(markdown: str) -> list[list[str]]:
    found = re.findall(r"^```mermaid\n(.*?)\n```$", markdown, flags=re.S | re.M)
    return [block.split("\n") for block in found]


def parse(block: list[str]) -> dict:
    """nodes (id -> label), edges (from, kind, label, to), subgraphs (id -> title); AssertionError if malformed."""
    assert block[0] == "flowchart LR", block[0]
    nodes: dict[str, str] = {}
    edges, subgraphs, depth = [], {}, 0
    for line in block[1:]:
        if line.strip() == "direction LR":
            continue
        if line.strip() == "end":
            depth -= 1
            assert depth >= 0, "end without subgraph"
        elif match := SUBGRAPH.match(line):
            subgraphs[match[1]] = match[2]
            depth += 1
        elif match := EDGE.match(line):
            edges.append((match[1], match[2], match[3], match[4]))
        elif match := NODE.match(line):
            assert match[1] not in nodes, f"node {match[1]} declared twice"
            nodes[match[1]] = match[2]
        else:
            raise AssertionError(f"not a line of the diagram grammar: {line!r}")
    assert depth == 0, "a subgraph is not closed"
    for source, _, _, target in edges:
        assert source in nodes and target in nodes, (source, target)
    return {"nodes": nodes, "edges": edges, "subgraphs": subgraphs}


def test_rewrite_and_diff_markdown_draw_before_and_after(tmp_path: Path) -> None:
    out = tmp_path / "out.pte"
    done = invoke("rewrite", PTE, "-o", out, "--etrecord", RECORD, "--format", "markdown")
    assert done.exit_code == 0
    (block,) = blocks(done.stdout)
    diagram = parse(block)
    assert sorted(diagram["subgraphs"].values()) == ["forward: after", "forward: before"]
    before = [e for e in diagram["edges"] if e[0].startswith("m0b")]
    after = [e for e in diagram["edges"] if e[0].startswith("m0a")]
    # Before: the two proj constants copied every call to the delegate on cuda:0; after: resident.
    assert [e[1] for e in before] == ["-->"] and "copied every call" in before[0][2]
    assert [e[1] for e in after] == ["==>"] and "loaded once" in after[0][2]
    group = diagram["nodes"][before[0][0]]
    assert "proj.weight" in group and "proj.bias" in group and "2 values, 288 B" in group
    assert diagram["nodes"][before[0][3]].startswith("cuda:0: delegate 1")

    diffed = invoke("diff", PTE, out, "--etrecord", RECORD, "--format", "markdown")
    (block,) = blocks(diffed.stdout)
    assert parse(block)["nodes"] == diagram["nodes"]
    # No diagram where nothing changes how constants travel, nor in the other formats.
    assert blocks(invoke("diff", PTE, PTE, "--format", "markdown").stdout) == []
    assert "mermaid" not in invoke("rewrite", PTE, "-o", out, "--etrecord", RECORD).stdout


def _flow(value: int, name: str, ops: tuple[str, ...] = (), nbytes: int = 64, resident: bool = True) -> Flow:
    return Flow(value, (name,), ops, "cuda:0", ("delegate 0 (Be]ck`end)",), nbytes, 1, resident)


def test_hostile_names_are_entities_and_cannot_end_the_fence() -> None:
    hostile = 'w"]) --> X[pwn] ```\n<script>|#x'
    block = method_diagram(MethodFlows('m"[1]', (_flow(0, hostile),)))
    assert block[0] == "```mermaid" and block[-1] == "```" and "```" not in "".join(block[1:-1])
    diagram = parse(block[1:-1])
    text = " ".join(diagram["nodes"].values())
    assert "#34;" in text and "#91;" in text and "#96;" in text and "#60;" in text and "#124;" in text
    assert mermaid_text('a"b') == "a#34;b" and mermaid_text("\x1b[31m") == "\\x1b#91;31m"


def test_a_large_method_shows_the_largest_groups_and_counts_the_rest() -> None:
    flows = tuple(_flow(i, f"layers.{i}.weight", (f"aten::op{i % 9}.out",), nbytes=1000 * (i + 1))
                  for i in range(300))
    diagram = parse(method_diagram(MethodFlows("forward", flows))[1:-1])
    groups = [n for n in diagram["nodes"] if re.fullmatch(r"m0[ba]\d+", n)]
    assert len(groups) == 2 * GROUPS_SHOWN
    more = diagram["nodes"]["m0bM"]
    assert more.startswith(f"{9 - GROUPS_SHOWN} more groups: ")
    biggest = diagram["nodes"]["m0b0"]
    assert "layers.299.weight" in biggest and "more<br/>" in biggest  # the largest first, the rest counted
    assert sum(len(v) for v in diagram["nodes"].values()) < 3000  # readable: bounded, whatever the model


@pytest.mark.parametrize("resident", [None, False])
def test_without_an_after_or_a_move_nothing_is_drawn_as_resident(resident) -> None:  # type: ignore[no-untyped-def]
    block = method_diagram(MethodFlows("forward", (_flow(0, "w", resident=resident),)))
    diagram = parse(block[1:-1])
    assert all(kind == "-->" for _, kind, _, _ in diagram["edges"])
    assert len(diagram["subgraphs"]) == (1 if resident is None else 2)


def test_inspect_markdown_draws_what_is_copied_now() -> None:
    shown = invoke("inspect", PTE, "--etrecord", RECORD, "--format", "markdown")
    (block,) = blocks(shown.stdout)
    diagram = parse(block)
    assert list(diagram["subgraphs"].values()) == ["forward: every call"]
    assert [kind for _, kind, _, _ in diagram["edges"]] == ["-->"]
    assert blocks(invoke("inspect", pte_path("v_h_cpu_only"), "--format", "markdown").stdout) == []
