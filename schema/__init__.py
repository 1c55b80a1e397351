"""The file formats: .fbs schemas, the code generated from them, and the typed reader/writer of .pte and .ptd.

Everything but ``util`` stands on this package; the reader and writer depend on
nothing but the standard library (flatc's own code for the same ``.fbs``, the
tests' reference, lives in ``tests/flatc_generated/`` with its ``flatbuffers``).
The format is described once, in ``fbs/*.fbs``: ``regenerate.py`` generates the
model's records, the decoder, the encoder and the table counter from it. Reading
(``pte_file``, ``ptd_file``) never loads writing (``pte_writer``, ``ptd_writer``,
``encode``, ``atomic``); the byte ranges both use are in ``span``.
Names are imported on first use,
so importing one module of the package stays cheap.  This package imports no
module inside a function: its modules are split so that what a command does not use is never imported.
"""

from __future__ import annotations

from pte_devconst._lazy import lazy_exports

_EXPORTS = {
    "FormatError": "errors", "OutputError": "errors", "PteDevconstError": "errors",
    "UnsupportedProgramError": "errors", "PteFile": "pte_file", "Span": "span", "open_pte": "pte_file",
}

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_exports(__name__, _EXPORTS)
