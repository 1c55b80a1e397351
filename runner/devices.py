"""Logical devices (what the program says) and the torch devices that hold their memory.

With ``simulate=False`` device ``cuda:N`` is torch's ``cuda:N``; with
``simulate=True`` every device's memory is host memory, while the runner keeps
using the logical device for every check and every count.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch

from pte_devconst.schema import model as m
from pte_devconst.util.errors import UnsupportedProgramError
from pte_devconst.schema.devices import UnreadableTargetDevice, parse_target_device as parse_spec
from pte_devconst.util.record import record


@record
class DeviceMap:
    simulate: bool

    def physical(self, device: m.Device) -> torch.device:
        """The torch device that holds memory of logical ``device``; checks it exists when not simulating."""
        if device.is_cpu or self.simulate:
            return torch.device("cpu")
        if device.type != m.DeviceType.CUDA:
            raise UnsupportedProgramError(f"the runner has no memory for device {device}")
        if not torch.cuda.is_available():
            raise UnsupportedProgramError(
                f"the program uses {device} but torch sees no CUDA GPU; run with --simulate-devices "
                f"(simulate_devices=True) to keep device memory on the host while counting every copy")
        if device.index >= torch.cuda.device_count():
            raise UnsupportedProgramError(
                f"the program uses {device} but this machine has {torch.cuda.device_count()} CUDA device(s); "
                f"run with --simulate-devices to run it anyway")
        return torch.device("cuda", device.index)

    def synchronize(self) -> None:
        if not self.simulate and torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.synchronize()


@contextlib.contextmanager
def exact_float_math() -> Iterator[None]:
    """While a program runs: float32 math in float32 (no TF32) and deterministic cuDNN algorithms.

    The program asks for float32 arithmetic.  TF32 (cuDNN's default for convolutions) rounds inputs to
    10 mantissa bits, and autotuned or atomics-based algorithms can give two runs of the same program
    different bits, so on a GPU `validate` could neither hold a rewrite bit-identical to its original nor
    match eager outputs within a float32 tolerance.  The settings are process-wide; they are restored after.
    """
    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
             torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
    try:
        yield
    finally:
        (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
         torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark) = saved


def parse_target_device(value: bytes | None, where: str) -> m.Device:
    """A ``target_device`` compile spec (``b"cuda:1"``) as a Device; CPU when absent.

    A spec that does not parse names no device the runner could run the delegate on: refused
    (program/executorch.py has the one rule; analysis keeps such a delegate's constants on the host).
    """
    try:
        return parse_spec(value)
    except UnreadableTargetDevice as error:
        raise UnsupportedProgramError(str(error), where=where) from None
