"""The ``pte-devconst`` command line: typer commands that call ``pte_devconst.api`` and render its results.

``app.py`` holds the app, the global options (carried in typer's context) and the error conventions;
each ``*_cmd.py`` registers one command; ``output.py`` the formats and the JSON envelope (documents come
from each result's ``to_json()``, described by ``report.schema.json``).

Imports kept inside functions for start-up speed, in this package (``bench --only startup``):

* ``pte_devconst.api`` (and through it the rewriter, the runner and torch) inside each command function:
  ``--help``, ``--version`` and a usage error load none of it; a command loads only what it runs.
* ``pte_devconst.rewriter.derived`` and ``runner.copies``/``run`` in the renderers that need their
  helpers (``reasons_in_brief``, ``CopyTotals``, ``OutputSummary``).
* ``rich`` (consoles, tables, markup, progress bars) when something is printed: an error line or a JSON
  document never loads it.
* ``cli.output`` inside ``app.fail`` and ``app.main``: only an error needs ``printable``.
"""

import os as _os
import signal as _signal
import sys as _sys

INTERRUPTED = 130  # util.exit_code.ExitCode.INTERRUPTED, which this module must not import yet (it stays first)


def _interrupted_at_start_up(signum: int, frame: object) -> None:  # pragma: no cover - a separate process
    """Ctrl-C while the command line is still importing (typer, rich: the first quarter second): one line, 130.

    Nothing has been written yet, so nothing needs cleaning up; ``app.entry`` puts Python's own handler back as soon
    as the imports are done, and from then on an interrupt is a ``KeyboardInterrupt`` that each command handles.
    """
    _os.write(2, b"pte-devconst: interrupted\n")
    _os._exit(INTERRUPTED)


def _started_as_the_command() -> bool:
    """This process is the ``pte-devconst`` script or ``python -m pte_devconst`` (not a program importing us)."""
    argv0 = _sys.argv[0] if _sys.argv else ""
    name = _os.path.basename(argv0)
    return name in ("pte-devconst", "pte-devconst.exe") or (
        name == "__main__.py" and _os.path.basename(_os.path.dirname(argv0)) == "pte_devconst")


if _started_as_the_command() and _signal.getsignal(_signal.SIGINT) is _signal.default_int_handler:
    _signal.signal(_signal.SIGINT, _interrupted_at_start_up)
