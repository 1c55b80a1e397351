"""Glob patterns matched against paths, without touching the disk: ``*`` and ``?`` stay within a folder, ``**``
crosses folders, and neither matches a hidden name unless the pattern spells its dot (as ``glob`` does).

Below every layer because two of them match: ``paths`` expands a command line's patterns, and the gate
(``gate/check.py``) matches a project's accepted findings (``[[tool.pte-devconst.accept]]``) to programs.
"""

from __future__ import annotations

import fnmatch
import os
from pathlib import Path
from typing import Optional, Sequence, Union

__all__ = ["match_parts", "matches_glob"]

PathLike = Union[str, "os.PathLike[str]"]


def _matches(name: str, pattern: str) -> bool:
    """One path component against one glob component; like ``glob``, ``*`` does not match a leading dot."""
    if name.startswith(".") and not pattern.startswith("."):
        return False
    return fnmatch.fnmatchcase(name, pattern)


def _after_stars(pattern: Sequence[str], k: int) -> list[int]:
    """Position ``k`` and every position reached by letting the ``**`` components from ``k`` on match nothing."""
    positions = [k]
    while k < len(pattern) and pattern[k] == "**":
        k += 1
        positions.append(k)
    return positions


def match_parts(parts: Sequence[str], pattern: Sequence[str]) -> bool:
    """Whether path components match glob components, ``**`` matching any number of (non-hidden) folders."""
    reachable = {0}  # pattern positions the components so far can have reached
    for part in parts:
        nxt = set()
        for k in reachable:
            for j in _after_stars(pattern, k):
                if j < len(pattern):
                    if pattern[j] == "**":
                        if not part.startswith("."):
                            nxt.add(j)
                    elif _matches(part, pattern[j]):
                        nxt.add(j + 1)
        reachable = nxt
        if not reachable:
            return False
    return any(len(pattern) in _after_stars(pattern, k) for k in reachable)


def matches_glob(path: PathLike, pattern: str, root: Optional[PathLike] = None) -> bool:
    """Whether ``pattern`` (a glob: ``*`` and ``?`` stay within a folder, ``**`` crosses folders) names ``path``
    or a folder above it.  A relative pattern is relative to ``root`` (a config file's folder; default: the working
    folder), an absolute one is matched as it is; ``models/legacy`` matches every file below that folder."""
    base = Path(root) if root is not None else Path.cwd()
    absolute = Path(os.path.abspath(path))
    target = Path(os.path.abspath(base / pattern)) if not os.path.isabs(pattern) else Path(pattern)
    wanted = target.parts
    candidate = absolute.parts
    for end in range(len(candidate), 0, -1):
        if match_parts(candidate[:end], wanted):
            return True
    return False
