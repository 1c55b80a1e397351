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
