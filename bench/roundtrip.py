"""This project's plain round trip of a .pte (decode, re-encode, stream every segment):
``python -m bench.roundtrip IN OUT``.

The like-for-like counterpart of ``bench.et_roundtrip``.  Prints one JSON line of in-process seconds.
"""

from __future__ import annotations

import time
from typing import Optional, Sequence

from bench.common import in_out_main


def roundtrip(source: str, destination: str) -> dict[str, float]:
    """Decode ``source`` and write it again to ``destination``; in-process seconds of open, write and total."""
    from pte_devconst.schema.pte_file import open_pte
    from pte_devconst.schema.pte_writer import unchanged_segments, write_pte

    t0 = time.perf_counter()
    with open_pte(source) as pte:
        t1 = time.perf_counter()
        write_pte(destination, pte.program, unchanged_segments(pte))
    t2 = time.perf_counter()
    return {"open": t1 - t0, "write": t2 - t1, "total": t2 - t0}


def main(argv: Optional[Sequence[str]] = None) -> int:
    return in_out_main(roundtrip, "python -m bench.roundtrip IN OUT", argv)


if __name__ == "__main__":
    raise SystemExit(main())
