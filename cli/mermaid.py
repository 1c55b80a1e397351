"""A Mermaid flowchart for the markdown reports: which constants reach which device, and how, before and after.

GitHub renders a fenced ``mermaid`` block as a diagram, so a pull request that changes a model shows, per
method, the constants copied host-to-device on every call (grouped by the way they travel: copied as they
are, or computed by host kernels first), the device and delegates they reach, and what the rewrite made of
them (in device memory from the load on, or still copied).  Only the largest groups are drawn, the rest are
one "N more" node, so the picture stays readable on a model with thousands of constants.  Every label is
file-derived text made printable with Mermaid's special characters as entity codes (``#34;``), so a name
with quotes, brackets or backticks can neither break the diagram nor end the code fence.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Optional, Sequence

from pte_devconst.util.units import human_bytes, listing, plural
from pte_devconst.cli.output import printable

if TYPE_CHECKING:
    from pte_devconst.types import Flow, MethodFlows

GROUPS_SHOWN = 4  # per side; the others are one node
NAMES_SHOWN = 3  # per group; "and N more"
OPS_SHOWN = 2
DELEGATES_SHOWN = 4  # delegate numbers on a device's node

# Characters Mermaid reads as syntax (quotes end a label, brackets and braces shape nodes, | ends an edge
# label, # starts an entity, < > & are HTML in labels, ` starts a markdown string and could end the fence).
_ENTITY = {ch: f"#{ord(ch)};" for ch in '"#<>&`|[]{}'}


_LINKS = re.compile(r"(?i)://|\bwww\.")  # what a renderer could turn into a link: the ':' or the '.' goes


def mermaid_text(text: object) -> str:
    """File-derived text for a quoted Mermaid label: printable, every special character an entity code, and no
    URL a renderer could make a link of (``http#58;//``, ``www#46;``)."""
    escaped = "".join(_ENTITY.get(ch, ch) for ch in printable(text))
    return _LINKS.sub(lambda match: "#58;//" if match.group() == "://" else match.group()[:3] + "#46;", escaped)


class _Group:
    """The flows of one route, device and residence, summed as they are added (working state, util/record.py)."""

    __slots__ = ("route", "device", "resident", "names", "delegates", "copies", "nbytes", "bytes_per_call")

    def __init__(self, route: str, device: str, resident: Optional[bool]) -> None:
        self.route = route
        self.device = device
        self.resident = resident
        self.names: list[str] = []
        self.delegates: list[str] = []
        self.copies = 0
        self.nbytes = 0
        self.bytes_per_call = 0

    def add(self, flow: "Flow") -> None:
        for name in flow.sources:
            if name not in self.names:
                self.names.append(name)
        for delegate in flow.delegates:
            if delegate not in self.delegates:
                self.delegates.append(delegate)
        self.copies += 1
        self.nbytes += flow.nbytes
        self.bytes_per_call += flow.bytes_per_call

    @property
    def target(self) -> str:
        """``cuda:0: delegate 0 (Backend)``; several delegates by number (a model has one per layer)."""
        if not self.delegates:
            return self.device
        ordered = sorted(self.delegates, key=lambda d: int(d.split()[1]) if d.split()[1].isdigit() else 0)
        if len(ordered) <= 2:
            return f"{self.device}: " + ", ".join(ordered)
        backends = sorted({d.split(" ", 2)[2] for d in ordered if d.count(" ") >= 2})
        numbers = [d.split()[1] for d in ordered]
        shown = listing(numbers, DELEGATES_SHOWN)
        return f"{self.device}: delegates {shown} {' '.join(backends)}".rstrip()


def _short(op: str) -> str:
    """``aten::permute_copy.out`` -> ``permute_copy``."""
    return op.split("::")[-1].split(".")[0]


def _route(flow: "Flow") -> str:
    if not flow.host_ops:
        return "copied every call"
    ops = list(dict.fromkeys(_short(op) for op in flow.host_ops))
    shown = listing(ops, OPS_SHOWN)
    return f"host kernels {shown}, then copied every call"


def _groups(flows: Sequence["Flow"]) -> list[_Group]:
    """Flows grouped by how they travel, to which device, and what became of them; the moved ones first, then
    the largest (the delegates each group reaches are listed on its device's node)."""
    groups: dict[tuple[Any, ...], _Group] = {}
    for flow in sorted(flows, key=lambda f: -f.bytes_per_call):
        key = (_route(flow), flow.device, flow.resident)
        groups.setdefault(key, _Group(*key)).add(flow)
    return sorted(groups.values(), key=lambda g: (not g.resident, -g.bytes_per_call))


def _names(group: _Group) -> str:
    shown = group.names[:NAMES_SHOWN]
    more = len(group.names) - len(shown)
    return ", ".join(shown) + (f" and {more} more" if more else "")


def _side(prefix: str, title: str, groups: list[_Group], after: bool) -> list[str]:
    """One subgraph: the largest groups, the rest as one node, each with an edge to its device."""
    lines = [f'  subgraph {prefix}["{mermaid_text(title)}"]', "    direction LR"]
    targets: dict[str, str] = {}
    shown, rest = groups[:GROUPS_SHOWN], groups[GROUPS_SHOWN:]
    for index, group in enumerate(shown):
        node = f"{prefix}{index}"
        target = targets.setdefault(group.target, f"{prefix}T{len(targets)}")
        size = f"{plural(group.copies, 'value')}, {human_bytes(group.nbytes)}"
        lines.append(f'    {node}["{mermaid_text(_names(group))}<br/>{mermaid_text(size)}"]')
        if after and group.resident:
            lines.append(f'    {node} ==>|"{mermaid_text("in device memory, loaded once")}"| {target}')
        else:
            edge = f"{group.route}: {human_bytes(group.bytes_per_call)}"
            lines.append(f'    {node} -->|"{mermaid_text(edge)}"| {target}')
    if rest:
        copies, nbytes = sum(g.copies for g in rest), sum(g.nbytes for g in rest)
        more = mermaid_text(f"{plural(len(rest), 'more group')}: {plural(copies, 'value')}, {human_bytes(nbytes)}")
        lines.append(f'    {prefix}M["{more}"]')
    for name, node in targets.items():
        lines.append(f'    {node}["{mermaid_text(name)}"]')
    lines.append("  end")
    return lines


def method_diagram(method: "MethodFlows", index: int = 0) -> list[str]:
    """A fenced ``mermaid`` block for one method: per-call copies now and, when there is an after, after."""
    flows = list(method.flows)
    if not flows:
        return []
    prefix = f"m{index}"
    lines = ["```mermaid", "flowchart LR"]
    has_after = any(f.resident is not None for f in flows)
    lines += _side(f"{prefix}b", f"{method.method}: before" if has_after else f"{method.method}: every call",
                   _groups([replace(f, resident=None) for f in flows]), after=False)
    if has_after:
        lines += _side(f"{prefix}a", f"{method.method}: after", _groups(flows), after=True)
    lines.append("```")
    return lines


def diagrams(methods: Sequence["MethodFlows"], heading: str) -> list[str]:
    """Markdown lines: ``heading`` and one diagram per method with per-call copies (nothing when none has)."""
    blocks: list[str] = []
    for index, method in enumerate(methods):
        block = method_diagram(method, index)
        if block:
            blocks += block + [""]
    return [heading, ""] + blocks if blocks else []
