"""Synthetic benchmark inputs made with the project's own writer (no torch).

* ``scaled_copy``: the exported program with every tensor's first dimension
  changed (4 MiB and 4 GiB variants of the 1 GiB export): same values,
  instructions, delegates and constant count; planned offsets, arena sizes and
  constant offsets scale with the tensors.  Constant data is taken from the
  source file's constant segment (repeated as needed) as kernel-copied file
  ranges, so a 4 GiB file is written at disk speed and is not sparse.
* ``analysis_program``: a copy-style program of about ``n`` values for the
  analysis scaling target: groups of 32 device constants (each with its
  ``_h2d_copy.out`` and device copy) feeding one cuda:0 delegate, and 32 host
  constants read by host ``aten::add.out`` / ``aten::mul.out`` kernels.
"""

from __future__ import annotations

import os
import random
from dataclasses import replace
from fractions import Fraction
from typing import Optional

from pte_devconst.schema import model as m
from pte_devconst.schema.pte_file import open_pte
from pte_devconst.schema.pte_writer import SegmentContent, write_pte
from pte_devconst.schema.span import FileRange, Span


def _scale_tensor(value: m.EValue, rows: int, factor: Fraction) -> m.EValue:
    if not isinstance(value, m.Tensor) or not value.sizes:
        return value
    sizes = (rows,) + tuple(value.sizes[1:])
    info = value.allocation_info
    if info is not None:
        offset = info.memory_offset * factor
        if offset.denominator != 1:
            raise ValueError(f"planned offset {info.memory_offset} does not scale by {factor}")
        info = replace(info, memory_offset=int(offset))
    return replace(value, sizes=sizes, allocation_info=info)


def scaled_copy(source_path: str, out_path: str, rows: int) -> int:
    """Write ``out_path``: ``source_path`` with every tensor's first dimension set to ``rows``; returns its size.

    Only for programs whose tensors all share one first dimension (the benchmark export does).
    """
    with open_pte(source_path) as source:
        program = source.program
        plan = program.execution_plan[0]
        firsts = {v.sizes[0] for v in plan.values or () if isinstance(v, m.Tensor) and v.sizes}
        if len(firsts) != 1:
            raise ValueError(f"tensors have several first dimensions: {sorted(firsts)}")
        factor = Fraction(rows, firsts.pop())
        values = tuple(_scale_tensor(v, rows, factor) for v in plan.values or ())
        sizes = []
        for size in plan.non_const_buffer_sizes or ():
            scaled = size * factor
            if scaled.denominator != 1:
                raise ValueError(f"arena size {size} does not scale by {factor}")
            sizes.append(int(scaled))
        new_plan = replace(plan, values=values, non_const_buffer_sizes=tuple(sizes))
        cs = program.constant_segment
        entry = {}  # data_buffer_idx -> nbytes (largest reader)
        for v in values:
            if isinstance(v, m.Tensor) and v.is_constant and not v.is_external:
                entry[v.data_buffer_idx] = max(entry.get(v.data_buffer_idx, 0), v.nbytes)
        offsets, cursor = [0], 0
        for index in range(1, len(cs.offsets)):
            offsets.append(cursor)
            cursor += -(-entry.get(index, 0) // 16) * 16
        const_size = offsets[-1] + entry.get(len(cs.offsets) - 1, 0)
        src_const = source.segment_span(cs.segment_index)
        pieces: list[tuple[int, FileRange | bytes]] = []
        filled = 0
        while filled < const_size:  # repeat the source's constant bytes as kernel-copied file ranges
            step = min(const_size - filled, src_const.size)
            piece = source.piece(Span(src_const.offset, step))
            pieces.append((filled, piece))
            filled += step
        contents = []
        for index, _segment in enumerate(program.segments or ()):
            if index == cs.segment_index:
                contents.append(SegmentContent(const_size, pieces))
            else:
                span = source.segment_span(index)
                contents.append(SegmentContent(span.size, [(0, source.piece(span))] if span.size else []))
        new_program = replace(program, execution_plan=(new_plan,) + tuple(program.execution_plan[1:]),
                              constant_segment=replace(cs, offsets=tuple(offsets)))
        layout = write_pte(out_path, new_program, contents)
    return layout.file_size


GROUP = 32


def analysis_program(n_values: int, seed: int = 0) -> tuple[m.Program, list[SegmentContent]]:
    """A copy-style program with about ``n_values`` values (and about 0.55x as many instructions)."""
    groups = max(1, round(n_values / (4 * GROUP + 3)))
    shape = (4, 4)
    nbytes = 64
    rng = random.Random(seed)
    device_info = m.ExtraTensorInfo(device_type=m.DeviceType.CUDA, device_index=0)
    values: list[m.EValue] = [m.Int(1)]  # alpha for aten::add.out
    alpha = 0
    x = len(values)
    values.append(m.Tensor(m.ScalarType.FLOAT, sizes=shape, dim_order=(0, 1),
                           allocation_info=m.AllocationDetails(1, 0)))
    instructions: list[m.Instruction] = []
    delegates: list[m.BackendDelegate] = []
    H2D, D2H, ADD, MUL = 0, 1, 2, 3
    operators = (m.Operator("et_copy::_h2d_copy", "out"), m.Operator("et_copy::_d2h_copy", "out"),
                 m.Operator("aten::add", "out"), m.Operator("aten::mul", "out"))
    data_index = 1
    host = x

    def add(data_buffer_idx: int = 0, memory: Optional[tuple[int, int]] = None, device: bool = False) -> int:
        values.append(m.Tensor(m.ScalarType.FLOAT, sizes=shape, dim_order=(0, 1), data_buffer_idx=data_buffer_idx,
                               allocation_info=m.AllocationDetails(*memory) if memory else None,
                               extra_tensor_info=device_info if device else None))
        return len(values) - 1

    for g in range(groups):
        dsts = []
        for k in range(GROUP):
            const = add(data_index)
            data_index += 1
            dst = add(memory=(2, k * nbytes), device=True)
            instructions.append(m.KernelCall(H2D, (const, dst, dst)))
            dsts.append(dst)
        out_dev = add(memory=(2, GROUP * nbytes), device=True)
        delegates.append(m.BackendDelegate("BackendWithCompilerDemo",
                                           m.BackendDelegateDataReference(m.DataLocation.SEGMENT, 1),
                                           (m.CompileSpec("target_device", b"cuda:0"),)))
        instructions.append(m.DelegateCall(g, tuple(dsts) + (out_dev,)))
        out_host = add(memory=(1, nbytes))
        instructions.append(m.KernelCall(D2H, (out_dev, out_host, out_host)))
        for k in range(GROUP):
            const = add(data_index)
            data_index += 1
            act = add(memory=(1, (2 + k % 2) * nbytes))
            op = ADD if k % 2 == 0 else MUL
            args = (host, const, alpha, act, act) if op == ADD else (host, const, act, act)
            instructions.append(m.KernelCall(op, args))
            host = act
    plan = m.ExecutionPlan(
        name="forward", values=tuple(values), inputs=(x,), outputs=(host,),
        chains=(m.Chain(instructions=tuple(instructions)),), operators=operators, delegates=tuple(delegates),
        non_const_buffer_sizes=(0, 4 * nbytes, (GROUP + 1) * nbytes),
        non_const_buffer_device=(m.NonConstBufferDevice(2, m.DeviceType.CUDA, 0),))
    entries = data_index - 1
    constants = SegmentContent(entries * nbytes, [(0, rng.randbytes(entries * nbytes))])
    blob = b"demo delegate blob"
    program = m.Program(
        execution_plan=(plan,), constant_buffer=(), backend_delegate_data=(),
        segments=(m.DataSegment(), m.DataSegment()),
        constant_segment=m.SubsegmentOffsets(0, tuple([0] + [i * nbytes for i in range(entries)])))
    return program, [constants, SegmentContent.of(blob)]


def seed_program(n_constants: int, style: str = "copy", rows: int = 4, seed: int = 0, host_reads: int = 0
                 ) -> tuple[m.Program, list[SegmentContent]]:
    """The seed's shape at any size: ``n_constants`` weights read only by one delegate call on ``cuda:0``.

    ``style="copy"`` as the 1.5.1 exporter writes it with non-CPU memory planning (bench/export_big.py): the
    input and every weight copied into the device buffer by ``_h2d_copy`` kernels, each into its own region
    (they are all live at the delegate call), the output copied back.  ``style="legacy"``: the delegate reads
    the host input and the host weights itself.  Each weight is ``rows`` x 4 float32.

    ``host_reads``: the last that many weights are also read on the host, by a chain of ``aten::add.out``
    after the call (added to its output; the method returns the sum too).  They stay on the host, and in copy
    style so do their per-call device copies: that many device values all live at once at the call, which a
    rewrite that moves the other weights lays out again (the layout's scaling case).
    """
    if style not in ("copy", "legacy"):
        raise ValueError(f"style must be 'copy' or 'legacy', got {style!r}")
    if not 0 <= host_reads <= n_constants:
        raise ValueError(f"host_reads must be within 0..{n_constants}, got {host_reads}")
    shape = (rows, 4)
    nbytes = rows * 16
    rng = random.Random(seed)
    device_info = m.ExtraTensorInfo(device_type=m.DeviceType.CUDA, device_index=0)
    values: list[m.EValue] = []

    def add(data_buffer_idx: int = 0, memory: Optional[tuple[int, int]] = None, device: bool = False) -> int:
        values.append(m.Tensor(m.ScalarType.FLOAT, sizes=shape, dim_order=(0, 1), data_buffer_idx=data_buffer_idx,
                               allocation_info=m.AllocationDetails(*memory) if memory else None,
                               extra_tensor_info=device_info if device else None))
        return len(values) - 1

    x = add(memory=(1, 0))
    constants = [add(i + 1) for i in range(n_constants)]
    instructions: list[m.Instruction] = []
    if style == "copy":
        x_dev = add(memory=(2, 0), device=True)
        instructions.append(m.KernelCall(0, (x, x_dev, x_dev)))
        args = [x_dev]
        for k, const in enumerate(constants):
            dst = add(memory=(2, (k + 1) * nbytes), device=True)
            instructions.append(m.KernelCall(0, (const, dst, dst)))
            args.append(dst)
        out_dev = add(memory=(2, (n_constants + 1) * nbytes), device=True)
        out = add(memory=(1, nbytes))
        instructions += [m.DelegateCall(0, tuple(args) + (out_dev,)), m.KernelCall(1, (out_dev, out, out))]
        sizes: tuple[int, ...] = (0, 2 * nbytes, (n_constants + 2) * nbytes)
        buffer_devices: Optional[tuple[m.NonConstBufferDevice, ...]] = (
            m.NonConstBufferDevice(2, m.DeviceType.CUDA, 0),)
        operators = (m.Operator("et_copy::_h2d_copy", "out"), m.Operator("et_copy::_d2h_copy", "out"))
    else:
        out = add(memory=(1, nbytes))
        instructions.append(m.DelegateCall(0, (x, *constants, out)))
        sizes, buffer_devices, operators = (0, 2 * nbytes), None, ()
    outputs = (out,)
    if host_reads:
        alpha = len(values)
        values.append(m.Int(1))
        total = out
        for k, const in enumerate(constants[n_constants - host_reads:]):
            acc = add(memory=(1, (2 + k % 2) * nbytes))
            instructions.append(m.KernelCall(len(operators), (total, const, alpha, acc, acc)))
            total = acc
        operators += (m.Operator("aten::add", "out"),)
        sizes = (0, 4 * nbytes) + sizes[2:]
        outputs = (out, total)
    plan = m.ExecutionPlan(
        name="forward", values=tuple(values), inputs=(x,), outputs=outputs,
        chains=(m.Chain(instructions=tuple(instructions)),), operators=operators,
        delegates=(m.BackendDelegate("BackendWithCompilerDemo",
                                     m.BackendDelegateDataReference(m.DataLocation.SEGMENT, 1),
                                     (m.CompileSpec("target_device", b"cuda:0"),)),),
        non_const_buffer_sizes=sizes, non_const_buffer_device=buffer_devices)
    program = m.Program(
        execution_plan=(plan,), constant_buffer=(), backend_delegate_data=(),
        segments=(m.DataSegment(), m.DataSegment()),
        constant_segment=m.SubsegmentOffsets(0, tuple([0] + [i * nbytes for i in range(n_constants)])))
    data = SegmentContent(n_constants * nbytes, [(0, rng.randbytes(n_constants * nbytes))])
    return program, [data, SegmentContent.of(b"demo delegate blob")]


def write_seed_program(path: str, n_constants: int, style: str = "copy", rows: int = 4, host_reads: int = 0
                       ) -> None:
    """Write ``seed_program(n_constants, style, rows, host_reads=host_reads)`` to ``path``."""
    program, contents = seed_program(n_constants, style, rows, host_reads=host_reads)
    write_pte(path, program, contents)


def write_analysis_program(path: str, n_values: int) -> tuple[int, int]:
    """Write ``analysis_program(n_values)`` to ``path``; returns (values, instructions)."""
    program, contents = analysis_program(n_values)
    write_pte(path, program, contents)
    plan = program.execution_plan[0]
    return len(plan.values), len(plan.chains[0].instructions)


def cached(path: str, make, *args, force: bool = False) -> str:  # type: ignore[no-untyped-def]
    """Build ``path`` with ``make(path, *args)`` unless it exists."""
    if force or not os.path.exists(path):
        make(path, *args)
    return path


def main(argv: Optional[list[str]] = None) -> None:
    import argparse
    parser = argparse.ArgumentParser(description="write a synthetic analysis program")
    parser.add_argument("out")
    parser.add_argument("--values", type=int, default=100_000)
    args = parser.parse_args(argv)
    print(write_analysis_program(args.out, args.values))


if __name__ == "__main__":
    main()
