"""Recipes: what a folded value's bytes are (a constant and the table kernels applied to it), and how much a
fold may produce.

A ``FoldStep`` is one kernel of a chain as the program has it (where it runs, what it reads and writes, its
literal arguments); a ``FoldRecipe`` keeps only what the bytes depend on, so equal recipes share one copy of
initial data.  ``compute.py`` turns a recipe into bytes; ``chains.py`` and ``trace.py`` build steps.
"""

from __future__ import annotations

from typing import Optional, Sequence

from pte_devconst.schema import model as m
from pte_devconst.util.record import record

from pte_devconst.program.method_context import Writes
from .kernels import FOLD_KERNELS, LiteralValue, apply_step
from .shapes import ShapeOps, Strided, Unfoldable, source_view

# What one folded value may weigh: a fold writes its value into the file (and device memory), so a chain that
# expands a constant (expand_copy, casts to wider types) may produce at most FOLD_GROWTH times its constant's
# bytes, or FOLD_FLOOR when that is more; past it the chain stays on the host, with the figures. A 4 KiB file
# whose expand_copy turns a constant into 64 GiB otherwise made ``rewrite --fold`` compute 64 GiB.
FOLD_GROWTH = 16
FOLD_FLOOR = 64 << 20


def growth_problem(source: m.Tensor, result: m.Tensor) -> Optional[str]:
    """Why folding ``source`` into ``result`` would produce too much (``FOLD_GROWTH``, ``FOLD_FLOOR``), or None."""
    limit = max(FOLD_FLOOR, FOLD_GROWTH * source.nbytes)
    if result.nbytes <= limit:
        return None
    return (f"the folded value would be {result.nbytes:,} bytes from a constant of {source.nbytes:,} (a fold may "
            f"produce at most {FOLD_GROWTH} times its constant's bytes, or {FOLD_FLOOR >> 20} MiB)")


@record
class FoldStep:
    """One kernel of a chain: where it runs, what it reads and writes, and its literal arguments."""

    chain: int
    instruction: int
    kernel: str  # a FOLD_KERNELS key
    input: int
    output: int
    args: tuple[tuple[str, LiteralValue], ...]
    tensor: m.Tensor  # the output's type, sizes and dim order

    @property
    def short(self) -> str:
        return FOLD_KERNELS[self.kernel].short

    def describe(self) -> str:
        return f"{self.short} at #{self.instruction}"


@record
class FoldRecipe:
    """What a folded value's bytes are: a constant, the kernels applied to it, and the result's layout.

    Equal recipes give equal bytes, so the initial data is stored once for all of them.
    """

    source: m.Tensor  # the constant (its data_buffer_idx or .ptd key says where its bytes are)
    kernels: tuple[tuple[str, tuple[tuple[str, LiteralValue], ...], m.Tensor], ...]  # (kernel, args, output tensor)
    result: m.Tensor  # the folded value's type, sizes and dim order (its bytes are laid out in that order)

    @property
    def nbytes(self) -> int:
        return self.result.nbytes

    def shape(self) -> Strided:
        """The result as a view of the source's elements (``ShapeOps``); raises ``Unfoldable``."""
        x, tensor = source_view(self.source), self.source
        for key, args, out in self.kernels:
            x = apply_step(FOLD_KERNELS[key], ShapeOps, x, dict(args), tensor, out)
            tensor = out
        return x


def layout_of(tensor: m.Tensor) -> m.Tensor:
    """Only what the bytes depend on: type, sizes, dim order (a recipe does not care where a value lives)."""
    return m.Tensor(scalar_type=tensor.scalar_type, sizes=tuple(tensor.sizes or ()),
                    dim_order=tuple(tensor.dim_order or ()))


def recipe_of(source: m.Tensor, steps: Sequence[FoldStep], result: m.Tensor) -> FoldRecipe:
    """The recipe of a chain: the source keeps where its bytes are; kernels and result keep only their layout."""
    where = m.Tensor(scalar_type=source.scalar_type, sizes=tuple(source.sizes or ()),
                     dim_order=tuple(source.dim_order or ()), data_buffer_idx=source.data_buffer_idx,
                     extra_tensor_info=m.ExtraTensorInfo(fully_qualified_name=source.fqn,
                                                         location=m.TensorDataLocation.EXTERNAL)
                     if source.is_external else None)
    return FoldRecipe(where, tuple((s.kernel, s.args, layout_of(s.tensor)) for s in steps), layout_of(result))


def literal_argument(values: Sequence[m.EValue], writes: Writes, index: int) -> LiteralValue:
    """The Python value of a literal argument; raises Unfoldable when run time computes it."""
    if not 0 <= index < len(values) or not writes.literal(index):
        raise Unfoldable(f"its argument (value {index}) is computed at run time")
    value = values[index]
    if isinstance(value, m.Int):
        return value.int_val
    if isinstance(value, m.Bool):
        return value.bool_val
    if isinstance(value, (m.Null, type(None))):
        return None
    if isinstance(value, m.Double):
        return value.double_val
    if isinstance(value, m.IntList):
        return tuple(literal_argument(values, writes, item) for item in value.items or ())
    if isinstance(value, m.BoolList):
        return tuple(value.items or ())
    raise Unfoldable(f"its argument (value {index}) is a {type(value).__name__}")
