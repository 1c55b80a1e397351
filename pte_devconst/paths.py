"""Which files a command line names, and which .ptd goes with each program.

``expand`` turns files, glob patterns (``**`` too) and folders into programs; it walks folders
itself, following links to folders but entering each real folder once, so a symlink loop ends, and
it lists each name once.  ``pair_data`` gives each program its .ptd: a ``--ptd`` paired with it
by path (never by stem alone), else its sibling (``sibling_ptd``); ``distinct_pairs`` then keeps
each (program, data) pair once: two names of one file are one program only when their data is too.
``programs`` does all of it, for every command and the API: the one way arguments become programs.

**The .ptd rule**, one for every command and the Python API: the .ptd given, else ``NAME.ptd`` in
the folder of ``NAME.pte``; for the rewrite's default output ``NAME.devconst.pte`` (which keeps
its external constants' bytes in the original's .ptd), ``NAME.devconst.ptd`` if there, else the
original's ``NAME.ptd``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Iterator, Mapping, Optional, Sequence, Union

from pte_devconst.util.globs import match_parts, matches_glob
from pte_devconst.util.record import record

if TYPE_CHECKING:
    from pte_devconst.schema.pte_file import ProgramBytes

PathLike = Union[str, "os.PathLike[str]"]
GLOB_CHARS = frozenset("*?[")
Identity = Union[tuple[int, int], Path]
REWRITTEN = ".devconst"  # the rewrite's default output: NAME.pte -> NAME.devconst.pte
NO_PROGRAMS = "no .pte file in this directory"  # a folder named that holds no program: a warning, not an error


def default_output(path: PathLike) -> Path:
    """``model.pte`` -> ``model.devconst.pte`` next to it: where ``rewrite`` writes without ``-o``."""
    p = Path(path)
    return p.with_name(p.stem + REWRITTEN + (p.suffix or ".pte"))


def ptd_candidates(pte: PathLike) -> list[Path]:
    """The .ptd files a program pairs with when none is given, in order (see the module docstring)."""
    path = Path(pte)
    candidates = [path.with_suffix(".ptd")]
    if path.stem.endswith(REWRITTEN) and len(path.stem) > len(REWRITTEN):
        candidates.append(path.with_name(path.stem[: -len(REWRITTEN)] + ".ptd"))
    return candidates


def sibling_ptd(pte: PathLike) -> Optional[Path]:
    """The first of ``ptd_candidates`` that is a file: the data every command pairs by default."""
    for candidate in ptd_candidates(pte):
        try:
            if candidate.is_file():
                return candidate
        except OSError:  # a name the OS refuses: no data there (the program's own name is reported)
            continue
    return None


def data_for(pte: Union[PathLike, ProgramBytes], ptd: Optional[PathLike] = None) -> Optional[Path]:
    """The .ptd a program goes with: ``ptd`` when given, else its sibling (None when there is none, and for a
    program in memory, which has no sibling)."""
    if ptd is not None:
        return Path(ptd)
    return sibling_ptd(pte) if isinstance(pte, (str, os.PathLike)) else None


def rewrite_data_for(rewritten: Union[PathLike, ProgramBytes], original_data: Optional[Path],
                     ptd: Optional[PathLike] = None) -> Optional[Path]:
    """A rewrite's .ptd: ``ptd`` when given, else its own sibling, else the original's data (a rewrite keeps
    external bytes in the original's .ptd, so ``validate a.pte out/b.pte`` needs no second ``--ptd``)."""
    return data_for(rewritten, ptd) or original_data


def ptd_hint(pte: PathLike) -> str:
    """How to give a program its data: ``put model.ptd next to it or pass --ptd FILE.ptd``."""
    names = " or ".join(c.name for c in ptd_candidates(pte))
    return f"put {names} next to it or pass --ptd FILE.ptd"


def identity(path: Path) -> Identity:
    """What makes two names the same file: (device, inode) when it exists, else the name itself."""
    try:
        info = os.stat(path)
    except OSError:
        return path
    return info.st_dev, info.st_ino


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
            if match_parts(path.relative_to(root).parts if literal else path.parts, rest)]


def names_one_file(argument: PathLike) -> bool:
    """Whether a command-line argument names one file: not a folder, and existing or free of glob characters.

    A command given just that prints that program's report alone (the JSON of one program), and reports a
    name the OS refuses in its own words.
    """
    text = os.fspath(argument)
    try:
        if Path(text).is_dir():
            return False
        exists = Path(text).exists()
    except OSError:  # a name too long, a loop: not a folder, and a problem the command reports
        return True
    return exists or not (GLOB_CHARS & set(text))


def expand(patterns: Iterable[PathLike]) -> list[Union[Path, str]]:
    """Files (``Path``) and problems (``str``) in argument order; each name once (repeats dropped).

    Two names of one file (a link, a hard link) both stay: each may have its own .ptd next to it, so
    ``distinct_pairs`` drops a second name only once the data is paired and is the same.

    A name that exists is taken as it is, even with glob characters in it; a folder stands for every
    ``*.pte`` below it; a pattern's ``.ptd`` matches are data files, not programs.
    """
    items: list[Union[Path, str]] = []
    seen: set[Path] = set()
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
                items.append(f"{text}: {NO_PROGRAMS}")
        elif path.exists() or not (GLOB_CHARS & set(text)):
            matches = [path]
        else:
            matches = sorted(p for p in glob_files(text) if p.suffix != ".ptd")
            if not matches:
                items.append(f"{text}: no file matches this pattern")
        for match in matches:
            if match not in seen:
                seen.add(match)
                items.append(match)
    return items


def distinct_pairs(items: Sequence[Union[Path, str]], pairs: dict[Path, Path]
                   ) -> tuple[list[Union[Path, str]], list[str]]:
    """``items`` with each (program, data) pair once, under its first name, and a line for each name left out.

    A file and a link to it with the same .ptd (or none) are one program; with a .ptd each, two (each is
    judged, or rewritten, with its own data).
    """
    kept: list[Union[Path, str]] = []
    left_out: list[str] = []
    first: dict[tuple[Identity, Optional[Identity]], Path] = {}
    for item in items:
        if isinstance(item, Path):
            data = pairs.get(item)
            key = (identity(item), None if data is None else identity(data))
            if key in first:
                left_out.append(f"{item}: skipped, the same file as {first[key]}"
                                + (f" with the same data ({data})" if data is not None else ""))
                continue
            first[key] = item
        kept.append(item)
    return kept, left_out


@record
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
    by_name = set(programs)
    pairs: dict[Path, Path] = {}
    problems = []
    for argument in given:
        wanted = argument.program if argument.program is not None else argument.data.with_suffix(".pte")
        # the name itself first: a link to a program given too is a program of its own, with its own data
        program = wanted if wanted in by_name else by_identity.get(identity(wanted))
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


@record
class Programs:
    """The programs a command line names, in argument order, each with its .ptd: the one way every command
    expands its arguments and pairs data (``programs``)."""

    items: tuple[Union[Path, str], ...]  # a program (Path) or a problem (str: a pattern that matched nothing)
    data: Mapping[Path, Path]  # each program's .ptd, where it has one
    single: bool  # one argument that names one file: its result alone, its errors as they are
    left_out: tuple[str, ...] = ()  # inputs not taken, and why
    problems: tuple[str, ...] = ()  # --ptd arguments that pair with no program (or with one already paired)
    excluded: tuple[Path, ...] = ()  # programs an exclude glob left out
    empty_folders: tuple[str, ...] = ()  # folders named that hold no program (a warning, as ruff: nothing to do)

    @property
    def paths(self) -> list[Path]:
        return [item for item in self.items if isinstance(item, Path)]


def programs(files: Iterable[PathLike], ptd: Iterable[PathLike] = (), *, skip_rewrites: bool = False,
             exclude: Sequence[str] = (), exclude_root: Optional[PathLike] = None) -> Programs:
    """Expand files, glob patterns and folders into programs and pair each with its .ptd (``pair_data``).

    One argument that names one file is taken as it is (``single``).  ``skip_rewrites`` leaves out an input
    that is another input's default output (``models/*.pte`` after a first rewrite also matches
    ``net.devconst.pte``, which is ``net.pte``'s rewrite, not a program to rewrite again); each (program, data)
    pair is kept once (``distinct_pairs``); ``exclude`` globs (relative to ``exclude_root``, ``matches_glob``)
    leave out programs, also ones named explicitly (as ruff's ``--force-exclude``: pre-commit names them).
    """
    arguments, given = list(files), [DataArgument.parse(p) for p in ptd]
    single = len(arguments) == 1 and names_one_file(arguments[0])
    items: list[Union[Path, str]] = [Path(arguments[0])] if single else expand(arguments)
    empty = tuple(i[:-len(NO_PROGRAMS) - 2] for i in items if isinstance(i, str) and i.endswith(f": {NO_PROGRAMS}"))
    items = [i for i in items if not (isinstance(i, str) and i.endswith(f": {NO_PROGRAMS}"))]
    left_out: list[str] = []
    if skip_rewrites and len(items) > 1:
        outputs = {identity(default_output(i)) for i in items if isinstance(i, Path)}
        kept = [i for i in items if not isinstance(i, Path) or identity(i) not in outputs]
        left_out = [f"{i}: skipped, it is the rewrite of another input" for i in items if i not in kept]
        items = kept
    pairs, problems = pair_data([i for i in items if isinstance(i, Path)], given)
    if not single:
        items, same = distinct_pairs(items, pairs)
        left_out += same
    excluded = [i for i in items if isinstance(i, Path) and any(matches_glob(i, g, exclude_root) for g in exclude)]
    if excluded:
        items = [i for i in items if i not in excluded]
    return Programs(tuple(items), pairs, single and bool(items), tuple(left_out), tuple(problems), tuple(excluded),
                    empty)
