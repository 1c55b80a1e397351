"""Opening a .ptd (flat_tensor) data file: named tensor data keyed by fully qualified name. Reading only
(``ptd_writer.py`` writes one)."""

from __future__ import annotations

import mmap
import os
from typing import Optional

from .decode import decode_flat_tensor
from pte_devconst.util.errors import FormatError
from .flatbuf import FlatbufferError
from .header import PtdHeader, read_ptd_header
from .mapped import MappedFile
from .ptd_model import FlatTensor, PtdNamedData
from .span import Span
from .validate import check_shape


class PtdFile(MappedFile):
    """A parsed, checked, read-only .ptd."""

    def __init__(self, data: memoryview, *, path: str = "<bytes>", mapped: Optional[mmap.mmap] = None,
                 fd: int = -1) -> None:
        super().__init__(data, path=path, mapped=mapped, fd=fd)
        try:
            self.header: PtdHeader = read_ptd_header(data[:64], self.size)
            fb_end = self.header.flatbuffer_offset + self.header.flatbuffer_size
            try:
                self.flat_tensor: FlatTensor = decode_flat_tensor(data[:fb_end])
            except FlatbufferError as error:
                raise FormatError(error.what, where=error.where or "flatbuffer") from None
            self._check()
        except FormatError as error:
            self.close()
            raise error.with_file(path)
        # The entry each lookup reaches: the first of its class under the runtime's comparison (``_match_class``).
        self._first: dict[tuple[int, str, bool], PtdNamedData] = {}
        for entry in self.flat_tensor.named_data or ():
            assert entry.key is not None  # _check refused an entry without one
            self._first.setdefault(_match_class(entry.key), entry)

    def _check(self) -> None:
        """The rules of ExecuTorch 1.5.1's ``FlatTensorDataMap`` (extension/flat_tensor/flat_tensor_data_map.cpp).

        ``get_named_data`` finds a key by a linear search and takes the *first* entry with it; only that
        entry's segment is ever checked and read, so a later entry with the same key, and a segment no
        entry reaches, are not checked here either.  Stricter than the runtime, deliberately: a reached
        segment must lie inside the file and hold its tensor layout's bytes (the runtime would read past
        them).
        """
        ft = self.flat_tensor
        if ft.version > 0:
            raise FormatError(f"flat_tensor version {ft.version} is newer than ExecuTorch 1.5.1's (0)", where="version")
        if ft.segments is None or ft.named_data is None:
            raise FormatError("segments or named_data is missing", where="flatbuffer")
        # The loader reads a segment at segment_base_offset + offset and refuses a range past the file end;
        # get_named_data first bounds offset + size by segment_base_offset + segment_data_size (sic).
        header = self.header
        available = min(self.size - header.segment_base_offset, header.segment_base_offset + header.segment_data_size)
        seen: set[tuple[int, str, bool]] = set()
        for i, entry in enumerate(ft.named_data):
            where = f"named_data[{i}]"
            if entry.key is None:
                raise FormatError("entry has no key", where=where)
            if _match_class(entry.key) in seen:
                continue  # shadowed by an earlier entry the runtime's comparison finds first: never read
            seen.add(_match_class(entry.key))
            if entry.segment_index >= len(ft.segments):
                raise FormatError(f"segment_index {entry.segment_index} is out of range ({len(ft.segments)} segments)",
                                  where=where)
            seg = ft.segments[entry.segment_index]
            if seg.offset + seg.size > available:
                raise FormatError(f"[{seg.offset}, {seg.offset + seg.size}) lies past the end of the segment data "
                                  f"({max(available, 0)} bytes)", where=f"segments[{entry.segment_index}]")
            layout = entry.tensor_layout
            if layout is not None:
                # Rank, permutation and overflow first: a forged rank must not cost a huge product.
                nbytes = check_shape(layout.scalar_type, layout.sizes, layout.dim_order, f"{where}.tensor_layout")
                if nbytes > seg.size:
                    raise FormatError(f"tensor {entry.key!r} needs {nbytes} bytes but its segment holds "
                                      f"{seg.size}", where=where)

    def keys(self) -> list[str]:
        """The keys a program's tensor can reach: the first entry of each, and none with a NUL in it."""
        return [key for (_, key, nul) in self._first if not nul]  # without a NUL, the class's head is the key

    def lookup(self, key: str) -> Optional[PtdNamedData]:
        """The entry ``FlatTensorDataMap::get_named_data(key)`` returns for a ``string_view`` key (a delegate's)."""
        return self._first.get(_match_class(key))

    def entry(self, fqn: str) -> Optional[PtdNamedData]:
        """The entry the runtime loads for a tensor whose ``fully_qualified_name`` is ``fqn``.

        The one resolution every caller uses (analysis, plan, apply, the self-check, folding, the runner): the
        runtime passes the name's ``c_str()`` (tensor_parser_exec_aten.cpp, method.cpp
        ``parse_external_constants``), so the key ends at the name's first NUL, then searches as ``lookup``.
        """
        return self.lookup(tensor_key(fqn))

    def span(self, fqn: str) -> Optional[Span]:
        entry = self.entry(fqn)
        if entry is None:
            return None
        seg = (self.flat_tensor.segments or ())[entry.segment_index]  # present: _check refused a file without
        return Span(self.header.segment_base_offset + seg.offset, seg.size)

    def tensor_bytes(self, fqn: str, nbytes: Optional[int] = None) -> Optional[memoryview]:
        span = self.span(fqn)
        if span is None:
            return None
        size = span.size if nbytes is None else min(nbytes, span.size)
        return self.data[span.offset: span.offset + size]

    def named_bytes(self, key: str) -> Optional[memoryview]:
        """The bytes ``get_data(key)`` returns for a ``string_view`` key (named data a delegate asks for)."""
        entry = self.lookup(key)
        if entry is None:
            return None
        seg = (self.flat_tensor.segments or ())[entry.segment_index]
        start = self.header.segment_base_offset + seg.offset
        return self.data[start: start + seg.size]


def tensor_key(fqn: str) -> str:
    """The key the runtime looks up for a tensor's ``fully_qualified_name``: the C string, up to its first NUL."""
    return fqn.partition("\0")[0]


def _match_class(key: str) -> tuple[int, str, bool]:
    """Keys that ``get_named_data``'s comparison finds equal share this: ``key.size() == entry.size() &&
    strncmp(entry.c_str(), key.data(), entry.size()) == 0`` (flat_tensor_data_map.cpp, ExecuTorch 1.5), i.e. the
    same length in bytes and the same bytes up to and including the first NUL (strncmp stops there)."""
    head, nul, _ = key.partition("\0")
    return len(key.encode("utf-8")), head, bool(nul)


def open_ptd(path: str | os.PathLike[str]) -> PtdFile:
    return PtdFile.open(path)
