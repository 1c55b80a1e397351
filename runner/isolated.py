"""The installed ExecuTorch runtime in a child process: a backend that crashes takes the child down, never the
command.

Real backends are native code: a delegate blob that does not match its call site, a hostile blob, or a backend
bug can end a process by a signal (a SIGSEGV in XNNPACK on a blob of another method's call was the case that made
this module).  So everything the runner asks of the runtime (which backends it registers, loading a program and
its methods, executing one) runs in one long-lived child (``python -m pte_devconst.runner.isolated``), spoken to
over its standard input and output: length-prefixed pickles of requests and replies, tensors included.  A
request that the runtime refuses comes back as an error with the runtime's own message and the end of its log;
a child that dies (a signal, an abort) raises ``RuntimeDied`` naming what it was doing and the signal, and the
next request starts a new child.

The child is started on first use (importing torch and ExecuTorch there takes seconds) and kept for the rest of
the process: one ``validate`` of many pairs, or a test suite, pays the start once.  The protocol carries only
what this package's own code sends; the child runs no input of its own choosing.

Large bytes never travel through the pipe.  A program is loaded from its file (the runtime maps it), and a
delegate argument that lives in a region of the runner's memory (``shared_memory.py``: a planned arena, the
program's file) travels as a ``SharedTensor`` naming the region and offset: the region's descriptor goes to the
child once, over a Unix socket beside the pipes (``SCM_RIGHTS``), and the child maps the same pages.
"""

from __future__ import annotations

import atexit
import os
import pickle
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import weakref
from typing import IO, Any, Callable, Optional

from .values import RunnerError

_HEADER = struct.Struct("<Q")
LOG_LINES = 3  # of the runtime's log, quoted in an error
SOCKET_ENV = "PTE_DEVCONST_RUNTIME_SOCKET"  # the child's end of the descriptor socket, by number


def log_tail(text: str) -> str:
    """The last ``LOG_LINES`` non-empty lines of a runtime's log, on one line (what an error quotes)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return " | ".join(lines[-LOG_LINES:])[:400]


class RuntimeDied(RunnerError):
    """The child running the ExecuTorch runtime ended while it worked (a signal or an abort)."""


def _signal_name(code: int) -> str:
    """``SIGSEGV (signal 11)`` for a return code ``-11``; ``exit status 3`` otherwise."""
    if code < 0:
        try:
            return f"{signal.Signals(-code).name} (signal {-code})"
        except ValueError:
            return f"signal {-code}"
    return f"exit status {code}"


def _send(stream: IO[bytes], message: Any) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_HEADER.pack(len(data)))
    stream.write(data)  # not joined to the header: that would copy a large message once more
    stream.flush()


def _receive(stream: IO[bytes]) -> Optional[Any]:
    """The next message, or None at the end of the stream."""
    header = stream.read(_HEADER.size)
    if len(header) < _HEADER.size:
        return None
    size = _HEADER.unpack(header)[0]
    data = stream.read(size)
    if len(data) < size:
        return None
    return pickle.loads(data)  # noqa: S301 - written by this module's other end, in a process of our own


class RuntimeWorker:
    """The parent's handle on the child (module docstring)."""

    def __init__(self) -> None:
        self.log = tempfile.TemporaryFile()  # the child's stderr: the runtime's log, quoted when it dies
        self.descriptors, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        environment = {**os.environ, "PYTHONUNBUFFERED": "1", SOCKET_ENV: str(theirs.fileno())}
        try:
            self.process = subprocess.Popen([sys.executable, "-m", "pte_devconst.runner.isolated"],
                                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
                                            env=environment, pass_fds=(theirs.fileno(),))
        finally:
            theirs.close()
        self.next_key = 0
        self.mapped: set[int] = set()  # regions the child has mapped (shared_memory.py), by key
        self.unmapped: list[int] = []  # keys of regions the parent let go, to unmap at the next request

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def key(self) -> int:
        """A fresh name for a program the child holds."""
        self.next_key += 1
        return self.next_key

    def share(self, region: Any, where: str = "") -> None:
        """Let the child map ``region`` (a ``shared_memory.Region``), once: its descriptor goes over the socket."""
        if region.key in self.mapped:
            return
        self._unmap_released()
        try:
            socket.send_fds(self.descriptors, [b"r"], [region.fd])
        except OSError:
            pass  # a dead child: the request below says so
        self.request("map", region.key, region.size, region.shared, what="map the runner's memory", where=where)
        self.mapped.add(region.key)
        weakref.finalize(region, self.unmapped.append, region.key)

    def _unmap_released(self) -> None:
        while self.unmapped:
            key = self.unmapped.pop()
            self.mapped.discard(key)
            self.request("unmap", key, what="let the runner's memory go")

    def request(self, kind: str, *args: Any, what: str, where: str = "") -> Any:
        """Ask the child; its reply's payload.  ``what`` says in words what was asked (for an error)."""
        assert self.process.stdin is not None and self.process.stdout is not None
        if kind == "execute" and self.unmapped:
            self._unmap_released()
        try:
            _send(self.process.stdin, (kind, args))
            reply = _receive(self.process.stdout)
        except (BrokenPipeError, OSError):
            reply = None
        if reply is None:
            code = self.process.wait()
            tail = self._log_tail()
            raise RuntimeDied(f"the ExecuTorch runtime died by {_signal_name(code)} while it was asked to {what}"
                              + (f" (runtime log: {tail})" if tail else ""), where=where)
        status, payload = reply
        if status == "error":
            raise RunnerError(f"the ExecuTorch runtime failed to {what}: {payload}", where=where)
        return payload

    def _log_tail(self) -> str:
        self.log.seek(0)
        return log_tail(self.log.read().decode("utf-8", "replace"))

    def close(self) -> None:
        if self.alive:
            try:
                assert self.process.stdin is not None
                self.process.stdin.close()
                self.process.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                self.process.kill()
        self.log.close()
        self.descriptors.close()


_WORKER: list[RuntimeWorker] = []


def worker() -> RuntimeWorker:
    """The child, started on first use, and again after one died."""
    if not _WORKER or not _WORKER[0].alive:
        if _WORKER:
            _WORKER[0].log.close()
            _WORKER[0].descriptors.close()
        _WORKER[:] = [RuntimeWorker()]
    return _WORKER[0]


@atexit.register
def _stop() -> None:
    for running in _WORKER:
        running.close()


# --- the child ----------------------------------------------------------------------------------------------


def _serve(incoming: IO[bytes], outgoing: IO[bytes]) -> None:
    """Answer requests until the parent closes the pipe."""
    from .runtime_backend import RuntimeLog
    from .shared_memory import MappedRegions, SharedTensor

    programs: dict[int, Any] = {}
    methods: dict[tuple[int, str], Any] = {}
    log = RuntimeLog()
    regions = MappedRegions()
    descriptors = socket.socket(fileno=int(os.environ[SOCKET_ENV])) if os.environ.get(SOCKET_ENV) else None

    def backends() -> tuple[str, list[str]]:
        from importlib import metadata

        from executorch.runtime import Runtime

        registry = Runtime.get().backend_registry
        names = [name for name in registry.registered_backend_names if registry.is_available(name)]
        return metadata.version("executorch"), names

    def load(key: int, data: "bytes | str", data_path: Optional[str]) -> None:
        """A program from its file (a path: the runtime maps it) or, when small, its bytes."""
        from executorch.runtime import Runtime

        programs[key] = Runtime.get().load_program(data, data_path=data_path)

    def load_method(key: int, name: str) -> None:
        methods[(key, name)] = programs[key].load_method(name)

    def map_region(key: int, size: int, shared: bool) -> None:
        if descriptors is None:
            raise RuntimeError("no descriptor socket to receive the runner's memory from")
        _, fds, _, _ = socket.recv_fds(descriptors, 1, 1)
        if not fds:
            raise RuntimeError("the runner's memory descriptor did not arrive")
        regions.map(key, fds[0], size, shared)

    def execute(key: int, name: str, inputs: list[Any]) -> list[Any]:
        import torch

        bound = [regions.tensor(x) if isinstance(x, SharedTensor) else x for x in inputs]
        results = methods[(key, name)].execute(bound)
        return [r.clone() if isinstance(r, torch.Tensor) else r for r in results]

    def drop(key: int) -> None:
        for held in [k for k in methods if k[0] == key]:
            del methods[held]
        programs.pop(key, None)

    handlers: dict[str, Callable[..., Any]] = {"backends": backends, "load": load, "load_method": load_method,
                                               "execute": execute, "drop": drop, "map": map_region,
                                               "unmap": regions.unmap}
    while True:
        message = _receive(incoming)
        if message is None:
            return
        kind, args = message
        try:
            with log.capture():
                payload = handlers[kind](*args)
            reply: tuple[str, Any] = ("ok", payload)
        except Exception as error:  # noqa: BLE001 - every failure of the runtime goes back as one message
            text = " ".join(str(error).split())[:300] or type(error).__name__
            quoted = log.last_lines()
            reply = ("error", text + (f" (runtime log: {quoted})" if quoted else ""))
        _send(outgoing, reply)


def main() -> None:
    """The child's entry point: the protocol on a private copy of stdout; anything else printed goes to stderr."""
    incoming = sys.stdin.buffer
    outgoing = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    _serve(incoming, outgoing)


if __name__ == "__main__":
    main()
