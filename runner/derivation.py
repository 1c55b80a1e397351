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

from pte_devconst.program.kernel_effects import kernel_reads, kernel_writes
from pte_devconst.program.regions import RegionKey, region_key
from pte_devconst.schema import model as m

from .values import ListRef, RuntimeValues

class Derivation:
    """The constant-derived flag of every value of one loaded method (see the module docstring)."""

    def __init__(self, plan: m.ExecutionPlan) -> None:
        values = plan.values or ()
        self.flags: list[bool] = []
        self._views: dict[RegionKey, list[int]] = {}
        for index, value in enumerate(values):
            if isinstance(value, m.Tensor):
                self.flags.append(value.is_constant or value.has_initial_data)
                region = region_key(value)
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
                region = region_key(self._specs[target])
                for alias in self._views.get(region, ()) if region is not None else ():
                    self.flags[alias] = flag

    def kernel(self, rv: RuntimeValues, name: str, kernel: Any, args: tuple[int, ...]) -> None:
        """``kernel`` is unused: what a kernel writes is the one static rule of ``program/kernel_effects.py``."""
        written = kernel_writes(name, args)
        inputs = kernel_reads(name, args, written=written)
        self.set(written, self.reads(rv, inputs), rv)

    def delegate(self, rv: RuntimeValues, inputs: Sequence[int], outputs: Sequence[int]) -> None:
        self.set(outputs, self.reads(rv, inputs), rv)

    def move(self, source: int, target: int) -> None:
        self.set((target,), self.of(source))
