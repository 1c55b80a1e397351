"""ExecuTorch 1.5.1's own Python round trip of a .pte, for comparison: ``python -m bench.et_roundtrip IN OUT``.

``deserialize_pte_binary`` then ``serialize_pte_binary`` (constants and delegate blobs extracted to
segments again, as the exporter writes them), then the Cord is written to OUT.  Prints one JSON line:
the in-process seconds of each step (imports excluded).
"""

from __future__ import annotations

import time
from typing import Optional, Sequence

from bench.common import in_out_main


def roundtrip(source: str, destination: str) -> dict[str, float]:
    """ExecuTorch's round trip of ``source`` into ``destination``; in-process seconds of each step and the total."""
    from executorch.exir._serialize._program import deserialize_pte_binary, serialize_pte_binary

    t0 = time.perf_counter()
    with open(source, "rb") as handle:
        data = handle.read()
    t1 = time.perf_counter()
    pte = deserialize_pte_binary(data)
    t2 = time.perf_counter()
    cord = serialize_pte_binary(pte, extract_delegate_segments=True)
    t3 = time.perf_counter()
    with open(destination, "wb") as handle:
        cord.write_to_file(handle) if hasattr(cord, "write_to_file") else handle.write(bytes(cord))
    t4 = time.perf_counter()
    return {"read": t1 - t0, "deserialize": t2 - t1, "serialize": t3 - t2, "write": t4 - t3, "total": t4 - t0}


def main(argv: Optional[Sequence[str]] = None) -> int:
    return in_out_main(roundtrip, "python -m bench.et_roundtrip IN OUT", argv)


if __name__ == "__main__":
    raise SystemExit(main())
