"""The one formatter of counts and byte figures in every report: ``4 constants``, ``3.2 KiB``, ``3,232 B``.

Two spellings of a byte figure, never others: ``human_bytes`` (binary units, one decimal: sizes and summaries)
and ``exact_bytes`` (every byte, with thousands separators: what validate, the gate's messages and markdown
tables compare).  A count is ``plural(n, "constant")``, never ``constant(s)``; a list that leaves items out
says how many (``listing``).
"""

from __future__ import annotations

from typing import Iterable, Optional

__all__ = ["exact_bytes", "human_bytes", "listing", "plural", "plural_word"]

# Nouns whose plural is not the noun with an ``s``: every irregular one a report counts.
_IRREGULAR = {"entry": "entries", "copy": "copies", "dependency": "dependencies"}


def plural_word(count: int, word: str, many: Optional[str] = None) -> str:
    """``word`` as ``count`` wants it: ``constant``/``constants``, ``entry``/``entries`` (``many`` overrides)."""
    if count == 1:
        return word
    if many is not None:
        return many
    if word in _IRREGULAR:
        return _IRREGULAR[word]
    head, space, last = word.rpartition(" ")
    if space:  # "initial-data entry" -> "initial-data entries", "copy instruction" -> "copy instructions"
        return f"{head} {plural_word(count, last)}"
    if last.endswith(("s", "x", "sh", "ch")):
        return last + "es"
    return last + "s"


def plural(count: int, word: str, many: Optional[str] = None) -> str:
    """``4 constants``, ``1 constant``, ``1,024 entries``: a count with its noun."""
    return f"{count:,} {plural_word(count, word, many)}"


def human_bytes(count: int) -> str:
    """1536 -> ``1.5 KiB``; exact below 1 KiB (``512 B``).  Sizes and summaries."""
    if count < 1024:
        return f"{count} B"
    value = float(count)
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        value /= 1024
        if value < 1024:
            return f"{value:.1f} {unit}"
    return f"{value:.1f} PiB"


def exact_bytes(count: int) -> str:
    """``3,232 B``: every byte, for figures a reader compares; from 1 MiB on also readable (``2,097,152 B
    (2.0 MiB)``)."""
    return f"{count:,} B" if count < 1 << 20 else f"{count:,} B ({human_bytes(count)})"


def listing(items: Iterable[str], shown: int = 3, total: Optional[int] = None, conjunction: str = ", ") -> str:
    """The first ``shown`` items and how many more: ``a.pte, b.pte, c.pte and 10 more`` (with another conjunction,
    for items that hold commas: ``a; b; and 10 more``).

    ``total`` is the whole count when ``items`` holds only some of them (a generator cut short).
    """
    head: list[str] = []
    count = 0
    for item in items:
        if count < shown:
            head.append(item)
        count += 1
    rest = (total if total is not None else count) - len(head)
    before = " " if conjunction == ", " else conjunction  # "a, b and 3 more"; "a; b; and 3 more" (items with commas)
    if rest <= 0:
        return conjunction.join(head)
    if head:
        return conjunction.join(head) + f"{before}and {rest:,} more"
    return f"{rest:,} more"

