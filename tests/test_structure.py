"""Modules meet at public names, and the rewriter's modules import each other one way.

* No module of pte_devconst imports a private name (one leading underscore) of another module, nor reads one
  through a module it imported (``module._name``): what two modules share is public, in one home.
* No import cycle between the modules of ``rewriter/``: ``analysis -> fold -> method_context``, never back.
  A module importing ``fold.chains`` runs ``fold/__init__`` first, so it depends on that too.

Imports are read from the source with ``ast`` (those inside functions and under TYPE_CHECKING too), as
``tests/test_layers.py`` reads them for the layers.
"""

from __future__ import annotations

import ast
from typing import Iterable, Iterator, Mapping

import pytest
from test_layers import imported, modules

# (importing module, imported module, name) -> why it may.  None today; an entry needs its reason.
PRIVATE_EXEMPT: Mapping[tuple[str, str, str], str] = {}
# Folders whose modules must not import each other in a cycle (issue 21: rewriter/).
ACYCLIC = ("pte_devconst.rewriter",)
# (importing module, imported module) -> why that edge may close a cycle.  Each must still exist.
CYCLE_EXEMPT: Mapping[tuple[str, str], str] = {
    ("pte_devconst.rewriter.edit", "pte_devconst.rewriter.plan"):
        "an import under TYPE_CHECKING only (it never runs): edit_method's annotations name the plan's records "
        "(MethodEdit, Placement, FoldPlacement), which plan.py builds and edit.py reads; moving those records "
        "beside edit_method belongs to the plan's owner (issue 21 item 4, one plan per command)",
    ("pte_devconst.rewriter.rewrite_json", "pte_devconst.rewriter.rewrite"):
        "an import under TYPE_CHECKING only (it never runs): rewrite_json's annotations name RewriteResult, whose "
        "method calls it; the report's owner (issue 21 item 6, the label collision in rewrite_json) may pass it "
        "what it reads instead",
}


def private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _resolve(module: str, node: ast.ImportFrom, is_package: bool) -> str:
    base = module.split(".") if is_package else module.split(".")[:-1]
    if not node.level:
        return node.module or ""
    prefix = base[:len(base) - node.level + 1]
    return ".".join(prefix + ([node.module] if node.module else []))


def private_uses(module: str, source: str, is_package: bool, known: Iterable[str]) -> list[str]:
    """``module:line imports _name from other`` for each private name ``module`` takes from another module of
    the package: by ``from other import _name``, or as ``alias._name`` of a module it imported."""
    known = set(known)
    found = []
    aliases: dict[str, str] = {}  # local name -> a module of the package
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            target = _resolve(module, node, is_package)
            if not (target == "pte_devconst" or target.startswith("pte_devconst.")):
                continue
            for alias in node.names:
                if f"{target}.{alias.name}" in known:  # a submodule: its private names are read through it
                    aliases[alias.asname or alias.name] = f"{target}.{alias.name}"
                if private(alias.name) and target != module and (module, target, alias.name) not in PRIVATE_EXEMPT:
                    found.append(f"{module}:{node.lineno} imports {alias.name} from {target}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in known and alias.asname:
                    aliases[alias.asname] = alias.name
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases \
                and private(node.attr):
            home = aliases[node.value.id]
            if home != module and (module, home, node.attr) not in PRIVATE_EXEMPT:
                found.append(f"{module}:{node.lineno} reads {node.attr} of {home}")
    return found


def dependencies(module: str, source: str, is_package: bool, known: Iterable[str]) -> set[str]:
    """The modules of the package ``module`` runs when imported: each module it imports (a name that is a
    submodule counts as that submodule) and the packages above those that do not hold ``module`` itself."""
    known = set(known)
    found: set[str] = set()
    for _, target in imported(module, source, is_package):
        found.add(target)
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            target = _resolve(module, node, is_package)
            found.update(f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in known)
    own_packages = {".".join(module.split(".")[:i]) for i in range(1, module.count(".") + 2)}
    for target in list(found):
        parts = target.split(".")
        found.update(p for p in (".".join(parts[:i]) for i in range(1, len(parts))) if p not in own_packages)
    return {t for t in found if t in known and t != module}


def cycle(graph: Mapping[str, set[str]]) -> list[str]:
    """One import cycle of ``graph`` (module -> modules it imports), as a path that returns to its start; []."""
    state: dict[str, int] = {}  # 1: on the path, 2: done
    for start in sorted(graph):
        if state.get(start):
            continue
        path = [start]
        stack: list[Iterator[str]] = [iter(sorted(graph[start]))]
        state[start] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            elif not state.get(nxt) and nxt in graph:
                state[nxt] = 1
                path.append(nxt)
                stack.append(iter(sorted(graph[nxt])))
    return []


def _sources() -> list[tuple[str, str, bool]]:
    return [(name, path.read_text(), path.name == "__init__.py") for name, path in modules()]


def test_no_module_takes_a_private_name_of_another() -> None:
    sources = _sources()
    known = {name for name, _, _ in sources}
    found = [v for name, source, is_package in sources for v in private_uses(name, source, is_package, known)]
    assert not found, "\n".join(found)


def test_the_rewriter_modules_import_each_other_one_way() -> None:
    sources = _sources()
    known = {name for name, _, _ in sources}
    for folder in ACYCLIC:
        inside = {name for name in known if name.startswith(folder + ".")}
        graph = {name: dependencies(name, source, is_package, known) & inside
                 for name, source, is_package in sources if name in inside}
        for (importer, target), why in CYCLE_EXEMPT.items():
            assert target in graph[importer] and why, f"stale exemption: {importer} no longer imports {target}"
            graph[importer] = graph[importer] - {target}
        loop = cycle(graph)
        assert not loop, " -> ".join(loop)
        assert "pte_devconst.rewriter.fold.chains" in graph  # the walk sees the fold package's modules


def test_fold_stands_on_the_method_context_not_on_analysis() -> None:
    """The direction the docs name: analysis imports fold, fold imports method_context, never analysis."""
    sources = _sources()
    known = {name for name, _, _ in sources}
    deps = {name: dependencies(name, source, is_package, known) for name, source, is_package in sources}
    fold = {name for name in deps
            if name == "pte_devconst.rewriter.fold" or name.startswith("pte_devconst.rewriter.fold.")}
    assert len(fold) >= 7, fold
    assert all("pte_devconst.rewriter.analysis" not in deps[name] for name in fold)
    assert "pte_devconst.rewriter.fold" in deps["pte_devconst.rewriter.analysis"]
    assert "pte_devconst.rewriter.analysis" not in deps["pte_devconst.rewriter.method_context"]


# --- the checkers are not vacuous ----------------------------------------------------------------------------------

KNOWN = {"pte_devconst.rewriter.a", "pte_devconst.rewriter.b", "pte_devconst.rewriter.pkg",
         "pte_devconst.rewriter.pkg.inner", "pte_devconst.rewriter.c"}


@pytest.mark.parametrize("source", [
    "from .b import _helper",
    "from pte_devconst.rewriter.b import Public, _Private",
    "def f():\n    from .b import _late\n",
    "from . import b\nb._reach_in()",
    "import pte_devconst.rewriter.b as bee\nbee._x",
])
def test_a_private_name_across_modules_is_caught(source: str) -> None:
    assert len(private_uses("pte_devconst.rewriter.a", source, False, KNOWN)) == 1


@pytest.mark.parametrize("source", [
    "from .b import helper, __doc__", "from typing import _SpecialForm", "from . import b\nb.public()",
    "import b\nb._x  # not the package's",
])
def test_public_names_and_other_packages_pass(source: str) -> None:
    assert not private_uses("pte_devconst.rewriter.a", source, False, KNOWN)


def test_a_cycle_is_found_through_a_function_import_and_a_parent_package() -> None:
    sources = {
        "pte_devconst.rewriter.a": ("def f():\n    from .pkg.inner import x\n", False),
        "pte_devconst.rewriter.pkg": ("from .inner import x\n", True),
        "pte_devconst.rewriter.pkg.inner": ("from ..c import y\n", False),
        "pte_devconst.rewriter.c": ("from .a import z\n", False),
        "pte_devconst.rewriter.b": ("from .c import y\n", False),
    }
    graph = {name: dependencies(name, source, is_package, KNOWN) for name, (source, is_package) in sources.items()}
    assert "pte_devconst.rewriter.pkg" in graph["pte_devconst.rewriter.a"]  # the package runs first
    assert "pte_devconst.rewriter.pkg" not in graph["pte_devconst.rewriter.pkg.inner"]  # its own package: no edge
    loop = cycle(graph)
    assert loop[0] == loop[-1] and {"pte_devconst.rewriter.a", "pte_devconst.rewriter.c"} <= set(loop), loop
    del graph["pte_devconst.rewriter.c"]
    assert cycle(graph) == []
