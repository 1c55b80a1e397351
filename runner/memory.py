"""Memory as the ExecuTorch runtime lays it out: constant data loaded once, one arena per planned buffer.

* ``ProgramData`` owns what a program ships: the constant segment, read once
  into host memory as a whole (as ``Program::load`` does), the .ptd entries
  (each read once), initial-state data and named data for delegates.
  Constants are views into that host memory.
* ``MethodMemory`` owns one ``uint8`` tensor per planned buffer, on the
  (physical) device that ``non_const_buffer_device`` names.  A planned tensor
  is a view of its arena at its offset with the strides its ``dim_order``
  implies, so tensors planned into overlapping regions really alias.
"""

from __future__ import annotations

import ctypes
import os
import warnings
from typing import Any, Optional

import torch

from pte_devconst.schema import model as m
from pte_devconst.util.errors import FormatError, PteDevconstError, UnsupportedProgramError
from pte_devconst.util.named_enum import NamedEnum
from pte_devconst.schema.ptd_file import PtdFile
from pte_devconst.schema.pte_file import PteFile
from pte_devconst.schema.span import Span

from .devices import DeviceMap
from .shared_memory import Region, file_region, shared_arena
from pte_devconst.program.dtypes import dim_order_strides, torch_dtype
from pte_devconst.util.record import record


def host_bytes(data: memoryview | bytes) -> torch.Tensor:
    """A host uint8 tensor holding a copy of ``data`` (one memcpy, no Python loop)."""
    if len(data) == 0:
        return torch.empty(0, dtype=torch.uint8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # bytearray is writable; the warning is about read-only buffers
        return torch.frombuffer(bytearray(data), dtype=torch.uint8)


def typed_view(base: torch.Tensor, offset: int, tensor: m.Tensor, where: str) -> torch.Tensor:
    """View ``base`` (a uint8 tensor) at byte ``offset`` as ``tensor``'s dtype, sizes and dim_order strides."""
    dtype = torch_dtype(tensor.scalar_type, where)
    sizes = tuple(tensor.sizes or ())
    strides = dim_order_strides(sizes, tuple(tensor.dim_order or ()))
    nbytes = tensor.nbytes
    if offset + nbytes > base.numel():
        raise FormatError(f"tensor needs bytes [{offset}, {offset + nbytes}) but its memory holds {base.numel()}",
                          where=where)
    if nbytes == 0:
        return torch.empty_strided(sizes, strides, dtype=dtype, device=base.device)
    if offset % dtype.itemsize:
        raise UnsupportedProgramError(f"offset {offset} is not aligned to the {dtype.itemsize}-byte element size",
                                      where=where)
    return base[offset: offset + nbytes].view(dtype).as_strided(sizes, strides)


class ProgramData:
    """The bytes a program ships, read once and kept on the host for the life of the loaded program."""

    def __init__(self, pte: PteFile, ptd: Optional[PtdFile] = None) -> None:
        self.pte = pte
        self.ptd = ptd
        self._constant_segment: Optional[torch.Tensor] = None
        self._constant_base = 0
        self._external: dict[str, torch.Tensor] = {}
        self._constants: dict[tuple[int, ...], torch.Tensor] = {}
        self._named_keys: Optional[tuple[str, ...]] = None
        self._file_region: Optional[Region] = None
        self._ptd_region: Optional[Region] = None

    def _file(self) -> Optional[Region]:
        """The program's file mapped copy-on-write (``shared_memory.file_region``); None for a program in memory."""
        if self._file_region is None and self.pte.fd >= 0:
            self._file_region = file_region(self.pte.fd, self.pte.size)
        return self._file_region

    def _segment(self) -> tuple[torch.Tensor, int]:
        if self._constant_segment is None:
            sub = self.pte.program.constant_segment
            assert sub is not None, "called once the constant table was found in constant_segment"
            span = self.pte.segment_span(sub.segment_index)
            self.pte.read(span)  # checks the span lies in the file
            region = self._file()
            # Constants are views of the mapped file, as the runtime's mmap loader gives them: never a copy of
            # the segment (pages are read as kernels touch them and given back after, ``LoadedMethod``).
            self._constant_segment = region.tensor[span.offset: span.end] if region is not None else \
                host_bytes(self.pte.read(span))
            self._constant_base = 0
        return self._constant_segment, self._constant_base

    def constant(self, tensor: m.Tensor, where: str) -> torch.Tensor:
        """A read-only (by convention) host view of a constant's data."""
        if tensor.is_external:
            return typed_view(self.external(tensor, where), 0, tensor, where)
        program = self.pte.program
        offsets = (program.constant_segment.offsets or ()) if program.constant_segment else ()
        if len(offsets) > 1:
            if tensor.data_buffer_idx >= len(offsets):
                raise FormatError(f"data_buffer_idx {tensor.data_buffer_idx} is past the constant table "
                                  f"({len(offsets)} entries)", where=where)
            segment, _ = self._segment()
            return typed_view(segment, offsets[tensor.data_buffer_idx], tensor, where)
        data = self.pte.tensor_bytes(tensor)  # deprecated inline constant_buffer
        if data is None:
            raise FormatError(f"constant data_buffer_idx {tensor.data_buffer_idx} has no data", where=where)
        return typed_view(host_bytes(data), 0, tensor, where)

    def external(self, tensor: m.Tensor, where: str) -> torch.Tensor:
        """The .ptd bytes of an EXTERNAL tensor (host uint8), checked against the tensor's layout."""
        key = tensor.fqn
        if key is None:
            raise FormatError("external tensor has no fully_qualified_name", where=where)
        if key not in self._external:
            if self.ptd is None:
                raise UnsupportedProgramError(
                    f"tensor {key!r} is stored in a .ptd data file; pass it with --ptd", where=where)
            entry = self.ptd.entry(key)
            if entry is None:
                raise FormatError(f"the .ptd has no entry {key!r}", file=self.ptd.path, where=where)
            layout = entry.tensor_layout
            if layout is not None and (layout.scalar_type != tensor.scalar_type
                                       or tuple(layout.sizes or ()) != tuple(tensor.sizes or ())
                                       or tuple(layout.dim_order or ()) != tuple(tensor.dim_order or ())):
                raise FormatError(f"the .ptd entry {key!r} has a different dtype, shape or dim_order than the program",
                                  file=self.ptd.path, where=where)
            span = self.ptd.span(key)
            assert span is not None  # the entry was found just above
            if self._ptd_region is None and self.ptd.fd >= 0:
                self._ptd_region = file_region(self.ptd.fd, len(self.ptd.data))
            # A view of the mapped .ptd, as the .pte's constants are (``_segment``): never a copy of the entry.
            self._external[key] = self._ptd_region.tensor[span.offset: span.end] if self._ptd_region is not None \
                else host_bytes(self.ptd.data[span.offset: span.end])
        return self._external[key]

    def load_initial_data(self, tensor: m.Tensor, destination: torch.Tensor, where: str) -> None:
        """Fill ``destination`` (the planned tensor's view) with its initial data.  From the program's own file
        into host memory it is read straight into place (``preadv``: no page of the file stays mapped here, no
        temporary copy); otherwise through a host copy."""
        span = None if tensor.is_external else self._mutable_span(tensor, where)
        if span is not None and span.end <= self.pte.size and self.pte.fd >= 0 and destination.device.type == "cpu" \
                and destination.is_contiguous() and destination.numel():
            nbytes = destination.numel() * destination.element_size()
            if nbytes != span.size:
                raise FormatError(f"initial data of {span.size} bytes for a tensor of {nbytes}", where=where)
            target = memoryview((ctypes.c_ubyte * nbytes).from_address(destination.data_ptr())).cast("B")
            done = 0
            while done < nbytes:
                got = self.pte.read_into(span.offset + done, target[done:])
                if got <= 0:
                    raise FormatError("the file ended inside the tensor's initial data", where=where)
                done += got
            return
        destination.copy_(typed_view(self.initial_data(tensor, where), 0, tensor, where))

    def _mutable_span(self, tensor: m.Tensor, where: str) -> Optional[Span]:
        """Where in the file a planned tensor's initial data lies (checked as ``initial_data`` checks it)."""
        program = self.pte.program
        if not program.mutable_data_segments:
            return None
        if tensor.data_buffer_idx >= len(program.mutable_data_segments[0].offsets or ()):
            return None
        return self.pte.tensor_span(tensor)

    def initial_data(self, tensor: m.Tensor, where: str) -> torch.Tensor:
        """Host bytes (uint8) of a planned tensor's initial state: mutable-data segment or .ptd."""
        if tensor.is_external:
            return self.external(tensor, where)[: tensor.nbytes]
        if not self.pte.program.mutable_data_segments:
            raise FormatError("tensor has initial data but the program has no mutable_data_segments "
                              "(ExecuTorch fails the load the same way)", where=where)
        sub = self.pte.program.mutable_data_segments[0]
        if tensor.data_buffer_idx >= len(sub.offsets or ()):
            raise FormatError(f"data_buffer_idx {tensor.data_buffer_idx} is past the mutable data table", where=where)
        data = self.pte.tensor_bytes(tensor)
        assert data is not None  # a planned tensor with initial data, in the mutable segment (checked above)
        return host_bytes(data)

    def named_keys(self) -> tuple[str, ...]:
        """Every named-data key a delegate can ask for: the program's entries, then the .ptd's (listed once)."""
        if self._named_keys is None:
            keys = [entry.key for entry in self.pte.program.named_data or () if entry.key is not None]
            if self.ptd is not None:
                keys += self.ptd.keys()
            self._named_keys = tuple(dict.fromkeys(keys))
        return self._named_keys

    def named_data(self, key: str) -> Optional[memoryview]:
        """Named data for delegates: the program's own entries, then the .ptd's (ExecuTorch merges both)."""
        data = self.pte.named_data(key)
        if data is None and self.ptd is not None:
            data = self.ptd.named_bytes(key)
        return data


def check_fits(method: str, total: int, what: str = "planned buffers") -> None:
    """Refuse ``total`` bytes of memory larger than this machine's before touching them (a forged size would
    otherwise be zero-filled page by page until the process is killed)."""
    try:
        physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return
    if total > physical:
        raise PteDevconstError(f"method {method}: its {what} need {total} bytes, more than this "
                               f"machine's {physical} bytes of memory")


def zeros(nbytes: int, device: torch.device, method: str, what: str) -> torch.Tensor:
    """A zero-filled uint8 buffer; torch's out-of-memory errors become one line."""
    try:
        return torch.zeros(int(nbytes), dtype=torch.uint8, device=device)
    except (RuntimeError, MemoryError) as error:
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise PteDevconstError(f"method {method}: cannot allocate {nbytes} bytes for {what}: {first_line}") from None


class CallerRole(NamedEnum):
    """Why a tensor the program leaves unplanned gets memory from the caller."""

    OUTPUT = "method output"  # alloc_graph_output=False: Method::set_output_data_ptr
    DELEGATE_OUTPUT = "delegate output"  # copy style with alloc_graph_output=False: a device delegate's outputs


@record
class CallerMemory:
    """One tensor bound at load to memory the caller provides (``LoadedMethod._bind_caller_memory``)."""

    value: int
    device: m.Device
    nbytes: int
    role: CallerRole
    delegate: Optional[int] = None  # the delegate whose output it is (DELEGATE_OUTPUT)

    def to_json(self) -> dict[str, Any]:
        return {"value": self.value, "device": str(self.device), "nbytes": self.nbytes, "role": self.role.value,
                "delegate": self.delegate}


class MethodMemory:
    """One uint8 arena per planned buffer (memory ids 1..n), on the device its entry names."""

    def __init__(self, plan: m.ExecutionPlan, devices: DeviceMap, method: str) -> None:
        sizes = tuple(plan.non_const_buffer_sizes or ())
        self.sizes = sizes
        self.arena_devices: dict[int, m.Device] = {}
        self.arenas: dict[int, torch.Tensor] = {}
        check_fits(method, sum(sizes[1:]))
        listed = plan.buffer_devices()
        self.regions: list[Region] = []  # the host arenas' shared memory, kept while the method lives
        for memory_id in range(1, len(sizes)):
            device = listed.get(memory_id, m.CPU)
            self.arena_devices[memory_id] = device
            self.arenas[memory_id] = self._arena(sizes[memory_id], devices.physical(device), method,
                                                 f"planned buffer {memory_id} on {device}")
        self.method = method

    def _arena(self, nbytes: int, device: torch.device, method: str, what: str) -> torch.Tensor:
        """A zero-filled arena; on the host, in shared memory (``shared_memory.py``), so the ExecuTorch runtime's
        child reads a delegate's arguments where they are."""
        if device.type == "cpu":
            try:
                region = shared_arena(int(nbytes))
            except OSError as error:
                raise PteDevconstError(f"method {method}: cannot allocate {nbytes} bytes for {what}: "
                                       f"{error.strerror or error}") from None
            if region is not None:
                self.regions.append(region)
                return region.tensor
        return zeros(nbytes, device, method, what)

    def device_of(self, memory_id: int) -> m.Device:
        return self.arena_devices[memory_id]

    def planned(self, tensor: m.Tensor, where: str) -> tuple[torch.Tensor, m.Device]:
        """The view of a planned tensor and the device its memory is on."""
        info = tensor.allocation_info
        assert info is not None, "called for planned tensors only"
        if info.memory_id < 1 or info.memory_id not in self.arenas:
            raise FormatError(f"memory_id {info.memory_id} names no planned buffer "
                              f"({len(self.sizes) - 1} in method {self.method!r})", where=where)
        return (typed_view(self.arenas[info.memory_id], info.memory_offset, tensor, where),
                self.arena_devices[info.memory_id])
