"""Forged programs for tests: a real program decoded, one thing changed, written back with the project's writer.

Used to give real examples backends that have no executor (``CudaBackend``, ``TensorRTBackend``; the blob
is kept) and to build wrong rewrites from the tool's own correct rewrite.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Callable, Collection, Iterator, Optional, Sequence

from pte_devconst.rewriter.encodings.first_call import first_call_prologue
from pte_devconst.schema import model as m
from pte_devconst.schema.pte_file import open_pte
from pte_devconst.schema.pte_writer import unchanged_segments, write_pte


def edit_program(source: Path, out: Path, edit: Callable[[m.Program], m.Program]) -> Path:
    """``source`` with its program replaced by ``edit(program)``; segments (data, blobs) unchanged."""
    with open_pte(source) as pte:
        write_pte(out, edit(pte.program), unchanged_segments(pte))
    return out


def changed_programs(roots: Sequence[m.Program], seed: int, count: int) -> Iterator[m.Program]:
    """``count`` programs, each a random root with one to three structured changes from the fuzzer (edge values,
    None versus empty, holes in vectors of tables, odd strings); the same ``seed``, the same programs."""
    from fuzz.mutate import _apply, _forge, _sites

    rng = random.Random(seed)
    for _ in range(count):
        program = rng.choice(roots)
        for _ in range(rng.choice((1, 2, 3))):
            path, kind, current = rng.choice(_sites(program))
            program = _apply(program, path, _forge(rng, kind, current)[1])
        yield program


def edit_plans(program: m.Program, edit: Callable[[m.ExecutionPlan], m.ExecutionPlan]) -> m.Program:
    return m.replace(program, execution_plan=tuple(edit(plan) for plan in program.execution_plan))


def with_backend(source: Path, out: Path, backend: str, delegates: Optional[Collection[int]] = None) -> Path:
    """``source`` with the backend id of its delegates (all, or those indices) renamed to ``backend``."""

    def rename(plan: m.ExecutionPlan) -> m.ExecutionPlan:
        renamed = tuple(m.replace(d, id=backend) if delegates is None or i in delegates else d
                        for i, d in enumerate(plan.delegates))
        return m.replace(plan, delegates=renamed)

    return edit_program(source, out, lambda program: edit_plans(program, rename))


def with_value(plan: m.ExecutionPlan, index: int, value: m.EValue) -> m.ExecutionPlan:
    values = list(plan.values)
    values[index] = value
    return m.replace(plan, values=tuple(values))


def flip_byte(source: Path, out: Path, offset: int, mask: int = 0x01) -> Path:
    data = bytearray(source.read_bytes())
    data[offset] ^= mask
    out.write_bytes(bytes(data))
    return out


def _first_plan(source: Path) -> tuple[bytes, m.Program, tuple[m.EValue, ...], m.Tensor]:
    """(the file's bytes, its program, the first plan's values, the first tensor among them)."""
    with open_pte(source) as pte:
        program = pte.program
    values = tuple(program.execution_plan[0].values or ())
    return source.read_bytes(), program, values, next(v for v in values if isinstance(v, m.Tensor))


def aliased_values(source: Path, out: Path, copies: int) -> Path:
    """``source`` with ``copies`` more values in its first plan, every one an offset to the table of one tensor
    value the program already has: a file of 4 bytes a value whose decoded program has ``copies`` tensors.

    Written by the project's builder, with the values vector (the one offset vector of its length) extended
    by repeats of its last offset, so a file of tens of megabytes takes a second to make.
    """
    from fuzz.structure import _assemble_with

    from pte_devconst.schema.flatbuf_builder import Builder
    from pte_devconst.schema.generated.encoders import PROGRAM_IDENTIFIER, write_program

    data, program, values, tensor = _first_plan(source)
    plan = program.execution_plan[0]
    marked = len(values) + 1
    program = m.replace(program, execution_plan=(m.replace(plan, values=values + (tensor,)),)
                        + tuple(program.execution_plan[1:]))

    class Aliasing(Builder):
        expanded = 0

        def offsets(self, targets: Sequence[int]) -> int:
            if len(targets) == marked:
                self.expanded += 1
                targets = list(targets) + [targets[-1]] * copies
            return super().offsets(targets)

    builder = Aliasing(4 * (marked + copies) + 4096)
    flat = builder.finish(write_program(builder, program), PROGRAM_IDENTIFIER)
    if builder.expanded != 1:
        raise RuntimeError(f"{builder.expanded} offset vectors of {marked} items; expected only the values")
    out.write_bytes(_assemble_with(flat, data))
    return out


def shared_vectors(source: Path, out: Path, lists: int, items: int, tensors: int, kind: str = "lists") -> Path:
    """``source`` with ``lists`` TensorList values (``kind="lists"``) or kernel calls (``"args"``) in its first
    plan that all name one stored int32 vector of ``items`` value indices, over ``tensors`` tensor values that are
    one table named ``tensors`` times (issue 27: 48 MB of this took 3 GB before ``check`` and ``inspect`` ended in
    ``MemoryError``).  The file holds the vector once: about ``4 * (items + tensors)`` bytes plus a table each.
    """
    from fuzz.structure import _assemble_with

    from pte_devconst.schema.flatbuf import I32
    from pte_devconst.schema.flatbuf_builder import Builder
    from pte_devconst.schema.generated.encoders import PROGRAM_IDENTIFIER, write_program

    data, program, values, tensor = _first_plan(source)
    plan = program.execution_plan[0]
    first = len(values) + (lists if kind == "lists" else 0)  # the aliased tensors come last
    big = tuple(first + i % tensors for i in range(items))
    if kind == "lists":
        plan = m.replace(plan, values=values + (m.TensorList(big),) * lists + (tensor,))
    else:
        call = next(i for c in plan.chains or () for i in c.instructions or () if isinstance(i, m.KernelCall))
        chain = plan.chains[0]
        plan = m.replace(plan, values=values + (tensor,), chains=(m.replace(chain, instructions=tuple(
            chain.instructions or ()) + tuple(m.KernelCall(call.op_index, big) for _ in range(lists))),)
            + tuple(plan.chains[1:]))
    marked = len(plan.values)
    program = m.replace(program, execution_plan=(plan,) + tuple(program.execution_plan[1:]))

    class Sharing(Builder):
        """Writes the big vector once and names it from every table; the last value's table ``tensors`` times."""

        at: Optional[int] = None

        def scalars(self, kind, seq, alignment=0):  # noqa: ANN001, ANN202
            if len(seq) == items and kind is I32:
                if self.at is None:
                    self.at = super().scalars(kind, seq, alignment)
                return self.at
            return super().scalars(kind, seq, alignment)

        def offsets(self, targets):  # noqa: ANN001, ANN202
            if len(targets) == marked:
                targets = list(targets) + [targets[-1]] * (tensors - 1)
            return super().offsets(targets)

    builder = Sharing(4 * (items + tensors) + 64 * lists + 4096)
    flat = builder.finish(write_program(builder, program), PROGRAM_IDENTIFIER)
    out.write_bytes(_assemble_with(flat, data))
    return out


def expanding_fold(source: Path, out: Path, rows: int) -> Path:
    """``source`` (the fold fixture ``steps_copy``: a constant selected, permuted, unsqueezed and expanded into a
    device delegate) with the expand's first size set to ``rows``: its output and that output's device copy grow to
    ``rows`` × the unexpanded bytes, each moved to the end of its planned buffer, which grows to hold it. The file
    stays a few KiB."""
    def edit(plan: m.ExecutionPlan) -> m.ExecutionPlan:
        values = list(plan.values)
        ops = [op.name for op in plan.operators]
        ins = next(i for i in plan.chains[0].instructions
                   if isinstance(i, m.KernelCall) and ops[i.op_index] == "aten::expand_copy")
        size_list, out = values[ins.args[1]], ins.args[-2]
        values[size_list.items[0]] = m.Int(rows)
        sizes = (rows,) + tuple(values[out].sizes[1:])
        copies = [i.args[1] for i in plan.chains[0].instructions
                  if isinstance(i, m.KernelCall) and ops[i.op_index] == "et_copy::_h2d_copy" and i.args[0] == out]
        buffers = list(plan.non_const_buffer_sizes)
        for index in [out, *copies]:  # each grown tensor at the end of its buffer, overlapping nothing
            grown = m.replace(values[index], sizes=sizes)
            info = grown.allocation_info
            values[index] = m.replace(grown, allocation_info=m.replace(info, memory_offset=buffers[info.memory_id]))
            buffers[info.memory_id] += grown.nbytes
        return m.replace(plan, values=tuple(values), non_const_buffer_sizes=tuple(buffers))

    return edit_program(source, out, lambda program: edit_plans(program, edit))


def view_read_again(plan: m.ExecutionPlan, *, also_first: bool = False, sizes: Optional[tuple[int, ...]] = None,
                    host_reader: bool = False) -> m.ExecutionPlan:
    """The delegate that reads the first constant's device copy runs again right after its call, given a static
    view of the copy: a new value, the copy's tensor at the copy's place, which no instruction writes (what the
    emitter leaves for an elided view).  Variants: the same call also first in the chain (``also_first``: there the
    view reads what the previous call left), a view of other ``sizes``, and (``host_reader``, for the analysis only) a
    ``_d2h_copy`` reading the view too, into a host tensor planned where the method's first output is."""
    ins = plan.chains[0].instructions
    ops = [op.name for op in plan.operators]
    k = next(i for i, x in enumerate(ins) if isinstance(x, m.KernelCall) and "h2d" in ops[x.op_index]
             and plan.values[x.args[0]].is_constant)
    dst = ins[k].args[1]
    copy_tensor = plan.values[dst]
    view = copy_tensor if sizes is None else m.replace(copy_tensor, sizes=sizes,
                                                       dim_order=tuple(range(len(sizes))))
    values = plan.values + (view,)
    at = next(i for i, x in enumerate(ins) if i > k and isinstance(x, m.DelegateCall) and dst in x.args)
    again = m.replace(ins[at], args=tuple(len(values) - 1 if a == dst else a for a in ins[at].args))
    where = at + 1
    new = list(ins[:where]) + [again] + list(ins[where:])
    if host_reader:
        values += (plan.values[plan.outputs[0]],)
        d2h = next(i for i, op in enumerate(ops) if "d2h" in op)
        new.insert(where + 1, m.KernelCall(d2h, (len(values) - 2, len(values) - 1, len(values) - 1)))
    new = [m.replace(x, destination_instruction=x.destination_instruction + (x.destination_instruction > where))
           if isinstance(x, m.JumpFalseCall) else x for x in new]
    if also_first:
        new = [again] + [m.replace(x, destination_instruction=x.destination_instruction + 1)
                         if isinstance(x, m.JumpFalseCall) else x for x in new]
    chain = m.replace(plan.chains[0], instructions=tuple(new))
    return m.replace(plan, values=values, chains=(chain,) + tuple(plan.chains[1:]))


def large_constant(source: Path, out: Path, rows: int) -> Path:
    """``source`` (a copy-style program whose value 0 is a 48-byte constant copied to a device, v_a_dtypes_copy) with
    value 0 grown to ``rows`` x 4 float32 of counting bytes (a bulk, kernel-copied range), and its device copy grown
    with it, at the end of its buffer (a copy keeps its constant's shape).  ``rows * 16`` must be a multiple of
    256."""
    from dataclasses import replace

    from pte_devconst.schema.pte_file import PteFile
    from pte_devconst.schema.pte_writer import SegmentContent

    data = source.read_bytes()
    with PteFile.from_bytes(data) as pte:
        program = pte.program
        old = bytes(pte.read(pte.segment_span(0)))
        delegate = bytes(pte.read(pte.segment_span(1)))
    plan = program.execution_plan[0]
    values = list(plan.values)
    values[0] = replace(values[0], sizes=(rows, 4))
    sizes = list(plan.non_const_buffer_sizes)
    copy_of_0 = next(ins.args[1] for ins in plan.chains[0].instructions if isinstance(ins, m.KernelCall)
                     and plan.operators[ins.op_index].name == "et_copy::_h2d_copy" and ins.args[0] == 0)
    info = values[copy_of_0].allocation_info
    end = -(-sizes[info.memory_id] // 16) * 16
    values[copy_of_0] = replace(values[copy_of_0], sizes=(rows, 4), allocation_info=replace(info, memory_offset=end))
    sizes[info.memory_id] = end + rows * 16
    big = bytes(range(256)) * (rows * 16 // 256)
    offsets = program.constant_segment.offsets
    entry = offsets[1]
    constants = old[:entry] + big + old[entry + 48:]
    shift = len(big) - 48
    new_offsets = offsets[:2] + tuple(o + shift for o in offsets[2:])
    program = replace(program, execution_plan=(replace(plan, values=tuple(values),
                                                      non_const_buffer_sizes=tuple(sizes)),),
                      constant_segment=replace(program.constant_segment, offsets=new_offsets))
    write_pte(out, program, [SegmentContent.of(constants), SegmentContent.of(delegate)])
    return out


def moved_spans(path: Path) -> list[tuple[int, int]]:
    """(file offset, size) of each moved constant's bytes in a rewrite of a one-method program: device initial data
    (1.6) or a first-call copy's host source (1.5)."""
    with open_pte(path) as pte:
        plan = pte.program.execution_plan[0]
        values = plan.values or ()
        sources = [values[k] for k in (i.args[0] for i in (plan.chains[0].instructions or ())  # type: ignore[index]
                                       [1:first_call_prologue(plan).end - 1])] if first_call_prologue(plan) else []
        held = [v for v in values if isinstance(v, m.Tensor) and v.has_initial_data
                and v.allocation_info is not None and v.allocation_info.memory_id == 2]
        spans = [pte.tensor_span(t) for t in (sources or held)]
    return [(s.offset, s.size) for s in spans if s is not None]


def swapped_moved_constants(source: Path, out: Path) -> Path:
    """A 1.6 rewrite with the data of two moved constants of one shape swapped (each reads the other's bytes)."""
    def swap(program: m.Program) -> m.Program:
        plan = program.execution_plan[0]  # type: ignore[index]
        values = list(plan.values or ())
        held = [i for i, v in enumerate(values) if isinstance(v, m.Tensor) and v.has_initial_data
                and v.allocation_info is not None and v.allocation_info.memory_id == 2]
        a, b = next((a, b) for a in held for b in held if a < b and values[a].sizes == values[b].sizes)  # type: ignore[union-attr]
        ta, tb = values[a], values[b]
        assert isinstance(ta, m.Tensor) and isinstance(tb, m.Tensor)
        values[a], values[b] = (m.replace(ta, data_buffer_idx=tb.data_buffer_idx),
                                m.replace(tb, data_buffer_idx=ta.data_buffer_idx))
        return m.replace(program, execution_plan=(m.replace(plan, values=tuple(values)),))

    return edit_program(source, out, swap)
