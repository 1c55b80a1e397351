"""Ctrl-C at any moment ends the command with one line on stderr and exit 130, never a traceback (issue 45)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "models" / "mlp_copy.pte"
INTERRUPTED = "pte-devconst: interrupted\n"

# The console script's own steps, with the interrupt landing while the command line's modules are still imported
# (typer, rich: the first quarter second of every command).
DURING_IMPORTS = """
import os, signal, sys
sys.argv = [os.path.join(os.path.dirname(sys.executable), "pte-devconst"), "inspect", sys.argv[1]]
import pte_devconst.cli
os.kill(os.getpid(), signal.SIGINT)
import pte_devconst.cli.app
pte_devconst.cli.app.entry()
"""

# After the imports, before a command runs (entry around main).
BEFORE_THE_COMMAND = """
import sys
sys.argv = ["pte-devconst", "inspect", sys.argv[1]]
from pte_devconst.cli import app
def interrupted(argv=None, prog_name="pte-devconst"):
    raise KeyboardInterrupt
app.main = interrupted
app.entry()
"""


def _interruptible() -> None:
    """In the child: Ctrl-C's default disposition.  A suite started in the background (``cmd &`` in a script, as a
    CI harness may) has SIGINT ignored, which children inherit, and Python then installs no handler at all."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _child(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code, str(EXAMPLE)], capture_output=True, text=True, timeout=120,
                          preexec_fn=_interruptible)


@pytest.mark.parametrize("code", [DURING_IMPORTS, BEFORE_THE_COMMAND], ids=["during-imports", "before-the-command"])
def test_an_interrupt_is_one_line_and_exit_130(code: str) -> None:
    done = _child(code)
    assert (done.returncode, done.stderr, done.stdout) == (130, INTERRUPTED, "")


def test_a_program_importing_the_package_keeps_pythons_handler() -> None:
    """Only the command line itself ends on Ctrl-C at once: a program (or a test run) importing the package still
    gets its KeyboardInterrupt."""
    done = subprocess.run([sys.executable, "-c", "import signal, pte_devconst.cli.app; "
                           "assert signal.getsignal(signal.SIGINT) is signal.default_int_handler"],
                          capture_output=True, text=True, timeout=120, preexec_fn=_interruptible)
    assert done.returncode == 0, done.stderr


def test_the_real_command_interrupted_early_never_shows_a_traceback() -> None:
    """The script itself, interrupted a little after it started: either it finished, or one line and 130."""
    process = subprocess.Popen([sys.executable, "-m", "pte_devconst", "inspect", str(EXAMPLE)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                               preexec_fn=_interruptible)
    time.sleep(0.15)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=120)
    assert "Traceback" not in err
    assert (process.returncode, err) in ((0, ""), (130, INTERRUPTED)), (process.returncode, err)
