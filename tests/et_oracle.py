"""The real ExecuTorch 1.5.1 runtime, used as an oracle by the tests (never by the tool)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional, Sequence, Union

import torch


def run_with_executorch(pte: Union[Path, bytes], method: str, inputs: Sequence[torch.Tensor],
                        ptd: Optional[Path] = None) -> list[torch.Tensor]:
    return run_calls_with_executorch(pte, method, [inputs], ptd)[0]


def run_calls_with_executorch(pte: Union[Path, bytes], method: str, calls: Sequence[Sequence[Any]],
                              ptd: Optional[Path] = None) -> list[list[Any]]:
    """The outputs of ``calls`` run in order on one loaded method, so state (a KV cache) carries over.

    ``pte`` is a file or a program's bytes.  Each run loads the program afresh: the pybindings give every
    host-only method of one loaded program the same arenas, so another method run in between would overwrite
    this one's planned memory (its state, its resident constants).  ``program`` stays referenced while the
    method runs: a loaded method does not keep its program alive, and a freed one fails at random.
    """
    from executorch.runtime import Runtime

    program = Runtime.get().load_program(pte, data_path=str(ptd) if ptd else None)
    loaded = program.load_method(method)
    return [[o.clone() if isinstance(o, torch.Tensor) else o for o in loaded.execute(list(call))] for call in calls]
