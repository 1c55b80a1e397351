"""Shape and view operations of the fold table on ``Strided`` values: torch's view rules, in pure Python.

A chain's value is tracked as a strided view of its constant's elements (``Strided``); ``ShapeOps`` applies
each table kernel's operation to it, so a chain's shapes are checked (and a fold's bytes can be gathered in
one strided read, ``compute.py``) without torch.  ``compute.TorchOps`` has the same operations on tensors.
"""

from __future__ import annotations

import math
import sys
from typing import Optional, Sequence

from pte_devconst.schema import model as m
from pte_devconst.schema.model import dim_order_strides
from pte_devconst.util.record import record

INT64_MAX = sys.maxsize


class Unfoldable(Exception):
    """A kernel call that cannot be folded, and why (one short clause)."""


@record
class Strided:
    """A chain's value as a strided view of the source constant's elements, plus the casts applied to it.

    ``gathered`` is False once a reshape could not be a view (the value was copied): then only a
    computation through every step gives its elements.
    """

    sizes: tuple[int, ...]
    strides: tuple[int, ...]
    offset: int
    scalar_type: int
    casts: tuple[int, ...] = ()
    gathered: bool = True

    @property
    def numel(self) -> int:
        return math.prod(self.sizes)


def _dim(dim: int, rank: int, what: str = "dim") -> int:
    """A dimension in [-rank, rank) normalised; a 0-d tensor takes -1 and 0, as torch's ``maybe_wrap_dim``."""
    bound = max(rank, 1)
    if not -bound <= dim < bound:
        raise Unfoldable(f"{what} {dim} is out of range for rank {rank}")
    return dim + bound if dim < 0 else dim


def _contiguous(sizes: Sequence[int]) -> tuple[int, ...]:
    return dim_order_strides(tuple(sizes), tuple(range(len(sizes))))


def _view_strides(sizes: Sequence[int], strides: Sequence[int], shape: Sequence[int]) -> Optional[tuple[int, ...]]:
    """The strides of ``shape`` as a view of a (sizes, strides) tensor, or None (torch's ``computeStride``)."""
    if math.prod(sizes) == 0 or not sizes:
        return _contiguous(shape) if math.prod(sizes) == 0 or all(s == 1 for s in shape) else None
    new = [0] * len(shape)
    view_d = len(shape) - 1
    chunk_base = strides[-1]
    tensor_numel = view_numel = 1
    for tensor_d in range(len(sizes) - 1, -1, -1):
        tensor_numel *= sizes[tensor_d]
        if tensor_d == 0 or (sizes[tensor_d - 1] != 1 and strides[tensor_d - 1] != tensor_numel * chunk_base):
            while view_d >= 0 and (view_numel < tensor_numel or shape[view_d] == 1):
                new[view_d] = view_numel * chunk_base
                view_numel *= shape[view_d]
                view_d -= 1
            if view_numel != tensor_numel:
                return None
            if tensor_d > 0:
                chunk_base = strides[tensor_d - 1]
                tensor_numel = view_numel = 1
    return tuple(new) if view_d == -1 else None


class ShapeOps:
    """The table's operations on ``Strided`` values: torch's view semantics, in pure Python."""

    @staticmethod
    def permute(x: Strided, dims: Sequence[int]) -> Strided:
        rank = len(x.sizes)
        order = [_dim(d, rank) for d in dims]
        if len(order) != rank or sorted(order) != list(range(rank)):
            raise Unfoldable(f"dims {list(dims)} are not a permutation of {rank} dimensions")
        return m.replace(x, sizes=tuple(x.sizes[d] for d in order), strides=tuple(x.strides[d] for d in order))

    @classmethod
    def transpose(cls, x: Strided, a: int, b: int) -> Strided:
        rank = len(x.sizes)
        a, b = _dim(a, rank), _dim(b, rank)
        if rank == 0:
            return x
        order = list(range(rank))
        order[a], order[b] = order[b], order[a]
        return cls.permute(x, order)

    @classmethod
    def t(cls, x: Strided) -> Strided:
        if len(x.sizes) > 2:
            raise Unfoldable(f"t() needs at most 2 dimensions, not {len(x.sizes)}")
        return cls.transpose(x, 0, 1) if len(x.sizes) == 2 else x

    @staticmethod
    def reshape(x: Strided, shape: Sequence[int]) -> Strided:
        shape = list(shape)
        if shape.count(-1) > 1 or any(s < -1 for s in shape):
            raise Unfoldable(f"size {shape} is not a valid shape")
        if -1 in shape:
            known = math.prod(s for s in shape if s != -1)
            if known == 0 or x.numel % known:
                raise Unfoldable(f"size {shape} does not fit {x.numel} elements")
            shape[shape.index(-1)] = x.numel // known
        if math.prod(shape) != x.numel:
            raise Unfoldable(f"size {shape} does not fit {x.numel} elements")
        strides = _view_strides(x.sizes, x.strides, shape) if x.gathered else None
        if strides is None:  # the runtime copies: the value is no longer a view of the source
            return m.replace(x, sizes=tuple(shape), strides=_contiguous(shape), offset=0, gathered=False)
        return m.replace(x, sizes=tuple(shape), strides=strides)

    @staticmethod
    def expand(x: Strided, shape: Sequence[int]) -> Strided:
        rank = len(x.sizes)
        if len(shape) < rank:
            raise Unfoldable(f"expand to {list(shape)} has fewer dimensions than {rank}")
        lead = len(shape) - rank
        sizes, strides = [], []
        for i, target in enumerate(shape):
            if i < lead:
                if target < 0:
                    raise Unfoldable(f"expand to {list(shape)}: a new dimension cannot be {target}")
                sizes.append(target)
                strides.append(0)
                continue
            size, stride = x.sizes[i - lead], x.strides[i - lead]
            if target == -1 or target == size:
                sizes.append(size)
                strides.append(stride)
            elif size == 1 and target >= 0:
                sizes.append(target)
                strides.append(0)
            else:
                raise Unfoldable(f"cannot expand size {size} to {target}")
        return m.replace(x, sizes=tuple(sizes), strides=tuple(strides))

    @staticmethod
    def squeeze(x: Strided, dims: Optional[Sequence[int]]) -> Strided:
        rank = len(x.sizes)
        if rank == 0:
            return x
        chosen = range(rank) if dims is None else [_dim(d, rank) for d in dims]
        if len(set(chosen)) != len(chosen):
            raise Unfoldable(f"dims {list(dims or ())} repeat a dimension")
        drop = {d for d in chosen if x.sizes[d] == 1}
        keep = [d for d in range(rank) if d not in drop]
        return m.replace(x, sizes=tuple(x.sizes[d] for d in keep), strides=tuple(x.strides[d] for d in keep))

    @staticmethod
    def unsqueeze(x: Strided, dim: int) -> Strided:
        rank = len(x.sizes)
        if not -(rank + 1) <= dim <= rank:
            raise Unfoldable(f"dim {dim} is out of range for unsqueezing rank {rank}")
        dim = dim + rank + 1 if dim < 0 else dim
        stride = 1 if dim >= rank else x.sizes[dim] * x.strides[dim]
        return m.replace(x, sizes=x.sizes[:dim] + (1,) + x.sizes[dim:],
                         strides=x.strides[:dim] + (stride,) + x.strides[dim:])

    @staticmethod
    def select(x: Strided, dim: int, index: int) -> Strided:
        rank = len(x.sizes)
        if rank == 0:
            raise Unfoldable("select() of a 0-d tensor")
        dim = _dim(dim, rank)
        size = x.sizes[dim]
        if not -size <= index < size:
            raise Unfoldable(f"index {index} is out of range for size {size}")
        index = index + size if index < 0 else index
        return m.replace(x, sizes=x.sizes[:dim] + x.sizes[dim + 1:], strides=x.strides[:dim] + x.strides[dim + 1:],
                         offset=x.offset + index * x.strides[dim])

    @staticmethod
    def slice(x: Strided, dim: int, start: Optional[int], end: Optional[int], step: int) -> Strided:
        rank = len(x.sizes)
        if rank == 0:
            raise Unfoldable("slice() of a 0-d tensor")
        if step <= 0:
            raise Unfoldable(f"slice step {step} is not positive")
        dim = _dim(dim, rank)
        size = x.sizes[dim]
        start = 0 if start is None else start
        end = INT64_MAX if end is None else end
        start = min(max(start + size if start < 0 else start, 0), size)
        end = min(max(end + size if end < 0 else end, 0), size)
        length = max(0, (end - start + step - 1) // step)
        sizes = x.sizes[:dim] + (length,) + x.sizes[dim + 1:]
        strides = x.strides[:dim] + (x.strides[dim] * step,) + x.strides[dim + 1:]
        return m.replace(x, sizes=sizes, strides=strides, offset=x.offset + (start * x.strides[dim] if length else 0))

    @staticmethod
    def cast(x: Strided, scalar_type: int) -> Strided:
        if scalar_type == x.scalar_type:
            return x
        return m.replace(x, scalar_type=scalar_type, casts=x.casts + (scalar_type,))


def source_view(tensor: m.Tensor) -> Strided:
    """A constant as a ``Strided`` view of its own bytes (its dim order gives the strides)."""
    sizes = tuple(tensor.sizes or ())
    return Strided(sizes, dim_order_strides(sizes, tuple(tensor.dim_order or ())), 0, tensor.scalar_type)
