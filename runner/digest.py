"""Digests of tensor bytes and seeded stand-in values, computed on the tensor's own device.

Both serve ``validate``'s delegate-boundary check and opaque delegates, and both
obey two constraints:

* **The same bytes give the same result on the host and on a GPU.**  Only
  integer torch ops are used, on 64-bit words, with results taken modulo 2^64
  (two's-complement wrap-around, which torch's integer kernels do on CPU and
  CUDA alike); integer sums do not depend on the order of reduction.
* **Nothing is fetched while a method runs.**  A digest stays a 2-element int64
  tensor on the tensor's device until the caller fetches it after the call (a
  ``.item()`` mid-call would be a device-to-host memcpy that ``--profile``'s
  profiler would count), and stand-in values are generated on the device from a
  seed that is itself such a tensor.  No tensor is created from Python data on a
  device either (that would be a host-to-device memcpy): constants enter as
  scalars, index ranges from ``torch.arange``.

**The digest** of a tensor's bytes (its memory, in memory order; padded with
zeros to whole 64-bit words w_0 ... w_{n-1}) is the pair

    A = sum(w_i)            mod 2^64
    B = sum((i + 1) * w_i)  mod 2^64

A detects every change confined to one aligned 8-byte word, so every
single-byte change, with certainty: the word's difference is a non-zero number
below 2^64.  B adds the position: two different words swapped at distance d
change B by d * (w_a - w_b), which is zero modulo 2^64 only when the factors of
two in d and in the difference add up to 64 or more (e.g. words that differ in
their top bit only, an even distance apart).  Other changes go unnoticed with a
probability of about 2^-64 each for "random" data; the digest is a checksum,
not a cryptographic hash: anyone who wants to can build a collision.

Both sums are two passes over the data (row sums and column sums of a
``[rows, 1024]`` view), with no temporary as large as the tensor.
"""

from __future__ import annotations

import functools
import hashlib
import operator
import struct
from typing import Iterable, Optional

import torch

COLUMNS = 1024
_WORD = 8
_MASK64 = (1 << 64) - 1


def _signed(value: int) -> int:
    """A 64-bit pattern as the int64 torch accepts as a scalar."""
    value &= _MASK64
    return value - (1 << 64) if value >= 1 << 63 else value


def _raw_bytes(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor's memory as a flat uint8 tensor, in memory order, without a copy when it is dense."""
    t = tensor.detach()
    if t.dim() and not t.is_contiguous():
        strides, sizes = t.stride(), t.size()
        order = sorted(range(t.dim()), key=lambda d: (-strides[d], -sizes[d]))
        permuted = t.permute(order)
        t = permuted if permuted.is_contiguous() else t.contiguous()  # dense in some dim order, or a copy
    return t.reshape(-1).view(torch.uint8)


def _words(data: torch.Tensor) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """The whole 64-bit words of ``data`` (uint8) and its last partial word as one int64 (None if none)."""
    whole = data.numel() // _WORD * _WORD
    head = data[:whole]
    if whole and head.storage_offset() % _WORD:
        head = head.clone()  # a byte view at an unaligned offset cannot be reinterpreted in place
    words = head.view(torch.int64) if whole else torch.zeros(0, dtype=torch.int64, device=data.device)
    tail = data[whole:]
    if not tail.numel():
        return words, None
    shifts = torch.arange(tail.numel(), device=data.device, dtype=torch.int64) * 8
    return words, torch.bitwise_left_shift(tail.to(torch.int64), shifts).sum()


def tensor_digest(tensor: torch.Tensor) -> torch.Tensor:
    """The (A, B) digest of ``tensor``'s bytes as an int64 tensor of shape [2] on its device (see module doc)."""
    words, last = _words(_raw_bytes(tensor))
    device = words.device
    n = words.numel()
    rows, rest = divmod(n, COLUMNS)
    totals, weighted = [], []
    if rows:
        matrix = words[: rows * COLUMNS].view(rows, COLUMNS)
        row_sums = matrix.sum(dim=1)
        column_sums = matrix.sum(dim=0)
        totals.append(row_sums.sum())
        # sum over (r, c) of (r * COLUMNS + c + 1) * w[r, c], split by rows and columns
        row_index = torch.arange(rows, device=device, dtype=torch.int64)
        column_weight = torch.arange(1, COLUMNS + 1, device=device, dtype=torch.int64)
        weighted.append((row_index * row_sums).sum() * COLUMNS + (column_weight * column_sums).sum())
    if rest:
        tail = words[rows * COLUMNS:]
        totals.append(tail.sum())
        weighted.append((torch.arange(rows * COLUMNS + 1, n + 1, device=device, dtype=torch.int64) * tail).sum())
    if last is not None:
        totals.append(last)
        weighted.append(last * (n + 1))
    if not totals:
        return torch.zeros(2, dtype=torch.int64, device=device)
    return torch.stack((functools.reduce(operator.add, totals), functools.reduce(operator.add, weighted)))


def fetch_digests(digests: list[torch.Tensor]) -> list[tuple[int, int]]:
    """Bring pending digests to the host, one transfer per device, after the call that made them."""
    result: list[tuple[int, int]] = [(0, 0)] * len(digests)
    by_device: dict[torch.device, list[int]] = {}
    for position, digest in enumerate(digests):
        by_device.setdefault(digest.device, []).append(position)
    for positions in by_device.values():
        values = torch.stack([digests[p] for p in positions]).cpu().tolist()
        for position, (a, b) in zip(positions, values):
            result[position] = (a & _MASK64, b & _MASK64)
    return result


# --- seeded stand-in values -------------------------------------------------------------------------

_GOLDEN = _signed(0x9E3779B97F4A7C15)
_MIX1 = _signed(0xBF58476D1CE4E5B9)
_MIX2 = _signed(0x94D049BB133111EB)
CHUNK = 1 << 22  # elements generated at a time: bounds the int64 temporaries to 32 MiB each


def host_seed(*parts: bytes) -> int:
    """A 64-bit seed (as a signed int64) from host-side data: backend id, blob, delegate index, literals."""
    h = hashlib.sha256()
    for part in parts:
        h.update(struct.pack("<Q", len(part)))
        h.update(part)
    return _signed(int.from_bytes(h.digest()[:8], "little"))


def mix(seed: torch.Tensor | int, values: Iterable[torch.Tensor | int], device: torch.device) -> torch.Tensor:
    """Fold 64-bit values (digest tensors or ints) into ``seed``, in order, on ``device``: a 0-d int64 tensor.

    Each word is scrambled together with its position, the results are summed and scrambled with the
    seed: a handful of vectorized ops however many values there are.
    """
    state = seed if isinstance(seed, torch.Tensor) else torch.full((), seed, dtype=torch.int64, device=device)
    words = [v.reshape(-1).to(device) if isinstance(v, torch.Tensor)
             else torch.full((1,), _signed(v), dtype=torch.int64, device=device) for v in values]
    if not words:
        return _scramble(state)
    flat = torch.cat(words)
    positions = torch.arange(1, flat.numel() + 1, device=device, dtype=torch.int64)
    return _scramble(state * _GOLDEN + _scramble(flat * _MIX1 + positions * _GOLDEN).sum())


def _scramble(z: torch.Tensor) -> torch.Tensor:
    """SplitMix64's finaliser (with arithmetic shifts, as torch shifts int64): a bijection that mixes all bits."""
    z = torch.bitwise_xor(z, torch.bitwise_right_shift(z, 30)) * _MIX1
    z = torch.bitwise_xor(z, torch.bitwise_right_shift(z, 27)) * _MIX2
    return torch.bitwise_xor(z, torch.bitwise_right_shift(z, 31))


def fill_standin(out: torch.Tensor, seed: torch.Tensor) -> torch.Tensor:
    """A tensor like ``out`` (dtype and shape, on ``seed``'s device) filled from ``seed``.

    Floating point: uniform in [0.5, 1.5) (rounded to the dtype, so up to 1.5), finite and positive, so a
    log, a square root or a division downstream stays finite.  Integers: 0, the one value that indexes any
    non-empty dimension safely.  Bool: seeded.
    """
    result = torch.empty(out.shape, dtype=out.dtype, device=seed.device)
    flat = result.view(-1)
    if flat.numel() == 0:
        return result
    if not (out.dtype.is_floating_point or out.dtype == torch.bool):
        flat.zero_()
        return result
    for start in range(0, flat.numel(), CHUNK):
        count = min(CHUNK, flat.numel() - start)
        counter = torch.arange(start + 1, start + count + 1, device=seed.device, dtype=torch.int64)
        bits = _scramble(counter * _GOLDEN + seed)
        if out.dtype == torch.bool:
            flat[start: start + count] = torch.bitwise_and(bits, 1).bool()
        else:
            fraction = torch.bitwise_and(torch.bitwise_right_shift(bits, 20), (1 << 24) - 1).to(torch.float32)
            flat[start: start + count] = (fraction * (1.0 / (1 << 24)) + 0.5).to(out.dtype)
    return result
