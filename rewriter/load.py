"""Opening a program (and its .ptd) for analysis: what ``inspect``, ``check`` and ``rewrite`` share.

Kept apart from ``rewrite.py`` so that commands which only analyse never load
the writer, the apply step or the self-check.

Paths arrive resolved: which .ptd goes with a program (the .ptd rule, ``pte_devconst.paths``) is decided
by the API layer above, which passes it down explicitly; this layer never guesses a file.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from dataclasses import replace
import os
from typing import Iterator, Optional

from pte_devconst.program.delegate_blobs import call_site_mismatches, declared_splits
from pte_devconst.util.errors import PteDevconstError
from pte_devconst.schema.ptd_file import PtdFile, open_ptd
from pte_devconst.schema.pte_file import PteFile, ProgramBytes, open_pte

from .model.analysis import Analysis, ExternalData, analyze_program


def external_data(ptd: PtdFile) -> ExternalData:
    """The keys and tensor layouts of a .ptd, as analysis needs them: the first entry of a repeated key, and
    which keys repeat.

    ``FlatTensorDataMap::get_named_data`` finds a key by a linear search and stops at the first match
    (extension/flat_tensor/flat_tensor_data_map.cpp), so a later entry of the same key is never used.
    """
    layouts = {}
    for key in ptd.keys():
        layout = ptd.entry(key).tensor_layout  # type: ignore[union-attr]
        layouts[key] = None if layout is None else layout.layout_key
    counts = Counter(e.key for e in ptd.flat_tensor.named_data or ())
    return ExternalData(layouts, frozenset(key for key, n in counts.items() if n > 1 and key is not None))


def analyze_opened(source: PteFile, data: Optional[PtdFile], *, host_placement: bool = False) -> Analysis:
    """The analysis of an opened program, with what the delegates' blobs declare of their calls (their split into
    inputs and outputs) and a note for each delegate whose calls disagree with it (``program/delegate_blobs.py``:
    read from the blobs, which ``analyze_program`` does not see)."""
    program = source.program
    declared = declared_splits(program, source.delegate_blob)
    analysis = analyze_program(program, external_data(data) if data else None, host_placement=host_placement,
                               declared=declared)
    mismatches = call_site_mismatches(program.execution_plan or (), [method.label for method in analysis.methods],
                                      declared)
    return replace(analysis, notes=analysis.notes + tuple(mismatches)) if mismatches else analysis


def analyze_file(path: str | os.PathLike[str], ptd: Optional[str | os.PathLike[str]] = None, *,
                 host_placement: bool = False) -> Analysis:
    """Verdicts for every constant of a .pte (and of ``ptd``, its external constants' data, when given)."""
    with opened(path, ptd) as (source, data):
        return analyze_opened(source, data, host_placement=host_placement)


@contextlib.contextmanager
def opened(path: "str | os.PathLike[str] | ProgramBytes", ptd: Optional[str | os.PathLike[str]] = None
           ) -> Iterator[tuple[PteFile, Optional[PtdFile]]]:
    """Open a .pte (a file or a program in memory) and, when given, its .ptd; both are closed on exit.

    An error raised while they are open (the analysis refusing the program, say) that names no file names
    the program: every command's error line says which file it is about.
    """
    with open_pte(path) as source:
        try:
            if ptd is None:
                yield source, None
                return
            with open_ptd(ptd) as data:
                yield source, data
        except PteDevconstError as error:
            # a program in memory is named by its name (os.fspath would give its bytes)
            raise error.with_file(path.name if isinstance(path, ProgramBytes) else os.fspath(path))
