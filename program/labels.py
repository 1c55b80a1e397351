"""How every report names a value: its fully qualified name, or ``value N`` for one without a name.

One home for the rule (reports, the analysis, the gate, diff and the runner's checks all ask here): a name
column beside a value column shows ``-`` for an unnamed value (``value N`` is said once, by the value column);
where no value column stands the label carries the index (``fc1.weight (v3)``).
"""

from __future__ import annotations

from typing import Optional

__all__ = ["constant_label", "is_unnamed", "name_cell", "value_name"]


def value_name(fqn: Optional[str], index: int) -> str:
    """A value's name for a report: its fully qualified name, or ``value 3``."""
    return fqn or f"value {index}"


def is_unnamed(name: str, index: int) -> bool:
    """Whether ``name`` is only the value's index (``value_name`` of a value without a name)."""
    return name == f"value {index}"


def name_cell(name: str, index: int) -> str:
    """A name column beside a value column: the name, or ``-`` for a value without one."""
    return "-" if is_unnamed(name, index) else name


def constant_label(name: str, index: int) -> str:
    """``fc1.weight (v3)``, or ``value 3`` for a value without a name: where no value column stands beside it."""
    return name if is_unnamed(name, index) else f"{name} (v{index})"
