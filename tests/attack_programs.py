"""Programs built to break the rewrite's memory model (issue 26), with the project's schema model and writer.

Each is a valid copy-style program whose device delegates are the reference backend (``PteDevconstReference``:
its blob states how many arguments are inputs, so ``validate --simulate-devices`` executes them faithfully), and
whose rewrite the memory model once got wrong:

* ``move_call``: a ``MoveCall`` hands a device delegate's result on (as ``torch.cond`` does); the other name
  is the same tensor, read by the last delegate.
* ``view_read_again``: a delegate reads, as its second argument, an elided static view of a tensor another
  delegate already read; the data flow's split takes it for an output.
* ``view_of_resident``: a file that already holds a device-resident constant (a rewrite's output) and a static
  view of it read by a delegate, with another constant still to move.
* ``output_on_copy``: a delegate called a second time with its output on an ``_h2d_copy`` destination.
* ``jump_skipped_write`` (for a forged rewrite): a value written in one branch of a jump and read after it, so
  a call that takes the other branch reads what the last call wrote there.

Every tensor is float32 [2, 2] (16 bytes); buffer 1 is the host's, buffer 2 is ``cuda:0``'s.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any, Optional, Sequence

from pte_devconst.schema import model as m
from pte_devconst.schema.pte_writer import SegmentContent, write_pte

SHAPE = (2, 2)
NBYTES = 16
CUDA = m.ExtraTensorInfo(device_type=m.DeviceType.CUDA, device_index=0)
H2D, D2H = 0, 1
OPERATORS = (m.Operator("et_copy::_h2d_copy", "out"), m.Operator("et_copy::_d2h_copy", "out"))


def _floats(*values: float) -> bytes:
    return struct.pack(f"<{len(values)}f", *values)


class ProgramBuilder:
    """One method, ``forward``: values, instructions and reference-backend delegates, written as a .pte."""

    def __init__(self) -> None:
        self.values: list[m.EValue] = []
        self.constants: list[bytes] = []
        self.initial: list[bytes] = []
        self.instructions: list[m.Instruction] = []
        self.delegates: list[bytes] = []
        self.inputs: list[int] = []
        self.outputs: list[int] = []
        self.sizes = [0, 0, 0]

    def _tensor(self, data_buffer_idx: int = 0, place: Optional[tuple[int, int]] = None) -> int:
        if place is not None:
            self.sizes[place[0]] = max(self.sizes[place[0]], place[1] + NBYTES)
        self.values.append(m.Tensor(m.ScalarType.FLOAT, sizes=SHAPE, dim_order=(0, 1), data_buffer_idx=data_buffer_idx,
                                    allocation_info=m.AllocationDetails(*place) if place else None,
                                    extra_tensor_info=CUDA if place is not None and place[0] == 2 else None))
        return len(self.values) - 1

    def constant(self, *values: float) -> int:
        self.constants.append(_floats(*values))
        return self._tensor(data_buffer_idx=len(self.constants))

    def planned(self, memory_id: int, offset: int) -> int:
        return self._tensor(place=(memory_id, offset))

    def resident(self, memory_id: int, offset: int, *values: float) -> int:
        """A planned tensor with initial data (a constant a rewrite already moved)."""
        self.initial.append(_floats(*values))
        return self._tensor(data_buffer_idx=len(self.initial), place=(memory_id, offset))

    def input(self, memory_id: int = 1, offset: int = 0) -> int:
        index = self.planned(memory_id, offset)
        self.inputs.append(index)
        return index

    def h2d(self, source: int, out: int) -> None:
        self.instructions.append(m.KernelCall(H2D, (source, out, out)))

    def d2h(self, source: int, out: int) -> None:
        self.instructions.append(m.KernelCall(D2H, (source, out, out)))

    def delegate(self, nodes: list[dict[str, Any]], n_inputs: int, outputs: Sequence[int] = (0,)) -> int:
        """A reference-backend delegate of ``n_inputs`` float32 [2, 2] inputs; its index."""
        blob = {"format": "pte-devconst-reference", "version": 1, "target_device": "cuda:0",
                "inputs": [{"dtype": "float32", "shape": list(SHAPE)}] * n_inputs, "constants": [],
                "nodes": nodes, "outputs": [{"node": k} for k in outputs]}
        self.delegates.append(json.dumps(blob, separators=(",", ":")).encode())
        return len(self.delegates) - 1

    def call(self, delegate: int, *args: int) -> None:
        self.instructions.append(m.DelegateCall(delegate, tuple(args)))

    def program(self) -> tuple[m.Program, list[SegmentContent]]:
        offsets, cursor = [0], 0
        for data in self.constants:
            offsets.append(cursor)
            cursor += len(data)
        segments = [SegmentContent.of(b"".join(self.constants))]
        segments += [SegmentContent.of(blob) for blob in self.delegates]
        mutable = None
        if self.initial:
            data_offsets, at = [0], 0
            for data in self.initial:
                data_offsets.append(at)
                at += len(data)
            mutable = (m.SubsegmentOffsets(len(segments), tuple(data_offsets)),)
            segments.append(SegmentContent.of(b"".join(self.initial)))
        delegates = tuple(m.BackendDelegate("PteDevconstReference",
                                            m.BackendDelegateDataReference(m.DataLocation.SEGMENT, 1 + i),
                                            (m.CompileSpec("target_device", b"cuda:0"),))
                          for i in range(len(self.delegates)))
        sizes = tuple(-(-s // 16) * 16 for s in self.sizes)
        plan = m.ExecutionPlan(
            name="forward", values=tuple(self.values), inputs=tuple(self.inputs), outputs=tuple(self.outputs),
            chains=(m.Chain(instructions=tuple(self.instructions)),), operators=OPERATORS, delegates=delegates,
            non_const_buffer_sizes=sizes, non_const_buffer_device=(m.NonConstBufferDevice(2, m.DeviceType.CUDA, 0),))
        program = m.Program(execution_plan=(plan,), constant_buffer=(), backend_delegate_data=(),
                            segments=tuple(m.DataSegment() for _ in segments),
                            constant_segment=m.SubsegmentOffsets(0, tuple(offsets)), mutable_data_segments=mutable)
        return program, segments

    def write(self, path: Path) -> Path:
        write_pte(path, *self.program())
        return path


def _op(name: str, *args: Any) -> dict[str, Any]:
    return {"op": name, "args": list(args), "kwargs": {}}


def _in(i: int) -> dict[str, int]:
    return {"input": i}


def _node(k: int) -> dict[str, int]:
    return {"node": k}


MM = [_op("aten::mm.default", _in(0), _in(1))]
ADD = [_op("aten::add.Tensor", _in(0), _in(1))]
DOUBLE = [_op("aten::mul.Tensor", _in(0), 2.0)]


def move_call(path: Path) -> Path:
    """Class 1: ``T = mm(x, W)`` on the device, ``MoveCall T -> M``, ``Z = x + W``, ``out = M + Z``.

    The model once ended T's life at the move (M had storage of its own), so the re-layout could put Z on T's
    bytes, which M still names: the rewrite computes 2 (x + W) instead of mm(x, W) + x + W.
    """
    b = ProgramBuilder()
    x = b.input()
    w = b.constant(1.0, 2.0, 3.0, 4.0)
    xd, wd, t = b.planned(2, 0), b.planned(2, 16), b.planned(2, 32)
    moved = b.planned(2, 48)
    xd2, wd2, z = b.planned(2, 64), b.planned(2, 80), b.planned(2, 96)
    out_d, out = b.planned(2, 112), b.planned(1, 16)
    b.outputs.append(out)
    mm, add = b.delegate(MM, 2), b.delegate(ADD, 2)
    add2 = b.delegate(ADD, 2)
    b.h2d(x, xd)
    b.h2d(w, wd)
    b.call(mm, xd, wd, t)
    b.instructions.append(m.MoveCall(t, moved))
    b.h2d(x, xd2)
    b.h2d(w, wd2)
    b.call(add, xd2, wd2, z)
    b.call(add2, moved, z, out_d)
    b.d2h(out_d, out)
    return b.write(path)


def view_read_again(path: Path) -> Path:
    """Class 2: ``T = mm(x, W)``, ``U = T + x``, then ``out = U + V`` where V is a static view of T (T's region,
    no instruction writes it): T was already read, so the data flow's split takes V for an output."""
    b = ProgramBuilder()
    x = b.input()
    w = b.constant(1.0, 2.0, 3.0, 4.0)
    xd, wd, t, u = b.planned(2, 0), b.planned(2, 16), b.planned(2, 32), b.planned(2, 48)
    view, out_d, out = b.planned(2, 32), b.planned(2, 64), b.planned(1, 16)
    b.outputs.append(out)
    mm, add, add2 = b.delegate(MM, 2), b.delegate(ADD, 2), b.delegate(ADD, 2)
    b.h2d(x, xd)
    b.h2d(w, wd)
    b.call(mm, xd, wd, t)
    b.call(add, t, xd, u)
    b.call(add2, u, view, out_d)
    b.d2h(out_d, out)
    return b.write(path)


def view_of_resident(path: Path) -> Path:
    """Class 3: C is already device-resident (initial data); V, a static view of C, is read by a delegate with
    K's device copy (K still to move): ``out = mm(x, V) + K``."""
    b = ProgramBuilder()
    x = b.input()
    resident = b.resident(2, 0, 1.0, 2.0, 3.0, 4.0)
    k = b.constant(0.5, 0.25, 0.125, 2.0)
    view = b.planned(2, 0)
    xd, kd, t, out_d, out = b.planned(2, 16), b.planned(2, 32), b.planned(2, 48), b.planned(2, 64), b.planned(1, 16)
    b.outputs.append(out)
    assert resident == 1
    mm, add = b.delegate(MM, 2), b.delegate(ADD, 2)
    b.h2d(x, xd)
    b.h2d(k, kd)
    b.call(mm, xd, view, t)
    b.call(add, t, kd, out_d)
    b.d2h(out_d, out)
    return b.write(path)


def output_on_copy(path: Path) -> Path:
    """Class 4: ``D = h2d(C)``; delegate A (one input) runs ``y = 2 D``, then once more ``D = 2 y`` (its output
    slot on D, which the copy refreshes every call); ``out = x + D``."""
    b = ProgramBuilder()
    x = b.input()
    c = b.constant(1.0, 2.0, 3.0, 4.0)
    d, xd, y, out_d, out = b.planned(2, 0), b.planned(2, 16), b.planned(2, 32), b.planned(2, 48), b.planned(1, 16)
    b.outputs.append(out)
    double, add = b.delegate(DOUBLE, 1), b.delegate(ADD, 2)
    b.h2d(c, d)
    b.h2d(x, xd)
    b.call(double, d, y)
    b.call(double, y, d)
    b.call(add, xd, d, out_d)
    b.d2h(out_d, out)
    return b.write(path)


def jump_skipped_write(path: Path) -> Path:
    """A jump on the input flag: when it is true, ``P = mm(x, W)`` is computed; either way ``out = P + Q`` with
    ``Q = x + W`` computed before the jump.  A call whose flag is false reads the P of the last call that
    computed it (its bytes persist): P is state, though its first use in program order is a write."""
    b = ProgramBuilder()
    x = b.input()
    flag = len(b.values)
    b.values.append(m.Tensor(m.ScalarType.BOOL, sizes=(), dim_order=(), allocation_info=m.AllocationDetails(1, 32)))
    b.sizes[1] = max(b.sizes[1], 48)
    b.inputs.append(flag)
    w = b.constant(1.0, 2.0, 3.0, 4.0)
    xd, wd, q = b.planned(2, 0), b.planned(2, 16), b.planned(2, 32)
    xd2, wd2, p = b.planned(2, 48), b.planned(2, 64), b.planned(2, 80)
    out_d, out = b.planned(2, 96), b.planned(1, 16)
    b.outputs.append(out)
    add, mm, add2 = b.delegate(ADD, 2), b.delegate(MM, 2), b.delegate(ADD, 2)
    b.h2d(x, xd)
    b.h2d(w, wd)
    b.call(add, xd, wd, q)
    b.instructions.append(m.JumpFalseCall(flag, len(b.instructions) + 4))
    b.h2d(x, xd2)
    b.h2d(w, wd2)
    b.call(mm, xd2, wd2, p)
    b.call(add2, p, q, out_d)
    b.d2h(out_d, out)
    return b.write(path)


ATTACKS = {"move_call": move_call, "view_read_again": view_read_again, "view_of_resident": view_of_resident,
           "output_on_copy": output_on_copy}
