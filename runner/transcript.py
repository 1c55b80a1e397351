"""The delegate-boundary transcript: what every DelegateCall received and produced, and comparing two of them.

The rewrite promises that every delegate call receives exactly the bytes it
received before.  While a method runs, ``TranscriptRecorder`` notes for each
DelegateCall, in order of execution: the chain and instruction, the delegate
index and backend, and for each argument its value index, kind, dtype, shape,
residence (where its memory is), the digest of its bytes (``digest.py``), and,
when an ``_h2d_copy`` filled it earlier in the same call, the value it was
copied from.  An input's digest is taken as the call starts (``inputs_as_called``:
an output planned over an input's bytes, an in-place delegate, overwrites them), an
output's after the delegate returns, when it holds the results.  (Before the call an
output holds whatever its planned region held last; a rewrite legitimately changes
that, because the removed copies no longer write there.)  They are fetched from the device once the
method call is over.  Each tensor argument also carries its constant-derived flag
(``derivation.py``): whether its bytes came from the program's constants alone.

``compare_transcripts`` matches the calls of two runs by their order of
execution within each method call (instruction numbers differ: copy kernels are
removed) and lists every difference.  Exactly one difference is allowed: where
the rewrite passes a device-resident value R on R's device, the original passed,
with the same dtype, shape and bytes,

* for a moved constant R: R itself (legacy style: a host constant the delegate
  copies) or a value an ``_h2d_copy`` of R filled in this call (copy style);
* for a folded value R (computed from constants on the host in the original,
  initial data in the rewrite): R itself, an ``_h2d_copy`` of it, or any value
  that was constant-derived when the delegate read it (the transpose the host
  computed in the original, or its device copy).  The equal bytes then prove the
  fold computed what the original's kernels computed.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Optional, Sequence

import torch

from .delegates import DelegateArg
from .digest import fetch_digests, tensor_digest
from pte_devconst.program.dtypes import dtype_name
from pte_devconst.util.record import record


@record
class ArgRecord:
    """One argument of one delegate call, after the call."""

    position: int
    value: int
    kind: str  # "tensor", else the Python type of the value ("int", "float", "NoneType", "list", ...)
    dtype: Optional[str] = None
    shape: Optional[tuple[int, ...]] = None
    residence: Optional[str] = None
    digest: Optional[tuple[int, int]] = None
    h2d_source: Optional[int] = None  # the value an _h2d_copy filled this tensor from, in this call
    literal: Optional[str] = None  # repr of a non-tensor value
    constant_derived: Optional[bool] = None  # computed from the program's constants alone (derivation.py)

    @property
    def origin(self) -> int:
        """The value the bytes came from: the copied value for a device copy, else the argument itself."""
        return self.h2d_source if self.h2d_source is not None else self.value

    def describe(self) -> str:
        copied = f" (copy of value {self.h2d_source})" if self.h2d_source is not None else ""
        return f"value {self.value}{copied}"


@record
class DelegateCallRecord:
    """One executed DelegateCall: where it is in the program, which delegate, and its arguments."""

    ordinal: int  # its position among the delegate calls of this method call
    chain: int
    instruction: int
    delegate_index: int
    backend_id: str
    opaque: bool
    args: tuple[ArgRecord, ...]


def inputs_as_called(args: Sequence[DelegateArg], read: "Optional[int | Sequence[int]]") -> dict[int, torch.Tensor]:
    """Digests of a delegate call's inputs (the arguments at the positions ``read``, a call site's ``read``; an
    int ``n`` means the first ``n``; none when the split is unknown) as the call starts, leaving out a value the
    call also passes as an output (module docstring)."""
    if read is None:
        return {}
    positions = frozenset(range(read)) if isinstance(read, int) else frozenset(read)
    written = {arg.index for pos, arg in enumerate(args) if pos not in positions}
    found: dict[int, torch.Tensor] = {}
    for pos, arg in enumerate(args):
        if pos not in positions or arg.index in written:
            continue
        digest = tensor_digest(arg.value) if isinstance(arg.value, torch.Tensor) else list_digest(arg.value)
        if digest is not None:
            found[arg.index] = digest
    return found


class TranscriptRecorder:
    """Collects one method call's delegate calls; digests stay on their devices until ``finish``."""

    def __init__(self) -> None:
        self._calls: list[tuple[DelegateCallRecord, list[Optional[torch.Tensor]]]] = []

    def record(self, chain: int, instruction: int, delegate_index: int, backend_id: str, opaque: bool,
               args: Sequence[DelegateArg], h2d_source: Mapping[int, int],
               known_digests: Mapping[int, torch.Tensor],
               constant_derived: Optional[Callable[[int], Optional[bool]]] = None) -> None:
        records: list[ArgRecord] = []
        digests: list[Optional[torch.Tensor]] = []
        for position, arg in enumerate(args):
            value = arg.value
            if isinstance(value, torch.Tensor):
                records.append(ArgRecord(position, arg.index, "tensor", dtype_name(value.dtype), tuple(value.shape),
                                         str(arg.residence) if arg.residence is not None else "cpu",
                                         h2d_source=h2d_source.get(arg.index),
                                         constant_derived=constant_derived(arg.index) if constant_derived else None))
                known = known_digests.get(arg.index)
                digests.append(known if known is not None else tensor_digest(value))
            else:
                records.append(ArgRecord(position, arg.index, type(value).__name__, literal=literal(value)))
                known = known_digests.get(arg.index)
                digests.append(known if known is not None else list_digest(value))
        call = DelegateCallRecord(len(self._calls), chain, instruction, delegate_index, backend_id, opaque,
                                  tuple(records))
        self._calls.append((call, digests))

    def finish(self) -> tuple[DelegateCallRecord, ...]:
        """The call's records with their digests fetched; the recorder is empty again."""
        pending = [d for _, digests in self._calls for d in digests if d is not None]
        fetched = iter(fetch_digests(pending))
        result = []
        for call, digests in self._calls:
            args = tuple(_with_digest(a, next(fetched)) if d is not None else a for a, d in zip(call.args, digests))
            result.append(DelegateCallRecord(call.ordinal, call.chain, call.instruction, call.delegate_index,
                                             call.backend_id, call.opaque, args))
        self._calls = []
        return tuple(result)


def literal(value: Any) -> str:
    """A non-tensor argument as text; a list's tensors by dtype and shape only (their bytes: ``list_digest``).

    Runs of equal items are counted (``float32[4, 4] x 20000``): a list may hold many, and printing
    tensors' values would cost seconds for what the digest says exactly.
    """
    if not isinstance(value, (list, tuple)):
        return repr(value)
    runs: list[list[Any]] = []
    texts: dict[int, str] = {}  # a list may name one value many times: describe each once
    for item in value:
        text = texts.get(id(item))
        if text is None:
            text = f"{dtype_name(item.dtype)}{list(item.shape)}" if isinstance(item, torch.Tensor) else repr(item)
            texts[id(item)] = text
        if runs and runs[-1][0] == text:
            runs[-1][1] += 1
        else:
            runs.append([text, 1])
    return "[" + ", ".join(text if n == 1 else f"{text} x {n}" for text, n in runs) + "]"


def list_digest(value: Any) -> Optional[torch.Tensor]:
    """The digest of the bytes of a list's tensors, in order (None for anything else, or a list without any).

    Each distinct tensor is digested once: a list may name one value a hundred thousand times.
    """
    if not isinstance(value, (list, tuple)):
        return None
    position: dict[int, int] = {}
    digests: list[torch.Tensor] = []
    order: list[int] = []
    for item in value:
        if isinstance(item, torch.Tensor):
            if id(item) not in position:
                position[id(item)] = len(digests)
                digests.append(tensor_digest(item).cpu())
            order.append(position[id(item)])
    return tensor_digest(torch.stack(digests)[torch.tensor(order)]) if digests else None


def _with_digest(arg: ArgRecord, digest: tuple[int, int]) -> ArgRecord:
    return ArgRecord(arg.position, arg.value, arg.kind, arg.dtype, arg.shape, arg.residence, digest,
                     arg.h2d_source, arg.literal, arg.constant_derived)


# --- comparing two transcripts ------------------------------------------------------------------------


@record
class BoundaryDifference:
    """One way in which the rewrite's delegate boundary differs from the original's."""

    call: int
    ordinal: Optional[int]  # the delegate call (by order of execution); None for a count mismatch
    what: str  # "calls", "delegate", "arguments", "value", "kind", "dtype", "shape", "residence", "bytes"
    detail: str
    instruction_before: Optional[int] = None
    instruction_after: Optional[int] = None
    delegate_index: Optional[int] = None
    backend_id: Optional[str] = None
    argument: Optional[int] = None
    value_before: Optional[int] = None
    value_after: Optional[int] = None

    def line(self, method: str) -> str:
        """One line naming the method, call, delegate call, argument and value, and what differs."""
        where = f"method {method}, call {self.call}"
        if self.ordinal is not None:
            where += (f", delegate call {self.ordinal} (instruction {self.instruction_before} -> "
                      f"{self.instruction_after}, delegate {self.delegate_index}, {self.backend_id})")
        if self.argument is not None:
            values = (f"value {self.value_before}" if self.value_before == self.value_after
                      else f"value {self.value_before} -> {self.value_after}")
            where += f", argument {self.argument} ({values})"
        return f"{where}: {self.detail}"

    def to_json(self) -> dict[str, Any]:
        return {"call": self.call, "delegate_call": self.ordinal, "what": self.what, "detail": self.detail,
                "instruction": {"before": self.instruction_before, "after": self.instruction_after},
                "delegate_index": self.delegate_index, "backend": self.backend_id, "argument": self.argument,
                "value": {"before": self.value_before, "after": self.value_after}}


def _digest_text(digest: Optional[tuple[int, int]]) -> str:
    return "-" if digest is None else f"{digest[0]:016x}{digest[1]:016x}"


@record
class Resident:
    """A value the rewrite keeps in device memory: a moved constant or a folded value (``source``: the original's
    value whose bytes it holds, the constant itself for a moved one, when not the resident value itself)."""

    device: str
    folded: bool = False
    source: Optional[int] = None

    @property
    def kind(self) -> str:
        return "folded value" if self.folded else "moved constant"


def _compare_args(a: ArgRecord, b: ArgRecord, resident: Mapping[int, Resident]) -> list[tuple[str, str]]:
    """(what, detail) for each way the original's argument ``a`` and the rewrite's ``b`` differ."""
    problems: list[tuple[str, str]] = []
    if b.kind == "tensor" and b.value in resident:
        value, place = b.value, resident[b.value]
        if a.origin not in (value, place.source) and a.value != value and not (place.folded and a.constant_derived):
            problems.append(("value", f"the rewrite passes {place.kind} {value}, the original passed "
                                      f"{a.describe()}, neither it nor a copy of it"
                                      + (" nor a constant-derived value" if place.folded else "")))
        if b.residence != place.device:
            problems.append(("residence", f"{place.kind} {value} arrives on {b.residence}, not on its "
                                          f"device {place.device}"))
    else:
        if a.value != b.value or a.h2d_source != b.h2d_source:
            problems.append(("value", f"the original passed {a.describe()}, the rewrite passes {b.describe()}"))
        if a.residence != b.residence:
            problems.append(("residence", f"memory on {a.residence} before, on {b.residence} after"))
    if a.kind != b.kind:
        problems.append(("kind", f"a {a.kind} before, a {b.kind} after"))
    elif a.kind != "tensor":
        if a.literal != b.literal:
            problems.append(("value", f"{(a.literal or '')[:200]} before, {(b.literal or '')[:200]} after"))
        elif a.digest != b.digest:
            problems.append(("bytes", f"the list's tensors differ (digest {_digest_text(a.digest)} before, "
                                      f"{_digest_text(b.digest)} after)"))
    else:
        if a.dtype != b.dtype:
            problems.append(("dtype", f"dtype {a.dtype} before, {b.dtype} after"))
        if a.shape != b.shape:
            problems.append(("shape", f"shape {list(a.shape or ())} before, {list(b.shape or ())} after"))
        if a.digest != b.digest:
            problems.append(("bytes", f"bytes differ (digest {_digest_text(a.digest)} before, "
                                      f"{_digest_text(b.digest)} after)"))
    return problems


def compare_calls(call: int, before: Sequence[DelegateCallRecord], after: Sequence[DelegateCallRecord],
                  moved: Mapping[int, Resident]) -> list[BoundaryDifference]:
    """Every difference between one method call's delegate calls in the original and in the rewrite.

    ``moved`` maps each moved constant's or folded value's index to where it lives (``Resident``).
    """
    differences: list[BoundaryDifference] = []
    if len(before) != len(after):
        differences.append(BoundaryDifference(call, None, "calls", f"the original made {len(before)} delegate "
                                                                 f"calls, the rewrite {len(after)}"))
    for x, y in zip(before, after):
        common: dict[str, Any] = dict(instruction_before=x.instruction, instruction_after=y.instruction,
                      delegate_index=x.delegate_index, backend_id=x.backend_id)
        if (x.delegate_index, x.backend_id) != (y.delegate_index, y.backend_id):
            differences.append(BoundaryDifference(call, x.ordinal, "delegate", f"the rewrite calls delegate "
                                                  f"{y.delegate_index} ({y.backend_id}) here", **common))
            continue
        if len(x.args) != len(y.args):
            differences.append(BoundaryDifference(call, x.ordinal, "arguments", f"{len(x.args)} arguments "
                                                  f"before, {len(y.args)} after", **common))
        for a, b in zip(x.args, y.args):
            for what, detail in _compare_args(a, b, moved):
                differences.append(BoundaryDifference(call, x.ordinal, what, detail, argument=a.position,
                                                      value_before=a.value, value_after=b.value, **common))
    return differences


def compare_transcripts(before: Sequence[Sequence[DelegateCallRecord]],
                        after: Sequence[Sequence[DelegateCallRecord]],
                        moved: Mapping[int, Resident]) -> list[BoundaryDifference]:
    """Differences over all method calls (``before[i]`` / ``after[i]``: the delegate calls of call i)."""
    return [d for call, (x, y) in enumerate(zip(before, after)) for d in compare_calls(call, x, y, moved)]


def replaced_origins(before: Sequence[DelegateCallRecord], after: Sequence[DelegateCallRecord],
                     resident: Mapping[int, Resident]) -> set[int]:
    """The original's values whose bytes the rewrite's resident values now supply in one method call: where
    the rewrite passes a resident value, the value the original's argument came from (its copy's source)."""
    return {a.origin for x, y in zip(before, after) for a, b in zip(x.args, y.args)
            if b.kind == "tensor" and b.value in resident}


def summarize(records: Sequence[Sequence[DelegateCallRecord]]) -> dict[str, Any]:
    """Counts for reports: delegate calls and tensor arguments compared over all method calls."""
    calls = [c for call in records for c in call]
    return {"delegate_calls": len(calls), "arguments": sum(len(c.args) for c in calls)}
