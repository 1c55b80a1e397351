"""``gc_paused``: run a function with Python's cyclic garbage collector paused.

Decoding, checking, encoding and analysing a program allocate hundreds of
thousands of small objects, none of them in a reference cycle. Each collection
those allocations trigger walks every live object, so the collector's cost grows
faster than the program: about a quarter of decoding a 100,000-value program,
and a third of analysing it (bench/RESULTS.md, section 4). Reference counting
still frees everything as usual while the collector is paused.

The collector's switch is global to the process: a thread running one of these
steps pauses it for every thread until the step ends.
"""

from __future__ import annotations

import functools
import gc
from typing import Any, Callable, TypeVar

_F = TypeVar("_F", bound=Callable[..., Any])


def gc_paused(function: _F) -> _F:
    """Decorator: pause the cyclic collector for the call (re-entrant: an inner call leaves it paused)."""

    @functools.wraps(function)
    def paused(*args: Any, **kwargs: Any) -> Any:
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            return function(*args, **kwargs)
        finally:
            if was_enabled:
                gc.enable()

    return paused  # type: ignore[return-value]
