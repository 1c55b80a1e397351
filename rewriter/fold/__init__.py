"""Folding: constants that the host transposes, views or casts before a device delegate reads them.

``aten.linear`` lowers to a ``permute_copy`` of the weight and a matmul.  A partitioner that takes the matmul
onto the device leaves the ``permute_copy`` on the host, so the plain rule (a constant read only by device
delegates) never applies: the delegate reads the kernel's result, computed and copied again on every call.
Folding computes such results once, offline, exactly as the runtime's portable kernels would, and stores them
as device-resident initial data (the encoding of a moved constant).  docs/design.md section 5 has the rules.

One module per job; the rest of the rewriter imports this package, never its modules' private names:

* ``shapes``: ``Strided`` and ``ShapeOps``, the table's operations on shapes (torch's view rules, pure Python);
* ``kernels``: ``FOLD_KERNELS``, the table of kernels that fold (a new folding kernel is one entry there);
* ``recipes``: ``FoldStep`` and ``FoldRecipe``, what a folded value's bytes are, and the growth bound;
* ``chains``: the chain finder (``method_folds``, called by ``analysis``), ``MethodFolds`` and
  ``removed_steps`` (which kernels a rewrite removes, for ``plan``);
* ``trace``: ``Tracer``, a value traced back to its constant from a program alone (``verify``, ``diff``);
* ``refusals``: the chains the data refuses to fold, read before planning (``rewrite --fold``, ``check --fold``);
* ``compute``: the folded bytes, computed with torch; imported only when something folds (never from here).

The package stands on ``method_context`` (readers, writers, the copy rule), never on ``analysis``, which
imports it: ``analysis -> fold -> method_context``.  Nothing here imports torch.
"""

from __future__ import annotations

from .chains import MAX_CHAIN, FoldChain, FoldNode, MethodFolds, PlainVerdict, method_folds, removed_steps
from .kernels import FLOATING, FOLD_KERNELS, INTEGRAL, FoldKernel, LiteralValue, Ops, apply_step
from .recipes import FOLD_FLOOR, FOLD_GROWTH, FoldRecipe, FoldStep, growth_problem, layout_of, recipe_of
from .refusals import NOT_JUDGED, fold_refusals, need_torch, torch_found
from .shapes import ShapeOps, Strided, Unfoldable, source_view
from .trace import Traced, Tracer

__all__ = [
    "FLOATING", "FOLD_FLOOR", "FOLD_GROWTH", "FOLD_KERNELS", "INTEGRAL", "MAX_CHAIN", "NOT_JUDGED", "FoldChain",
    "FoldKernel", "FoldNode", "FoldRecipe", "FoldStep", "LiteralValue", "MethodFolds", "Ops", "PlainVerdict",
    "ShapeOps", "Strided", "Traced", "Tracer", "Unfoldable", "apply_step", "fold_refusals", "growth_problem",
    "layout_of", "method_folds", "need_torch", "recipe_of", "removed_steps", "source_view", "torch_found",
]
