"""Every sentence that says which runtime loads a file, which encoding a rewrite wrote, and how to get another:
composed here, once, from the registered encodings' own words (``name``, ``when``, ``option``, ``refuses``).

``inspect``, ``rewrite``, ``diff``, ``check`` (every format) and the hook read these; none words it itself.
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING, Optional

from pte_devconst.util.units import plural

from .encodings import DEFAULT_RUNTIME, Encoding, Runtime, RuntimeNeed, encodings

if TYPE_CHECKING:
    from .plan import RewritePlan


def _older(runtime: Runtime) -> Optional[Encoding]:
    """The newest encoding whose runtime is older than ``runtime`` (how to reach older runtimes), if any."""
    older = [e for e in encodings() if e.runtime < runtime]
    return older[-1] if older else None


def older_advice(need: RuntimeNeed, command: str = "") -> str:
    """``for a 1.5 runtime: --runtime 1.5``, the option after ``command`` (``pte-devconst rewrite ``) when given
    (empty: no older runtime is offered)."""
    older = _older(need.runtime)
    return f"for a {older.runtime.value} runtime: {command}{older.option}" if older is not None else ""


def loads_line(need: RuntimeNeed) -> str:
    """``inspect``: ``Loads in ExecuTorch >= 1.6 (<why>: 4 tensors); for a 1.5 runtime: pte-devconst rewrite
    --runtime 1.5.``"""
    if need.tensors:
        advice = older_advice(need, "pte-devconst rewrite ")
        return (f"Loads in {need.minimum} ({need.why}: {plural(len(need.tensors), 'tensor')})"
                + (f"; {advice}" if advice else "") + ".")
    return f"Loads in ExecuTorch {need.runtime.value} runtimes and newer."


def needs_phrase(need: Optional[RuntimeNeed]) -> str:
    """``ExecuTorch >= 1.6 (<why>)``: what a file needs, and why when an older runtime refuses it."""
    assert need is not None, "every plan and report says what loads its file"
    return f"{need.minimum} ({need.why})" if need.why else need.minimum


def output_clause(plan: "RewritePlan") -> str:
    """``rewrite``: what loads the output and how it was encoded, e.g. ``needs ExecuTorch >= 1.6 (<its name>; for a
    1.5 runtime: --runtime 1.5)`` or ``needs ExecuTorch >= 1.5 (<its name>; --runtime 1.6 copies at load instead,
    for 1.6 runtimes)``: each encoding's own words."""
    need = plan.output_need
    assert need is not None, "make_plan says what loads the output"
    target = plan.options.encoding
    if need.runtime > target.runtime:  # the chosen encoding could not take everything
        return (f"needs {need.minimum} ({need.why}: {plural(len(plan.unconverted), 'tensor')} the "
                f"{target.runtime.value} encoding cannot take)")
    if need.runtime < target.runtime:  # nothing in the file needs what the target runtime adds
        return f"needs {need.minimum}"
    if need.tensors and _older(need.runtime) is not None:
        return f"needs {need.minimum} ({target.name}; {older_advice(need)})"
    newer = [e for e in encodings() if e.runtime > target.runtime]
    if newer:
        return (f"needs {need.minimum} ({target.name}; {newer[0].option} copies {newer[0].when} instead, for "
                f"{newer[0].runtime.value} runtimes)")
    return f"needs {need.minimum} ({target.name})"


def conversion_phrase(plan: "RewritePlan") -> str:
    """``4 constants converted to <its name> (for 1.5)``: a plan that changes the encoding of constants
    another encoding held (empty: it converts none)."""
    count = plan.converted
    if not count:
        return ""
    target = plan.options.encoding
    return f"{plural(count, 'constant')} converted to {target.name} (for {target.runtime.value})"


def fix_command(runtime: Runtime, fold: bool = False, file: str = "FILE") -> str:
    """The rewrite that fixes a finding for a project that deploys ``runtime``: ``--runtime`` whenever it is not
    the default."""
    option = f"--runtime {runtime.value} " if runtime != DEFAULT_RUNTIME else ""
    where = file if file == "FILE" else shlex.quote(file)
    return f"pte-devconst rewrite {option}{'--fold ' if fold else ''}--in-place {where}"


def runtime_reason(target: Encoding, cannot: Optional[str] = None) -> str:
    """Why a tensor fails a project that deploys ``target``'s runtime (``check``'s runtime finding): ``only
    ExecuTorch >= 1.6 loads <what the target refuses>; rewrite --runtime 1.5 copies it once, <when>, instead``
    (``cannot``: why the project's encoding cannot take it)."""
    runtime = target.runtime
    refused = target.refuses or "it"
    newer = [e for e in encodings() if e.runtime > runtime]
    head = f"only {newer[0].runtime.minimum} loads {refused}" if newer else f"{runtime.minimum} cannot load {refused}"
    if cannot is None:
        return f"{head}; rewrite {target.option} copies it once, {target.when}, instead"
    return f"{head}; rewrite {target.option} cannot re-encode it: {cannot}"
