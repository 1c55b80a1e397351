"""Module attributes imported on first use (PEP 562), so importing a package costs nothing up front.

Start-up time matters here (``pte-devconst --help`` must not load the writer, the
runner or torch).  The packages that export names from their ``__init__`` do it this way: ``pte_devconst``
(the API), ``schema`` and ``rewriter``; the others export nothing there (import their modules).
"""

from __future__ import annotations

import importlib
from typing import Any, Callable, Mapping


def lazy_exports(package: str, exports: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` that loads ``name`` from ``package.<exports[name]>`` when first asked for."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{module}"), name)

    return __getattr__
