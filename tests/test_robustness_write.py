"""Interrupted writes, full disks and file-size limits never damage a destination or an input.

A large .pte (``PTE_ROBUSTNESS_MB``, default 32 MiB; 128 MiB in the ``slow``
runs) is made with the project writer from a corpus program by growing one
device-read constant.  A driver subprocess imports the tool once and forks one
child per scenario; the child installs a hook that SIGKILLs itself at a chosen
point of writing (temp file created, mid-write, mid-copy, before fsync, before
and after the rename) while running ``pte-devconst rewrite`` (``-o`` and
``--in-place``) or the library's ``write_pte``.  After each kill the
destination must be the old file (or absent), or, once the rename happened,
the complete new file; never anything in between.  RLIMIT_FSIZE and a 4 MiB
tmpfs give EFBIG / ENOSPC: exit 2, one stderr line, destination untouched, no
temporary file left.
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterator, Optional

import pytest

from pte_devconst.schema import model as m
from pte_devconst.util.atomic import TEMP_PREFIX
from pte_devconst.util.errors import OutputError
from pte_devconst.schema.header import align_up
from pte_devconst.schema.ptd_writer import write_ptd
from pte_devconst.schema.pte_file import open_pte
from pte_devconst.schema.pte_writer import SegmentContent, unchanged_segments, write_pte

CORPUS = Path(__file__).parent / "fixtures" / "corpus"
SOURCE = CORPUS / "v_b_dtypes_legacy.pte"  # its w_f32 constant is read only by a cuda:0 delegate
DEFAULT_MB = int(os.environ.get("PTE_ROBUSTNESS_MB", "16"))
MAIN = "from pte_devconst.cli.app import main; main()"


def make_large_pte(dest: Path, nbytes: int) -> None:
    """Write ``SOURCE`` with its first constant grown to ``nbytes`` (a 1-d float tensor) at ``dest``."""
    with open_pte(SOURCE) as pte:
        program = pte.program
        plan = program.execution_plan[0]
        tensor = plan.values[0]
        assert tensor.data_buffer_idx == 1 and tensor.scalar_type == m.ScalarType.FLOAT
        cs = program.constant_segment
        segment = bytes(pte.read(pte.segment_span(cs.segment_index)))
        numel = nbytes // 4
        big = (bytes(range(256)) * (numel * 4 // 256 + 1))[: numel * 4]
        padded = align_up(len(big), 16)
        content = big + bytes(padded - len(big)) + segment[cs.offsets[2]:]
        offsets = (0, 0) + tuple(o + padded - cs.offsets[2] for o in cs.offsets[2:])
        values = (replace(tensor, sizes=(numel,), dim_order=(0,)),) + plan.values[1:]
        program = replace(program, constant_segment=replace(cs, offsets=offsets),
                          execution_plan=(replace(plan, values=values),))
        contents = unchanged_segments(pte)
        contents[cs.segment_index] = SegmentContent(len(content), [(0, content)])
        write_pte(dest, program, contents)


def sha(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def temp_files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(TEMP_PREFIX))


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("big") / "big.pte"
    make_large_pte(path, DEFAULT_MB << 20)
    return path


def only_when_selected(request: pytest.FixtureRequest, marker: str) -> None:
    """Long runs execute only when their marker is selected (``-m slow``)."""
    if marker not in (request.config.option.markexpr or ""):
        pytest.skip(f"a long run: select it with -m {marker}")


# --- the kill driver ----------------------------------------------------------------
# Runs as ``python tests/test_robustness_write.py --driver JOBS.json``: imports the
# tool once, then forks one child per job; the child SIGKILLs itself at the job's point.



def _install_kill_hook(point: str) -> None:
    """Patch the os/tempfile call where ``point`` lies so that reaching it kills the process.

    ``term:POINT`` sends SIGTERM instead of SIGKILL: the tool may then clean up before it dies.
    """
    import tempfile

    sent = signal.SIGTERM if point.startswith("term:") else signal.SIGKILL
    point = point.removeprefix("term:")

    def die() -> None:
        os.kill(os.getpid(), sent)

    if point == "mkstemp":
        original_mkstemp = tempfile.mkstemp

        def mkstemp(*args: Any, **kwargs: Any) -> Any:
            made = original_mkstemp(*args, **kwargs)
            die()
            return made
        tempfile.mkstemp = mkstemp
    elif point in ("first-write", "mid-write"):
        original_write = os.write
        calls = [0]
        target = 1 if point == "first-write" else 3

        def write(fd: int, data: Any) -> int:
            calls[0] += 1
            if calls[0] == target:
                original_write(fd, memoryview(data)[: max(1, len(data) // 2)])
                die()
            return original_write(fd, data)
        os.write = write
    elif point == "mid-copy":
        original_copy = os.copy_file_range
        original_sendfile = os.sendfile
        original_pread = os.pread

        def copy_file_range(src: int, dst: int, count: int, offset_src: Any = None, offset_dst: Any = None) -> int:
            if count > 1 << 20:
                original_copy(src, dst, count // 2, offset_src, offset_dst)
                die()
            return original_copy(src, dst, count, offset_src, offset_dst)

        def sendfile(out_fd: int, in_fd: int, offset: int, count: int) -> int:
            if count > 1 << 20:
                original_sendfile(out_fd, in_fd, offset, count // 2)
                die()
            return original_sendfile(out_fd, in_fd, offset, count)

        def pread(fd: int, count: int, offset: int) -> bytes:  # the read/write fallback of copy_range
            if count >= 1 << 20 and offset > 1 << 20:
                die()
            return original_pread(fd, count, offset)
        os.copy_file_range, os.sendfile, os.pread = copy_file_range, sendfile, pread
    elif point == "fsync":
        def fsync(fd: int) -> None:
            die()
        os.fsync = fsync
    elif point in ("rename-before", "rename-after"):
        original_replace = os.replace

        def replace_(src: Any, dst: Any, **kwargs: Any) -> None:
            if point == "rename-after":
                original_replace(src, dst, **kwargs)
            die()
        os.replace = replace_
    elif point != "none":
        raise ValueError(point)


def _run_job(job: dict) -> None:
    """In the forked child: hook, then run the CLI or the library writer; exit with its status."""
    with open(job["stderr"], "wb") as err, open(os.devnull, "wb") as null:
        os.dup2(null.fileno(), 1)
        os.dup2(err.fileno(), 2)
    if job.get("fsize"):
        resource.setrlimit(resource.RLIMIT_FSIZE, (job["fsize"], job["fsize"]))
    _install_kill_hook(job["point"])
    code = 0
    try:
        if job["mode"] == "cli":
            from pte_devconst.cli.app import main
            try:
                main(job["argv"])
            except SystemExit as done:
                code = done.code if isinstance(done.code, int) else 1
        else:
            src, dest = job["argv"]
            with open_pte(src) as pte:
                write_pte(dest, pte.program, unchanged_segments(pte))
    except BaseException as error:  # noqa: BLE001 - reported through the exit status
        sys.stderr.write(f"{type(error).__name__}: {error}\n")
        code = 3
    sys.stderr.flush()
    os._exit(code)


def driver(jobs_file: str) -> None:
    import contextlib
    import io

    from pte_devconst.cli.app import main

    # Import and warm up once (typer loads much lazily on the first call), so each fork starts at the work.
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        for argv in (["rewrite", "--dry-run", str(SOURCE)], ["inspect", str(SOURCE)]):
            with contextlib.suppress(SystemExit):
                main(argv)

    results = []
    for job in json.loads(Path(jobs_file).read_text()):
        for path in job.get("remove", []):
            Path(path).unlink(missing_ok=True)
        for src, dst in job.get("setup", []):
            shutil.copyfile(src, dst)
        pid = os.fork()
        if pid == 0:
            _run_job(job)
        _, status = os.waitpid(pid, 0)
        results.append({"killed": os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL,
                        "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
                        "exit": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
                        "stderr": Path(job["stderr"]).read_text(errors="replace")})
        if job.get("snapshot"):
            folder = Path(job["snapshot"])
            results[-1]["files"] = {p.name: sha(p) for p in sorted(folder.iterdir()) if p.is_file()}
            for name in temp_files(folder):  # leftovers of a kill; the next job starts clean
                (folder / name).unlink()
    print(json.dumps(results))


def run_driver(jobs: list[dict], tmp: Path) -> list[dict]:
    jobs_file = tmp / "jobs.json"
    jobs_file.write_text(json.dumps(jobs))
    done = subprocess.run([sys.executable, __file__, "--driver", str(jobs_file)], capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def mount_tiny_fs(mount: Path, size: str = "4m") -> Optional[str]:
    """Mount a tmpfs of ``size`` at ``mount``; the reason it cannot be done, or None when mounted."""
    mount.mkdir(parents=True, exist_ok=True)
    if not hasattr(os, "geteuid") or os.geteuid() != 0 or shutil.which("mount") is None:
        return "mounting a tmpfs needs root and mount(8)"
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)], capture_output=True,
                          text=True)
    return None if done.returncode == 0 else f"cannot mount a tmpfs here: {done.stderr.strip()}"


KILL_POINTS = ("mkstemp", "first-write", "mid-write", "mid-copy", "fsync", "rename-before", "rename-after")
IN_PLACE_POINTS = ("first-write", "mid-copy", "fsync", "rename-before", "rename-after")
LIBRARY_POINTS = ("mkstemp", "first-write", "mid-copy", "fsync", "rename-before", "rename-after")
TERM_POINTS = ("first-write", "mid-write", "mid-copy", "fsync")
OLD_OUTPUT = CORPUS / "v_h_cpu_only.pte"


@pytest.fixture(scope="module")
def outcomes(big: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every scenario of this module, run by one driver process: name -> result (files, exit, stderr)."""
    root = tmp_path_factory.mktemp("scenarios")
    logs = root / "logs"
    logs.mkdir()
    tiny = root / "tiny"
    no_mount = mount_tiny_fs(tiny)
    jobs: list[dict] = []
    names: list[str] = []

    def add(name: str, argv: list[str], *, point: str = "none", mode: str = "cli", old: Optional[Path] = None,
            fsize: int = 0, parent: Path = root) -> None:
        folder = parent / name
        folder.mkdir()
        argv = [a.replace("{out}", str(folder / "out.pte")) for a in argv]
        setup = [[str(old), str(folder / "out.pte")]] if old is not None else []
        jobs.append({"mode": mode, "point": point, "argv": argv, "stderr": str(logs / f"{name}.txt"),
                     "snapshot": str(folder), "setup": setup, "fsize": fsize})
        names.append(name)

    add("reference", ["rewrite", str(big), "-o", "{out}"])
    for point in KILL_POINTS:
        for old in (None, OLD_OUTPUT):
            add(f"kill-{point}-{'old' if old else 'new'}", ["rewrite", str(big), "-o", "{out}"], point=point, old=old)
    for point in IN_PLACE_POINTS:
        add(f"in-place-{point}", ["rewrite", "--in-place", "{out}"], point=point, old=big)
    for point in LIBRARY_POINTS:
        add(f"library-{point}", [str(big), "{out}"], point=point, mode="library", old=CORPUS / "v_a_dtypes_copy.pte")
    for point in TERM_POINTS:
        add(f"term-{point}", ["rewrite", str(big), "-o", "{out}"], point=f"term:{point}", old=OLD_OUTPUT)
    for old in (None, OLD_OUTPUT):
        add(f"fsize-{'old' if old else 'new'}", ["rewrite", str(big), "-o", "{out}"], old=old, fsize=4 << 20)
    add("fsize-in-place", ["rewrite", "--in-place", "{out}"], old=big, fsize=4 << 20)
    add("fsize-library", [str(big), "{out}"], mode="library", fsize=1 << 20)
    if no_mount is None:
        for old in (None, OLD_OUTPUT):
            add(f"enospc-{'old' if old else 'new'}", ["rewrite", str(big), "-o", "{out}"], old=old, parent=tiny)
    big_before = sha(big)
    try:
        results = run_driver(jobs, root)
    finally:
        if no_mount is None:
            subprocess.run(["umount", str(tiny)], capture_output=True)
    out = dict(zip(names, results))
    out["_no_mount"] = no_mount
    out["_input_unchanged"] = sha(big) == big_before
    return out


def _check_after_kill(result: dict, point: str, old: Optional[str], new: str) -> None:
    """The destination ``out.pte`` is the old one (or absent) before the rename, the new one after it."""
    files = result["files"]
    assert result["killed"], f"{point}: the hook never fired (exit {result['exit']}): {result['stderr']}"
    if point == "rename-after":
        assert files.get("out.pte") == new, f"{point}: the destination is not the complete new file"
    elif old is None:
        assert "out.pte" not in files, f"{point}: a destination appeared although the rename never happened"
    else:
        assert files.get("out.pte") == old, f"{point}: the old destination was changed"
    leftovers = [name for name in files if name != "out.pte"]
    # SIGKILL allows no clean-up: at most the one temporary file, named so that it is recognisable.
    assert len(leftovers) <= 1 and all(name.startswith(TEMP_PREFIX) for name in leftovers), leftovers


def test_uninterrupted_rewrite_of_the_large_file(outcomes: dict) -> None:
    reference = outcomes["reference"]
    assert reference["exit"] == 0, reference["stderr"]
    assert list(reference["files"]) == ["out.pte"]
    assert outcomes["_input_unchanged"], "a scenario modified the input"


@pytest.mark.parametrize("dest", ["new", "old"], ids=["no-destination", "old-destination"])
def test_sigkill_during_rewrite_leaves_old_or_new_never_partial(outcomes: dict, dest: str) -> None:
    new = outcomes["reference"]["files"]["out.pte"]
    old = sha(OLD_OUTPUT) if dest == "old" else None
    for point in KILL_POINTS:
        _check_after_kill(outcomes[f"kill-{point}-{dest}"], point, old, new)


def test_sigkill_during_in_place_rewrite(outcomes: dict, big: Path) -> None:
    new = outcomes["reference"]["files"]["out.pte"]
    for point in IN_PLACE_POINTS:
        _check_after_kill(outcomes[f"in-place-{point}"], point, sha(big), new)


def test_sigkill_during_library_write_pte(outcomes: dict, big: Path) -> None:
    # write_pte of an unchanged program reproduces its input byte for byte.
    for point in LIBRARY_POINTS:
        _check_after_kill(outcomes[f"library-{point}"], point, sha(CORPUS / "v_a_dtypes_copy.pte"), sha(big))


def test_sigterm_while_writing_removes_the_temporary_file(outcomes: dict) -> None:
    """A CI timeout's SIGTERM: the process still dies of SIGTERM, but leaves no temporary file behind."""
    for point in TERM_POINTS:
        result = outcomes[f"term-{point}"]
        assert result["signal"] == signal.SIGTERM, (point, result)
        assert result["files"] == {"out.pte": sha(OLD_OUTPUT)}, (point, result["files"])


def test_replacing_keeps_the_destination_permissions(tmp_path: Path) -> None:
    dest = tmp_path / "private.pte"
    shutil.copyfile(OLD_OUTPUT, dest)
    dest.chmod(0o600)
    with open_pte(CORPUS / "v_a_dtypes_copy.pte") as pte:
        write_pte(dest, pte.program, unchanged_segments(pte))
    assert dest.stat().st_mode & 0o777 == 0o600
    fresh = tmp_path / "fresh.pte"
    with open_pte(CORPUS / "v_a_dtypes_copy.pte") as pte:
        write_pte(fresh, pte.program, unchanged_segments(pte))
    umask = os.umask(0)
    os.umask(umask)
    assert fresh.stat().st_mode & 0o777 == 0o644 & ~umask


def test_a_failed_check_names_the_destination_not_the_temporary_file(tmp_path: Path) -> None:
    from pte_devconst.util.atomic import atomic_output
    from pte_devconst.util.errors import FormatError

    def check(temp: str) -> None:
        raise FormatError("bad thing", file=temp, where="forward.values[3]")

    dest = tmp_path / "out.pte"
    with pytest.raises(FormatError) as caught:
        with atomic_output(dest, check=check) as fd:
            os.write(fd, b"data")
    assert str(caught.value) == (f"{dest}: the written file failed its check (forward.values[3]: bad thing); "
                                 "the destination was left untouched")
    assert list(tmp_path.iterdir()) == []


def _one_error_line(stderr: str, *fragments: str) -> None:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pte-devconst: error: "), stderr
    assert "Traceback" not in stderr and "internal error" not in stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def _check_clean_failure(result: dict, old: Optional[str], *fragments: str) -> None:
    assert result["exit"] == 2, result
    _one_error_line(result["stderr"], *fragments)
    assert result["files"] == ({"out.pte": old} if old else {}), "destination changed or temporary file left"


@pytest.mark.parametrize("dest", ["new", "old"], ids=["no-destination", "old-destination"])
def test_file_size_limit_is_a_clean_error(outcomes: dict, dest: str) -> None:
    _check_clean_failure(outcomes[f"fsize-{dest}"], sha(OLD_OUTPUT) if dest == "old" else None,
                         "out.pte", "file too large", "left untouched")


def test_file_size_limit_in_place_keeps_the_input(outcomes: dict, big: Path) -> None:
    _check_clean_failure(outcomes["fsize-in-place"], sha(big), "file too large")


def test_file_size_limit_in_the_library_raises_output_error(outcomes: dict) -> None:
    result = outcomes["fsize-library"]
    assert result["exit"] == 3 and result["stderr"].startswith("OutputError: "), result
    assert "file too large" in result["stderr"] and result["files"] == {}


@pytest.mark.parametrize("dest", ["new", "old"], ids=["no-destination", "old-destination"])
def test_full_disk_is_a_clean_error(outcomes: dict, dest: str) -> None:
    if outcomes["_no_mount"]:
        pytest.skip(outcomes["_no_mount"])
    _check_clean_failure(outcomes[f"enospc-{dest}"], sha(OLD_OUTPUT) if dest == "old" else None,
                         "out.pte", "no space left")


@pytest.mark.slow
@pytest.mark.parametrize("fraction", [0.0, 0.25, 0.5, 0.9])
def test_sigkill_from_outside_at_a_size_fraction(request: pytest.FixtureRequest,
                                                 tmp_path_factory: pytest.TempPathFactory, fraction: float) -> None:
    """No hooks: a real ``pte-devconst rewrite`` of 128 MiB killed when its temp file reaches a size."""
    only_when_selected(request, "slow")
    folder = tmp_path_factory.mktemp("outside")
    source = folder / "big.pte"
    make_large_pte(source, 128 << 20)
    out = folder / "out.pte"
    shutil.copyfile(OLD_OUTPUT, out)
    old = sha(out)
    process = subprocess.Popen([sys.executable, "-c", MAIN, "rewrite", str(source), "-o", str(out)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    target = fraction * source.stat().st_size
    try:
        while process.poll() is None and time.monotonic() < deadline:
            temps = temp_files(folder)
            if temps:
                try:
                    if (folder / temps[0]).stat().st_size >= target:
                        break
                except FileNotFoundError:
                    pass
            time.sleep(0.0005)
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    if process.returncode == 0:  # it finished before the kill landed: then the output is complete
        with open_pte(out):
            pass
    else:
        assert sha(out) == old, "killed mid-write, yet the destination changed"


@pytest.fixture
def tiny_fs(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs (needs mount rights; skipped otherwise)."""
    mount = tmp_path / "tiny"
    reason = mount_tiny_fs(mount)
    if reason:
        pytest.skip(reason)
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], capture_output=True)


def test_full_disk_in_the_ptd_writer(tiny_fs: Path) -> None:
    with pytest.raises(OutputError, match="no space left"):
        write_ptd(tiny_fs / "w.ptd", [("w", None, bytes(8 << 20))])
    assert list(tiny_fs.iterdir()) == []

def _count_disk_waits(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Count fsync and writeback-hint calls made while the test runs."""
    counts = {"fsync": 0, "fadvise": 0}
    real_fsync, real_fadvise = os.fsync, os.posix_fadvise

    def fsync(fd: int) -> None:
        counts["fsync"] += 1
        real_fsync(fd)

    def fadvise(*args: Any) -> None:
        counts["fadvise"] += 1
        real_fadvise(*args)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "posix_fadvise", fadvise)
    return counts


def test_no_fsync_writes_the_same_bytes_without_waiting_for_the_disk(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """``--no-fsync``: identical output, no fsync and no writeback hints; the default fsyncs file and folder."""
    from cli_runner import invoke
    from pte_devconst.schema import pte_writer

    monkeypatch.setattr(pte_writer, "WRITEBACK_CHUNK", 64)  # a small corpus file then takes the chunked path
    source = CORPUS / "v_f_multi_method_copy.pte"
    counts = _count_disk_waits(monkeypatch)
    assert invoke("-q", "rewrite", source, "-o", tmp_path / "durable.pte").exit_code == 0
    assert counts["fsync"] >= 2 and counts["fadvise"] > 0  # the file and its folder; writeback hints
    counts.update(fsync=0, fadvise=0)
    result = invoke("-q", "rewrite", source, "-o", tmp_path / "fast.pte", "--no-fsync")
    assert result.exit_code == 0, result.stderr
    assert counts == {"fsync": 0, "fadvise": 0}
    assert (tmp_path / "fast.pte").read_bytes() == (tmp_path / "durable.pte").read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["durable.pte", "fast.pte"]  # no temporary file left


def test_no_fsync_is_still_atomic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without fsync a failed self-check still leaves the old destination and no temporary file."""
    from pte_devconst.util.atomic import atomic_output
    from pte_devconst.util.errors import FormatError

    dest = tmp_path / "out.pte"
    dest.write_bytes(b"old")
    counts = _count_disk_waits(monkeypatch)

    def check(temp: str) -> None:
        assert Path(temp).read_bytes() == b"new"  # the data is complete when the check runs
        raise FormatError("bad thing", file=temp)

    with pytest.raises(FormatError):
        with atomic_output(dest, check=check, durable=False) as fd:
            os.write(fd, b"new")
    assert dest.read_bytes() == b"old" and [p.name for p in tmp_path.iterdir()] == ["out.pte"]
    with atomic_output(dest, durable=False) as fd:
        os.write(fd, b"new")
    assert dest.read_bytes() == b"new" and counts["fsync"] == 0


def test_the_python_api_passes_fsync_through(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import pte_devconst

    counts = _count_disk_waits(monkeypatch)
    pte_devconst.rewrite(CORPUS / "v_f_multi_method_copy.pte", tmp_path / "out.pte", fsync=False)
    assert counts["fsync"] == 0 and (tmp_path / "out.pte").exists()
    pte_devconst.rewrite(CORPUS / "v_f_multi_method_copy.pte", tmp_path / "out2.pte")
    assert counts["fsync"] >= 2


def test_in_place_without_fsync_is_refused(tmp_path: Path) -> None:
    """The in-place file is the only copy of the model: it is never replaced without fsync."""
    from cli_runner import invoke

    model = tmp_path / "model.pte"
    shutil.copyfile(CORPUS / "v_f_multi_method_copy.pte", model)
    before = model.read_bytes()
    result = invoke("rewrite", model, "--in-place", "--no-fsync")
    assert result.exit_code == 2 and "fsync" in result.stderr and "only copy" in result.stderr
    assert model.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["model.pte"]
    assert invoke("rewrite", model, "--in-place", "--no-fsync", "--dry-run").exit_code == 0


if __name__ == "__main__" and len(sys.argv) == 3 and sys.argv[1] == "--driver":
    driver(sys.argv[2])
