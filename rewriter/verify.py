"""Check a written file against the plan that produced it, before it replaces the destination.

The writer's output is re-opened with the full reader (every offset and index
checked again), then every placement is checked field by field against the
encoding ExecuTorch 1.6 expects (docs/design.md), including that the moved
bytes equal the original's and that no other tensor of the method uses the
new region.  Any mismatch is a bug in this tool, reported as an error so that
a wrong file never reaches the user.
"""

from __future__ import annotations

from typing import Optional

from pte_devconst.schema import model as m
from pte_devconst.schema.errors import PteDevconstError
from pte_devconst.schema.pte_file import PteFile

from .analysis import H2D_COPY
from .plan import RewritePlan


class RewriteCheckError(PteDevconstError):
    """The rewritten file does not have the encoding the plan promised (a bug; the output was not written)."""


def _fail(what: str) -> RewriteCheckError:
    return RewriteCheckError(f"self-check of the rewritten file failed: {what}")


def _overlaps(a: int, a_len: int, b: int, b_len: int) -> bool:
    return a_len > 0 and b_len > 0 and a < b + b_len and b < a + a_len


def check_rewrite(original: PteFile, rewritten: PteFile, plan: RewritePlan,
                  external_bytes: Optional[dict[str, int]] = None) -> None:
    """Raise ``RewriteCheckError`` unless ``rewritten`` encodes every placement of ``plan`` exactly."""
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
                old_bytes = original.tensor_bytes((old.values or ())[p.value])
                new_bytes = rewritten.tensor_bytes(t)
                if old_bytes is None or new_bytes is None or old_bytes != new_bytes:
                    raise _fail(f"{where} initial data differs from the original constant")
            regions.append((p.memory_id, p.offset, p.nbytes, p.value))
        for index, value in enumerate(new.values or ()):
            if not isinstance(value, m.Tensor) or value.allocation_info is None:
                continue
            for memory_id, offset, nbytes, owner in regions:
                if index != owner and value.allocation_info.memory_id == memory_id and _overlaps(
                        offset, nbytes, value.allocation_info.memory_offset, value.nbytes):
                    raise _fail(f"{edit.name}: value {index} overlaps the region of moved value {owner}")
        _check_instructions(old, new, edit, plan)


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
