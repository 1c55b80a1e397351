"""Run one fuzz case through the library (and optionally the command line) and judge the outcome.

A case passes when the reader either accepts the bytes (and then every
accessor, a re-encode and a re-read work) or raises a ``PteDevconstError``,
within the time bound.  Anything else (another exception, a timeout, an
accepted file whose data cannot be read back) is a failure with a traceback.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import signal
import tempfile
import time
import traceback
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Iterator, Optional

from pte_devconst.util.errors import PteDevconstError
from pte_devconst.schema.ptd_file import PtdFile
from pte_devconst.schema.pte_file import PteFile
from pte_devconst.schema import model as m
from pte_devconst.schema.pte_writer import layout_pte, unchanged_segments, write_pte_to_fd

from .mutate import Case
from .seeds import REPO

ETRECORD_ERROR = "not an ETRecord (or one this tool will not read): "

TIME_BOUND_S = 2.0
# Reading is linear in the file, but a file of a million tables (10 MB, the runtime verifier's limit)
# takes seconds to decode, and the library check decodes, encodes and decodes it again: the bound grows
# with the size.  Anything slower than linear still trips it.
SECONDS_PER_MB = 5.0
# A case may wait this many times its CPU bound in wall time (the machine's other jobs, the runtime's child):
# a run sharing two cores with six other jobs gets a sixth of one, and must not fail for it.
WALL_FACTOR = 10.0


def bound_for(case: "Case", base: float = TIME_BOUND_S) -> float:
    """The time bound of one case: ``base``, plus ``SECONDS_PER_MB`` for each megabyte of the case's files."""
    return base + SECONDS_PER_MB * (len(case.data) + len(case.ptd or b"")) / 1e6


class CaseTimeout(BaseException):
    """Raised by the alarm when a case runs past its bound (BaseException: no handler may swallow it)."""


@contextlib.contextmanager
def time_bound(seconds: float) -> Iterator[None]:
    """Interrupt the block after ``seconds`` of this process's CPU time, or ``WALL_FACTOR`` times that of
    wall time (a wait that uses no CPU); main thread only, elsewhere it only measures.

    CPU time, so that a run sharing its cores with other jobs judges the tool, not the machine's load.
    """
    def _alarm(signum: int, frame: object) -> None:
        if signum == signal.SIGPROF:
            raise CaseTimeout(f"used more than {seconds:.3g} s of CPU")
        raise CaseTimeout(f"still running after {seconds * WALL_FACTOR:.3g} s")

    try:
        previous = signal.signal(signal.SIGPROF, _alarm), signal.signal(signal.SIGALRM, _alarm)
    except ValueError:
        yield
        return
    signal.setitimer(signal.ITIMER_PROF, seconds)
    signal.setitimer(signal.ITIMER_REAL, seconds * WALL_FACTOR)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGPROF, previous[0])
        signal.signal(signal.SIGALRM, previous[1])


@dataclass
class Outcome:
    """How one case ended: "accepted", "rejected" (a clean error), or "failure" with details."""

    status: str
    detail: str = ""
    seconds: float = 0.0
    stages: tuple[str, ...] = ()  # how far a differential check got (differential.STAGES)


def _exercise_pte(pte: PteFile) -> None:
    """Everything a command does with an accepted file: read every datum, re-encode, re-read."""
    program = pte.program
    for plan in program.execution_plan or ():
        for value in plan.values or ():
            if isinstance(value, m.Tensor):
                data = pte.tensor_bytes(value)
                if data is not None and len(data) != value.nbytes:
                    raise AssertionError(f"tensor_bytes gave {len(data)} bytes for a {value.nbytes}-byte tensor")
                _ = value.device, value.is_constant, value.has_initial_data
        for delegate in plan.delegates or ():
            pte.delegate_blob(delegate)
        devices = plan.buffer_devices()
        for i in range(min(len(plan.non_const_buffer_sizes or ()), 8)):  # one scan each: a file may list 100,000
            if plan.buffer_device(i) != devices.get(i, m.CPU):
                raise AssertionError(f"buffer {i}: buffer_device and buffer_devices disagree")
    for entry in program.named_data or ():
        if entry.key is not None:
            pte.named_data(entry.key)
    contents = unchanged_segments(pte)
    layout = layout_pte(program, contents)
    fd = os.memfd_create("fuzz-roundtrip") if hasattr(os, "memfd_create") else None
    if fd is None:
        return
    try:
        write_pte_to_fd(fd, layout, contents)
        size = os.lseek(fd, 0, os.SEEK_END)
        again = os.pread(fd, size, 0)
    finally:
        os.close(fd)
    with PteFile.from_bytes(again, path="<re-encoded>") as copy:
        expected = replace(program, segments=layout.segments if program.segments is not None or layout.segments
                           else program.segments)
        if copy.program != expected:
            raise AssertionError("an accepted program does not survive encode + decode unchanged")


def _exercise_ptd(ptd: PtdFile) -> None:
    for key in ptd.keys():
        entry = ptd.entry(key)
        data = ptd.tensor_bytes(key)
        if entry is not None and entry.tensor_layout is not None and data is not None:
            if len(ptd.tensor_bytes(key, entry.tensor_layout.nbytes)) != entry.tensor_layout.nbytes:
                raise AssertionError("tensor_bytes is shorter than the tensor layout")


def etrecord_names(case: Case, record: "Path | io.BytesIO") -> object:
    """What ``--etrecord`` makes of an ETRecord case: its names for the program it came with (``seed_name``'s
    NAME.pte), read as the commands read it; raises what they raise."""
    from pte_devconst.program.etrecord import read_etrecord
    from pte_devconst.rewriter.names import match_names

    recorded = read_etrecord(record)
    with PteFile.open(REPO / Path(case.seed_name).with_suffix(".pte")) as source:
        return match_names(source, recorded, "fuzz")


def _refusal(error: PteDevconstError, name: str) -> Outcome:
    """A clean rejection when the error is one line starting with ``name`` (the file), else a failure."""
    text = str(error)
    if "\n" in text or not text.startswith(name):
        return Outcome("failure", f"error message is not one line naming the file: {text!r}")
    return Outcome("rejected", text)


def _judged(bound: float, body: Callable[[], Optional[Outcome]]) -> Outcome:
    """``body``'s outcome (None: accepted) within ``bound`` seconds of CPU; a failure for a timeout, any other
    exception, or a ``PteDevconstError`` that ``body`` let through (raised after the input was accepted)."""
    start = time.perf_counter()
    cpu_start = time.process_time()  # the bound is CPU time: a loaded machine must not fail the tool
    try:
        with time_bound(bound):
            outcome = body()
    except PteDevconstError as error:
        return Outcome("failure", f"accepted, then an accessor raised {error!r}:\n{traceback.format_exc()}",
                       time.perf_counter() - start)
    except CaseTimeout:
        return Outcome("failure", f"timeout: more than {bound} s\n{traceback.format_exc()}",
                       time.perf_counter() - start)
    except BaseException as error:  # noqa: BLE001 - any other exception is exactly what we look for
        if isinstance(error, KeyboardInterrupt):
            raise
        return Outcome("failure", traceback.format_exc(), time.perf_counter() - start)
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    if outcome is not None:
        outcome.seconds = elapsed
        return outcome
    if cpu > bound:  # (the alarm stops a case at the bound; this catches one that ended just past it)
        return Outcome("failure", f"took {cpu:.2f} s of CPU (bound {bound} s; {elapsed:.2f} s wall)", elapsed)
    return Outcome("accepted", "", elapsed)


def check_etrecord(case: Case, bound: float, folder: Optional[Path]) -> Outcome:
    """An ETRecord case: names, or a ``PteDevconstError`` whose one line starts with ``not an ETRecord (or one
    this tool will not read): FILE``, within the bound (every fourth case from a file, the others in memory)."""
    record: Path | io.BytesIO = io.BytesIO(case.data)
    if folder is not None and case.index % 4 == 1:
        record = folder / "fuzz.etrecord"
        record.write_bytes(case.data)
    name = f"{ETRECORD_ERROR}{record if isinstance(record, Path) else '<etrecord>'}"

    def names() -> Optional[Outcome]:
        try:
            etrecord_names(case, record)
        except PteDevconstError as error:
            return _refusal(error, name)
        return None

    return _judged(bound, names)


def check_library(case: Case, bound: Optional[float] = None, folder: Optional[Path] = None) -> Outcome:
    """Open ``case`` with ``PteFile``/``PtdFile`` and judge the result.

    With ``folder``, every fourth case is written there and opened from disk (the
    memory-mapped path the commands use); the others go through ``from_bytes``.  ``bound``: seconds
    allowed (default: ``bound_for(case)``).
    """
    bound = bound_for(case) if bound is None else bound
    if case.kind == "etrecord":
        return check_etrecord(case, bound, folder)
    reader = PteFile if case.kind == "pte" else PtdFile
    exercise = _exercise_pte if case.kind == "pte" else _exercise_ptd
    on_disk = folder is not None and case.index % 4 == 1
    if on_disk:
        path = folder / "fuzz.bin"
        path.write_bytes(case.data)

    def read() -> Optional[Outcome]:
        try:
            opened = reader.open(path) if on_disk else reader.from_bytes(case.data, path="fuzz.bin")
        except PteDevconstError as error:
            return _refusal(error, str(path) if on_disk else "fuzz.bin")
        with opened:
            exercise(opened)
        return None

    return _judged(bound, read)


# --- command line --------------------------------------------------------------


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@dataclass(frozen=True)
class Template:
    """One command line to fuzz: the command, its arguments and what the case file stands for."""

    command: str
    args: tuple[str, ...]
    kind: str = "pte"  # "ptd": the case is the .ptd of its seed's .pte; "etrecord": the ETRecord of its program
    exits: tuple[int, ...] = (0, 2)
    multi_file: bool = False  # reports each bad file on its own line (like a linter)

    @property
    def writes(self) -> bool:
        return "{out}" in self.args or "--in-place" in self.args


TEMPLATES = (
    Template("inspect", ("inspect", "{pte}")),
    Template("inspect", ("inspect", "--json", "{pte}")),
    Template("inspect", ("inspect", "--format", "markdown", "{pte}")),
    Template("inspect", ("inspect", "--ptd", "{ptd}", "{pte}"), kind="ptd"),
    Template("rewrite", ("rewrite", "--dry-run", "{pte}")),
    Template("rewrite", ("rewrite", "{pte}", "-o", "{out}")),
    Template("rewrite", ("rewrite", "--json", "{pte}", "-o", "{out}")),
    Template("rewrite", ("rewrite", "--in-place", "{pte}")),
    Template("rewrite", ("rewrite", "--ptd", "{ptd}", "{pte}", "-o", "{out}"), kind="ptd"),
    Template("diff", ("diff", "{orig}", "{pte}")),
    Template("diff", ("diff", "--json", "{pte}", "{orig}")),
    Template("run", ("run", "{pte}")),
    Template("run", ("run", "--simulate-devices", "{pte}")),
    Template("run", ("run", "--simulate-devices", "--ptd", "{ptd}", "{pte}"), kind="ptd"),
    Template("validate", ("validate", "{orig}", "{pte}"), exits=(0, 1, 2, 3)),
    # check: 3 when an external constant's .ptd is missing (unknown, never clean)
    Template("check", ("check", "{pte}"), exits=(0, 1, 2, 3)),
    Template("check", ("check", "--json", "{pte}", "{orig}"), exits=(0, 1, 2, 3), multi_file=True),
    Template("inspect", ("inspect", "{pte}", "--etrecord", "{etrecord}"), kind="etrecord"),
    Template("inspect", ("inspect", "--json", "{pte}", "--etrecord", "{etrecord}"), kind="etrecord"),
    Template("rewrite", ("rewrite", "{pte}", "-o", "{out}", "--etrecord", "{etrecord}"), kind="etrecord"),
    Template("check", ("check", "{pte}", "--etrecord", "{etrecord}"), kind="etrecord", exits=(0, 1, 2, 3)),
    Template("diff", ("diff", "--json", "{orig}", "{pte}", "--etrecord", "{etrecord}"), kind="etrecord"),
)


@dataclass
class CliHarness:
    """Runs the registered commands in-process (typer's CliRunner) on case files in a scratch folder."""

    folder: Path
    templates: list[Template] = field(default_factory=list)
    skipped: str = ""

    @classmethod
    def create(cls, folder: Path, want: Optional[set[str]] = None) -> "CliHarness":
        folder.mkdir(exist_ok=True)
        harness = cls(folder)
        try:
            from pte_devconst.cli.app import app
            import typer.main
            names = set(typer.main.get_command(app).commands)  # type: ignore[attr-defined]
        except Exception as error:  # noqa: BLE001 - the CLI may be mid-construction by another engineer
            harness.skipped = f"the CLI does not import yet: {type(error).__name__}: {error}"
            return harness
        harness.templates = [t for t in TEMPLATES if t.command in names and (want is None or t.command in want)]
        if any(t.command in ("run", "validate") for t in harness.templates):
            import torch  # noqa: F401 - imported once here, not inside the first case's time bound
        if not harness.templates:
            harness.skipped = f"no fuzzable command is registered yet (registered: {sorted(names)})"
        return harness

    def fitting(self, case: Case) -> list[Template]:
        """The templates that can take ``case`` (.ptd templates only for .ptd cases, ETRecord templates only and
        always for ETRecord cases)."""
        if case.kind == "etrecord":
            return [t for t in self.templates if t.kind == "etrecord"]
        return [t for t in self.templates if t.kind == "pte" or (t.kind == "ptd" and case.kind == "ptd")]

    def check(self, case: Case, pick: int) -> Outcome:
        """Run template number ``pick`` (of those fitting the case) and check exit code, stderr and files."""
        from typer.testing import CliRunner
        from pte_devconst.cli.app import app

        fitting = self.fitting(case)
        template = fitting[pick % len(fitting)]
        for stale in self.folder.iterdir():
            stale.unlink()
        seed_path = REPO / case.seed_name
        orig = self.folder / "orig.pte"
        out = self.folder / "out.pte"
        etrecord = self.folder / "in.etrecord"
        if case.kind == "etrecord":
            pte, ptd = self.folder / "in.pte", self.folder / "none.ptd"
            pte.write_bytes(seed_path.with_suffix(".pte").read_bytes())
            etrecord.write_bytes(case.data)
            orig.write_bytes(pte.read_bytes())
            inputs = [pte, etrecord]
        elif case.kind == "ptd" and template.kind == "ptd":
            pte, ptd = self.folder / "in.pte", self.folder / "in.ptd"
            companion = seed_path.with_suffix(".pte")
            pte.write_bytes(companion.read_bytes() if companion.exists() else b"")
            ptd.write_bytes(case.data)
            orig.write_bytes(pte.read_bytes())
            inputs = [pte, ptd]
        else:
            pte, ptd = self.folder / f"in.{case.kind}", self.folder / "none.ptd"
            pte.write_bytes(case.data)
            orig.write_bytes(seed_path.read_bytes() if seed_path.suffix == ".pte" else case.data)
            inputs = [pte]
        before = {p: _sha(p) for p in inputs + [orig]}
        args = [a.format(pte=pte, ptd=ptd, out=out, orig=orig, etrecord=etrecord) for a in template.args]
        label = " ".join(template.args)
        start = time.perf_counter()
        try:
            with time_bound(bound_for(case, TIME_BOUND_S * 5)):
                result = CliRunner().invoke(app, args)
        except CaseTimeout:
            return Outcome("failure", f"{label}: timeout", time.perf_counter() - start)
        elapsed = time.perf_counter() - start
        problems = []
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            problems.append("exception escaped: " + "".join(traceback.format_exception(result.exception)))
        if result.exit_code not in template.exits:
            problems.append(f"exit code {result.exit_code}")
        stderr = result.stderr
        if result.exit_code == 2:
            lines = stderr.splitlines()
            most = 2 if template.multi_file else 1
            if not 1 <= len(lines) <= most or not all(line.startswith("pte-devconst: error: ") for line in lines):
                problems.append(f"stderr is not {'one line per bad file' if most > 1 else 'one error line'}: "
                                f"{stderr!r}")
        if "\x1b" in stderr or "\x1b" in result.stdout:  # not a terminal: any ESC came from the file's strings
            problems.append("a raw escape sequence from the file reached the terminal output")
        if "Traceback" in stderr or "internal error" in stderr:
            problems.append(f"traceback or internal error on stderr: {stderr!r}")
        if case.kind == "etrecord":
            problems += _etrecord_problems(case, etrecord, result.exit_code, stderr)
        in_place = "--in-place" in template.args and result.exit_code == 0
        for path, digest in before.items():
            if _sha(path) != digest and not (in_place and path == pte):
                problems.append(f"the input {path.name} was modified")
        expected = {p.name for p in inputs + [orig, out]}
        strays = sorted(p.name for p in self.folder.iterdir() if p.name not in expected)
        if strays:
            problems.append(f"stray files left behind: {strays}")
        if template.writes:
            written = pte if "--in-place" in template.args else out
            if result.exit_code != 0 and written == out and out.exists():
                problems.append("an output file was left behind after a failure")
            if result.exit_code == 0 and written.exists():
                try:
                    PteFile.open(written).close()
                except PteDevconstError as error:
                    problems.append(f"the output does not reopen: {error}")
            elif result.exit_code == 0 and "--dry-run" not in template.args:
                problems.append("exit 0 but no output file")
        if problems:
            return Outcome("failure", f"{label}: " + "; ".join(problems), elapsed)
        return Outcome("accepted" if result.exit_code == 0 else "rejected", label, elapsed)


def _etrecord_problems(case: Case, record: Path, code: int, stderr: str) -> list[str]:
    """An ETRecord the library refuses must end the command in exit 2 with that one line (never exit 0 after a
    swallowed failure); one it reads must not end it with an ETRecord error."""
    try:
        etrecord_names(case, record)
    except PteDevconstError as error:
        if code != 2 or f"pte-devconst: error: {error}" not in stderr:
            return [f"the ETRecord is refused ({error}), yet the command exited {code}: {stderr[-300:]!r}"]
        return []
    if ETRECORD_ERROR in stderr:
        return [f"the library reads the ETRecord, yet the command refused it: {stderr[-300:]!r}"]
    return []


@contextlib.contextmanager
def scratch_folder() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="pte-fuzz-") as folder:
        yield Path(folder)
