"""The layers point one way: util <- schema <- program <- rewriter, runner <- the rooms (inventory <- compare, gate)
<- api <- cli (docs/design.md).  The command line stands on the API alone (``pte_devconst.api``, its public records
and words in ``pte_devconst.types``, ``paths``) and on ``util``: it renders what the API returns (issue 46).

Every import of every module is read from its source (those inside functions and under TYPE_CHECKING too),
so an import kept inside a function for start-up speed cannot hide a wrong direction.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Iterator

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Source folder -> the package it installs as (pyproject's package-dir), in layer order.  The one list of the source
# folders: the tests that walk the package read FOLDERS.
PACKAGES = {"util": "pte_devconst.util", "schema": "pte_devconst.schema", "program": "pte_devconst.program",
            "rewriter": "pte_devconst.rewriter", "runner": "pte_devconst.runner",
            "inventory": "pte_devconst.inventory", "compare": "pte_devconst.compare", "gate": "pte_devconst.gate",
            "pte_devconst": "pte_devconst", "cli": "pte_devconst.cli"}
FOLDERS = tuple(PACKAGES)
NEUTRAL = {"pte_devconst._lazy"}  # a helper every package may use (lazy exports)
# Which layers each layer may import from (its own included).  No exceptions: the dtype table the rewriter and the
# runner share lives in program/.  The rooms of the commands that only read programs (inventory: inspect's summary;
# compare: diff; gate: check) stand on the rewriter's analysis and plan; the runner never imports them.
BELOW_ROOMS = {"util", "schema", "program", "rewriter"}
ALLOWED = {"util": {"util"}, "schema": {"util", "schema"}, "program": {"util", "schema", "program"},
           "rewriter": {"util", "schema", "program", "rewriter"}, "runner": {"util", "schema", "program", "runner"},
           "inventory": BELOW_ROOMS | {"inventory"}, "compare": BELOW_ROOMS | {"inventory", "compare"},
           "gate": BELOW_ROOMS | {"gate"},
           "api": {"util", "schema", "program", "rewriter", "runner", "inventory", "compare", "gate", "api"},
           "cli": {"util", "api", "cli"}}
LAYERS = {folder for folder in FOLDERS if folder != "pte_devconst"}  # a layer of its own, named by its folder


def layer(module: str) -> str | None:
    """``pte_devconst.rewriter.plan`` -> ``rewriter``; the top package, api and paths are the API layer."""
    if module in NEUTRAL or not (module == "pte_devconst" or module.startswith("pte_devconst.")):
        return None
    parts = module.split(".")
    if len(parts) > 1 and parts[1] in LAYERS:
        return parts[1]
    if module == "pte_devconst.__main__":
        return "cli"  # `python -m pte_devconst` is the command line
    return "api"


def modules() -> Iterator[tuple[str, Path]]:
    for folder, package in PACKAGES.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            if "generated" in path.parts:
                continue  # flatc's output imports only flatbuffers
            relative = path.relative_to(ROOT / folder).with_suffix("").parts
            name = ".".join((package, *relative))
            yield name.removesuffix(".__init__"), path


def imported(module: str, source: str, is_package: bool) -> Iterator[tuple[int, str]]:
    """(line, module) for every import in ``source``, relative ones resolved against ``module``."""
    base = module.split(".") if is_package else module.split(".")[:-1]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                prefix = base[:len(base) - node.level + 1]
                target = ".".join(prefix + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if node.module is None or target == "pte_devconst":  # `from . import x`, `from pte_devconst import x`
                for alias in node.names:
                    yield node.lineno, f"{target}.{alias.name}"
            else:
                yield node.lineno, target


def violations(module: str, source: str, is_package: bool = False) -> list[str]:
    own = layer(module)
    found = []
    for line, target in imported(module, source, is_package):
        other = layer(target)
        if own is not None and other is not None and other not in ALLOWED[own]:
            found.append(f"{module}:{line} ({own}) imports {target} ({other})")
    return found


def test_every_module_imports_only_downwards() -> None:
    found = [v for name, path in modules() for v in violations(name, path.read_text(), path.name == "__init__.py")]
    assert not found, "\n".join(found)


def test_the_layers_cover_every_package() -> None:
    names = {name for name, _ in modules()}
    assert {layer(name) for name in names} - {None} == set(ALLOWED)
    assert "pte_devconst.rewriter.load" in names and "pte_devconst.paths" in names


def test_the_folders_are_pyprojects() -> None:
    """PACKAGES is pyproject's package-dir, and every package under a folder is in pyproject's packages."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert setuptools["package-dir"] == {package: folder for folder, package in PACKAGES.items()}
    found = {".".join((package, *init.parent.relative_to(ROOT / folder).parts))
             for folder, package in PACKAGES.items() for init in (ROOT / folder).rglob("__init__.py")}
    assert found == set(setuptools["packages"])


@pytest.mark.parametrize("module, source, wrong", [
    ("pte_devconst.rewriter.load", "from pte_devconst.paths import data_for", "pte_devconst.paths"),
    ("pte_devconst.rewriter.plan", "def f():\n    from pte_devconst.runner import run", "pte_devconst.runner"),
    ("pte_devconst.runner.run", "from ..rewriter.plan import make_plan", "pte_devconst.rewriter.plan"),
    ("pte_devconst.schema.model", "import pte_devconst.cli.app", "pte_devconst.cli.app"),
    ("pte_devconst.schema.model", "from pte_devconst import api", "pte_devconst.api"),
    ("pte_devconst.api", "if TYPE_CHECKING:\n    from pte_devconst.cli.output import emit_json", "pte_devconst.cli"),
    ("pte_devconst.rewriter.plan", "from pte_devconst.gate.check import CheckReport", "pte_devconst.gate.check"),
    ("pte_devconst.runner.validate", "from pte_devconst.compare.diff import diff_files", "pte_devconst.compare.diff"),
    ("pte_devconst.inventory.summary", "from ..gate.rules import RULES", "pte_devconst.gate.rules"),
    ("pte_devconst.gate.check", "from pte_devconst import api", "pte_devconst.api"),
    # the command line renders what the API returns: nothing below the API, not even a type (issue 46)
    ("pte_devconst.cli.rewrite_cmd", "from pte_devconst.rewriter.words import conversion_phrase",
     "pte_devconst.rewriter.words"),
    ("pte_devconst.cli.validate_cmd", "if TYPE_CHECKING:\n    from pte_devconst.runner.verdict import Verdict",
     "pte_devconst.runner.verdict"),
    ("pte_devconst.cli.diff_cmd", "def f():\n    from ..program.labels import name_cell",
     "pte_devconst.program.labels"),
    ("pte_devconst.cli.check_cmd", "from pte_devconst.gate.rules import RULES", "pte_devconst.gate.rules"),
    ("pte_devconst.cli.inspect_cmd", "import pte_devconst.schema.model", "pte_devconst.schema.model"),
])
def test_a_wrong_direction_is_caught(module: str, source: str, wrong: str) -> None:
    """The checker is not vacuous: an upward or sideways import, however it is written, is reported."""
    found = violations(module, source)
    assert len(found) == 1 and wrong in found[0]


def test_allowed_directions_pass() -> None:
    assert not violations("pte_devconst.api", "from pte_devconst.rewriter.plan import make_plan")
    assert not violations("pte_devconst.cli.app", "from pte_devconst import api, __version__")
    assert not violations("pte_devconst.cli.check_cmd", "from pte_devconst.types import RULES, CheckReport")
    assert not violations("pte_devconst.cli.output", "from pte_devconst.util.units import human_bytes")
    assert not violations("pte_devconst.rewriter.plan", "from .analysis import Analysis")
    assert not violations("pte_devconst.schema", "from pte_devconst._lazy import lazy_exports", is_package=True)
    assert not violations("pte_devconst.gate.check", "from pte_devconst.rewriter.plan import make_plan")
    assert not violations("pte_devconst.compare.diff", "from ..inventory.summary import segment_roles")
    assert not violations("pte_devconst.api", "from pte_devconst.gate.check import check_programs")
