"""Folding: constants that the host transposes, views or casts before a device delegate reads them.

``aten.linear`` lowers to a ``permute_copy`` of the weight and a matmul.  A
partitioner that takes the matmul onto the device leaves the ``permute_copy`` on
the host, so the plain rule (a constant read only by device delegates) never
applies: the delegate reads the kernel's result, computed and copied again on
every call.  Folding computes such results once, offline, exactly as the
runtime's portable kernels would, and stores them as device-resident initial
data (the encoding of a moved constant).

**A foldable chain** starts at a constant and goes through kernels of
``FOLD_KERNELS`` (pure data movement or casts, one tensor input each), each
reading the previous value as its ``self``, with literal arguments (values no
instruction writes), static shapes, and an output that nothing else writes.  It
ends in a value that delegates on one device D read, directly (legacy style) or
through ``_h2d_copy.out`` kernels whose copies only such delegates read (copy
style).  Values of a chain that something else also reads (a host kernel, a
method output, a static view of their memory) stay computed on the host for that
reader; the device gets its own folded value.  With ``--duplicate-shared`` a chain
may have no kernel at all: a constant read by the host and by device delegates,
whose device readers get their own device-resident copy.

All chains of one constant form a tree (``FoldNode``: every kernel has one tensor
input and every value one writer); ``MethodFolds`` holds the trees of a method and
every candidate chain (``FoldChain``).  Which kernels a rewrite removes depends
on which chains it folds (``--device``, ``--min-bytes``): ``removed_steps``.

Shapes and argument checks here are pure Python (``ShapeOps``, mirroring torch's
and the portable kernels' rules); the bytes are computed by ``fold_compute.py``
(torch), from the same table.  Nothing here imports torch.
"""

from __future__ import annotations

import math
import sys
from collections import defaultdict
from dataclasses import field
from typing import Any, Callable, Mapping, Optional, Sequence

from pte_devconst.schema import model as m
from pte_devconst.program.effects import MethodEffects
from pte_devconst.program.memory import view_reads
from pte_devconst.program.executorch import CLONE_DIM_ORDER, H2D_COPY, TO_DIM_ORDER_COPY
from pte_devconst.schema.model import CPU, Device, dim_order_strides
from pte_devconst.util.record import record

from .analysis import (DeviceCopy, Reader, ReaderKind, RewiredDelegateArg, _external_problem, _follow_copy, _host_reason,
                       _MethodContext, _Reasons)

INT64_MAX = sys.maxsize
# Kernels per chain: exported programs use a few (a transpose, a view, a cast); a hostile one could chain
# thousands, each with a device reader, and every chain's recipe repeats its prefix.
MAX_CHAIN = 64
# What one folded value may weigh: a fold writes its value into the file (and device memory), so a chain that
# expands a constant (expand_copy, casts to wider types) may produce at most FOLD_GROWTH times its constant's
# bytes, or FOLD_FLOOR when that is more; past it the chain stays on the host, with the figures. A 4 KiB file
# whose expand_copy turns a constant into 64 GiB otherwise made ``rewrite --fold`` compute 64 GiB.
FOLD_GROWTH = 16
FOLD_FLOOR = 64 << 20
# ExecuTorch's MemoryFormat (runtime/core/portable_type/tensor_options.h): the portable clone and _to_copy
# kernels accept none or Contiguous.
CONTIGUOUS_FORMAT = 0
# The types the portable cast kernels switch over (ET_SWITCH_REALHBBF16_TYPES).
CASTABLE = frozenset({m.ScalarType.BYTE, m.ScalarType.CHAR, m.ScalarType.SHORT, m.ScalarType.INT, m.ScalarType.LONG,
                      m.ScalarType.HALF, m.ScalarType.FLOAT, m.ScalarType.DOUBLE, m.ScalarType.BOOL,
                      m.ScalarType.BFLOAT16})
FLOATING = frozenset({m.ScalarType.HALF, m.ScalarType.FLOAT, m.ScalarType.DOUBLE, m.ScalarType.BFLOAT16})
INTEGRAL = frozenset({m.ScalarType.BYTE, m.ScalarType.CHAR, m.ScalarType.SHORT, m.ScalarType.INT,
                      m.ScalarType.LONG})


def growth_problem(source: m.Tensor, result: m.Tensor) -> Optional[str]:
    """Why folding ``source`` into ``result`` would produce too much (``FOLD_GROWTH``, ``FOLD_FLOOR``), or None."""
    limit = max(FOLD_FLOOR, FOLD_GROWTH * source.nbytes)
    if result.nbytes <= limit:
        return None
    return (f"the folded value would be {result.nbytes:,} bytes from a constant of {source.nbytes:,} (a fold may "
            f"produce at most {FOLD_GROWTH} times its constant's bytes, or {FOLD_FLOOR >> 20} MiB)")


class Unfoldable(Exception):
    """A kernel call that cannot be folded, and why (one short clause)."""


# --- the operations, on shapes --------------------------------------------------------------------


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
        return m.replace(x, sizes=x.sizes[:dim] + (1,) + x.sizes[dim:], strides=x.strides[:dim] + (stride,) + x.strides[dim:])

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
        return x if scalar_type == x.scalar_type else m.replace(x, scalar_type=scalar_type, casts=x.casts + (scalar_type,))


# --- the table ----------------------------------------------------------------------------------

Apply = Callable[[Any, Any, Mapping[str, Any], m.Tensor, m.Tensor], Any]  # (ops, value, args, input, output)


@record
class FoldKernel:
    """One foldable kernel: its key, the schema arguments between ``self`` and ``out``, and what it does.

    ``kinds`` gives each argument's type (``int``, ``ints``, ``bool``, ``int?``, ``ints?``: ``?`` allows
    None), checked before anything uses them.  ``apply(ops, x, args, input, output)`` applies the kernel to
    ``x`` with ``ops`` (``ShapeOps`` here, torch in ``fold_compute.py``) and raises ``Unfoldable`` where the
    portable kernel would fail.  ``logical``: the kernel copies element by element through both tensors'
    dim orders (the dim-order ops); every other kernel reads and writes both as contiguous buffers, so both
    must have the default dim order to be folded.  ``casts``: it may change the dtype.
    """

    key: str
    params: tuple[str, ...]
    kinds: tuple[str, ...]
    apply: Apply
    logical: bool = False
    casts: bool = False

    @property
    def short(self) -> str:
        """``permute_copy`` for ``aten::permute_copy.out``."""
        return self.key.split("::")[-1].split(".")[0]

    def arguments(self, literal: Sequence[Any]) -> tuple[tuple[str, Any], ...]:
        """The literal arguments by name, each of its kind; raises Unfoldable for one of another kind."""
        for name, kind, value in zip(self.params, self.kinds, literal):
            if not _of_kind(value, kind):
                raise Unfoldable(f"its argument {name} is {value!r}, not {kind.replace('?', ' or None')}")
        return tuple(zip(self.params, literal))


def _of_kind(value: Any, kind: str) -> bool:
    if kind.endswith("?"):
        if value is None:
            return True
        kind = kind[:-1]
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, tuple) and all(isinstance(v, int) and not isinstance(v, bool) for v in value)


def _require(condition: bool, why: str) -> None:
    if not condition:
        raise Unfoldable(why)


def _memory_format(args: Mapping[str, Any]) -> None:
    _require(args.get("memory_format") in (None, CONTIGUOUS_FORMAT),
             f"memory_format {args.get('memory_format')} (the portable kernel takes only contiguous)")


def _blocking(args: Mapping[str, Any]) -> None:
    _require(args.get("non_blocking") in (False, None), "non_blocking=True (the portable kernel refuses it)")


def _dim_order_arg(args: Mapping[str, Any], source: m.Tensor, out: m.Tensor) -> None:
    """check__to_dim_order_copy_args: the out's dim order is the argument's (contiguous or channels last) or the input's."""
    _blocking(args)
    order = args.get("dim_order")
    want = tuple(source.dim_order or ()) if order is None else tuple(order)
    _require(tuple(out.dim_order or ()) == want, f"out's dim order {list(out.dim_order or ())} is not {list(want)}")
    if order is not None:
        rank = len(want)
        channels_last = rank in (4, 5) and want == (0,) + tuple(range(2, rank)) + (1,)
        _require(want == tuple(range(rank)) or channels_last, f"dim_order {list(want)} is neither contiguous nor "
                 "channels last")


def _cast(ops: Any, x: Any, out: m.Tensor) -> Any:
    return ops.cast(x, out.scalar_type)


def _clone_dim_order(ops: Any, x: Any, args: Mapping[str, Any], source: m.Tensor, out: m.Tensor) -> Any:
    _dim_order_arg(args, source, out)
    return x


def _to_dim_order(ops: Any, x: Any, args: Mapping[str, Any], source: m.Tensor, out: m.Tensor) -> Any:
    _dim_order_arg(args, source, out)
    return _cast(ops, x, out)


def _expand(ops: Any, x: Any, args: Mapping[str, Any], source: m.Tensor, out: m.Tensor) -> Any:
    _require(not args.get("implicit"), "implicit=True (the portable kernel refuses it)")
    return ops.expand(x, args["size"])


def _clone(ops: Any, x: Any, args: Mapping[str, Any], source: m.Tensor, out: m.Tensor) -> Any:
    _memory_format(args)
    return x


def _to_copy(ops: Any, x: Any, args: Mapping[str, Any], source: m.Tensor, out: m.Tensor) -> Any:
    _blocking(args)
    _memory_format(args)
    return _cast(ops, x, out)


def _identity(ops: Any, x: Any, args: Mapping[str, Any], source: m.Tensor, out: m.Tensor) -> Any:
    return x


# The foldable kernels, by kernel key.  To add one: its schema arguments between self and out, their kinds, and
# what it does through ``ops`` (add the operation to ShapeOps and fold_compute.TorchOps if it is new); then a case in
# tests/test_fold_exact.py runs it on the real runtime.
FOLD_KERNELS: dict[str, FoldKernel] = {k.key: k for k in (
    FoldKernel("aten::permute_copy.out", ("dims",), ("ints",), lambda ops, x, a, s, o: ops.permute(x, a["dims"])),
    FoldKernel("aten::t_copy.out", (), (), lambda ops, x, a, s, o: ops.t(x)),
    FoldKernel("aten::transpose_copy.int_out", ("dim0", "dim1"), ("int", "int"),
               lambda ops, x, a, s, o: ops.transpose(x, a["dim0"], a["dim1"])),
    FoldKernel("aten::view_copy.out", ("size",), ("ints",), lambda ops, x, a, s, o: ops.reshape(x, a["size"])),
    FoldKernel("aten::expand_copy.out", ("size", "implicit"), ("ints", "bool"), _expand),
    FoldKernel("aten::squeeze_copy.dim_out", ("dim",), ("int",), lambda ops, x, a, s, o: ops.squeeze(x, [a["dim"]])),
    FoldKernel("aten::squeeze_copy.dims_out", ("dim",), ("ints",), lambda ops, x, a, s, o: ops.squeeze(x, a["dim"])),
    FoldKernel("aten::unsqueeze_copy.out", ("dim",), ("int",), lambda ops, x, a, s, o: ops.unsqueeze(x, a["dim"])),
    FoldKernel("aten::clone.out", ("memory_format",), ("int?",), _clone),
    FoldKernel("aten::alias_copy.out", (), (), _identity),
    FoldKernel("aten::slice_copy.Tensor_out", ("dim", "start", "end", "step"), ("int", "int?", "int?", "int"),
               lambda ops, x, a, s, o: ops.slice(x, a["dim"], a["start"], a["end"], a["step"])),
    FoldKernel("aten::select_copy.int_out", ("dim", "index"), ("int", "int"),
               lambda ops, x, a, s, o: ops.select(x, a["dim"], a["index"])),
    FoldKernel("aten::_to_copy.out", ("non_blocking", "memory_format"), ("bool", "int?"), _to_copy, casts=True),
    FoldKernel(TO_DIM_ORDER_COPY, ("non_blocking", "dim_order"), ("bool", "ints?"),
               _to_dim_order, logical=True, casts=True),
    FoldKernel(CLONE_DIM_ORDER, ("non_blocking", "dim_order"), ("bool", "ints?"),
               _clone_dim_order, logical=True),
)}


def source_view(tensor: m.Tensor) -> Strided:
    """A constant as a ``Strided`` view of its own bytes (its dim order gives the strides)."""
    sizes = tuple(tensor.sizes or ())
    return Strided(sizes, dim_order_strides(sizes, tuple(tensor.dim_order or ())), 0, tensor.scalar_type)


def apply_step(kernel: FoldKernel, ops: Any, x: Any, args: Mapping[str, Any], source: m.Tensor, out: m.Tensor) -> Any:
    """One kernel on ``x``, with the checks every table kernel shares (dtype, dim order), then its own."""
    if not kernel.casts:
        _require(source.scalar_type == out.scalar_type, "its input and output types differ")
    elif out.scalar_type != source.scalar_type:
        _require(source.scalar_type in CASTABLE and out.scalar_type in CASTABLE,
                 f"a cast between scalar types {source.scalar_type} and {out.scalar_type}")
    if not kernel.logical:
        default = all(tuple(t.dim_order or ()) == tuple(range(len(t.sizes or ()))) for t in (source, out))
        _require(default, "a non-default dim order (the portable kernel copies it as a contiguous buffer)")
    return kernel.apply(ops, x, args, source, out)


# --- recipes: what a folded value's bytes are --------------------------------------------------


@record
class FoldStep:
    """One kernel of a chain: where it runs, what it reads and writes, and its literal arguments."""

    chain: int
    instruction: int
    kernel: str  # a FOLD_KERNELS key
    input: int
    output: int
    args: tuple[tuple[str, Any], ...]
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
    kernels: tuple[tuple[str, tuple[tuple[str, Any], ...], m.Tensor], ...]  # (kernel, args, output tensor)
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


# --- finding chains --------------------------------------------------------------------------------


@record
class FoldNode:
    """A value of a fold tree: the constant at its root, or the output of a table kernel reading its parent."""

    value: int
    step: Optional[FoldStep]  # the kernel computing it (None at the root)
    parent: int  # -1 at the root
    children: tuple[int, ...]
    host: tuple[str, ...]  # its readers that stay on the host, e.g. "read by host kernel aten::embedding.out at #12"
    device: Optional[Device]  # the one device its device readers are on
    copies: tuple[DeviceCopy, ...]  # its _h2d_copy kernels whose copies only delegates on `device` read
    delegate_args: tuple[RewiredDelegateArg, ...]  # every delegate argument that reads it or its copies
    device_reads: int  # per call: its copies, or device delegate reads (legacy style)
    delegates: tuple[int, ...] = ()  # the delegates reading it (by index)


@record
class FoldChain:
    """A candidate: a device-read value the host computes from one constant with table kernels only."""

    method: str
    plan_index: int
    source: int  # the constant's value index
    source_tensor: m.Tensor
    steps: tuple[FoldStep, ...]  # in order from the constant; empty: a device copy of a constant also read on the host
    result: int  # the value the last step writes (the constant itself without steps)
    result_tensor: m.Tensor
    device: Device
    copies: tuple[DeviceCopy, ...]
    delegate_args: tuple[RewiredDelegateArg, ...]
    copies_per_call: int
    delegates: tuple[int, ...]
    stays: tuple[str, ...] = ()  # what keeps the constant (or a step) on the host: "aten::embedding.out at #12"
    problem: Optional[str] = None  # why it cannot fold now (its .ptd is missing, ...)

    @property
    def duplicate(self) -> bool:
        """No kernel: the device readers of a constant also read on the host get their own copy."""
        return not self.steps

    @property
    def nbytes(self) -> int:
        return self.result_tensor.nbytes

    @property
    def bytes_per_call(self) -> int:
        return self.nbytes * self.copies_per_call

    @property
    def kernels(self) -> str:
        """``permute_copy at #7, view_copy at #9``."""
        return ", ".join(step.describe() for step in self.steps)

    @property
    def readers(self) -> str:
        """``delegate 0 on cuda:0`` or ``delegates 0, 3 on cuda:0``."""
        names = ", ".join(map(str, self.delegates))
        return f"delegate{'s' if len(self.delegates) > 1 else ''} {names} on {self.device}"

    @property
    def recipe(self) -> FoldRecipe:
        return recipe_of(self.source_tensor, self.steps, self.result_tensor)

    @property
    def casts_float_to_int(self) -> bool:
        """Whether a step casts floating point to an integer type (its result depends on the data)."""
        current = self.source_tensor.scalar_type
        for step in self.steps:
            if current in FLOATING and step.tensor.scalar_type in INTEGRAL:
                return True
            current = step.tensor.scalar_type
        return False

    def describe(self) -> str:
        """``permute_copy at #4, then read by delegate 0 on cuda:0`` (and what the host keeps)."""
        text = f"{self.kernels}, then read by {self.readers}"
        return text + (f" (the host keeps what it still reads: {self.stays[0]})" if self.stays else "")

    def verdict(self) -> str:
        """``foldable: permute_copy at #4, then read by delegate 0 on cuda:0``."""
        if self.duplicate:
            return f"its device readers ({self.readers}) could get their own copy with --duplicate-shared"
        return f"foldable: {self.describe()}"


@record
class MethodFolds:
    """The fold trees of one method (every value, by index) and its candidate chains."""

    nodes: Mapping[int, FoldNode]
    chains: tuple[FoldChain, ...]
    by_source: Mapping[int, tuple[FoldChain, ...]] = field(default_factory=dict)  # the chains of each constant

    @classmethod
    def of(cls, nodes: Mapping[int, FoldNode], chains: tuple[FoldChain, ...]) -> "MethodFolds":
        by_source: dict[int, list[FoldChain]] = defaultdict(list)
        for chain in chains:
            by_source[chain.source].append(chain)
        return cls(nodes, chains, {source: tuple(found) for source, found in by_source.items()})

    def of_constant(self, value: int) -> tuple[FoldChain, ...]:
        return self.by_source.get(value, ())

    @property
    def foldable(self) -> tuple[FoldChain, ...]:
        """The chains ``--fold`` folds (with kernels, and nothing that stops them)."""
        return tuple(c for c in self.chains if c.steps and c.problem is None)

    def verdict(self, constant: Any) -> Optional[str]:
        """The verdict ``inspect`` shows for a constant that does not move by itself but folds (or could be
        duplicated): ``foldable: permute_copy at #4, then read by delegate 0 on cuda:0``; None otherwise."""
        if constant.eligible or constant.unknown:
            return None
        chains = self.of_constant(constant.value)
        folding = [c for c in chains if c.steps and c.problem is None]
        if folding:
            more = f"; and {len(folding) - 2} more chains" if len(folding) > 2 else ""
            return "foldable: " + "; ".join(c.describe() for c in folding[:2]) + more
        shared = [c for c in chains if c.duplicate and c.problem is None]
        if shared:
            return f"{constant.verdict}; {shared[0].verdict()}"
        return None


class _Writes:
    """Who writes each value (the instructions that may write it, and the method inputs), and what each
    instruction writes: an index over ``program/effects.py``, the one rule of what an instruction writes."""

    def __init__(self, plan: m.ExecutionPlan, ops: Sequence[str], effects: Optional[MethodEffects] = None) -> None:
        del ops  # the effects name the kernels themselves
        effects = effects if effects is not None else MethodEffects(plan)
        self.steps: dict[int, list[tuple[int, int]]] = defaultdict(list)
        self.by_step: dict[tuple[int, int], tuple[int, ...]] = {}
        self.inputs = effects.inputs
        self.delegate_outputs: set[tuple[int, int, int]] = {
            (s.chain, s.instruction, pos) for s in effects.sites for pos in range(s.n_inputs, len(s.args))}
        for step, written in zip(effects.steps, effects.writes):
            key = (step.chain, step.instruction)
            self.by_step[key] = written
            for value in written:
                self.steps[value].append(key)

    def only_by(self, value: int, step: tuple[int, int]) -> bool:
        return value not in self.inputs and self.steps.get(value, []) == [step]

    def literal(self, value: int) -> bool:
        return value not in self.inputs and not self.steps.get(value)


def _items(values: Sequence[m.EValue], index: int) -> tuple[int, ...]:
    value = values[index] if 0 <= index < len(values) else None
    if isinstance(value, (m.TensorList, m.OptionalTensorList)):
        return tuple(i for i in value.items or () if i >= 0)
    return ()


def _literal(values: Sequence[m.EValue], writes: _Writes, index: int) -> Any:
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
        return tuple(_literal(values, writes, item) for item in value.items or ())
    if isinstance(value, m.BoolList):
        return tuple(value.items or ())
    raise Unfoldable(f"its argument (value {index}) is a {type(value).__name__}")


class _Finder:
    """Builds the fold trees of one method from its readers (see the module docstring)."""

    def __init__(self, ctx: _MethodContext, external_ok: Callable[[m.Tensor], Optional[str]]) -> None:
        self.ctx = ctx
        self.plan = ctx.plan
        self.values = ctx.plan.values or ()
        self.ops = [op.qualified_name for op in ctx.plan.operators or ()]
        self.effects = ctx.effects()
        self.writes = _Writes(ctx.plan, self.ops, self.effects)
        self.external_ok = external_ok
        self.nodes: dict[int, FoldNode] = {}
        self._views: Optional[dict[int, list[tuple[int, tuple[int, int]]]]] = None

    # values and arguments

    def _edge(self, reader: Reader, value: int, tensor: m.Tensor) -> FoldStep:
        """The kernel ``reader`` as a step of a chain from ``value``; raises Unfoldable with the reason."""
        kernel = FOLD_KERNELS[reader.name]
        ins = (self.plan.chains or ())[reader.chain].instructions[reader.instruction]
        args = tuple(ins.args or ())
        if len(args) != len(kernel.params) + 3 or value in args[1:]:
            raise Unfoldable(f"it has arguments {list(args)}, not (self, {', '.join(kernel.params + ('out',))}, "
                             "return)")
        out, ret = args[-2], args[-1]
        output = self.values[out] if 0 <= out < len(self.values) else None
        if ret != out or not isinstance(output, m.Tensor) or output.allocation_info is None \
                or output.has_initial_data:
            raise Unfoldable("its output is not a planned tensor it writes alone")
        if output.shape_dynamism != m.TensorShapeDynamism.STATIC or tensor.shape_dynamism != m.TensorShapeDynamism.STATIC:
            raise Unfoldable("its shapes are dynamic")
        if not self.writes.only_by(out, reader.step):
            raise Unfoldable(f"its output (value {out}) is written elsewhere too")
        literal = kernel.arguments([_literal(self.values, self.writes, index) for index in args[1:-2]])
        return FoldStep(reader.chain, reader.instruction, kernel.key, value, out, literal, output)

    def _check_shape(self, step: FoldStep, shape: Strided) -> Strided:
        kernel = FOLD_KERNELS[step.kernel]
        source = self.values[step.input]
        result = apply_step(kernel, ShapeOps, shape, dict(step.args), source, step.tensor)
        if tuple(result.sizes) != tuple(step.tensor.sizes or ()):
            raise Unfoldable(f"it computes shape {list(result.sizes)}, but its output is "
                             f"{list(step.tensor.sizes or ())}")
        return result

    # the tree

    def root(self, index: int, tensor: m.Tensor) -> None:
        """The tree of constant ``index``: each value's readers sorted, table kernels followed (no recursion)."""
        stack: list[tuple[int, m.Tensor, Optional[FoldStep], int, Strided, int]] = [
            (index, tensor, None, -1, source_view(tensor), 0)]
        while stack:
            value, value_tensor, step, parent, shape, depth = stack.pop()
            children = self._visit(value, value_tensor, step, parent, shape, depth)
            stack.extend((child.output, child.tensor, child, value, child_shape, depth + 1)
                         for child, child_shape in reversed(children))

    def _visit(self, index: int, tensor: m.Tensor, step: Optional[FoldStep], parent: int,
               shape: Strided, depth: int = 0) -> list[tuple[FoldStep, Strided]]:
        """Record the node of ``index``; returns the kernels that continue a chain from it."""
        ctx = self.ctx
        readers = ctx.readers.get(index, [])
        ctx.budget.spend(len(readers) + 1)
        host = _Reasons()
        devices: set[Device] = set()
        copies: list[DeviceCopy] = []
        args: list[RewiredDelegateArg] = []
        delegates: list[int] = []
        children: list[tuple[FoldStep, Strided]] = []
        own = (step.chain, step.instruction) if step is not None else None
        for reader in readers:
            if reader.step == own:
                continue  # the kernel computing it names it as its out and return slots
            if _table_kernel(reader):
                try:
                    if depth >= MAX_CHAIN:
                        raise Unfoldable(f"the chain would be longer than {MAX_CHAIN} kernels")
                    child = self._edge(reader, index, tensor)
                    children.append((child, self._check_shape(child, shape)))
                except Unfoldable as why:
                    host.add(f"read by host kernel {reader.name} (not foldable: {why})",
                             f"read by host kernel {reader.name} at #{reader.instruction} (not foldable: {why})")
            elif reader.on_device and (reader.chain, reader.instruction, reader.arg_pos) not in self.writes.delegate_outputs:
                devices.add(reader.device)  # type: ignore[arg-type]
                args.append(RewiredDelegateArg(reader.chain, reader.instruction, reader.arg_pos, index))
                delegates.append(reader.delegate_index)
            elif reader.copies_to_device:
                found = _Reasons()
                before = len(args)
                _follow_copy(ctx, index, reader, found, devices, copies, args)
                if found:
                    for short, detail in zip(*found.result()):
                        host.add(short, detail)
                else:
                    delegates += [self._delegate(a) for a in args[before:]]
            elif ctx.host_placement and reader.kind in (ReaderKind.KERNEL_CALL, ReaderKind.DELEGATE_CALL):
                devices.add(CPU)
                delegates.append(reader.delegate_index)
            else:
                short, detail = _host_reason(reader)
                host.add(short, detail.replace("at instruction ", "at #"))
        for alias in self._aliases(index):
            host.add("read through a static view of its memory", f"read through value {alias}, a view of its memory")
        if len(devices) > 1:
            text = f"read by delegates on different devices ({', '.join(str(d) for d in sorted(devices))})"
            host.add(text, text)
        device = next(iter(devices)) if len(devices) == 1 else None
        if device is not None and device.is_cpu and not ctx.host_placement:
            device = None
        if device is None:
            copies, args, delegates = [], [], []
        reads = 0 if device is None or device.is_cpu else len(copies) if copies else len(args)
        self.nodes[index] = FoldNode(index, step, parent, tuple(c.output for c, _ in children), host.result()[0],
                                     device, tuple(copies), tuple(args), reads,
                                     tuple(dict.fromkeys(d for d in delegates if d >= 0)))
        return children

    def _delegate(self, arg: RewiredDelegateArg) -> int:
        ins = (self.plan.chains or ())[arg.chain].instructions[arg.instruction]
        return ins.delegate_index if isinstance(ins, m.DelegateCall) else -1

    def _aliases(self, index: int) -> list[int]:
        """Static views through which something reads this value (``view_reads``), computed once per method."""
        if self._views is None:
            self._views = view_reads(self.effects)
        return list(dict.fromkeys(view for view, _ in self._views.get(index, ())))

    # chains

    def chains(self, roots: Sequence[int]) -> tuple[FoldChain, ...]:
        found = []
        for root in roots:
            tensor = self.values[root]
            problem = self.external_ok(tensor) if tensor.is_external else None
            stack = [root]
            while stack:
                node = self.nodes[stack.pop()]
                stack.extend(reversed(node.children))
                if node.device is None:
                    continue
                steps = self._path(node)
                copy_problem = self._copy_layout(node)
                result = self._result(node)
                found.append(FoldChain(
                    self.ctx.name, self.ctx.plan_index, root, tensor, steps, node.value, result,
                    node.device, node.copies, node.delegate_args, node.device_reads, node.delegates,
                    self._stays(root, steps), problem or copy_problem or growth_problem(tensor, result)))
        return tuple(found)

    def _path(self, node: FoldNode) -> tuple[FoldStep, ...]:
        steps = []
        while node.step is not None:
            steps.append(node.step)
            node = self.nodes[node.parent]
        return tuple(reversed(steps))

    def _result(self, node: FoldNode) -> m.Tensor:
        return node.step.tensor if node.step is not None else self.values[node.value]

    def _copy_layout(self, node: FoldNode) -> Optional[str]:
        """A device copy must have the value's type, sizes and dim order to hold its folded bytes."""
        want = layout_of(self._result(node))
        for copy in node.copies:
            dst = self.values[copy.dst]
            if not isinstance(dst, m.Tensor) or layout_of(dst) != want \
                    or dst.shape_dynamism != m.TensorShapeDynamism.STATIC:
                return f"its device copy (value {copy.dst}) has another type, shape or dim order"
            if not self.writes.only_by(copy.dst, (copy.chain, copy.instruction)):
                return f"its device copy (value {copy.dst}) is written elsewhere too"
        return None

    def _stays(self, root: int, steps: Sequence[FoldStep]) -> tuple[str, ...]:
        """What the host still reads on the way: the constant's and each step's host readers."""
        stays = list(self.nodes[root].host)
        for step in steps[:-1]:
            stays += self.nodes[step.output].host
        return tuple(dict.fromkeys(stays))


def _table_kernel(reader: Reader) -> bool:
    """The reader is the input of a kernel in the fold table: a chain can continue (or start) there."""
    return reader.kind is ReaderKind.KERNEL_CALL and reader.name in FOLD_KERNELS and reader.arg_pos == 0


def method_folds(ctx: _MethodContext, constants: Sequence[Any]) -> MethodFolds:
    """The fold trees and candidate chains of one method, given its constants' plain verdicts.

    Roots are the constants that do not move by themselves; with host placement (a library option for
    testing the encoding on the CPU runtime, which makes every host reader a "device" reader) also those
    that a table kernel reads, so that their chains fold rather than the constant moving.
    """
    def device_bound(reader: Reader) -> bool:  # a chain could start here, or its device readers be duplicated
        return _table_kernel(reader) or reader.on_device or reader.kind == ReaderKind.KERNEL_CALL and reader.name == H2D_COPY

    roots = [c.value for c in constants if (not c.eligible or ctx.host_placement and any(map(_table_kernel, c.readers)))
             and any(map(device_bound, c.readers))]
    if not roots:  # nothing to walk: no writer map, no view reads
        return MethodFolds({}, ())
    finder = _Finder(ctx, lambda tensor: _external_problem(tensor, ctx.external))
    for root in roots:
        finder.root(root, finder.values[root])
    return MethodFolds.of(finder.nodes, finder.chains(roots))


def removed_steps(folds: MethodFolds, chosen: set[int]) -> tuple[set[tuple[int, int]], dict[int, bool]]:
    """The kernels that go when the chains ending at the values in ``chosen`` fold, and which values the
    host still needs afterwards (``{value: needed}``, for every value of every tree).

    A value is still needed when a host reader, a device reader left unfolded, or a kernel that stays
    reads it; its own folded device readers do not count (they get the folded value), nor, at a root,
    its direct device readers (the plan moves or duplicates the constant for them).  A kernel goes when
    its output is not needed.  Kernels whose subtree holds no chosen chain are not touched.
    """
    removed: set[tuple[int, int]] = set()
    needed: dict[int, bool] = {}
    below: dict[int, bool] = {}
    for value in _post_order(folds):  # children before parents: no recursion, however long a chain
        node = folds.nodes[value]
        below[value] = value in chosen or any(below[c] for c in node.children)
        if not below[value]:
            needed[value] = True  # untouched: everything that reads it stays
            continue
        unfolded_device = node.device is not None and value not in chosen and node.parent != -1
        needed[value] = bool(node.host) or unfolded_device or any(needed[c] for c in node.children)
        if not needed[value] and node.step is not None:
            removed.add((node.step.chain, node.step.instruction))
    return removed, needed


def _post_order(folds: MethodFolds) -> list[int]:
    order: list[int] = []
    for root, node in folds.nodes.items():
        if node.parent != -1:
            continue
        stack = [(root, False)]
        while stack:
            value, expanded = stack.pop()
            if expanded:
                order.append(value)
                continue
            stack.append((value, True))
            stack.extend((child, False) for child in folds.nodes[value].children)
    return order


# --- tracing a value back to its constant (the self-check and diff, from a program alone) ---------


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
        self.writes = _Writes(plan, self.ops)

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
            c, k = writers[0]
            ins = (self.plan.chains or ())[c].instructions[k]
            if not isinstance(ins, m.KernelCall):
                return None
            args = tuple(ins.args or ())
            name = self.ops[ins.op_index]
            if name == H2D_COPY and through_copy and current == value and len(args) == 3 and args[1] == value:
                copied_from = current = args[0]
                continue
            kernel = FOLD_KERNELS.get(name)
            if kernel is None or len(args) != len(kernel.params) + 3 or args[-2] != current or args[-1] != current:
                return None
            try:
                literal = kernel.arguments([_literal(self.values, self.writes, i) for i in args[1:-2]])
            except Unfoldable:
                return None
            steps.append(FoldStep(c, k, name, args[0], current, literal, tensor))
            current = args[0]
        return None

    def _checked(self, traced: Traced) -> Optional[Traced]:
        x, tensor = source_view(self.values[traced.source]), self.values[traced.source]
        try:
            for step in traced.steps:
                x = apply_step(FOLD_KERNELS[step.kernel], ShapeOps, x, dict(step.args), tensor, step.tensor)
                if tuple(x.sizes) != tuple(step.tensor.sizes or ()):
                    return None
                tensor = step.tensor
        except Unfoldable:
            return None
        return traced
