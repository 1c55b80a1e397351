"""Immutable mirror of the .ptd schema (schema/fbs/flat_tensor.fbs), generated like ``model.py``.

``DataSegment`` is the program's own record (the two schemas declare the same
table), and flat_tensor's ``NamedData`` is ``PtdNamedData`` (``codegen.RULES``).
"""

from __future__ import annotations

from .generated.flat_tensor_model import *  # noqa: F403
from .generated.flat_tensor_model import __all__  # noqa: F401 - re-exported: `from ptd_model import *`
