"""ExecuTorch's names and small rules, in one place: what the format leaves to the runtime's conventions.

The .fbs says a kernel has a name, a delegate has compile specs and a tensor has a
scalar type number; what those *mean* is ExecuTorch's: which kernel copies host to
device, which compile spec names a delegate's device and how it is spelled, how many
bytes an element of each scalar type takes, what a nameless or repeated method is
called.  Every module that needs one of these asks here, so each is spelled once.

Nothing here imports torch: the runner derives its torch dtypes from ``SCALAR_TYPES``.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Mapping, Optional

from pte_devconst.schema.generated.enums import DeviceType, ScalarType
from pte_devconst.util.record import record

if TYPE_CHECKING:
    from pte_devconst.schema.generated.program_model import BackendDelegate, Program

__all__ = ["H2D_COPY", "D2H_COPY", "COPY_KERNELS", "TO_DIM_ORDER_COPY", "CLONE_DIM_ORDER", "EMPTY_DIM_ORDER",
           "PRIM_PREFIX", "ET_COPY_INDEX", "TARGET_DEVICE_KEY", "Device", "CPU", "UnreadableTargetDevice",
           "parse_target_device", "delegate_target_device", "ScalarTypeInfo", "SCALAR_TYPES", "KNOWN_SCALAR_TYPES",
           "element_size", "scalar_type_name", "method_name", "method_labels"]


# --- the copy kernels that copy style puts between host memory and a device delegate ---------------------------
H2D_COPY = "et_copy::_h2d_copy.out"
D2H_COPY = "et_copy::_d2h_copy.out"
COPY_KERNELS = frozenset({H2D_COPY, D2H_COPY})

# ExecuTorch's dim-order kernels (what the exporter writes instead of aten's memory-format ones) and prim ops.
TO_DIM_ORDER_COPY = "dim_order_ops::_to_dim_order_copy.out"
CLONE_DIM_ORDER = "dim_order_ops::_clone_dim_order.out"
EMPTY_DIM_ORDER = "dim_order_ops::_empty_dim_order.out"
PRIM_PREFIX = "executorch_prim::"
ET_COPY_INDEX = PRIM_PREFIX + "et_copy_index.tensor"


# --- devices and the ``target_device`` compile spec -----------------------------------------------------------
TARGET_DEVICE_KEY = "target_device"


@record(order=True)
class Device:
    """A (type, index) pair, printed the way compile specs spell it: ``cuda:0``."""

    type: int = DeviceType.CPU
    index: int = 0

    @property
    def is_cpu(self) -> bool:
        return self.type == DeviceType.CPU

    def __str__(self) -> str:
        try:
            name = DeviceType(self.type).name.lower()
        except ValueError:
            name = f"device{self.type}"
        return name if self.is_cpu else f"{name}:{self.index}"

    @classmethod
    def parse(cls, text: str) -> "Device":
        """Parse ``cuda:1`` / ``CUDA`` / ``cpu``, case-insensitively (index defaults to 0)."""
        name, _, index = text.strip().partition(":")
        try:
            kind = DeviceType[name.upper()]
        except KeyError:
            raise ValueError(f"unknown device type {name!r} in {text!r}") from None
        if index and not index.isdigit():
            raise ValueError(f"bad device index in {text!r}")
        number = int(index) if index else 0
        if number > 127:
            raise ValueError(f"device index {number} does not fit the format (max 127)")
        return cls(kind, number)


CPU = Device()


class UnreadableTargetDevice(ValueError):
    """A ``target_device`` compile spec that is present but names no device (the message says which and why)."""


def parse_target_device(raw: Optional[bytes]) -> Device:
    """A delegate's device from its ``target_device`` spec value: the CPU when there is none.

    The one rule for a spec that does not parse (not UTF-8, not ``type[:index]``): its device is *unknown*,
    raised as ``UnreadableTargetDevice``.  Analysis then moves nothing to it (the delegate counts as a host
    delegate, with the message as the reason); the runner refuses to run it (docs/robustness.md).
    """
    if raw is None:
        return CPU
    try:
        return Device.parse(bytes(raw).decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as error:
        raise UnreadableTargetDevice(f"unreadable {TARGET_DEVICE_KEY} compile spec {bytes(raw)!r}: {error}") from None


def delegate_target_device(delegate: "BackendDelegate") -> tuple[Device, Optional[str]]:
    """The delegate's device for analysis: (device, None), or (CPU, why) when its spec is unreadable."""
    try:
        return parse_target_device(delegate.compile_spec(TARGET_DEVICE_KEY)), None
    except UnreadableTargetDevice as error:
        return CPU, str(error)


# --- scalar types -----------------------------------------------------------------------------------------------
@record
class ScalarTypeInfo:
    """What ExecuTorch says of a scalar type: torch's name for it and the bytes of one element."""

    name: str
    element_size: int


SCALAR_TYPES: Mapping[int, ScalarTypeInfo] = {
    ScalarType.BYTE: ScalarTypeInfo("uint8", 1),
    ScalarType.CHAR: ScalarTypeInfo("int8", 1),
    ScalarType.SHORT: ScalarTypeInfo("int16", 2),
    ScalarType.INT: ScalarTypeInfo("int32", 4),
    ScalarType.LONG: ScalarTypeInfo("int64", 8),
    ScalarType.HALF: ScalarTypeInfo("float16", 2),
    ScalarType.FLOAT: ScalarTypeInfo("float32", 4),
    ScalarType.DOUBLE: ScalarTypeInfo("float64", 8),
    ScalarType.BOOL: ScalarTypeInfo("bool", 1),
    ScalarType.QINT8: ScalarTypeInfo("qint8", 1),
    ScalarType.QUINT8: ScalarTypeInfo("quint8", 1),
    ScalarType.QINT32: ScalarTypeInfo("qint32", 4),
    ScalarType.BFLOAT16: ScalarTypeInfo("bfloat16", 2),
    ScalarType.QUINT4X2: ScalarTypeInfo("quint4x2", 1),
    ScalarType.QUINT2X4: ScalarTypeInfo("quint2x4", 1),
    ScalarType.BITS16: ScalarTypeInfo("bits16", 2),
    ScalarType.FLOAT8E5M2: ScalarTypeInfo("float8_e5m2", 1),
    ScalarType.FLOAT8E4M3FN: ScalarTypeInfo("float8_e4m3fn", 1),
    ScalarType.FLOAT8E5M2FNUZ: ScalarTypeInfo("float8_e5m2fnuz", 1),
    ScalarType.FLOAT8E4M3FNUZ: ScalarTypeInfo("float8_e4m3fnuz", 1),
    ScalarType.UINT16: ScalarTypeInfo("uint16", 2),
    ScalarType.UINT32: ScalarTypeInfo("uint32", 4),
    ScalarType.UINT64: ScalarTypeInfo("uint64", 8),
}
KNOWN_SCALAR_TYPES = frozenset(SCALAR_TYPES)
_ELEMENT_SIZE = {int(scalar): info.element_size for scalar, info in SCALAR_TYPES.items()}  # the hot lookup


def element_size(scalar_type: int) -> int:
    """Bytes per element; raises KeyError for a type the format does not define."""
    return _ELEMENT_SIZE[scalar_type]


def scalar_type_name(scalar_type: int) -> str:
    """torch's name for a scalar type (``float32``); ``scalar_type_N`` for a number the format does not define."""
    info = SCALAR_TYPES.get(scalar_type)
    return info.name if info is not None else f"scalar_type_{scalar_type}"


# --- methods ----------------------------------------------------------------------------------------------------
def method_name(name: Optional[str], plan_index: int) -> str:
    """What a method is called in reports: its name, or ``plan<i>`` when it has none."""
    return name or f"plan{plan_index}"


def method_labels(program: "Program") -> tuple[list[str], tuple[str, ...]]:
    """(a label per plan, notes): the name, or ``name (plan i)`` where several plans share it.

    ExecuTorch finds a method by name and takes the first plan with it (``get_execution_plan`` in
    runtime/executor/program.cpp), so a later plan of the same name can never be loaded.
    """
    names = [method_name(plan.name, i) for i, plan in enumerate(program.execution_plan or ())]
    plans_of: dict[str, list[int]] = defaultdict(list)
    for i, name in enumerate(names):
        plans_of[name].append(i)
    labels = [f"{name} (plan {i})" if len(plans_of[name]) > 1 else name for i, name in enumerate(names)]
    taken: set[str] = set()
    for i, label in enumerate(labels):  # a plan may be *named* like another's label (``forward (plan 1)``)
        candidate, k = label, 1
        while candidate in taken:
            candidate = f"{names[i]} [plan {i}]" + (f" #{k}" if k > 1 else "")
            k += 1
        taken.add(candidate)
        labels[i] = candidate
    notes = []
    for name, plans in plans_of.items():
        if len(plans) > 1:
            shown = ", ".join(map(str, plans[:8])) + (", ..." if len(plans) > 8 else "")
            notes.append(f"{len(plans)} methods are named {name!r} (plans {shown}); ExecuTorch finds "
                         f"methods by name and always loads plan {plans[0]}, so the others cannot be run")
    return labels, tuple(notes)
