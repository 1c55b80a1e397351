"""The file formats: .fbs schemas, flatc-generated code, and the typed reader/writer of .pte and .ptd.

Everything else in pte-devconst stands on this package; the reader and writer
depend on nothing but the standard library (``flatbuffers`` is needed only by the
flatc-generated code in ``generated/``, which the tests use as their reference).
The format is described once, in ``fbs/*.fbs``: ``regenerate.py`` generates the
model's records, the decoder, the encoder and the table counter from it. Reading
(``pte_file``, ``ptd_file``) never loads writing (``pte_writer``, ``ptd_writer``,
``encode``, ``atomic``); the byte ranges both use are in ``span``.
Names are imported on first use,
so ``import pte_devconst.schema.errors`` (which every command does) stays cheap.
"""

from __future__ import annotations

from pte_devconst._lazy import lazy_exports

_EXPORTS = {
    "FormatError": "errors", "OutputError": "errors", "PteDevconstError": "errors",
    "UnsupportedProgramError": "errors", "PteFile": "pte_file", "Span": "span", "open_pte": "pte_file",
}

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_exports(__name__, _EXPORTS)
