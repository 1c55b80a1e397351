"""The installed ExecuTorch runtime running a program once, and what importing it costs (section 10).

    python -m bench.children.runtime_once stage SRC DST      # DST: SRC flipped to the CPU, written for the runtime
    python -m bench.children.runtime_once run PTE INPUTS     # load PTE by path, load its method, execute one call
    python -m bench.children.runtime_once baseline           # import torch and executorch.runtime, load nothing

``stage`` is what ``validate --engine executorch`` does before the runtime sees a program
(``runner.executorch_engine.flip``, then the project's writer, as ``runner/staging.py`` writes it): the pip
runtime has no device allocator, so the device placements move to the CPU; the delegates are unchanged.  The
section runs it untimed.  ``run`` is what a user's process does with the program: ``Runtime.get().load_program``
(a path: the runtime maps the file), ``load_method`` of the first method in INPUTS (a ``torch.save`` file,
``{method: [call inputs]}``, as examples/xnnpack_device.py writes), ``execute`` of its first call.  It prints one
JSON line: seconds to import, load the program, load the method and execute, and the outputs' count.
``baseline`` is the floor every figure of the section is measured above: a process that imports torch and the
runtime (what both engines of ``validate`` import) and loads nothing.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any, Optional, Sequence


def stage(source: str, destination: str) -> int:
    """Write ``source`` flipped to the CPU (``executorch_engine.flip``) to ``destination``; its size in bytes."""
    from pte_devconst.runner.executorch_engine import flip
    from pte_devconst.schema.pte_file import open_pte
    from pte_devconst.schema.pte_writer import layout_pte, unchanged_segments, write_pte_to_fd

    with open_pte(source) as pte:
        flipped, _ = flip(pte.program)
        contents = unchanged_segments(pte)
        fd = os.open(destination, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            write_pte_to_fd(fd, layout_pte(flipped, contents), contents, writeback=False)
        finally:
            os.close(fd)
    return os.path.getsize(destination)


def import_runtime() -> float:
    """Import torch and ``executorch.runtime``; the seconds it took."""
    start = time.perf_counter()
    import executorch.runtime  # noqa: F401
    import torch  # noqa: F401

    return time.perf_counter() - start


def run_once(pte: str, inputs: str) -> dict[str, Any]:
    """Load ``pte`` in the installed runtime and execute its first method's first call of ``inputs`` once."""
    figures: dict[str, Any] = {"import": import_runtime()}
    import torch
    from executorch.runtime import Runtime

    calls = torch.load(inputs, weights_only=False)
    method_name = next(iter(calls))
    call = list(calls[method_name][0])
    start = time.perf_counter()
    program = Runtime.get().load_program(pte)
    figures["load_program"] = time.perf_counter() - start
    start = time.perf_counter()
    method = program.load_method(method_name)
    figures["load_method"] = time.perf_counter() - start
    start = time.perf_counter()
    outputs = method.execute(call)
    figures["execute"] = time.perf_counter() - start
    figures["method"] = method_name
    figures["outputs"] = len(outputs)
    return figures


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["stage"] and len(args) == 3:
        print(json.dumps({"size": stage(args[1], args[2])}))
    elif args[:1] == ["run"] and len(args) == 3:
        print(json.dumps(run_once(args[1], args[2])))
    elif args == ["baseline"]:
        print(json.dumps({"import": import_runtime()}))
    else:
        print("usage: python -m bench.children.runtime_once {stage SRC DST,run PTE INPUTS,baseline}", file=sys.stderr)
        return 2
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
