"""ExecuTorch's names for what a program does, in one place: the runtime's conventions above the format.

The .fbs says a kernel has a name; what the name *means* is ExecuTorch's: which kernel copies host to device,
which are the dim-order and prim ops, what a nameless or repeated method is called.  Every module that needs
one of these asks here, so each is spelled once.  (What the format itself needs to be read, a scalar type's
element size and a delegate's device spec, is in ``schema/scalar_types.py`` and ``schema/devices.py``.)
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Optional

from pte_devconst.util.units import listing

if TYPE_CHECKING:
    from pte_devconst.schema.generated.program_model import Program

__all__ = ["H2D_COPY", "D2H_COPY", "COPY_KERNELS", "TO_DIM_ORDER_COPY", "CLONE_DIM_ORDER", "EMPTY_DIM_ORDER",
           "PRIM_PREFIX", "ET_COPY_INDEX", "method_name", "method_labels"]


# --- the copy kernels that copy style puts between host memory and a device delegate ---------------------------
H2D_COPY = "et_copy::_h2d_copy.out"
D2H_COPY = "et_copy::_d2h_copy.out"
COPY_KERNELS = frozenset({H2D_COPY, D2H_COPY})

# ExecuTorch's dim-order kernels (what the exporter writes instead of aten's memory-format ones) and prim ops.
TO_DIM_ORDER_COPY = "dim_order_ops::_to_dim_order_copy.out"
CLONE_DIM_ORDER = "dim_order_ops::_clone_dim_order.out"
EMPTY_DIM_ORDER = "dim_order_ops::_empty_dim_order.out"
PRIM_PREFIX = "executorch_prim::"
ET_COPY_INDEX = PRIM_PREFIX + "et_copy_index.tensor"
# The view kernel the exporter writes for a view it cannot elide (a dynamic shape): its out points at self's bytes.
ET_VIEW = (PRIM_PREFIX + "et_view", PRIM_PREFIX + "et_view.default")


# --- methods ----------------------------------------------------------------------------------------------------
def method_name(name: Optional[str], plan_index: int) -> str:
    """What a method is called in reports: its name, or ``plan<i>`` when it has none."""
    return name or f"plan{plan_index}"


def method_labels(program: "Program") -> tuple[list[str], tuple[str, ...]]:
    """(a label per plan, notes): the name, or ``name (plan i)`` where several plans share it.

    ExecuTorch finds a method by name and takes the first plan with it (``get_execution_plan`` in
    runtime/executor/program.cpp), so a later plan of the same name can never be loaded.
    """
    names = [method_name(plan.name, i) for i, plan in enumerate(program.execution_plan or ())]
    plans_of: dict[str, list[int]] = defaultdict(list)
    for i, name in enumerate(names):
        plans_of[name].append(i)
    labels = [f"{name} (plan {i})" if len(plans_of[name]) > 1 else name for i, name in enumerate(names)]
    taken: set[str] = set()
    for i, label in enumerate(labels):  # a plan may be *named* like another's label (``forward (plan 1)``)
        candidate, k = label, 1
        while candidate in taken:
            candidate = f"{names[i]} [plan {i}]" + (f" #{k}" if k > 1 else "")
            k += 1
        taken.add(candidate)
        labels[i] = candidate
    notes = []
    for name, plans in plans_of.items():
        if len(plans) > 1:
            shown = listing(map(str, plans), 8)
            notes.append(f"{len(plans)} methods are named {name!r} (plans {shown}); ExecuTorch finds "
                         f"methods by name and always loads plan {plans[0]}, so the others cannot be run")
    return labels, tuple(notes)
