"""The tool's switches in the environment (``PTE_DEVCONST_DEBUG``, ``PTE_DEVCONST_FULL_CHECK``), read one way."""

from __future__ import annotations

import os

# What switches a flag off, as most tools read it: PTE_DEVCONST_DEBUG=0 must not turn tracebacks on.
OFF = frozenset({"", "0", "false", "no", "off", "n", "f"})


def env_flag(name: str) -> bool:
    """Whether the environment switches ``name`` on: set to anything but empty, 0, false, no or off (any case)."""
    return os.environ.get(name, "").strip().lower() not in OFF
