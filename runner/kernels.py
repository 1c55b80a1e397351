"""KernelCall: the runner's own kernels (device copies, dim-order ops, prim ops) and torch.ops by schema.

Every other operator resolves to ``torch.ops.<ns>.<name>.<overload>`` and is
called with the program's arguments bound to the operator schema as
ExecuTorch's emitter lays them out (every schema argument, then one return
slot: see ``return_slots``), so ``.out`` kernels, TensorList outs included,
write straight into planned memory.  An output that a kernel gives another
shape is resized by ExecuTorch's rules (``RuntimeValues.resize``).  A host
kernel that would touch device memory is refused, as ExecuTorch's CPU
kernels cannot read it.  Where ExecuTorch's runtime computes differently from
ATen (floating convolution, addmm, batch norm: ``portable.py``) or torch
lacks the operator (ExecuTorch's quantized kernels: ``quantized.py``), the
runner's own function computes, bound by the same schema.
"""

from __future__ import annotations

import contextlib
import math
import operator
import warnings
from typing import Any, Callable, Iterator, Optional

import torch

from pte_devconst.schema import model as m
from pte_devconst.program.executorch import (CLONE_DIM_ORDER, D2H_COPY, EMPTY_DIM_ORDER, ET_COPY_INDEX, H2D_COPY,
                                            PRIM_PREFIX, TO_DIM_ORDER_COPY)
from pte_devconst.program.kernel_effects import DEVICE_COPY_ARGS
from pte_devconst.util.record import record

from .copies import Cause, Direction
from .portable import PORTABLE_KERNELS
from .quantized import out_kernel
from .values import RunnerError, RuntimeValues

Kernel = Callable[[RuntimeValues, tuple[int, ...], str], None]

_MEMORY_FORMATS = (torch.contiguous_format, torch.preserve_format, torch.channels_last, torch.channels_last_3d)


def _check_host(rv: RuntimeValues, indices: tuple[int, ...], op: str, where: str) -> None:
    for index in indices:
        for tensor_index in rv.tensor_indices(index):
            device = rv.device_of(tensor_index)
            if not device.is_cpu:
                raise RunnerError(f"host kernel {op} reads or writes value {tensor_index}, whose memory is on "
                                  f"{device}: an ExecuTorch CPU kernel cannot access it", where=where)


def _device_copy(direction: Direction) -> Kernel:
    name = H2D_COPY if direction is Direction.H2D else D2H_COPY

    def kernel(rv: RuntimeValues, args: tuple[int, ...], where: str) -> None:
        # The codegen'd wrapper takes exactly its schema arguments and one return slot, and never writes
        # that slot (executorch/codegen/gen.py: "Expected %zu args", no return assignment for out variants).
        if len(args) != DEVICE_COPY_ARGS:
            raise RunnerError(f"{name} takes (self, out, return), got {len(args)} arguments", where=where)
        src_i, out_i = args[0], args[1]
        src = rv.tensor(src_i, where)
        src_dev, out_dev = rv.device_of(src_i), rv.device_of(out_i)
        host, device = (src_dev, out_dev) if direction is Direction.H2D else (out_dev, src_dev)
        if not host.is_cpu or device.is_cpu:
            raise RunnerError(f"{name} copies from {src_dev} (value {src_i}) to {out_dev} (value {out_i}); "
                              f"it needs {'host to device' if direction is Direction.H2D else 'device to host'}",
                              where=where)
        out = rv.resize(out_i, src.shape, where)
        out.copy_(src)
        cause = Cause.H2D_KERNEL if direction is Direction.H2D else Cause.D2H_KERNEL
        rv.ledger.record(direction, cause, src.numel() * src.element_size(), str(device), src_i,
                         rv.constant_derived(src_i) if direction is Direction.H2D else None, out_i)

    return kernel


def _dim_order_copy(rv: RuntimeValues, args: tuple[int, ...], where: str) -> None:
    # (Tensor self, *, bool non_blocking, int[]? dim_order, Tensor(a!) out) -> Tensor(a!)
    if len(args) < 4:
        raise RunnerError(f"dim-order copy needs (self, non_blocking, dim_order, out), got {len(args)} arguments",
                          where=where)
    _check_host(rv, (args[0], args[3]), "dim_order_ops copy", where)
    src = rv.tensor(args[0], where)
    rv.resize(args[3], src.shape, where).copy_(src)


def _empty_dim_order(rv: RuntimeValues, args: tuple[int, ...], where: str) -> None:
    # (int[] size, *, int[]? dim_order, Tensor(a!) out) -> Tensor(a!): only the shape matters
    rv.resize(args[2], rv.get(args[0], where), where)


def _aten_copy_(rv: RuntimeValues, args: tuple[int, ...], where: str) -> None:
    # aten::copy_(Tensor(a!) self, Tensor src, bool non_blocking=False) -> Tensor(a!); writes mutated buffers back
    _check_host(rv, args[:2], "aten::copy_", where)
    rv.tensor(args[0], where).copy_(rv.tensor(args[1], where))
    for ret in args[3:]:
        if ret != args[0]:
            rv.set(ret, rv.values[args[0]], rv.residence[args[0]])


def _c_div(a: int, b: int) -> int:
    """C++ integer division (truncates toward zero), as ``int64_t / int64_t``."""
    quotient = abs(a) // abs(b)
    return quotient if (a < 0) == (b < 0) else -quotient


def _c_mod(a: int, b: int) -> int:
    """C++ ``%`` (the sign of the dividend)."""
    return a - b * _c_div(a, b)


def _round_half_even(a: float) -> int:
    return int(round(a))  # Python rounds halves to even, as ExecuTorch's round.Scalar does


# ExecuTorch's prim ops (kernels/prim_ops/register_prim_ops.cpp): scalars in, the last argument out.
_PRIM_SCALAR: dict[str, Callable[..., Any]] = {
    "add.Scalar": operator.add, "sub.Scalar": operator.sub, "mul.Scalar": operator.mul,
    "floordiv.Scalar": operator.floordiv,  # Python's floor division, which ExecuTorch reproduces
    "truediv.Scalar": operator.truediv, "floordiv.int": _c_div, "mod.int": _c_mod, "mod.Scalar": _c_mod,
    "eq.Scalar": operator.eq, "gt.Scalar": operator.gt, "lt.Scalar": operator.lt, "ge.Scalar": operator.ge,
    "le.Scalar": operator.le, "neg.Scalar": operator.neg, "sym_max.Scalar": max, "sym_min.Scalar": min,
    "sym_float.Scalar": float, "sym_int.Scalar": int, "sym_not.Scalar": operator.not_,
    "sym_ite.Scalar": lambda condition, a, b: a if condition else b,
    "ceil.Scalar": lambda a: int(math.ceil(a)), "round.Scalar": _round_half_even,
    "trunc.Scalar": lambda a: int(math.trunc(a)),
}
_PRIM_ARITY = {"neg.Scalar": 1, "sym_float.Scalar": 1, "sym_int.Scalar": 1, "sym_not.Scalar": 1, "ceil.Scalar": 1,
               "round.Scalar": 1, "trunc.Scalar": 1, "sym_ite.Scalar": 3}


def _sym_size(rv: RuntimeValues, args: tuple[int, ...], where: str) -> None:
    rv.set(args[-1], int(rv.tensor(args[0], where).size(rv.get(args[1], where))))


def _sym_numel(rv: RuntimeValues, args: tuple[int, ...], where: str) -> None:
    rv.set(args[-1], int(rv.tensor(args[0], where).numel()))


def _et_view(rv: RuntimeValues, args: tuple[int, ...], where: str) -> None:
    src, sizes = rv.tensor(args[0], where), rv.get(args[1], where)
    try:
        view = src.view(tuple(sizes))
    except (RuntimeError, TypeError) as error:
        shown = sizes if isinstance(sizes, list) else type(sizes).__name__
        raise RunnerError(f"executorch_prim::et_view of value {args[0]} {list(src.shape)} as {shown}: "
                          f"{' '.join(str(error).split())[:200]}", where=where) from None
    rv.set(args[-1], view, rv.residence[args[0]])


def _et_copy_index(rv: RuntimeValues, args: tuple[int, ...], where: str) -> None:
    # (Tensor(a!) copy_to, Tensor copy_from, int index): copy_to grows to index + 1 rows, row index = copy_from
    _check_host(rv, args[:2], ET_COPY_INDEX, where)
    source, index = rv.tensor(args[1], where), rv.get(args[2], where)
    target = rv.resize(args[0], (index + 1, *source.shape), where)
    target[index].copy_(source)


def _prim(name: str) -> Optional[Kernel]:
    short = name.removeprefix(PRIM_PREFIX)
    special = {"sym_size.int": _sym_size, "sym_numel.default": _sym_numel, "sym_numel": _sym_numel,
               "et_view.default": _et_view, "et_copy_index.tensor": _et_copy_index}.get(short)
    if special is not None:
        return special
    function = _PRIM_SCALAR.get(short)
    if function is None:
        return None
    arity = _PRIM_ARITY.get(short, 2)

    def scalar(rv: RuntimeValues, args: tuple[int, ...], where: str) -> None:
        if len(args) != arity + 1:
            raise RunnerError(f"{name} takes {arity} value(s) and an output, got {len(args)} arguments", where=where)
        try:
            result = function(*(rv.get(index, where) for index in args[:arity]))
        except (ArithmeticError, TypeError, ValueError) as error:
            raise RunnerError(f"{name} failed: {error}", where=where) from None
        rv.set(args[arity], result)

    return scalar


BUILTIN_KERNELS: dict[str, Kernel] = {
    H2D_COPY: _device_copy(Direction.H2D),
    D2H_COPY: _device_copy(Direction.D2H),
    TO_DIM_ORDER_COPY: _dim_order_copy,
    CLONE_DIM_ORDER: _dim_order_copy,
    EMPTY_DIM_ORDER: _empty_dim_order,
    "aten::copy_": _aten_copy_,
    "aten::copy_.default": _aten_copy_,
}


def return_slots(schema: Any) -> int:
    """How many values ExecuTorch's emitter appends after an operator's arguments (exir/emit/_emitter.py).

    An out variant gets one slot for what it returns: its out tensor (the same value as the out argument)
    or, for several outs or a ``Tensor(a!)[] out``, a TensorList of them, even when the schema returns
    nothing (``split_with_sizes_copy.out(...) -> ()``).  Any other operator gets one per return value.
    """
    return 1 if any(argument.is_out for argument in schema.arguments) else len(schema.returns)


@record
class Parameter:
    """One schema argument, read once at load (torch builds these objects anew on every access)."""

    name: str
    kwarg_only: bool
    is_out: bool
    type_name: str  # the declared type (``real_type``: ScalarType, MemoryFormat), where ``type`` says int


@record
class TorchKernel:
    """A torch operator bound to ExecuTorch's argument convention for it (see ``return_slots``)."""

    name: str
    op: Any  # torch._ops.OpOverload
    parameters: tuple[Parameter, ...]
    slots: int

    @classmethod
    def of(cls, name: str, op: Any, compute: Optional[Callable[..., Any]] = None) -> "TorchKernel":
        """``op`` bound by its schema; ``compute`` (same signature) computes instead of it when given."""
        return cls.bind(name, op._schema, compute if compute is not None else op)

    @classmethod
    def bind(cls, name: str, schema: Any, compute: Callable[..., Any]) -> "TorchKernel":
        """``compute`` called as torch calls an operator of ``schema`` (a ``torch._C.FunctionSchema``)."""
        parameters = tuple(Parameter(a.name, a.kwarg_only, a.is_out, str(getattr(a, "real_type", a.type)))
                           for a in schema.arguments)
        return cls(name, compute, parameters, return_slots(schema))

    def __call__(self, rv: RuntimeValues, args: tuple[int, ...], where: str) -> None:
        n_args, slots = len(self.parameters), self.slots
        if len(args) not in (n_args, n_args + slots):
            raise RunnerError(f"{self.name} got {len(args)} arguments; its schema has {n_args} arguments "
                              f"and {slots} return slot{'s' if slots != 1 else ''}", where=where)
        _check_host(rv, args, self.name, where)
        positional: list[Any] = []
        keywords: dict[str, Any] = {}
        outs: list[int] = []
        for parameter, index in zip(self.parameters, args):
            value = _convert(rv.get(index, where), parameter.type_name)
            if parameter.kwarg_only:
                keywords[parameter.name] = value
            else:
                positional.append(value)
            if parameter.is_out:
                outs.append(index)
        out_tensors = [i for index in outs for i in rv.tensor_indices(index)]
        shapes = [rv.values[i].shape for i in out_tensors]
        # torch resizes an out= tensor of another shape (a dynamic one) and warns; ExecuTorch kernels
        # resize theirs too, and accept_resize below applies ExecuTorch's rules to the new shape.
        quiet = _resizes_quietly() if any(rv.is_dynamic(i) for i in out_tensors) else contextlib.nullcontext()
        try:
            with quiet:
                result = self.op(*positional, **keywords)
        except (RuntimeError, TypeError, ValueError, IndexError) as error:
            raise RunnerError(f"{self.name} failed: {' '.join(str(error).split())[:300]}", where=where) from None
        for index, shape in zip(out_tensors, shapes):
            if rv.values[index].shape != shape:
                rv.accept_resize(index, where)
        returns = args[n_args:]
        if not returns or outs:
            return  # an out variant's codegen'd wrapper never writes its return slot (executorch/codegen/gen.py)
        results = list(result) if isinstance(result, (tuple, list)) and len(returns) > 1 else [result]
        for ret_index, value in zip(returns, results):
            existing = rv.values[ret_index]
            if isinstance(existing, torch.Tensor) and isinstance(value, torch.Tensor):
                if existing is value or existing.data_ptr() == value.data_ptr() or existing.numel() == 0:
                    continue
                if existing.shape == value.shape:
                    existing.copy_(value)
                    continue
            rv.set(ret_index, value, m.CPU if isinstance(value, torch.Tensor) else None)


@contextlib.contextmanager
def _resizes_quietly() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="An output with one or more elements was resized")
        yield


def _convert(value: Any, type_name: str) -> Any:
    """Turn a program value into what torch expects for a schema type (ints stand for enums)."""
    if isinstance(value, int) and not isinstance(value, bool):
        if "ScalarType" in type_name:
            from pte_devconst.program.dtypes import torch_dtype
            return torch_dtype(value)
        if "MemoryFormat" in type_name:
            return _MEMORY_FORMATS[value] if 0 <= value < len(_MEMORY_FORMATS) else value
        if "Layout" in type_name:
            return torch.strided
    return value


def _failing_cleanly(name: str, kernel: Kernel) -> Kernel:
    """One of the runner's own kernels, failing on a malformed call (too few arguments, mismatched
    shapes) with one error naming the operator, as an ExecuTorch kernel fails its KernelRuntimeContext."""

    def run(rv: RuntimeValues, args: tuple[int, ...], where: str) -> None:
        try:
            kernel(rv, args, where)
        except (IndexError, RuntimeError, TypeError, ValueError) as error:
            raise RunnerError(f"{name} cannot run on arguments {list(args)}: "
                              f"{' '.join(str(error).split())[:200] or type(error).__name__}", where=where) from None

    return run


def resolve_kernel(operator_: m.Operator, where: str) -> Kernel:
    """The kernel for an operator, or a ``RunnerError`` naming the operator the runner cannot execute."""
    name = operator_.qualified_name
    builtin = BUILTIN_KERNELS.get(name)
    if builtin is not None:
        return _failing_cleanly(name, builtin)
    if name.startswith(PRIM_PREFIX):
        prim = _prim(name)
        if prim is None:
            raise RunnerError(f"unknown operator {name}: the runner does not implement this prim op", where=where)
        return _failing_cleanly(name, prim)
    quantized = out_kernel(name)
    if quantized is not None:
        return TorchKernel.bind(name, *quantized)
    namespace, _, rest = (operator_.name or "").partition("::")
    try:
        packet = getattr(getattr(torch.ops, namespace), rest)
        overload = getattr(packet, operator_.overload or "default")
        overload._schema  # noqa: B018 - raises if the overload does not exist
    except (AttributeError, RuntimeError):
        raise RunnerError(f"unknown operator {name}: torch has no such operator (load the library that "
                          f"defines it, or this program cannot run here)", where=where) from None
    return TorchKernel.of(name, overload, PORTABLE_KERNELS.get(name))
