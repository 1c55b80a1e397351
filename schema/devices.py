"""Devices as ExecuTorch spells them: the ``target_device`` compile spec of a delegate (``cuda:0``) and the
``Device`` record every layer compares, parsed one way.  The .fbs stores a compile spec as bytes under a key;
what the key and the spelling mean is ExecuTorch's convention, needed to read which device a tensor or a
delegate is on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from pte_devconst.schema.generated.enums import DeviceType
from pte_devconst.util.record import record

if TYPE_CHECKING:
    from pte_devconst.schema.generated.program_model import BackendDelegate

__all__ = ["TARGET_DEVICE_KEY", "Device", "CPU", "UnreadableTargetDevice", "parse_target_device",
           "delegate_target_device"]


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

    def to_json(self) -> str:
        """A device in JSON is spelled as compile specs spell it (``cuda:0``), not as a record."""
        return str(self)

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
