"""``@record``: a frozen, slotted dataclass that costs a fraction of one to define.

Why: ``@dataclass(frozen=True, slots=True)`` compiles six generated methods per
class with ``exec``, about a millisecond a class. The schema model and the
rewriter define some seventy such classes, so a command that only reads a
7 KB file spent a quarter of its start-up defining them (bench/RESULTS.md §5).

A record is still a dataclass (``dataclasses.fields``, ``replace``, ``asdict``
and ``is_dataclass`` work; type checkers see it through ``dataclass_transform``),
with the behaviour of a frozen, slotted one for what the project uses: keyword or
positional construction with defaults and default factories, assignment raising
``FrozenInstanceError``, equality and hash over the fields (same class only),
a field-by-field repr, ordering when asked, copy and pickle; a field declared
``field(compare=False)`` or ``field(repr=False)`` is left out of equality, hash and
order, or of the repr, as a dataclass leaves it. What it does not
implement is refused when the class is defined: ``__post_init__``, ``InitVar``,
``init=False`` and keyword-only fields, and inheriting from a dataclass or record
(``__dataclass_params__`` says ``frozen=False, eq=False``: the methods are ours).
A record may inherit methods from a plain class that declares ``__slots__ = ()``
(the generated model records pick up their helpers that way, see
``model_methods.py``); a base without ``__slots__`` is refused, since it would
give every record a ``__dict__``.

The package's rule (docs/design.md, "Records and working state"; tests/test_structure.py holds it): a value
built once and then only read is a ``@record``; an object built up and then read (an accumulator, a cursor, a
checker reusing buffers) is working state, a plain class with ``__slots__`` and an explicit ``__init__``;
no ``@dataclass`` and no ``NamedTuple``.  A hash or an equality here is a Python call, not a tuple's C one, so
a loop over every instruction keys its sets and dicts on the plain tuple of a record's fields instead
(``program/regions.py: region_key``).

Only ``__init__`` is generated from source, because it runs once per object and must be as fast
as the dataclass one; the other methods are shared closures over one
``operator.attrgetter`` that reads all fields at C speed.
"""

from __future__ import annotations

import dataclasses
import operator
from dataclasses import MISSING, FrozenInstanceError
import sys
from typing import TYPE_CHECKING, Any, Callable, Optional, TypeVar, cast, overload

if TYPE_CHECKING:  # typing's from 3.11; typing_extensions is no dependency, but type checkers ship its stubs
    from _typeshed import DataclassInstance
    from typing_extensions import dataclass_transform
elif sys.version_info >= (3, 11):
    from typing import dataclass_transform
else:  # Python 3.10: the decorator only informs type checkers
    def dataclass_transform(**_: Any) -> Callable[[Any], Any]:
        return lambda function: function

T = TypeVar("T")
_NO_VALUE = object()


@overload
@dataclass_transform(frozen_default=True, field_specifiers=(dataclasses.field, dataclasses.Field))
def record(cls: type[T], /) -> type[T]: ...


@overload
def record(cls: None = None, /, *, order: bool = False) -> Callable[[type[T]], type[T]]: ...


def record(cls: Optional[type[T]] = None, /, *, order: bool = False) -> type[T] | Callable[[type[T]], type[T]]:
    """Class decorator: ``@record`` or ``@record(order=True)``."""

    def wrap(klass: type[T]) -> type[T]:
        return _build(klass, order)

    return wrap if cls is None else wrap(cls)


def _build(cls: type[T], order: bool) -> type[T]:
    documented = bool(cls.__dict__.get("__doc__"))
    if not documented:
        cls.__doc__ = cls.__name__  # keeps dataclass from computing a signature for the docstring
    # fields, __match_args__ and __slots__ from dataclasses itself; every generated method is ours
    cls = dataclasses.dataclass(cls, init=False, repr=False, eq=False, slots=True)
    fields = dataclasses.fields(cast("type[DataclassInstance]", cls))  # dataclass() just made it one
    _refuse_unsupported(cls, fields)
    names = tuple(f.name for f in fields)
    if not documented:
        cls.__doc__ = f"{cls.__name__}({', '.join(names)})"
    values = _values_getter(names)
    # field(compare=False, repr=False, hash=...) as dataclasses read them: one getter each, shared when all agree
    compared = _subset_getter(names, values, tuple(f.name for f in fields if f.compare))
    hashed = _subset_getter(names, values, tuple(f.name for f in fields if (f.compare if f.hash is None else f.hash)))
    shown = tuple(f.name for f in fields if f.repr)
    methods: dict[str, Callable[..., Any]] = {
        "__init__": _init(cls, fields),
        "__repr__": _repr(cls.__qualname__, shown, _subset_getter(names, values, shown)),
        "__eq__": _compare(operator.eq, compared),
        "__hash__": lambda self: hash(hashed(self)),
        "__setattr__": _frozen_setattr,
        "__delattr__": _frozen_delattr,
        "__getstate__": lambda self: values(self),
        "__setstate__": _setstate(names),
    }
    if order:
        methods.update(__lt__=_compare(operator.lt, compared), __le__=_compare(operator.le, compared),
                       __gt__=_compare(operator.gt, compared), __ge__=_compare(operator.ge, compared))
    # as dataclasses do: a class's own method wins, except the __hash__ = None that Python implies
    # when a class defines __eq__ alone
    own = set(cls.__dict__) - ({"__hash__"} if cls.__dict__.get("__hash__", 0) is None and "__eq__" in cls.__dict__
                               else set())
    for name, method in methods.items():
        if name not in own:
            method.__qualname__ = f"{cls.__qualname__}.{name}"
            setattr(cls, name, method)
    return cls


def _refuse_unsupported(cls: type, fields: tuple[dataclasses.Field[Any], ...]) -> None:
    """Fail at definition for the dataclass features a record does not implement, rather than ignore them."""
    if hasattr(cls, "__post_init__"):
        raise TypeError(f"{cls.__name__}: @record does not call __post_init__")
    for f in fields:
        if not f.init or f.kw_only is True:
            raise TypeError(f"{cls.__name__}.{f.name}: @record supports neither init=False nor keyword-only fields")
    for name, annotation in cls.__dict__.get("__annotations__", {}).items():
        if "InitVar" in str(annotation) or "KW_ONLY" in str(annotation):
            raise TypeError(f"{cls.__name__}.{name}: @record supports neither InitVar nor KW_ONLY")
    if any(dataclasses.is_dataclass(base) for base in cls.__mro__[1:]):
        raise TypeError(f"{cls.__name__}: a record cannot inherit from a dataclass or another record")
    for base in cls.__mro__[1:-1]:
        if "__slots__" not in base.__dict__:
            raise TypeError(f"{cls.__name__}: its base {base.__name__} must declare __slots__ = () "
                            "(methods only), or every record would carry a __dict__")


def _values_getter(names: tuple[str, ...]) -> Callable[[Any], tuple[Any, ...]]:
    """A function returning the tuple of an object's field values."""
    if not names:
        return lambda self: ()
    if len(names) == 1:
        one = operator.attrgetter(names[0])
        return lambda self: (one(self),)
    return operator.attrgetter(*names)


def _subset_getter(names: tuple[str, ...], values: Callable[[Any], tuple[Any, ...]],
                   subset: tuple[str, ...]) -> Callable[[Any], tuple[Any, ...]]:
    """The getter of ``subset`` of the fields: ``values`` itself when that is all of them."""
    return values if subset == names else _values_getter(subset)


def _init(cls: type, fields: tuple[dataclasses.Field[Any], ...]) -> Callable[..., None]:
    """``__init__`` compiled from source: one slot store per field, as fast as a dataclass's."""
    scope: dict[str, Any] = {"_NO_VALUE": _NO_VALUE}
    params, body = [], []
    for f in fields:
        name = f.name
        scope[f"_set_{name}"] = getattr(cls, name).__set__  # the slot's descriptor: no attribute lookup per call
        if f.default is not MISSING:
            scope[f"_default_{name}"] = f.default
            params.append(f"{name}=_default_{name}")
        elif f.default_factory is not MISSING:
            scope[f"_factory_{name}"] = f.default_factory
            params.append(f"{name}=_NO_VALUE")
            body.append(f"if {name} is _NO_VALUE: {name} = _factory_{name}()")
        else:
            params.append(name)
        body.append(f"_set_{name}(self, {name})")
    source = f"def __init__(self, {', '.join(params)}):\n    " + "\n    ".join(body or ["pass"])
    exec(source, scope)  # noqa: S102 - source built from the class's own field names
    init: Callable[..., None] = scope["__init__"]
    return init


def _repr(qualname: str, names: tuple[str, ...], values: Callable[[Any], tuple[Any, ...]]) -> Callable[[Any], str]:
    def __repr__(self: Any) -> str:
        return f"{qualname}({', '.join(f'{n}={v!r}' for n, v in zip(names, values(self)))})"

    return __repr__


def _compare(op: Callable[[Any, Any], bool], values: Callable[[Any], tuple[Any, ...]]) -> Callable[[Any, Any], Any]:
    def compare(self: Any, other: Any) -> Any:
        if other.__class__ is self.__class__:
            return op(values(self), values(other))
        return NotImplemented

    return compare


def _frozen_setattr(self: Any, name: str, value: Any) -> None:
    raise FrozenInstanceError(f"cannot assign to field {name!r}")


def _frozen_delattr(self: Any, name: str) -> None:
    raise FrozenInstanceError(f"cannot delete field {name!r}")


def _setstate(names: tuple[str, ...]) -> Callable[[Any, tuple[Any, ...]], None]:
    def __setstate__(self: Any, state: tuple[Any, ...]) -> None:
        for name, value in zip(names, state):
            object.__setattr__(self, name, value)

    return __setstate__
