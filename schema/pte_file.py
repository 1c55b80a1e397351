"""Opening a .pte: header, program and lazily read segments over one memory map. Reading only.

``PteFile.open`` reads only the flatbuffer part of the file (a few KB to a few
MB) and checks it completely; tensor data, delegate blobs and named data stay
on disk and are only touched when a caller asks for a slice of them.  A
10 GB program therefore opens in the time it takes to read its flatbuffer.
"""

from __future__ import annotations

import functools
import mmap
import os
from pathlib import Path
from typing import Optional

from . import model as m
from .decode import decode_program_counted
from pte_devconst.util.errors import FormatError
from .flatbuf import FlatbufferError
from .header import MIN_PTE_SIZE, ExtendedHeader, read_pte_header
from .limits import verifier_refusal
from .mapped import MappedFile
from .span import Span
from .validate import check_program


class PteFile(MappedFile):
    """A parsed, checked, read-only .pte.  Use as a context manager or call ``close``."""

    def __init__(self, data: memoryview, *, path: str = "<bytes>", mapped: Optional[mmap.mmap] = None,
                 fd: int = -1) -> None:
        super().__init__(data, path=path, mapped=mapped, fd=fd)
        try:
            self.header: Optional[ExtendedHeader] = read_pte_header(data[:48], self.size)
            if self.size < MIN_PTE_SIZE:
                raise FormatError(f"{self.size} bytes is smaller than the {MIN_PTE_SIZE} bytes every .pte has",
                                  where="header")
            self.flatbuffer_size = self.header.program_size if self.header else self.size
            try:
                self.program: m.Program
                self.program, self.table_count = decode_program_counted(data[: self.flatbuffer_size])
            except FlatbufferError as error:
                raise FormatError(error.what, where=error.where or "flatbuffer") from None
            check_program(self.program, self.size - self.header.segment_base_offset if self.header else 0)
        except FormatError as error:
            self.close()
            raise error.with_file(path)

    # --- where things are -------------------------------------------------

    @property
    def segment_base(self) -> int:
        return self.header.segment_base_offset if self.header else 0

    def segment_span(self, index: int) -> Span:
        seg = (self.program.segments or ())[index]
        return Span(self.segment_base + seg.offset, seg.size)

    @functools.cached_property
    def _segment_starts(self) -> tuple[int, ...]:
        """Absolute start of every segment, computed once: the self-check asks for every tensor's span."""
        return tuple(self.segment_base + seg.offset for seg in self.program.segments or ())

    def _subsegment_span(self, sub: m.SubsegmentOffsets, idx: int, nbytes: int) -> Span:
        return Span(self._segment_starts[sub.segment_index] + (sub.offsets or ())[idx], nbytes)

    def constant_span(self, data_buffer_idx: int, nbytes: int) -> Span:
        """Where constant entry ``data_buffer_idx`` (nbytes long) lies in the file."""
        segment = self.program.constant_segment
        assert segment is not None, "validated: a tensor with constant data in a segment implies constant_segment"
        return self._subsegment_span(segment, data_buffer_idx, nbytes)

    def mutable_span(self, data_buffer_idx: int, nbytes: int) -> Span:
        """Where initial-data entry ``data_buffer_idx`` lies (the runtime always uses list entry 0)."""
        return self._subsegment_span((self.program.mutable_data_segments or ())[0], data_buffer_idx, nbytes)

    def tensor_span(self, tensor: m.Tensor) -> Optional[Span]:
        """The bytes a constant or initial-state tensor ships in this file; None if external or none."""
        if tensor.is_external or tensor.data_buffer_idx == 0:
            return None
        if tensor.allocation_info is not None:
            return self.mutable_span(tensor.data_buffer_idx, tensor.nbytes)
        if self.program.constant_buffer and \
                len((self.program.constant_segment or m.SubsegmentOffsets()).offsets or ()) <= 1:
            return None  # deprecated inline constant_buffer: use inline_constant()
        return self.constant_span(tensor.data_buffer_idx, tensor.nbytes)

    def tensor_bytes(self, tensor: m.Tensor) -> Optional[memoryview]:
        """The bytes ``tensor_span`` names, or the deprecated inline constant; None if external or none."""
        if tensor.is_external or tensor.data_buffer_idx == 0:
            return None
        span = self.tensor_span(tensor)
        if span is not None:
            return self.read(span)
        if tensor.allocation_info is None:  # tensor_span said: an inline constant_buffer entry
            entry = (self.program.constant_buffer or ())[tensor.data_buffer_idx]
            return memoryview(entry.storage or b"")[: tensor.nbytes]
        return None

    def delegate_span(self, delegate: m.BackendDelegate) -> Optional[Span]:
        ref = delegate.processed
        if ref is None or ref.location != m.DataLocation.SEGMENT:
            return None
        return self.segment_span(ref.index)

    def delegate_blob(self, delegate: m.BackendDelegate) -> memoryview:
        span = self.delegate_span(delegate)
        if span is not None:
            return self.read(span)
        ref = delegate.processed
        assert ref is not None, "validated: every delegate has its processed data reference"
        return memoryview((self.program.backend_delegate_data or ())[ref.index].data or b"")

    @property
    def load_refusal(self) -> Optional[str]:
        """Why ExecuTorch's verifying loader would refuse this program although it reads fine here, or None."""
        return verifier_refusal(self.table_count)

    def named_data(self, key: str) -> Optional[memoryview]:
        """The bytes of named-data entry ``key``: the first entry of that key, as ``PteDataMap`` looks it up."""
        for entry in self.program.named_data or ():
            if entry.key == key:
                return self.read(self.segment_span(entry.segment_index))
        return None


class ProgramBytes(bytes):
    """A program held in memory (an export's ``buffer``), with the name reports give it (``str()`` is the name)."""

    name: str

    def __new__(cls, data: bytes, name: str = "<bytes>") -> "ProgramBytes":
        made = super().__new__(cls, data)
        made.name = name
        return made

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"ProgramBytes({self.name!r}, {len(self)} bytes)"


def open_pte(path: "str | os.PathLike[str] | ProgramBytes") -> PteFile:
    """Open and fully check a .pte (a file, or a program in memory); raises ``FormatError`` naming it and the
    problem."""
    if isinstance(path, ProgramBytes):
        return PteFile.from_bytes(path, path=path.name)
    return PteFile.open(Path(path))
