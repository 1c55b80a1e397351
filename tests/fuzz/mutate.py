"""Deterministic mutations of valid .pte/.ptd files.

``make_case(seed, index)`` picks a seed file and one mutation from
``random.Random(f"{seed}:{index}")`` alone.  Byte-level mutations (truncation,
bit flips, forged offsets and sizes, chunk shuffles) hit the headers and the
flatbuffer; structured mutations decode a file, change one field of the model
with ``dataclasses.replace`` (an out-of-range index, a huge size, a missing
table), re-encode it with the project encoder and keep the original segment
bytes, so the damage gets past the flatbuffer layer and reaches the semantic
checks.
"""

from __future__ import annotations

import dataclasses
import random
import struct
from dataclasses import dataclass
from typing import Any, Callable, Optional

from pte_devconst.schema import model as m
from pte_devconst.schema.decode import decode_flat_tensor, decode_program
from pte_devconst.schema.encode import encode_flat_tensor, encode_program
from pte_devconst.schema.header import (PTD_HEADER_PADDED, SEGMENT_ALIGNMENT, ExtendedHeader, PtdHeader, align_up)
from pte_devconst.schema.pte_writer import insert_extended_header
from pte_devconst.schema.ptd_model import FlatTensor

from .seeds import Seed, foreign_files, load_seeds


@dataclass(frozen=True)
class Case:
    """One fuzz input: which reader it is for, how it was made, and its bytes."""

    index: int
    kind: str  # "pte" or "ptd"
    seed_name: str
    mutation: str
    data: bytes
    ptd: Optional[bytes] = None  # the .ptd that goes with a .pte case (its seed's, or a mutated copy)
    suite: str = "classic"  # "classic" (this module), "structure" or "real" (structure.py)

    @property
    def label(self) -> str:
        suite = "" if self.suite == "classic" else f"{self.suite} "
        return f"{suite}case {self.index} ({self.kind}, {self.seed_name}, {self.mutation:.400}, {len(self.data)} B)"


U32_SPECIAL = (0, 1, 2, 3, 4, 7, 8, 0x7F, 0x80, 0xFF, 0xFFFF, 0x10000, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFE, 0xFFFFFFFF)
U64_SPECIAL = (0, 1, 127, 128, 1 << 31, 1 << 32, (1 << 32) + 128, 1 << 40, 1 << 60, (1 << 63) - 1, 1 << 63,
               (1 << 64) - 128, (1 << 64) - 1)


def _header_info(data: bytes) -> tuple[int, int, int]:
    """(flatbuffer end, segment base, segment data size) as the file's own header claims them."""
    if data[4:8] == b"FT01" and len(data) >= 48:
        _, _, fb_off, fb_size, base, size = struct.unpack_from("<4sIQQQQ", data, 8)
        return fb_off + fb_size, base, size
    if len(data) >= 40 and data[8:12] == b"eh00":
        _, _, program_size, base, size = struct.unpack_from("<4sIQQQ", data, 8)
        return program_size, base, size
    return len(data), len(data), 0


def _region(rng: random.Random, data: bytes) -> tuple[int, int]:
    """A byte range to damage: the headers, the flatbuffer, the segments, or anywhere."""
    fb_end, base, size = _header_info(data)
    fb_end = min(fb_end, len(data))
    choices = [(0, min(len(data), 64)), (min(8, fb_end), max(fb_end, 9)), (0, len(data))]
    if base < len(data):
        choices.append((base, len(data)))
    lo, hi = rng.choice(choices)
    hi = min(max(hi, lo + 1), len(data))
    lo = min(lo, hi - 1)
    return max(lo, 0), max(hi, 1)


def _set(data: bytearray, pos: int, packed: bytes) -> None:
    if 0 <= pos and pos + len(packed) <= len(data):
        data[pos:pos + len(packed)] = packed


def truncate(rng: random.Random, data: bytes) -> tuple[str, bytes]:
    fb_end, base, size = _header_info(data)
    points = [rng.randrange(0, len(data) + 1), rng.randrange(0, min(len(data), 128) + 1),
              fb_end - rng.randrange(0, 16), base + size - rng.randrange(1, 64), len(data) - 1]
    cut = max(0, min(len(data), rng.choice(points)))
    return f"truncate@{cut}", data[:cut]


def bit_flips(rng: random.Random, data: bytes) -> tuple[str, bytes]:
    out = bytearray(data)
    lo, hi = _region(rng, data)
    count = rng.choice((1, 1, 2, 4, 16))
    for _ in range(count):
        out[rng.randrange(lo, hi)] ^= 1 << rng.randrange(8)
    return f"bitflip x{count} in [{lo},{hi})", bytes(out)


def byte_set(rng: random.Random, data: bytes) -> tuple[str, bytes]:
    out = bytearray(data)
    lo, hi = _region(rng, data)
    pos = rng.randrange(lo, hi)
    value = rng.choice((0, 1, 0x7F, 0x80, 0xFF, rng.randrange(256)))
    width = rng.choice((1, 1, 2, 4))
    _set(out, pos, bytes([value]) * width)
    return f"set {width}x{value:#x}@{pos}", bytes(out)


def forge_offset(rng: random.Random, data: bytes) -> tuple[str, bytes]:
    """Overwrite an aligned u32 in the flatbuffer: offsets that loop, overlap, or point out of the file."""
    out = bytearray(data)
    fb_end = min(_header_info(data)[0], len(data))
    pos = rng.randrange(0, max(fb_end // 4, 1)) * 4
    other = rng.randrange(0, max(fb_end // 4, 1)) * 4
    value = rng.choice(U32_SPECIAL + (len(data), len(data) - 4, len(data) + 4, other - pos, 0, (-pos) & 0xFFFFFFFF,
                                      -4 & 0xFFFFFFFF, rng.randrange(1 << 32)))
    _set(out, pos, struct.pack("<I", value & 0xFFFFFFFF))
    return f"u32 {value:#x}@{pos}", bytes(out)


def forge_vtable(rng: random.Random, data: bytes) -> tuple[str, bytes]:
    """Overwrite an aligned u16 (vtable sizes and field offsets live in u16s)."""
    out = bytearray(data)
    fb_end = min(_header_info(data)[0], len(data))
    pos = rng.randrange(0, max(fb_end // 2, 1)) * 2
    value = rng.choice((0, 1, 2, 3, 4, 5, 6, 8, 0xFF, 0x100, 0x7FFF, 0xFFFF, rng.randrange(1 << 16)))
    _set(out, pos, struct.pack("<H", value))
    return f"u16 {value:#x}@{pos}", bytes(out)


def forge_header(rng: random.Random, data: bytes) -> tuple[str, bytes]:
    """Huge, zero or off-by-one values in the extended (.pte) or FH01 (.ptd) header fields."""
    out = bytearray(data)
    fb_end, base, size = _header_info(data)
    if data[4:8] == b"FT01":
        pos = rng.choice((12, 16, 24, 32, 40))
    else:
        pos = rng.choice((0, 12, 16, 24, 32))
    if pos in (0, 12):
        value = rng.choice(U32_SPECIAL + (len(data), 24, 31, 32, 40, 48))
        _set(out, pos, struct.pack("<I", value))
    else:
        value = rng.choice(U64_SPECIAL + (len(data), len(data) + 1, fb_end, fb_end - 1, base, base + 1, size + 1,
                                          len(data) - base, len(data) - base + 1, base - 128))
        _set(out, pos, struct.pack("<Q", value & 0xFFFFFFFFFFFFFFFF))
    return f"header {value:#x}@{pos}", bytes(out)


def chunk_op(rng: random.Random, data: bytes) -> tuple[str, bytes]:
    """Delete, duplicate, insert or move a chunk (shifts every later offset)."""
    n = len(data)
    a = rng.randrange(0, n)
    length = rng.choice((1, 4, 8, 16, 64, 512))
    b = min(n, a + length)
    op = rng.choice(("delete", "duplicate", "insert", "zero", "append", "swap"))
    if op == "delete":
        out = data[:a] + data[b:]
    elif op == "duplicate":
        out = data[:b] + data[a:b] + data[b:]
    elif op == "insert":
        out = data[:a] + rng.randbytes(length) + data[a:]
    elif op == "zero":
        out = data[:a] + bytes(b - a) + data[b:]
    elif op == "append":
        out = data + rng.choice((bytes(length), rng.randbytes(length)))
    else:
        c = rng.randrange(0, n)
        piece = data[a:b]
        rest = data[:a] + data[b:]
        out = rest[:c] + piece + rest[c:]
    return f"{op} [{a},{b})", out


# --- structured mutations --------------------------------------------------

# Wire type of every integer field (and of the items of integer vectors), so a
# forged value still encodes: the damage must survive into the file.
_WIDTHS: dict[tuple[str, str], str] = {
    ("Tensor", "scalar_type"): "b", ("Tensor", "storage_offset"): "i", ("Tensor", "sizes"): "i",
    ("Tensor", "dim_order"): "B", ("Tensor", "data_buffer_idx"): "I", ("Tensor", "layout"): "b",
    ("Tensor", "shape_dynamism"): "b",
    ("AllocationDetails", "memory_id"): "I", ("AllocationDetails", "memory_offset"): "Q",
    ("ExtraTensorInfo", "mutable_data_segments_idx"): "Q", ("ExtraTensorInfo", "location"): "b",
    ("ExtraTensorInfo", "device_type"): "b", ("ExtraTensorInfo", "device_index"): "b",
    ("Int", "int_val"): "q", ("IntList", "items"): "q", ("TensorList", "items"): "i",
    ("OptionalTensorList", "items"): "i",
    ("KernelCall", "op_index"): "i", ("KernelCall", "args"): "i", ("DelegateCall", "delegate_index"): "i",
    ("DelegateCall", "args"): "i", ("MoveCall", "move_from"): "i", ("MoveCall", "move_to"): "i",
    ("JumpFalseCall", "cond_value_index"): "i", ("JumpFalseCall", "destination_instruction"): "i",
    ("FreeCall", "value_index"): "i",
    ("BackendDelegateDataReference", "location"): "b", ("BackendDelegateDataReference", "index"): "I",
    ("ExecutionPlan", "inputs"): "i", ("ExecutionPlan", "outputs"): "i",
    ("ExecutionPlan", "non_const_buffer_sizes"): "q",
    ("NonConstBufferDevice", "buffer_idx"): "i", ("NonConstBufferDevice", "device_type"): "b",
    ("NonConstBufferDevice", "device_index"): "b",
    ("DataSegment", "offset"): "Q", ("DataSegment", "size"): "Q",
    ("SubsegmentOffsets", "segment_index"): "I", ("SubsegmentOffsets", "offsets"): "Q",
    ("NamedData", "segment_index"): "I", ("Program", "version"): "I",
    ("TensorLayout", "scalar_type"): "b", ("TensorLayout", "sizes"): "i", ("TensorLayout", "dim_order"): "B",
    ("PtdNamedData", "segment_index"): "I", ("FlatTensor", "version"): "I",
}
_RANGES = {"b": (-128, 127), "B": (0, 255), "i": (-(1 << 31), (1 << 31) - 1), "I": (0, (1 << 32) - 1),
           "q": (-(1 << 63), (1 << 63) - 1), "Q": (0, (1 << 64) - 1)}

Site = tuple[tuple[Any, ...], str, Any]  # (path of (field, index) steps, kind, current value)


def _sites(obj: Any, path: tuple = ()) -> list[Site]:
    """Every field that a structured mutation may change, with its path from the root."""
    out: list[Site] = []
    if not dataclasses.is_dataclass(obj):
        return out
    cls = type(obj).__name__
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        here = path + ((f.name, None),)
        width = _WIDTHS.get((cls, f.name))
        if isinstance(value, tuple) and value and dataclasses.is_dataclass(value[0]) or (
                isinstance(value, tuple) and any(dataclasses.is_dataclass(v) for v in value)):
            out.append((here, "table-vector", value))
            for i, item in enumerate(value):
                if item is None:
                    continue
                out += _sites(item, path + ((f.name, i),))
        elif dataclasses.is_dataclass(value):
            out.append((here, "table", value))
            out += _sites(value, here)
        elif width and isinstance(value, tuple):
            out.append((here, "vector:" + width, value))
        elif width and isinstance(value, int) and not isinstance(value, bool):
            out.append((here, "int:" + width, value))
        elif isinstance(value, str):
            out.append((here, "string", value))
        elif isinstance(value, bytes):
            out.append((here, "bytes", value))
        elif value is None and f.name in ("sizes", "dim_order", "non_const_buffer_sizes", "execution_plan"):
            out.append((here, "none", value))
    return out


def _forged_int(rng: random.Random, width: str, current: int) -> int:
    lo, hi = _RANGES[width]
    value = rng.choice((current + 1, current - 1, current + 2, current * 2 + 7, 0, -1, lo, hi, hi // 2 + 1,
                        (1 << 31) - 1, (1 << 32) + 5, 1 << 40, 1 << 62, 3, 64, 1000))
    return max(lo, min(hi, value))


def _forge(rng: random.Random, kind: str, current: Any) -> tuple[str, Any]:
    if kind.startswith("int:"):
        value = _forged_int(rng, kind[4:], current)
        return f"{current}->{value}", value
    if kind.startswith("vector:"):
        width = kind[7:]
        items = list(current or ())
        op = rng.choice(("item", "item", "none", "empty", "grow", "huge"))
        if op == "item" and items:
            k = rng.randrange(len(items))
            items[k] = _forged_int(rng, width, items[k])
        elif op == "none":
            return "None", None
        elif op == "empty":
            items = []
        elif op == "grow":
            items += [rng.choice(items) if items else 1] * rng.choice((1, 2, 17, 40))
        else:
            lo, hi = _RANGES[width]
            items = [max(lo, min(hi, v)) for v in (hi, hi, 1 << 20, 1 << 20, 1 << 20)]
        return f"{op} -> {len(items)} items", tuple(items)
    if kind in ("table", "none"):
        return "None", None
    if kind == "table-vector":
        op = rng.choice(("none", "empty", "drop", "dup", "hole"))
        items = list(current)
        if op == "none":
            return "None", None
        if op == "empty":
            return "empty", ()
        if op == "drop" and items:
            del items[rng.randrange(len(items))]
        elif op == "dup" and items:
            items += items[: rng.choice((1, 2, 3))]
        elif op == "hole" and items:
            items[rng.randrange(len(items))] = None
        return op, tuple(items)
    if kind == "string":
        value = rng.choice(("", "x" * 300, "\u00e9\u4e2d", "a\x00b", None, "[/]", "[bold]x[/red]",
                            "x\x1b[2J\x1b]0;t\x07", "a\nb", "%s%n{0}"))
        return f"str {value!r:.20}", value
    value = rng.choice((b"", b"cuda:", b"cuda:-1", b"cuda:x", b"cuda:99999999999999999999", b"CUDA:1", b"\xff\xfe",
                        b"tpu:0", b"cuda:0:1", None, b" cuda:0 ", b"cuda:128"))
    return f"bytes {value!r}", value


def _apply(obj: Any, path: tuple, value: Any) -> Any:
    (name, index), rest = path[0], path[1:]
    current = getattr(obj, name)
    if index is None:
        new = value if not rest else _apply(current, rest, value)
    else:
        items = list(current)
        items[index] = value if not rest else _apply(items[index], rest, value)
        new = tuple(items)
    return dataclasses.replace(obj, **{name: new})


def _tail(data: bytes) -> tuple[bytes, int]:
    """(the original segment bytes, the segment data size the header claims)."""
    fb_end, base, size = _header_info(data)
    return (data[base:base + size], size) if size else (b"", 0)


def assemble_pte(program: m.Program, original: bytes) -> bytes:
    """Encode ``program`` as is (segments table included) in front of ``original``'s segment bytes."""
    plain = encode_program(program)
    segment_bytes, size = _tail(original)
    if not size:
        return plain + bytes(max(0, 64 - len(plain)))
    program_size = len(plain) + 32
    header = ExtendedHeader(program_size, align_up(program_size, SEGMENT_ALIGNMENT), size)
    flat = insert_extended_header(plain, header)
    return flat + bytes(header.segment_base_offset - len(flat)) + segment_bytes


def assemble_ptd(flat_tensor: FlatTensor, original: bytes) -> bytes:
    """Encode ``flat_tensor`` with an FH01 header in front of ``original``'s segment bytes."""
    plain = encode_flat_tensor(flat_tensor)
    segment_bytes, size = _tail(original)
    base = align_up(PTD_HEADER_PADDED + len(plain), SEGMENT_ALIGNMENT)
    packed = PtdHeader(PTD_HEADER_PADDED, len(plain), base, size).pack()
    root = int.from_bytes(plain[:4], "little") + PTD_HEADER_PADDED
    flat = root.to_bytes(4, "little") + plain[4:8] + packed + bytes(PTD_HEADER_PADDED - len(packed)) + plain[8:]
    return flat + bytes(base - len(flat)) + segment_bytes


def structured(rng: random.Random, seed: Seed) -> tuple[str, bytes]:
    """Decode, change one field (or a few), re-encode with the original segments."""
    fb_end = _header_info(seed.data)[0]
    if seed.kind == "pte":
        root: Any = decode_program(seed.data[:fb_end])
    else:
        root = decode_flat_tensor(seed.data[:fb_end])
    notes = []
    for _ in range(rng.choice((1, 1, 1, 2, 3))):
        sites = _sites(root)
        path, kind, current = rng.choice(sites)
        note, value = _forge(rng, kind, current)
        root = _apply(root, path, value)
        notes.append(".".join(f"{n}[{i}]" if i is not None else n for n, i in path) + " " + note)
    data = assemble_pte(root, seed.data) if seed.kind == "pte" else assemble_ptd(root, seed.data)
    return "struct " + "; ".join(notes), data


def structured_or_truncated(rng: random.Random, seed: Seed) -> tuple[str, bytes]:
    """``structured``, or a truncation when the encoder refuses the forged model (said in the label)."""
    try:
        return structured(rng, seed)
    except (struct.error, ValueError, TypeError, AttributeError, OverflowError) as error:
        mutation, data = truncate(rng, seed.data)
        return f"encoder refused ({type(error).__name__}); {mutation}", data


HUGE = (1 << 31, 1 << 40, 1 << 46, 1 << 50, (1 << 62) - 16, (1 << 63) - 1)


def huge_sizes(rng: random.Random, seed: Seed) -> tuple[str, bytes]:
    """Declared sizes far beyond the file (and any memory): planned buffers, tensor shapes, segments.

    Nothing may allocate them: they must be refused, or reported, before use.
    """
    fb_end = _header_info(seed.data)[0]
    if seed.kind == "ptd":
        ft = decode_flat_tensor(seed.data[:fb_end])
        k = rng.randrange(len(ft.segments or ()) or 1)
        segments = list(ft.segments or (m.DataSegment(),))
        segments[k] = m.DataSegment(segments[k].offset, rng.choice(HUGE))
        return f"huge segment[{k}]", assemble_ptd(dataclasses.replace(ft, segments=tuple(segments)), seed.data)
    program = decode_program(seed.data[:fb_end])
    p = rng.randrange(len(program.execution_plan))
    plan = program.execution_plan[p]
    choice = rng.randrange(3)
    if choice == 0 and len(plan.non_const_buffer_sizes or ()) > 1:
        sizes = list(plan.non_const_buffer_sizes)
        k = rng.randrange(1, len(sizes))
        sizes[k] = rng.choice(HUGE)
        plan = dataclasses.replace(plan, non_const_buffer_sizes=tuple(sizes))
        note = f"huge non_const_buffer_sizes[{k}]={sizes[k]}"
    elif choice == 1:
        tensors = [i for i, v in enumerate(plan.values or ()) if isinstance(v, m.Tensor)]
        inputs = [i for i in plan.inputs or () if i in tensors]
        i = rng.choice(inputs or tensors)
        t = plan.values[i]
        shape = rng.choice(((1 << 20, 1 << 20, 16), (1 << 31 - 1, 1 << 12), (65536, 65536), (1 << 30,)))
        values = list(plan.values)
        values[i] = dataclasses.replace(t, sizes=shape, dim_order=tuple(range(len(shape))))
        plan = dataclasses.replace(plan, values=tuple(values))
        note = f"huge shape {shape} on value {i}"
    else:
        segments = list(program.segments or (m.DataSegment(),))
        k = rng.randrange(len(segments))
        segments[k] = m.DataSegment(segments[k].offset, rng.choice(HUGE))
        program = dataclasses.replace(program, segments=tuple(segments))
        note = f"huge segments[{k}]"
    plans = list(program.execution_plan)
    plans[p] = plan
    return note, assemble_pte(dataclasses.replace(program, execution_plan=tuple(plans)), seed.data)


def foreign(rng: random.Random, seed: Seed) -> tuple[str, bytes]:
    """Empty, tiny, random, other formats, and the other kind of file."""
    choice = rng.randrange(6)
    if choice == 0:
        n = rng.choice((0, 1, 3, 4, 7, 8, 12, 39, 40, 47, 48, 63, 64))
        return f"tiny {n}", seed.data[:n] if rng.random() < 0.5 else rng.randbytes(n)
    if choice == 1:
        name, data = rng.choice(foreign_files())
        return f"foreign {name}", data
    if choice == 2:
        return "random", rng.randbytes(rng.choice((64, 100, 1000, 5000)))
    if choice == 3:
        ident = b"ET12" if seed.kind == "pte" else b"FT01"
        n = rng.choice((64, 128, 400))
        return "identifier+random", rng.randbytes(4) + ident + rng.randbytes(n)
    if choice == 4:
        others = [s for s in load_seeds() if s.kind != seed.kind] or list(load_seeds())
        other = rng.choice(others)
        return f"wrong kind {other.name}", other.data
    return "zeros", bytes(rng.choice((64, 256, 4096)))


BYTE_MUTATIONS: tuple[tuple[Callable[[random.Random, bytes], tuple[str, bytes]], int], ...] = (
    (truncate, 12), (bit_flips, 18), (byte_set, 8), (forge_offset, 14), (forge_vtable, 8), (forge_header, 8),
    (chunk_op, 8),
)


def make_case(seed: int, index: int, seeds: Optional[tuple[Seed, ...]] = None) -> Case:
    """Case ``index`` of run ``seed``: the same bytes every time, on every machine with the same seeds."""
    rng = random.Random(f"{seed}:{index}")
    seeds = seeds or load_seeds()
    source = seeds[index % len(seeds)]
    roll = rng.random()
    if roll < 0.25:
        mutation, data = structured_or_truncated(rng, source)
    elif roll < 0.28:
        mutation, data = huge_sizes(rng, source)
    elif roll < 0.33:
        mutation, data = foreign(rng, source)
    else:
        ops, weights = zip(*BYTE_MUTATIONS)
        data = source.data
        notes = []
        for _ in range(rng.choice((1, 1, 1, 2, 3))):
            note, data = rng.choices(ops, weights)[0](rng, data) if data else ("empty", data)
            notes.append(note)
        mutation = "; ".join(notes)
    return Case(index, source.kind, source.name, mutation, data)
