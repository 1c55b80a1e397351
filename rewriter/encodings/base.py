"""What an encoding is: the one small interface every way of keeping a constant on a device implements.

An *encoding* is how a rewritten file keeps a constant in device memory for the whole method, and so which
ExecuTorch runtime loads the file (``docs/file-format.md``, "Runtime encodings").  Each encoding is one module
of this package behind ``Encoding``; nothing outside it decides anything about it:

* **its runtime and its words**: ``runtime`` (the oldest release that loads what it writes), ``name``, ``when``
  and ``needs`` (what of a file no older runtime loads: why a file needs this one);
* **what it plans** for a moved constant, a folded value and a constant the other encoding holds (``admit``,
  ``fold_refusal``, ``storage``, ``place``, ``place_fold``, ``convert``, ``payload``): ``plan.py`` runs the
  selection and the layout and asks the encoding to fill in the records;
* **how it edits the method** (``held_tensor``, ``folded_tensor``, ``reencoded_tensor``,
  ``leading_instructions``): ``edit.py`` applies the records through these;
* **how the self-check proves it** (``checker``: an ``EncodingCheck`` that reads the two programs, not the code
  that wrote them);
* **how it recognises a file already in it** (``held``) and converts from the others (``convert``).

The registry (``rewriter/encodings/__init__.py``) chooses one from the runtime, once per request.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence

from pte_devconst.program.moves import MovedValue
from pte_devconst.program.runtime import Runtime
from pte_devconst.schema import model as m
from pte_devconst.util.record import record


if TYPE_CHECKING:  # the plan's records: the encodings fill them in
    from ..model.analysis import ConstantVerdict
    from ..fold import FoldChain
    from ..model.plan_model import (EncodingPayload, FoldPlacement, MethodEdit, MethodJob, Placement, Reencoded,
                                    Storage)


class Encoding:
    """One way of keeping a constant on a device (module docstring).  A subclass sets the class attributes and
    overrides what differs; the defaults are those of an encoding that keeps the constant in planned device
    memory and changes nothing else in the method."""

    key: str = ""  # "initial-data", "first-call": how JSON names it
    runtime: Runtime = Runtime(0, 0)
    name: str = ""  # "device initial data": what reports call a constant kept this way
    when: str = ""  # "at load": when its bytes reach the device
    refuses: str = ""  # what its runtime cannot load, in a few words ("device initial data"; "": nothing)

    # --- its runtime, and what older ones cannot load -------------------------------------------------

    @property
    def option(self) -> str:
        """The option that chooses it: ``--runtime 1.5``."""
        return f"--runtime {self.runtime.value}"

    @property
    def copied(self) -> str:
        """``copied once, at load``."""
        return f"copied once, {self.when}"

    @property
    def described(self) -> str:
        """How it keeps a moved constant, in a sentence for ``--runtime``'s help (default: its name, when it copies
        and what its runtime cannot load)."""
        refuses = f" ({self.runtime.value} runtimes cannot load {self.refuses})" if self.refuses else ""
        return f"{self.name}, {self.copied}{refuses}"

    def needs(self, program: m.Program, labels: Sequence[str]) -> list["NeededTensor"]:
        """The tensors of ``program`` kept in this encoding's way that no older runtime loads (none: every
        runtime this tool writes for loads what it writes)."""
        return []

    # --- a file already in it ---------------------------------------------------------------------------

    def held(self, plan: m.ExecutionPlan) -> frozenset[int]:
        """The values of a method kept on a device in this encoding."""
        return frozenset()

    def moved(self, before: m.ExecutionPlan, after: m.ExecutionPlan, *, devices_only: bool = True
              ) -> list[MovedValue]:
        """The values ``after`` keeps on a device in this encoding that ``before`` did not, each with how its bytes
        arrive (``program/moves.py``): what ``validate`` expects copied once, and how it probes them
        (``devices_only``: only those in a buffer on a non-CPU device).  A reader of its own files: it reports
        what a file claims even where the claim is broken (a flag that never clears), so validate can fail it."""
        return []

    # --- planning -----------------------------------------------------------------------------------------

    def admit(self, verdict: "ConstantVerdict") -> Optional[str]:
        """Whether an eligible constant moves: None (it does), "" (it is in this encoding already: nothing to
        do), or why the encoding cannot keep it on its device (reported with the constant)."""
        return None

    def fold_refusal(self, plan: m.ExecutionPlan) -> Optional[str]:
        """Why no folded value of this method can be kept on a device in this encoding (None: they can)."""
        return None

    def storage(self, program: m.Program, chosen: Sequence["ConstantVerdict"],
                chains: Sequence["FoldChain"], unread: set[tuple[int, int]], shared_constants: bool) -> "Storage":
        """Where the bytes of what moves live in the file, program-wide: new initial-data entries, the constant
        entries the rewrite drops, new constant entries (``plan.Storage``)."""
        raise NotImplementedError

    def place(self, job: "MethodJob", verdict: "ConstantVerdict", memory_id: int, offset: int) -> "Placement":
        """The placement of one moved constant, in region (``memory_id``, ``offset``)."""
        raise NotImplementedError

    def place_fold(self, job: "MethodJob", chain: "FoldChain", target: int, memory_id: int, offset: int,
                   removed: tuple[tuple[int, int], ...]) -> "FoldPlacement":
        """The placement of one folded value (``target``), in region (``memory_id``, ``offset``)."""
        raise NotImplementedError

    def convert(self, job: "MethodJob") -> list["Reencoded"]:
        """The constants of the method that another encoding holds and this one takes over (what cannot be
        converted goes to ``job.unconverted``, with its reason)."""
        return []

    def payload(self, job: "MethodJob", removed: set[tuple[int, int]]
                ) -> tuple["EncodingPayload", set[tuple[int, int]]]:
        """What the encoding records of its own in the method's edit, from what it gathered while it placed
        (``job.collected``): (its payload, the input's instructions it wrote itself that go).  The default: none."""
        from ..model.plan_model import NO_PAYLOAD

        return NO_PAYLOAD, set()

    def report_fields(self, methods: Sequence["MethodEdit"]) -> dict[str, object]:
        """The fields of its own that every rewrite's JSON ``runtime`` object carries, whichever encoding wrote it
        (the report's schema lists them): none by default."""
        return {}

    def converted(self, placements: Sequence["Placement"], reencoded: Sequence["Reencoded"]) -> int:
        """How many constants a plan (its placements and re-encoded constants) takes over from another encoding (a
        conversion), for every summary."""
        return 0

    # --- editing the method -----------------------------------------------------------------------------

    def held_tensor(self, tensor: m.Tensor, placement: "Placement") -> m.Tensor:
        """The tensor that holds a moved constant on its device (``placement.holder``), as the output writes it."""
        raise NotImplementedError

    def folded_tensor(self, tensor: m.Tensor, fold: "FoldPlacement") -> m.Tensor:
        """A folded value as the output writes it."""
        raise NotImplementedError

    def reencoded_tensor(self, tensor: m.Tensor, reencoded: "Reencoded") -> m.Tensor:
        """A constant taken over from another encoding, as the output writes it."""
        raise NotImplementedError

    def leading_instructions(self, edit: "MethodEdit", plan: m.ExecutionPlan) -> list[m.Instruction]:
        """What the output's chain 0 starts with, before the method's own instructions."""
        return []

    # --- the self-check -----------------------------------------------------------------------------------

    def checker(self, verifier: "Verifier") -> "EncodingCheck":
        """The self-check of this encoding's part of one method (``rewriter/verify.py`` calls its hooks)."""
        return EncodingCheck(verifier)

    def __repr__(self) -> str:
        return f"<encoding {self.key} for ExecuTorch {self.runtime.value}>"


@record
class NeededTensor:
    """A tensor that only a newer runtime loads (``Encoding.needs``): why a file needs that runtime."""

    method: str  # the method's label
    value: int
    device: m.Device
    nbytes: int
    external: bool  # filled from a .ptd entry, not from the program's own segments


@record
class RuntimeNeed:
    """The oldest runtime that loads a program, and what makes it so (what every older one cannot load)."""

    runtime: Runtime
    tensors: tuple[NeededTensor, ...] = ()
    why: str = ""  # what the older runtimes cannot load, in a few words (the needing encoding's ``name``)

    @property
    def minimum(self) -> str:
        return self.runtime.minimum

    def describe(self) -> str:
        """One line: the minimum and why (``ExecuTorch >= 1.6: <why> (4 tensors)``)."""
        if self.tensors:
            count = len(self.tensors)
            return f"{self.minimum}: {self.why} ({count} tensor{'' if count == 1 else 's'})"
        return self.minimum

    def loads_in(self, runtime: Runtime) -> bool:
        """Whether a runtime of release ``runtime`` (or newer) loads the program."""
        return runtime >= self.runtime

    def to_json(self) -> dict[str, object]:
        # "device_initial_data": the published report's key (cli/report.schema.json) for ``tensors``
        return {"minimum": self.runtime.value, "reason": self.describe(),
                "device_initial_data": [{"method": d.method, "value": d.value, "device": str(d.device),
                                         "bytes": d.nbytes, "external": d.external} for d in self.tensors]}


class Verifier:
    """What the self-check of one method offers an encoding's check (``rewriter/verify.py: _MethodCheck``)."""

    old: m.ExecutionPlan
    new: m.ExecutionPlan
    edit: Optional["MethodEdit"]
    label: str  # "method 0 ('forward')": what its messages start with
    context: Any  # the whole-file context: both files, the .ptd, the byte requirements

    def fail(self, what: str) -> Exception:
        raise NotImplementedError

    def check_region(self, where: str, tensor: m.Tensor, memory_id: int, offset: int, device: m.Device,
                     nbytes: int) -> None:
        raise NotImplementedError

    def check_external(self, where: str, tensor: m.Tensor) -> None:
        raise NotImplementedError

    def recompute(self, recipe: Any) -> Callable[[], bytearray]:
        raise NotImplementedError


class EncodingCheck:
    """An encoding's part of the self-check of one method: the defaults prove an encoding that writes nothing
    of its own besides the moved values (``rewriter/verify.py`` calls each hook at its step)."""

    def __init__(self, verifier: Verifier) -> None:
        self.verifier = verifier

    @property
    def leading(self) -> int:
        """How many instructions the encoding wrote in front of chain 0."""
        edit = self.verifier.edit
        return edit.leading_length if edit is not None else 0

    @property
    def own_steps(self) -> frozenset[tuple[int, int]]:
        """Instructions of the output the encoding proves itself (their readers are not the moved values')."""
        return frozenset()

    @property
    def resident(self) -> dict[int, Any]:
        """Values the encoding keeps on a device beyond the placements' holders and the folds, each with its
        record (``device``, ``memory_id``, ``offset``, ``nbytes``)."""
        return {}

    def removed_in_input(self, chain: int, instruction: int) -> bool:
        """An instruction of the input the encoding itself rewrote (its old prologue): not a removed copy."""
        return False

    def check_leading(self, written: Sequence[m.Instruction]) -> None:
        """The instructions written in front of chain 0."""
        if written:
            raise self.verifier.fail("chain 0 starts with instructions the encoding does not write")

    def check_new_values(self) -> None:
        """Values the plan appends for the encoding."""

    def owns(self, index: int) -> bool:
        """Whether the encoding checks value ``index`` itself (``check_value``)."""
        return False

    def check_value(self, index: int, old: m.EValue, new: m.EValue) -> None:
        """A value the encoding owns."""

    def check_placement(self, index: int, old: m.EValue, new: m.EValue, placement: "Placement") -> None:
        """The value holding a moved constant (``placement.holder``)."""
        raise NotImplementedError

    def check_fold(self, index: int, new: m.Tensor, fold: "FoldPlacement", traced: Any, constant: m.Tensor
                   ) -> None:
        """The encoding's part of a folded value: where its bytes come from."""
        raise NotImplementedError
