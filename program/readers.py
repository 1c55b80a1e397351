"""Who uses each value of a method: every instruction argument, both ends of a MoveCall, a jump's condition, a
freed value, a tensor list's membership and the method's outputs, in program order.

One definition for every consumer: the analysis judges a constant by its readers (``rewriter/model/analysis.py``),
the self-check proves that nothing reads what a rewrite moved or removed (``rewriter/verify.py``).  A use is a
``Reader``; a KernelCall's every argument is one (what it writes is ``kernel_effects.py``'s question, not this
one's), a DelegateCall's every argument with its delegate's target device (``schema/devices.py``; a spec that
does not parse names the host, with the reason).  Linear in the method's arguments, list items and outputs.
"""

from __future__ import annotations

from collections import defaultdict
from typing import AbstractSet, Iterator, Optional

from pte_devconst.schema import model as m
from pte_devconst.schema.devices import delegate_target_device
from pte_devconst.schema.model import Device
from pte_devconst.util.named_enum import NamedEnum
from pte_devconst.util.record import record

from .kernel_effects import copies_to_device


class ReaderKind(NamedEnum):
    """What reads a value: an instruction (by its type's name in the format), a tensor list, or the method's outputs."""

    KERNEL_CALL = "KernelCall"
    DELEGATE_CALL = "DelegateCall"
    MOVE_CALL = "MoveCall"
    JUMP_FALSE_CALL = "JumpFalseCall"
    FREE_CALL = "FreeCall"
    TENSOR_LIST = "TensorList"
    OUTPUT = "output"


@record
class Reader:
    """One use of a value: an instruction argument, or the method's output list."""

    kind: ReaderKind
    chain: int
    instruction: int  # index in the chain; -1 for a method output or a list item
    arg_pos: int
    name: str = ""  # kernel key or backend id
    delegate_index: int = -1
    device: Optional[Device] = None  # the delegate's target device
    device_error: Optional[str] = None  # the delegate's target_device spec did not parse (so: host)

    @property
    def step(self) -> tuple[int, int]:
        return self.chain, self.instruction

    @property
    def on_device(self) -> bool:
        """A DelegateCall of a delegate on a non-CPU device."""
        return self.kind == ReaderKind.DELEGATE_CALL and self.device is not None and not self.device.is_cpu

    @property
    def delegate_device(self) -> Device:
        """The device a reader that is ``on_device`` reads on (its delegate's target device)."""
        if self.device is None:
            raise ValueError(f"the {self.kind} at instruction {self.instruction} reads on no device")
        return self.device

    @property
    def copies_to_device(self) -> bool:
        """The ``self`` of an ``_h2d_copy.out`` kernel: the value is copied to a device here."""
        return self.kind is ReaderKind.KERNEL_CALL and copies_to_device(self.name, self.arg_pos)

    def describe(self) -> str:
        """``host kernel aten::mul.out at chain 0 instruction 3``, ``method output 1``: the self-check's words."""
        at = f"chain {self.chain} instruction {self.instruction}"
        if self.kind is ReaderKind.KERNEL_CALL:
            return f"host kernel {self.name} at {at}"
        if self.kind is ReaderKind.DELEGATE_CALL:
            return f"delegate {self.delegate_index} at {at}"
        if self.kind is ReaderKind.OUTPUT:
            return f"method output {self.arg_pos}"
        if self.kind is ReaderKind.TENSOR_LIST:
            return f"tensor list {self.name}"
        return f"a {self.kind} at {at}"


def readers_in_order(plan: m.ExecutionPlan, wanted: Optional[AbstractSet[int]] = None
                     ) -> Iterator[tuple[int, Reader]]:
    """(value, its reader) for every use of a value (of ``wanted`` only, when given), in program order: the
    instructions, then the method's outputs, then tensor lists' items."""
    ops = [op.qualified_name for op in plan.operators or ()]
    delegates = [(d.id or "", *delegate_target_device(d)) for d in plan.delegates or ()]

    def watched(value: int) -> bool:
        return wanted is None or value in wanted

    for c, chain in enumerate(plan.chains or ()):
        for k, ins in enumerate(chain.instructions or ()):
            if isinstance(ins, m.KernelCall):
                for pos, arg in enumerate(ins.args or ()):
                    if watched(arg):
                        yield arg, Reader(ReaderKind.KERNEL_CALL, c, k, pos, ops[ins.op_index])
            elif isinstance(ins, m.DelegateCall):
                backend, device, error = delegates[ins.delegate_index]
                for pos, arg in enumerate(ins.args or ()):
                    if watched(arg):
                        yield arg, Reader(ReaderKind.DELEGATE_CALL, c, k, pos, backend, ins.delegate_index, device,
                                          error)
            elif isinstance(ins, m.MoveCall):
                if watched(ins.move_from):
                    yield ins.move_from, Reader(ReaderKind.MOVE_CALL, c, k, 0)
                if watched(ins.move_to):
                    yield ins.move_to, Reader(ReaderKind.MOVE_CALL, c, k, 1)
            elif isinstance(ins, m.JumpFalseCall):
                if watched(ins.cond_value_index):
                    yield ins.cond_value_index, Reader(ReaderKind.JUMP_FALSE_CALL, c, k, 0)
            elif isinstance(ins, m.FreeCall):
                if watched(ins.value_index):
                    yield ins.value_index, Reader(ReaderKind.FREE_CALL, c, k, 0)
    for pos, out in enumerate(plan.outputs or ()):
        if watched(out):
            yield out, Reader(ReaderKind.OUTPUT, -1, -1, pos)
    for index, value in enumerate(plan.values or ()):
        if isinstance(value, (m.TensorList, m.OptionalTensorList)):
            for pos, item in enumerate(value.items or ()):
                if item >= 0 and watched(item):
                    yield item, Reader(ReaderKind.TENSOR_LIST, -1, -1, pos, f"value {index}")


def collect_readers(plan: m.ExecutionPlan) -> dict[int, list[Reader]]:
    """Every use of every value, in program order; list membership counts as a use by the list."""
    readers: dict[int, list[Reader]] = defaultdict(list)
    for value, reader in readers_in_order(plan):
        readers[value].append(reader)
    return readers
