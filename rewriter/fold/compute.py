"""The bytes of a folded value, computed as ExecuTorch's portable kernels compute them (imports torch).

Imported only when something folds.  ``fold_bytes`` turns a ``FoldRecipe`` (a
constant and the table kernels applied to it, ``recipes.py``) into the bytes of the
result laid out in its dim order:

* data movement is exact by construction: every table kernel except the casts
  only moves elements, so they are moved as raw integers of the element's size
  (any scalar type, quantized ones included);
* casts (``_to_copy``, ``_to_dim_order_copy``) convert with torch's CPU
  conversions, which are the ``static_cast``s (and c10 Half/BFloat16
  conversions, round to nearest even) that the portable kernels use; the one
  conversion C++ leaves undefined, floating point to an integer type of a NaN,
  an infinity or a value out of range, is refused before anything is written
  (``cast_problem``).  ``tests/test_fold_exact.py`` runs every kernel and cast
  on the real ExecuTorch 1.5.1 runtime and compares the bytes.

Memory: the result is allocated once (the "largest folded tensor" a rewrite may
add to its peak), plus a read buffer of at most ``BLOCK_BYTES``.  When the chain
is one strided view of the constant (every table kernel is, except a reshape the
runtime has to copy), the constant is read with ``preadv`` in blocks along the
view's outermost dimension and scattered into the result; otherwise it is read
whole and the kernels run one after another.  Importing torch is a fixed cost on
top (about 220 MiB and 3 s on the benchmark machine, bench/RESULTS.md).
"""

from __future__ import annotations

import warnings
from typing import Callable, Optional, Sequence

import torch

from pte_devconst.program.dtypes import torch_dtype
from pte_devconst.schema import model as m
from pte_devconst.util.errors import PteDevconstError
from pte_devconst.schema.scalar_types import scalar_type_name
from pte_devconst.schema.mapped import MappedFile
from pte_devconst.schema.ptd_file import PtdFile
from pte_devconst.schema.pte_file import PteFile

from .kernels import FLOATING, FOLD_KERNELS, INTEGRAL, apply_step
from .recipes import FoldRecipe
from .shapes import Strided

BLOCK_BYTES = 4 << 20
_RAW = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}  # element movers, by element size
# The values a float may have for static_cast to each integral type to be defined: (low, high), exclusive.
_INT_RANGE: dict[int, tuple[float, float]] = {m.ScalarType.BYTE: (-1.0, 256.0), m.ScalarType.CHAR: (-129.0, 128.0),
              m.ScalarType.SHORT: (-32769.0, 32768.0), m.ScalarType.INT: (-2147483649.0, 2147483648.0),
              m.ScalarType.LONG: (-9223372036854775809.0, 9223372036854775808.0)}

Reader = Callable[[int, memoryview], int]  # (offset in the constant's bytes, buffer) -> bytes read


class TorchOps:
    """The table's operations on torch tensors (``kernels.Ops``: the names and arguments of ``shapes.ShapeOps``)."""

    @staticmethod
    def permute(x: torch.Tensor, dims: Sequence[int]) -> torch.Tensor:
        return x.permute(tuple(dims))

    @staticmethod
    def transpose(x: torch.Tensor, a: int, b: int) -> torch.Tensor:
        return x.transpose(a, b)

    @staticmethod
    def t(x: torch.Tensor) -> torch.Tensor:
        return x.t()

    @staticmethod
    def reshape(x: torch.Tensor, shape: Sequence[int]) -> torch.Tensor:
        return x.reshape(tuple(shape))

    @staticmethod
    def expand(x: torch.Tensor, shape: Sequence[int]) -> torch.Tensor:
        return x.expand(tuple(shape))

    @staticmethod
    def squeeze(x: torch.Tensor, dims: Optional[Sequence[int]]) -> torch.Tensor:
        return x.squeeze() if dims is None else x.squeeze(tuple(dims))

    @staticmethod
    def unsqueeze(x: torch.Tensor, dim: int) -> torch.Tensor:
        return x.unsqueeze(dim)

    @staticmethod
    def select(x: torch.Tensor, dim: int, index: int) -> torch.Tensor:
        return x.select(dim, index)

    @staticmethod
    def slice(x: torch.Tensor, dim: int, start: Optional[int], end: Optional[int], step: int) -> torch.Tensor:
        sliced: torch.Tensor = torch.ops.aten.slice.Tensor(x, dim, start, end, step)
        return sliced

    @staticmethod
    def cast(x: torch.Tensor, scalar_type: int) -> torch.Tensor:
        return x.to(torch_dtype(scalar_type))


class SourceBytes:
    """Reads a constant's bytes from the input program or its .ptd (never through the memory map)."""

    def __init__(self, pte: PteFile, ptd: Optional[PtdFile] = None) -> None:
        self.pte = pte
        self.ptd = ptd

    def reader(self, tensor: m.Tensor) -> Reader:
        """A reader of ``tensor``'s bytes (``tensor`` as a recipe keeps it: its data index or .ptd key)."""
        nbytes = tensor.nbytes
        file: MappedFile
        if tensor.is_external:
            span = self.ptd.span(tensor.fqn or "") if self.ptd is not None else None
            if span is None or self.ptd is None:
                raise PteDevconstError(f"the .ptd holds no data for {tensor.fqn!r}, which a folded value needs")
            file = self.ptd
        else:
            span = self.pte.tensor_span(tensor)
            file = self.pte
            if span is None:  # the deprecated inline constant_buffer: small by nature
                data = bytes(self.pte.tensor_bytes(tensor) or b"")
                return lambda offset, view: _copy_into(data, offset, view)
        if span.size < nbytes:
            raise PteDevconstError(f"constant data of {span.size} bytes is shorter than its {nbytes}-byte tensor")

        def read(offset: int, view: memoryview) -> int:
            return file.read_into(span.offset + offset, view[: max(0, min(len(view), nbytes - offset))])

        return read


def _copy_into(data: bytes, offset: int, view: memoryview) -> int:
    chunk = data[offset: offset + len(view)]
    view[: len(chunk)] = chunk
    return len(chunk)


def _buffer_tensor(buffer: bytearray, dtype: torch.dtype, count: int) -> torch.Tensor:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns about buffers it cannot prove writable
        return torch.frombuffer(buffer, dtype=dtype, count=count) if count else torch.empty(0, dtype=dtype)


def _read(reader: Reader, offset: int, count: int, itemsize: int, buffer: bytearray) -> None:
    want = count * itemsize
    got = reader(offset * itemsize, memoryview(buffer)[:want])
    if got != want:
        raise PteDevconstError(f"the input ended while a folded value was computed: {got} of {want} bytes at "
                               f"element {offset} (it changed during the rewrite)")


def _dtypes(recipe: FoldRecipe, shape: Strided) -> tuple[torch.dtype, torch.dtype]:
    """(the source's dtype, the result's): raw integers when the chain only moves elements."""
    if not shape.casts:
        raw = _RAW[m.element_size(recipe.source.scalar_type)]
        return raw, raw
    return torch_dtype(recipe.source.scalar_type), torch_dtype(recipe.result.scalar_type)


def fold_bytes(recipe: FoldRecipe, source: SourceBytes) -> bytearray:
    """The folded value's bytes, in its dim order (see the module docstring)."""
    result = recipe.result
    out = bytearray(result.nbytes)
    if not out:
        return out
    shape = recipe.shape()
    src_dtype, out_dtype = _dtypes(recipe, shape)
    sizes = tuple(result.sizes or ())
    order = tuple(result.dim_order or ())
    physical = _buffer_tensor(out, out_dtype, len(out) // m.element_size(result.scalar_type))
    logical = physical.view([sizes[d] for d in order]).permute(tuple(order.index(d) for d in range(len(order))))
    reader = source.reader(recipe.source)
    if shape.gathered:
        _gather(shape, reader, src_dtype, logical)
    else:
        logical.copy_(_evaluate(recipe, reader, src_dtype))
    return out


def _gather(shape: Strided, reader: Reader, src_dtype: torch.dtype, logical: torch.Tensor) -> None:
    """Copy a strided view of the source into ``logical``, reading the source in blocks along one dimension."""
    sizes, strides, itemsize = shape.sizes, shape.strides, src_dtype.itemsize
    wide = [d for d in range(len(sizes)) if sizes[d] > 1]
    if not wide:  # one element
        buffer = bytearray(itemsize)
        _read(reader, shape.offset, 1, itemsize, buffer)
        logical.copy_(_cast(_buffer_tensor(buffer, src_dtype, 1).reshape(sizes), shape.casts))
        return
    d = max(wide, key=lambda i: strides[i])
    step = strides[d]
    rest = sum((sizes[i] - 1) * strides[i] for i in range(len(sizes)) if i != d)
    block = max(1, BLOCK_BYTES // itemsize)
    rows = max(1, (block - rest - 1) // step + 1) if step else sizes[d]
    buffer = bytearray(((min(rows, sizes[d]) - 1) * step + rest + 1) * itemsize)
    for start in range(0, sizes[d], rows):
        n = min(rows, sizes[d] - start)
        count = (n - 1) * step + rest + 1
        _read(reader, shape.offset + start * step, count, itemsize, buffer)
        part_sizes = sizes[:d] + (n,) + sizes[d + 1:]
        part = _buffer_tensor(buffer, src_dtype, count).as_strided(part_sizes, strides, 0)
        logical.narrow(d, start, n).copy_(_cast(part, shape.casts))


def _cast(x: torch.Tensor, casts: Sequence[int]) -> torch.Tensor:
    for scalar_type in casts:
        x = x.to(torch_dtype(scalar_type))
    return x


def _source_tensor(recipe: FoldRecipe, reader: Reader, dtype: torch.dtype) -> torch.Tensor:
    """The whole constant, read into memory, as its logical tensor."""
    tensor = recipe.source
    count = tensor.numel
    buffer = bytearray(count * dtype.itemsize)
    _read(reader, 0, count, dtype.itemsize, buffer)
    sizes = tuple(tensor.sizes or ())
    strides = m.dim_order_strides(sizes, tuple(tensor.dim_order or ()))
    return _buffer_tensor(buffer, dtype, count).as_strided(sizes, strides)


def _steps(recipe: FoldRecipe, x: torch.Tensor, upto: Optional[int] = None) -> torch.Tensor:
    """The kernels (the first ``upto`` of them) applied one after another, on torch tensors."""
    current = recipe.source
    for key, args, out in recipe.kernels[:upto]:
        x = apply_step(FOLD_KERNELS[key], TorchOps, x, dict(args), current, out)
        current = out
    return x


def _evaluate(recipe: FoldRecipe, reader: Reader, src_dtype: torch.dtype) -> torch.Tensor:
    return _steps(recipe, _source_tensor(recipe, reader, src_dtype))


def cast_problem(recipe: FoldRecipe, source: SourceBytes) -> Optional[str]:
    """Why a cast in the chain has no defined result (a float to an integer type of NaN, inf or out of range)."""
    current = recipe.source.scalar_type
    casts = []
    for position, (_key, _, out) in enumerate(recipe.kernels):
        if out.scalar_type != current and current in FLOATING and out.scalar_type in INTEGRAL:
            casts.append(position)
        current = out.scalar_type
    if not casts or not recipe.source.numel:
        return None
    values = _source_tensor(recipe, source.reader(recipe.source), torch_dtype(recipe.source.scalar_type))
    for position in casts:
        before = _steps(recipe, values, position)
        target = recipe.kernels[position][2].scalar_type
        low, high = _INT_RANGE[target]
        wide = before.double()
        if not bool(torch.isfinite(wide).all()) or bool((wide <= low).any()) or bool((wide >= high).any()):
            name = scalar_type_name(target)
            return (f"{FOLD_KERNELS[recipe.kernels[position][0]].short} casts NaN, infinite or out-of-range values to "
                    f"{name}, which C++ leaves undefined")
    return None
