"""Bounds-checked reading of raw flatbuffer bytes.

The flatbuffers Python runtime follows offsets without checking them: on a
damaged file it raises whatever the slicing happens to raise, or loops for
2^32 elements on a forged vector length.  This reader checks every offset,
length and alignment before following it (the same rules as the C++
``flatbuffers::Verifier`` that ExecuTorch runs at load), and charges every
table, vector element and string byte it decodes to a budget proportional to
the buffer size, so shared or overlapping offsets cannot blow a small file up
into an unbounded amount of work.  A vector or string is decoded once however
many tables name it, and what the reader hands on is bounded too: the bytes of
every vector and string, counted at each reference (through a shared table as
well), may be at most twice the buffer plus ``HANDED_FLOOR``, so every later
step's work on lists, arguments and shapes stays proportional to the file.

Errors are ``FlatbufferError`` with a path such as
``execution_plan[0].values[3].sizes`` that callers extend as the error
propagates (see ``FlatbufferError.at``).
"""

from __future__ import annotations

import struct
from typing import Any, Callable, Optional, TypeVar, cast

T = TypeVar("T")

U8 = struct.Struct("<B")
I8 = struct.Struct("<b")
U16 = struct.Struct("<H")
I16 = struct.Struct("<h")
I32 = struct.Struct("<i")
U32 = struct.Struct("<I")
I64 = struct.Struct("<q")
U64 = struct.Struct("<Q")
F32 = struct.Struct("<f")
F64 = struct.Struct("<d")
BOOL = struct.Struct("<?")

_VECTOR_FORMATS = {"b": 1, "B": 1, "?": 1, "h": 2, "H": 2, "i": 4, "I": 4, "f": 4, "q": 8, "Q": 8, "d": 8}


class FlatbufferError(Exception):
    """A structural problem in the flatbuffer; ``path`` says where."""

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what
        self.path: list[str] = []

    def at(self, component: str) -> "FlatbufferError":
        self.path.insert(0, component)
        return self

    @property
    def where(self) -> str:
        text = ""
        for part in self.path:
            text += part if part.startswith("[") or not text else "." + part
        return text


_ABSENT = object()
# What a small file may hand on in vectors and strings, counted at every reference, beyond twice its own size.
HANDED_FLOOR = 4 << 20
# A vector or string of at most this many elements is decoded again at each reference (as fast as looking it up;
# the count of what is handed on bounds what that costs); a longer one is decoded once and kept by position.
_DECODED_AGAIN = 32


class TableLimitError(FlatbufferError):
    """The buffer refers to more tables than the reader was allowed to visit."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"refers to more than {limit:,} tables (a shared table counting each time it is reached)")
        self.limit = limit


class FlatReader:
    """A buffer plus the work budget shared by every table read from it.

    ``tables`` counts the tables visited, a table reached twice (shared) counting twice: the number
    the flatbuffers ``Verifier`` compares with its ``max_tables`` limit.

    A table reached again (the same position, decoded as the same type) is not decoded again: the first
    record is handed out once more and its subtree's table count added, so a file whose offsets name one
    table millions of times costs one record and a reference per offset, not millions of records (the
    records are frozen, so sharing them is safe). ``max_tables`` refuses a buffer whose count passes it
    as soon as the count does, before the rest is read.
    """

    __slots__ = ("buf", "size", "budget", "tables", "max_tables", "handed", "max_handed", "_decoded", "_subtree",
                 "_vectors")

    def __init__(self, buf: bytes | memoryview, budget: Optional[int] = None, max_tables: Optional[int] = None) -> None:
        self.buf = buf
        self.size = len(buf)
        self.budget = budget if budget is not None else 2 * self.size + 4096
        self.tables = 0
        self.max_tables = max_tables
        # The bytes of the vectors and strings handed on, each counted at every reference (``hand``).
        self.handed = 0
        self.max_handed = 2 * self.size + HANDED_FLOOR
        # decode function -> {table position: record}; (tables, bytes handed) a record's subtree counts, where
        # not (1, 0)
        self._decoded: dict[Callable[..., Any], dict[int, Any]] = {}
        self._subtree: dict[tuple[Callable[..., Any], int], tuple[int, int]] = {}
        # (position, kind) -> the (longer) vector or string decoded there: one object however many tables name it
        self._vectors: dict[tuple[int, str], Any] = {}

    def hand(self, amount: int) -> None:
        """Count ``amount`` bytes of vectors or strings handed on; past ``max_handed``, refuse the file."""
        self.handed += amount
        if self.handed > self.max_handed:
            raise FlatbufferError(
                f"its vectors and strings, counted at every table that names them, hold more than "
                f"{self.max_handed:,} bytes (twice the file, plus {HANDED_FLOOR >> 20} MiB): one vector or table "
                "named many times; refused before reading further")

    def spend(self, amount: int) -> None:
        self.budget -= amount
        if self.budget < 0:
            raise FlatbufferError("offsets reference far more data than the buffer holds "
                                  "(shared or overlapping offsets)")

    def root(self) -> "Table":
        if self.size < 8:
            raise FlatbufferError(f"{self.size} bytes is too short for a flatbuffer")
        return self.table_at(U32.unpack_from(self.buf, 0)[0])

    def identifier(self) -> bytes:
        return bytes(self.buf[4:8])

    def table_at(self, pos: int) -> "Table":
        size = self.size
        if pos & 3 or pos + 4 > size:
            raise FlatbufferError(f"table offset {pos} is misaligned or outside the buffer ({size} bytes)")
        vt = pos - I32.unpack_from(self.buf, pos)[0]
        if vt < 0 or vt & 1 or vt + 4 > size:
            raise FlatbufferError(f"vtable offset {vt} of the table at {pos} is outside the buffer")
        vt_len, obj_len = U16.unpack_from(self.buf, vt)[0], U16.unpack_from(self.buf, vt + 2)[0]
        if vt_len < 4 or vt_len & 1 or vt + vt_len > size:
            raise FlatbufferError(f"vtable at {vt} has a bad length {vt_len}")
        if obj_len < 4 or pos + obj_len > size:
            raise FlatbufferError(f"table at {pos} claims {obj_len} bytes past the buffer end")
        self.spend(1)
        self.tables += 1
        if self.max_tables is not None and self.tables > self.max_tables:
            raise TableLimitError(self.max_tables)
        return Table(self, pos, vt, vt_len, obj_len)

    def decoded(self, pos: int, decode: Callable[["Table"], T], name: Optional[str] = None) -> T:
        """``decode`` of the table at ``pos``, decoded once however often the buffer refers to it
        (``name`` is added to the path of an error inside the table, not of one in reaching it)."""
        seen = self._decoded.get(decode)
        if seen is None:
            seen = self._decoded[decode] = {}
        record = seen.get(pos, _ABSENT)
        if record is not _ABSENT:
            self.spend(1)
            tables, handed = self._subtree.get((decode, pos), (1, 0))
            self.tables += tables
            if self.max_tables is not None and self.tables > self.max_tables:
                raise TableLimitError(self.max_tables)
            if handed:
                self.hand(handed)
            return cast(T, record)  # the memo is per decode function: what it returned for this table
        before, before_handed = self.tables, self.handed
        table = self.table_at(pos)
        if name is None:
            record = decode(table)
        else:
            try:
                record = decode(table)
            except FlatbufferError as error:
                raise error.at(name)
        seen[pos] = record
        if self.tables - before != 1 or self.handed != before_handed:
            self._subtree[(decode, pos)] = (self.tables - before, self.handed - before_handed)
        return record


class Table:
    """One table; field accessors take the field's slot number (its position in the schema)."""

    __slots__ = ("r", "pos", "vt", "vt_len", "obj_len")

    def __init__(self, reader: FlatReader, pos: int, vt: int, vt_len: int, obj_len: int) -> None:
        self.r = reader
        self.pos = pos
        self.vt = vt
        self.vt_len = vt_len
        self.obj_len = obj_len

    def _field(self, slot: int, width: int) -> int:
        """Absolute position of a present field (0 when absent), checked to lie inside the table."""
        entry = 4 + 2 * slot
        if entry >= self.vt_len:
            return 0
        offset: int = U16.unpack_from(self.r.buf, self.vt + entry)[0]
        if not offset:
            return 0
        if offset + width > self.obj_len:
            raise FlatbufferError(f"field at +{offset} overruns its table ({self.obj_len} bytes)")
        return self.pos + offset

    def scalar(self, slot: int, kind: struct.Struct, default: T) -> T:
        at = self._field(slot, kind.size)
        if not at:
            return default
        if at % kind.size:
            raise FlatbufferError(f"misaligned {kind.size}-byte scalar at {at}")
        value: T = kind.unpack_from(self.r.buf, at)[0]
        return value

    def _indirect(self, slot: int) -> int:
        at = self._field(slot, 4)
        if not at:
            return 0
        if at & 3:
            raise FlatbufferError(f"misaligned offset at {at}")
        target: int = at + U32.unpack_from(self.r.buf, at)[0]
        if target + 4 > self.r.size:
            raise FlatbufferError(f"offset at {at} points to {target}, outside the buffer ({self.r.size} bytes)")
        return target

    def table(self, slot: int) -> Optional["Table"]:
        target = self._indirect(slot)
        return self.r.table_at(target) if target else None

    def decoded_table(self, slot: int, decode: Callable[["Table"], T]) -> Optional[T]:
        """``decode`` of the sub-table in ``slot`` (None when absent), shared with every other reference to it."""
        target = self._indirect(slot)
        return self.r.decoded(target, decode) if target else None

    def _vector_header(self, slot: int, elem_size: int) -> tuple[int, int]:
        """(start of the elements, count), or (0, -1) when absent."""
        target = self._indirect(slot)
        if not target:
            return 0, -1
        count = U32.unpack_from(self.r.buf, target)[0]
        start = target + 4
        if start + count * elem_size > self.r.size:
            raise FlatbufferError(f"vector of {count} elements at {target} runs past the buffer end")
        if elem_size > 1 and start % min(elem_size, 8):
            raise FlatbufferError(f"misaligned vector of {elem_size}-byte elements at {target}")
        r = self.r
        r.budget -= count * elem_size // 4 + 1
        if r.budget < 0:
            r.spend(0)
        return start, count

    def vector(self, slot: int, fmt: str) -> Optional[tuple[Any, ...]]:
        """A vector of scalars (struct format character ``fmt``) as a tuple, or None when absent."""
        width = _VECTOR_FORMATS[fmt]
        start, count = self._vector_header(slot, width)
        if count < 0:
            return None
        r = self.r
        r.handed += count * width
        if r.handed > r.max_handed:
            r.hand(0)
        if count <= _DECODED_AGAIN:
            return struct.unpack_from(f"<{count}{fmt}", r.buf, start)
        key = (start, fmt)
        found = r._vectors.get(key)
        if found is None:
            found = r._vectors[key] = struct.unpack_from(f"<{count}{fmt}", r.buf, start)
        return cast(tuple[Any, ...], found)

    def byte_vector(self, slot: int) -> Optional[bytes]:
        start, count = self._vector_header(slot, 1)
        if count < 0:
            return None
        r = self.r
        r.hand(count)
        if count <= _DECODED_AGAIN:
            return bytes(r.buf[start:start + count])
        key = (start, "bytes")
        found = r._vectors.get(key)
        if found is None:
            found = r._vectors[key] = bytes(r.buf[start:start + count])
        return cast(bytes, found)

    def string(self, slot: int) -> Optional[str]:
        start, count = self._vector_header(slot, 1)
        if count < 0:
            return None
        r = self.r
        r.handed += count
        if r.handed > r.max_handed:
            r.hand(0)
        if count > _DECODED_AGAIN:
            found = r._vectors.get((start, "str"))
            if found is not None:
                return cast(str, found)
        if start + count >= r.size or r.buf[start + count] != 0:
            raise FlatbufferError(f"string at {start - 4} lacks its terminating zero byte")
        try:
            text = bytes(r.buf[start:start + count]).decode("utf-8")
        except UnicodeDecodeError:
            raise FlatbufferError(f"string at {start - 4} is not valid UTF-8") from None
        if count > _DECODED_AGAIN:
            r._vectors[(start, "str")] = text
        return text

    def tables(self, slot: int, decode: Callable[["Table"], T], name: str) -> Optional[tuple[T, ...]]:
        """Decode a vector of tables with ``decode``, adding ``name[i]`` to any error's path."""
        start, count = self._vector_header(slot, 4)
        if count < 0:
            return None
        reader = self.r
        relative = (rel for (rel,) in U32.iter_unpack(memoryview(reader.buf)[start: start + 4 * count]))
        out: list[T] = []
        # A run of offsets to the table just decoded (a values vector naming one tensor a million times) costs a
        # comparison and a count each, not a memo lookup: the reader's bound is reached in a fraction of a second.
        previous, subtree, subtree_handed = -1, 0, 0
        for i, rel in enumerate(relative):
            target = start + 4 * i + rel
            try:
                if target == previous:
                    reader.budget -= 1
                    reader.tables += subtree
                    if reader.budget < 0:
                        reader.spend(0)
                    if reader.max_tables is not None and reader.tables > reader.max_tables:
                        raise TableLimitError(reader.max_tables)
                    if subtree_handed:
                        reader.hand(subtree_handed)
                    record = out[-1]  # the table just decoded
                else:
                    before, before_handed = reader.tables, reader.handed
                    record = reader.decoded(target, decode)
                    previous, subtree = target, reader.tables - before
                    subtree_handed = reader.handed - before_handed
            except FlatbufferError as error:
                raise error.at(f"[{i}]").at(name)
            out.append(record)
        return tuple(out)

    def union(self, type_slot: int, decoders: dict[int, Callable[["Table"], T]], name: str) -> tuple[int, Optional[T]]:
        """(type tag, decoded member) of a union whose tag is at ``type_slot`` and value right after."""
        tag = self.scalar(type_slot, U8, 0)
        if tag == 0:
            return 0, None
        decode = decoders.get(tag)
        if decode is None:
            raise FlatbufferError(f"unknown union type {tag}").at(name)
        target = self._indirect(type_slot + 1)
        if not target:
            raise FlatbufferError(f"union type {tag} has no value").at(name)
        return tag, self.r.decoded(target, decode, name)

    def child(self, slot: int, decode: Callable[["Table"], T], name: str) -> Optional[T]:
        """Decode an optional sub-table, adding ``name`` to any error's path."""
        try:
            return self.decoded_table(slot, decode)
        except FlatbufferError as error:
            raise error.at(name)
