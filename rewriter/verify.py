"""Check a written file against the plan that produced it, before it replaces the destination.

The writer's output is re-opened with the full reader (every offset and index
checked again), then every placement is checked field by field against the
encoding ExecuTorch 1.6 expects (docs/design.md), including that the moved
bytes equal the original's (whole up to 1 MiB, sampled windows beyond: see
``_windows``) and that no other tensor of the method uses the
new region.  Any mismatch is a bug in this tool, reported as an error so that
a wrong file never reaches the user.
"""

from __future__ import annotations

import bisect
import os
from typing import Optional

from pte_devconst.schema import model as m
from pte_devconst.schema.errors import PteDevconstError
from pte_devconst.schema.pte_file import PteFile, Span
from pte_devconst.schema.pte_writer import FileRange

from .analysis import H2D_COPY
from .plan import RewritePlan


class RewriteCheckError(PteDevconstError):
    """The rewritten file does not have the encoding the plan promised (a bug; the output was not written)."""


def _fail(what: str) -> RewriteCheckError:
    return RewriteCheckError(f"self-check of the rewritten file failed: {what}")


# Tensors up to FULL_COMPARE_BYTES are compared whole.  Larger ones are compared in SAMPLE_BYTES
# windows: the first and last, and one every SAMPLE_STRIDE bytes (1/16 of the data).  Each moved
# tensor is one kernel-copied file range, so a wrong source offset, length or destination shows at
# its ends; comparing every byte of a multi-GB file would cost as much as copying it again
# (docs/performance.md).  ``full_data=True`` or PTE_DEVCONST_FULL_CHECK=1 compares every byte.
FULL_COMPARE_BYTES = 1 << 20
SAMPLE_BYTES = 64 << 10
SAMPLE_STRIDE = 1 << 20


def _windows(size: int, full: bool) -> list[tuple[int, int]]:
    """(offset, length) ranges of a ``size``-byte tensor to compare."""
    if full or size <= FULL_COMPARE_BYTES:
        return [(start, min(FULL_COMPARE_BYTES, size - start)) for start in range(0, size, FULL_COMPARE_BYTES)]
    starts = list(range(0, size - SAMPLE_BYTES, SAMPLE_STRIDE)) + [size - SAMPLE_BYTES]
    return [(start, SAMPLE_BYTES) for start in starts]


class _Comparer:
    """Compares spans of two files through two reused buffers (bounded memory, no mapped pages)."""

    def __init__(self, full: bool) -> None:
        self.full = full
        self._a = bytearray(FULL_COMPARE_BYTES)
        self._b = bytearray(FULL_COMPARE_BYTES)

    def same(self, a: PteFile, a_span: Span, b: PteFile, b_span: Span) -> bool:
        """Whether the spans hold the same bytes (the sampled windows of them, for large tensors).

        File-backed spans are read with ``preadv``: a multi-GB comparison neither maps every page
        into this process (which counts against its resident memory) nor compares memoryviews
        item by item (about 4 ms per MiB).
        """
        if a_span.size != b_span.size:
            return False
        pa, pb = a.piece(a_span), b.piece(b_span)
        if not (isinstance(pa, FileRange) and isinstance(pb, FileRange)):
            return bytes(a.read(a_span)) == bytes(b.read(b_span))
        for start, length in _windows(a_span.size, self.full):
            va, vb = memoryview(self._a)[:length], memoryview(self._b)[:length]
            if os.preadv(pa.fd, [va], pa.offset + start) != length or \
                    os.preadv(pb.fd, [vb], pb.offset + start) != length:
                return False
            if self._a[:length] != self._b[:length] if length < FULL_COMPARE_BYTES else self._a != self._b:
                return False
        return True


def _check_disjoint(name: str, plan: m.ExecutionPlan, regions: list[tuple[int, int, int, int]]) -> None:
    """No planned value of ``plan`` other than the owner overlaps a moved region: O((values + regions) log regions)."""
    by_buffer: dict[int, list[tuple[int, int, int]]] = {}
    for memory_id, offset, nbytes, owner in regions:
        if nbytes > 0:
            by_buffer.setdefault(memory_id, []).append((offset, offset + nbytes, owner))
    index_of: dict[int, tuple[list[int], list[int], list[int]]] = {}
    for memory_id, spans in by_buffer.items():
        spans.sort()
        for (_, end, owner), (start, _, other) in zip(spans, spans[1:]):
            if start < end:
                raise _fail(f"{name}: value {other} overlaps the region of moved value {owner}")
        index_of[memory_id] = ([s for s, _, _ in spans], [e for _, e, _ in spans], [o for _, _, o in spans])
    for index, value in enumerate(plan.values or ()):
        if not isinstance(value, m.Tensor) or value.allocation_info is None:
            continue
        found = index_of.get(value.allocation_info.memory_id)
        nbytes = value.nbytes if found else 0
        if nbytes <= 0:
            continue
        starts, ends, owners = found
        start = value.allocation_info.memory_offset
        # Regions are disjoint and sorted, so those overlapping [start, start + nbytes) are contiguous.
        for k in range(bisect.bisect_right(ends, start), bisect.bisect_left(starts, start + nbytes)):
            if owners[k] != index:
                raise _fail(f"{name}: value {index} overlaps the region of moved value {owners[k]}")


def check_rewrite(original: PteFile, rewritten: PteFile, plan: RewritePlan,
                  *, full_data: Optional[bool] = None) -> None:
    """Raise ``RewriteCheckError`` unless ``rewritten`` encodes every placement of ``plan`` exactly.

    ``full_data`` compares every moved byte (default: PTE_DEVCONST_FULL_CHECK, else sampled windows
    of tensors over 1 MiB).
    """
    if full_data is None:
        full_data = os.environ.get("PTE_DEVCONST_FULL_CHECK", "") not in ("", "0")
    comparer = _Comparer(full_data)
    old_plans = original.program.execution_plan or ()
    new_plans = rewritten.program.execution_plan or ()
    if len(old_plans) != len(new_plans):
        raise _fail("the number of methods changed")
    for edit in plan.methods:
        old, new = old_plans[edit.plan_index], new_plans[edit.plan_index]
        if len(old.values or ()) != len(new.values or ()):
            raise _fail(f"{edit.name}: the number of values changed")
        sizes = new.non_const_buffer_sizes or ()
        regions = []
        for p in edit.placements:
            t = (new.values or ())[p.value]
            where = f"{edit.name} value {p.value} ({p.name})"
            if not isinstance(t, m.Tensor) or t.allocation_info is None:
                raise _fail(f"{where} is not planned")
            if (t.allocation_info.memory_id, t.allocation_info.memory_offset) != (p.memory_id, p.offset):
                raise _fail(f"{where} is not at buffer {p.memory_id} offset {p.offset}")
            if t.device != p.device or new.buffer_device(p.memory_id) != p.device:
                raise _fail(f"{where} or its buffer is not on {p.device}")
            if p.offset + p.nbytes > sizes[p.memory_id] or p.offset % 16:
                raise _fail(f"{where} region is misaligned or outside its buffer")
            info = t.extra_tensor_info
            if info is None or info.mutable_data_segments_idx != 0:
                raise _fail(f"{where} lacks its extra_tensor_info")
            if p.external_key is not None:
                if not t.is_external or t.fqn != p.external_key:
                    raise _fail(f"{where} lost its external key")
            else:
                if t.is_external or t.data_buffer_idx != p.initial_data_index or t.data_buffer_idx == 0 and p.nbytes:
                    raise _fail(f"{where} does not point at its initial data")
                if not _same_data(comparer, original, (old.values or ())[p.value], rewritten, t):
                    raise _fail(f"{where} initial data differs from the original constant")
            regions.append((p.memory_id, p.offset, p.nbytes, p.value))
        _check_disjoint(edit.name, new, regions)
        _check_instructions(old, new, edit, plan)


def _same_data(comparer: _Comparer, original: PteFile, old: m.EValue, rewritten: PteFile, new: m.Tensor) -> bool:
    """The moved tensor's initial data equals the original constant's bytes."""
    if not isinstance(old, m.Tensor):
        return False
    old_span, new_span = original.tensor_span(old), rewritten.tensor_span(new)
    if old_span is None or new_span is None:  # deprecated inline constant_buffer: small by nature
        old_bytes, new_bytes = original.tensor_bytes(old), rewritten.tensor_bytes(new)
        return old_bytes is not None and new_bytes is not None and bytes(old_bytes) == bytes(new_bytes)
    return comparer.same(original, old_span, rewritten, new_span)


def _check_instructions(old: m.ExecutionPlan, new: m.ExecutionPlan, edit, plan: RewritePlan) -> None:
    ops = [op.qualified_name for op in new.operators or ()]
    moved = {p.value for p in edit.placements}
    removed_dsts = {copy.dst for p in edit.placements for copy in p.copies}
    for c, chain in enumerate(new.chains or ()):
        expected = sum(1 for k in edit.instruction_maps[c] if k is not None)
        if len(chain.instructions or ()) != expected:
            raise _fail(f"{edit.name}: chain {c} has {len(chain.instructions or ())} instructions, expected {expected}")
        if chain.stacktrace is not None and old.chains[c].stacktrace is not None and \
                len(old.chains[c].stacktrace) == len(old.chains[c].instructions or ()) and \
                len(chain.stacktrace) != expected:
            raise _fail(f"{edit.name}: chain {c} stack traces are no longer parallel to its instructions")
        for k, ins in enumerate(chain.instructions or ()):
            if isinstance(ins, m.KernelCall) and ops[ins.op_index] == H2D_COPY and ins.args and ins.args[0] in moved:
                raise _fail(f"{edit.name}: instruction {k} still copies a moved constant every call")
            if isinstance(ins, m.DelegateCall) and removed_dsts.intersection(ins.args or ()):
                raise _fail(f"{edit.name}: delegate call {k} still reads a removed device copy")
