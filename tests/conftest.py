"""Shared fixtures: the committed copy of the ExecuTorch 1.5.1 corpus and helpers to reach it."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Optional

import pytest

# Text output is laid out for the terminal width; pin it so the developer's terminal cannot change a result.
# (CI's non-terminal default is 80 too; tests that need another width pass COLUMNS themselves.)
os.environ["COLUMNS"] = "80"

FIXTURES = Path(__file__).parent / "fixtures"
CORPUS = FIXTURES / "corpus"
EXAMPLES = Path(__file__).parent.parent / "examples" / "models"


def shipped(folder: Path) -> list[str]:
    """Stems of the programs committed in ``folder``: each comes with NAME.inputs.pt.

    Files the tool writes there (``NAME.devconst.pte`` from the README's first command, say) have no
    inputs file, so a test run after the README's commands never picks them up.
    """
    return sorted(p.stem for p in folder.glob("*.pte") if p.with_name(f"{p.stem}.inputs.pt").is_file())


CASES = shipped(CORPUS)
CPU_CASES = [name for name in CASES if (CORPUS / f"{name}.runtime.pt").exists()]


def pte_path(name: str) -> Path:
    return CORPUS / f"{name}.pte"


def ptd_path(name: str) -> Optional[Path]:
    path = CORPUS / f"{name}.ptd"
    return path if path.exists() else None


def facts(name: str) -> dict:
    return json.loads((CORPUS / f"{name}.json").read_text())


@pytest.fixture
def work_copy(tmp_path: Path):
    """Copy a corpus case (pte and ptd) into tmp_path and return the .pte path there."""

    def copy(name: str) -> Path:
        for suffix in (".pte", ".ptd"):
            source = CORPUS / f"{name}{suffix}"
            if source.exists():
                shutil.copy(source, tmp_path / source.name)
        return tmp_path / f"{name}.pte"

    return copy


def _cuda_available() -> bool:
    try:
        import torch
        return torch.cuda.is_available()
    except Exception:  # torch missing or broken: GPU tests cannot run
        return False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gpu_items = [item for item in items if "gpu" in item.keywords]
    # Importing torch costs seconds: only when a GPU test was collected.
    if gpu_items and not _cuda_available():
        skip = pytest.mark.skip(reason="needs a CUDA GPU")
        for item in gpu_items:
            item.add_marker(skip)
    # Long end-to-end runs (re-exports, large files) run only when asked for: pytest -m slow.
    if "slow" not in (config.option.markexpr or ""):
        later = pytest.mark.skip(reason="a long run: select it with -m slow")
        for item in items:
            if "slow" in item.keywords:
                item.add_marker(later)
