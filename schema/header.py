"""The fixed-size headers in front of a .pte and a .ptd, and the alignment rules around them.

.pte: bytes [0,4) root offset, [4,8) ``ET12``, then (only when the file has
segment data) a 32-byte extended header ``eh00`` at offset 8 that says where
the flatbuffer ends and the segments begin.
.ptd: [0,4) root offset, [4,8) ``FT01``, a 40-byte header ``FH01`` at offset 8.
"""

from __future__ import annotations

import struct
from typing import Optional

from pte_devconst.util.errors import FormatError
from pte_devconst.util.record import record

SEGMENT_ALIGNMENT = 128  # what the exporter and this writer use; the loader does not require it
TENSOR_ALIGNMENT = 16
EXTENDED_HEADER_MAGIC = b"eh00"
EXTENDED_HEADER_LENGTH = 32
# H: header length rounded up to the largest force_align of the schema (16).
EXTENDED_HEADER_PADDED = 32
PTD_HEADER_MAGIC = b"FH01"
PTD_HEADER_LENGTH = 40
PTD_HEADER_PADDED = 48
MIN_PTE_SIZE = 64  # the runtime reads this many head bytes unconditionally

_PTE_HEADER = struct.Struct("<4sIQQQ")
_PTD_HEADER = struct.Struct("<4sIQQQQ")


def align_up(value: int, alignment: int) -> int:
    return (value + alignment - 1) // alignment * alignment


@record
class ExtendedHeader:
    """The .pte extended header; all offsets are absolute file offsets."""

    program_size: int
    segment_base_offset: int
    segment_data_size: int
    length: int = EXTENDED_HEADER_LENGTH

    def pack(self) -> bytes:
        return _PTE_HEADER.pack(EXTENDED_HEADER_MAGIC, self.length, self.program_size,
                                self.segment_base_offset, self.segment_data_size)


# The first line of a Git LFS pointer file: what a checkout without `git lfs pull` holds instead of the model.
LFS_POINTER = b"version https://git-lfs"


def mistaken_file(head: bytes | memoryview, wanted: str) -> Optional[str]:
    """What a file that is not a ``wanted`` (".pte" or ".ptd") is, when a user could have given it by mistake:
    a Git LFS pointer, or the other of the two kinds."""
    if bytes(head[:len(LFS_POINTER)]) == LFS_POINTER:
        return ("a Git LFS pointer, not the file's content: run `git lfs pull` (or `git lfs checkout`) to fetch "
                "the real file")
    identifier = bytes(head[4:8])
    if wanted == ".pte" and identifier == b"FT01":
        return "a .ptd data file, not a program: pass it with --ptd, next to the program it belongs to"
    if wanted == ".ptd" and identifier == b"ET12":
        return "a .pte program, not a .ptd data file: give it as a program, and its data with --ptd"
    return None


def read_pte_header(head: bytes | memoryview, file_size: int) -> Optional[ExtendedHeader]:
    """Parse and check the extended header; None when the file has none (no segment data).

    Every rule is one the ExecuTorch 1.5.1 loader applies (``ExtendedHeader::Parse`` in
    schema/extended_header.cpp, ``Program::load`` and ``Program::LoadSegment`` in
    runtime/executor/program.cpp), and nothing more: the runtime checks neither the alignment of
    ``segment_base_offset`` (the exporter's 128 is a convention) nor that it follows the program.
    """
    mistaken = mistaken_file(head, ".pte")
    if mistaken:
        raise FormatError(f"this is {mistaken}")
    if file_size < 8:
        raise FormatError(f"{file_size} bytes is too short for a .pte file", where="header")
    if bytes(head[4:8]) != b"ET12":
        raise FormatError(f"file identifier is {bytes(head[4:8])!r}, expected b'ET12' (not a .pte file?)",
                          where="header")
    if file_size < 8 + _PTE_HEADER.size or bytes(head[8:12]) != EXTENDED_HEADER_MAGIC:
        return None
    magic, length, program_size, base, data_size = _PTE_HEADER.unpack_from(head, 8)
    if length < 24:
        raise FormatError(f"extended header length {length} is below the minimum of 24", where="extended header")
    if length < 32:
        data_size = 0  # the runtime reads segment_data_size only from 32-byte headers
    if not 8 <= program_size <= file_size:  # Program::load: at least the root offset and identifier, inside the file
        raise FormatError(f"program_size {program_size} lies outside the file ({file_size} bytes)",
                          where="extended header")
    if data_size and not base:  # LoadSegment and load_mutable_subsegment_into refuse every segment of such a file
        raise FormatError(f"segment_data_size is {data_size} but segment_base_offset is 0", where="extended header")
    # Program::load checks the file size only when segment_data_size is set (files from before ExecuTorch 1.0
    # leave it 0 and are still loaded); each segment is then checked against the file when it is read.
    if data_size and base + data_size > file_size:
        raise FormatError(f"segments end at {base + data_size}, past the file end ({file_size} bytes); "
                          "the file is truncated", where="extended header")
    return ExtendedHeader(program_size, base, data_size, length)


@record
class PtdHeader:
    flatbuffer_offset: int
    flatbuffer_size: int
    segment_base_offset: int
    segment_data_size: int
    length: int = PTD_HEADER_LENGTH

    def pack(self) -> bytes:
        return _PTD_HEADER.pack(PTD_HEADER_MAGIC, self.length, self.flatbuffer_offset, self.flatbuffer_size,
                                self.segment_base_offset, self.segment_data_size)


def read_ptd_header(head: bytes | memoryview, file_size: int) -> PtdHeader:
    """Parse and check the .ptd header with the rules of ExecuTorch 1.5.1's ``FlatTensorDataMap::load``.

    (extension/flat_tensor/flat_tensor_data_map.cpp, serialize/flat_tensor_header.cpp): the magic, a
    length of at least 40, the flatbuffer and the segment data inside the file.  Where the flatbuffer
    starts and whether the segments follow it are not checked there, so not here either.
    """
    mistaken = mistaken_file(head, ".ptd")
    if mistaken:
        raise FormatError(f"this is {mistaken}")
    if file_size < 8 + _PTD_HEADER.size:
        raise FormatError(f"{file_size} bytes is too short for a .ptd file", where="header")
    if bytes(head[4:8]) != b"FT01":
        raise FormatError(f"file identifier is {bytes(head[4:8])!r}, expected b'FT01' (not a .ptd file?)",
                          where="header")
    magic, length, fb_offset, fb_size, base, data_size = _PTD_HEADER.unpack_from(head, 8)
    if magic != PTD_HEADER_MAGIC or length < PTD_HEADER_LENGTH:
        raise FormatError(f"bad .ptd header magic {magic!r} or length {length}", where="header")
    if fb_offset + fb_size > file_size:
        raise FormatError(f"flatbuffer [{fb_offset}, {fb_offset + fb_size}) lies outside the file ({file_size} bytes)",
                          where="header")
    if base + data_size > file_size:
        raise FormatError(f"segments [{base}, {base + data_size}) lie outside the file ({file_size} bytes); "
                          "the file is truncated", where="header")
    return PtdHeader(fb_offset, fb_size, base, data_size, length)
