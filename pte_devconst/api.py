"""The Python API: what the command line does, as plain functions returning the objects it renders.

An export script can call it right after ``to_executorch()``::

    from pte_devconst import analyze, rewrite, check

    result = rewrite("model.pte")            # writes model.devconst.pte
    assert check([result.output]).passed     # nothing is copied per call any more

Nothing here imports torch except ``run`` and ``validate``, which execute programs (and ``rewrite`` with
``fold=True``, to compute folded values).  The command line calls these functions and renders their results;
the file rules (``paths``) are applied here and the lower layers get explicit paths.
Errors are ``pte_devconst.schema.errors.PteDevconstError`` (one readable line).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Optional, Sequence, Union

from pte_devconst.schema.errors import PteDevconstError
from pte_devconst.schema.model import Device
from pte_devconst.schema.named_enum import NamedEnum

if TYPE_CHECKING:  # only for annotations: keep `import pte_devconst.api` light
    from pte_devconst.rewriter.diff import ProgramDiff
    from pte_devconst.rewriter.inventory import ProgramSummary
    from pte_devconst.rewriter.plan import FoldGain, RewriteOptions
    from pte_devconst.rewriter.rewrite import RewriteResult
    from pte_devconst.runner.run import RunResult
    from pte_devconst.runner.validate import ValidationResult

PathLike = Union[str, "os.PathLike[str]"]
DeviceLike = Union[str, Device]

__all__ = ["analyze", "inspect", "rewrite", "diff", "check", "run", "validate", "programs", "expand_paths",
           "parse_devices", "CheckReport", "CheckStatus", "FileCheck", "Finding", "InspectReport", "Programs"]

def parse_devices(devices: Optional[Iterable[DeviceLike]], option: str = "devices") -> Optional[frozenset[Device]]:
    """``["cuda:0,cuda:1", Device(1, 1)]`` -> a frozenset of non-CPU devices; None stays None (every device)."""
    if devices is None:
        return None
    chosen = set()
    for item in devices:
        for part in [item] if isinstance(item, Device) else str(item).split(","):
            try:
                device = part if isinstance(part, Device) else Device.parse(part)
            except ValueError as error:
                raise PteDevconstError(f"{option}: {error}") from None
            if device.is_cpu:
                raise PteDevconstError(f"{option}: constants only move to non-CPU devices (e.g. cuda:0)")
            chosen.add(device)
    return frozenset(chosen)


def analyze(pte: PathLike, ptd: Optional[PathLike] = None) -> "ProgramSummary":
    """What ``inspect`` shows: methods, delegates, buffers, segments and every constant's verdict.

    External constants are judged with ``ptd``, else ``NAME.ptd`` next to ``NAME.pte``; without data
    a constant its readers would move has the verdict ``unknown: ...``.
    """
    from pte_devconst.paths import data_for
    from pte_devconst.rewriter.inventory import summarize
    from pte_devconst.rewriter.load import analyze_opened, opened

    with opened(pte, data_for(pte, ptd)) as (source, data):
        return summarize(source, analyze_opened(source, data))


@dataclass(frozen=True)
class InspectReport:
    """What ``inspect`` shows of one program: its summary, the data used, and what the runtime would make of it."""

    summary: "ProgramSummary"
    ptd: Optional[str]
    unknown_constants: int
    load_refusal: Optional[str]
    notes: tuple[str, ...]
    fold_gain: Optional["FoldGain"] = None  # what rewrite --fold would move beyond a plain rewrite

    @property
    def ptd_hint(self) -> str:
        """How to give this program its data (``put model.ptd next to it or pass --ptd FILE.ptd``)."""
        from pte_devconst.paths import ptd_hint

        return ptd_hint(self.summary.path)

    def to_json(self) -> dict[str, Any]:
        """``inspect``'s JSON document for this program (cli/report.schema.json)."""
        from pte_devconst.schema.jsonable import to_jsonable

        gain = self.fold_gain
        return {"file": to_jsonable(self.summary), "ptd": self.ptd, "unknown_constants": self.unknown_constants,
                "load_refusal": self.load_refusal, "notes": list(self.notes),
                "fold_hint": None if gain is None else {"tensors": gain.tensors, "bytes_per_call": gain.bytes_per_call}}


def inspect(pte: PathLike, ptd: Optional[PathLike] = None) -> InspectReport:
    """What ``inspect`` shows: ``analyze``'s summary, with the data used, the runtime's refusal and notes.

    ``ptd`` is the program's data, else ``NAME.ptd`` next to ``NAME.pte`` (the .ptd rule).
    """
    from pte_devconst.paths import data_for
    from pte_devconst.rewriter.inventory import summarize
    from pte_devconst.rewriter.load import analyze_opened, opened
    from pte_devconst.rewriter.plan import safe_fold_gain

    with opened(pte, data_for(pte, ptd)) as (source, data):
        analysis = analyze_opened(source, data)
        return InspectReport(summarize(source, analysis), data.path if data else None, len(analysis.unknown),
                             source.load_refusal, analysis.notes, safe_fold_gain(source.program, analysis))


@dataclass(frozen=True)
class Programs:
    """The programs a command line names, in argument order, each with its .ptd (``programs``)."""

    items: tuple[Union[Path, str], ...]  # a program (Path) or a problem (str: a pattern that matched nothing)
    data: Mapping[Path, Path]  # each program's .ptd, where it has one
    single: bool  # one argument that names one file: its result alone, its errors as they are
    left_out: tuple[str, ...] = ()  # inputs not taken, and why

    @property
    def paths(self) -> list[Path]:
        return [item for item in self.items if isinstance(item, Path)]


def programs(files: Iterable[PathLike], ptd: Iterable[PathLike] = (), *, skip_rewrites: bool = False) -> Programs:
    """Expand files, glob patterns and folders into programs and pair each with its .ptd.

    A ``ptd`` entry pairs by path (``a/m.ptd`` with ``a/m.pte``; ``PROGRAM.pte=DATA.ptd`` explicitly; a single
    one with a single program); one that pairs with nothing is refused (PteDevconstError).  ``skip_rewrites``
    leaves out an input that is another input's default output (``models/*.pte`` after a first rewrite also
    matches ``net.devconst.pte``, which is ``net.pte``'s rewrite, not a program to rewrite again).
    """
    from pte_devconst.paths import default_output, expand, identity, names_one_file, paired_or_refused

    arguments, given = list(files), list(ptd)
    if len(arguments) == 1 and names_one_file(arguments[0]):
        file = Path(arguments[0])
        return Programs((file,), paired_or_refused([file], given), True)
    items = expand(arguments)
    left_out: list[str] = []
    if skip_rewrites and len(items) > 1:
        outputs = {identity(default_output(i)) for i in items if isinstance(i, Path)}
        kept = [i for i in items if not isinstance(i, Path) or identity(i) not in outputs]
        left_out = [f"{i}: skipped, it is the rewrite of another input" for i in items if i not in kept]
        items = kept
    return Programs(tuple(items), paired_or_refused([i for i in items if isinstance(i, Path)], given), False,
                    tuple(left_out))


def rewrite(pte: PathLike, output: Optional[PathLike] = None, *, ptd: Optional[PathLike] = None,
            devices: Optional[Iterable[DeviceLike]] = None, min_bytes: int = 0, dry_run: bool = False,
            in_place: bool = False, fsync: bool = True, verify: Optional[str] = None, fold: bool = False,
            duplicate_shared: bool = False, progress: Optional[Callable[[int, int], None]] = None
            ) -> "RewriteResult":
    """Move every eligible constant into device memory with initial data (what ``rewrite`` does).

    Writes ``output`` (default ``<stem>.devconst.pte`` next to ``pte``) atomically and re-reads it
    before returning; ``dry_run`` only plans.  External constants need ``ptd`` (default: ``NAME.ptd``
    next to ``NAME.pte``).  ``result.changed`` says whether anything moved and
    ``result.plan`` holds every placement, removed instruction and left-in-place verdict.
    ``fsync=False`` skips waiting for the disk: the output is still replaced atomically, but is not
    safe against a power failure right after.  ``verify="full"`` makes the self-check compare every
    byte of the output (default ``"sampled"``: bulk copies from a proven source range are sampled; full
    when PTE_DEVCONST_FULL_CHECK is set).  ``fold=True`` also folds chains of host kernels that only move
    or cast constants for device delegates (``rewrite --fold``; computing them imports torch);
    ``duplicate_shared=True`` gives device readers of a constant the host also reads their own copy.
    ``progress(done, total)`` is called as the output is written.
    """
    from pte_devconst.paths import data_for, default_output
    from pte_devconst.rewriter.plan import RewriteOptions
    from pte_devconst.rewriter.rewrite import rewrite_file

    if min_bytes < 0:
        raise PteDevconstError(f"min_bytes must be >= 0, got {min_bytes}")
    if in_place and output is not None:
        raise PteDevconstError("--in-place and --output exclude each other")
    options = RewriteOptions(devices=parse_devices(devices), min_bytes=min_bytes, fold=fold,
                             duplicate_shared=duplicate_shared)
    destination = None if in_place or dry_run else Path(output) if output is not None else default_output(pte)
    return rewrite_file(pte, destination, ptd=data_for(pte, ptd), options=options, dry_run=dry_run,
                        in_place=in_place, durable=fsync, verify=verify, progress=progress)


def diff(before: PathLike, after: PathLike) -> "ProgramDiff":
    """What changed between two programs (any two .pte files): tensors, buffers, instructions, copies."""
    from pte_devconst.rewriter.diff import diff_files
    from pte_devconst.schema.pte_file import open_pte

    with open_pte(before) as a, open_pte(after) as b:
        return diff_files(a, b)


def run(pte: PathLike, *, ptd: Optional[PathLike] = None, method: Optional[str] = None,
        inputs: Optional[PathLike] = None, calls: int = 1, simulate_devices: bool = False,
        opaque_delegates: bool = False, profile: bool = False) -> "RunResult":
    """Run one method ``calls`` times the way the runtime does and count every copy (imports torch).

    ``ptd`` defaults to ``NAME.ptd`` next to ``NAME.pte``; ``inputs`` is a torch.save file (default:
    deterministic random inputs); ``opaque_delegates`` runs every delegate as a seeded stand-in.
    """
    from pte_devconst.paths import data_for
    from pte_devconst.runner.delegates import OpaquePolicy
    from pte_devconst.runner.run import run_program

    return run_program(pte, ptd_path=data_for(pte, ptd), method=method, inputs=inputs, calls=calls,
                       simulate_devices=simulate_devices, profile=profile,
                       opaque=OpaquePolicy.ALWAYS if opaque_delegates else OpaquePolicy.NEVER)


def validate(original: PathLike, rewritten: PathLike, *, ptd: Optional[PathLike] = None,
             rewritten_ptd: Optional[PathLike] = None, inputs: Any = None, expected: Any = None, calls: int = 2,
             rtol: float = 1e-4, atol: float = 1e-5, simulate_devices: bool = False,
             methods: Optional[Sequence[str]] = None, profile: bool = False,
             opaque_delegates: bool = False) -> "ValidationResult":
    """Run both programs on the same inputs and check the rewrite's promises (imports torch).

    ``inputs``/``expected`` are torch.save files (or loaded objects); ``calls`` (>= 2) per program;
    ``rtol``/``atol`` compare outputs that need not be bit-identical; ``methods`` (default: every method
    with inputs).  ``result.passed`` is the verdict.  The .ptd rule applies: ``ptd`` defaults to
    ``NAME.ptd`` next to the original, ``rewritten_ptd`` to the rewrite's own sibling, else to the
    original's data (a rewrite keeps external bytes in the same .ptd).
    """
    if rtol < 0 or atol < 0:
        raise PteDevconstError("--rtol and --atol must not be negative")
    from pte_devconst.paths import data_for, rewrite_data_for
    from pte_devconst.runner.validate import validate as run_validation

    data = data_for(original, ptd)
    return run_validation(original, rewritten, ptd=data, rewritten_ptd=rewrite_data_for(rewritten, data, rewritten_ptd),
                          inputs=inputs, expected=expected, calls=calls, rtol=rtol, atol=atol,
                          simulate_devices=simulate_devices, methods=methods, profile=profile,
                          opaque_delegates=opaque_delegates)


# --------------------------------------------------------------------------- check


@dataclass(frozen=True, slots=True)
class Finding:
    """A constant-derived value copied host-to-device on every call.

    In ``FileCheck.findings`` a constant the rewrite can move; in ``FileCheck.unknown`` an external constant
    that could move if its .ptd showed matching data; in ``FileCheck.stays`` a copy the rewrite cannot
    remove, with ``reason`` saying why (read on the host too, transposed on the host, ...).
    """

    file: str
    method: str
    value: int
    name: str
    device: str
    nbytes: int
    copies_per_call: int
    reason: str = ""  # why it stays copied (``FileCheck.stays``); empty for a finding
    accepted: str = ""  # in ``FileCheck.accepted``: the reason the project gave for accepting it

    @property
    def bytes_per_call(self) -> int:
        return self.nbytes * self.copies_per_call


@dataclass(frozen=True, slots=True)
class Acceptance:
    """A finding a project accepts, with its reason (``[[tool.pte-devconst.accept]]``): ``check`` reports it as
    accepted instead of failing on it.

    ``program`` is a glob (``models/*.pte``) relative to ``root`` (the config file's folder); ``method`` one method
    (None: any); ``constant`` a name (``encoder.weight``) or ``value`` an index (``value 3``), at least one of them.
    """

    program: str
    reason: str
    method: Optional[str] = None
    constant: Optional[str] = None
    value: Optional[int] = None
    root: Optional[str] = None
    origin: str = ""  # where it was written (``pyproject.toml: accept[2]``), for the warning when it matches nothing

    def matches(self, finding: Finding) -> bool:
        from pte_devconst.paths import matches_glob

        return ((self.method is None or self.method == finding.method)
                and (self.constant is None or self.constant == finding.name)
                and (self.value is None or self.value == finding.value)
                and matches_glob(finding.file, self.program, self.root))

    def describe(self) -> str:
        what = [f"program {self.program!r}"] + ([f"method {self.method!r}"] if self.method is not None else [])
        what += [f"constant {self.constant!r}"] if self.constant is not None else []
        what += [f"value {self.value}"] if self.value is not None else []
        return ", ".join(what)


class CheckStatus(NamedEnum):
    """One file's result in ``check``, in a word (the JSON's ``status``)."""

    OK = "ok"
    FINDINGS = "findings"  # what fails the gate
    UNKNOWN = "unknown"  # only external constants that could not be judged
    ERROR = "error"  # the file could not be read


@dataclass(frozen=True, slots=True)
class FileCheck:
    """One file's result: its findings, the constants it could not judge, or the error that kept it from being read."""

    file: str
    ptd: Optional[str]
    constants: int  # constants examined
    findings: tuple[Finding, ...]
    error: Optional[str] = None
    note: Optional[str] = None  # e.g. why `rewrite` would refuse this program
    unknown: tuple[Finding, ...] = ()  # external constants whose .ptd was not found or given
    foldable: int = 0  # without fold=True: tensors `rewrite --fold` would move beyond a plain rewrite
    foldable_bytes_per_call: int = 0
    stays: tuple[Finding, ...] = ()  # constant-derived copies the rewrite cannot remove, each with its reason
    strict: bool = False  # stays count as findings
    accepted: tuple[Finding, ...] = ()  # findings (or stays, or unknown) the project accepts, each with its reason

    @property
    def failing(self) -> tuple[Finding, ...]:
        """What fails the gate: the findings; with ``strict`` every constant-derived per-call copy, also what stays
        and the external constants not judged (copied per call either way; only whether they could move is open)."""
        return self.findings + self.stays + self.unknown if self.strict else self.findings

    @property
    def status(self) -> CheckStatus:
        return (CheckStatus.ERROR if self.error else CheckStatus.FINDINGS if self.failing
                else CheckStatus.UNKNOWN if self.unknown else CheckStatus.OK)

    @property
    def bytes_per_call(self) -> int:
        """Bytes per call of the findings: what a rewrite saves."""
        return sum(f.bytes_per_call for f in self.findings)

    @property
    def stays_bytes_per_call(self) -> int:
        return sum(f.bytes_per_call for f in self.stays)


EXIT_UNKNOWN = 3


@dataclass(frozen=True, slots=True)
class CheckReport:
    files: tuple[FileCheck, ...]
    min_bytes: int
    fold: bool = False  # findings include what rewrite --fold would move
    strict: bool = False
    unused_accepts: tuple[Acceptance, ...] = ()  # accepted findings that matched nothing (a warning, as ruff's RUF100)

    @property
    def findings(self) -> tuple[Finding, ...]:
        return tuple(f for file in self.files for f in file.findings)

    @property
    def accepted(self) -> tuple[Finding, ...]:
        return tuple(f for file in self.files for f in file.accepted)

    @property
    def unknown(self) -> tuple[Finding, ...]:
        return tuple(f for file in self.files for f in file.unknown)

    @property
    def stays(self) -> tuple[Finding, ...]:
        return tuple(f for file in self.files for f in file.stays)

    @property
    def failing(self) -> tuple[Finding, ...]:
        return tuple(f for file in self.files for f in file.failing)

    @property
    def errors(self) -> tuple[FileCheck, ...]:
        return tuple(file for file in self.files if file.error)

    @property
    def passed(self) -> bool:
        return self.exit_code == 0

    @property
    def exit_code(self) -> int:
        """0 clean; 1 some file still copies an eligible constant per call (with ``strict``: any constant-derived
        value, judged or not); 2 some file could not be checked; 3 nothing else, but some external constant could
        not be judged because its .ptd is missing."""
        return 2 if self.errors else 1 if self.failing else EXIT_UNKNOWN if self.unknown else 0

    @property
    def bytes_per_call(self) -> int:
        return sum(f.bytes_per_call for f in self.findings)

    @property
    def foldable(self) -> int:
        """Without ``fold=True``: how many more tensors ``rewrite --fold`` would move, over all files."""
        return sum(f.foldable for f in self.files)

    @property
    def foldable_bytes_per_call(self) -> int:
        return sum(f.foldable_bytes_per_call for f in self.files)

    @property
    def stays_bytes_per_call(self) -> int:
        return sum(f.bytes_per_call for f in self.stays)

    @property
    def fold_gain(self) -> Optional["FoldGain"]:
        """Without ``fold=True``: what ``rewrite --fold`` would move beyond a plain rewrite (None: nothing more)."""
        from pte_devconst.rewriter.plan import FoldGain

        return FoldGain(self.foldable, self.foldable_bytes_per_call) if self.foldable else None

    def to_json(self) -> dict[str, Any]:
        """``check``'s JSON document (cli/report.schema.json)."""
        return {
            "fold_hint": ({"tensors": self.foldable, "bytes_per_call": self.foldable_bytes_per_call}
                          if self.foldable else None),
            "passed": self.passed,
            "exit_code": self.exit_code,
            "fold": self.fold,
            "strict": self.strict,
            "min_bytes": self.min_bytes,
            "findings": len(self.findings),
            "bytes_per_call": self.bytes_per_call,
            "errors": len(self.errors),
            "unknown": len(self.unknown),
            "stays": len(self.stays),
            "stays_bytes_per_call": self.stays_bytes_per_call,
            "accepted": len(self.accepted),
            "unused_accepts": [{"program": a.program, "method": a.method, "constant": a.constant, "value": a.value,
                                "reason": a.reason, "origin": a.origin} for a in self.unused_accepts],
            "files": [{
                "file": f.file, "ptd": f.ptd, "status": f.status, "constants": f.constants,
                "bytes_per_call": f.bytes_per_call, "error": f.error, "note": f.note,
                "findings": _findings_json(f.findings), "unknown": _findings_json(f.unknown),
                "stays": _findings_json(f.stays, reasons=True), "stays_bytes_per_call": f.stays_bytes_per_call,
                "accepted": [{**item, "accepted": x.accepted, "reason": x.reason}
                             for item, x in zip(_findings_json(f.accepted), f.accepted)],
            } for f in self.files],
        }


def _findings_json(findings: tuple[Finding, ...], reasons: bool = False) -> list[dict[str, Any]]:
    return [{"method": x.method, "value": x.value, "name": x.name, "device": x.device, "nbytes": x.nbytes,
             "copies_per_call": x.copies_per_call, "bytes_per_call": x.bytes_per_call,
             **({"reason": x.reason} if reasons else {})} for x in findings]


def expand_paths(patterns: Iterable[PathLike]) -> tuple[list[Path], list[str]]:
    """Expand glob patterns (``**`` too) and directories (every ``*.pte`` below) into files.

    Returns ``(files, problems)``: a pattern that matches nothing is a problem, not an exception, so a
    caller can report every bad argument at once.  A name that exists is taken as it is, even with
    glob characters in it.  Links to folders are followed, each real folder entered once (so a
    symlink loop ends), and each real file is listed once, under the first name found.  Shells
    usually expand patterns first; this covers those that do not.
    """
    from pte_devconst.paths import expand

    items = expand(patterns)
    return [i for i in items if isinstance(i, Path)], [i for i in items if isinstance(i, str)]


def _check_one(pte: Path, ptd: Optional[Path], options: "RewriteOptions", strict: bool) -> FileCheck:
    """One program's findings: the placements (and, with fold, folds) of the very plan ``rewrite`` would make."""
    from pte_devconst.paths import ptd_hint
    from pte_devconst.rewriter.derived import DerivedStatus, derived_copies
    from pte_devconst.rewriter.fold_refusals import fold_refusals, torch_found
    from pte_devconst.rewriter.load import analyze_opened, opened
    from pte_devconst.rewriter.plan import make_plan, safe_fold_gain, skip_reason

    with opened(pte, ptd) as (source, data):
        refusal = source.load_refusal
        if refusal:
            raise PteDevconstError(refusal, file=str(pte))
        analysis = analyze_opened(source, data)
        program = source.program
        derived = derived_copies(program, analysis)
        # As rewrite --fold plans: chains whose data it refuses (a NaN cast to int) do not fold.  Without torch
        # no fold computes at all, so the gate counts every chain (rewrite --fold asks for torch first).
        refusals = fold_refusals(source, data, analysis) if options.fold and torch_found() else {}
    # The very plan rewrite makes; its refusal (a buffer past the reader's limit) is this file's error.
    plan = make_plan(program, analysis, options, refusals)
    eligible = {(c.plan_index, c.value) for c in analysis.eligible}
    found = [(p, Finding(str(pte), p.method, p.value, p.name, str(p.device), p.nbytes, p.copies_per_call))
             for p in plan.placements]
    released = [(p, f) for p, f in found if (p.plan_index, p.value) not in eligible]  # moved once their kernels fold
    findings = [f for p, f in found if (p.plan_index, p.value) in eligible]
    findings += [Finding(str(pte), f.method, f.value, f"{f.chain.kernels} of "
                         f"{f.chain.source_tensor.fqn or f'value {f.chain.source}'}", str(f.device), f.nbytes,
                         f.chain.copies_per_call) for f in plan.folds]
    findings += [f for _, f in released]
    # What folding moves no longer stays: the chains' results and the constants released by them.
    covered = {(f.plan_index, f.chain.result) for f in plan.folds} | {(p.plan_index, p.value) for p, _ in released}
    unknown = [Finding(str(pte), v.method, v.value, v.name, str(v.pending_device), v.nbytes, v.copies_per_call)
               for method in analysis.methods for v in method.constants
               if v.unknown and skip_reason(v.pending_device, v.nbytes, options) is None]
    stays = tuple(Finding(str(pte), copy.method, copy.value, copy.name, str(copy.device), copy.nbytes,
                          copy.copies_per_call, copy.reason)
                  for copy in derived
                  if copy.status is DerivedStatus.STAYS and skip_reason(copy.device, copy.nbytes, options) is None
                  and (copy.plan_index, copy.value) not in covered)
    gain = None if options.fold else safe_fold_gain(program, analysis, options)
    notes = list(analysis.notes)
    if analysis.refusal and findings:
        notes.append(f"rewrite would refuse this program: {analysis.refusal}")
    if unknown:
        notes.append(f"{len(unknown)} external constant(s) not judged: their data is in a .ptd; {ptd_hint(pte)}")
    return FileCheck(str(pte), str(ptd) if ptd else None, sum(len(m.constants) for m in analysis.methods),
                     tuple(findings), None, "; ".join(notes) or None, tuple(unknown),
                     gain.tensors if gain else 0, gain.bytes_per_call if gain else 0, stays, strict)


def check(files: Iterable[PathLike], *, ptd: Optional[Union[PathLike, Sequence[PathLike]]] = None,
          min_bytes: int = 0, devices: Optional[Iterable[DeviceLike]] = None, strict: bool = False,
          progress: Optional[Callable[[int, int, str], None]] = None, fold: bool = False,
          accept: Sequence[Acceptance] = (), exclude: Sequence[str] = (),
          exclude_root: Optional[PathLike] = None) -> CheckReport:
    """Which constants do these programs still copy to a device on every call? (what ``check`` does)

    The findings are the constants a rewrite would move.  Every other constant-derived per-call copy
    (a constant read on the host too, a weight transposed on the host, ...) is in ``FileCheck.stays``
    with its reason; ``strict`` makes those fail the check too.

    ``files`` may hold paths, glob patterns and directories; each real file is checked once.  Each
    program is judged with its .ptd: a ``ptd`` entry paired with it by path (``a/m.ptd`` goes with
    ``a/m.pte``; ``"PROGRAM.pte=DATA.ptd"`` pairs explicitly; a single entry goes with a single
    program), else ``NAME.ptd`` next to ``NAME.pte``.  An external constant whose data is missing is
    reported as unknown (``FileCheck.unknown``, exit code 3), never as clean.  Constants under
    ``min_bytes`` are ignored.  Never raises for a bad file: each unreadable file (or one the
    runtime's verifier would refuse) is a ``FileCheck`` with ``error`` set, and ``report.exit_code``
    is 2.  ``progress(done, total, name)`` is called after each file.  ``fold=True`` also counts what
    ``rewrite --fold`` would move (each folded chain, each constant that moves once its kernels go) as
    findings; without it, ``FileCheck.foldable`` says how many more tensors that would be.

    ``accept`` moves each matching finding (or copy that stays, or constant not judged) to ``FileCheck.accepted``
    (it no longer fails the check); an acceptance that matches nothing is in ``report.unused_accepts``.
    ``exclude`` leaves out every program a glob names (relative to ``exclude_root``; ``paths.matches_glob``),
    also one named explicitly.
    """
    if min_bytes < 0:
        raise PteDevconstError(f"min_bytes must be >= 0, got {min_bytes}")
    from pte_devconst.paths import DataArgument, expand, pair_data
    from pte_devconst.rewriter.plan import RewriteOptions

    options = RewriteOptions(devices=parse_devices(devices), min_bytes=min_bytes, fold=fold)

    given = [] if ptd is None else [ptd] if isinstance(ptd, (str, os.PathLike)) else list(ptd)
    items = excluded(expand(files), exclude, exclude_root)
    programs = [i for i in items if isinstance(i, Path)]
    pairs, problems = pair_data(programs, [DataArgument.parse(g) for g in given])
    results: list[FileCheck] = []
    used: set[int] = set()
    done = 0
    for item in items:
        if isinstance(item, str):
            results.append(FileCheck(item.rsplit(": ", 1)[0], None, 0, (), item))
            continue
        data = pairs.get(item)
        try:
            results.append(_accepting(_check_one(item, data, options, strict), accept, used))
        except PteDevconstError as error:
            text = " ".join(str(error).split())
            results.append(FileCheck(str(item), str(data) if data else None, 0, (),
                                     text if str(item) in text else f"{item}: {text}"))
        except OSError as error:
            results.append(FileCheck(str(item), str(data) if data else None, 0, (),
                                     f"{item}: {error.strerror or error}"))
        done += 1
        if progress is not None:
            progress(done, len(programs), str(item))
    for problem in problems:
        name = problem.split(": --ptd", 1)[0]
        results.append(FileCheck(name, name, 0, (), problem))
    if not results:
        results.append(FileCheck("", None, 0, (), "no files given"))
    return CheckReport(tuple(results), min_bytes, fold, strict,
                       tuple(a for index, a in enumerate(accept) if index not in used))


def excluded(items: list[Union[Path, str]], exclude: Sequence[str], root: Optional[PathLike]) -> list[Union[Path, str]]:
    """``items`` without the programs an ``exclude`` glob names (problems, ``str``, stay)."""
    from pte_devconst.paths import matches_glob

    return [i for i in items if not isinstance(i, Path) or not any(matches_glob(i, g, root) for g in exclude)]


def _accepting(checked: FileCheck, accept: Sequence[Acceptance], used: set[int]) -> FileCheck:
    """``checked`` with what ``accept`` matches moved to ``accepted`` (the first matching entry's reason); the
    indices of the entries that matched are added to ``used``."""
    if not accept:
        return checked
    from dataclasses import replace

    taken: list[Finding] = []

    def keep(findings: tuple[Finding, ...]) -> tuple[Finding, ...]:
        kept = []
        for finding in findings:
            index = next((k for k, a in enumerate(accept) if a.matches(finding)), None)
            if index is None:
                kept.append(finding)
            else:
                used.add(index)
                taken.append(replace(finding, accepted=accept[index].reason))
        return tuple(kept)

    findings, stays, unknown = keep(checked.findings), keep(checked.stays), keep(checked.unknown)
    return replace(checked, findings=findings, stays=stays, unknown=unknown, accepted=tuple(taken))
