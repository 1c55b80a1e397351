"""Which runtime values are *constant-derived*: computed from the program's constants alone.

The measure behind ``rewrite --fold``: a tensor that crosses to a device on every
call although its bytes can only ever be the same (a constant, or a transpose of
one) is a copy the rewrite could have made once, at load.  While a method runs,
every EValue carries one flag:

* constants (constant segment or .ptd) and planned tensors with initial data are
  constant-derived at load (a moved or folded constant is one of them); so are the
  program's scalar literals (Int, Double, Bool, None, lists of them);
* method inputs are not, and neither is planned memory that nothing has written yet;
* an instruction's results are constant-derived exactly when every value it reads
  is: for a KernelCall, every argument that is not one of its outputs (tensors,
  scalars, and the items of lists); for a DelegateCall, its inputs (the split of
  ``program/dataflow.py``); a MoveCall carries the flag of its source.  Results
  written with a flag also set it on every value that is a static view of the same
  planned region (the emitter's elided views share a region and have no writer).

``CopyEvent.constant_derived`` records the flag of the value each host-to-device
copy read, so ``run`` and ``validate`` report the constant-derived bytes per call.
The flag follows data, not intent: a mutable buffer with initial data stops being
constant-derived once a kernel writes non-constant data into it.
"""

from __future__ import annotations

from typing import Any, Sequence

from pte_devconst.schema import model as m
from pte_devconst.schema.executorch import CLONE_DIM_ORDER, D2H_COPY, EMPTY_DIM_ORDER, ET_COPY_INDEX, H2D_COPY, TO_DIM_ORDER_COPY

from .kernels import TorchKernel
from .values import ListRef, RuntimeValues

# The runner's own kernels (kernels.BUILTIN_KERNELS), by the argument positions they write.
_BUILTIN_WRITES: dict[str, slice | tuple[int, ...]] = {
    H2D_COPY: slice(1, None),
    D2H_COPY: slice(1, None),
    TO_DIM_ORDER_COPY: slice(3, None),
    CLONE_DIM_ORDER: slice(3, None),
    EMPTY_DIM_ORDER: slice(2, None),
    ET_COPY_INDEX: (0,),
}
_COPY_ = ("aten::copy_", "aten::copy_.default")

Region = tuple[int, int, int]


def written_args(name: str, kernel: Any, args: tuple[int, ...]) -> tuple[int, ...]:
    """The arguments a KernelCall writes: its out arguments and return slots (prim ops: the last)."""
    if isinstance(kernel, TorchKernel):
        n = len(kernel.parameters)
        outs = tuple(a for p, a in zip(kernel.parameters, args) if p.is_out)
        return outs + tuple(args[n:])
    if name in _COPY_:
        return tuple(args[:1]) + tuple(args[3:])
    rule = _BUILTIN_WRITES.get(name)
    if isinstance(rule, slice):
        return tuple(args[rule])
    if rule is not None:
        return tuple(args[i] for i in rule if i < len(args))
    return tuple(args[-1:])  # prim ops write their last value


def _region(value: m.EValue) -> Region | None:
    if not isinstance(value, m.Tensor) or value.allocation_info is None:
        return None
    nbytes = value.nbytes
    return (value.allocation_info.memory_id, value.allocation_info.memory_offset, nbytes) if nbytes else None


class Derivation:
    """The constant-derived flag of every value of one loaded method (see the module docstring)."""

    def __init__(self, plan: m.ExecutionPlan) -> None:
        values = plan.values or ()
        self.flags: list[bool] = []
        self._views: dict[Region, list[int]] = {}
        for index, value in enumerate(values):
            if isinstance(value, m.Tensor):
                self.flags.append(value.is_constant or value.has_initial_data)
                region = _region(value)
                if region is not None:
                    self._views.setdefault(region, []).append(index)
            else:
                self.flags.append(True)  # a literal: Int, Double, Bool, None, String or a list of them
        self._specs = values
        for index in plan.inputs or ():
            self.set((index,), False)

    def of(self, index: int) -> bool:
        return 0 <= index < len(self.flags) and self.flags[index]

    def reads(self, rv: RuntimeValues, indices: Sequence[int]) -> bool:
        """Whether every value in ``indices`` (list items included) is constant-derived."""
        for index in indices:
            if not self.of(index):
                return False
            value = rv.values[index] if 0 <= index < len(rv.values) else None
            if isinstance(value, ListRef) and not all(self.of(i) for i in value.items if i >= 0):
                return False
        return True

    def set(self, indices: Sequence[int], flag: bool, rv: RuntimeValues | None = None) -> None:
        """Give the values ``indices`` (their list items, and static views of their regions) the flag."""
        for index in indices:
            if not 0 <= index < len(self.flags):
                continue
            targets = [index]
            value = rv.values[index] if rv is not None else None
            if isinstance(value, ListRef):
                targets += [i for i in value.items if 0 <= i < len(self.flags)]
            for target in targets:
                self.flags[target] = flag
                region = _region(self._specs[target])
                for alias in self._views.get(region, ()) if region is not None else ():
                    self.flags[alias] = flag

    def kernel(self, rv: RuntimeValues, name: str, kernel: Any, args: tuple[int, ...]) -> None:
        written = written_args(name, kernel, args)
        inputs = [a for a in args if a not in written]
        self.set(written, self.reads(rv, inputs), rv)

    def delegate(self, rv: RuntimeValues, inputs: Sequence[int], outputs: Sequence[int]) -> None:
        self.set(outputs, self.reads(rv, inputs), rv)

    def move(self, source: int, target: int) -> None:
        self.set((target,), self.of(source))
