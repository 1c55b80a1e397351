"""The runtime encodings ``rewrite`` writes, one module each, and the one registry that chooses among them.

* ``initial_data.py`` (ExecuTorch 1.6, the default): device memory with initial data, copied at load.
* ``first_call.py`` (ExecuTorch 1.5): a host constant copied once, on the first call, by a guarded prologue.

The registry and the encodings' modules are the only code that names an encoding's mechanism; program/ states
the runtime's semantics (``program/once.py``: a run-once region; ``program/moves.py``: how bytes arrive), and every
other module asks an encoding (``tests/test_encodings.py`` holds that true).

To add an encoding: a module with an ``Encoding`` subclass (``base.py`` says what each hook decides), registered
with ``register`` (here, in ``_builtin``, for one that ships).  Commands, the API, the config file, the gate and
every report then offer and name it through this module; nothing else changes (tests/test_encodings.py registers
a toy one to hold that true).  Choosing: ``encoding_for`` (a runtime as text or a ``Runtime``), once per request.
What a file needs: ``required_runtime``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Sequence, Union

from pte_devconst.program.executorch import method_labels
from pte_devconst.program.moves import MovedValue
from pte_devconst.schema import model as m

from .base import Encoding, EncodingCheck, NeededTensor, RuntimeNeed, Verifier
from pte_devconst.program.runtime import DEFAULT_RUNTIME, Runtime

if TYPE_CHECKING:
    from ..model.plan_model import MethodEdit

__all__ = ["DEFAULT_RUNTIME", "Encoding", "EncodingCheck", "NeededTensor", "Runtime", "RuntimeNeed", "Verifier",
           "encoding_for", "encoding_named", "encodings", "moved_by_encodings", "register", "report_fields",
           "required_runtime", "runtime_choices", "unregister"]

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


def moved_by_encodings(before: m.ExecutionPlan, after: m.ExecutionPlan, *, devices_only: bool = True
                       ) -> list[MovedValue]:
    """What ``after`` keeps on a device that ``before`` did not, as each registered encoding recognises its own
    (``Encoding.moved``), newest encoding first: what the API hands ``validate`` (``program/moves.py:
    MovedReader``), so that a registered encoding is validated without the runner knowing it, and what ``diff``
    counts (``devices_only=False``: CPU buffers too)."""
    return [value for encoding in reversed(encodings())
            for value in encoding.moved(before, after, devices_only=devices_only)]


def report_fields(methods: Sequence[MethodEdit]) -> dict[str, object]:
    """Every registered encoding's own fields of a rewrite's JSON ``runtime`` object (``Encoding.report_fields``),
    oldest first."""
    return {key: value for encoding in encodings() for key, value in encoding.report_fields(methods).items()}


def required_runtime(program: m.Program, labels: Optional[Sequence[str]] = None) -> RuntimeNeed:
    """The oldest runtime that loads ``program``: the runtime of the newest encoding that finds in it what only its
    runtime loads (``Encoding.needs``), with those tensors and its name; else the oldest.  Linear in its values
    per encoding."""
    if labels is None:
        labels = method_labels(program)[0]
    found = encodings()
    for encoding in reversed(found):
        needed = encoding.needs(program, labels)
        if needed:
            return RuntimeNeed(encoding.runtime, tuple(needed), encoding.name)
    return RuntimeNeed(found[0].runtime)
