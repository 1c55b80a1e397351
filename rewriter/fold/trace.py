"""Tracing a value back to its constant from a program alone: how the self-check and ``diff`` recognise a fold.

``Tracer.trace`` follows a value back through its single writers (table kernels with literal arguments, and
at most one ``_h2d_copy``) to a constant, and checks the shapes the kernels compute: the recipe of a folded
value, re-derived from the input program without the plan (``verify.py``), or the fold a rewritten program
has made (``compare/diff.py``).  Who writes each value is ``method_context.Writes`` over ``program/effects.py``.
"""

from __future__ import annotations

from typing import Optional

from pte_devconst.program.effects import MethodEffects
from pte_devconst.program.kernel_effects import copy_slots
from pte_devconst.schema import model as m
from pte_devconst.util.record import record

from pte_devconst.program.method_context import Writes, instruction_at, tensor_at
from .kernels import FOLD_KERNELS, apply_step
from .recipes import FoldStep, literal_argument
from .shapes import ShapeOps, Unfoldable, source_view


@record
class Traced:
    """How a program computes a value from one constant with table kernels (``trace``)."""

    source: int  # the constant
    steps: tuple[FoldStep, ...]  # from the constant, in order
    copied_from: Optional[int] = None  # the value was the destination of an _h2d_copy of this one


class Tracer:
    """Follows a method's values back through their single writers (see ``trace``); built once per method."""

    def __init__(self, plan: m.ExecutionPlan) -> None:
        self.plan = plan
        self.values = plan.values or ()
        self.ops = [op.qualified_name for op in plan.operators or ()]
        self.writes = Writes(MethodEffects(plan))

    def trace(self, value: int, through_copy: bool = True) -> Optional[Traced]:
        """The constant and kernels that compute ``value``, or None when anything else takes part.

        Each value on the way must have exactly one writer: a table kernel reading the previous value as
        its ``self`` with literal arguments, or (only for ``value`` itself, with ``through_copy``) an
        ``_h2d_copy.out`` from it.  The shapes must be what the kernels compute.
        """
        steps: list[FoldStep] = []
        copied_from = None
        current = value
        for _ in range(len(self.values) + 1):
            tensor = self.values[current] if 0 <= current < len(self.values) else None
            if not isinstance(tensor, m.Tensor):
                return None
            if tensor.is_constant:
                steps.reverse()
                return self._checked(Traced(current, tuple(steps), copied_from))
            writers = self.writes.steps.get(current, [])
            if len(writers) != 1 or current in self.writes.inputs:
                return None
            c, k = writers[0].chain, writers[0].instruction
            ins = instruction_at(self.plan, c, k)
            if not isinstance(ins, m.KernelCall):
                return None
            args = tuple(ins.args or ())
            name = self.ops[ins.op_index]
            slots = copy_slots(name, args)
            if slots is not None and slots.to_device and through_copy and current == value and len(args) == 3 \
                    and slots.out == value:
                copied_from = current = slots.source
                continue
            kernel = FOLD_KERNELS.get(name)
            parts = kernel.split(args) if kernel is not None else None
            if kernel is None or parts is None or parts.out != current or parts.ret != current:
                return None
            try:
                literal = kernel.arguments([literal_argument(self.values, self.writes, i) for i in parts.params])
            except Unfoldable:
                return None
            steps.append(FoldStep(c, k, name, parts.source, current, literal, tensor))
            current = parts.source
        return None

    def _checked(self, traced: Traced) -> Optional[Traced]:
        tensor = tensor_at(self.values, traced.source)
        x = source_view(tensor)
        try:
            for step in traced.steps:
                x = apply_step(FOLD_KERNELS[step.kernel], ShapeOps, x, dict(step.args), tensor, step.tensor)
                if tuple(x.sizes) != tuple(step.tensor.sizes or ()):
                    return None
                tensor = step.tensor
        except Unfoldable:
            return None
        return traced
