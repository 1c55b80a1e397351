"""Focused tests of the runner's kernels: ExecuTorch's argument convention, TensorList outs, resizing, prim ops.

Each test lays values out as ExecuTorch's emitter does (exir/emit/_emitter.py: the schema's arguments,
then one return slot) and checks the result against eager PyTorch or ExecuTorch's own kernel source.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Optional, Sequence

import pytest
import torch

from pte_devconst.runner import run_program
from pte_devconst.runner.copies import CopyLedger
from pte_devconst.runner.devices import DeviceMap
from pte_devconst.runner.kernels import resolve_kernel, return_slots
from pte_devconst.runner.reference_backend import InputSpec
from pte_devconst.runner.values import ListKind, ListRef, RunnerError, RuntimeValues
from pte_devconst.schema import model as m

STATIC, BOUND = m.TensorShapeDynamism.STATIC, m.TensorShapeDynamism.DYNAMIC_BOUND
EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "models"


def spec(sizes: Sequence[int], dynamism: int = STATIC, dim_order: Optional[Sequence[int]] = None) -> m.Tensor:
    return m.Tensor(scalar_type=m.ScalarType.FLOAT, sizes=tuple(sizes),
                    dim_order=tuple(dim_order if dim_order is not None else range(len(sizes))),
                    shape_dynamism=dynamism)


class Values:
    """A method's values built one by one: tensors get a spec and a zeroed planned-like tensor of its size."""

    def __init__(self) -> None:
        self.items: list[tuple[Any, Any]] = []

    def tensor(self, sizes: Sequence[int], dynamism: int = STATIC, data: Optional[torch.Tensor] = None,
               dim_order: Optional[Sequence[int]] = None) -> int:
        tensor_spec = spec(sizes, dynamism, dim_order)
        value = torch.zeros(math.prod(sizes)).as_strided(
            tuple(sizes), _strides(sizes, tensor_spec.dim_order)) if data is None else data
        self.items.append((value, tensor_spec))
        return len(self.items) - 1

    def value(self, value: Any) -> int:
        """A non-tensor value: a scalar, a list of ints, None."""
        self.items.append((value, None))
        return len(self.items) - 1

    def tensor_list(self, items: Sequence[int]) -> int:
        self.items.append((ListRef(ListKind.TENSOR, tuple(items)), m.TensorList(tuple(items))))
        return len(self.items) - 1

    def build(self) -> RuntimeValues:
        rv = RuntimeValues("forward", len(self.items), DeviceMap(True), CopyLedger(), [s for _, s in self.items])
        for index, (value, _) in enumerate(self.items):
            rv.set(index, value, m.CPU if isinstance(value, torch.Tensor) else None)
        return rv


def _strides(sizes: Sequence[int], dim_order: Sequence[int]) -> tuple[int, ...]:
    from pte_devconst.program.dtypes import dim_order_strides

    return dim_order_strides(tuple(sizes), tuple(dim_order))


def kernel(name: str) -> Any:
    namespace, _, rest = name.partition("::")
    base, _, overload = rest.partition(".")
    return resolve_kernel(m.Operator(name=f"{namespace}::{base}", overload=overload), "test")


X = torch.arange(24, dtype=torch.float32).reshape(4, 6)


# --- TensorList out-variants (every one ExecuTorch's portable kernels implement) -------------------------


@pytest.mark.parametrize("with_return_slot", [True, False])
def test_split_with_sizes_copy_writes_each_item_of_its_out_list(with_return_slot: bool) -> None:
    v = Values()
    x, sizes, dim = v.tensor((4, 6), data=X.clone()), v.value([1, 2, 3]), v.value(1)
    outs = [v.tensor((4, n)) for n in (1, 2, 3)]
    out_list = v.tensor_list(outs)
    args = (x, sizes, dim, out_list) + ((v.tensor_list(outs),) if with_return_slot else ())
    rv = v.build()
    kernel("aten::split_with_sizes_copy.out")(rv, args, "test")
    for index, want in zip(outs, torch.split(X, [1, 2, 3], dim=1)):
        assert torch.equal(rv.values[index], want)


def test_split_copy_writes_equal_chunks_and_a_shorter_last_one() -> None:
    v = Values()
    x, size, dim = v.tensor((4, 6), data=X.clone()), v.value(4), v.value(1)
    outs = [v.tensor((4, 4)), v.tensor((4, 2))]
    args = (x, size, dim, v.tensor_list(outs), v.tensor_list(outs))
    rv = v.build()
    kernel("aten::split_copy.Tensor_out")(rv, args, "test")
    assert [torch.equal(rv.values[i], w) for i, w in zip(outs, torch.split(X, 4, dim=1))] == [True, True]


def test_unbind_copy_writes_one_item_per_slice() -> None:
    v = Values()
    x, dim = v.tensor((4, 6), data=X.clone()), v.value(0)
    outs = [v.tensor((6,)) for _ in range(4)]
    args = (x, dim, v.tensor_list(outs), v.tensor_list(outs))
    rv = v.build()
    kernel("aten::unbind_copy.int_out")(rv, args, "test")
    for index, row in zip(outs, X):
        assert torch.equal(rv.values[index], row)


def test_several_outs_share_one_tensor_list_return_slot() -> None:
    # max.dim_max(self, dim, keepdim, *, max, max_values) -> (values, indices): the emitter appends one
    # TensorList of the two outs.
    v = Values()
    x, dim, keep = v.tensor((4, 6), data=X.flip(1).clone()), v.value(1), v.value(False)
    values = v.tensor((4,))
    indices = v.tensor((4,), data=torch.zeros(4, dtype=torch.long))
    rv_args = (x, dim, keep, values, indices, v.tensor_list([values, indices]))
    rv = v.build()
    kernel("aten::max.dim_max")(rv, rv_args, "test")
    want_values, want_indices = torch.max(X.flip(1), dim=1)
    assert torch.equal(rv.values[values], want_values) and torch.equal(rv.values[indices], want_indices)


def test_return_slots_follow_the_emitter() -> None:
    assert return_slots(torch.ops.aten.split_with_sizes_copy.out._schema) == 1  # returns () but has an out list
    assert return_slots(torch.ops.aten.native_layer_norm.out._schema) == 1  # three outs, one TensorList slot
    assert return_slots(torch.ops.aten.add.out._schema) == 1
    assert return_slots(torch.ops.aten._local_scalar_dense.default._schema) == 1
    assert return_slots(torch.ops.aten.sym_size.int._schema) == 1


def test_a_call_with_another_argument_count_is_refused_by_name() -> None:
    v = Values()
    x, sizes, dim = v.tensor((4, 6), data=X.clone()), v.value([3, 3]), v.value(1)
    outs = [v.tensor((4, 3)), v.tensor((4, 3))]
    out_list = v.tensor_list(outs)
    rv = v.build()
    with pytest.raises(RunnerError, match=r"split_with_sizes_copy.out got 6 arguments; its schema has 4 arguments "
                                          r"and 1 return slot"):
        kernel("aten::split_with_sizes_copy.out")(rv, (x, sizes, dim, out_list, out_list, out_list), "test")


def test_an_out_variants_return_slot_of_its_own_is_never_written() -> None:
    """ExecuTorch's codegen'd wrapper of an out variant writes only the out argument (codegen/gen.py)."""
    v = Values()
    a, b, alpha = v.tensor((2,), data=torch.ones(2)), v.tensor((2,), data=torch.ones(2)), v.value(1)
    out, slot = v.tensor((2,)), v.tensor((2,), data=torch.full((2,), 7.0))
    rv = v.build()
    held = rv.values[slot]
    kernel("aten::add.out")(rv, (a, b, alpha, out, slot), "test")
    assert torch.equal(rv.values[out], torch.full((2,), 2.0))
    assert rv.values[slot] is held and torch.equal(held, torch.full((2,), 7.0))


# --- resizing, as ExecuTorch's resize_tensor ---------------------------------------------------------------


def test_a_bounded_tensor_takes_a_smaller_shape_in_its_own_memory() -> None:
    v = Values()
    index = v.tensor((15, 4), BOUND)
    rv = v.build()
    before = rv.values[index].data_ptr()
    resized = rv.resize(index, (3, 4), "test")
    assert resized is rv.values[index] and tuple(resized.shape) == (3, 4) and resized.data_ptr() == before
    assert resized.stride() == (4, 1)


def test_a_resize_keeps_the_dim_order() -> None:
    v = Values()
    index = v.tensor((1, 8, 4, 4), BOUND, dim_order=(0, 2, 3, 1))  # channels last
    rv = v.build()
    assert rv.resize(index, (1, 8, 2, 2), "test").stride() == (32, 1, 16, 8)


@pytest.mark.parametrize("dynamism, shape, message", [
    (STATIC, (3, 4), r"static \[15, 4\] tensor; it cannot take shape \[3, 4\]"),
    (BOUND, (16, 4), r"holds at most 60 elements .* shape \[16, 4\] does not fit"),
    (BOUND, (60,), r"has rank 2; a kernel tried to give it shape \[60\]"),
])
def test_resizes_that_executorch_refuses_are_refused(dynamism: int, shape: tuple, message: str) -> None:
    v = Values()
    index = v.tensor((15, 4), dynamism)
    with pytest.raises(RunnerError, match=message):
        v.build().resize(index, shape, "test")


def test_a_resize_past_the_memory_a_value_holds_is_a_clear_error() -> None:
    # A MoveCall can put a smaller tensor's memory into a value planned larger.
    v = Values()
    index = v.tensor((15, 4), BOUND, data=torch.zeros(2, 4))
    with pytest.raises(RunnerError, match=r"value 0 cannot take shape \[3, 4\]: its memory holds 32 bytes"):
        v.build().resize(index, (3, 4), "test")


def test_a_torch_kernel_resizes_a_bounded_out_and_may_not_resize_a_static_one() -> None:
    v = Values()
    a, b, alpha = v.tensor((3,), data=torch.ones(3)), v.tensor((3,), data=torch.ones(3)), v.value(1)
    bounded, static = v.tensor((8,), BOUND), v.tensor((8,))
    rv = v.build()
    kernel("aten::add.out")(rv, (a, b, alpha, bounded, bounded), "test")
    assert torch.equal(rv.values[bounded], torch.full((3,), 2.0))
    with pytest.raises(RunnerError, match=r"static \[8\] tensor; it cannot take shape \[3\]"):
        kernel("aten::add.out")(rv, (a, b, alpha, static, static), "test")


def test_a_torch_kernel_result_is_laid_out_in_the_dim_order_of_its_out() -> None:
    v = Values()
    x = v.tensor((1, 2, 2, 2), data=torch.arange(8, dtype=torch.float32).reshape(1, 2, 2, 2))
    out = v.tensor((1, 2, 3, 3), BOUND, dim_order=(0, 2, 3, 1))
    rv = v.build()
    kernel("aten::relu.out")(rv, (x, out, out), "test")
    result = rv.values[out]
    assert result.stride() == (8, 1, 4, 2) and torch.equal(result, torch.arange(8.0).reshape(1, 2, 2, 2))


def test_the_h2d_copy_resizes_its_output_and_counts_the_bytes_of_the_current_shape() -> None:
    v = Values()
    src, out = v.tensor((2, 4), data=torch.ones(2, 4)), v.tensor((15, 4), BOUND)
    rv = v.build()
    rv.residence[out] = m.Device(m.DeviceType.CUDA, 0)
    kernel("et_copy::_h2d_copy.out")(rv, (src, out, out), "test")
    assert torch.equal(rv.values[out], torch.ones(2, 4))
    assert [e.nbytes for e in rv.ledger.events] == [2 * 4 * 4]  # not the 15 x 4 bound


def test_the_h2d_copy_takes_exactly_self_out_and_return_and_leaves_another_return_slot_alone() -> None:
    """The codegen'd wrapper checks the argument count and never writes the return slot (codegen/gen.py)."""
    v = Values()
    src, out, other = v.tensor((2,), data=torch.ones(2)), v.tensor((2,)), v.tensor((2,), data=torch.full((2,), 5.0))
    rv = v.build()
    rv.residence[out] = m.Device(m.DeviceType.CUDA, 0)
    held, residence = rv.values[other], rv.residence[other]
    kernel("et_copy::_h2d_copy.out")(rv, (src, out, other), "test")
    assert torch.equal(rv.values[out], torch.ones(2))
    assert rv.values[other] is held and torch.equal(held, torch.full((2,), 5.0)) and rv.residence[other] == residence
    for args in ((src, out), (src, out, out, out)):
        with pytest.raises(RunnerError, match=r"takes \(self, out, return\), got \d arguments"):
            kernel("et_copy::_h2d_copy.out")(rv, args, "test")


def test_a_dim_order_copy_resizes_its_output_to_the_source() -> None:
    v = Values()
    src, out = v.tensor((2, 4), data=torch.ones(2, 4)), v.tensor((15, 4), BOUND)
    args = (src, v.value(False), v.value(None), out, out)
    rv = v.build()
    kernel("dim_order_ops::_clone_dim_order.out")(rv, args, "test")
    assert torch.equal(rv.values[out], torch.ones(2, 4))


# --- prim ops (kernels/prim_ops/register_prim_ops.cpp) --------------------------------------------------------


@pytest.mark.parametrize("name, operands, want", [
    ("add.Scalar", (3, 4), 7), ("sub.Scalar", (3, 4.5), -1.5), ("mul.Scalar", (3, 4), 12),
    ("floordiv.Scalar", (-7, 2), -4), ("floordiv.Scalar", (7.5, 2.0), 3.0),  # Python's floor division
    ("floordiv.int", (-7, 2), -3), ("mod.int", (-7, 2), -1), ("mod.Scalar", (7, -2), 1),  # C++'s / and %
    ("truediv.Scalar", (7, 2), 3.5), ("eq.Scalar", (2, 2), True), ("lt.Scalar", (2, 1), False),
    ("neg.Scalar", (5,), -5), ("sym_max.Scalar", (3, 9), 9), ("sym_min.Scalar", (3, 9), 3),
    ("sym_float.Scalar", (3,), 3.0), ("sym_int.Scalar", (-2.7,), -2), ("sym_not.Scalar", (True,), False),
    ("sym_ite.Scalar", (False, 1, 2), 2), ("ceil.Scalar", (1.2,), 2), ("trunc.Scalar", (-1.7,), -1),
    ("round.Scalar", (2.5,), 2), ("round.Scalar", (3.5,), 4), ("round.Scalar", (-2.6,), -3),
])
def test_prim_ops_compute_what_executorch_computes(name: str, operands: tuple, want: Any) -> None:
    v = Values()
    args = tuple(v.value(x) for x in operands) + (v.value(0),)
    rv = v.build()
    kernel(f"executorch_prim::{name}")(rv, args, "test")
    assert rv.values[args[-1]] == want and type(rv.values[args[-1]]) is type(want)


def test_et_copy_index_grows_its_target_one_row_at_a_time() -> None:
    v = Values()
    target = v.tensor((4, 3), BOUND)
    rows = [v.tensor((3,), data=torch.full((3,), float(i))) for i in range(3)]
    positions = [v.value(i) for i in range(3)]
    rv = v.build()
    for row, position in zip(rows, positions):
        kernel("executorch_prim::et_copy_index.tensor")(rv, (target, row, position), "test")
    assert torch.equal(rv.values[target], torch.arange(3.0).repeat_interleave(3).reshape(3, 3))


def test_et_view_shares_memory_and_refuses_another_number_of_elements() -> None:
    v = Values()
    src, out = v.tensor((2, 3), data=torch.arange(6.0).reshape(2, 3)), v.tensor((3, 2))
    good, bad = v.value([3, -1]), v.value([4, 2])
    rv = v.build()
    kernel("executorch_prim::et_view.default")(rv, (src, good, out), "test")
    assert rv.values[out].shape == (3, 2) and rv.values[out].data_ptr() == rv.values[src].data_ptr()
    with pytest.raises(RunnerError, match=r"et_view of value 0 \[2, 3\] as \[4, 2\]"):
        kernel("executorch_prim::et_view.default")(rv, (src, bad, out), "test")


@pytest.mark.parametrize("name, sizes", [("executorch_prim::et_view.default", None),  # no arguments at all
                                         ("aten::copy_", (3,))])  # a source of another shape
def test_the_runners_own_kernels_fail_on_a_malformed_call_with_one_error_naming_them(name: str, sizes: Any) -> None:
    v = Values()
    args = () if sizes is None else (v.tensor((2,)), v.tensor(sizes))
    with pytest.raises(RunnerError, match=f"{name} cannot run on arguments"):
        kernel(name)(v.build(), args, "test")


def test_an_unknown_prim_op_is_an_error_naming_it() -> None:
    with pytest.raises(RunnerError, match="executorch_prim::frobnicate.Scalar"):
        kernel("executorch_prim::frobnicate.Scalar")


# --- the reference backend's inputs ------------------------------------------------------------------------


def test_a_reference_delegate_input_with_a_dynamic_dim_takes_any_size_there() -> None:
    spec_ = InputSpec.parse({"dtype": "float32", "shape": [1, None, 32]})
    assert spec_.mismatch(torch.zeros(1, 3, 32)) is None and spec_.mismatch(torch.zeros(1, 15, 32)) is None
    assert "expects torch.float32[1, '*', 32]" in spec_.mismatch(torch.zeros(2, 3, 32))
    assert spec_.mismatch(torch.zeros(1, 3)) is not None and spec_.mismatch(torch.zeros(1, 3, 32).long())


def test_a_reference_delegate_takes_scalar_inputs() -> None:
    length = InputSpec.parse({"scalar": "int"})
    assert length.mismatch(3) is None
    assert length.mismatch(True) is not None and length.mismatch(torch.zeros(1)) is not None
    assert InputSpec.parse({"scalar": "float"}).mismatch(3) is None


def test_a_reference_blob_naming_an_unknown_device_is_a_clear_error(tmp_path: Path) -> None:
    data = (EXAMPLES / "mlp_copy.pte").read_bytes()
    assert data.count(b'"target_device":"cuda:0"') == 1
    broken = tmp_path / "broken.pte"
    broken.write_bytes(data.replace(b'"target_device":"cuda:0"', b'"target_device":"cudq:0"'))
    with pytest.raises(RunnerError, match="reference backend blob names an unknown target device 'cudq:0'"):
        run_program(broken, simulate_devices=True)
