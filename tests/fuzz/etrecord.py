"""Hostile ETRecords: forged zips, JSON and pickles around the real 1.5.1 fixtures (issue 27).

An ETRecord (``--etrecord``) comes with a third party's model: a zip of JSON (each method's serialized edge
program) and ``torch.save`` archives (its state dict and constants, each a zip of a pickle and the tensors'
bytes).  The builders here make the shapes that broke the reader, each from the real fixture
``tests/fixtures/names/mixed.etrecord`` and small on disk however much it inflates:

- ``json_bomb``: the edge program replaced by ``[],[],...`` of any inflated size (250 MiB in 250 KiB);
- ``pickle_bomb``: the state dict's ``data.pkl`` inflating to ``EMPTY_DICT`` opcodes (250 MiB in 1.3 KiB when
  both the data.pkl and the state dict are deflated);
- ``patched``: an entry's compression method or flags set in both of its headers (method 99, encrypted);
- ``corrupt_deflate``, ``nested_json``, and the pickles of ``PICKLES``.

``make_etrecord_case(seed, index)`` is the fuzz suite ``etrecord``: byte mutations of the zip's structure,
entries replaced by these shapes or by damaged JSON and pickles, and the tensors' bytes pointed elsewhere; each
case is an ETRecord judged together with its program (``harness.check_etrecord``, the ``--etrecord`` templates).
"""

from __future__ import annotations

import io
import json
import random
import struct
import zipfile
import zlib
from dataclasses import dataclass
from typing import Callable, Iterable, Optional

from .mutate import Case
from .seeds import REPO

NAMES = REPO / "tests" / "fixtures" / "names"
SEEDS = ("mixed", "named_io")  # NAME.etrecord with the program NAME.pte it names
EDGE = "edge_dialect_exported_program/forward"
STATE = EDGE + "_state_dict"
CONSTANTS = EDGE + "_constants"

_LOCAL = struct.Struct("<4s5H3L2H")
_CENTRAL = struct.Struct("<4s6H3L5H2L")
_END = struct.Struct("<4s4H2LH")


@dataclass(frozen=True)
class Entry:
    """One zip entry as written: ``data`` already compressed with ``method`` (0 stored, 8 raw deflate)."""

    name: str
    data: bytes
    size: int  # inflated
    crc: int
    method: int = 0
    flags: int = 0


def stored(name: str, data: bytes) -> Entry:
    return Entry(name, data, len(data), zlib.crc32(data))


def deflated(name: str, data: bytes) -> Entry:
    packer = zlib.compressobj(9, zlib.DEFLATED, -15)
    return Entry(name, packer.compress(data) + packer.flush(), len(data), zlib.crc32(data), 8)


def repeated(name: str, prefix: bytes, chunk: bytes, repeats: int, suffix: bytes) -> Entry:
    """``prefix + chunk * repeats + suffix`` deflated without ever holding it: each part compressed once to a
    byte-aligned block (a full flush resets the compressor, so equal chunks give equal blocks), the chunk's block
    repeated, and an empty final block."""
    def block(data: bytes) -> bytes:
        packer = zlib.compressobj(9, zlib.DEFLATED, -15)
        return packer.compress(data) + packer.flush(zlib.Z_FULL_FLUSH)

    crc = zlib.crc32(prefix)
    for _ in range(repeats):
        crc = zlib.crc32(chunk, crc)
    crc = zlib.crc32(suffix, crc)
    data = block(prefix) + block(chunk) * repeats + block(suffix) + b"\x03\x00"
    return Entry(name, data, len(prefix) + len(chunk) * repeats + len(suffix), crc, 8)


def write_zip(entries: Iterable[Entry]) -> bytes:
    """A zip of ``entries`` exactly as given (no ZIP64: every size under 4 GiB)."""
    out, central = io.BytesIO(), io.BytesIO()
    count = 0
    for entry in entries:
        name = entry.name.encode("utf-8")
        offset = out.tell()
        out.write(_LOCAL.pack(b"PK\x03\x04", 20, entry.flags, entry.method, 0, 0x21, entry.crc, len(entry.data),
                              entry.size, len(name), 0) + name + entry.data)
        central.write(_CENTRAL.pack(b"PK\x01\x02", 20, 20, entry.flags, entry.method, 0, 0x21, entry.crc,
                                    len(entry.data), entry.size, len(name), 0, 0, 0, 0, 0, offset) + name)
        count += 1
    start = out.tell()
    out.write(central.getvalue())
    out.write(_END.pack(b"PK\x05\x06", 0, 0, count, count, len(central.getvalue()), start, 0))
    return out.getvalue()


def seed_entries(seed: str = "mixed") -> list[Entry]:
    """The entries of a fixture ETRecord, stored as ExecuTorch's writer stores them."""
    with zipfile.ZipFile(NAMES / f"{seed}.etrecord") as record:
        return [stored(info.filename, record.read(info)) for info in record.infolist()]


def replaced(entries: list[Entry], name: str, new: Optional[Entry]) -> list[Entry]:
    """``entries`` with entry ``name`` replaced by ``new`` (dropped for None)."""
    return [new if e.name == name else e for e in entries if e.name != name or new is not None]


def with_entry(name: str, new: Optional[Entry], seed: str = "mixed") -> bytes:
    return write_zip(replaced(seed_entries(seed), name, new))


def json_bomb(inflated: int = 250 << 20, seed: str = "mixed") -> bytes:
    """The ETRecord with its edge program ``[[],[],...,[]]``, ``inflated`` bytes deflated (250 MiB: 250 KiB)."""
    chunk = b"[]," * (1 << 18)
    return with_entry(EDGE, repeated(EDGE, b"[", chunk, max(1, inflated // len(chunk)), b"[]]"), seed)


def nested_json(depth: int, seed: str = "mixed") -> bytes:
    """The ETRecord with its edge program ``depth`` brackets deep."""
    return with_entry(EDGE, deflated(EDGE, b"[" * depth + b"]" * depth), seed)


def torch_save(pickle: Entry, storages: Optional[dict[str, bytes]] = None, prefix: str = "archive/") -> bytes:
    """A ``torch.save`` archive (stored, as torch writes it) with ``pickle`` as its data.pkl."""
    entries = [Entry(prefix + "data.pkl", pickle.data, pickle.size, pickle.crc, pickle.method, pickle.flags)]
    entries += [stored(f"{prefix}data/{key}", data) for key, data in (storages or {}).items()]
    return write_zip(entries + [stored(prefix + "version", b"3\n")])


def seed_state_dict(seed: str = "mixed") -> tuple[bytes, dict[str, bytes]]:
    """(data.pkl, storages) of the fixture's state dict."""
    with zipfile.ZipFile(NAMES / f"{seed}.etrecord") as record:
        with zipfile.ZipFile(io.BytesIO(record.read(STATE))) as inner:
            pkl = inner.read(next(n for n in inner.namelist() if n.endswith("data.pkl")))
            storages = {n.rsplit("/", 1)[1]: inner.read(n) for n in inner.namelist() if "/data/" in n}
    return pkl, storages


def pickle_bomb(inflated: int = 250 << 20, *, outer_deflated: bool = True, seed: str = "mixed") -> bytes:
    """The state dict's data.pkl ``PROTO 2`` and ``inflated`` bytes of ``EMPTY_DICT`` (deflated); with
    ``outer_deflated`` the state dict entry itself deflated too, so 250 MiB take 1.3 KiB."""
    chunk = b"}" * (1 << 20)
    archive = torch_save(repeated("data.pkl", b"\x80\x02", chunk, max(1, inflated // len(chunk)), b"."))
    return with_entry(STATE, deflated(STATE, archive) if outer_deflated else stored(STATE, archive), seed)


def pickle_entry(data: bytes, *, deflate: bool = False, seed: str = "mixed", storages: bool = True) -> bytes:
    """The ETRecord with its state dict's data.pkl replaced by ``data`` (the fixture's storages kept)."""
    _, kept = seed_state_dict(seed)
    pkl = deflated("data.pkl", data) if deflate else stored("data.pkl", data)
    return with_entry(STATE, stored(STATE, torch_save(pkl, kept if storages else None)), seed)


def patched(data: bytes, entry: str, *, method: Optional[int] = None, flags: Optional[int] = None) -> bytes:
    """``data`` (a zip) with ``entry``'s compression method or flag bits set in its local and central headers."""
    out = bytearray(data)
    name = entry.encode("utf-8")
    at = 0
    while (at := out.find(name, at + 1)) >= 0:
        if out[at - 30:at - 26] == b"PK\x03\x04":
            header = at - 30
            fields = (header + 6, header + 8)
        elif out[at - 46:at - 42] == b"PK\x01\x02":
            header = at - 46
            fields = (header + 8, header + 10)
        else:
            continue
        if flags is not None:
            struct.pack_into("<H", out, fields[0], flags)
        if method is not None:
            struct.pack_into("<H", out, fields[1], method)
    return bytes(out)


def corrupt_deflate(entry: str = EDGE, seed: str = "mixed") -> bytes:
    """The ETRecord with ``entry`` deflated, then its stream's first bytes set to an invalid block type."""
    with zipfile.ZipFile(NAMES / f"{seed}.etrecord") as record:
        good = deflated(entry, record.read(entry))
    bad = Entry(entry, b"\xff\xff\xff" + good.data[3:], good.size, good.crc, 8)
    return with_entry(entry, bad, seed)


# --- pickles ---------------------------------------------------------------------------------------

def _global(module: str, name: str) -> bytes:
    return b"c" + module.encode() + b"\n" + name.encode() + b"\n"


def _unicode(text: str) -> bytes:
    raw = text.encode("utf-8")
    return b"X" + struct.pack("<I", len(raw)) + raw


def tensor_pickle(name: str, storage: str, offset: int, sizes: tuple[int, ...], strides: tuple[int, ...]) -> bytes:
    """``{name: _rebuild_tensor_v2(storage, offset, sizes, strides, False, OrderedDict())}`` as torch.save writes it."""
    return tensors_pickle({name: (storage, offset, sizes, strides)})


def tensors_pickle(tensors: dict[str, tuple[str, int, tuple[int, ...], tuple[int, ...]]]) -> bytes:
    """A state dict of ``name: (storage, offset, sizes, strides)`` pickled as torch.save pickles one."""
    def ints(values: tuple[int, ...]) -> bytes:
        return b"(" + b"".join(b"J" + struct.pack("<i", v) if v < 1 << 31 else b"\x8a\x08" + struct.pack("<q", v)
                               for v in values) + b"t"

    def rebuild(storage: str, offset: int, sizes: tuple[int, ...], strides: tuple[int, ...]) -> bytes:
        persid = b"(" + _unicode("storage") + _global("torch", "FloatStorage") + _unicode(storage) \
            + _unicode("cpu") + b"K\x01tQ"
        return _global("torch._utils", "_rebuild_tensor_v2") + b"(" + persid + b"J" + struct.pack("<i", offset) \
            + ints(sizes) + ints(strides) + b"\x89" + _global("collections", "OrderedDict") + b")Rt" + b"R"

    return b"\x80\x02}(" + b"".join(_unicode(name) + rebuild(*parts) for name, parts in tensors.items()) + b"u."


PICKLES: dict[str, Callable[[random.Random], bytes]] = {
    "EMPTY_DICT run appended": lambda rng: b"\x80\x02]" + b"}a" * rng.choice((10, 1000, 100000)) + b".",
    "LONG_BINPUT 2^32-1": lambda rng: b"\x80\x02}r\xff\xff\xff\xff.",
    "memo miss": lambda rng: b"\x80\x02h\x07.",
    "tuple key nested deep": lambda rng: b"\x80\x02}(" + b")" + b"\x85" * rng.choice((10, 100000)) + b"Nu.",
    "list key": lambda rng: b"\x80\x02}(]Nu.",
    "unknown global called": lambda rng: b"\x80\x02}(" + _unicode("proj.weight") + _global("builtins", "exec")
    + _unicode("print(1)") + b"\x85Ru.",
    "os.system": lambda rng: b"\x80\x02" + _global("os", "system") + _unicode("true") + b"\x85R.",
    "NEWOBJ and BUILD": lambda rng: b"\x80\x02" + _global("torch", "Tensor") + b")\x81}b.",
    "truncated": lambda rng: tensor_pickle("proj.weight", "0", 0, (8, 8), (8, 1))[:rng.randrange(2, 60)],
    "no STOP": lambda rng: b"\x80\x02}",
    "stack left over": lambda rng: b"\x80\x02}}.",
    "unknown opcode": lambda rng: b"\x80\x02" + bytes([rng.choice(b"IFLSVp")]) + b"0\n.",
    "persistent id of a number": lambda rng: b"\x80\x02K\x07Q.",
    "LONG4 of 2^31-1 bytes": lambda rng: b"\x80\x02\x8b\xff\xff\xff\x7f.",
    "BINUNICODE past the end": lambda rng: b"\x80\x02X\xff\xff\xff\x00ab.",
    "invalid UTF-8": lambda rng: b"\x80\x02X\x02\x00\x00\x00\xff\xfe.",
    "huge sizes": lambda rng: tensor_pickle("proj.weight", "0", 0, (1 << 40, 1 << 40), (1 << 40, 1)),
    "rank 100": lambda rng: tensor_pickle("proj.weight", "0", 0, (1,) * 100, (1,) * 100),
    "offset past the storage": lambda rng: tensor_pickle("proj.weight", "0", 1 << 30, (8, 8), (8, 1)),
    "missing storage": lambda rng: tensor_pickle("proj.weight", "nowhere", 0, (8, 8), (8, 1)),
    "not contiguous": lambda rng: tensor_pickle("proj.weight", "0", 0, (8, 8), (1, 8)),
    "many names on one storage": lambda rng: tensors_pickle(
        {name: ("0", k, (8,), (1,)) for k, name in enumerate(["proj.bias", "scale", "shift"]
                                                              + [f"t{k}" for k in range(rng.choice((10, 2000)))])}),
    "random bytes": lambda rng: b"\x80\x02" + rng.randbytes(rng.choice((1, 16, 256))),
}


# --- the fuzz suite --------------------------------------------------------------------------------

def _zip_bytes(rng: random.Random, data: bytes) -> tuple[str, bytes]:
    """Damage the zip's own structure: a header field, a truncation, flipped bits, a chunk."""
    out = bytearray(data)
    choice = rng.randrange(5)
    if choice == 0:
        cut = rng.randrange(len(out))
        return f"truncated at {cut}", bytes(out[:cut])
    signatures = [i for i in range(len(out) - 4) if out[i:i + 2] == b"PK" and out[i + 2:i + 4] in
                  (b"\x03\x04", b"\x01\x02", b"\x05\x06")]
    if choice in (1, 2) and signatures:
        at = rng.choice(signatures)
        kind = bytes(out[at + 2:at + 4])
        layout = {b"\x03\x04": (4, 30), b"\x01\x02": (4, 46), b"\x05\x06": (4, 22)}[kind]
        field = rng.randrange(layout[0], layout[1] - 1)
        value = rng.choice((0, 1, 0xFF, 0xFFFF, 0x7FFF, rng.randrange(1 << 16)))
        width = rng.choice((2, 4)) if field + 4 <= at + layout[1] else 2
        struct.pack_into("<H" if width == 2 else "<I", out, at + field,
                         value if width == 2 else rng.choice((0, 1, 0x7FFFFFFF, 0xFFFFFFFF, value << 12)))
        return f"header PK{kind.hex()} at {at} +{field} = {value} ({width} bytes)", bytes(out)
    if choice == 3:
        for _ in range(rng.randint(1, 16)):
            i = rng.randrange(len(out))
            out[i] ^= 1 << rng.randrange(8)
        return "bit flips", bytes(out)
    start = rng.randrange(len(out))
    size = rng.randint(1, 256)
    if rng.random() < 0.5:
        del out[start:start + size]
        return f"chunk of {size} deleted at {start}", bytes(out)
    out[start:start] = rng.randbytes(size)
    return f"{size} random bytes inserted at {start}", bytes(out)


def _hostile_json(rng: random.Random) -> tuple[str, bytes]:
    choice = rng.randrange(6)
    if choice == 0:
        depth = rng.choice((100, 256, 257, 1000, 100000))
        return f"nested {depth} deep", b"[" * depth + b"]" * depth
    if choice == 1:
        count = rng.choice((10, 10000, 1 << 20))
        return f"{count} empty lists", b"[" + b"[]," * count + b"[]]"
    if choice == 2:
        return "a 5,000-digit number", b'{"graph_module": ' + b"7" * 5000 + b"}"
    if choice == 3:
        return "truncated", json.dumps({"graph_module": {"signature": {}}}).encode()[:rng.randrange(1, 30)]
    if choice == 4:
        return "not UTF-8", b'{"graph_module": "\xff\xfe"}'
    return "escaped quotes and brackets in strings", json.dumps({"graph_module": "[" * 300 + '\\"' * 50}).encode()


def _out_spec(rng: random.Random, seed: str) -> tuple[str, bytes]:
    """The real graph with its out_spec (a JSON string inside the JSON) replaced by a hostile one."""
    with zipfile.ZipFile(NAMES / f"{seed}.etrecord") as record:
        document = json.loads(record.read(EDGE))
    spec = rng.choice(("[" * 1000 + "]" * 1000, "[" + "[]," * 100000 + "[]]", "{", '[1, {"type": null}]'))
    for entry in document["graph_module"].get("module_call_graph") or ():
        if entry.get("fqn") == "" and isinstance(entry.get("signature"), dict):
            entry["signature"]["out_spec"] = spec
    return f"out_spec {spec[:12]!r}... ({len(spec)} chars)", json.dumps(document).encode()


def _entry_shape(rng: random.Random, seed: str) -> tuple[str, bytes]:
    """One entry replaced by a hostile shape, or its headers changed."""
    choice = rng.randrange(9)
    if choice == 0:
        size = rng.choice((2 << 20, 70 << 20, 250 << 20))
        return f"JSON bomb of {size:,} bytes", json_bomb(size, seed)
    if choice == 1:
        size = rng.choice((1 << 20, 20 << 20, 250 << 20))
        outer = rng.random() < 0.5
        return f"pickle bomb of {size:,} bytes (state dict {'deflated' if outer else 'stored'})", \
            pickle_bomb(size, outer_deflated=outer, seed=seed)
    if choice == 2:
        entry = rng.choice((EDGE, STATE, CONSTANTS, "ETRECORD_V0"))
        method = rng.choice((1, 6, 9, 12, 14, 93, 98, 99))
        return f"{entry} method {method}", patched(write_zip(seed_entries(seed)), entry, method=method)
    if choice == 3:
        entry = rng.choice((EDGE, STATE, CONSTANTS))
        flags = rng.choice((0x1, 0x41, 0x8, 0x800))
        return f"{entry} flags {flags:#x}", patched(write_zip(seed_entries(seed)), entry, flags=flags)
    if choice == 4:
        return "corrupt deflate stream", corrupt_deflate(EDGE, seed)
    if choice == 5:
        note, data = _hostile_json(rng)
        packed = deflated(EDGE, data) if rng.random() < 0.5 else stored(EDGE, data)
        return f"edge program: {note}", with_entry(EDGE, packed, seed)
    if choice == 6:
        note, data = _out_spec(rng, seed)
        return note, with_entry(EDGE, stored(EDGE, data), seed)
    if choice == 7:
        name = rng.choice(sorted(PICKLES))
        deflate = rng.random() < 0.3
        return f"data.pkl: {name}{' (deflated)' if deflate else ''}", pickle_entry(PICKLES[name](rng), deflate=deflate,
                                                                                  seed=seed)
    entry = rng.choice((EDGE, STATE, CONSTANTS, "ETRECORD_V0"))
    how = rng.choice(("dropped", "deflated", "emptied", "random"))
    entries = seed_entries(seed)
    old = next(e for e in entries if e.name == entry)
    with zipfile.ZipFile(NAMES / f"{seed}.etrecord") as record:
        raw = record.read(entry)
    new = {"dropped": None, "deflated": deflated(entry, raw), "emptied": stored(entry, b""),
           "random": stored(entry, rng.randbytes(rng.choice((10, len(raw)))))}[how]
    return f"{entry} {how}", write_zip(replaced(entries, old.name, new))


def make_etrecord_case(seed: int, index: int) -> Case:
    """Case ``index`` of the ``etrecord`` suite: an ETRecord for ``Case.seed_name``'s program (NAME.pte)."""
    rng = random.Random(f"etrecord:{seed}:{index}")
    name = SEEDS[index % len(SEEDS)]
    if rng.random() < 0.4:
        note, data = _zip_bytes(rng, (NAMES / f"{name}.etrecord").read_bytes())
    else:
        note, data = _entry_shape(rng, name)
        if rng.random() < 0.15:
            more, data = _zip_bytes(rng, data)
            note += f"; {more}"
    return Case(index, "etrecord", f"tests/fixtures/names/{name}.etrecord", note, data, suite="etrecord")
