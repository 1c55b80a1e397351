"""An independent proof of a rewrite's memory: both programs replayed over bytes, every read compared.

The re-layout of a rewrite is checked elsewhere against the lifetime model (``memory.py``: storage groups,
lifetimes, ``layout_problems``), which is the model that made it: a mistake in the model passes both.  This
module asks nothing of that model.  It runs a method's instruction stream the way the ExecuTorch runtime does,
over bytes, and records where the bytes each instruction reads were *defined*:

* **A tensor is its bytes.**  A planned tensor is its region of its planned buffer, views included (two values
  on overlapping bytes alias); a constant, a tensor the caller provides and an unplanned tensor have storage
  of their own.  A ``MoveCall`` copies the EValue: both names then denote one tensor (the runtime's
  ``values_[to] = values_[from]``), and the binding survives into the next call.
* **Definitions.**  Bytes are defined at load (a constant, initial data: ``load``), by ``set_input``
  (``input``, per call), by the write of an instruction (``write``), or not at all (``uninitialised``).  An
  ``et_copy`` kernel copies its source's bytes: its destination holds the definitions the source held, so a
  device copy of a constant holds the constant.
* **Kernels** write their out arguments (``kernel_effects.kernel_writes``, the one statement of that rule); an
  in-place kernel (``aten::index_put_``) also reads what it updates, and adds to it rather than replacing it.
  A view kernel (``et_view``, ``kernel_effects.kernel_alias``) writes nothing: like a ``MoveCall``, it binds
  its out to its input's storage.
* **Delegates.**  A delegate reads every argument.  It writes its output positions (``dataflow``'s split,
  which gives every call of one delegate the same outputs), and may write any other argument that does not
  hold constant data (a constant, a moved one, bytes kernels computed from constants alone, a copy of those):
  those bytes then hold either.  What an output position held before the call is compared only when it is
  exactly the region an earlier instruction of the same call wrote, intact (or load-time data), and the
  argument is not a last one no earlier instruction mentions: it may be a static view the emitter elided,
  read again.
* **Control.**  A ``JumpFalseCall`` whose condition is a known ``Bool`` (a literal, or one a ``MoveCall``
  copied) goes one way; any other goes both ways, the two paths' bytes merged where they meet (forward jumps
  through an undo log, loops iterated until nothing changes, at most ``LOOP_LIMIT`` times).
* **Calls.**  Calls run in sequence on one loaded method (``calls_needed``: two, three when a method has
  jumps): buffers keep their bytes, values their bindings and booleans (so a run-once region is seen to
  run once, and a write to a resident value by the next call).

``prove_same_reads`` runs the input and the rewrite and compares, call by call, every surviving kernel and
delegate argument, jump condition and method output: it must read the same definitions (the same constant,
input, or write of the same input instruction, as many calls ago), modulo the rewrite's legitimate changes,
which need no rule of their own: a moved constant's readers read the constant where they read a device copy of
it (the copy holds the constant's definition), or the copy of it a run-once region made (``once.py``).  A folded
value stands for the input's definition it replaces (``stands_for``, or inferred when not given).

Cost: each storage is an interval map (sorted segment starts), so a read or write is O(log n + pieces); merges
at jumps cost the writes since the jump.  Every step is charged to a budget proportional to the two programs'
size times the calls, and so is every definition in a set of them (``SET_WORK``: a delegate called again and
again on one input grows its set by one per call, and the recorded reads keep the sets alive); a program that
exceeds it is refused (``UnsupportedProgramError``).
"""

from __future__ import annotations

import bisect
from array import array
from collections import defaultdict
from typing import Iterator, Mapping, Optional, Sequence, Union, overload

from pte_devconst.schema import model as m
from pte_devconst.util.errors import UnsupportedProgramError
from pte_devconst.util.record import record

from .dataflow import Declared, delegate_call_sites
from .kernel_effects import (copy_slots, is_device_copy, kernel_alias, kernel_writes, list_items, updated_in_place,
                             updates_in_place)
from .once import copies_made_once, once_length
from .regions import IntervalMap, value_nbytes

CALLS = 3  # calls replayed when a method has jumps: the first (a run-once region runs), and two that see what it left
STEADY_CALLS = 2  # without jumps every call runs the same instructions: from the second on, each reads the same
LOOP_LIMIT = 32  # iterations of one loop in one call before the proof gives up
WORK_PER_ITEM = 512  # budget: steps per value, instruction and argument, per call and program
# budget: steps per definition in a set of them (the recorded reads keep sets alive: this bounds their memory too)
SET_WORK = 16

# A definition is one int: kind | constant << 3 | origin call << 4 | write call << 10 | ident << 16
# | length << 56 | start << 120.  ``ident`` is a value index (load, input) or a program position (write);
# ``constant``: the bytes are a constant's, or computed from constants alone by kernels (no delegate writes
# them); ``start``/``length`` is the region the write covered (for the static-view test); the origin call is
# when the bytes were first defined (a copy keeps it).
UNINIT, LOAD, INPUT, WRITE, NEW = range(5)
_MASK6 = (1 << 6) - 1
_MASK40 = (1 << 40) - 1
_MASK64 = (1 << 64) - 1
_CONSTANT = 8
Bytes = Union[int, frozenset[int]]  # what a segment holds: one definition, or any of several
Content = object  # a read's canonical form: a label (int), or a tuple of (start, end, labels) pieces, ...

JUNK = -2  # an output position whose old bytes belong to no one (not compared)
UNSEEN = -1


def _define(kind: int, ident: int, origin: int, written: int, start: int, length: int, constant: bool = False
            ) -> int:
    return kind | constant << 3 | origin << 4 | written << 10 | ident << 16 | length << 56 | start << 120


def _kind(d: int) -> int:
    return d & 7


def _ident(d: int) -> int:
    return d >> 16 & _MASK40


def _origin_call(d: int) -> int:
    return d >> 4 & _MASK6


def _write_call(d: int) -> int:
    return d >> 10 & _MASK6


def _write_region(d: int) -> tuple[int, int]:
    start = d >> 120
    return start, start + (d >> 56 & _MASK64)


def _moved_to(d: int, written: int, start: int, length: int) -> int:
    """Definition ``d`` as a copy writes it at [start, start + length) in call ``written``: its origin kept."""
    if d & 7 == UNINIT:
        return d
    return (d & ((1 << 10) - 1)) | written << 10 | (d >> 16 & _MASK40) << 16 | length << 56 | start << 120


def _all_constant(value: Bytes) -> bool:
    if isinstance(value, frozenset):
        return all(d & _CONSTANT for d in value)
    return bool(value & _CONSTANT)


def _label(kind: int, ident: int, age: int) -> int:
    return kind | age << 3 | ident << 9


def describe_label(label: int, positions: Sequence[tuple[int, int]] = ()) -> str:
    """A label in words: ``constant or initial data of value 3``, ``instruction 7's write, 1 call(s) ago``."""
    kind, age, ident = label & 7, label >> 3 & _MASK6, label >> 9
    ago = "" if age == 0 else f", {age} call(s) ago"
    if kind == LOAD:
        return f"the load-time data of value {ident}"
    if kind == INPUT:
        return f"method input value {ident}{ago}"
    if kind == WRITE:
        where = f"chain {positions[ident][0]} instruction {positions[ident][1]}" if ident < len(positions) \
            else f"position {ident}"
        return f"what {where} of the input wrote{ago or ' in this call'}"
    if kind == NEW:
        return f"what the rewrite's new instruction at position {ident} wrote{ago or ' in this call'}"
    return "uninitialised bytes"


# A kernel call as the replay runs it: (operator, arguments, what it writes, the positions it reads, in place,
# the (source, view) a view kernel binds), worked out once per instruction.
_KernelPlan = tuple[int, tuple[int, ...], tuple[int, ...], tuple[int, ...], bool, Optional[tuple[int, int]]]


class Budget:
    """Steps of the proof, against a limit proportional to the programs' size."""

    __slots__ = ("left", "limit")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.left = limit

    def spend(self, steps: int) -> None:
        self.left -= steps
        if self.left < 0:
            raise UnsupportedProgramError(
                f"the memory proof needed more than {self.limit:,} steps ({WORK_PER_ITEM} per value, instruction "
                "and argument and call); refusing a program shaped to run it away")


def budget_for(*plans: m.ExecutionPlan, calls: int = CALLS) -> Budget:
    """A budget for replaying ``plans`` ``calls`` times each."""
    items = 0
    for plan in plans:
        items += len(plan.values or ()) + 1
        for chain in plan.chains or ():
            for ins in chain.instructions or ():
                items += 1 + len(getattr(ins, "args", None) or ())
    return Budget(WORK_PER_ITEM * items * calls + 100_000)


def _union(a: Bytes, b: Bytes) -> Bytes:
    if a == b:
        return a
    left = a if isinstance(a, frozenset) else frozenset((a,))
    right = b if isinstance(b, frozenset) else frozenset((b,))
    both = left | right
    return both if len(both) > 1 else next(iter(both))


def _defs(value: Bytes) -> Iterator[int]:
    if isinstance(value, frozenset):
        yield from value
    else:
        yield value


Slot = tuple[bool, Bytes]  # (holds a tensor, its identities | its definitions)
# A change, undone or merged at jumps: (storage key, its old pieces, None) or (value, None, its old slot or None).
LogEntry = tuple[int, Optional[list[tuple[int, int, Bytes]]], Optional[Slot]]


class _Log:
    """Changes since the oldest checkpoint of a chain with jumps, so paths can be merged where they meet."""

    __slots__ = ("entries", "on")

    def __init__(self) -> None:
        self.entries: list[LogEntry] = []
        self.on = False


@record
class Mismatch:
    """Where the rewrite reads something other than the input: the first such read."""

    call: int
    where: str
    detail: str

    def __str__(self) -> str:
        return f"{self.where}, call {self.call}: {self.detail}"


@record
class Origin:
    """What a value of the rewrite stands for: the input's load-time data of ``value``, or the write of the input's
    instruction ``step`` (chain, instruction) in the same call.  ``constant``: its bytes are constant data (no
    delegate writes them); False for a 1.6 constant re-encoded for 1.5, whose bytes the input held as initial
    data, which a delegate may write in the input too."""

    value: Optional[int] = None
    step: Optional[tuple[int, int]] = None
    constant: bool = True


class _Positions(Sequence[tuple[int, int]]):
    """Program position -> (chain, instruction), computed from the chains' first positions."""

    def __init__(self, first: list[int], length: int) -> None:
        self.first = first
        self.length = length

    def __len__(self) -> int:
        return self.length

    @overload
    def __getitem__(self, position: int) -> tuple[int, int]: ...

    @overload
    def __getitem__(self, position: slice) -> Sequence[tuple[int, int]]: ...

    def __getitem__(self, position: Union[int, slice]) -> Union[tuple[int, int], Sequence[tuple[int, int]]]:
        if isinstance(position, slice):
            return [self[p] for p in range(*position.indices(self.length))]
        if not 0 <= position < self.length:
            raise IndexError(position)
        chain = bisect.bisect_right(self.first, position) - 1
        while chain + 1 < len(self.first) and self.first[chain + 1] <= position:
            chain += 1
        return chain, position - self.first[chain]


# a delegate call's (written positions, positions written for sure): ``dataflow.DelegateCallSite``'s
Roles = tuple[frozenset[int], frozenset[int]]
_ALL_READ: Roles = (frozenset(), frozenset())


def _roles(plan: m.ExecutionPlan, declared: Optional[Declared]) -> dict[tuple[int, int], Roles]:
    """(chain, instruction) of each delegate call -> its roles, as ``dataflow`` splits it."""
    return {(s.chain, s.instruction): (frozenset(s.written), frozenset(s.sure))
            for s in delegate_call_sites(plan, declared=declared)}


class _Program:
    """One method prepared for replay: positions, sites, storages of values, delegate output positions."""

    def __init__(self, plan: m.ExecutionPlan,
                 roles: Optional[Mapping[tuple[int, int], Roles]] = None,
                 declared: Optional[Declared] = None) -> None:
        self.plan = plan
        self.values = tuple(plan.values or ())
        self.ops = [op.qualified_name for op in plan.operators or ()]
        self.in_place = [updates_in_place(name) for name in self.ops]  # it also reads what it updates
        self.copies = [is_device_copy(name) for name in self.ops]
        self.items = [list_items(value) for value in self.values]  # a tensor list's items, () for anything else
        self.is_tensor = [isinstance(value, m.Tensor) for value in self.values]
        self.chains = [tuple(chain.instructions or ()) for chain in plan.chains or ()]
        self.first: list[int] = []
        at = 0
        for chain in self.chains:
            self.first.append(at)
            at += len(chain)
        self.positions = _Positions(self.first, at)
        # sites: one per argument of every kernel and delegate call, one per jump, then one per method output
        self.site_base: list[int] = []
        sites = 0
        for chain in self.chains:
            for ins in chain:
                self.site_base.append(sites)
                if isinstance(ins, (m.KernelCall, m.DelegateCall)):
                    sites += len(ins.args or ())
                elif isinstance(ins, m.JumpFalseCall):
                    sites += 1
        self.output_base = sites
        self.n_sites = sites + len(plan.outputs or ())
        # the written positions of each delegate call: the same for every call of one delegate (dataflow's split)
        self.roles = _roles(plan, declared) if roles is None else roles
        self.constants = frozenset(i for i, v in enumerate(self.values) if isinstance(v, m.Tensor) and v.is_constant)
        # where each tensor's bytes are, in three arrays (start -1: no bytes): ``place_of``
        self.key_of, self.start_of, self.end_of = array("q"), array("q"), array("q")
        for index, value in enumerate(self.values):
            key, start, end = self._place(index, value) or (0, -1, -1)
            self.key_of.append(key)
            self.start_of.append(start)
            self.end_of.append(end)

    @staticmethod
    def _place(index: int, value: m.EValue) -> Optional[tuple[int, int, int]]:
        """(storage key, start, end) of tensor ``index``'s bytes; None when it has none (no bytes, not a tensor).

        A planned tensor lies in its buffer (key = memory id >= 0); any other tensor has storage of its own
        (key = -1 - index): a constant, a caller's input or output, an unplanned value.
        """
        nbytes = value_nbytes(value)
        if nbytes <= 0 or not isinstance(value, m.Tensor):
            return None
        info = value.allocation_info
        if info is None:
            return (-1 - index, 0, nbytes)
        return (info.memory_id, info.memory_offset, info.memory_offset + nbytes)

    def place_of(self, index: int) -> Optional[tuple[int, int, int]]:
        """(storage key, start, end) of tensor ``index``'s bytes, or None (``_place``)."""
        if not 0 <= index < len(self.start_of) or self.start_of[index] < 0:
            return None
        return self.key_of[index], self.start_of[index], self.end_of[index]


class _Replay:
    """One program replayed ``calls`` times; what each site read, per call (an array of contents)."""

    def __init__(self, program: _Program, budget: Budget, *, idents: Sequence[Optional[int]],
                 site_of: Sequence[Optional[int]], constants: frozenset[int], subst: Mapping[int, int],
                 roles: Mapping[int, Roles], judge: bool, calls: int, sites: tuple[int, int]) -> None:
        """``sites``: (number of sites, first output site), in the input's numbering; ``idents[p]``: the ident of
        position p's writes (the input's position; None: new, its own position); ``site_of[p]``: the input's site
        base for position p (None: not compared); ``roles[p]``: (written, surely written positions) of the delegate
        call at p (the input's split); ``judge``: decide which output positions' old
        bytes are compared (the input's replay) rather than compare them all."""
        self.p = program
        self.budget = budget
        self.idents = idents
        self.site_of = site_of
        self.constant_values = constants
        self.subst = subst
        self.roles = roles
        self.judge = judge
        self.calls = calls
        self.n_sites, self.output_base = sites
        self.storages: dict[int, IntervalMap[Bytes]] = {}
        self._initials: dict[int, int] = {}
        self._kernels: dict[int, _KernelPlan] = {}
        self.slots: dict[int, Slot] = {}
        self.log = _Log()
        self.now = 0
        self.reads: list[array[int]] = []  # per call: per site, a content id (>= 0: a label), UNSEEN, JUNK, or side
        self.side: list[Content] = []  # contents that are not one label (index -3 - id)
        self.ran: list[bytearray] = []  # per call: per position, whether it ran

    # --- storage ---------------------------------------------------------------------------------------------

    def _initial(self, key: int) -> int:
        """What a storage holds before anything writes it: a constant's own storage its load-time data."""
        index = -1 - key
        if key >= 0 or index not in self.p.constants:
            return UNINIT
        found = self._initials.get(index)
        if found is None:
            where = self.p.place_of(index)
            found = self._initials[index] = _define(LOAD, index, 0, 0, 0, where[2] if where else 0,
                                                    index in self.constant_values)
        return found

    def _storage(self, key: int) -> IntervalMap[Bytes]:
        found = self.storages.get(key)
        if found is None:
            found = self.storages[key] = IntervalMap(self._initial(key))
        return found

    def _read(self, key: int, start: int, end: int) -> list[tuple[int, int, Bytes]]:
        storage = self.storages.get(key)
        if storage is None:
            return [(start, end, self._initial(key))]
        return storage.read(start, end)

    def _set(self, key: int, pieces: list[tuple[int, int, Bytes]]) -> None:
        if not pieces:
            return
        storage = self._storage(key)
        if self.log.on:
            old = storage.read(pieces[0][0], pieces[-1][1])
            self.log.entries.append((key, old, None))
        self.budget.spend(len(pieces))
        storage.put(pieces)

    def _slot(self, index: int) -> Slot:
        found = self.slots.get(index)
        if found is not None:
            return found
        return self._default_slot(index)

    def _default_slot(self, index: int) -> Slot:
        """A value's EValue as parsed at load: a tensor is itself, anything else its literal."""
        if 0 <= index < len(self.p.is_tensor) and self.p.is_tensor[index]:
            return (True, index)
        return (False, _define(LOAD, index, 0, 0, 0, 0, constant=True))  # a literal

    def _set_slot(self, index: int, slot: Slot) -> None:
        if self.log.on:
            self.log.entries.append((index, None, self.slots.get(index)))
        self.slots[index] = slot

    # --- checkpoints (chains with jumps) ---------------------------------------------------------------------

    def _checkpoint(self) -> int:
        return len(self.log.entries)

    def _then(self, mark: int) -> tuple[list[tuple[int, int, int, Bytes]], dict[int, Optional[Slot]]]:
        """What changed since ``mark``, as it was at ``mark``: byte pieces (key, start, end, value), slots."""
        claimed: dict[int, IntervalMap[Bytes]] = {}
        pieces: list[tuple[int, int, int, Bytes]] = []
        slots: dict[int, Optional[Slot]] = {}
        entries = self.log.entries[mark:]
        self.budget.spend(len(entries))
        for key, old, slot in entries:
            if old is None:  # a slot (key: the value) as it was
                slots.setdefault(key, slot)
                continue
            seen = claimed.setdefault(key, IntervalMap(0))
            for s, e, value in old:
                for cs, ce, taken in seen.read(s, e):
                    if not taken:
                        pieces.append((key, cs, ce, value))
                seen.assign(s, e, 1)
        self.budget.spend(len(pieces))
        return pieces, slots

    def _merge(self, mark: int, replace: bool = False) -> bool:
        """Merge the state at ``mark`` into the current one (``replace``: restore it).  Whether the result differs
        from the state at ``mark``: at a loop's head, whether another round can read anything new."""
        pieces, slots = self._then(mark)
        grew = False
        for key, start, end, old in pieces:
            now = self._read(key, start, end)
            merged = [(s, e, old if replace else self._union(value, old)) for s, e, value in now]
            grew = grew or any(value != old for _, _, value in merged)
            if merged != now:
                self._set(key, merged)
        for index, before in slots.items():
            current = self.slots.get(index)
            if replace:
                new = before
            else:
                base = self._default_slot(index)
                mine, other = current or base, before or base
                new = (mine[0], self._union(mine[1], other[1]))
                grew = grew or new != (before or base)
            if new != current:
                if new is None:
                    if self.log.on:
                        self.log.entries.append((index, None, current))
                    del self.slots[index]
                else:
                    self._set_slot(index, new)
        return grew

    # --- reading -----------------------------------------------------------------------------------------------

    def _label(self, d: int) -> int:
        kind = _kind(d)
        if kind == LOAD:
            ident = _ident(d)
            return self.subst.get(ident, _label(LOAD, ident, 0))
        if kind == UNINIT:
            return 0
        return _label(kind, _ident(d), self.now - _origin_call(d))

    def _labels(self, value: Bytes) -> Union[int, frozenset[int]]:
        if isinstance(value, frozenset):
            labels = frozenset(self._label(d) for d in value)
            return labels if len(labels) > 1 else next(iter(labels))
        return self._label(value)

    def _observe(self, index: int) -> tuple[Content, bool]:
        """What reading value ``index`` reads now (its bytes' definitions, a list's items'), and whether all of
        it is constant data."""
        items = self.p.items[index] if 0 <= index < len(self.p.items) else ()
        if items:
            seen = [self._observe(i) for i in items]
            return ("list", tuple(c for c, _ in seen)), all(k for _, k in seen)
        is_tensor, held = self._slot(index)
        if not is_tensor:
            return self._labels(held), _all_constant(held)
        if isinstance(held, int):
            return self._tensor_content(held)
        seen = [self._tensor_content(identity) for identity in held]
        contents = {c for c, _ in seen}
        content = next(iter(contents)) if len(contents) == 1 else ("any", frozenset(contents))
        return content, all(k for _, k in seen)

    def _tensor_content(self, identity: int) -> tuple[Content, bool]:
        p = self.p
        if not 0 <= identity < len(p.start_of) or p.start_of[identity] < 0:
            return (), True
        key, start, end = p.key_of[identity], p.start_of[identity], p.end_of[identity]
        storage = self.storages.get(key)
        if storage is None:  # untouched: one definition, its label (the common case: a constant)
            value = self._initial(key)
            return self._label(value), bool(value & _CONSTANT)
        return self._content_of((key, start, end), storage.read(start, end))

    def _content_of(self, where: tuple[int, int, int], pieces: list[tuple[int, int, Bytes]]
                    ) -> tuple[Content, bool]:
        """The canonical content of the bytes at ``where`` (relative pieces, labels), and whether all constant."""
        start, end = where[1], where[2]
        if len(pieces) == 1:
            value = pieces[0][2]
            if isinstance(value, int):
                return self._label(value), bool(value & _CONSTANT)
            labels = self._labels(value)
            return (labels if isinstance(labels, int) else ((0, end - start, labels),)), _all_constant(value)
        self.budget.spend(len(pieces))
        out: list[tuple[int, int, object]] = []
        constant = True
        for s, e, value in pieces:
            labels = self._labels(value)
            constant = constant and _all_constant(value)
            if out and out[-1][2] == labels and out[-1][1] == s - start:
                out[-1] = (out[-1][0], e - start, labels)
            else:
                out.append((s - start, e - start, labels))
        if len(out) == 1 and isinstance(out[0][2], int):
            return out[0][2], constant
        return tuple(out), constant

    def _record(self, site: Optional[int], content: Content) -> None:
        if site is None:
            return
        reads = self.reads[-1]
        if isinstance(content, int) and (content >= 0 or content == JUNK):
            code = content
        else:
            code = -3 - len(self.side)
            self.side.append(content)
        old = reads[site]
        if old == JUNK or code == JUNK:  # an output position judged in one visit and not another: not compared
            code = JUNK
        elif old != UNSEEN and old != code:  # read again (a loop): the contents of every visit
            seen = self.content_at(old)
            many = set(seen[1]) if isinstance(seen, tuple) and seen[:1] == ("visits",) else {seen}
            many.add(self.content_at(code))
            code = -3 - len(self.side)
            self.side.append(("visits", frozenset(many)))
        reads[site] = code

    def content_at(self, code: int) -> Content:
        return code if code >= 0 else self.side[-3 - code]

    # --- writing -----------------------------------------------------------------------------------------------

    def _union(self, a: Bytes, b: Bytes) -> Bytes:
        """Either definition; a set is charged to the budget by its size (weak writes repeated many times grow
        it: a delegate called again and again on one input)."""
        both = _union(a, b)
        if isinstance(both, frozenset):
            self.budget.spend(SET_WORK * len(both))
        return both

    def _write(self, index: int, kind: int, ident: int, weak: bool = False, constant: bool = False) -> None:
        """Value ``index`` (a list: its items) is written by ``(kind, ident)`` in this call."""
        items = self.p.items[index] if 0 <= index < len(self.p.items) else ()
        if items:
            for item in items:
                self._write(item, kind, ident, weak, constant)
            return
        is_tensor, held = self._slot(index)
        if not is_tensor:
            d = _define(kind, ident, self.now, self.now, 0, 0, constant)
            self._set_slot(index, (False, self._union(held, d) if weak else d))
            return
        identities = list(_defs(held))
        weak = weak or len(identities) > 1
        for identity in identities:
            where = self.p.place_of(identity)
            if where is None:
                continue
            key, start, end = where
            d = _define(kind, ident, self.now, self.now, start, end - start, constant)
            if weak:
                self._set(key, [(s, e, self._union(value, d)) for s, e, value in self._read(key, start, end)])
            else:
                self._set(key, [(start, end, d)])

    def _copy(self, name: str, args: tuple[int, ...], site: Optional[int], kind: int, ident: int) -> None:
        """An et_copy kernel ``(self, out, ret)``: reads ``self``; ``out`` then holds the definitions ``self`` held
        (shifted), as written now."""
        slots = copy_slots(name, args)
        assert slots is not None, "called for device copies with their source and out"
        source, out = slots.source, slots.out
        src_tensor, src_held = self._slot(source)
        out_tensor, out_held = self._slot(out)
        source_at = self.p.place_of(src_held) if src_tensor and isinstance(src_held, int) else None
        target = self.p.place_of(out_held) if out_tensor and isinstance(out_held, int) else None
        if source_at is None:
            content, constant = self._observe(source)
            pieces: list[tuple[int, int, Bytes]] = []
        else:
            pieces = self._read(*source_at)
            content, constant = self._content_of(source_at, pieces)
        if site is not None:
            self._record(site, content)
        for pos in range(2, len(args)):  # a return slot naming another value: read (the kernel never writes it)
            if args[pos] != out:
                seen, constant_too = self._observe(args[pos])
                constant = constant and constant_too
                if site is not None:
                    self._record(site + pos, seen)
        if source_at is None or target is None:
            self._write(out, kind, ident, constant=constant)
            return
        s_start, s_end = source_at[1], source_at[2]
        key, t_start, t_end = target
        length = min(s_end - s_start, t_end - t_start)
        shift = t_start - s_start
        size = t_end - t_start
        now = self.now
        if len(pieces) == 1 and isinstance(pieces[0][2], int) and length == size:
            self._set(key, [(t_start, t_end, _moved_to(pieces[0][2], now, t_start, size))])
            return
        moved: list[tuple[int, int, Bytes]] = []
        for s, e, value in pieces:
            if s - s_start >= length:
                break
            e = min(e, s_start + length)
            if isinstance(value, int):
                moved.append((s + shift, e + shift, _moved_to(value, now, t_start, size)))
            else:
                moved.append((s + shift, e + shift, frozenset(_moved_to(d, now, t_start, size) for d in value)))
        if t_start + length < t_end:  # the rest of a larger destination: written, with nothing defined
            moved.append((t_start + length, t_end, _define(kind, ident, now, now, t_start, size)))
        self._set(key, moved)

    # --- instructions ------------------------------------------------------------------------------------------

    def _meaningful(self, index: int) -> bool:
        """An output position's old bytes are compared when they are exactly the region an earlier instruction of
        this call wrote (or load-time data, or this call's input): the argument may be a static view of it."""
        is_tensor, held = self._slot(index)
        where = self.p.place_of(held) if is_tensor and isinstance(held, int) else None
        if where is None:
            return False
        key, start, end = where
        pieces = self._read(key, start, end)
        if len(pieces) != 1:
            return False
        for d in _defs(pieces[0][2]):
            if d & 7 != UNINIT and _write_region(d) == (start, end) and _write_call(d) in (0, self.now):
                return True
        return False

    def _kernel_plan(self, position: int, ins: m.KernelCall) -> _KernelPlan:
        """(operator, arguments, what it writes, the positions it reads, in place, the (source, view) it binds),
        once per instruction."""
        found = self._kernels.get(position)
        if found is None:
            args = tuple(ins.args or ())
            op = ins.op_index if 0 <= ins.op_index < len(self.p.ops) else -1
            items = self.p.items
            written = kernel_writes(self.p.ops[op] if op >= 0 else "", args,
                                    lambda i: items[i] if 0 <= i < len(items) else ())
            in_place = op >= 0 and self.p.in_place[op] and bool(written)
            reads = tuple(pos for pos, arg in enumerate(args) if arg not in written or in_place and pos == 0)
            alias = kernel_alias(self.p.ops[op], args) if op >= 0 else None
            found = (op, args, tuple(dict.fromkeys(written)), reads, in_place, alias)
            if self.calls > 1:
                self._kernels[position] = found
        return found

    def _kernel(self, position: int, ins: m.KernelCall, site: Optional[int], kind: int, ident: int) -> None:
        op, args, written, reads, in_place, alias = self._kernel_plan(position, ins)
        updated = updated_in_place(self.p.ops[op], args) if in_place else None
        self.budget.spend(len(args) + 1)
        if op >= 0 and self.p.copies[op] and len(args) >= 2:
            self._copy(self.p.ops[op], args, site, kind, ident)
            return
        constant = True
        for pos in reads:
            content, arg_constant = self._observe(args[pos])
            constant = constant and arg_constant
            if site is not None:
                self._record(site + pos, content)
        if alias is not None:  # the out now points at the source's bytes: nothing is written
            self._set_slot(alias[1], self._slot(alias[0]))
            return
        for arg in written:
            self._write(arg, kind, ident, weak=in_place and arg == updated, constant=constant)

    def _delegate(self, position: int, ins: m.DelegateCall, site: Optional[int], kind: int, ident: int) -> None:
        args = tuple(ins.args or ())
        written, sure = self.roles.get(position) or _ALL_READ
        self.budget.spend(len(args) + 1)
        variable: list[int] = []  # inputs that hold more than constant data: the delegate may write them
        for pos, arg in enumerate(args):
            if pos in written:
                if site is not None:
                    junk = self.judge and (pos in sure or not self._meaningful(arg))
                    self._record(site + pos, JUNK if junk else self._observe(arg)[0])
                continue
            content, constant = self._observe(arg)
            if site is not None:
                self._record(site + pos, content)
            if not constant and arg not in self.constant_values:
                variable.append(arg)
        for pos, arg in enumerate(args):
            if pos in written:
                self._write(arg, kind, ident)
        for arg in variable:
            for item in self.p.items[arg] or (arg,):
                if isinstance(self.p.values[item], m.Tensor):
                    self._write(item, kind, ident, weak=True)

    def _condition(self, index: int, site: Optional[int]) -> Optional[bool]:
        """Record the jump's read; its value when known (a Bool literal, or one moved there), else None."""
        self._record(site, self._observe(index)[0])
        is_tensor, held = self._slot(index)
        if is_tensor:
            return None
        known: set[bool] = set()
        for d in _defs(held):
            value = self.p.values[_ident(d)] if _kind(d) == LOAD and _ident(d) < len(self.p.values) else None
            if not isinstance(value, m.Bool):
                return None
            known.add(bool(value.bool_val))
        return known.pop() if len(known) == 1 else None

    def _chain(self, c: int) -> None:
        chain = self.p.chains[c]
        n = len(chain)
        base = self.p.first[c]
        jumps = [(k, ins.destination_instruction) for k, ins in enumerate(chain) if isinstance(ins, m.JumpFalseCall)]
        heads = {dest for k, dest in jumps if 0 <= dest <= k}
        self.log.on = bool(jumps)
        pending: dict[int, list[int]] = defaultdict(list)
        head_mark: dict[int, int] = {}
        rounds: dict[int, int] = defaultdict(int)
        ran = self.ran[-1]
        alive = True
        k = 0
        while k <= n:
            if k in pending:
                marks = pending.pop(k)
                if not alive:
                    self._merge(marks[0], replace=True)
                    marks = marks[1:]
                    alive = True
                for mark in marks:
                    self._merge(mark)
            if k == n:
                break
            if not alive:
                k += 1
                continue
            if k in heads:
                head_mark[k] = self._checkpoint()
            position = base + k
            ran[position] = 1
            ins = chain[k]
            site = self.site_of[position]
            ident = self.idents[position]
            kind, ident = (NEW, position) if ident is None else (WRITE, ident)
            self.budget.spend(1)
            if isinstance(ins, m.KernelCall):
                self._kernel(position, ins, site, kind, ident)
            elif isinstance(ins, m.DelegateCall):
                self._delegate(position, ins, site, kind, ident)
            elif isinstance(ins, m.MoveCall):
                self._set_slot(ins.move_to, self._slot(ins.move_from))
            elif isinstance(ins, m.JumpFalseCall):
                cond = self._condition(ins.cond_value_index, site)
                dest = min(max(ins.destination_instruction, 0), n)
                if cond is not True:
                    if dest > k:
                        pending[dest].append(self._checkpoint())
                        if cond is False:
                            alive = False
                    else:  # a loop: merge the state at its head and go round until nothing changes
                        rounds[dest] += 1
                        changed = self._merge(head_mark[dest]) if dest in head_mark else True
                        if changed:
                            if rounds[dest] > LOOP_LIMIT:
                                raise UnsupportedProgramError(
                                    f"the memory proof: the loop of chain {c} at instruction {dest} did not settle "
                                    f"in {LOOP_LIMIT} rounds")
                            k = dest
                            continue
            k += 1
        self.log.entries.clear()
        self.log.on = False

    def run(self) -> None:
        p = self.p
        for index, value in enumerate(p.values):  # load: initial data into its region, in value order
            if isinstance(value, m.Tensor) and value.has_initial_data:
                where = p.place_of(index)
                if where is not None:
                    key, start, end = where
                    self._set(key, [(start, end, _define(LOAD, index, 0, 0, start, end - start,
                                                         index in self.constant_values))])
        for call in range(1, self.calls + 1):
            self.now = call
            self.reads.append(array("q", [UNSEEN]) * self.n_sites)
            self.ran.append(bytearray(len(p.positions)))
            for index in p.plan.inputs or ():
                if 0 <= index < len(p.values):
                    self._write(index, INPUT, index)
            for c in range(len(p.chains)):
                self._chain(c)
            for pos, index in enumerate(p.plan.outputs or ()):
                if 0 <= index < len(p.values):
                    self._record(self.output_base + pos, self._observe(index)[0])


# --- which instruction of the rewrite is which of the input ---------------------------------------------------

def _same_instruction(a: m.Instruction, b: m.Instruction, ops_a: Sequence[str], ops_b: Sequence[str]) -> bool:
    """Whether ``b`` (the rewrite's) can be ``a`` (the input's): a jump's target and a delegate's arguments may
    differ (they are what the proof compares)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, m.KernelCall) and isinstance(b, m.KernelCall):
        name_a = ops_a[a.op_index] if 0 <= a.op_index < len(ops_a) else None
        name_b = ops_b[b.op_index] if 0 <= b.op_index < len(ops_b) else None
        return name_a == name_b and a.args == b.args
    if isinstance(a, m.DelegateCall) and isinstance(b, m.DelegateCall):
        return a.delegate_index == b.delegate_index and len(a.args or ()) == len(b.args or ())
    if isinstance(a, m.JumpFalseCall) and isinstance(b, m.JumpFalseCall):
        return a.cond_value_index == b.cond_value_index
    return a == b


def match_instructions(original: m.ExecutionPlan, rewrite: m.ExecutionPlan, budget: Optional[Budget] = None,
                       leading: Optional[tuple[int, int]] = None) -> list[list[Optional[int]]]:
    """Per chain of ``rewrite``: for each instruction, the index of the input's instruction it is (None: new).

    The rewrite removes kernels and may start chain 0 with instructions of its own: ``leading`` (the input's count,
    the rewrite's) says how many; the rewrite's are new, the input's count as removed (a conversion rewrites or
    drops them), and the rest is matched in order, skipping the input's kernels the rewrite removed.  Without
    ``leading``, each program's run-once region (``once.py``) is what leads it.
    """
    skip_a, skip_b = leading if leading is not None else (once_length(original), once_length(rewrite))
    ops_a = [op.qualified_name for op in original.operators or ()]
    ops_b = [op.qualified_name for op in rewrite.operators or ()]
    chains_a, chains_b = original.chains or (), rewrite.chains or ()
    result: list[list[Optional[int]]] = []
    for c, chain_b in enumerate(chains_b):
        instructions_b = chain_b.instructions or ()
        instructions_a = (chains_a[c].instructions or ()) if c < len(chains_a) else ()
        skip = skip_b if c == 0 else 0
        mapping: list[Optional[int]] = [None] * skip
        i = skip_a if c == 0 else 0  # the input's leading instructions: removed, whatever replaces them
        for b in instructions_b[skip:]:
            j = i
            while j < len(instructions_a) and not _same_instruction(instructions_a[j], b, ops_a, ops_b) \
                    and isinstance(instructions_a[j], m.KernelCall):
                j += 1
            if budget is not None:
                budget.spend(j - i + 1)
            if j < len(instructions_a) and _same_instruction(instructions_a[j], b, ops_a, ops_b):
                mapping.append(j)
                i = j + 1
            else:
                mapping.append(None)
        result.append(mapping)
    return result


# --- the proof ---------------------------------------------------------------------------------------------------

def _moved_constants(original: m.ExecutionPlan, rewrite: m.ExecutionPlan) -> frozenset[int]:
    """Values of the rewrite that hold a constant: constants, and the input's constants given initial data."""
    before = original.values or ()
    found = set()
    for index, value in enumerate(rewrite.values or ()):
        if not isinstance(value, m.Tensor):
            continue
        old = before[index] if index < len(before) else None
        if value.is_constant or value.has_initial_data and isinstance(old, m.Tensor) and old.is_constant:
            found.add(index)
    return frozenset(found)


def _new_data(original: m.ExecutionPlan, rewrite: m.ExecutionPlan) -> frozenset[int]:
    """Values whose load-time data the rewrite adds: new values with data, and values the input computed that now
    have initial data (folded values); each stands for the input's definition it replaced."""
    before = original.values or ()
    found = set()
    for index, value in enumerate(rewrite.values or ()):
        if not isinstance(value, m.Tensor) or not (value.is_constant or value.has_initial_data):
            continue
        old = before[index] if index < len(before) else None
        if not isinstance(old, m.Tensor) or not (old.is_constant or old.has_initial_data):
            found.add(index)
    return frozenset(found)


def reencoded_sources(original: m.ExecutionPlan, rewrite: m.ExecutionPlan) -> dict[int, Origin]:
    """What each host constant the rewrite's run-once region copies into a value that held initial data in the input
    stands for: that value's load-time data (a constant the rewrite copies once where the input loaded it).

    Read from the two programs alone, so the self-check and ``validate`` prove a conversion the same way.  Not
    ``constant``: the input's initial data lay in device memory a delegate may write, and so does its copy."""
    before = original.values or ()
    after = rewrite.values or ()
    found: dict[int, Origin] = {}
    for dst, (src, _) in copies_made_once(rewrite).items():
        old_dst = before[dst] if 0 <= dst < len(before) else None
        old_src = before[src] if 0 <= src < len(before) else None
        held = isinstance(old_dst, m.Tensor) and old_dst.has_initial_data
        new_source = old_src is None or not (isinstance(old_src, m.Tensor) and old_src.is_constant)
        if held and new_source and isinstance(after[src] if 0 <= src < len(after) else None, m.Tensor):
            found[src] = Origin(value=dst, constant=False)
    return found


def calls_needed(*plans: m.ExecutionPlan) -> int:
    """How many calls show everything: ``STEADY_CALLS`` when no method has a jump (each call runs the same
    instructions, so the reads of every call after the first are those of the second), else ``CALLS``."""
    jumps = any(isinstance(ins, m.JumpFalseCall) for plan in plans for chain in plan.chains or ()
                for ins in chain.instructions or ())
    return CALLS if jumps else STEADY_CALLS


def prove_same_reads(original: m.ExecutionPlan, rewrite: m.ExecutionPlan, *,
                     matching: Optional[Sequence[Sequence[Optional[int]]]] = None,
                     stands_for: Optional[Mapping[int, Origin]] = None, calls: Optional[int] = None,
                     budget: Optional[Budget] = None,
                     declared: tuple[Optional[Declared], Optional[Declared]] = (None, None)) -> Optional[Mismatch]:
    """The first read of ``rewrite`` (method of a rewritten program) that differs from ``original``'s, or None.

    ``calls`` defaults to ``calls_needed``; ``matching`` (per chain of the rewrite: the input's instruction each
    one is, None for new ones) defaults to ``match_instructions``; ``stands_for`` names what each folded value
    stands for (else inferred from the first read of it); a re-encoded constant's host source stands for the input's
    initial data without being named (``reencoded_sources``); ``declared`` is what the delegates' blobs of each
    method declare of their calls (``dataflow.delegate_call_sites``).  Raises ``UnsupportedProgramError`` past the
    work budget.
    """
    if calls is None:
        calls = calls_needed(original, rewrite)
    if not 1 <= calls <= _MASK6:
        raise ValueError(f"calls must be in 1..{_MASK6}")
    budget = budget if budget is not None else budget_for(original, rewrite, calls=calls)
    if matching is None:
        matching = match_instructions(original, rewrite, budget)
    a = _Program(original, declared=declared[0])
    if len(matching) != len(a.chains):
        return Mismatch(1, "the method", f"the rewrite has {len(matching)} chains, the input {len(a.chains)}")
    for what in ("inputs", "outputs"):
        if tuple(getattr(original, what) or ()) != tuple(getattr(rewrite, what) or ()):
            return Mismatch(1, "the method", f"its {what} differ: the rewrite's are not the input's")
    roles_a = {a.first[s[0]] + s[1]: n for s, n in a.roles.items()}
    replay_a = _Replay(a, budget, idents=list(range(len(a.positions))),
                       site_of=list(a.site_base), constants=a.constants, subst={}, roles=roles_a, judge=True,
                       calls=calls, sites=(a.n_sites, a.output_base))
    replay_a.run()

    b = _Program(rewrite, roles={})
    idents: list[Optional[int]] = []
    site_of: list[Optional[int]] = []
    roles_b: dict[int, Roles] = {}
    counterpart: list[Optional[int]] = [None] * len(a.positions)  # the input's position -> the rewrite's
    own_split: Optional[Mapping[tuple[int, int], Roles]] = None  # the rewrite's split, for new calls only
    for c, mapping in enumerate(matching):
        if len(mapping) != len(b.chains[c]):
            return Mismatch(1, f"chain {c}", "the instruction matching does not fit the rewrite's chain")
        for k, old in enumerate(mapping):
            position = b.first[c] + k
            if old is None or not 0 <= old < len(a.chains[c]):
                idents.append(None)
                site_of.append(None)
                if isinstance(b.chains[c][k], m.DelegateCall):
                    if own_split is None:
                        own_split = _roles(rewrite, declared[1])
                    if (c, k) in own_split:
                        roles_b[position] = own_split[(c, k)]
                continue
            at = a.first[c] + old
            before, after = a.chains[c][old], b.chains[c][k]
            if counterpart[at] is not None or type(before) is not type(after) \
                    or len(getattr(before, "args", None) or ()) != len(getattr(after, "args", None) or ()):
                return Mismatch(1, f"chain {c} instruction {k}", f"is matched to the input's instruction {old}, "
                                "which is another instruction or matched twice")
            idents.append(at)
            site_of.append(a.site_base[at])
            roles_b[position] = roles_a.get(at, _ALL_READ)
            counterpart[at] = position
    infer = _new_data(original, rewrite)
    origins = {**reencoded_sources(original, rewrite), **(stands_for or {})}
    subst: dict[int, int] = {}
    for value, origin in origins.items():
        if origin.value is not None:
            subst[value] = _label(LOAD, origin.value, 0)
        elif origin.step is not None and 0 <= origin.step[0] < len(a.chains):
            subst[value] = _label(WRITE, a.first[origin.step[0]] + origin.step[1], 0)
    held = frozenset(value for value, origin in origins.items() if not origin.constant)
    replay_b = _Replay(b, budget, idents=idents, site_of=site_of,
                       constants=(_moved_constants(original, rewrite) | infer | frozenset(subst)) - held, subst=subst,
                       roles=roles_b, judge=False, calls=calls, sites=(a.n_sites, a.output_base))
    replay_b.run()
    return _compare(a, replay_a, replay_b, counterpart, infer - frozenset(subst), b)


def _site_name(a: _Program, b: _Program, site: int, counterpart: Sequence[Optional[int]]) -> tuple[str, int]:
    """(words for an input's site, its position) e.g. ``chain 0 instruction 5 (now 3), argument 2 (value 9)``."""
    if site >= a.output_base:
        pos = site - a.output_base
        outputs = a.plan.outputs or ()
        return f"method output {pos} (value {outputs[pos]})", len(a.positions)
    position = bisect.bisect_right(a.site_base, site) - 1
    while position + 1 < len(a.site_base) and a.site_base[position + 1] == site:
        position += 1  # instructions without sites share a base: the one with arguments holds it
    c, k = a.positions[position]
    now = counterpart[position]
    ins = a.chains[c][k]
    what = type(ins).__name__
    if isinstance(ins, m.KernelCall):
        what = a.ops[ins.op_index] if 0 <= ins.op_index < len(a.ops) else what
    elif isinstance(ins, m.DelegateCall):
        what = f"delegate {ins.delegate_index}"
    moved = f" (now instruction {b.positions[now][1]})" if now is not None and b.positions[now][1] != k else ""
    arg = site - a.site_base[position]
    args = getattr(ins, "args", None) or ()
    value = f", argument {arg} (value {args[arg]})" if arg < len(args) else ", its condition"
    return f"chain {c} instruction {k}{moved}, {what}{value}", position


def _describe(content: Content, positions: Sequence[tuple[int, int]]) -> str:
    if isinstance(content, int):
        return describe_label(content, positions)
    if isinstance(content, tuple) and content and isinstance(content[0], tuple) and len(content[0]) == 3:
        parts = []
        for start, end, labels in content[:3]:
            names = [labels] if isinstance(labels, int) else sorted(labels)
            parts.append(f"bytes [{start}, {end}): " + " or ".join(describe_label(x, positions) for x in names))
        return "; ".join(parts) + ("; ..." if len(content) > 3 else "")
    if isinstance(content, frozenset):
        return " or ".join(describe_label(x, positions) for x in sorted(content))
    if content == ():
        return "no bytes"
    return repr(content)


def _same(x: Content, y: Content, pins: dict[int, int], infer: frozenset[int]) -> bool:
    """Whether the rewrite's content ``y`` is the input's ``x``, a value of ``infer`` pinned on first sight."""
    if x == y:
        return True
    if isinstance(y, int) and isinstance(x, int) and y & 7 == LOAD and y >> 9 in infer:
        pinned = pins.setdefault(y >> 9, x)
        return pinned == x
    if isinstance(x, tuple) and isinstance(y, tuple) and len(x) == len(y) and x[:1] not in (("list",), ("any",)):
        return all(isinstance(p, tuple) and isinstance(q, tuple) and len(p) == len(q) == 3 and p[:2] == q[:2]
                   and _same(p[2], q[2], pins, infer) for p, q in zip(x, y))
    if isinstance(x, tuple) and isinstance(y, tuple) and x[:1] == y[:1] == ("list",):
        return len(x[1]) == len(y[1]) and all(_same(p, q, pins, infer) for p, q in zip(x[1], y[1]))
    return False


def _compare(a: _Program, replay_a: _Replay, replay_b: _Replay, counterpart: Sequence[Optional[int]],
             infer: frozenset[int], b: _Program) -> Optional[Mismatch]:
    pins: dict[int, int] = {}
    site_position = array("q", [0]) * a.n_sites
    for position, base in enumerate(a.site_base):
        end = a.site_base[position + 1] if position + 1 < len(a.site_base) else a.output_base
        for site in range(base, end):
            site_position[site] = position
    for call, (reads_a, reads_b, ran_a) in enumerate(zip(replay_a.reads, replay_b.reads, replay_a.ran), start=1):
        ran_b = replay_b.ran[call - 1]
        for position, now in enumerate(counterpart):
            if now is not None and ran_a[position] != ran_b[now]:
                c, k = a.positions[position]
                runs, not_runs = ("the input", "the rewrite") if ran_a[position] else ("the rewrite", "the input")
                return Mismatch(call, f"chain {c} instruction {k}", f"runs in {runs} but not in {not_runs}")
        for site in range(a.n_sites):
            code_a = reads_a[site]
            if code_a == JUNK:
                continue
            if site < a.output_base and counterpart[site_position[site]] is None:
                continue  # an instruction the rewrite removed
            code_b = reads_b[site]
            if code_a == UNSEEN and code_b == UNSEEN:
                continue
            x, y = replay_a.content_at(code_a), replay_b.content_at(code_b)
            if code_a != UNSEEN and code_b != UNSEEN and _same(x, y, pins, infer):
                continue
            where, _ = _site_name(a, b, site, counterpart)
            if code_b == UNSEEN or code_a == UNSEEN:
                return Mismatch(call, where, "is read in one program and not in the other")
            return Mismatch(call, where, f"reads {_describe(y, a.positions)} where the input reads "
                                         f"{_describe(x, a.positions)}")
    return None
