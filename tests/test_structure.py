"""Modules meet at public names, and the rewriter's modules import each other one way.

* No module of pte_devconst imports a private name (one leading underscore) of another module, nor reads one
  through a module it imported (``module._name``): what two modules share is public, in one home.
* No import cycle between the modules of ``rewriter/``: ``model.analysis -> fold -> program.method_context``, never
  back.  A module importing ``fold.chains`` runs ``fold/__init__`` first, so it depends on that too.
* No import cycle between the packages (a subpackage is a package of its own): ``rewriter -> rewriter.encodings ->
  rewriter.model -> rewriter.fold -> program``, never back.

Imports are read from the source with ``ast`` (those inside functions and under TYPE_CHECKING too), as
``tests/test_layers.py`` reads them for the layers.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Iterable, Iterator, Mapping

import pytest
from test_layers import FOLDERS, ROOT, imported, modules

# (importing module, imported module, name) -> why it may.  None today; an entry needs its reason.
PRIVATE_EXEMPT: Mapping[tuple[str, str, str], str] = {}
# Folders whose modules must not import each other in a cycle (issue 21: rewriter/).
ACYCLIC = ("pte_devconst.rewriter",)
# (importing module, imported module) -> why that edge may close a cycle.  Each must still exist.
CYCLE_EXEMPT: Mapping[tuple[str, str], str] = {
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
    assert all("pte_devconst.rewriter.model.analysis" not in deps[name] for name in fold)
    assert "pte_devconst.rewriter.fold" in deps["pte_devconst.rewriter.model.analysis"]
    assert "pte_devconst.rewriter.model.analysis" not in deps["pte_devconst.program.method_context"]


# Modules that count as another package's for the package graph (tests/test_layers.py's NEUTRAL and __main__).
PACKAGE_OF = {"pte_devconst.__main__": "pte_devconst.cli", "pte_devconst._lazy": None}


def package_of(module: str, known_packages: Iterable[str]) -> str | None:
    """The package a module belongs to: itself for a package's ``__init__``, else the package that holds it."""
    if module in PACKAGE_OF:
        return PACKAGE_OF[module]
    return module if module in known_packages else module.rsplit(".", 1)[0]


def package_graph(sources: Iterable[tuple[str, str, bool]]) -> dict[str, set[str]]:
    """Package -> the other packages its modules import (every import: inside functions, under TYPE_CHECKING)."""
    sources = list(sources)
    known = {name for name, _, _ in sources}
    packages = {name for name, _, is_package in sources if is_package}
    graph: dict[str, set[str]] = {}
    for name, source, is_package in sources:
        own = package_of(name, packages)
        if own is None:
            continue
        edges = graph.setdefault(own, set())
        for target in dependencies(name, source, is_package, known):
            other = package_of(target, packages)
            if other is not None and other != own:
                edges.add(other)
    return graph


def test_no_package_cycle() -> None:
    """Imports between packages point one way: no package (subpackages included) reaches itself again."""
    graph = package_graph(_sources())
    assert {"pte_devconst.rewriter", "pte_devconst.rewriter.encodings", "pte_devconst.rewriter.model",
            "pte_devconst.rewriter.fold", "pte_devconst.gate"} <= set(graph)
    loop = cycle(graph)
    assert not loop, " -> ".join(loop)
    assert "pte_devconst.rewriter.model" in graph["pte_devconst.rewriter.encodings"]
    assert "pte_devconst.rewriter" not in graph["pte_devconst.rewriter.encodings"]


def test_a_package_cycle_is_caught() -> None:
    """The encodings importing the plan (the old ``words -> plan``) closes a cycle through their parent package."""
    sources = [("pte_devconst.rewriter", "", True), ("pte_devconst.rewriter.plan", "from .encodings import x\n", False),
               ("pte_devconst.rewriter.encodings", "from ..model.analysis import y\n", True),
               ("pte_devconst.rewriter.model", "", True), ("pte_devconst.rewriter.model.analysis", "", False)]
    assert cycle(package_graph(sources)) == []
    words = ("pte_devconst.rewriter.encodings.words", "def f():\n    from ..plan import RewritePlan\n", False)
    loop = cycle(package_graph([*sources, words]))
    assert {"pte_devconst.rewriter", "pte_devconst.rewriter.encodings"} <= set(loop), loop


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


# --- one home per rule of program semantics (issue 26 item 4): what the code does, not only what it is called ------
#
# Each rule below has one home in program/; these scans find code elsewhere that decides the same thing again by
# doing what the old duplicates did.  A module listed under a rule may do it, for the reason given (``path::name``:
# only inside that function).

ARG_INDEX_HOMES: Mapping[str, str] = {
    "program/kernel_effects.py": "the one table of what a kernel reads and writes, by argument position",
    "rewriter/fold/kernels.py": "a fold kernel's schema (self, params, out, return), to compute it; what it writes "
                                "is still kernel_effects's rule",
    "runner/kernels.py": "the runner's kernels execute by schema position",
    "program/torch_save.py": "a pickle REDUCE's arguments, not an instruction's",
    "program/dataflow.py::_split": "a DelegateCall's split: its last argument is an output for sure (no kernel's)",
}
COPY_KERNEL_HOMES: Mapping[str, str] = {
    "program/kernel_effects.py": "the one table (is_h2d_copy, copy_slots, copies_to_device)",
}
BUFFER_DEVICE_TABLE_HOMES: Mapping[str, str] = {
    "schema/model_methods.py": "ExecutionPlan.buffer_devices: the one reading of the table",
    "schema/validate.py": "checks the table's entries as the format states them",
    "rewriter/edit.py": "writes the table (appends the entries of buffers a rewrite adds)",
    "rewriter/verify.py": "the self-check compares the written table with the input's, entry by entry",
}
NBYTES_FALLBACK_HOMES: Mapping[str, str] = {"program/regions.py": "value_nbytes: 0 for an unknown scalar type"}
FREED_VALUE_HOMES: Mapping[str, str] = {
    "schema/validate.py": "the format check: the index is in range",
    "program/kernel_effects.py": "what an instruction reads (instruction_effects)",
    "program/readers.py": "who reads a value (readers_in_order)",
    "runner/method.py": "the runner executes a FreeCall",
    "compare/diff.py": "prints the instruction (instruction_text)",
}
COPY_NAMES = {"H2D_COPY", "D2H_COPY", "COPY_KERNELS"}
ARGS_SOURCES = {"kernel_args", "_copy_args"}  # functions that return an instruction's argument list


def _constant_index(node: ast.expr) -> bool:
    """``1``, ``-1``: an index fixed in the code."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        node = node.operand
    return isinstance(node, ast.Constant) and isinstance(node.value, int)


def _fixed_position(node: ast.expr) -> bool:
    """``args[1]``, ``args[-1:]``, ``args[1:-2]``: positions fixed in the code (``args[:n]`` is a split, not one)."""
    if isinstance(node, ast.Slice):
        bounds = [b for b in (node.lower, node.upper) if b is not None]
        return bool(bounds) and all(_constant_index(b) for b in bounds) and node.step is None
    return _constant_index(node)


def _mentions_args(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Attribute) and n.attr == "args"
               or isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in ARGS_SOURCES
               for n in ast.walk(node))


def indexed_instruction_args(source: str) -> list[int]:
    """Lines that take an instruction's argument at a position fixed in the code (``ins.args[1]``, ``args[1:]``,
    ``args[-1:]``, where ``args`` was bound from an instruction's ``.args`` or is a parameter of that name): how the
    old copies decided what a kernel writes."""
    tree = ast.parse(source)
    names = {"args", "own_args"}
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.NamedExpr)) and node.value is not None \
                and _mentions_args(node.value):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and _fixed_position(node.slice) and (
                isinstance(node.value, ast.Name) and node.value.id in names or _mentions_args(node.value)):
            found.append(node.lineno)
    return found


def compared_copy_kernels(source: str) -> list[int]:
    """Lines that compare an operator name with the device-copy kernels' (``name == H2D_COPY``, ``name in
    COPY_KERNELS``): how the old copies decided per-call copies and a copy's slots."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            for operand in (node.left, *node.comparators):
                if isinstance(operand, ast.Name) and operand.id in COPY_NAMES \
                        or isinstance(operand, ast.Attribute) and operand.attr in COPY_NAMES:
                    found.append(node.lineno)
                    break
    return found


def read_buffer_device_table(source: str) -> list[int]:
    """Lines that read ``non_const_buffer_device`` itself (to build a buffer -> device map of their own)."""
    return [node.lineno for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Attribute) and node.attr == "non_const_buffer_device"
            and isinstance(node.ctx, ast.Load)]


def nbytes_fallbacks(source: str) -> list[int]:
    """Lines of a ``try`` that reads ``.nbytes`` and catches KeyError: a fallback for unknown scalar types."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Try) and any(isinstance(n, ast.Attribute) and n.attr == "nbytes"
                                             for stmt in node.body for n in ast.walk(stmt)):
            for handler in node.handlers:
                if handler.type is not None and any(isinstance(n, ast.Name) and n.id == "KeyError"
                                                    for n in ast.walk(handler.type)):
                    found.append(node.lineno)
    return found


def tag_as_memory_device(source: str) -> list[int]:
    """Lines that take a tensor's device tag for where its memory is (``value.device if isinstance(value,
    m.Tensor) else CPU``): ``regions.memory_device`` answers that (a legacy export tags host constants cuda:0)."""
    return [node.lineno for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.IfExp) and isinstance(node.body, ast.Attribute) and node.body.attr == "device"
            and isinstance(node.test, ast.Call) and isinstance(node.test.func, ast.Name)
            and node.test.func.id == "isinstance"]


def read_freed_value(source: str) -> list[int]:
    """Lines that read a FreeCall's ``value_index``: only a pass over who uses each value needs it (the old
    second copy of the readers in the self-check did)."""
    return [node.lineno for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Attribute) and node.attr == "value_index" and isinstance(node.ctx, ast.Load)]


RULE_SCANS = {
    "indexes an instruction's arguments at a fixed position (kernel_effects.py decides what a kernel writes)":
        (indexed_instruction_args, ARG_INDEX_HOMES),
    "compares an operator with the device-copy kernels (kernel_effects.py: is_h2d_copy, copy_slots)":
        (compared_copy_kernels, COPY_KERNEL_HOMES),
    "reads non_const_buffer_device itself (ExecutionPlan.buffer_devices; regions.memory_device)":
        (read_buffer_device_table, BUFFER_DEVICE_TABLE_HOMES),
    "falls back on an unknown scalar type's nbytes (regions.value_nbytes)": (nbytes_fallbacks, NBYTES_FALLBACK_HOMES),
    "takes a tensor's device tag for its memory's device (regions.memory_device)": (tag_as_memory_device, {}),
    "reads a FreeCall's value: who uses a value is program/readers.py's": (read_freed_value, FREED_VALUE_HOMES),
}


def _allowed(path: str, source: str, line: int, homes: Mapping[str, str]) -> bool:
    """Whether ``line`` of ``path`` is in one of the homes: the module, or the function ``path::name``."""
    if path in homes:
        return True
    functions = {key.split("::", 1)[1] for key in homes if key.startswith(path + "::")}
    return any(isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in functions
               and node.lineno <= line <= (node.end_lineno or node.lineno) for node in ast.walk(ast.parse(source)))


def _package_files() -> list[tuple[str, str]]:
    root = Path(__file__).resolve().parents[1]
    found = []
    for folder in FOLDERS:
        for path in sorted((root / folder).rglob("*.py")):
            if "generated" not in path.parts:
                found.append((path.relative_to(root).as_posix(), path.read_text()))
    return found


def test_each_rule_of_program_semantics_is_decided_in_its_home_only() -> None:
    found = []
    for path, source in _package_files():
        for what, (scan, homes) in RULE_SCANS.items():
            found += [f"{path}:{line} {what}" for line in scan(source) if not _allowed(path, source, line, homes)]
    assert not found, "\n".join(found)


def test_the_rule_homes_are_real_and_needed() -> None:
    """Each listed home exists and still does what it is listed for: a stale entry would hide a new copy."""
    files = dict(_package_files())
    for what, (scan, homes) in RULE_SCANS.items():
        for home, why in homes.items():
            path = home.split("::")[0]
            assert path in files and why, f"{what}: {home} is listed but does not exist"
            assert any(_allowed(path, files[path], line, {home: why}) for line in scan(files[path])), \
                f"{what}: {home} is listed but no longer does it"


# The duplicates the scans were written against, as main had them before issue 26 item 4: each must be caught.
OLD_DUPLICATES = {
    "rewriter/derived.py: a copy writes args[1:]": "flow.write(args[1:], flow.read(args[0]))\n",
    "program/dataflow.py: a kernel writes args[-1:]": "args = tuple(instruction.args or ())\nself.write(args[-1:])\n",
    "rewriter/verify.py: the removed copy's slots":
        "args = ins.args or ()\nfor slot in args[1:]:\n    if slot != args[0]:\n        pass\n",
    "program/transfers.py: _Residence's buffer devices":
        "buffers = {e.buffer_idx: m.Device(e.device_type, e.device_index)\n"
        "           for e in reversed(plan.non_const_buffer_device or ())}\n",
    "program/transfers.py: an _h2d_copy's return slot takes its out's device":
        "if ops[instruction.op_index] == H2D_COPY and len(args) >= 2:\n    for ret in args[2:]:\n        pass\n",
    "compare/diff.py: _copies_per_call":
        "copies = sum(1 for chain in plan.chains or () for i in chain.instructions or ()\n"
        "             if isinstance(i, m.KernelCall) and ops[i.op_index] == H2D_COPY\n"
        "             and (i.args or (None,))[0] == v)\n",
    "program/transfers.py: _nbytes": "def f(value):\n    try:\n        return value.nbytes\n    except KeyError:\n"
                                     "        return 0\n",
    "program/method_context.py: the copy's destination's device":
        "dst_device = value.device if isinstance(value, m.Tensor) else CPU\n",
    "rewriter/verify.py: _readers": "if isinstance(ins, m.FreeCall) and ins.value_index in watched:\n    pass\n",
    "rewriter/model/analysis.py: has_copy_kernel": "has_copy_kernel = H2D_COPY in _operator_names(plan)\n",
    "an argument of an expression over .args": "first = (i.args or (None,))[0]\n",
}


@pytest.mark.parametrize("name", OLD_DUPLICATES)
def test_each_old_duplicate_would_be_caught(name: str) -> None:
    source = OLD_DUPLICATES[name]
    assert any(scan(source) for scan, _ in RULE_SCANS.values()), name


@pytest.mark.parametrize("source", [
    "n_inputs = site.n_inputs\ninputs = site.args[:n_inputs]\n",  # a split by a computed count
    "for a, b in zip(x.args, y.args):\n    pass\n",
    "slots = copy_slots(name, args)\nsource = slots.source\n",
    "device = memory_device(value, plan.buffer_devices())\n",
])
def test_asking_the_homes_is_not_flagged(source: str) -> None:
    assert not any(scan(source) for scan, _ in RULE_SCANS.values())


# --- one record style --------------------------------------------------------------------------------------------

# util/record.py's rule: a value built once is a @record, working state a plain class with __slots__; nothing else.
DATACLASS_DECORATORS = {"dataclass", "dataclasses.dataclass"}
TUPLE_CLASSES = {"NamedTuple", "typing.NamedTuple", "namedtuple", "collections.namedtuple"}
CLASS_FACTORIES = TUPLE_CLASSES | {"make_dataclass", "dataclasses.make_dataclass"}


def _dotted(node: ast.expr) -> str:
    """``a.b.c`` for a name or an attribute chain (a call's function for a call), else ""."""
    if isinstance(node, ast.Call):
        return _dotted(node.func)
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return f"{inner}.{node.attr}" if inner else ""
    return node.id if isinstance(node, ast.Name) else ""


def record_style_violations(path: str, source: str) -> list[str]:
    """``path:line ...`` for each class declared another way than ``@record`` or a plain class: a ``@dataclass``,
    a ``NamedTuple``/``namedtuple`` base, or a class made by ``namedtuple(...)``/``make_dataclass(...)``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef):
            found += [f"{path}:{node.lineno} {node.name} is a @dataclass" for decorator in node.decorator_list
                      if _dotted(decorator) in DATACLASS_DECORATORS]
            found += [f"{path}:{node.lineno} {node.name} is a {_dotted(base)}" for base in node.bases
                      if _dotted(base) in TUPLE_CLASSES]
        elif isinstance(node, ast.Call) and _dotted(node.func) in CLASS_FACTORIES:
            found.append(f"{path}:{node.lineno} makes a class with {_dotted(node.func)}")
    return found


def package_files() -> Iterator[tuple[str, Path]]:
    """Every module of the package, the generated schema records included (``modules()`` leaves them out)."""
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            yield path.relative_to(ROOT).as_posix(), path


def test_every_record_is_a_record_and_working_state_a_plain_class() -> None:
    found = [line for relative, path in package_files() for line in record_style_violations(relative, path.read_text())]
    assert not found, "declare a value @record and working state a plain class with __slots__ (util/record.py):\n" \
        + "\n".join(found)
    assert sum(1 for _ in package_files()) > 100  # the scan saw the package


@pytest.mark.parametrize("source", [
    "from dataclasses import dataclass\n@dataclass\nclass A:\n    x: int\n",
    "import dataclasses\n@dataclasses.dataclass(frozen=True, slots=True)\nclass A:\n    x: int\n",
    "from dataclasses import dataclass\n@dataclass(frozen=True)\nclass A:\n    x: int\n",
    "from typing import NamedTuple\nclass A(NamedTuple):\n    x: int\n",
    "import typing\nclass A(typing.NamedTuple):\n    x: int\n",
    "from collections import namedtuple\nA = namedtuple('A', 'x y')\n",
    "import collections\nclass A(collections.namedtuple('A', 'x')):\n    pass\n",
    "from dataclasses import make_dataclass\nA = make_dataclass('A', ['x'])\n",
])
def test_another_record_style_is_caught(source: str) -> None:
    assert record_style_violations("x.py", source)


@pytest.mark.parametrize("source", [
    "from pte_devconst.util.record import record\n@record\nclass A:\n    x: int\n",
    "from pte_devconst.util.record import record\n@record(order=True)\nclass A:\n    x: int\n",
    "class A:\n    __slots__ = ('x',)\n\n    def __init__(self, x: int) -> None:\n        self.x = x\n",
    "import dataclasses\nB = dataclasses.replace(a, x=1)\nfields = dataclasses.fields(a)\n",
])
def test_records_and_working_state_pass(source: str) -> None:
    assert not record_style_violations("x.py", source)
