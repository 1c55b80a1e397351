"""What ``run`` and ``validate`` refuse before torch or the ExecuTorch runtime is imported (seconds of start-up).

A missing ``--inputs`` file, too few ``--calls``, a program that uses a GPU on a machine without one, a runner
that is not installed: each is one line and exit 2 at once, not after loading torch.  Everything here reads
files only (the program's analysis needs no torch); what only the runner can judge is still judged there.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from typing import Optional

from pte_devconst.util.errors import FormatError, PteDevconstError, ReportedError
from pte_devconst.util.units import exact_bytes

RUNNER_EXTRA = "pip install 'pte-devconst[runner]'"
ENGINE_EXTRA = "pip install 'pte-devconst[executorch]'"


def missing_runner(command: str, engine: str = "runner") -> Optional[str]:
    """Why ``command`` cannot run here (the extra to install), or None.  ``find_spec`` imports nothing."""
    if engine == "executorch":
        if _absent("torch") or _absent("executorch"):
            return (f"'{command} --engine executorch' runs programs in the ExecuTorch runtime, which is not "
                    f"installed: {ENGINE_EXTRA}")
        return None
    if _absent("torch"):
        return f"'{command}' runs programs with torch, which is not installed: {RUNNER_EXTRA}"
    return None


def _absent(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is None
    except (ImportError, ValueError):  # a broken installation: the import itself will say what is wrong
        return False


def require_runner(command: str, engine: str = "runner") -> None:
    problem = missing_runner(command, engine)
    if problem:
        raise PteDevconstError(problem)


def require_file(path: Optional[Path], what: str) -> None:
    """``nope.pt: inputs file not found`` (the runner's words), before anything is loaded."""
    if path is not None and not path.is_file():
        raise PteDevconstError(f"{what} file not found" if not path.exists() else f"{what} is not a file",
                               file=str(path))


def require_program(path: Path) -> None:
    if not path.exists():
        raise PteDevconstError("cannot read: No such file or directory", file=str(path))
    if path.is_dir():
        raise PteDevconstError("is a directory, not a program", file=str(path))


def no_gpu_here() -> bool:
    """True when this machine certainly has no GPU torch could use (no NVIDIA or ROCm device node on Linux, none
    made visible, or macOS); False when there may be one (torch then decides)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1"):
        return True
    if sys.platform == "darwin":
        return True
    if not sys.platform.startswith("linux"):
        return False
    nodes = ("/dev/nvidiactl", "/dev/nvidia0", "/proc/driver/nvidia", "/dev/kfd", "/dev/dxg")
    return not any(os.path.exists(node) for node in nodes)


class Analysed:
    """What the analysis says of one program that matters before running it: its devices and per-call copies."""

    __slots__ = ("devices", "h2d_per_call")

    def __init__(self, devices: tuple[str, ...], h2d_per_call: int) -> None:
        self.devices = devices
        self.h2d_per_call = h2d_per_call


def analysed(path: Path, ptd: Optional[Path] = None) -> Optional[Analysed]:
    """The program's devices and estimated per-call host-to-device bytes, read without torch.

    A file that is no program at all is refused here (FormatError, one line); a program the analysis cannot
    judge gives None, and the runner decides.
    """
    from pte_devconst import api

    try:
        summary = api.analyze(path, ptd)
    except FormatError:
        raise
    except ReportedError:
        return None
    devices = sorted({device.split(",")[0] for method in summary.methods
                      for device in [*(d.device for d in method.delegates), *(b.device for b in method.buffers)]
                      if not device.startswith("cpu")})
    return Analysed(tuple(devices), sum(method.h2d_bytes_per_call for method in summary.methods))


def require_devices(path: Path, found: Optional[Analysed], simulate: bool) -> None:
    """A program that uses a device on a machine without a GPU needs --simulate-devices: said before torch loads."""
    if simulate or found is None or not found.devices or not no_gpu_here():
        return
    raise PteDevconstError(f"the program uses {', '.join(found.devices)} but this machine has no GPU; run with "
                           "--simulate-devices to keep device memory on the host while counting every copy",
                           file=str(path))


def swapped_hint(original: Path, rewritten: Path, before: Optional[Analysed], after: Optional[Analysed]
                 ) -> Optional[str]:
    """A hint when the "rewrite" copies more per call than the "original": the arguments may be swapped."""
    if before is None or after is None or after.h2d_per_call <= before.h2d_per_call:
        return None
    return (f"{rewritten} copies more to the device per call than {original} (about "
            f"{exact_bytes(after.h2d_per_call)} against {exact_bytes(before.h2d_per_call)}): are the arguments "
            "swapped? validate takes ORIGINAL REWRITTEN")


def before_validating(original: Path, rewritten: Path, ptd: Optional[Path], rewritten_ptd: Optional[Path],
                      simulate: bool, engine: str) -> Optional[str]:
    """One pair's checks before it runs: both programs there and readable, a GPU where they need one (the runner;
    the engine flips them to the CPU); returns the swapped-arguments hint, if any (a hint: the verdict is the
    checks')."""
    for path in (original, rewritten):
        require_program(path)
    before, after = analysed(original, ptd), analysed(rewritten, rewritten_ptd)
    if engine != "executorch":
        require_devices(original, before, simulate)
        require_devices(rewritten, after, simulate)
    return swapped_hint(original, rewritten, before, after)


def before_running(command: str, engine: str, files: tuple[tuple[Optional[Path], str], ...]) -> None:
    """The options' checks of ``run`` and ``validate``: the runner installed, every file named there."""
    require_runner(command, engine)
    for path, what in files:
        require_file(path, what)
