"""What one command asks of the rewriter, resolved once: the typed requests the API builds and the layers pass down.

Light on purpose (no analysis, no writer at import): the command line uses ``VerifyMode`` as its option's type.
The paths in a request are decided (the .ptd rule and the default output are the API's, ``pte_devconst.paths``);
nothing below re-derives them.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional, Union

from pte_devconst.util.errors import PteDevconstError
from pte_devconst.util.named_enum import NamedEnum
from pte_devconst.util.record import record

if TYPE_CHECKING:
    from pte_devconst.schema.pte_file import ProgramBytes, PteFile

    from .names import ProgramNames
    from .plan import RewriteOptions

__all__ = ["Namer", "RewriteRequest", "VerifyMode"]

# Names an opened program's constants for a report (an ETRecord's names); never changes what is written.
Namer = Callable[["PteFile"], Optional["ProgramNames"]]


class VerifyMode(NamedEnum):
    """How the self-check compares the written output with the input and the plan (``--verify``)."""

    SAMPLED = "sampled"  # structure and the tool's own bytes in full; bulk copies from a proven range in windows
    FULL = "full"  # every byte

    @classmethod
    def parse(cls, mode: Union[None, str, "VerifyMode"]) -> "VerifyMode":
        """A mode from the API's ``verify=`` (None: FULL when PTE_DEVCONST_FULL_CHECK is set, else SAMPLED)."""
        if mode is None:
            from .verify import full_by_default  # the self-check's module, loaded by the rewrite anyway, not here

            return cls.FULL if full_by_default() else cls.SAMPLED
        try:
            return cls(mode)
        except ValueError:
            raise PteDevconstError(f"verify must be one of {', '.join(m.value for m in cls)}, got {mode!r}") from None


@record
class RewriteRequest:
    """One program's rewrite, every choice made: what to read, where to write, how to plan and how to check.

    ``destination`` None: a dry run, or a program in memory (rewritten into ``RewriteResult.data``); with
    ``in_place`` it is ``source`` itself.  ``names`` names the constants in the report (never in the output).
    """

    source: Union[Path, "ProgramBytes"]
    destination: Optional[Path]
    ptd: Optional[Path]
    options: "RewriteOptions"
    dry_run: bool = False
    in_place: bool = False
    durable: bool = True  # fsync before replacing the destination (--no-fsync: still atomic)
    verify: VerifyMode = VerifyMode.SAMPLED
    names: Optional[Namer] = None

    @property
    def in_memory(self) -> bool:
        return not isinstance(self.source, Path)

    def refusal(self) -> Optional[str]:
        """Why this request cannot run as asked (None: it can), before any file is read."""
        if self.in_memory:
            return None if self.destination is None and not self.in_place else (
                "a program in memory is rewritten in memory (result.data): output and in_place are for files")
        if self.in_place and not self.durable and not self.dry_run:
            return ("an in-place rewrite always fsyncs (--no-fsync refused): a power failure must not lose the only "
                    "copy of the model")
        if self.destination is None and not self.dry_run:
            return "no output given (pass an output path, in_place or dry_run)"
        return None

