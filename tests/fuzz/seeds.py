"""The files every mutation starts from: the committed corpus and the examples."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO / "tests" / "fixtures" / "corpus"
REAL_MODELS = REPO / "tests" / "fixtures" / "real_models"
EXAMPLES = REPO / "examples"
MAX_SEED_BYTES = 4 << 20  # larger examples would make each case slow without finding more


@dataclass(frozen=True)
class Seed:
    """One valid input file: its kind ("pte" or "ptd"), name and bytes."""

    kind: str
    name: str
    data: bytes
    ptd: Optional[bytes] = None  # a .pte's NAME.ptd, when it has one (program_seeds)


@functools.lru_cache(maxsize=None)
def load_seeds() -> tuple[Seed, ...]:
    """Every corpus and example .pte/.ptd (sorted, so case numbering is stable for a given tree)."""
    found: list[Seed] = []
    for folder in (CORPUS, EXAMPLES):
        if not folder.is_dir():
            continue
        for path in sorted(folder.rglob("*")):
            kind = path.suffix[1:]
            # Committed programs come with NAME.inputs.pt (a .ptd with its program's): files the tool wrote
            # into these folders (NAME.devconst.pte) are not seeds, so case numbering stays stable.
            shipped = path.with_name(f"{path.stem}.inputs.pt").is_file()
            if kind in ("pte", "ptd") and shipped and path.is_file() and path.stat().st_size <= MAX_SEED_BYTES:
                found.append(Seed(kind, str(path.relative_to(REPO)), path.read_bytes()))
    if not found:
        raise RuntimeError(f"no seed files under {CORPUS}")
    return tuple(found)


@functools.lru_cache(maxsize=None)
def program_seeds() -> tuple[Seed, ...]:
    """The .pte seeds of ``load_seeds``, each with the bytes of its NAME.ptd when there is one."""
    found = []
    for seed in load_seeds():
        if seed.kind == "pte":
            ptd = (REPO / seed.name).with_suffix(".ptd")
            found.append(Seed("pte", seed.name, seed.data, ptd.read_bytes() if ptd.is_file() else None))
    return tuple(found)


@functools.lru_cache(maxsize=None)
def real_model_seeds() -> tuple[Seed, ...]:
    """The real-model fixtures (tests/fixtures/real_models): 16 architectures, CPU and device programs.

    A seed set of its own, so adding it renumbers none of the cases of ``load_seeds``.
    """
    found = [Seed("pte", str(path.relative_to(REPO)), path.read_bytes())
             for path in sorted(REAL_MODELS.glob("*.pte")) if path.with_name(f"{path.stem}.inputs.pt").is_file()]
    if not found:
        raise RuntimeError(f"no real-model fixtures under {REAL_MODELS}")
    return tuple(found)


@functools.lru_cache(maxsize=None)
def foreign_files() -> tuple[tuple[str, bytes], ...]:
    """Files of other formats that users pass by mistake (torch .pt zips, JSON, README...)."""
    out: list[tuple[str, bytes]] = []
    for pattern in ("*.inputs.pt", "*.json", "README.md"):
        for path in sorted(CORPUS.glob(pattern))[:2]:
            out.append((path.name, path.read_bytes()[: 1 << 16]))
    out += [
        ("png", b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 2),
        ("elf", b"\x7fELF\x02\x01\x01" + bytes(120)),
        ("gzip", b"\x1f\x8b\x08\x00" + bytes(60)),
        ("zip", b"PK\x03\x04" + bytes(100)),
        ("text", b"hello, this is not a program\n" * 4),
        ("onnx-ish", b"\x08\x07\x12\x07pytorch" + bytes(80)),
        ("tflite", b"\x1c\x00\x00\x00TFL3" + bytes(120)),
    ]
    return tuple(out)
