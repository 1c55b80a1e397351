"""Markdown reports sized for where they go: a pull-request comment holds at most 65,536 characters.

Every command's markdown goes through ``fit``: a report that fits is printed whole; one that does not keeps
every block's heading and cuts the longest bodies to one length, each at a line where nothing is left open
(never inside a code fence, never a table's header without its rows; a cut ``<details>`` is closed), with a
line saying how much was left out and that ``--format json`` has the full report.  When even the bare blocks
do not fit, the last ones are left out, with a line saying how many.
"""

from __future__ import annotations

from typing import Sequence

from pte_devconst.util.record import record
from pte_devconst.util.units import plural

__all__ = ["Block", "MARKDOWN_LIMIT", "cut_lines", "fit", "fit_blocks"]

# GitHub refuses a pull-request comment (and an issue body) over 65,536 characters; the step summary takes 1 MiB.
MARKDOWN_LIMIT = 65_536

CUT_NOTE = ("*… and {more} ({chars:,} characters) left out to keep the report under {limit:,} characters; "
            "`--format json` has the full report.*")
LEFT_NOTE = ("*… and {more} left out to keep the report under {limit:,} characters; `--format json` has the full "
             "report.*")
LEAST_BODY = 600  # a body cut shorter than this says too little: fewer blocks are shown instead


@record
class Block:
    """A part of a report that may be cut: its heading (always kept), its body (cut from the end), its closing."""

    head: tuple[str, ...]
    body: tuple[str, ...]
    tail: tuple[str, ...] = ()

    @classmethod
    def of(cls, lines: Sequence[str], head: int = 1) -> "Block":
        """A report's lines as a block (an item holding several lines, a table, is split): the first ``head``
        lines are its heading."""
        split = [line for item in lines for line in item.split("\n")]
        return cls(tuple(split[:head]), tuple(split[head:]))

    @property
    def bare(self) -> int:
        return _chars(self.head) + _chars(self.tail)

    @property
    def size(self) -> int:
        return self.bare + _chars(self.body)


def _chars(lines: Sequence[str]) -> int:
    return sum(len(line) + 1 for line in lines)


def _cut_points(lines: Sequence[str]) -> list[tuple[int, int, int]]:
    """Where ``lines`` may be cut: (lines kept, their characters, ``<details>`` left open), in order.

    Not inside a code fence (a Mermaid diagram), not after a table's header or its separator row (a header
    without rows reads as a broken table)."""
    points = [(0, 0, 0)]
    fence, depth, used = False, 0, 0
    for index, line in enumerate(lines):
        used += len(line) + 1
        if line.lstrip().startswith("```"):
            fence = not fence
        depth = max(0, depth + line.count("<details>") - line.count("</details>"))
        following = lines[index + 1] if index + 1 < len(lines) else ""
        if fence or line.startswith("|-") or following.startswith("|-"):
            continue
        points.append((index + 1, used, depth))
    return points


def cut_lines(lines: Sequence[str], budget: int) -> tuple[list[str], int]:
    """The longest head of ``lines`` that fits ``budget`` characters where a cut leaves nothing open, with the
    ``</details>`` it needs to close; and how many lines were left out."""
    best = (0, 0, 0)
    for point in _cut_points(lines):
        kept, used, depth = point
        if used + depth * len("</details>\n") > budget:
            break
        best = point
    kept, _, depth = best
    return list(lines[:kept]) + ["</details>"] * depth, len(lines) - kept


def _note_room(limit: int) -> int:
    return len(CUT_NOTE.format(more=plural(10 ** 9, "line"), chars=10 ** 12, limit=limit)) + 4


def fit_blocks(blocks: Sequence[Block], budget: int, limit: int = MARKDOWN_LIMIT, what: str = "file") -> list[str]:
    """The blocks' lines within ``budget`` characters: while they do not fit, the longest bodies are cut to one
    length (the largest that fits), each with a line saying how much was cut; when even the bare blocks do not
    fit, the last ones are left out, with a line saying how many ``what``\\s."""
    room = _note_room(limit)
    bodies = [_chars(block.body) for block in blocks]
    if sum(block.size for block in blocks) <= budget:
        return [line for block in blocks for line in (*block.head, *block.body, *block.tail)]

    def total(kept: int, cap: int) -> int:
        return sum(b.bare + min(n, cap) + (room if n > cap else 0) for b, n in zip(blocks[:kept], bodies[:kept]))

    kept, used = 0, 0
    left_room = len(LEFT_NOTE) + 40
    for block, n in zip(blocks, bodies):  # as many blocks as fit with a useful part of each body (else the last go)
        need = block.bare + min(n, LEAST_BODY) + (room if n > LEAST_BODY else 0)
        if used + need > budget - (left_room if kept + 1 < len(blocks) else 0):
            break
        kept, used = kept + 1, used + need
    low, high = 0, max(bodies[:kept], default=0)
    while low < high:  # the largest length every body is cut to that fits
        middle = (low + high + 1) // 2
        low, high = (middle, high) if total(kept, middle) <= budget - left_room else (low, middle - 1)
    lines: list[str] = []
    for block, size in zip(blocks[:kept], bodies[:kept]):
        lines += block.head
        if size <= low:
            lines += block.body
        else:
            shown, left = cut_lines(block.body, low)
            cut = block.body[len(block.body) - left:]
            lines += shown + ["", CUT_NOTE.format(more=plural(left, "more line"), chars=_chars(cut), limit=limit), ""]
        lines += block.tail
    if kept < len(blocks):
        lines += ["", LEFT_NOTE.format(more=plural(len(blocks) - kept, f"more {what}"), limit=limit)]
    return lines


def fit(blocks: Sequence[Block], limit: int = MARKDOWN_LIMIT, what: str = "program") -> str:
    """A whole report (its blocks one after another, a blank line between) under ``limit`` characters."""
    spaced = [Block(b.head, b.body, (*b.tail, "")) if i + 1 < len(blocks) else b for i, b in enumerate(blocks)]
    return "\n".join(fit_blocks(spaced, limit - 1, limit, what))
