"""The real ExecuTorch 1.5.1 runtime as a fuzz oracle, in a forked child with a time and memory limit.

A hostile program can crash or hang the runtime, so every program runs in a child forked from the
fuzz worker (which imports the runtime once): a crash, a hang past the limit or an allocation past
the memory limit ends the child, never the worker.  The child writes its outputs with ``torch.save``
to a file the parent reads back.
"""

from __future__ import annotations

import faulthandler
import os
import resource
import signal
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

RUNTIME_TIME_LIMIT_S = 10.0
RUNTIME_MEMORY_MB = 2048

Calls = dict[str, list[tuple[Any, ...]]]  # method -> the inputs of each call, run in order on one loaded method


@dataclass
class RuntimeRun:
    """What the runtime did with one program: outputs per method, or why it did not run."""

    status: str  # "ok", "error" (the runtime refused or failed, cleanly), "crash" (a signal), "timeout"
    outputs: dict[str, list[list[Any]]] = field(default_factory=dict)
    detail: str = ""

    @property
    def ran(self) -> bool:
        return self.status == "ok"


def import_runtime() -> Any:
    """The runtime's Python module (seconds on the first call: import it before forking)."""
    from executorch.extension.pybindings import portable_lib

    return portable_lib


def _child(runtime: Any, pte: Path, ptd: Optional[Path], calls: Calls, result: Path) -> None:
    import torch

    program = runtime._load_program(str(pte), enable_etdump=False, debug_buffer_size=0,
                                    program_verification=runtime.Verification.InternalConsistency,
                                    data_path=str(ptd) if ptd else None)
    outputs: dict[str, list[list[Any]]] = {}
    for name, inputs in calls.items():
        # Loaded just before its calls: the Python runtime shares host arenas between host-only methods
        # (executorch/runtime/__init__.py), so a method run later could overwrite an earlier one's memory.
        method = program.load_method(name)
        outputs[name] = [[o.clone() if isinstance(o, torch.Tensor) else o for o in method(list(call))]
                         for call in inputs]
    torch.save(outputs, str(result))


def run_in_runtime(pte: Path, ptd: Optional[Path], calls: Calls, *, time_limit: float = RUNTIME_TIME_LIMIT_S,
                   memory_mb: int = RUNTIME_MEMORY_MB) -> RuntimeRun:
    """Run ``calls`` of ``pte`` in the real runtime, in a forked child; never raises for what the program does."""
    runtime = import_runtime()
    import torch

    with tempfile.TemporaryDirectory(prefix="pte-oracle-") as folder:
        result, error, log = Path(folder) / "outputs.pt", Path(folder) / "error.txt", Path(folder) / "log.txt"
        pid = os.fork()
        if pid == 0:  # the child: never returns
            code = 0
            try:
                quiet = os.open(log, os.O_WRONLY | os.O_CREAT, 0o600)  # the runtime logs to stdout and stderr
                os.dup2(quiet, 1)
                os.dup2(quiet, 2)
                # A fault handler inherited from the parent writes to the parent's stderr through a descriptor
                # of its own (pytest's copy), and a crash would print its dump in the test run's log: the
                # child's goes to its own log, which the crash's detail quotes; the signal still ends it.
                faulthandler.enable(file=2, all_threads=False)
                limit = memory_mb << 20
                resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
                resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
                _child(runtime, pte, ptd, calls, result)
            except BaseException as exc:  # noqa: BLE001 - reported to the parent, whatever it is
                code = 3
                try:
                    error.write_text(f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=3)}")
                except BaseException:  # noqa: BLE001
                    pass
            os._exit(code)
        status = _wait(pid, time_limit)
        if status is None:
            return RuntimeRun("timeout", detail=f"still running after {time_limit} s")
        logged = " ".join(log.read_text(errors="replace").split())[-300:] if log.exists() else ""
        if os.WIFSIGNALED(status):
            return RuntimeRun("crash", detail=f"killed by {signal.Signals(os.WTERMSIG(status)).name}; log: {logged}")
        if os.WEXITSTATUS(status) != 0:
            text = error.read_text() if error.exists() else f"exit status {os.WEXITSTATUS(status)}"
            return RuntimeRun("error", detail=" ".join(text.split())[:400] + f"; log: {logged}")
        return RuntimeRun("ok", torch.load(str(result), weights_only=True))


def _wait(pid: int, limit: float) -> Optional[int]:
    """The child's wait status, or None after killing it at ``limit`` seconds."""
    deadline = time.monotonic() + limit
    pause = 0.0005
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return None
        time.sleep(pause)
        pause = min(pause * 2, 0.02)
