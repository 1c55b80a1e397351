"""``validate``'s result, whichever engine ran the two programs: one record, one verdict rule, one JSON.

Two engines run a validation: the project's torch runner (``validate.py``: simulated or real devices, every copy
counted, the delegate boundaries compared) and the installed ExecuTorch runtime (``executorch_engine.py``: both
programs flipped to the CPU, outputs bit for bit, each copy made once probed).  Both return a ``ValidationResult``:
per method (``MethodValidation``) what moved and the ``Check`` rows, and the ``Verdict`` those say, with its exit
code.  What only one engine measures is optional in it: the runner's runs of each method (per call, at load, at
the delegate boundaries: ``MethodValidation.runs``), and the runtime's version, flips and probes (``EngineFacts``,
``ValidationResult.engine``).  The JSON is one document for both (``cli/report.schema.json``: ``validate`` and
``validate_engine``), each engine's facts in their fields.
"""

from __future__ import annotations

from dataclasses import field
from enum import Enum
from typing import Any, Optional, Sequence

from pte_devconst.program.moves import AT_LOAD, Arrival
from pte_devconst.util.exit_code import ExitCode
from pte_devconst.util.named_enum import NamedEnum
from pte_devconst.util.record import record
from pte_devconst.util.units import plural

from .profiling import ProfiledCopies
from .run import RunResult
from .transcript import BoundaryDifference, Resident

MAX_DIFFERENCES_IN_JSON = 100
NOTHING_MOVED = ("no constant of the first program lives in device memory in the second, so there is no rewrite "
                 "to validate (is the second file the first one's rewrite?)")
# Said instead when the two files hold the same bytes: a rewrite that can move nothing writes such a copy.
NOTHING_MOVED_IDENTICAL = ("the two files hold the same program, byte for byte, so there is no rewrite to validate "
                           "(rewrite writes an identical copy where nothing can move; inspect says why each "
                           "constant stays)")
# The report's fields in the order the JSON gives them; each engine fills those it has (``_ordered``).
REPORT_FIELDS = ("original", "rewritten", "engine", "runtime", "passed", "verdict", "exit_code", "devices", "calls",
                 "delegates", "flip", "probed_copies", "opaque_delegates", "warnings", "tolerance", "skipped_methods",
                 "methods")
METHOD_FIELDS = ("method", "passed", "bit_identical_required", "opaque_backends", "delegates", "caller_memory",
                 "moved_constants", "load_h2d_bytes", "device_peak_bytes", "calls", "moved", "boundary", "checks",
                 "output_tolerances")


class Status(str, Enum):
    PASS = "pass"
    FAIL = "fail"
    SKIPPED = "skipped"  # not checked, for the reason in the detail; never fails validate


class Verdict(NamedEnum):
    """What a validation says in one word, with its exit code (docs/cli.md, "Exit codes")."""

    PASS = "pass"  # every check passed, and something moved
    FAIL = "fail"  # a check failed
    NOTHING_MOVED = "nothing moved"  # no check failed, but nothing moved: there is no rewrite to vouch for

    @property
    def exit_code(self) -> ExitCode:
        return {Verdict.PASS: ExitCode.OK, Verdict.FAIL: ExitCode.FINDINGS}.get(self, ExitCode.UNKNOWN)


@record
class Check:
    name: str
    status: Status
    detail: str

    @classmethod
    def of(cls, name: str, ok: bool, detail: str) -> "Check":
        return cls(name, Status.PASS if ok else Status.FAIL, detail)

    @property
    def passed(self) -> bool:
        """False only for a failed check: a skipped one does not fail validate."""
        return self.status is not Status.FAIL

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status.value, "passed": self.passed, "detail": self.detail}


@record
class MovedConstant:
    method: str
    value: int
    name: Optional[str]
    device: str
    nbytes: int
    folded: bool = False  # a value the original computed on the host from constants (or a new value)
    holder: int = -1  # the rewrite's value that holds it in device memory (-1: ``value`` itself)
    arrival: Arrival = AT_LOAD  # how it reaches its device (program/moves.py: the file says which encoding)
    reencoded: bool = False  # resident in the original too: only the encoding changed

    @property
    def held_by(self) -> int:
        return self.value if self.holder < 0 else self.holder

    @property
    def resident(self) -> Resident:
        return Resident(self.device, self.folded, self.value)

    @property
    def kind(self) -> str:
        if self.reencoded:
            return "re-encoded"
        return "folded" if self.folded else "moved"

    def to_json(self) -> dict[str, Any]:
        return {"value": self.value, "name": self.name, "device": self.device, "nbytes": self.nbytes,
                "kind": self.kind, "held_by": self.held_by, "copied": self.arrival.when}


@record
class CallComparison:
    """One call of one method, before and after."""

    index: int
    h2d_before: int
    h2d_after: int
    moved_bytes_copied_before: int  # what the original copied this call of the moved or folded values
    d2h_before: int
    d2h_after: int
    wall_s_before: float
    wall_s_after: float
    max_abs_diff: float
    profiled_before: Optional[ProfiledCopies] = None  # torch.profiler's memcpy totals (--profile, real GPU)
    profiled_after: Optional[ProfiledCopies] = None
    derived_before: int = 0  # H2D bytes computed from constants alone (runner/derivation.py)
    derived_after: int = 0

    def to_json(self) -> dict[str, Any]:
        profiled = None
        if self.profiled_before is not None or self.profiled_after is not None:
            profiled = {"before": self.profiled_before.to_json() if self.profiled_before else None,
                        "after": self.profiled_after.to_json() if self.profiled_after else None}
        return {"call": self.index, "h2d_bytes": {"before": self.h2d_before, "after": self.h2d_after,
                                                  "moved_constants_before": self.moved_bytes_copied_before,
                                                  "constant_derived_before": self.derived_before,
                                                  "constant_derived_after": self.derived_after},
                "d2h_bytes": {"before": self.d2h_before, "after": self.d2h_after},
                "wall_s": {"before": self.wall_s_before, "after": self.wall_s_after},
                "max_abs_diff": self.max_abs_diff, "profiler": profiled}


@record
class Boundary:
    """The delegate-boundary comparison of one method: how much was compared and every difference."""

    delegate_calls: int
    arguments: int
    differences: list[BoundaryDifference]

    def to_json(self, method: str) -> dict[str, Any]:
        return {"delegate_calls": self.delegate_calls, "arguments": self.arguments,
                "differences": [{**d.to_json(), "line": d.line(method)}
                                for d in self.differences[:MAX_DIFFERENCES_IN_JSON]],
                "differences_total": len(self.differences)}


@record
class Tolerance:
    """How one output is compared when it need not be bit-identical: exactly, or within ``rtol``/``atol``."""

    dtype: str
    rtol: float = 0.0
    atol: float = 0.0
    exact: bool = False  # integer and bool outputs (and dtypes torch gives no tolerance): equal values
    given: bool = False  # --rtol/--atol, not the dtype's default

    def describe(self) -> str:
        if self.exact:
            return f"{self.dtype} exactly"
        source = "given" if self.given else "dtype default"
        return f"{self.dtype} within rtol={self.rtol:g}, atol={self.atol:g} ({source})"

    def to_json(self) -> dict[str, Any]:
        if self.exact:
            source = "exact"
        else:
            source = "given" if self.given else "dtype default"
        return {"dtype": self.dtype, "exact": self.exact, "rtol": None if self.exact else self.rtol,
                "atol": None if self.exact else self.atol, "source": source}


def name_at(names: Sequence[Optional[str]], position: int) -> Optional[str]:
    """The name of output ``position`` (an ETRecord's), None where it has none."""
    return names[position] if 0 <= position < len(names) else None


@record
class MethodValidation:
    """One method of a validation, whichever engine ran it: what moved and the checks.  What the runner measured of
    the two runs (each call, the load, the delegate boundaries, the runs themselves) is in the fields after
    ``checks``; the runtime engine measures none of it and leaves them at their defaults (``runs`` is None)."""

    method: str
    moved: list[MovedConstant]
    checks: list[Check]
    bit_identical_required: bool = True  # the runtime engine compares bit for bit
    calls: list[CallComparison] = field(default_factory=list)
    load_h2d_before: int = 0
    load_h2d_after: int = 0
    boundary: Boundary = field(default_factory=lambda: Boundary(0, 0, []))
    original: Optional[RunResult] = field(default=None, repr=False)
    rewritten: Optional[RunResult] = field(default=None, repr=False)
    opaque_backends: list[str] = field(default_factory=list)  # their outputs are stand-ins
    tolerances: list[tuple[int, Tolerance]] = field(default_factory=list)  # (output, how it compares)
    output_names: tuple[Optional[str], ...] = ()  # the user's name of each output (an ETRecord's), None if unknown

    @property
    def passed(self) -> bool:
        return all(check.passed for check in self.checks)

    @property
    def runs(self) -> Optional[tuple[RunResult, RunResult]]:
        """The runner's runs of the original and the rewrite; None where the runtime engine ran the method."""
        if self.original is None or self.rewritten is None:
            return None
        return self.original, self.rewritten

    def difference_lines(self) -> list[str]:
        return [d.line(self.method) for d in self.boundary.differences]

    def to_json(self, calls: int) -> dict[str, Any]:
        """The method's rows, and what its engine measured: the runner's runs, or the runtime's counts (``calls``
        per program, as every method of the pair ran)."""
        runs = self.runs
        measured = {"calls": calls, "moved": len(self.moved)} if runs is None else self._runs_json(*runs)
        return _ordered({"method": self.method, "passed": self.passed, **measured,
                         "checks": [c.to_json() for c in self.checks]}, METHOD_FIELDS)

    def _runs_json(self, original: RunResult, rewritten: RunResult) -> dict[str, Any]:
        return {
            "bit_identical_required": self.bit_identical_required, "opaque_backends": list(self.opaque_backends),
            "delegates": {"original": [d.to_json() for d in original.delegates],
                          "rewritten": [d.to_json() for d in rewritten.delegates]},
            "caller_memory": {"original": [c.to_json() for c in original.caller_memory],
                              "rewritten": [c.to_json() for c in rewritten.caller_memory]},
            "moved_constants": [c.to_json() for c in self.moved],
            "load_h2d_bytes": {"before": self.load_h2d_before, "after": self.load_h2d_after},
            "device_peak_bytes": {"before": original.device_peak_bytes, "after": rewritten.device_peak_bytes},
            "calls": [c.to_json() for c in self.calls],
            "boundary": self.boundary.to_json(self.method),
            "output_tolerances": [{"output": position, "name": name_at(self.output_names, position),
                                   "bit_identical": self.bit_identical_required, **tolerance.to_json()}
                                  for position, tolerance in self.tolerances],
        }


@record
class FlipChanges:
    """What a flip to the CPU changed in one program (``executorch_engine.flip``), for the report."""

    buffers: int  # planned buffers that were on a device
    tensors: int  # tensors whose device tag said a device
    copies: int  # et_copy kernels made host copies (instructions)

    def describe(self) -> str:
        return (f"{plural(self.buffers, 'device buffer')} to host memory, {plural(self.tensors, 'tensor')} "
                f"tagged CPU, {plural(self.copies, 'device copy', 'device copies')} made host copies")

    def to_json(self) -> dict[str, int]:
        return {"buffers": self.buffers, "tensors": self.tensors, "copies": self.copies}


@record
class EngineFacts:
    """What ``validate --engine executorch`` ran: the installed runtime, the backends it ran for real, what the flip
    changed in each program, and how many copies made once became accumulating probes."""

    runtime: str  # the installed executorch's version
    delegates: tuple[str, ...]
    flip_original: FlipChanges
    flip_rewritten: FlipChanges
    probed: int  # copies made once turned into accumulating adds
    probed_copy: str = "run-once copy"  # what reports call one of them (the encoding's word)

    def to_json(self) -> dict[str, Any]:
        return {"engine": "executorch", "runtime": {"executorch": self.runtime}, "delegates": list(self.delegates),
                "flip": {"original": self.flip_original.to_json(), "rewritten": self.flip_rewritten.to_json()},
                "probed_copies": self.probed}


@record
class ValidationResult:
    """What ``validate`` found for one pair, whichever engine ran it (``engine``: None for the runner)."""

    original: str
    rewritten: str
    simulated: bool  # the runner's devices (the runtime engine runs both programs on the CPU: False)
    calls: int  # per program and method
    methods: list[MethodValidation]
    skipped_methods: list[tuple[str, str]] = field(default_factory=list)  # (method, why it was not run)
    warnings: list[str] = field(default_factory=list)
    opaque_forced: bool = False  # --opaque-delegates
    rtol: Optional[float] = None  # given; None: each floating dtype's default
    atol: Optional[float] = None
    engine: Optional[EngineFacts] = None  # --engine executorch: the installed runtime ran both programs
    identical: bool = False  # the two files hold the same bytes (looked at only when nothing moved)

    @property
    def why_nothing_moved(self) -> str:
        """What the NOTHING MOVED verdict says of this pair (its words, for a renderer)."""
        return NOTHING_MOVED_IDENTICAL if self.identical else NOTHING_MOVED

    @property
    def passed(self) -> bool:
        """No check failed (``verdict`` also says whether anything moved)."""
        return all(method.passed for method in self.methods)

    @property
    def verdict(self) -> Verdict:
        if not self.passed:
            return Verdict.FAIL
        return Verdict.PASS if any(mv.moved for mv in self.methods) else Verdict.NOTHING_MOVED

    def to_json(self) -> dict[str, Any]:
        ran = self.engine.to_json() if self.engine is not None else {
            "devices": "simulated" if self.simulated else "real",
            "opaque_delegates": "all" if self.opaque_forced else "missing executors",
            "tolerance": {"rtol": self.rtol, "atol": self.atol,
                          "rule": "integer and bool outputs exactly; floating outputs within rtol/atol when given, "
                                  "else torch.testing.assert_close's defaults for their dtype"}}
        return _ordered({
            "original": self.original, "rewritten": self.rewritten, "passed": self.passed,
            "verdict": self.verdict.value, "exit_code": int(self.verdict.exit_code), "calls": self.calls, **ran,
            "warnings": list(self.warnings),
            "skipped_methods": [{"method": name, "reason": why} for name, why in self.skipped_methods],
            "methods": [mv.to_json(self.calls) for mv in self.methods]}, REPORT_FIELDS)


def _ordered(document: dict[str, Any], order: Sequence[str]) -> dict[str, Any]:
    """``document`` with its fields in the report's ``order`` (every field is in it)."""
    assert set(document) <= set(order), sorted(set(document) - set(order))
    return {key: document[key] for key in order if key in document}
