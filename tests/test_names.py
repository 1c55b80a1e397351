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
import struct
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
                    ["diff", PTE, PTE], ["run", PTE, "--simulate-devices"],
                    ["validate", PTE, PTE, "--simulate-devices"]):
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
    assert names.unnamed == 3 and "3 constants not named" in names.notes[-1]


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
    assert set(document["names"]) == {"source", "named", "unnamed", "named_inputs", "named_outputs", "notes"}
    assert document["names"]["named_inputs"] == 1 and document["names"]["named_outputs"] == 0  # x; a bare output


def test_methods_are_found_by_entry_name(tmp_path: Path) -> None:
    from pte_devconst.program.etrecord import _method_names

    members = ["ETRECORD_V0", "edge_dialect_exported_program/forward",
               "edge_dialect_exported_program/forward_state_dict",
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
            assert str(error).startswith(f"not an ETRecord (or one this tool will not read): {forged}: ")
            assert "\n" not in str(error)
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


# --------------------------------------------------------------------------- inputs and outputs

IO_PTE, IO_RECORD = HERE / "named_io.pte", HERE / "named_io.etrecord"


@pytest.fixture(scope="module")
def user_names() -> tuple[list[str], list[str]]:
    """What the user wrote: ``NamedIO.forward``'s arguments, and the keys of the dict it returns (run eagerly)."""
    import inspect

    torch = pytest.importorskip("torch")
    sys.path.insert(0, str(HERE))
    from make_names_fixture import NamedIO

    arguments = [p for p in inspect.signature(NamedIO.forward).parameters if p != "self"]
    with torch.no_grad():
        keys = list(NamedIO()(*NamedIO.example_inputs()))
    assert arguments == ["tokens", "temperature"] and keys == ["logits", "hidden"]  # the fixture is as documented
    return arguments, keys


def _io(document: dict, which: str) -> list[tuple[int, object, str, list]]:
    return [(v["index"], v["name"], v["dtype"], v["shape"]) for v in document["file"]["methods"][0][which]]


def test_inputs_and_outputs_are_named_as_the_user_wrote_them(user_names) -> None:
    arguments, keys = user_names
    code, document = invoke_json("inspect", IO_PTE, "--etrecord", IO_RECORD)
    assert code == 0
    inputs, outputs = _io(document, "inputs"), _io(document, "outputs")
    # Each name on the value that holds it: tokens is the int64 [1, 4] argument, temperature the float32 scalar.
    assert [(n, d, s) for _, n, d, s in inputs] == [("tokens", "int64", [1, 4]), ("temperature", "float32", [])]
    assert [n for _, n, _, _ in outputs] == keys
    assert document["names"]["named_inputs"] == 2 and document["names"]["named_outputs"] == 2
    # The mutated buffer starts from its initial data (3.0): named in the table of planned initial data.
    (steps,) = document["file"]["methods"][0]["initial_data"]
    with open_pte(IO_PTE) as source:
        held = bytes(source.tensor_bytes(source.program.execution_plan[0].values[steps["value"]]))
    assert steps["name"] == "steps" and held == struct.pack("<f", 3.0)
    for fmt in ("text", "markdown"):
        shown = invoke("inspect", IO_PTE, "--etrecord", IO_RECORD, "--format", fmt, env={"COLUMNS": "200"}).stdout
        flat = re.sub(r"[│\s\\]+", " ", shown)  # markdown escapes brackets
        for index, name, _, _ in inputs + outputs:
            assert f"{name} (v{index}):" in flat, (name, fmt)
    # Without the ETRecord nothing is named, and no value index is said for nothing.
    _, plain = invoke_json("inspect", IO_PTE)
    assert {n for _, n, _, _ in _io(plain, "inputs") + _io(plain, "outputs")} == {None}
    assert plain["file"]["methods"][0]["initial_data"][0]["name"] == f"value {steps['value']}"
    assert not re.search(r"\(v\d+\):", invoke("inspect", IO_PTE).stdout)
    assert "Inputs:" not in invoke("inspect", IO_PTE, "--format", "markdown").stdout


def test_run_names_its_inputs_and_outputs_in_every_format(user_names, tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    arguments, keys = user_names
    inputs = tmp_path / "inputs.pt"
    torch.save((torch.tensor([[1, 2, 3, 4]]), torch.tensor(0.5)), inputs)
    common = ("run", IO_PTE, "--simulate-devices", "--inputs", inputs)
    code, document = invoke_json(*common, "--etrecord", IO_RECORD)
    assert code == 0 and document["input_names"] == arguments and document["names"]["named_outputs"] == 2
    outputs = {o["name"]: o["sum"] for o in document["calls"][0]["outputs"]}
    assert list(outputs) == keys
    # The name is on the right output: logits is hidden / temperature (0.5).
    assert outputs["logits"] == pytest.approx(outputs["hidden"] / 0.5, rel=1e-5)
    text = invoke(*common, "--etrecord", IO_RECORD)
    assert text.exit_code == 0 and "inputs: tokens, temperature" in text.stdout
    assert re.search(r"┃ *name *┃", text.stdout) and all(re.search(rf"│ *{k} *│", text.stdout) for k in keys)
    markdown = invoke(*common, "--etrecord", IO_RECORD, "--format", "markdown").stdout
    assert "| # | name | dtype |" in markdown and all(f"| {k} |" in markdown for k in keys)
    # Without a source: no name column, the JSON says so.
    _, plain = invoke_json(*common)
    assert plain["names"] is None and plain["input_names"] == []
    assert {o["name"] for o in plain["calls"][0]["outputs"]} == {None}
    assert not re.search(r"┃ *name *┃", invoke(*common).stdout)


def test_validate_names_the_outputs_it_compares(user_names, tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    _, keys = user_names
    out, inputs, expected = tmp_path / "out.pte", tmp_path / "inputs.pt", tmp_path / "expected.pt"
    assert invoke("rewrite", IO_PTE, "-o", out).exit_code == 0
    torch.save({"forward": [(torch.tensor([[1, 2, 3, 4]]), torch.tensor(0.5))]}, inputs)
    torch.save({"forward": [(torch.zeros(1, 4, 8), torch.zeros(1, 4, 8))]}, expected)  # wrong on purpose
    common = ("validate", IO_PTE, out, "--simulate-devices", "--inputs", inputs, "--expected", expected,
              "--etrecord", IO_RECORD)
    code, document = invoke_json(*common)
    assert code == 1
    method = document["methods"][0]
    assert [t["name"] for t in method["output_tolerances"]] == keys
    failed = [c["detail"] for c in method["checks"] if c["status"] == "fail"]
    assert failed and "output 0 (logits): " in failed[0]
    moved = [f"{c['name']} (v{c['value']})" for c in method["moved_constants"]]
    assert sorted(c["name"] for c in method["moved_constants"]) == ["proj.bias", "proj.weight"]
    for fmt in ("text", "markdown"):
        shown = re.sub(r"[│\s]+", " ", invoke(*common, "--format", fmt).stdout)
        assert "output 0 (logits): " in shown, fmt
        assert f"moved: {', '.join(moved)}" in shown, fmt
    _, plain = invoke_json(*common[:-2])
    assert "(logits)" not in json.dumps(plain)
    assert {t["name"] for t in plain["methods"][0]["output_tolerances"]} == {None}


@pytest.mark.parametrize("program, record", [(IO_PTE, RECORD), (PTE, IO_RECORD)])
def test_an_etrecord_of_another_program_is_one_note_in_every_command(program: Path, record: Path,
                                                                     tmp_path: Path) -> None:
    out = tmp_path / "out.pte"
    assert invoke("rewrite", program, "-o", out).exit_code == 0
    said = "does not match this program"
    code, document = invoke_json("inspect", program, "--etrecord", record)
    assert code == 0 and sum(said in n for n in document["notes"]) == 1
    assert {v["name"] for v in document["file"]["methods"][0]["inputs"]} == {None}  # no positions trusted
    for command in (["inspect", program], ["check", program], ["rewrite", program, "-o", out], ["diff", program, out],
                    ["run", program, "--simulate-devices"]):
        for fmt in ("text", "markdown"):
            done = invoke(*command, "--etrecord", record, "--format", fmt)
            assert done.exit_code in (0, 1) and "Traceback" not in done.stderr
            assert done.stdout.count(said) == 1, (command, fmt)
    _, diffed = invoke_json("diff", program, out, "--etrecord", record)
    assert sum(said in n for n in diffed["diff"]["notes"]) == 1
    validated = invoke("validate", program, out, "--simulate-devices", "--etrecord", record)
    assert validated.exit_code == 0 and validated.stderr.count(said) == 1


def test_output_keys_follow_the_pytree_as_serialized_and_live() -> None:
    torch = pytest.importorskip("torch")
    from torch.utils import _pytree as pytree

    from pte_devconst.program.etrecord import output_keys

    cases = {("a", "b"): {"a": 1, "b": 2},
             ("logits", "past[0]", "past[1]", "cache.k"): {"logits": 0, "past": [1, 2], "cache": {"k": 3}},
             (None, None): (1, 2), ("x",): {"x": 1}, (None,): 1}
    for expected, value in cases.items():
        spec = pytree.tree_structure(value)
        assert output_keys(pytree.treespec_dumps(spec), len(expected)) == expected
        assert output_keys(spec, len(expected)) == expected
        assert output_keys(pytree.treespec_dumps(spec), len(expected) + 1) is None  # another program's outputs
    assert output_keys("not json", 1) is None and output_keys(None, 0) is None
    assert torch is not None


def test_every_report_with_names_follows_the_schema(tmp_path: Path) -> None:
    from test_report_schema import SCHEMA_FILE, assert_valid
    import jsonschema

    validator = jsonschema.Draft202012Validator(json.loads(SCHEMA_FILE.read_text()))
    out = tmp_path / "out.pte"
    for record in (IO_RECORD, RECORD):  # this program's, and another's (its notes)
        named = ("--etrecord", record)
        _, document = invoke_json("rewrite", IO_PTE, "-o", out, *named)
        assert_valid(validator, document, "rewrite")
        for command in (("inspect", IO_PTE), ("check", IO_PTE), ("diff", IO_PTE, out),
                        ("run", IO_PTE, "--simulate-devices"), ("validate", IO_PTE, out, "--simulate-devices")):
            _, document = invoke_json(*command, *named)
            assert_valid(validator, document, command[0])
