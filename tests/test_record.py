"""``@record`` behaves like ``@dataclass(frozen=True, slots=True)``, at a fraction of the definition cost."""

from __future__ import annotations

import copy
import dataclasses
import pickle
from dataclasses import FrozenInstanceError, field

import pytest

from pte_devconst.schema import model as m
from pte_devconst.util.record import record


@record
class Pair:
    first: int
    second: tuple = ()
    extra: dict = field(default_factory=dict)


@record(order=True)
class Version:
    """A documented class keeps its docstring and its own __str__."""

    major: int = 0
    minor: int = 0

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}"


@record
class Empty:
    pass


def test_construction_defaults_and_factories() -> None:
    assert Pair(1) == Pair(first=1, second=(), extra={})
    assert Pair(1, (2,)).second == (2,)
    assert Pair(1).extra is not Pair(1).extra  # a fresh dict each time, as default_factory promises
    with pytest.raises(TypeError, match="first"):
        Pair()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Pair(1, (), {}, 4)  # type: ignore[call-arg]
    assert Empty() == Empty() and repr(Empty()) == "Empty()"


def test_frozen_and_slotted() -> None:
    pair = Pair(1)
    with pytest.raises(FrozenInstanceError):
        pair.first = 2  # type: ignore[misc]
    with pytest.raises(FrozenInstanceError):
        del pair.first  # type: ignore[misc]
    with pytest.raises(FrozenInstanceError):
        pair.other = 3  # type: ignore[attr-defined]
    assert not hasattr(pair, "__dict__")


def test_equality_hash_and_order_are_over_the_fields_of_one_class() -> None:
    assert Version(1, 2) == Version(1, 2) and Version(1, 2) != Version(1, 3)
    assert hash(Version(1, 2)) == hash(Version(1, 2))
    assert len({Version(1, 2), Version(1, 2), Version(2, 0)}) == 2
    assert Version(1, 2) != (1, 2) and m.Int(1) != m.Bool(True)  # another class is never equal
    assert sorted([Version(2, 0), Version(1, 5), Version(1, 2)]) == [Version(1, 2), Version(1, 5), Version(2, 0)]
    with pytest.raises(TypeError):
        Pair(1) < Pair(2)  # type: ignore[operator]  # noqa: B015 - ordering only when asked
    with pytest.raises(TypeError, match="unhashable"):
        hash(Pair(1))  # a dict field makes it unhashable, as with a dataclass


def test_repr_str_and_docstrings() -> None:
    assert repr(Pair(1, (2,))) == "Pair(first=1, second=(2,), extra={})"
    assert str(Version(1, 2)) == "1.2" and repr(Version(1, 2)) == "Version(major=1, minor=2)"
    assert Version.__doc__.startswith("A documented class") and Pair.__doc__ == "Pair(first, second, extra)"


def test_dataclass_functions_copy_and_pickle() -> None:
    pair = Pair(1, (2,), {"k": 3})
    assert dataclasses.is_dataclass(pair)
    assert [f.name for f in dataclasses.fields(pair)] == ["first", "second", "extra"]
    assert dataclasses.replace(pair, first=9) == Pair(9, (2,), {"k": 3})
    assert dataclasses.asdict(pair) == {"first": 1, "second": (2,), "extra": {"k": 3}}
    assert copy.copy(pair) == pair and copy.deepcopy(pair) == pair
    assert pickle.loads(pickle.dumps(Version(3, 4))) == Version(3, 4)
    tensor = m.Tensor(scalar_type=6, sizes=(2, 3), allocation_info=m.AllocationDetails(1, 64))
    assert pickle.loads(pickle.dumps(tensor)) == tensor


def test_only_init_is_compiled_per_class() -> None:
    """The definition cost: every method but ``__init__`` is a shared closure, not code compiled per class."""
    for name in ("__eq__", "__repr__", "__hash__", "__setattr__"):
        assert getattr(m.Tensor, name).__code__ is getattr(m.Program, name).__code__, name
    assert m.Tensor.__init__.__code__ is not m.Program.__init__.__code__


def test_unsupported_dataclass_features_fail_at_definition() -> None:
    """Rather than silently ignoring them, a record refuses what it does not implement."""
    from dataclasses import InitVar

    with pytest.raises(TypeError, match="__post_init__"):
        @record
        class WithPostInit:
            a: int

            def __post_init__(self) -> None:
                pass

    with pytest.raises(TypeError, match="init=False"):
        @record
        class NotInInit:
            a: int = field(default=0, init=False)

    with pytest.raises(TypeError, match="InitVar"):
        @record
        class WithInitVar:
            a: InitVar[int]

    with pytest.raises(TypeError, match="inherit"):
        @record
        class Child(Pair):
            more: int = 0


def test_methods_come_from_a_slotted_base_and_a_base_with_a_dict_is_refused() -> None:
    """How the generated model records get their hand-written helpers (schema/model_methods.py)."""

    class Area:
        __slots__ = ()

        @property
        def area(self) -> int:
            return self.width * self.height  # type: ignore[attr-defined]

    @record
    class Rectangle(Area):
        width: int = 0
        height: int = 0

    box = Rectangle(2, 3)
    assert box.area == 6 and box == Rectangle(2, 3) and repr(box).endswith("Rectangle(width=2, height=3)")
    assert not hasattr(box, "__dict__") and [f.name for f in dataclasses.fields(box)] == ["width", "height"]
    with pytest.raises(FrozenInstanceError):
        box.width = 4  # type: ignore[misc]

    class Loose:  # no __slots__: its instances, and a record's, would have a __dict__
        pass

    with pytest.raises(TypeError, match="Loose must declare __slots__"):
        @record
        class Leaky(Loose):
            a: int = 0
    assert not hasattr(m.Tensor(), "__dict__") and m.Tensor(sizes=(2,), scalar_type=m.ScalarType.FLOAT).nbytes == 8


def test_a_class_own_hash_and_eq_are_kept_as_dataclasses_keep_them() -> None:
    @record
    class Unhashable:
        a: int
        __hash__ = None  # type: ignore[assignment]

    @record
    class OwnEquality:
        a: int
        b: int = 0

        def __eq__(self, other: object) -> bool:  # compares a only
            return isinstance(other, OwnEquality) and other.a == self.a

    with pytest.raises(TypeError, match="unhashable"):
        hash(Unhashable(1))
    assert OwnEquality(1, 2) == OwnEquality(1, 3)
    assert hash(OwnEquality(1, 2)) == hash((1, 2))  # the field hash, as a frozen dataclass with eq gets


def test_fields_left_out_of_comparison_or_repr_as_a_dataclass_leaves_them() -> None:
    """``field(compare=False)`` and ``field(repr=False)`` mean what they mean to a dataclass (program/etrecord.py's
    lazy digest, runner/validate.py's runs), not silently nothing."""

    @record(order=True)
    class Keyed:
        key: int
        cache: object = field(default=None, compare=False, repr=False)

    @dataclasses.dataclass(frozen=True, order=True)
    class Reference:
        key: int
        cache: object = field(default=None, compare=False, repr=False)

    for cls in (Keyed, Reference):
        assert cls(1, "a") == cls(1, "b") and hash(cls(1, "a")) == hash(cls(1, "b")) and cls(1) != cls(2)
        assert cls(1, "z") < cls(2, "a") and not cls(1, "z") < cls(1, "a")
        assert repr(cls(1, "a")).endswith(f"{cls.__name__}(key=1)")
    assert hash(Keyed(1, [])) == hash(Reference(1, []))  # an unhashable field left out of the hash is no matter
