"""JSON that someone else wrote, read within a bound on what it may build.

``json.loads`` builds whatever the text describes: 250 MiB of ``[],`` is 125 million lists (about 7 GB), and
100,000 nested brackets end in a RecursionError inside the C scanner.  A bound on the bytes alone does not help:
the objects, not the bytes, take the memory.  ``BoundedJSON.loads`` first measures the text without building
anything, in C-level passes over its bytes, and refuses text beyond a bound with ``JSONBoundError`` before
``json.loads`` sees it:

- the values: every value or key follows the start of the text, an opening bracket, a comma or a colon, so one
  plus those bytes bounds the values built (separators inside strings only make the bound looser);
- the nesting: the running sum of the brackets outside strings (escaped backslashes and quotes removed, every
  quote left delimits a string), measured only on text that passed the first bound.

One ``BoundedJSON`` is one budget of values, shared by every text it reads (a document and the JSON strings
inside it).  Measuring costs about a quarter of what ``json.loads`` takes on a real document.
"""

from __future__ import annotations

import json
from itertools import accumulate
from typing import Any

MAX_DEPTH = 256  # far below the interpreter's recursion limit, far above any real document's nesting (about 12)

_NOT_QUOTES_OR_BRACKETS = bytes(b for b in range(256) if b not in b'"[]{}')
_STEP = [0] * 256
_STEP[ord("[")] = _STEP[ord("{")] = 1
_STEP[ord("]")] = _STEP[ord("}")] = -1


class JSONBoundError(ValueError):
    """The text would build more values, or nest deeper, than the reader allows (the message says how much)."""


def count_values(data: bytes) -> int:
    """An upper bound on the values ``json.loads(data)`` would build, keys included (linear, allocates nothing)."""
    return 1 + data.count(b",") + data.count(b":") + data.count(b"[") + data.count(b"{")


def nesting(data: bytes) -> int:
    """How deep the containers of ``data`` nest, brackets inside strings not counted (linear; for valid UTF-8,
    where a quote or backslash byte is never part of a longer character)."""
    unescaped = data.replace(b"\\\\", b"").replace(b'\\"', b"")
    # Quotes and brackets only; two adjacent quotes (most strings, once emptied) go as a pair, which keeps every
    # later quote's parity, so the even pieces between quotes are what lies outside strings.
    marks = unescaped.translate(None, _NOT_QUOTES_OR_BRACKETS).replace(b'""', b"")
    if b'"' in marks:
        marks = b"".join(marks.split(b'"')[0::2])
    return max(accumulate(map(_STEP.__getitem__, marks)), default=0)


class BoundedJSON:
    """``json.loads`` within a budget of values (shared by every call) and a depth."""

    def __init__(self, max_values: int, max_depth: int = MAX_DEPTH) -> None:
        self.left = max_values
        self.max_values = max_values
        self.max_depth = max_depth

    def loads(self, data: bytes | str) -> Any:
        """The value ``data`` (UTF-8) holds; ``JSONBoundError`` past a bound, ``ValueError`` for text that is not
        JSON (``UnicodeDecodeError`` and ``json.JSONDecodeError`` are ValueErrors)."""
        raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
        values = count_values(raw)
        if values > self.left:  # with what this budget read before
            raise JSONBoundError(f"JSON of up to {values + self.max_values - self.left:,} values, more than the "
                                 f"{self.max_values:,} this tool builds from one entry")
        depth = nesting(raw)
        if depth > self.max_depth:
            raise JSONBoundError(f"JSON nested {depth:,} deep, more than the {self.max_depth} this tool reads")
        self.left -= values
        return json.loads(data if isinstance(data, str) else data.decode("utf-8"))
