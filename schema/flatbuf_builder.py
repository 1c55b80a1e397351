"""A small, fast flatbuffer builder: the writing half of ``flatbuf.py``.

Why not the ``flatbuffers`` package's ``Builder``: it costs about a microsecond
per call and several calls per field, and importing it imports numpy. On a
program with thousands of tensors that made encoding the largest fixed cost of
a rewrite (bench/RESULTS.md), and numpy alone a quarter of its start-up.

This builder writes the same bytes. It builds back to front, aligns every item
relative to the end of the buffer, deduplicates vtables by content and lays out
strings, vectors, tables and the root exactly as that ``Builder`` does, so an
encoder written with it produces output byte for byte identical to the one
written with the flatc-generated functions. ``tests/test_encode.py`` checks that
on every corpus program, on every rewritten one, and on fuzzed programs, against
``tests/flatc_reference.py`` (the flatc-generated builder path).

A table is written in one call from a ``TableLayout`` (one entry per field slot:
a scalar's ``struct.Struct`` and default, or ``REF`` for an offset to a string,
vector or table) and the values in slot order; ``None`` leaves an offset out,
and a scalar equal to its default is left out, as flatc's writers do.
"""

from __future__ import annotations

import struct
from typing import Any, Optional, Sequence

_U32 = struct.Struct("<I")
_I32 = struct.Struct("<i")

REF = None
"""A ``TableLayout`` entry for a field that holds an offset (a string, vector or table)."""

Field = Optional[tuple[struct.Struct, Any]]
MAX_SIZE = (1 << 31) - 1


class TableLayout:
    """The slots of one table type: ``(struct, default)`` for a scalar, ``REF`` for an offset."""

    __slots__ = ("fields",)

    def __init__(self, *fields: Field) -> None:
        self.fields = fields


class BuilderError(ValueError):
    """A value the format cannot hold (out of range for its field, or a buffer over 2 GiB)."""


class Builder:
    """Back-to-front flatbuffer builder. Offsets returned are "from the end", as in the ``flatbuffers`` package."""

    __slots__ = ("_buf", "_head", "_minalign", "_vtables")

    def __init__(self, initial_size: int = 1024) -> None:
        self._buf = bytearray(max(initial_size, 16))
        self._head = len(self._buf)
        self._minalign = 1
        self._vtables: dict[tuple[int, ...], int] = {}

    def offset(self) -> int:
        return len(self._buf) - self._head

    # --- space and alignment --------------------------------------------

    def _grow(self, needed: int) -> None:
        """Double the buffer (keeping its contents at the end) until ``needed`` bytes fit before the head."""
        old = self._buf
        size = len(old)
        used = size - self._head
        new_size = size
        while new_size - used < needed:
            new_size *= 2
        if new_size > MAX_SIZE:  # the last doubling may overshoot what the format can address
            new_size = MAX_SIZE
            if new_size - used < needed:
                raise BuilderError("a flatbuffer cannot exceed 2 GiB")
        buf = bytearray(new_size)
        buf[new_size - used:] = memoryview(old)[self._head:]
        self._buf = buf
        self._head = new_size - used

    def _prep(self, size: int, additional: int) -> None:
        """Pad so that an item of ``size`` bytes, written after ``additional`` more bytes, is aligned to ``size``."""
        if size > self._minalign:
            self._minalign = size
        pad = -(len(self._buf) - self._head + additional) & (size - 1)
        if self._head < pad + size + additional:
            self._grow(pad + size + additional)
        self._head -= pad  # the buffer is zero-filled and the head only moves down: padding is already zero

    # --- vectors and strings --------------------------------------------

    def _end_vector(self, count: int) -> int:
        self._head -= 4
        _U32.pack_into(self._buf, self._head, count)
        return self.offset()

    def scalars(self, kind: struct.Struct, items: Sequence[Any], alignment: int = 0) -> int:
        """A vector of scalars of one ``kind`` (packed in one call)."""
        width = kind.size
        count = len(items)
        self._prep(4, width * count)
        self._prep(max(alignment, width), width * count)
        self._head -= width * count
        if count:
            try:
                struct.pack_into(f"<{count}{kind.format[-1]}", self._buf, self._head, *items)
            except struct.error as error:
                raise BuilderError(f"vector of {kind.format[-1]!r}: {error}") from None
        return self._end_vector(count)

    def bytes_vector(self, data: bytes | bytearray | memoryview, alignment: int = 4) -> int:
        """A ``[ubyte]`` vector; ``alignment`` above 4 is a schema's ``force_align``."""
        if isinstance(data, memoryview) and data.itemsize != 1:
            data = data.cast("B")  # count bytes, not items
        count = len(data)
        self._prep(4, count)
        if alignment > 4:
            self._prep(alignment, count)
        self._head -= count
        self._buf[self._head:self._head + count] = data
        return self._end_vector(count)

    def string(self, text: str) -> int:
        data = text.encode("utf-8")
        count = len(data)
        self._prep(4, count + 1)
        self._head -= count + 1  # the terminating NUL is already zero
        self._buf[self._head:self._head + count] = data
        return self._end_vector(count)

    def offsets(self, targets: Sequence[int]) -> int:
        """A vector of offsets to tables (or strings) written before it, in order."""
        count = len(targets)
        self._prep(4, 4 * count)
        end = self.offset()
        self._head -= 4 * count
        # element i sits (count - i) words past ``end``; an offset is relative to its own position
        relative = [end + 4 * (count - i) - target for i, target in enumerate(targets)]
        if relative and min(relative) < 4:
            raise BuilderError("an offset vector refers to an item written after it")
        struct.pack_into(f"<{count}I", self._buf, self._head, *relative)
        return self._end_vector(count)

    # --- tables -----------------------------------------------------------

    def table(self, layout: TableLayout, values: Sequence[Any]) -> int:
        """Write one table: ``values[i]`` is slot ``i``'s value.

        ``None`` leaves out an offset field; a scalar equal to its default is left out, and a scalar
        that is ``None`` is an error (a bug upstream must not turn into a default in the file).
        """
        object_end = self.offset()
        fields = layout.fields
        slots = [0] * len(fields)
        for slot, value in enumerate(values):
            field = fields[slot]
            if field is REF:
                if value is None:
                    continue
                self._prep(4, 0)
                here = self.offset() + 4
                if value <= 0 or value > here - 4:
                    raise BuilderError(f"slot {slot}: offset {value} does not refer to an item written before")
                self._head -= 4
                _U32.pack_into(self._buf, self._head, here - value)
            else:
                kind, default = field
                if value == default:
                    continue
                if value is None or kind.format[-1] == "?" and value not in (True, False):
                    raise BuilderError(f"slot {slot}: {value!r} is not a valid {kind.format!r} value")
                self._prep(kind.size, 0)
                self._head -= kind.size
                try:
                    kind.pack_into(self._buf, self._head, value)
                except struct.error as error:
                    raise BuilderError(f"slot {slot}: {value!r} does not fit {kind.format!r}: {error}") from None
            slots[slot] = self.offset()
        return self._end_table(slots, object_end)

    def _end_table(self, slots: list[int], object_end: int) -> int:
        # the table starts with an soffset to its vtable; write a placeholder, then find or write the vtable
        self._prep(4, 0)
        self._head -= 4
        table_offset = self.offset()
        used = len(slots)
        while used and not slots[used - 1]:
            used -= 1
        entries = [table_offset - at if at else 0 for at in slots[:used]]
        key = (*reversed(entries), table_offset - object_end)
        existing = self._vtables.get(key)
        table_start = len(self._buf) - table_offset
        if existing is None:
            vtable = (4 + 2 * used, table_offset - object_end, *entries)
            size = 2 * len(vtable)
            self._prep(2, size - 2)  # soffset alignment makes this a no-op; it keeps the buffer big enough
            self._head -= size
            struct.pack_into(f"<{len(vtable)}H", self._buf, self._head, *vtable)
            existing = self.offset()
            self._vtables[key] = existing
            table_start = len(self._buf) - table_offset
        _I32.pack_into(self._buf, table_start, existing - table_offset)
        return table_offset

    # --- the root ---------------------------------------------------------

    def finish(self, root: int, identifier: bytes) -> bytes:
        """The finished buffer: root offset, 4-byte file identifier, then everything written."""
        if len(identifier) != 4:
            raise BuilderError("a file identifier is 4 bytes")
        self._prep(self._minalign, 8)
        self._prep(4, 4)
        self._head -= 4
        self._buf[self._head:self._head + 4] = identifier
        self._prep(4, 0)
        self._head -= 4
        _U32.pack_into(self._buf, self._head, self.offset() - root)
        return bytes(memoryview(self._buf)[self._head:])
