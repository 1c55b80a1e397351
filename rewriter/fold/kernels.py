"""The table of kernels that fold: what each one's arguments are and what it does, by kernel key.

**A new folding kernel is ONE entry in ``FOLD_KERNELS`` below**: its key, its schema arguments between ``self``
and ``out`` with their kinds, and what it does through ``ops`` (``Ops``: the same operation on shapes,
``shapes.ShapeOps``, and on tensors, ``compute.TorchOps``; add the operation to both only if it is new).  The
chain finder, the recipes, the self-check's tracer and the computation all read this table; then a case in
``tests/test_fold_exact.py`` runs the kernel on the real ExecuTorch runtime and compares the bytes.
"""

from __future__ import annotations

from typing import Mapping, Optional, Protocol, Sequence, TypeVar, Union, cast

from pte_devconst.program.executorch import CLONE_DIM_ORDER, TO_DIM_ORDER_COPY
from pte_devconst.schema import model as m
from pte_devconst.util.record import record

from .shapes import Unfoldable

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

# A literal argument of a table kernel, as the program stores it (``recipes.literal_argument``).
LiteralValue = Union[None, bool, int, float, tuple["LiteralValue", ...]]
# A kernel's literal arguments by schema name, each of the kind its entry declares (``FoldKernel.arguments``).
Args = Mapping[str, LiteralValue]
T = TypeVar("T")


class Ops(Protocol[T]):
    """The operations the table's kernels are written in, on values of type T: on shapes
    (``shapes.ShapeOps``, T = ``Strided``) and on tensors (``compute.TorchOps``, T = ``torch.Tensor``)."""

    def permute(self, x: T, dims: Sequence[int]) -> T: ...

    def transpose(self, x: T, a: int, b: int) -> T: ...

    def t(self, x: T) -> T: ...

    def reshape(self, x: T, shape: Sequence[int]) -> T: ...

    def expand(self, x: T, shape: Sequence[int]) -> T: ...

    def squeeze(self, x: T, dims: Optional[Sequence[int]]) -> T: ...

    def unsqueeze(self, x: T, dim: int) -> T: ...

    def select(self, x: T, dim: int, index: int) -> T: ...

    def slice(self, x: T, dim: int, start: Optional[int], end: Optional[int], step: int) -> T: ...

    def cast(self, x: T, scalar_type: int) -> T: ...


class Apply(Protocol):
    """What a kernel does: ``apply(ops, x, args, input, output)``, the same code on shapes and on tensors."""

    def __call__(self, ops: Ops[T], x: T, args: Args, source: m.Tensor, out: m.Tensor) -> T: ...


# Typed reads of a kernel's arguments: ``FoldKernel.arguments`` has checked each against its declared kind.

def _int(args: Args, name: str) -> int:
    return cast(int, args[name])


def _opt_int(args: Args, name: str) -> Optional[int]:
    return cast(Optional[int], args[name])


def _ints(args: Args, name: str) -> tuple[int, ...]:
    return cast("tuple[int, ...]", args[name])


@record
class FoldArgs:
    """A fold kernel's arguments by its schema: ``(self, params..., out, return)``."""

    source: int  # self: the value it computes from
    params: tuple[int, ...]  # the schema arguments between self and out (literals when it folds)
    out: int
    ret: int  # the return slot (an out variant's emitter repeats ``out`` there)


@record
class FoldKernel:
    """One foldable kernel: its key, the schema arguments between ``self`` and ``out``, and what it does.

    ``kinds`` gives each argument's type (``int``, ``ints``, ``bool``, ``int?``, ``ints?``: ``?`` allows
    None), checked before anything uses them.  ``apply(ops, x, args, input, output)`` applies the kernel to
    ``x`` with ``ops`` (``shapes.ShapeOps``, or ``compute.TorchOps`` on tensors) and raises ``Unfoldable`` where the
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

    def split(self, args: Sequence[int]) -> Optional[FoldArgs]:
        """The instruction's arguments by this kernel's schema (None: not its count, self + params + out + return).

        Reading the schema's positions is this table's (what the kernel computes from); what any kernel writes is
        ``program/kernel_effects.py``'s rule, which for these out variants is their ``out``."""
        if len(args) != len(self.params) + 3:
            return None
        return FoldArgs(args[0], tuple(args[1:-2]), args[-2], args[-1])

    def arguments(self, literal: Sequence[LiteralValue]) -> tuple[tuple[str, LiteralValue], ...]:
        """The literal arguments by name, each of its kind; raises Unfoldable for one of another kind."""
        for name, kind, value in zip(self.params, self.kinds, literal):
            if not _of_kind(value, kind):
                raise Unfoldable(f"its argument {name} is {value!r}, not {kind.replace('?', ' or None')}")
        return tuple(zip(self.params, literal))


def _of_kind(value: LiteralValue, kind: str) -> bool:
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


def _memory_format(args: Args) -> None:
    _require(args.get("memory_format") in (None, CONTIGUOUS_FORMAT),
             f"memory_format {args.get('memory_format')} (the portable kernel takes only contiguous)")


def _blocking(args: Args) -> None:
    _require(args.get("non_blocking") in (False, None), "non_blocking=True (the portable kernel refuses it)")


def _dim_order_arg(args: Args, source: m.Tensor, out: m.Tensor) -> None:
    """check__to_dim_order_copy_args: the out's dim order is the argument's (contiguous or channels last) or the
    input's."""
    _blocking(args)
    order = args.get("dim_order")
    want = tuple(source.dim_order or ()) if order is None else _ints(args, "dim_order")
    _require(tuple(out.dim_order or ()) == want, f"out's dim order {list(out.dim_order or ())} is not {list(want)}")
    if order is not None:
        rank = len(want)
        channels_last = rank in (4, 5) and want == (0,) + tuple(range(2, rank)) + (1,)
        _require(want == tuple(range(rank)) or channels_last, f"dim_order {list(want)} is neither contiguous nor "
                 "channels last")


def _cast(ops: Ops[T], x: T, out: m.Tensor) -> T:
    return ops.cast(x, out.scalar_type)


def _clone_dim_order(ops: Ops[T], x: T, args: Args, source: m.Tensor, out: m.Tensor) -> T:
    _dim_order_arg(args, source, out)
    return x


def _to_dim_order(ops: Ops[T], x: T, args: Args, source: m.Tensor, out: m.Tensor) -> T:
    _dim_order_arg(args, source, out)
    return _cast(ops, x, out)


def _expand(ops: Ops[T], x: T, args: Args, source: m.Tensor, out: m.Tensor) -> T:
    _require(not args.get("implicit"), "implicit=True (the portable kernel refuses it)")
    return ops.expand(x, _ints(args, "size"))


def _clone(ops: Ops[T], x: T, args: Args, source: m.Tensor, out: m.Tensor) -> T:
    _memory_format(args)
    return x


def _to_copy(ops: Ops[T], x: T, args: Args, source: m.Tensor, out: m.Tensor) -> T:
    _blocking(args)
    _memory_format(args)
    return _cast(ops, x, out)


def _identity(ops: Ops[T], x: T, args: Args, source: m.Tensor, out: m.Tensor) -> T:
    return x


# The foldable kernels, by kernel key.  To add one: its schema arguments between self and out, their kinds, and
# what it does through ``ops`` (add the operation to Ops, shapes.ShapeOps and compute.TorchOps if it is new); then a
# case in tests/test_fold_exact.py runs it on the real runtime.
FOLD_KERNELS: dict[str, FoldKernel] = {k.key: k for k in (
    FoldKernel("aten::permute_copy.out", ("dims",), ("ints",),
               lambda ops, x, a, s, o: ops.permute(x, _ints(a, "dims"))),
    FoldKernel("aten::t_copy.out", (), (), lambda ops, x, a, s, o: ops.t(x)),
    FoldKernel("aten::transpose_copy.int_out", ("dim0", "dim1"), ("int", "int"),
               lambda ops, x, a, s, o: ops.transpose(x, _int(a, "dim0"), _int(a, "dim1"))),
    FoldKernel("aten::view_copy.out", ("size",), ("ints",), lambda ops, x, a, s, o: ops.reshape(x, _ints(a, "size"))),
    FoldKernel("aten::expand_copy.out", ("size", "implicit"), ("ints", "bool"), _expand),
    FoldKernel("aten::squeeze_copy.dim_out", ("dim",), ("int",),
               lambda ops, x, a, s, o: ops.squeeze(x, [_int(a, "dim")])),
    FoldKernel("aten::squeeze_copy.dims_out", ("dim",), ("ints",),
               lambda ops, x, a, s, o: ops.squeeze(x, _ints(a, "dim"))),
    FoldKernel("aten::unsqueeze_copy.out", ("dim",), ("int",),
               lambda ops, x, a, s, o: ops.unsqueeze(x, _int(a, "dim"))),
    FoldKernel("aten::clone.out", ("memory_format",), ("int?",), _clone),
    FoldKernel("aten::alias_copy.out", (), (), _identity),
    FoldKernel("aten::slice_copy.Tensor_out", ("dim", "start", "end", "step"), ("int", "int?", "int?", "int"),
               lambda ops, x, a, s, o: ops.slice(x, _int(a, "dim"), _opt_int(a, "start"), _opt_int(a, "end"),
                                                 _int(a, "step"))),
    FoldKernel("aten::select_copy.int_out", ("dim", "index"), ("int", "int"),
               lambda ops, x, a, s, o: ops.select(x, _int(a, "dim"), _int(a, "index"))),
    FoldKernel("aten::_to_copy.out", ("non_blocking", "memory_format"), ("bool", "int?"), _to_copy, casts=True),
    FoldKernel(TO_DIM_ORDER_COPY, ("non_blocking", "dim_order"), ("bool", "ints?"),
               _to_dim_order, logical=True, casts=True),
    FoldKernel(CLONE_DIM_ORDER, ("non_blocking", "dim_order"), ("bool", "ints?"),
               _clone_dim_order, logical=True),
)}


def apply_step(kernel: FoldKernel, ops: Ops[T], x: T, args: Args, source: m.Tensor, out: m.Tensor) -> T:
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
