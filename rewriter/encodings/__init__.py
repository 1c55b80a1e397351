"""The runtime encodings ``rewrite`` writes, one module each, and the one registry that chooses among them.

* ``initial_data.py`` (ExecuTorch 1.6, the default): device memory with initial data, copied at load.
* ``first_call.py`` (ExecuTorch 1.5): a host constant copied once, on the first call, by a guarded prologue.

To add an encoding: a module with an ``Encoding`` subclass (``base.py`` says what each hook decides), registered
with ``register`` (here, in ``_builtin``, for one that ships).  Commands, the API, the config file, the gate and
every report then offer and name it through this module; nothing else changes (tests/test_encodings.py registers
a toy one to hold that true).  Choosing: ``encoding_for`` (a runtime as text or a ``Runtime``), once per request.
What a file needs: ``required_runtime``.
"""

from __future__ import annotations

from typing import Optional, Sequence, Union

from pte_devconst.program.executorch import method_labels
from pte_devconst.program.moves import MovedValue
from pte_devconst.schema import model as m

from .base import Encoding, EncodingCheck, Verifier
from pte_devconst.program.runtime import DEFAULT_RUNTIME, Runtime, RuntimeNeed

__all__ = ["DEFAULT_RUNTIME", "Encoding", "EncodingCheck", "Runtime", "RuntimeNeed", "Verifier", "encoding_for",
           "encoding_named", "encodings", "moved_by_encodings", "register", "required_runtime", "runtime_choices",
           "unregister"]

_REGISTERED: dict[Runtime, Encoding] = {}


def _builtin() -> None:
    """The encodings that ship (imported on first use: they import the plan's records, which import this)."""
    if _REGISTERED:
        return
    from .first_call import FirstCallEncoding
    from .initial_data import InitialDataEncoding

    for encoding in (FirstCallEncoding(), InitialDataEncoding()):
        _REGISTERED.setdefault(encoding.runtime, encoding)


def register(encoding: Encoding) -> None:
    """Offer ``encoding`` for its runtime (``--runtime``, the config's ``runtime``, the API's ``runtime=``)."""
    _builtin()
    if encoding.runtime in _REGISTERED:
        raise ValueError(f"an encoding for ExecuTorch {encoding.runtime.value} is registered already")
    _REGISTERED[encoding.runtime] = encoding


def unregister(encoding: Encoding) -> None:
    """Withdraw an encoding ``register`` added."""
    if _REGISTERED.get(encoding.runtime) is encoding:
        del _REGISTERED[encoding.runtime]


def encodings() -> tuple[Encoding, ...]:
    """Every registered encoding, oldest runtime first."""
    _builtin()
    return tuple(_REGISTERED[runtime] for runtime in sorted(_REGISTERED))


def runtime_choices() -> str:
    """``1.5, 1.6``: the runtimes an option or a config file may name."""
    return ", ".join(e.runtime.value for e in encodings())


def encoding_for(runtime: Union[None, str, Runtime] = None) -> Encoding:
    """The encoding that writes for ``runtime`` (None: the default); ``ValueError`` naming the choices when no
    encoding writes for it."""
    _builtin()
    if runtime is None:
        runtime = DEFAULT_RUNTIME
    found = Runtime.read(runtime) if isinstance(runtime, str) else runtime
    encoding = _REGISTERED.get(found) if found is not None else None
    if encoding is None:
        raise ValueError(f"unknown ExecuTorch runtime {str(runtime)!r} (choose one of: {runtime_choices()})")
    return encoding


def encoding_named(key: str) -> Encoding:
    """The registered encoding whose key is ``key`` ("": the default's), as a plan's edit names it."""
    if not key:
        return encoding_for(None)
    for encoding in encodings():
        if encoding.key == key:
            return encoding
    raise KeyError(f"no encoding {key!r} is registered")


def moved_by_encodings(before: m.ExecutionPlan, after: m.ExecutionPlan) -> list[MovedValue]:
    """What ``after`` keeps on a device that ``before`` did not, as each registered encoding recognises its own
    (``Encoding.moved``), newest encoding first: what the API hands ``validate`` (``program/moves.py:
    MovedReader``), so that a registered encoding is validated without the runner knowing it."""
    return [value for encoding in reversed(encodings()) for value in encoding.moved(before, after)]


def required_runtime(program: m.Program, labels: Optional[Sequence[str]] = None) -> RuntimeNeed:
    """The oldest runtime that loads ``program``: the first encoding's runtime, oldest first, that can load all of
    it, with what the older ones could not load.  Linear in its values per encoding."""
    if labels is None:
        labels = method_labels(program)[0]
    found = encodings()
    blocked = None
    for encoding in found:
        cannot = encoding.cannot_load(program, labels)
        if not cannot:
            return RuntimeNeed(encoding.runtime, *(blocked or ((), "")))
        blocked = (tuple(cannot), encoding.refuses)
    return RuntimeNeed(found[-1].runtime, *(blocked or ((), "")))
