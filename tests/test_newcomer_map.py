"""The newcomer's map: every file README.md and docs/design.md name in their tables exists, and each of the six
tasks a newcomer comes with starts in one module.

The tables read: README.md's "How it is organised" (the folder table and "Where to change what") and
docs/design.md's "Where to change what".  A path is a backticked name with a ``/`` (``runner/delegates.py``,
``util/``, ``cli/*_cmd.py``) or an import name (``pte_devconst.runner``); the rest of a cell is prose.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from test_layers import FOLDERS

ROOT = Path(__file__).resolve().parents[1]
# pyproject's package-dir: the import name's first part after pte_devconst is a top-level folder
PACKAGE_FOLDERS = set(FOLDERS) - {"pte_devconst"}
# The six tasks (issue 29): README's label -> the module that task starts in.  The map may say more; these stay.
TASKS = {
    "a kernel that folds": "rewriter/fold/kernels.py",
    "a report format": "cli/formats.py",
    "a check in the gate": "gate/rules.py",
    "a field in the format": "schema/fbs/program.fbs",
    "a delegate executor": "runner/delegates.py",
    "the device-memory layout": "program/layout.py",
    "a runtime encoding": "rewriter/encodings/base.py",
}
DESIGN_LABELS = {"a field in the format": "a field in the `.fbs`"}  # where design.md words a task otherwise
# Dotted names in the tables that are no import name: name -> the source line that says what it is.
NOT_MODULES = {"pte_devconst.delegate_executors": ("runner/delegates.py",
                                                   'ENTRY_POINT_GROUP = "pte_devconst.delegate_executors"')}
PATH = re.compile(r"^[\w.*-]+(/[\w.*-]*)+$")
IMPORT_NAME = re.compile(r"^pte_devconst(\.\w+)*$")


def section(text: str, start: str, end: str) -> str:
    """The text from the line ``start`` begins to the next line ``end`` begins."""
    lines = text.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith(start))
    last = next((i for i in range(first + 1, len(lines)) if lines[i].startswith(end)), len(lines))
    return "\n".join(lines[first:last])


def tables(text: str) -> list[list[list[str]]]:
    """Each markdown table in ``text``: its rows (header first, the ``|---|`` line left out), each a list of cells."""
    found: list[list[list[str]]] = []
    current: list[list[str]] = []
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
            if not all(set(cell) <= set("-: ") for cell in cells):
                current.append(cells)
        elif current:
            found.append(current)
            current = []
    return found


def named_paths(cell: str) -> list[str]:
    """The paths and import names a cell names, in order (``cli/formats.py: Fact`` names ``cli/formats.py``)."""
    names = []
    for quoted in re.findall(r"`([^`]+)`", cell):
        for word in re.split(r"[\s:,()]+", quoted):
            word = word.rstrip(".")
            if (PATH.match(word) or IMPORT_NAME.match(word)) and word not in NOT_MODULES:
                names.append(word)
    return names


def exists(name: str) -> bool:
    """A path of the checkout (a glob: one file at least), or an import name of the package."""
    if IMPORT_NAME.match(name):
        parts = name.split(".")[1:]
        if not parts:
            return (ROOT / "pte_devconst").is_dir()
        base = ROOT / (parts[0] if parts[0] in PACKAGE_FOLDERS else f"pte_devconst/{parts[0]}")
        target = base.joinpath(*parts[1:]) if parts[0] in PACKAGE_FOLDERS else base
        return target.is_dir() or target.with_suffix(".py").is_file()
    if any(ch in name for ch in "*?["):
        return any(ROOT.glob(name))
    return (ROOT / name).exists()


def map_tables() -> dict[str, list[list[list[str]]]]:
    readme = section((ROOT / "README.md").read_text(), "## How it is organised", "## ")
    design = section((ROOT / "docs" / "design.md").read_text(), "**Where to change what.**", "**")
    return {"README.md": tables(readme), "docs/design.md": tables(design)}


def missing_paths(found: dict[str, list[list[list[str]]]]) -> list[str]:
    """``document: row: name`` for each path or import name a table names that the checkout does not have (in a
    folder's row, a path may be relative to that folder: ``fold/kernels.py`` in ``rewriter/``'s)."""
    missing = []
    for document, document_tables in found.items():
        for table in document_tables:
            for row in table[1:]:
                folders = [name for name in named_paths(row[0]) if name.endswith("/")]
                for name in (name for cell in row for name in named_paths(cell)):
                    if not exists(name) and not any(exists(folder + name) for folder in folders):
                        missing.append(f"{document}: {row[0]}: {name}")
    return missing


def test_every_path_the_maps_name_exists() -> None:
    found = map_tables()
    assert len(found["README.md"]) == 2 and len(found["docs/design.md"]) == 1, "a map table went missing"
    named = [name for tables_ in found.values() for table in tables_ for row in table for c in row
             for name in named_paths(c)]
    assert len(named) > 40  # the tables were read
    assert not missing_paths(found)


def test_the_names_that_are_no_module_are_what_the_map_says() -> None:
    for path, line in NOT_MODULES.values():
        assert line in (ROOT / path).read_text()


def test_a_missing_path_is_caught() -> None:
    table = "| to add | change |\n|---|---|\n| a thing | `runner/no_such_module.py` and `pte_devconst.nowhere` |\n"
    assert missing_paths({"x.md": tables(table)}) == ["x.md: a thing: runner/no_such_module.py",
                                                      "x.md: a thing: pte_devconst.nowhere"]
    assert not missing_paths({"x.md": tables(table.replace("no_such_module", "delegates").replace(
        "pte_devconst.nowhere", "pte_devconst.runner.delegates"))})


@pytest.mark.parametrize("task", sorted(TASKS))
def test_each_newcomer_task_starts_in_one_module(task: str) -> None:
    """README names exactly one module for the task; design.md's row for it starts with the same one."""
    found = map_tables()
    where = {row[0]: row for row in found["README.md"][1][1:]}
    assert task in where, f"README.md's 'Where to change what' has no row for {task!r}"
    assert named_paths(where[task][1]) == [TASKS[task]]
    design = {row[0]: row for row in found["docs/design.md"][0][1:]}
    label = DESIGN_LABELS.get(task, task)
    assert label in design, f"docs/design.md's 'Where to change what' has no row for {label!r}"
    assert named_paths(design[label][1])[0] == TASKS[task]
