"""The file formats: .fbs schemas, flatc-generated code, and the typed reader/writer of .pte and .ptd.

Everything else in pte-devconst stands on this package; it depends on nothing
but the standard library and ``flatbuffers``.
"""

from .errors import FormatError, OutputError, PteDevconstError, UnsupportedProgramError
from .pte_file import PteFile, Span, open_pte

__all__ = ["FormatError", "OutputError", "PteDevconstError", "UnsupportedProgramError", "PteFile", "Span", "open_pte"]
