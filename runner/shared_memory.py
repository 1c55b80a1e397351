"""Host memory with a file descriptor behind it: what lets the runner hold a program once, and hand a delegate's
arguments to the ExecuTorch runtime's child process (``isolated.py``) without copying them.

Two kinds of *region* exist, each a uint8 tensor over a memory map:

* ``SharedArena``: a planned buffer on the host (or on a simulated device), in anonymous shared memory
  (``memfd_create``).  Zero-filled as ``torch.zeros`` is, and pages become resident only when written.
* ``FileRegion``: a program's file mapped copy-on-write, so constants are views of the file instead of a copy of
  its constant segment.  ``release`` gives the pages of a range back once an instruction has read them: they stay
  in the page cache, the next read maps them again, and the process holds no second copy of the model.

A region is registered while it lives; ``locate`` finds the region and offset of a tensor's memory, and
``isolated.RuntimeWorker.share`` passes a region's descriptor to the child once (``SCM_RIGHTS``), which maps the
same pages.  A delegate argument then travels as ``SharedTensor`` (region, offset, dtype, sizes, strides): a few
dozen bytes where a pickle of the tensor carried its whole storage.  Where ``memfd_create`` is missing (not
Linux), arenas are plain ``torch.zeros`` and arguments travel by value, as before.
"""

from __future__ import annotations

import bisect
import itertools
import mmap
import os
import warnings
import weakref
from typing import Optional

import torch

from pte_devconst.util.record import record

# Bytes after every shared arena: XNNPACK may read up to 16 bytes past the end of an input (XNN_EXTRA_BYTES), and
# an argument that ends an arena must not fault in the child that reads it.
SLACK = 64
PAGE = mmap.PAGESIZE
RELEASE_FROM = 1 << 20  # constants smaller than this keep their pages: releasing costs more than it saves

_KEYS = itertools.count(1)


@record
class SharedTensor:
    """A tensor described by where its memory is: what travels to the child instead of its bytes."""

    region: int
    offset: int
    dtype: torch.dtype
    sizes: tuple[int, ...]
    strides: tuple[int, ...]


class Region:
    """A uint8 tensor over a memory map, with the descriptor the child maps it from."""

    __slots__ = ("__weakref__", "key", "fd", "size", "shared", "_mapped", "tensor", "base")

    def __init__(self, fd: int, mapped: mmap.mmap, size: int, shared: bool) -> None:
        self.key = next(_KEYS)
        self.fd = fd
        self.size = size
        self.shared = shared  # MAP_SHARED (the child writes the parent's pages); else copy-on-write of a file
        self._mapped = mapped
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a writable map: the warning is about read-only buffers
            self.tensor = torch.frombuffer(mapped, dtype=torch.uint8, count=size) if size else \
                torch.empty(0, dtype=torch.uint8)
        self.base = self.tensor.data_ptr()
        _register(self)
        weakref.finalize(self, _close_fd, fd)

    def release(self, start: int, end: int) -> None:
        """Give back the pages wholly inside bytes ``[start, end)`` (their contents stay the file's)."""
        first = -(-start // PAGE) * PAGE
        last = end // PAGE * PAGE
        if last - first >= PAGE and hasattr(self._mapped, "madvise"):
            try:
                self._mapped.madvise(mmap.MADV_DONTNEED, first, last - first)
            except (OSError, ValueError):
                pass


def _close_fd(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


def shared_arenas_supported() -> bool:
    return hasattr(os, "memfd_create")


def shared_arena(nbytes: int) -> Optional[Region]:
    """A zero-filled shared region of ``nbytes`` (plus ``SLACK``), or None where shared memory is unavailable."""
    if not shared_arenas_supported() or nbytes <= 0:
        return None
    fd = os.memfd_create("pte-devconst-arena", getattr(os, "MFD_CLOEXEC", 0))
    try:
        os.ftruncate(fd, nbytes + SLACK)
        mapped = mmap.mmap(fd, nbytes + SLACK, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    except BaseException:
        os.close(fd)
        raise
    return Region(fd, mapped, nbytes, shared=True)


def file_region(fd: int, size: int) -> Optional[Region]:
    """The file open at ``fd`` (``size`` bytes) mapped copy-on-write, on a descriptor of its own; None if empty."""
    if size <= 0 or fd < 0:
        return None
    own = os.dup(fd)
    try:
        mapped = mmap.mmap(own, size, access=mmap.ACCESS_COPY)
    except BaseException:
        os.close(own)
        raise
    return Region(own, mapped, size, shared=False)


# --- the registry -----------------------------------------------------------------------------------------------

_BASES: list[int] = []  # sorted start addresses of the live regions
_BY_BASE: dict[int, "weakref.ref[Region]"] = {}


def _register(region: Region) -> None:
    """Register ``region`` until it is collected.  A map's address is reused once it is gone, so a
    region leaves the registry when it goes: a stale entry at a lower address would hide a live region above it
    from ``locate``, and its arguments would travel by value (a 256 MiB validation then held 1.3 GB a process)."""
    if not region.size:
        return
    if region.base not in _BY_BASE:
        bisect.insort(_BASES, region.base)
    ref = weakref.ref(region)
    _BY_BASE[region.base] = ref
    weakref.finalize(region, _forget, region.base, ref)


def _forget(base: int, ref: "weakref.ref[Region]") -> None:
    """Drop the entry at ``base`` if it is still ``ref``'s (a newer region at the same address keeps its own)."""
    if _BY_BASE.get(base) is ref:
        del _BY_BASE[base]
        position = bisect.bisect_left(_BASES, base)
        if position < len(_BASES) and _BASES[position] == base:
            del _BASES[position]


def span(tensor: torch.Tensor) -> tuple[int, int]:
    """(first byte address, one past the last) of the memory ``tensor`` can reach (non-negative strides)."""
    start = tensor.data_ptr()
    if tensor.numel() == 0:
        return start, start
    reach = sum((size - 1) * stride for size, stride in zip(tensor.shape, tensor.stride()))
    return start, start + (reach + 1) * tensor.element_size()


def locate(tensor: torch.Tensor) -> Optional[tuple[Region, int]]:
    """The live region holding all of ``tensor``'s memory and the tensor's byte offset in it, or None."""
    if tensor.device.type != "cpu" or tensor.numel() == 0 or any(s < 0 for s in tensor.stride()):
        return None
    start, end = span(tensor)
    position = bisect.bisect_right(_BASES, start) - 1
    if position < 0:
        return None
    ref = _BY_BASE.get(_BASES[position])
    region = ref() if ref is not None else None
    if region is None or end > region.base + region.size:
        return None
    return region, start - region.base


def describe(tensor: torch.Tensor, region: Region, offset: int) -> SharedTensor:
    return SharedTensor(region.key, offset, tensor.dtype, tuple(tensor.shape), tuple(tensor.stride()))


def release(tensor: torch.Tensor) -> None:
    """Give back the pages of a file region that ``tensor`` (a constant) covers, when it is large."""
    if tensor.numel() * tensor.element_size() < RELEASE_FROM:
        return
    found = locate(tensor)
    if found is not None and not found[0].shared:
        start, end = span(tensor)
        found[0].release(found[1], found[1] + end - start)


# --- the child's side -------------------------------------------------------------------------------------------


class MappedRegions:
    """The regions the child mapped from the parent's descriptors, by key."""

    __slots__ = ("_tensors",)

    def __init__(self) -> None:
        self._tensors: dict[int, torch.Tensor] = {}

    def map(self, key: int, fd: int, size: int, shared: bool) -> None:
        try:
            if shared:
                mapped = mmap.mmap(fd, size + SLACK, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)
            else:
                mapped = mmap.mmap(fd, size, access=mmap.ACCESS_COPY)
        finally:
            os.close(fd)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self._tensors[key] = torch.frombuffer(mapped, dtype=torch.uint8, count=size)

    def unmap(self, key: int) -> None:
        self._tensors.pop(key, None)

    def tensor(self, described: SharedTensor) -> torch.Tensor:
        """The tensor ``described`` names, a view of the mapped pages (no copy)."""
        base = self._tensors[described.region]
        itemsize = described.dtype.itemsize
        reach = sum((size - 1) * stride for size, stride in zip(described.sizes, described.strides))
        nbytes = (reach + 1) * itemsize if all(described.sizes) else 0
        if nbytes == 0:
            return torch.empty_strided(described.sizes, described.strides, dtype=described.dtype)
        flat = base[described.offset: described.offset + nbytes].view(described.dtype)
        return flat.as_strided(described.sizes, described.strides)
