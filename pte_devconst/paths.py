"""Which files a command line names, and which .ptd goes with each program.

``expand`` turns files, glob patterns (``**`` too) and folders into programs; it walks folders
itself, following links to folders but entering each real folder once, so a symlink loop ends, and
it lists each real file once.  ``pair_data`` gives each program its .ptd: a ``--ptd`` paired with it
by path (never by stem alone), else ``NAME.ptd`` next to ``NAME.pte``.
"""

from __future__ import annotations

import fnmatch
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator, Optional, Sequence, Union

from pte_devconst.schema.ptd_file import sibling_ptd

PathLike = Union[str, "os.PathLike[str]"]
GLOB_CHARS = frozenset("*?[")
Identity = Union[tuple[int, int], Path]


def identity(path: Path) -> Identity:
    """What makes two names the same file: (device, inode) when it exists, else the name itself."""
    try:
        info = os.stat(path)
    except OSError:
        return path
    return info.st_dev, info.st_ino


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


def _match_parts(parts: Sequence[str], pattern: Sequence[str]) -> bool:
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


def walk(root: Path, depth: Optional[int] = None) -> Iterator[Path]:
    """Regular files below ``root`` (at most ``depth`` levels down), following links to folders but entering
    each real folder once: a symlink loop is a folder already seen, not an endless path."""
    seen: set[tuple[int, int]] = set()
    stack = [(root, 0)]
    while stack:
        folder, level = stack.pop()
        try:
            info = os.stat(folder)
            if (info.st_dev, info.st_ino) in seen:
                continue
            seen.add((info.st_dev, info.st_ino))
            entries = sorted(os.scandir(folder), key=lambda e: e.name, reverse=True)
        except OSError:
            continue  # unreadable or vanished: nothing below it
        for entry in entries:
            path = Path(folder, entry.name) if folder != Path(".") else Path(entry.name)
            try:
                if entry.is_dir():
                    if depth is None or level + 1 < depth:
                        stack.append((path, level + 1))
                elif entry.is_file():
                    yield path
            except OSError:
                continue


def glob_files(pattern: str) -> list[Path]:
    """The files a glob pattern (``**`` included) names, found without ever following a symlink loop."""
    parts = Path(pattern).parts
    literal = 0
    while literal < len(parts) - 1 and not (GLOB_CHARS & set(parts[literal])):
        literal += 1
    root = Path(*parts[:literal]) if literal else Path(".")
    rest = parts[literal:]
    depth = None if "**" in rest else len(rest)
    return [path for path in walk(root, depth)
            if _match_parts(path.relative_to(root).parts if literal else path.parts, rest)]


def expand(patterns: Iterable[PathLike]) -> list[Union[Path, str]]:
    """Files (``Path``) and problems (``str``) in argument order; each real file once (links and repeats dropped).

    A name that exists is taken as it is, even with glob characters in it; a folder stands for every
    ``*.pte`` below it; a pattern's ``.ptd`` matches are data files, not programs.
    """
    items: list[Union[Path, str]] = []
    seen: set[Identity] = set()
    for pattern in patterns:
        text = os.fspath(pattern)
        path = Path(text)
        try:
            path.stat()
        except FileNotFoundError:
            pass
        except OSError as error:  # a name the OS refuses (too long, a loop...): a problem, reported with the rest
            items.append(f"{text}: {error.strerror or error}")
            continue
        if path.is_dir():
            matches = sorted(p for p in walk(path) if p.suffix == ".pte")
            if not matches:
                items.append(f"{text}: no .pte file in this directory")
        elif path.exists() or not (GLOB_CHARS & set(text)):
            matches = [path]
        else:
            matches = sorted(p for p in glob_files(text) if p.suffix != ".ptd")
            if not matches:
                items.append(f"{text}: no file matches this pattern")
        for match in matches:
            key = identity(match)
            if key not in seen:
                seen.add(key)
                items.append(match)
    return items


@dataclass(frozen=True)
class DataArgument:
    """One ``--ptd`` argument: ``DATA.ptd``, or ``PROGRAM.pte=DATA.ptd`` to pair it with a program explicitly."""

    data: Path
    program: Optional[Path]
    text: str

    @classmethod
    def parse(cls, argument: PathLike) -> "DataArgument":
        text = os.fspath(argument)
        program, sep, data = text.partition("=")
        if sep and program and data and not Path(text).exists():
            return cls(Path(data), Path(program), text)
        return cls(Path(text), None, text)


def pair_data(programs: Sequence[Path], given: Sequence[DataArgument]) -> tuple[dict[Path, Path], list[str]]:
    """Each program's .ptd, and a problem for every ``--ptd`` that pairs with no program or a paired one.

    By path, never by stem alone: ``PROGRAM=DATA`` pairs with that program, ``a/m.ptd`` with
    ``a/m.pte``, and a single ``--ptd`` with a single program; a program left without one gets
    ``NAME.ptd`` next to it when that exists.
    """
    by_identity = {identity(p): p for p in reversed(programs)}
    pairs: dict[Path, Path] = {}
    problems = []
    for argument in given:
        wanted = argument.program if argument.program is not None else argument.data.with_suffix(".pte")
        program = by_identity.get(identity(wanted))
        if program is None and argument.program is None and len(programs) == 1 and len(given) == 1:
            program = programs[0]
        if program is None:
            problems.append(f"{argument.text}: --ptd matches no program; pair it by path (NAME.ptd for "
                            "NAME.pte) or explicitly: --ptd PROGRAM.pte=DATA.ptd")
        elif program in pairs:
            problems.append(f"{argument.text}: --ptd pairs with {program}, which already has {pairs[program]}")
        else:
            pairs[program] = argument.data
    for program in programs:
        if program not in pairs:
            sibling = sibling_ptd(program)
            if sibling is not None:
                pairs[program] = sibling
    return pairs, problems
