"""Constants named as users know them: from a real ETRecord of a real export (tests/fixtures/names).

The fixture (``make_names_fixture.py``) was exported by ExecuTorch 1.5.1 with ``generate_etrecord=True``: one
weight went inside a delegate, two constants are copied per call, two are read by host kernels, four of the five
recorded constants share a shape with another.  The expected names are worked out here independently of the
tool: torch.load reads the ETRecord's state dict, and each constant's bytes in the .pte say which it is.
"""

from __future__ import annotations

import io
import json
import pickle
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from cli_runner import invoke, invoke_json
from conftest import pte_path
from test_no_torch import PROBE

from pte_devconst import api
from pte_devconst.rewriter.names import ProgramNames, match_names, named_program
from pte_devconst.program.etrecord import RecordedConstant, RecordedMethod, read_etrecord
from pte_devconst.util.errors import PteDevconstError
from pte_devconst.schema.pte_file import open_pte

HERE = Path(__file__).parent / "fixtures" / "names"
PTE, RECORD = HERE / "mixed.pte", HERE / "mixed.etrecord"


@pytest.fixture(scope="module")
def expected() -> dict[int, str]:
    """value index -> name, from torch.load of the recorded tensors and the bytes each constant ships."""
    torch = pytest.importorskip("torch")
    with zipfile.ZipFile(RECORD) as record:
        state = torch.load(io.BytesIO(record.read("edge_dialect_exported_program/forward_state_dict")),
                           weights_only=True)
        state |= torch.load(io.BytesIO(record.read("edge_dialect_exported_program/forward_constants")),
                            weights_only=True) or {}
    by_bytes = {t.detach().contiguous().numpy().tobytes(): name for name, t in state.items()}
    found = {}
    with open_pte(PTE) as source:
        for index, value in enumerate(source.program.execution_plan[0].values):
            data = source.tensor_bytes(value) if hasattr(value, "data_buffer_idx") else None
            if data is not None and value.is_constant:
                found[index] = by_bytes[bytes(data)]
    assert len(found) == 4 and "inner" not in found.values()  # the fixture is what its docstring says
    return found


def _names(document: dict) -> dict[int, str]:
    return {c["value"]: c["name"] for m in document["file"]["methods"] for c in m["constants"]}


def test_the_etrecord_is_read_without_torch_and_lists_every_recorded_constant() -> None:
    recorded = read_etrecord(RECORD)
    names = [c.name for c in recorded["forward"].constants]
    assert sorted(names) == ["inner", "proj.bias", "proj.weight", "scale", "shift"]
    digests = {c.name: c.digest() for c in recorded["forward"].constants}
    assert all(re.fullmatch("[0-9a-f]{64}", d or "") for d in digests.values())
    assert len(set(digests.values())) == 5


def test_inspect_names_every_constant_as_the_export_did(expected: dict[int, str]) -> None:
    code, document = invoke_json("inspect", PTE, "--etrecord", RECORD)
    assert code == 0
    assert _names(document) == expected
    assert document["names"]["named"] == 4 and document["names"]["unnamed"] == 0
    # Without the ETRecord the program names none of them (the names come from the ETRecord, not the file).
    _, plain = invoke_json("inspect", PTE)
    assert set(_names(plain).values()) == {f"value {v}" for v in expected} and plain["names"] is None


def test_names_reach_every_command_and_format(expected: dict[int, str], tmp_path: Path) -> None:
    out = tmp_path / "out.pte"
    moved = {v: n for v, n in expected.items() if n.startswith("proj.")}
    host = {v: n for v, n in expected.items() if v not in moved}
    for fmt in ("text", "markdown"):
        shown = invoke("inspect", PTE, "--etrecord", RECORD, "--format", fmt)
        assert shown.exit_code == 0 and all(name in shown.stdout for name in expected.values())
        checked = invoke("check", PTE, "--etrecord", RECORD, "--format", fmt)
        assert checked.exit_code == 1
        assert all(f"{name} (v{value})" in checked.stdout for value, name in moved.items())
        done = invoke("--verbose", "rewrite", PTE, "-o", out, "--etrecord", RECORD, "--format", fmt)
        assert done.exit_code == 0, done.stderr
        assert all(name in done.stdout for name in expected.values())  # moved (verbose) and left in place
        diffed = invoke("diff", PTE, out, "--etrecord", RECORD, "--format", fmt)
        assert diffed.exit_code == 0 and all(name in diffed.stdout for name in moved.values())
    _, rewritten = invoke_json("rewrite", PTE, "-o", out, "--etrecord", RECORD)
    assert {p["value"]: p["name"] for p in rewritten["methods"][0]["moved"]} == moved
    assert {p["value"]: p["name"] for p in rewritten["methods"][0]["not_moved"]} == host
    _, checked_json = invoke_json("check", PTE, "--etrecord", RECORD)
    assert {f["value"]: f["name"] for f in checked_json["files"][0]["findings"]} == moved
    _, diffed_json = invoke_json("diff", PTE, out, "--etrecord", RECORD)
    assert {t["value"]: t["name"] for t in diffed_json["diff"]["methods"][0]["tensors"]
            if t["before"] and t["before"]["kind"] == "constant"} == moved  # relaid activations move too, unnamed


def test_the_names_never_reach_the_rewritten_file(tmp_path: Path) -> None:
    named, plain = tmp_path / "named.pte", tmp_path / "plain.pte"
    assert invoke("rewrite", PTE, "-o", named, "--etrecord", RECORD).exit_code == 0
    assert invoke("rewrite", PTE, "-o", plain).exit_code == 0
    assert named.read_bytes() == plain.read_bytes()


def test_value_n_is_said_once_without_a_name() -> None:
    shown = invoke("inspect", pte_path("v_a_dtypes_copy"))
    rows = [line for line in shown.stdout.splitlines() if re.match(r"│\d+ ", line)]
    assert rows and not any(re.search(r"value \d+", row) for row in rows)
    checked = invoke("check", PTE)
    assert re.search(r"│ value \d+ ", checked.stdout) and not re.search(r"value \d+ \(v\d+\)", checked.stdout)


def test_reading_an_etrecord_imports_no_torch(tmp_path: Path) -> None:
    for argv in (["inspect", str(PTE), "--etrecord", str(RECORD)],
                 ["rewrite", str(PTE), "-o", str(tmp_path / "o.pte"), "--etrecord", str(RECORD)],
                 ["check", str(PTE), "--etrecord", str(RECORD)]):
        done = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, timeout=120)
        assert done.returncode in (0, 1), done.stderr
        assert done.stderr.rstrip().endswith("IMPORTED:"), done.stderr


def _forged(tmp_path: Path, state_dict: bytes) -> Path:
    """An ETRecord with the fixture's graph and another state dict."""
    path = tmp_path / "forged.etrecord"
    with zipfile.ZipFile(RECORD) as source, zipfile.ZipFile(path, "w") as out:
        for item in source.infolist():
            data = state_dict if item.filename.endswith("forward_state_dict") else source.read(item)
            out.writestr(item.filename, data)
    return path


def test_a_hostile_pickle_runs_nothing_and_the_names_fall_back_to_shapes(tmp_path: Path) -> None:
    marker = tmp_path / "ran"

    class Exploit:
        def __reduce__(self):  # type: ignore[no-untyped-def]
            return (exec, (f"open({str(marker)!r}, 'w').write('x')",))

    saved = io.BytesIO()
    with zipfile.ZipFile(saved, "w") as inner:
        inner.writestr("archive/data.pkl", pickle.dumps({"proj.weight": Exploit()}))
    record = _forged(tmp_path, saved.getvalue())
    code, document = invoke_json("inspect", PTE, "--etrecord", record)
    assert code == 0 and not marker.exists()
    names = _names(document)
    # Without the bytes, only a constant alone with its dtype and shape on both sides is named (proj.weight has
    # inner's shape; the three [8] constants share one).
    assert sorted(n for n in names.values() if not n.startswith("value ")) == []
    assert document["names"]["unnamed"] == 4 and document["notes"]


@pytest.mark.parametrize("make, message", [
    (lambda p: p.write_bytes(b"not a zip"), "not an ETRecord"),
    (lambda p: zipfile.ZipFile(p, "w").close(), "no ETRECORD_V0 entry"),
    (lambda p: _zip(p, {"ETRECORD_V0": b"", "edge_dialect_exported_program/forward": b"{"}),
     "not a serialized ExportedProgram"),
])
def test_a_bad_etrecord_is_one_line_and_exit_2(tmp_path: Path, make, message: str) -> None:  # type: ignore[no-untyped-def]
    bad = tmp_path / "bad.etrecord"
    make(bad)
    for command in (["inspect", PTE], ["rewrite", PTE, "-o", tmp_path / "o.pte"], ["check", PTE],
                    ["diff", PTE, PTE]):
        done = invoke(*command, "--etrecord", bad)
        assert done.exit_code == 2 and done.stdout == ""
        assert done.stderr.count("\n") == 1 and message in done.stderr and str(bad) in done.stderr
    assert not (tmp_path / "o.pte").exists()
    with pytest.raises(PteDevconstError, match=message):
        api.inspect(PTE, etrecord=bad)


def _zip(path: Path, entries: dict[str, bytes]) -> None:
    with zipfile.ZipFile(path, "w") as out:
        for name, data in entries.items():
            out.writestr(name, data)


def test_tensors_with_the_same_bytes_stay_unnamed() -> None:
    """Two recorded [8] tensors with the bytes of value 2 and one program constant: which is which is unknowable."""
    with open_pte(PTE) as source:
        plan = source.program.execution_plan[0]
        twin = bytes(source.tensor_bytes(plan.values[2]))
        import hashlib

        digest = hashlib.sha256(twin).hexdigest()
        recorded = {"forward": RecordedMethod("forward", (
            RecordedConstant("a", "float32", (8,), lambda: digest),
            RecordedConstant("b", "float32", (8,), lambda: digest),
            RecordedConstant("w", "float32", (8, 8), lambda: None)))}
        names = match_names(source, recorded, "test")
    assert names.name(0, 2) is None and names.name(0, 1) == "w"
    assert names.unnamed == 3 and "3 constant(s) not named" in names.notes[-1]


def test_named_program_keeps_the_programs_own_names() -> None:
    with open_pte(pte_path("v_a_dtypes_copy")) as source:
        program = source.program
    named = named_program(program, ProgramNames({0: {0: "x"}}, "test"))
    assert named.execution_plan[0].values[0].fqn == (program.execution_plan[0].values[0].fqn or "x")
    assert named_program(program, None) is program


def test_api_takes_an_etrecord_as_a_file_object() -> None:
    with RECORD.open("rb") as handle:
        report = api.inspect(PTE.read_bytes(), etrecord=handle)
    assert report.names is not None and report.names.count == 4
    with pytest.raises(PteDevconstError, match="expected an ETRecord file"):
        api.inspect(PTE, etrecord=42)


def test_the_json_names_validate() -> None:
    _, document = invoke_json("inspect", PTE, "--etrecord", RECORD)
    assert json.dumps(document["names"]) and set(document["names"]) == {"source", "named", "unnamed", "notes"}


def test_methods_are_found_by_entry_name(tmp_path: Path) -> None:
    from pte_devconst.program.etrecord import _method_names

    members = ["ETRECORD_V0", "edge_dialect_exported_program/forward", "edge_dialect_exported_program/forward_state_dict",
               "edge_dialect_exported_program/decode", "edge_dialect_exported_program/decode_constants",
               "edge_dialect_exported_program/decode_example_inputs", "exported_program"]
    assert _method_names(members) == {"forward": "edge_dialect_exported_program/forward",
                                      "decode": "edge_dialect_exported_program/decode"}
    assert _method_names(["edge_dialect_exported_program"]) == {"forward": "edge_dialect_exported_program"}


def test_any_json_in_the_edge_program_is_names_or_one_error(tmp_path: Path) -> None:
    """Structure-aware: the fixture's graph with parts replaced by arbitrary JSON never crashes the reader."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    with zipfile.ZipFile(RECORD) as source:
        original = json.loads(source.read("edge_dialect_exported_program/forward"))
    leaves = st.none() | st.booleans() | st.integers(-5, 40) | st.text(max_size=5)
    anything = st.recursive(leaves, lambda inner: st.lists(inner, max_size=3)
                            | st.dictionaries(st.text(max_size=8), inner, max_size=3), max_leaves=12)
    paths = [("graph_module",), ("graph_module", "signature"), ("graph_module", "signature", "input_specs"),
             ("graph_module", "signature", "output_specs"), ("graph_module", "graph", "tensor_values"),
             ("graph_module", "signature", "input_specs", 0), ("graph_module", "signature", "input_specs", 0,
                                                               "parameter"),
             ("graph_module", "graph", "tensor_values", "p_proj_weight")]

    @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.sampled_from(paths), anything)
    def run(path: tuple, value: object) -> None:
        document = json.loads(json.dumps(original))
        target = document
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
        forged = tmp_path / "f.etrecord"
        with zipfile.ZipFile(RECORD) as record, zipfile.ZipFile(forged, "w") as out:
            for item in record.infolist():
                data = (json.dumps(document).encode() if item.filename == "edge_dialect_exported_program/forward"
                        else record.read(item))
                out.writestr(item.filename, data)
        try:
            names = match_names(source, read_etrecord(forged), "forged")
        except PteDevconstError as error:
            assert str(error).startswith(f"{forged}: ") and "\n" not in str(error)
        else:
            assert set(names.by_plan.get(0, {}).values()) <= {"inner", "proj.weight", "proj.bias", "scale", "shift"}

    with open_pte(PTE) as source:
        run()


def test_validate_names_the_moved_constants(expected: dict[int, str], tmp_path: Path) -> None:
    out = tmp_path / "out.pte"
    assert invoke("rewrite", PTE, "-o", out).exit_code == 0
    code, document = invoke_json("validate", PTE, out, "--simulate-devices", "--etrecord", RECORD)
    assert code == 0, document
    moved = {c["value"]: c["name"] for m in document["methods"] for c in m["moved_constants"]}
    assert moved == {v: n for v, n in expected.items() if n.startswith("proj.")}
    _, plain = invoke_json("validate", PTE, out, "--simulate-devices")
    assert {c["name"] for m in plain["methods"] for c in m["moved_constants"]} == {None}


def test_as_many_tensors_with_the_same_bytes_as_recorded_are_named_with_every_candidate() -> None:
    """Two fresh LayerNorms hold the same ones: each program tensor with those bytes is 'a or b'."""
    import hashlib

    from pte_devconst.rewriter.names import _match

    with open_pte(PTE) as source:
        tensor = source.program.execution_plan[0].values[2]
        digest = hashlib.sha256(bytes(source.tensor_bytes(tensor))).hexdigest()
        twins = [RecordedConstant(name, "float32", (8,), lambda: digest) for name in ("ln1.bias", "ln2.bias")]
        assert _match(source, [(2, tensor), (9, tensor)], twins) == {2: "ln1.bias or ln2.bias",
                                                                     9: "ln1.bias or ln2.bias"}
        many = [RecordedConstant(f"l{i}.bias", "float32", (8,), lambda: digest) for i in range(5)]
        named = _match(source, [(i, tensor) for i in range(5)], many)
        assert set(named.values()) == {"l0.bias or 4 others with the same bytes"}
