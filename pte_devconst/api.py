"""The Python API: what the command line does, as plain functions returning the objects it renders.

An export script can call it right after ``to_executorch()``::

    from pte_devconst import analyze, rewrite, check

    result = rewrite("model.pte")            # writes model.devconst.pte
    assert check([result.output]).passed     # nothing is copied per call any more

Nothing here imports torch except ``validate``, which runs both programs.
Errors are ``pte_devconst.schema.errors.PteDevconstError`` (one readable line).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Optional, Sequence, Union

from pte_devconst.schema.errors import PteDevconstError
from pte_devconst.schema.model import Device

if TYPE_CHECKING:  # only for annotations: keep `import pte_devconst.api` light
    from pte_devconst.rewriter.analysis import ConstantVerdict
    from pte_devconst.rewriter.diff import ProgramDiff
    from pte_devconst.rewriter.inventory import ProgramSummary
    from pte_devconst.rewriter.rewrite import RewriteResult
    from pte_devconst.runner.validate import ValidationResult

PathLike = Union[str, "os.PathLike[str]"]
DeviceLike = Union[str, Device]

__all__ = ["analyze", "rewrite", "diff", "check", "validate", "expand_paths", "parse_devices", "CheckReport",
           "FileCheck", "Finding"]

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
    from pte_devconst.rewriter.inventory import summarize
    from pte_devconst.rewriter.load import analyze_opened, opened

    with opened(pte, ptd) as (source, data):
        return summarize(source, analyze_opened(source, data))


def rewrite(pte: PathLike, output: Optional[PathLike] = None, *, ptd: Optional[PathLike] = None,
            devices: Optional[Iterable[DeviceLike]] = None, min_bytes: int = 0, dry_run: bool = False,
            in_place: bool = False, fsync: bool = True, verify: Optional[str] = None) -> "RewriteResult":
    """Move every eligible constant into device memory with initial data (what ``rewrite`` does).

    Writes ``output`` (default ``<stem>.devconst.pte`` next to ``pte``) atomically and re-reads it
    before returning; ``dry_run`` only plans.  External constants need ``ptd`` (default: ``NAME.ptd``
    next to ``NAME.pte``).  ``result.changed`` says whether anything moved and
    ``result.plan`` holds every placement, removed instruction and left-in-place verdict.
    ``fsync=False`` skips waiting for the disk: the output is still replaced atomically, but is not
    safe against a power failure right after.  ``verify="full"`` makes the self-check compare every
    byte of the output (default ``"sampled"``: bulk copies from a proven source range are sampled; full
    when PTE_DEVCONST_FULL_CHECK is set).
    """
    from pte_devconst.rewriter.plan import RewriteOptions
    from pte_devconst.rewriter.rewrite import rewrite_file

    if min_bytes < 0:
        raise PteDevconstError(f"min_bytes must be >= 0, got {min_bytes}")
    if in_place and output is not None:
        raise PteDevconstError("in_place and output exclude each other")
    options = RewriteOptions(devices=parse_devices(devices), min_bytes=min_bytes)
    return rewrite_file(pte, output, ptd=ptd, options=options, dry_run=dry_run, in_place=in_place, durable=fsync,
                        verify=verify)


def diff(before: PathLike, after: PathLike) -> "ProgramDiff":
    """What changed between two programs (any two .pte files): tensors, buffers, instructions, copies."""
    from pte_devconst.rewriter.diff import diff_files
    from pte_devconst.schema.pte_file import open_pte

    with open_pte(before) as a, open_pte(after) as b:
        return diff_files(a, b)


def validate(original: PathLike, rewritten: PathLike, **options: Any) -> "ValidationResult":
    """Run both programs on the same inputs and check the rewrite's promises (imports torch).

    Keyword options are those of ``pte_devconst.runner.validate.validate``: ``ptd``, ``rewritten_ptd``,
    ``inputs``, ``expected``, ``calls`` (>= 2), ``rtol``, ``atol``, ``simulate_devices``, ``methods``,
    ``profile``, ``opaque_delegates``.  ``result.passed`` is the verdict.  The .ptd rule applies: ``ptd``
    defaults to ``NAME.ptd`` next to the original, ``rewritten_ptd`` to the rewrite's own sibling, else
    to the original's data (a rewrite keeps external bytes in the same .ptd).
    """
    from pte_devconst.paths import data_for, rewrite_data_for
    from pte_devconst.runner.validate import validate as run_validation

    data = data_for(original, options.pop("ptd", None))
    rewritten_data = rewrite_data_for(rewritten, data, options.pop("rewritten_ptd", None))
    return run_validation(original, rewritten, ptd=data, rewritten_ptd=rewritten_data, **options)


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

    @property
    def bytes_per_call(self) -> int:
        return self.nbytes * self.copies_per_call


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
    stays: tuple[Finding, ...] = ()  # constant-derived copies the rewrite cannot remove, each with its reason
    strict: bool = False  # stays count as findings

    @property
    def failing(self) -> tuple[Finding, ...]:
        """What fails the gate: the findings; with ``strict`` every constant-derived per-call copy, also what stays
        and the external constants not judged (copied per call either way; only whether they could move is open)."""
        return self.findings + self.stays + self.unknown if self.strict else self.findings

    @property
    def status(self) -> str:
        """``ok``, ``findings``, ``unknown`` or ``error``."""
        return "error" if self.error else "findings" if self.failing else "unknown" if self.unknown else "ok"

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
    strict: bool = False

    @property
    def findings(self) -> tuple[Finding, ...]:
        return tuple(f for file in self.files for f in file.findings)

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
    def stays_bytes_per_call(self) -> int:
        return sum(f.bytes_per_call for f in self.stays)


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


def _finding(pte: Path, verdict: "ConstantVerdict", device: Device) -> Finding:
    return Finding(str(pte), verdict.method, verdict.value, verdict.name, str(device), verdict.nbytes,
                   verdict.copies_per_call)


def _check_one(pte: Path, ptd: Optional[Path], min_bytes: int, devices: Optional[frozenset[Device]],
               strict: bool) -> FileCheck:
    from pte_devconst.paths import ptd_hint
    from pte_devconst.rewriter.derived import STAYS, derived_copies
    from pte_devconst.rewriter.load import analyze_opened, opened

    with opened(pte, ptd, pair=False) as (source, data):
        refusal = source.load_refusal
        if refusal:
            raise PteDevconstError(refusal, file=str(pte))
        analysis = analyze_opened(source, data)
        derived = derived_copies(source.program, analysis)
    findings, unknown = [], []
    examined = 0
    for method in analysis.methods:
        examined += len(method.constants)
        for verdict in method.constants:
            device = verdict.device or verdict.pending_device
            if device is None or verdict.nbytes < min_bytes or (devices is not None and device not in devices):
                continue
            (findings if verdict.eligible else unknown).append(_finding(pte, verdict, device))
    stays = tuple(Finding(str(pte), copy.method, copy.value, copy.name, str(copy.device), copy.nbytes,
                          copy.copies_per_call, copy.reason)
                  for copy in derived if copy.status == STAYS and copy.nbytes >= min_bytes
                  and (devices is None or copy.device in devices))
    notes = list(analysis.notes)
    if analysis.refusal and findings:
        notes.append(f"rewrite would refuse this program: {analysis.refusal}")
    if unknown:
        notes.append(f"{len(unknown)} external constant(s) not judged: their data is in a .ptd; {ptd_hint(pte)}")
    return FileCheck(str(pte), str(ptd) if ptd else None, examined, tuple(findings), None,
                     "; ".join(notes) or None, tuple(unknown), stays, strict)


def check(files: Iterable[PathLike], *, ptd: Optional[Union[PathLike, Sequence[PathLike]]] = None,
          min_bytes: int = 0, devices: Optional[Iterable[DeviceLike]] = None, strict: bool = False,
          progress: Optional[Callable[[int, int, str], None]] = None) -> CheckReport:
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
    is 2.  ``progress(done, total, name)`` is called after each file.
    """
    if min_bytes < 0:
        raise PteDevconstError(f"min_bytes must be >= 0, got {min_bytes}")
    selected = parse_devices(devices)
    from pte_devconst.paths import DataArgument, expand, pair_data

    given = [] if ptd is None else [ptd] if isinstance(ptd, (str, os.PathLike)) else list(ptd)
    items = expand(files)
    programs = [i for i in items if isinstance(i, Path)]
    pairs, problems = pair_data(programs, [DataArgument.parse(g) for g in given])
    results: list[FileCheck] = []
    done = 0
    for item in items:
        if isinstance(item, str):
            results.append(FileCheck(item.rsplit(": ", 1)[0], None, 0, (), item))
            continue
        data = pairs.get(item)
        try:
            results.append(_check_one(item, data, min_bytes, selected, strict))
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
    return CheckReport(tuple(results), min_bytes, strict)
