"""The self-check's byte half: ranges of the written file that must hold given bytes of the input.

``verify.py`` walks both programs and lists, for every range of the output that
some table references, the input range it must equal (``SameBytes``); in full
mode it also lists the gaps that must be zero (``ZeroBytes``).  This module
compares them in bounded memory: ``preadv`` into two reused 1 MiB buffers,
never through the memory maps (each compared page would become resident) and
never as memoryview comparisons (about 4 ms per MiB).

What is compared in full and what by sampling (docs/design.md, "the
self-check"): a range is *proven* when the writer's own recipe (``WriteRecipe``:
the layout and the pieces ``apply_plan`` handed to it) says the kernel copied it
from exactly the input range the structural check says it must hold.  A proven
range over ``SMALL_BYTES`` is sampled, in a bounded number of
``SAMPLE_BYTES`` windows whatever its size: both ends, and ``SPREAD_WINDOWS`` more
at places seeded by the range (the same every run): the source is right by
construction, and a copy that went wrong (from a shifted source offset, of the
wrong length, cut short) shows at its ends.  So the bytes read grow with the
number of ranges, not with their size: 4 KiB of each file per bulk range, about
4 MiB for a 1 GiB program of 512 tensors, and as much for 100 MiB of the same tensors (which were read whole
while only ranges over 1 MiB were sampled: 210 MB).  Everything else, including every byte
the tool wrote itself, is compared whole; ``full=True`` (``rewrite --verify full``)
compares every byte of every range.
"""

from __future__ import annotations

import bisect
import random
from typing import Callable, Iterable, Optional, Sequence, Union

from pte_devconst.util.errors import PteDevconstError
from pte_devconst.schema.mapped import MappedFile
from pte_devconst.schema.pte_writer import Layout, SegmentContent
from pte_devconst.schema.span import FileRange, Piece, Span
from pte_devconst.util.record import record

FULL_COMPARE_BYTES = 1 << 20
SAMPLE_BYTES = 1 << 10  # a window costs one read of each file; a shifted or short copy shows in 1 KiB as in 4
SPREAD_WINDOWS = 2  # windows between a sampled range's two ends, at seeded places
# Ranges up to SMALL_BYTES are read through a 1 MiB window of each file, so that thousands of small constants
# laid out one after another cost a few reads instead of two system calls each.
SMALL_BYTES = 64 << 10


@record
class SameBytes:
    """``written`` (a range of the output) must hold the bytes of ``source`` (a range of the input)."""

    what: str
    source: Span
    written: Span


@record
class ComputedBytes:
    """``written`` must hold the bytes ``compute()`` gives (a folded value, recomputed from the input by the
    self-check's own reading of the program); always compared in full, one such range in memory at a time."""

    what: str
    written: Span
    compute: Callable[[], Union[bytes, bytearray, memoryview]]


@record
class ZeroBytes:
    """``written`` is padding the writer zero-fills (checked in full mode only)."""

    what: str
    written: Span


Requirement = Union[SameBytes, ComputedBytes, ZeroBytes]


@record
class Difference:
    requirement: Requirement
    offset: int  # first differing byte, relative to the range


def windows(size: int, full: bool, seed: int = 0) -> list[tuple[int, int]]:
    """(offset, length) parts of a ``size``-byte range to compare: all of it, or sampled windows (both ends and
    ``SPREAD_WINDOWS`` at places ``seed`` picks, in order)."""
    if full or size <= (SPREAD_WINDOWS + 2) * SAMPLE_BYTES:
        return [(start, min(FULL_COMPARE_BYTES, size - start)) for start in range(0, size, FULL_COMPARE_BYTES)]
    rng = random.Random(seed * 1_000_003 + size)
    inside = sorted(rng.randrange(SAMPLE_BYTES, size - 2 * SAMPLE_BYTES) for _ in range(SPREAD_WINDOWS))
    return [(start, SAMPLE_BYTES) for start in (0, *inside, size - SAMPLE_BYTES)]


class WriteRecipe:
    """Where each kernel-copied range of the output came from: (output start, end, source fd, source offset).

    Built from what the writer was given, not from what it wrote: it proves that a range was *meant*
    to come from a given input range; the sampled comparison then shows that the copy happened.
    Overlapping pieces prove nothing (every range is then compared whole).
    """

    def __init__(self, copied: Iterable[tuple[int, int, int, int]]) -> None:
        ordered = sorted(copied)
        if any(a[1] > b[0] for a, b in zip(ordered, ordered[1:])):
            ordered = []
        self._starts = [c[0] for c in ordered]
        self._copied = ordered

    @classmethod
    def of_layout(cls, layout: Layout, contents: Sequence[SegmentContent]) -> "WriteRecipe":
        """The kernel-copied pieces of a laid-out .pte (``write_pte_to_fd``'s input)."""
        copied = []
        for segment, content in zip(layout.segments, contents):
            base = layout.segment_base + segment.offset
            for offset, piece in content.pieces:
                if isinstance(piece, FileRange) and piece.size:
                    copied.append((base + offset, base + offset + piece.size, piece.fd, piece.offset))
        return cls(copied)

    @classmethod
    def of_copy(cls, piece: Piece) -> "WriteRecipe":
        """One piece written at offset 0 (a plain copy of the input)."""
        return cls([(0, piece.size, piece.fd, piece.offset)] if isinstance(piece, FileRange) else [])

    def proves(self, source_fd: int, source: Span, written: Span) -> bool:
        """Whether one kernel-copied piece put input bytes ``source`` (of ``source_fd``) exactly at ``written``."""
        k = bisect.bisect_right(self._starts, written.offset) - 1
        if k < 0 or source_fd < 0:
            return False
        start, end, fd, from_offset = self._copied[k]
        return (fd == source_fd and written.end <= end
                and from_offset + (written.offset - start) == source.offset)


def _without_repeats(requirements: Iterable[SameBytes]) -> list[SameBytes]:
    """Drop a requirement that another one already covers (same shift, range inside): each byte read once."""
    by_shift = sorted(requirements, key=lambda r: (r.written.offset - r.source.offset, r.source.offset,
                                                    -r.source.size))
    kept: list[SameBytes] = []
    for requirement in by_shift:
        if kept:
            last = kept[-1]
            same_shift = (last.written.offset - last.source.offset
                          == requirement.written.offset - requirement.source.offset)
            if same_shift and requirement.source.end <= last.source.end:
                continue
        kept.append(requirement)
    return kept


class _Reader:
    """Reads a range of a mapped file into a caller's buffer: ``preadv`` on its descriptor, else from memory."""

    def __init__(self, file: MappedFile) -> None:
        self.file = file
        probe = file.piece(Span(0, 0))
        self.fd = probe.fd if isinstance(probe, FileRange) else -1
        self._window = bytearray(FULL_COMPARE_BYTES)
        self._window_start, self._window_size = 0, 0
        self.read = 0  # bytes read so far

    def into(self, view: memoryview, offset: int) -> int:
        done = self.file.read_into(offset, view)
        self.read += done
        return done

    def small(self, span: Span) -> Optional[bytes]:
        """The bytes of a range of at most ``SMALL_BYTES`` through the window (None where the file ends first)."""
        if not (self._window_start <= span.offset and span.end <= self._window_start + self._window_size):
            self._window_start = span.offset
            self._window_size = self.into(memoryview(self._window), span.offset)
            if span.size > self._window_size:
                return None
        start = span.offset - self._window_start
        return bytes(self._window[start: start + span.size])


class CheckCost:
    """What a self-check cost in I/O: the bytes its comparisons read, of both files (working state: the rewrite
    hands one in and reports it)."""

    __slots__ = ("bytes_read",)

    def __init__(self) -> None:
        self.bytes_read = 0


class ByteChecker:
    """Compares requirements between an input and the written file; see the module docstring.  Working state
    (util/record.py): its readers and buffers are reused from one comparison to the next."""

    __slots__ = ("original", "written", "recipe", "full", "_source", "_output", "_a", "_b")

    def __init__(self, original: MappedFile, written: MappedFile, recipe: Optional[WriteRecipe], full: bool) -> None:
        self.original = original
        self.written = written
        self.recipe = recipe
        self.full = full
        self._source = _Reader(self.original)
        self._output = _Reader(self.written)
        self._a = bytearray(FULL_COMPARE_BYTES)
        self._b = bytearray(FULL_COMPARE_BYTES)

    @property
    def bytes_read(self) -> int:
        """The bytes the comparisons read so far, of both files (what the self-check costs in I/O)."""
        return self._source.read + self._output.read

    def first_difference(self, same: Iterable[SameBytes], zeros: Iterable[ZeroBytes] = (),
                         computed: Iterable[ComputedBytes] = ()) -> Optional[Difference]:
        """The first requirement that does not hold (in output order), or None."""
        work: list[Requirement] = [*_without_repeats(same), *zeros, *computed]
        work.sort(key=lambda r: r.written.offset)  # sequential reads of the output
        for requirement in work:
            if isinstance(requirement, SameBytes):
                offset = self._differs(requirement)
            elif isinstance(requirement, ComputedBytes):
                offset = self._computed(requirement)
            else:
                offset = self._not_zero(requirement)
            if offset is not None:
                return Difference(requirement, offset)
        return None

    def _differs(self, requirement: SameBytes) -> Optional[int]:
        source, written = requirement.source, requirement.written
        if source.size != written.size:
            return min(source.size, written.size)
        if source.size <= SMALL_BYTES:
            a, b = self._source.small(source), self._output.small(written)
            if a is None:
                raise self._changed(source.end)
            if b is None or a != b:
                return next((i for i, (x, y) in enumerate(zip(a, b or b"")) if x != y), min(len(a), len(b or b"")))
            return None
        sampled = not self.full and self.recipe is not None and \
            self.recipe.proves(self._source.fd, source, written)
        for start, length in windows(source.size, self.full or not sampled, written.offset):
            view_a, view_b = memoryview(self._a)[:length], memoryview(self._b)[:length]
            if self._source.into(view_a, source.offset + start) != length:
                raise self._changed(source.offset + start + length)
            if self._output.into(view_b, written.offset + start) != length:
                return start
            if self._a[:length] != self._b[:length] if length < FULL_COMPARE_BYTES else self._a != self._b:
                return start + next(i for i in range(length) if self._a[i] != self._b[i])
        return None

    def _computed(self, requirement: ComputedBytes) -> Optional[int]:
        """Every byte of the range against the recomputed value (which is then dropped)."""
        expected = memoryview(requirement.compute()).cast("B")
        span = requirement.written
        if len(expected) != span.size:
            return min(len(expected), span.size)
        for start in range(0, span.size, FULL_COMPARE_BYTES):
            length = min(FULL_COMPARE_BYTES, span.size - start)
            if self._output.into(memoryview(self._b)[:length], span.offset + start) != length:
                return start
            self._a[:length] = expected[start: start + length]  # bytearray comparison: memcmp, not per element
            if self._a[:length] != self._b[:length] if length < FULL_COMPARE_BYTES else self._a != self._b:
                return start + next(i for i in range(length) if self._a[i] != self._b[i])
        return None

    def _changed(self, end: int) -> PteDevconstError:
        return PteDevconstError(f"the input ended before byte {end:,} while the rewrite was checked: it changed "
                                "during the rewrite", file=self.original.path)

    def _not_zero(self, requirement: ZeroBytes) -> Optional[int]:
        span = requirement.written
        if span.size <= SMALL_BYTES:
            data = self._output.small(span)
            if data is None:
                return 0
            return None if data.count(0) == len(data) else next(i for i, byte in enumerate(data) if byte)
        for start, length in windows(span.size, True):
            view = memoryview(self._b)[:length]
            if self._output.into(view, span.offset + start) != length:
                return start
            if self._b.count(0, 0, length) != length:
                return start + next(i for i in range(length) if self._b[i])
        return None
