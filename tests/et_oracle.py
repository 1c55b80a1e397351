"""The real ExecuTorch 1.5.1 runtime, used as an oracle by the tests (never by the tool)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

import torch


def run_with_executorch(pte: Path, method: str, inputs: Sequence[torch.Tensor], ptd: Optional[Path] = None
                        ) -> list[torch.Tensor]:
    from executorch.runtime import Runtime

    program = Runtime.get().load_program(str(pte), data_path=str(ptd) if ptd else None)
    outputs = program.load_method(method).execute(list(inputs))
    return [o.clone() if isinstance(o, torch.Tensor) else o for o in outputs]
