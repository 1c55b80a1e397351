"""Hostile ETRecords (issue 27): zip bombs, malformed entries and hostile pickles given to ``--etrecord``.

Each ends within seconds and a few hundred MiB, under ``ulimit -v 3000000`` as in the issue, with one line naming
the file and the entry (``not an ETRecord (or one this tool will not read): FILE: ENTRY: why``) and exit 2: never
``internal error``, never exit 0 after a swallowed failure.  On main 0f78ed3 the JSON bomb ended in ``internal
error: MemoryError`` after about 40 s, the pickle bomb exited 0 as if nothing happened, and the malformed entries
ended in ``internal error`` (NotImplementedError, RuntimeError, zlib.error, RecursionError).  Every file is made
here from the real fixture, small on disk (``fuzz/etrecord.py``).
"""

from __future__ import annotations

import io
import sys
import time
import zipfile
from pathlib import Path
from typing import Callable

import pytest

from cli_runner import invoke, invoke_json, limited
from fuzz import etrecord as forge
from pte_devconst import api
from pte_devconst.program import etrecord
from pte_devconst.program.etrecord import ETRecordError, read_etrecord
from pte_devconst.program.torch_save import PickleWalker, TorchSaveError
from pte_devconst.rewriter.names import match_names
from pte_devconst.schema.pte_file import PteFile
from pte_devconst.util.bounded_json import BoundedJSON, JSONBoundError, count_values, nesting

PTE = forge.NAMES / "mixed.pte"
PREFIX = "pte-devconst: error: not an ETRecord (or one this tool will not read): "
MEMORY_KIB = 400 * 1024  # a few hundred MiB: the interpreter and the CLI take about 60 of them
SECONDS = 10  # of CPU: a few seconds each (the interpreter and the CLI take about one), with room to spare

# name -> (the ETRecord's bytes, the entry named, words of the reason)
SHAPES: dict[str, tuple[Callable[[], bytes], str, str]] = {
    "JSON bomb: 250 MiB of [], in 280 KiB": (
        lambda: forge.json_bomb(250 << 20), forge.EDGE, "declares 261,881,860 bytes, more than the 67,108,864"),
    "JSON bomb within the size bound, past the ratio": (
        lambda: forge.json_bomb(20 << 20), forge.EDGE, "(a ratio of 997, more than the 256"),
    "pickle bomb: 250 MiB of EMPTY_DICT, the state dict deflated (the issue's 1.3 KiB file)": (
        lambda: forge.pickle_bomb(250 << 20), forge.STATE, "compressed with method 8 (this tool seeks"),
    "pickle bomb: 250 MiB of EMPTY_DICT, the state dict stored": (
        lambda: forge.pickle_bomb(250 << 20, outer_deflated=False), forge.STATE + ": archive/data.pkl",
        "declares 262,144,003 bytes, more than the 16,777,216"),
    "pickle past the object budget: 2.05 million dicts appended (4.1 MB)": (
        lambda: forge.pickle_entry(b"\x80\x02]" + b"}a" * 2_050_000 + b"."), forge.STATE + ": archive/data.pkl",
        "a pickle that builds more than 4,000,000 objects"),
    "compression method 99": (
        lambda: forge.patched(forge.write_zip(forge.seed_entries()), forge.EDGE, method=99), forge.EDGE,
        "compressed with method 99"),
    "the encrypted flag": (
        lambda: forge.patched(forge.write_zip(forge.seed_entries()), forge.EDGE, flags=1), forge.EDGE, "encrypted"),
    "a corrupt deflate stream": (
        lambda: forge.corrupt_deflate(forge.EDGE), forge.EDGE, "zlib.error: Error -3 while decompressing data"),
    "JSON nested 100,000 deep": (
        lambda: forge.nested_json(100_000), forge.EDGE, "JSON nested 100,000 deep, more than the 256"),
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_a_hostile_etrecord_is_one_line_and_exit_2_within_seconds_and_memory(shape: str, tmp_path: Path) -> None:
    make, entry, why = SHAPES[shape]
    record = tmp_path / "hostile.etrecord"
    record.write_bytes(make())
    assert record.stat().st_size < 5 << 20  # small on disk, whatever it inflates to
    # (the walk of 4 million opcodes takes seconds: one command for it, to stay in the per-test budget)
    for command in (("inspect", PTE), ("check", PTE))[: 1 if "object budget" in shape else 2]:
        code, stdout, stderr, _, seconds, peak = limited(*command, "--etrecord", record)
        assert code == 2 and stdout == "", (shape, command, code, stderr[-2000:])
        assert stderr.count("\n") == 1 and stderr.startswith(f"{PREFIX}{record}: {entry}: "), stderr
        assert why in stderr, stderr
        assert "internal error" not in stderr and "Traceback" not in stderr
        assert seconds < SECONDS and peak < MEMORY_KIB, (shape, command, seconds, peak)


def test_every_command_refuses_a_bomb_before_any_program_and_writes_nothing(tmp_path: Path) -> None:
    record = tmp_path / "bomb.etrecord"
    record.write_bytes(forge.pickle_bomb(250 << 20, outer_deflated=False))
    out = tmp_path / "o.pte"
    for command in (["inspect", PTE], ["rewrite", PTE, "-o", out], ["check", PTE], ["diff", PTE, PTE],
                    ["run", PTE, "--simulate-devices"], ["validate", PTE, PTE, "--simulate-devices"]):
        done = invoke(*command, "--etrecord", record)
        assert done.exit_code == 2 and done.stdout == "", (command, done.stderr)
        assert done.stderr.count("\n") == 1 and done.stderr.startswith(PREFIX + str(record)), done.stderr
    assert not out.exists()
    with pytest.raises(ETRecordError, match="archive/data.pkl: declares 262,144,003 bytes"):
        api.inspect(PTE, etrecord=record)


# --- the JSON reader: a budget of values and a depth ---------------------------------------------------------------

def test_the_json_budget_refuses_before_building(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Past ``MAX_JSON_VALUES`` (here lowered under the fixture's 1,073), the entry is refused with the figure and
    nothing is built; with its own count (and its out_spec's) it reads."""
    record = forge.NAMES / "mixed.etrecord"
    with zipfile.ZipFile(record) as source:
        values = count_values(source.read(forge.EDGE))
    monkeypatch.setattr(etrecord, "MAX_JSON_VALUES", values - 1)
    with pytest.raises(ETRecordError, match=f"{forge.EDGE}: JSON of up to {values:,} values, more than the "
                                            f"{values - 1:,} this tool builds from one entry"):
        read_etrecord(record)
    monkeypatch.setattr(etrecord, "MAX_JSON_VALUES", values + 100)  # and the out_spec's JSON inside it
    assert read_etrecord(record)["forward"].constants


def test_the_out_spec_inside_the_json_shares_its_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    """The out_spec is JSON inside a JSON string: a bomb there is refused like one in the graph, in the same
    budget (it was parsed with ``json.loads`` and any failure swallowed)."""
    bomb = forge._out_spec(_Always(1), "mixed")[1]  # type: ignore[arg-type]
    monkeypatch.setattr(etrecord, "MAX_JSON_VALUES", count_values(bomb) + 1000)  # the graph passes, not its out_spec
    with pytest.raises(ETRecordError, match=f"{forge.EDGE}: its out_spec: JSON of up to"):
        read_etrecord(io.BytesIO(forge.with_entry(forge.EDGE, forge.stored(forge.EDGE, bomb))))
    deep = forge._out_spec(_Always(0), "mixed")[1]  # type: ignore[arg-type]
    with pytest.raises(ETRecordError, match=f"{forge.EDGE}: its out_spec: JSON nested 1,000 deep"):
        read_etrecord(io.BytesIO(forge.with_entry(forge.EDGE, forge.stored(forge.EDGE, deep))))


class _Always:
    """A ``random.Random`` stand-in whose ``choice`` picks item ``k`` (the shape wanted, by position)."""

    def __init__(self, k: int) -> None:
        self.k = k

    def choice(self, items):  # type: ignore[no-untyped-def]
        return items[self.k]


@pytest.mark.parametrize("text, values, depth", [
    (b'{"a": [1, 2, {"b": null}]}', 8, 3),  # exact: the dicts, "a", the list, 1, 2, "b", null
    (b'["[[[[", "]]", "\\\\", "\\"[", "{"]', 12, 1),  # brackets, escaped backslashes and quotes in strings: an
    # upper bound on the values, and no nesting
    (b"[" * 300 + b"]" * 300, 301, 300),
    (b"[]," * 1000, 2001, 1),
])
def test_the_json_measure_bounds_values_and_nesting(text: bytes, values: int, depth: int) -> None:
    assert count_values(text) == values and nesting(text) == depth


def test_bounded_json_refuses_depth_and_values_and_reads_the_rest() -> None:
    with pytest.raises(JSONBoundError, match="nested 100,000 deep"):
        BoundedJSON(10 ** 9).loads(b"[" * 100_000 + b"]" * 100_000)
    budget = BoundedJSON(10)
    assert budget.loads('[1, "a,b:c", [2]]') == [1, "a,b:c", [2]]
    with pytest.raises(JSONBoundError, match="JSON of up to 14 values, more than the 10"):
        budget.loads(b"[1, 2, 3, 4, 5, 6]")  # 7 more on top of the 7 counted before (a separator in the string)


# --- the pickle reader: what it builds, counted --------------------------------------------------------------------

def test_the_pickle_walk_counts_every_object_it_builds() -> None:
    walker = PickleWalker(b"\x80\x02]" + b"}a" * 1000 + b".", max_objects=5000)
    assert len(walker.load()) == 1000
    with pytest.raises(TorchSaveError, match="builds more than 1,000 objects"):
        PickleWalker(b"\x80\x02]" + b"}a" * 1000 + b".", max_objects=1000).load()
    with pytest.raises(TorchSaveError, match="builds more than 1,000 objects"):  # items moved count too
        PickleWalker(b"\x80\x02(" + b"N" * 600 + b"l.", max_objects=1000).load()


@pytest.mark.parametrize("name", sorted(forge.PICKLES))
def test_any_hostile_pickle_is_names_or_one_error(name: str) -> None:
    """Each pickle of the fuzz family, as the state dict's data.pkl: names (by shape where the bytes are unread,
    saying why) or one ``ETRecordError`` naming the entry; nothing it names runs."""
    import random

    data = forge.pickle_entry(forge.PICKLES[name](random.Random(0)))
    with PteFile.open(PTE) as source:
        try:
            names = match_names(source, read_etrecord(io.BytesIO(data)), "forged")
        except ETRecordError as error:
            assert str(error).startswith(f"{ETRecordError.PREFIX}: <etrecord>: {forge.STATE}: archive/data.pkl: ")
            assert "\n" not in str(error)
        else:
            assert set(names.by_plan.get(0, {}).values()) <= {"proj.weight", "proj.bias", "scale", "shift"}


def test_a_pickle_calling_what_it_may_not_says_so_and_names_by_shape(tmp_path: Path) -> None:
    """``builtins.exec`` in the state dict is neither run nor an error: those constants are matched by dtype and
    shape, and the report says why (before, the whole state dict was dropped without a word)."""
    record = tmp_path / "exec.etrecord"
    record.write_bytes(forge.pickle_entry(forge.PICKLES["unknown global called"](_Always(0))))  # type: ignore[arg-type]
    code, document = invoke_json("inspect", PTE, "--etrecord", record)
    assert code == 0
    assert any(f"{forge.STATE}: its pickle uses what this tool does not read (builtins.exec)" in note
               for note in document["names"]["notes"]), document["names"]


class _CountingIO(io.BytesIO):
    """A file that counts the bytes read from it."""

    read_bytes = 0

    def read(self, n: int | None = -1, /) -> bytes:
        data = super().read(n)
        self.read_bytes += len(data)
        return data


def test_the_tensors_bytes_are_hashed_once_and_within_twice_the_file(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every constant named on one storage: its bytes are read once per distinct run, however many constants (and
    calls) ask; past twice the file (plus the floor, lowered here) the reader refuses in one line instead of
    hashing on."""
    one = {name: ("0", 0, sizes, strides) for name, sizes, strides in (
        ("inner", (8, 8), (8, 1)), ("proj.weight", (8, 8), (8, 1)), ("proj.bias", (8,), (1,)), ("scale", (8,), (1,)),
        ("shift", (8,), (1,)))}
    source = _CountingIO(forge.pickle_entry(forge.tensors_pickle(one)))
    recorded = read_etrecord(source)
    constants = recorded["forward"].constants
    assert len(constants) >= 4
    source.read_bytes = 0
    digests = {c.name: c.digest() for c in constants * 3 if c.digest is not None}
    assert len(set(digests.values())) == 2  # the [8, 8] run and the [8] run
    assert source.read_bytes == 256 + 32  # each run once (where the storage lies was read with the index)
    seed = forge.write_zip(forge.seed_entries())
    monkeypatch.setattr(etrecord, "HASH_FLOOR", 100 - 2 * len(seed))
    again = read_etrecord(io.BytesIO(seed))
    with pytest.raises(ETRecordError, match=f"{forge.STATE}: its tensors name more than twice the file's bytes"):
        for constant in again["forward"].constants:
            assert constant.digest is not None
            constant.digest()


@pytest.mark.slow
def test_a_large_real_etrecord_still_names_every_constant_in_about_the_time_it_did(tmp_path: Path) -> None:
    """A real 1.5.1 export of 200 parameters (a 0.9 MB ETRecord, its edge program 513 KB of JSON): every constant is
    named, within the bounds, in about the CPU time the unbounded reader of main 0f78ed3 took (reading and naming:
    16 ms against 13 ms; 600 parameters: 45 ms against 52 ms; docs/robustness.md)."""
    torch = pytest.importorskip("torch")
    sys.path.insert(0, str(forge.NAMES))
    try:
        from make_names_fixture import Deep, export_managers
    finally:
        sys.path.remove(str(forge.NAMES))
    torch.manual_seed(0)
    _, program = export_managers(Deep(50).eval())
    pte, record = tmp_path / "deep.pte", tmp_path / "deep.etrecord"
    pte.write_bytes(program.buffer)  # type: ignore[attr-defined]
    program.get_etrecord().save(str(record))  # type: ignore[attr-defined]
    with PteFile.open(pte) as source:
        start = time.process_time()
        names = match_names(source, read_etrecord(record), "deep")
        seconds = time.process_time() - start
    assert names.count == 200 and names.unnamed == 0 and not names.notes
    assert seconds < 2, seconds


def test_a_constant_the_program_names_many_times_is_hashed_once(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The program's side of the names (issue 27: one stored run named many times): 100,000 values naming one
    constant's table (a 0.4 MB file) have its bytes hashed once, not 100,000 times (for a 4 MB constant that was
    400 GB to hash).  The copies are one constant the ETRecord cannot tell apart: they stay unnamed."""
    import hashlib
    import types

    from forge import aliased_values
    from pte_devconst.rewriter import names as names_module

    path = aliased_values(PTE, tmp_path / "aliased.pte", 100_000)
    calls: list[int] = []

    def sha256(data: bytes) -> "hashlib._Hash":
        calls.append(len(data))
        return hashlib.sha256(data)

    monkeypatch.setattr(names_module, "hashlib", types.SimpleNamespace(sha256=sha256))
    with PteFile.open(path) as source:
        start = time.process_time()
        names = match_names(source, read_etrecord(forge.NAMES / "mixed.etrecord"), "mixed")
        seconds = time.process_time() - start
    assert len(calls) <= 5, len(calls)  # each distinct constant of the program at most once
    assert names.unnamed >= 100_000 and seconds < 10
