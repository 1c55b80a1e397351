"""The one generic JSON form of the project's records, for result types that opt into it.

A result type's ``to_json()`` either builds its document by hand (when the JSON names differ from the
fields) or returns ``to_jsonable(self)``: every field, recursively, with devices spelled as compile specs
spell them (``cuda:0``), ``NamedEnum`` members as their values, other enums as their lower-case names,
tuples and sets as lists and bytes as hex.  (A device has its own ``to_json``.)
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

from pte_devconst.util.named_enum import NamedEnum


def to_jsonable(obj: Any) -> Any:
    """Dataclasses (records), tuples, devices and enums -> JSON-ready values, recursively."""
    to_json = getattr(obj, "to_json", None)
    if callable(to_json) and not isinstance(obj, type):  # a record with its own JSON form
        return to_json()
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return fields_to_json(obj)
    if isinstance(obj, NamedEnum):  # a closed set of report names (a method's style, ...): its value is the name
        return obj.value
    if isinstance(obj, enum.Enum):
        return obj.name.lower()
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, bytes):
        return obj.hex()
    return obj


def fields_to_json(obj: Any) -> dict[str, Any]:
    """Every field of a record, JSON-ready: what a ``to_json()`` that opts into the generic form returns."""
    return {f.name: to_jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
