"""This project's plain round trip of a .pte (decode, re-encode, stream every segment): ``python -m bench.roundtrip IN OUT``.

The like-for-like counterpart of ``bench.et_roundtrip``.  Prints one JSON line of in-process seconds.
"""

from __future__ import annotations

import json
import sys
import time


def main() -> None:
    from pte_devconst.schema.pte_file import open_pte
    from pte_devconst.schema.pte_writer import unchanged_segments, write_pte

    t0 = time.perf_counter()
    with open_pte(sys.argv[1]) as source:
        t1 = time.perf_counter()
        write_pte(sys.argv[2], source.program, unchanged_segments(source))
    t2 = time.perf_counter()
    print(json.dumps({"open": t1 - t0, "write": t2 - t1, "total": t2 - t0}))


if __name__ == "__main__":
    main()
