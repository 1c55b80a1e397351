"""One description of the format: schema/fbs/*.fbs generates the model, its decoder, encoder and table counter.

The committed code must be what regenerating writes (as ExecuTorch's CI checks
its own generated code); the .fbs must be ExecuTorch 1.5.1's, table for table;
the parser must refuse what it does not understand; and a new field must take
one edit to the .fbs and a regeneration, nothing else.
"""

from __future__ import annotations

import importlib
import shutil
import subprocess
import sys
from dataclasses import fields, replace
from pathlib import Path
from types import ModuleType
from typing import Any, Iterator

import pytest

import flatc_reference
from conftest import pte_path
from pte_devconst.schema import regenerate
from pte_devconst.schema.decode import decode_program_counted, decode_root
from pte_devconst.schema.encode import encode_program, encode_root
from pte_devconst.schema.fbs_parser import FbsError, parse_schemas
from pte_devconst.schema.pte_file import open_pte


def test_committed_code_is_what_regenerate_writes() -> None:
    done = subprocess.run([sys.executable, "-m", "pte_devconst.schema.regenerate", "--check"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr


def test_check_names_every_stale_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    """A changed, a missing and an extra file each make --check fail, by name."""
    stale, stale_flatc = tmp_path / "generated", tmp_path / "flatc_generated"
    shutil.copytree(regenerate.GENERATED_DIR, stale, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(regenerate.FLATC_DIR, stale_flatc, ignore=shutil.ignore_patterns("__pycache__"))
    with (stale / "program_model.py").open("a") as changed:
        changed.write("# edited by hand\n")
    (stale / "encoders.py").unlink()
    (stale_flatc / "executorch_flatbuffer" / "Extra.py").write_text("")
    assert regenerate.check(stale, flatc_committed=stale_flatc) == [
        "encoders.py", "flatc/executorch_flatbuffer/Extra.py", "program_model.py"]
    monkeypatch.setattr(regenerate, "GENERATED_DIR", stale)
    monkeypatch.setattr(regenerate, "FLATC_DIR", stale_flatc)
    assert regenerate.main(["--check"]) == 1
    err = capsys.readouterr().err
    assert "stale generated file: schema/generated/program_model.py" in err
    assert "stale generated file: tests/flatc_generated/executorch_flatbuffer/Extra.py" in err


def _shape(schema: Any) -> dict[str, Any]:
    """What a schema says about the bytes: every table's fields (name, type, slot, default, alignment), every
    enum's values, every union's members, every root's table and identifier. Comments are left out."""
    return {
        "tables": {t.name: [(f.name, f.type, f.slot, f.default, f.force_align) for f in t.fields]
                   for t in schema.tables},
        "enums": {e.name: (e.underlying, e.values) for e in schema.enums},
        "unions": {u.name: u.members for u in schema.unions},
        "roots": {r.file: (r.table, r.identifier, r.extension) for r in schema.roots},
    }


def test_our_schemas_are_executorchs() -> None:
    """program.fbs and flat_tensor.fbs say what ExecuTorch 1.5.1's own do (read from the installed wheel)."""
    executorch = pytest.importorskip("executorch")
    wheel = Path(next(iter(executorch.__path__)))
    ours = {name: _shape(parse_schemas(regenerate.FBS_DIR, (name,))) for name in regenerate.ROOT_SCHEMAS}
    theirs = {"program.fbs": _shape(parse_schemas(wheel / "exir" / "_serialize", ("program.fbs",))),
              "flat_tensor.fbs": _shape(parse_schemas(wheel / "extension" / "flat_tensor" / "serialize",
                                                      ("flat_tensor.fbs",)))}
    assert len(theirs["program.fbs"]["tables"]) > 30
    assert ours == theirs


@pytest.mark.parametrize("source, problem", [
    ("struct S { a: int; }", "'struct' is outside the subset"),
    ("table T { a: int (deprecated); }", "attribute 'deprecated' is outside the subset"),
    ("table T { a: int (id: 0); }", "attribute 'id' is outside the subset"),
    ("table T { a: Unknown; }", "unknown type 'Unknown'"),
    ("table A {} union U { A } table T { a: [U]; }", "vectors of unions"),
    ("enum E : byte { A = 1 } table T { e: E; }", "has no value 0"),
    ("enum E : float { A }", "an enum's type must be an integer type"),
    ("table T { a: int = x; }", "'x' is not a int"),
    ("table T { a: string = 3; }", "only scalars and enums take a default"),
    ("table T { a: int; a: long; }", "field a is declared twice"),
    ("table T { a: [int:3]; }", "fixed-length arrays"),
    ("table T { a: int }", "expected ;"),
    ("table T { a: int; } root_type T;", "needs a file_identifier"),
])
def test_the_parser_refuses_what_it_does_not_read(tmp_path: Path, source: str, problem: str) -> None:
    """Outside its subset the parser stops with the file and line, rather than guess what a construct means."""
    (tmp_path / "x.fbs").write_text(f"namespace n;\n\n{source}\n")
    with pytest.raises(FbsError) as info:
        parse_schemas(tmp_path, ("x.fbs",))
    assert problem in str(info.value)
    assert str(info.value).startswith("x.fbs")


def test_slots_defaults_and_comments_follow_flatcs_rules(tmp_path: Path) -> None:
    (tmp_path / "x.fbs").write_text(
        "namespace n;\n"
        "enum E : ubyte { A = 2, B, C = 7 }\n"
        "table M {}\n"
        "union U { M }\n"
        "// what T is\n"
        "table T {\n"
        "  e: E = B;  // after the field\n"
        "  // before the field\n"
        "  u: U;\n"
        "  f: float32 = 1.5;\n"
        "  flag: bool = true;\n"
        "  data: [uint8] (force_align: 16);\n"
        "}\n")
    schema = parse_schemas(tmp_path, ("x.fbs",))
    assert schema.enum("n.E").values == (("A", 2), ("B", 3), ("C", 7))
    table = schema.table("n.T")
    assert table.doc == "what T is"
    assert [(f.name, f.slot, f.default) for f in table.fields] == [
        ("e", 0, 3), ("u", 2, None), ("f", 3, 1.5), ("flag", 4, True), ("data", 5, None)]  # u's tag is slot 1
    assert [f.doc for f in table.fields[:2]] == ["after the field", "before the field"]
    assert table.fields[4].type.name == "ubyte" and table.fields[4].force_align == 16


# --- adding a field ------------------------------------------------------------------------------------

NEW_FIELD = "pte_devconst_test_field"


@pytest.fixture
def extended(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, ModuleType, ModuleType]]:
    """A copy of fbs/ whose Tensor ends with one more field, and the code regenerated from it, imported.

    The only edit is the .fbs line: everything else is ``regenerate.generate``.
    """
    fbs = tmp_path / "fbs"
    shutil.copytree(regenerate.FBS_DIR, fbs)
    program_fbs = fbs / "program.fbs"
    end_of_tensor = "  extra_tensor_info: ExtraTensorInfo;\n}"
    assert program_fbs.read_text().count(end_of_tensor) == 1
    program_fbs.write_text(program_fbs.read_text().replace(
        end_of_tensor, f"  extra_tensor_info: ExtraTensorInfo;\n  {NEW_FIELD}: int = 7;\n}}"))
    regenerate.generate(tmp_path / "extended_schema", fbs)
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        yield (fbs, importlib.import_module("extended_schema.decoders"),
               importlib.import_module("extended_schema.encoders"))
    finally:
        for name in [n for n in sys.modules if n == "extended_schema" or n.startswith("extended_schema.")]:
            del sys.modules[name]


def _with_tensors(program: Any, change: Any) -> Any:
    plans = tuple(replace(plan, values=tuple(change(v) if type(v).__name__ == "Tensor" else v for v in plan.values))
                  for plan in program.execution_plan)
    return replace(program, execution_plan=plans)


def test_a_new_field_takes_one_edit_to_the_fbs(extended: tuple[Path, ModuleType, ModuleType]) -> None:
    fbs, decoders, encoders = extended
    with open_pte(pte_path("v_a_dtypes_copy")) as pte:
        flatbuffer = bytes(pte.data[: pte.flatbuffer_size])
        original = pte.program

    def decode(data: bytes) -> tuple[Any, int]:
        return decode_root(data, decoders.PROGRAM_IDENTIFIER, decoders.read_program)

    def encode(program: Any) -> bytes:
        return encode_root(program, encoders.PROGRAM_IDENTIFIER, encoders.write_program)

    # The record has the field, last, with the .fbs default; the hand-written helpers are still there.
    program, _ = decode(flatbuffer)
    tensor_class = type(program.execution_plan[0].values[0])
    assert [f.name for f in fields(tensor_class)][-1] == NEW_FIELD
    assert tensor_class().pte_devconst_test_field == 7 and tensor_class(sizes=(2, 3), scalar_type=6).nbytes == 24

    # A program without the field set encodes as before, byte for byte.
    assert encode(program) == encode_program(original)

    # With it set, it survives a round trip, byte for byte what flatc's code for the new schema writes ...
    changed = _with_tensors(program, lambda t: replace(t, pte_devconst_test_field=42))
    data = encode(changed)
    again, tables = decode(data)
    assert again == changed and {t.pte_devconst_test_field for t in _tensors(again)} == {42}
    reference = flatc_reference.FlatcReference("extended_schema", fbs, records="extended_schema")
    assert reference.encode(changed, "Program") == data
    assert flatc_reference.first_difference(reference.decode(data, "Program"), changed) is None
    # ... the table counter agrees with the decoder's count, and the old decoder still reads the file.
    assert importlib.import_module("extended_schema.table_counts").count_program(changed) == tables
    assert decode_program_counted(data)[0] == original


def _tensors(program: Any) -> list[Any]:
    return [v for plan in program.execution_plan for v in plan.values if type(v).__name__ == "Tensor"]
