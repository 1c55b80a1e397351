"""Which chains the data refuses to fold, read before planning: shared by ``rewrite --fold`` and ``check --fold``.

Kept apart from ``rewrite.py`` so that ``check`` (which must never load the writer) plans exactly as the
rewrite does.  Torch is looked for without being imported, and imported only for a chain that casts floats
to integers (``compute.py``).  It takes an analysis by what it reads of one (``Analysed``: each method's
folds), since ``analysis`` imports this package and not the other way.
"""

from __future__ import annotations

from typing import Optional, Protocol, Sequence

from pte_devconst.util.errors import PteDevconstError
from pte_devconst.schema.ptd_file import PtdFile
from pte_devconst.schema.pte_file import PteFile

from .chains import MethodFolds


class _HasFolds(Protocol):
    @property
    def folds(self) -> Optional[MethodFolds]: ...


class Analysed(Protocol):
    """What ``fold_refusals`` reads of an ``analysis.Analysis``: the folds of each method."""

    @property
    def methods(self) -> Sequence[_HasFolds]: ...


def torch_found() -> bool:
    """Whether torch is installed, found without importing it (a dry run computes nothing)."""
    import importlib.util  # only here: nothing else in the rewriter needs it

    try:
        return importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):  # torch set to None in sys.modules, or a broken installation
        return False


def need_torch() -> None:
    """Folded values are computed with torch (``compute.py``): refuse clearly, before writing, without it."""
    if not torch_found():
        raise PteDevconstError("rewrite --fold computes folded values with torch, which is not installed: "
                               "pip install 'pte-devconst[runner]'")


NOT_JUDGED = ("not judged: it casts floats to integers, and judging whether that is defined reads the data "
              "with torch, which is not installed (pip install 'pte-devconst[runner]')")


def fold_refusals(source: PteFile, ptd: Optional[PtdFile], analysis: Analysed, *, judge: bool = True
                  ) -> dict[tuple[int, int], str]:
    """Chains whose data the fold cannot compute as C++ defines it (a float cast to an integer type of NaN,
    inf or an out-of-range value), by (plan index, result value).  Reads data (and imports torch) only for
    chains that cast floats to integers; with ``judge=False`` (``check`` without torch) such a chain is
    refused as ``NOT_JUDGED`` rather than counted either way, so the gate never answers differently without
    saying so."""
    refusals: dict[tuple[int, int], str] = {}
    for method in analysis.methods:
        for chain in method.folds.chains if method.folds else ():
            if chain.problem is None and chain.casts_float_to_int:
                if not judge:
                    refusals[(chain.plan_index, chain.result)] = NOT_JUDGED
                    continue
                need_torch()
                from .compute import SourceBytes, cast_problem  # torch, only for such a chain

                problem = cast_problem(chain.recipe, SourceBytes(source, ptd))
                if problem:
                    refusals[(chain.plan_index, chain.result)] = problem
    return refusals
