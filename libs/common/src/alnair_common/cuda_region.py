"""Read the CUDA interceptor's shared-memory region.

Every GPU process of a workload runs ``libalnair_cuda.so`` (``native/cuda_intercept``), which
keeps one file per workload, ``$ALNAIR_WORKSPACE/cuda.region``: a 512-byte header (limits,
workload id) and 128 fixed-size process slots, each with one 128-byte record per GPU (memory
in use and the part of it that is the driver's footprint, kernel and graph launches, copy
bytes by direction, tokens, throttled time, measured SM utilisation, what the launched kernels'
names say: launches of training-named kernels, names readable, PyTorch kernels seen) plus the
launch-sequence signature (iteration period). The node's exporter
decodes it with this module and publishes CUDA samples on the bus.

The byte layout is defined once, in ``native/cuda_intercept/include/ci_region_layout.h``;
the ``struct`` formats below mirror it field for field. Layout 3 (before device.kernel_names,
a reserved zero word then) decodes with the names unknown; a region of any other layout
version is refused with :class:`RegionFormatError` rather than misread.

Errors: :class:`RegionFormatError` (permanent: truncated data, not a region, unknown layout
version) and :class:`RegionBusyError` (temporary: a writer kept changing a record while we
read it; retry shortly).
"""

from __future__ import annotations

import struct
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from .errors import PermanentError, TemporaryError

__all__ = [
    "DEVICE_RECORD_BYTES",
    "FILE_NAME",
    "HEADER_BYTES",
    "LAYOUT_VERSION",
    "MAGIC",
    "MAX_DEVICES",
    "MAX_SLOTS",
    "REGION_BYTES",
    "SLOT_BYTES",
    "DeviceRecord",
    "ProcessSlot",
    "Region",
    "RegionBusyError",
    "RegionFormatError",
    "RegionHeader",
    "decode_region",
    "read_region",
]

FILE_NAME = "cuda.region"
MAGIC = 0x31554341524E4C41  # b"ALNRACU1" little-endian
# 2: DeviceRecord.sm_util_source; 3: DeviceRecord.footprint_bytes; 4: the kernel_names word
# (training_kernel_launches, kernel_names_read, torch_kernels_seen); all were reserved words
LAYOUT_VERSION = 4
# layout 3's word 120 is reserved and zero: it decodes as "names not readable"
READABLE_LAYOUT_VERSIONS = (3, LAYOUT_VERSION)
MAX_DEVICES = 16
MAX_SLOTS = 128
HEADER_BYTES = 512
DEVICE_RECORD_BYTES = 128
SLOT_BYTES = 64 + MAX_DEVICES * DEVICE_RECORD_BYTES
REGION_BYTES = HEADER_BYTES + MAX_SLOTS * SLOT_BYTES
UNLIMITED = 2**64 - 1
UNKNOWN_U32 = 2**32 - 1

SLOT_STATES = {0: "free", 1: "active", 2: "exited"}
LIMITS_SOURCES = {0: "none", 1: "env", 2: "file"}

# header bytes 0..128; the mutex (128..192) and reserved words are not decoded
HEADER_STRUCT = struct.Struct("<QIIIIIIQQQII64s")
# one device record: 13 x 64-bit, sm_util_percent, sm_util_source, footprint_bytes, kernel_names
DEVICE_STRUCT = struct.Struct("<QQQQQQQQQQqQQIIQQ")
# device.kernel_names (CI_KERNEL_NAMES_* in ci_region_layout.h)
KERNEL_NAMES_READ = 1 << 63
KERNEL_NAMES_TORCH_SEEN = 1 << 62
KERNEL_NAMES_TRAINING_MASK = (1 << 62) - 1
# slot head: seq, state, pid, host_pid, start ticks, updated, signature, period, period ns, iters
SLOT_HEAD_STRUCT = struct.Struct("<IIiiQQQQQQ")
# (seq, state) of every slot at once: a reader polling many regions per second decodes only
# the slots in use, and re-checks only their seqlock counters.
_SEQ_STATE = struct.Struct("<II")

_NATIVE_LE = sys.byteorder == "little" and struct.calcsize("I") == 4
_SEQ_WORDS = tuple((HEADER_BYTES + i * SLOT_BYTES) // 4 for i in range(MAX_SLOTS))

assert HEADER_STRUCT.size == 128
assert DEVICE_STRUCT.size == DEVICE_RECORD_BYTES
assert SLOT_HEAD_STRUCT.size == 64


class RegionFormatError(PermanentError):
    """The bytes are not a region this reader understands (truncated, foreign, other version)."""


class RegionBusyError(TemporaryError):
    """A record kept changing under the reader; a retry a few milliseconds later succeeds."""


@dataclass(frozen=True)
class RegionHeader:
    """Limits and identity of the workload (written by the first process to attach)."""

    layout_version: int
    compute_percent: int
    memory_limit_bytes: int | None  # per GPU; None = no limit
    created_unix_ns: int
    generation: int
    limits_source: str  # "none", "env" or "file"
    workload_id: str


@dataclass(frozen=True)
class DeviceRecord:
    """What one process did on one GPU. Counters are totals since the process started."""

    memory_used_bytes: int = 0
    memory_peak_bytes: int = 0
    alloc_count: int = 0
    alloc_denied: int = 0
    kernel_launches: int = 0
    graph_launches: int = 0
    memcpy_htod_bytes: int = 0
    memcpy_dtoh_bytes: int = 0
    memcpy_dtod_bytes: int = 0
    throttled_ns: int = 0
    tokens_available: int = 0
    token_rate_per_s: int = 0  # 0 = not throttled
    tokens_charged: int = 0
    sm_util_percent: int | None = None  # workload SM utilisation, last sample fed to the controller
    # where that sample came from: "gputime" (the interceptor's event-timed GPU time),
    # or a fallback, "nvml" (per-process), "nvml-device" (whole device), "open-loop"
    sm_util_source: str | None = None
    # the part of memory_used_bytes no allocation call made: the process's CUDA contexts,
    # module images, the driver's padding (measured through NVML; counted against the limit).
    # An exited process's record keeps its last value (memory_used_bytes is zeroed).
    footprint_bytes: int = 0
    # From the launched kernels' names (classified once per function through the driver's
    # cuFuncGetName, CUDA >= 12.4): launches of kernels named like training (`backward`:
    # autograd, `multi_tensor_apply`: PyTorch's fused optimizer step); whether any name could
    # be read (False: old driver, or a layout-3 region — the count then means nothing); and
    # whether a PyTorch (at::native) kernel ran, which makes 0 training launches telling.
    training_kernel_launches: int = 0
    kernel_names_read: bool = False
    torch_kernels_seen: bool = False

    @property
    def idle(self) -> bool:
        """True when nothing ever happened on this device."""
        # identity first: the reader hands out the one _IDLE_DEVICE for untouched records
        return self is _IDLE_DEVICE or self == _IDLE_DEVICE


_IDLE_DEVICE = DeviceRecord()


@dataclass(frozen=True)
class ProcessSlot:
    """One process of the workload (``state`` "active", or "exited" with final counters)."""

    index: int
    seq: int
    state: str
    pid: int
    host_pid: int | None
    start_time_ticks: int
    updated_unix_ns: int
    launch_signature: int
    iteration_period_launches: int  # 0 = no repeating launch sequence found yet
    iteration_period_ns: int
    iterations: int
    devices: tuple[DeviceRecord, ...] = field(repr=False)

    def active_devices(self) -> dict[int, DeviceRecord]:
        """The devices this process used, by CUDA ordinal."""
        return {i: d for i, d in enumerate(self.devices) if not d.idle}


@dataclass(frozen=True)
class Region:
    """A decoded region: the header and every slot that was ever used."""

    header: RegionHeader
    slots: tuple[ProcessSlot, ...]

    def active(self) -> tuple[ProcessSlot, ...]:
        """Slots of processes that are still running."""
        return tuple(s for s in self.slots if s.state == "active")

    def memory_used_bytes(self, device: int = 0) -> int:
        """Bytes the workload holds on ``device`` (what the memory limit is checked against)."""
        return sum(s.devices[device].memory_used_bytes for s in self.active())


def _decode_header(data: bytes | memoryview) -> RegionHeader:
    if len(data) < HEADER_BYTES:
        raise RegionFormatError(f"truncated region: {len(data)} bytes, the header alone needs {HEADER_BYTES}")
    (
        magic,
        version,
        header_bytes,
        slot_bytes,
        max_slots,
        max_devices,
        compute_percent,
        memory_limit,
        created,
        generation,
        limits_source,
        _reserved,
        workload_id,
    ) = HEADER_STRUCT.unpack_from(data, 0)
    if magic != MAGIC:
        raise RegionFormatError(f"not an interceptor region: magic {magic:#018x}, want {MAGIC:#018x}")
    if version not in READABLE_LAYOUT_VERSIONS:
        raise RegionFormatError(
            f"region layout version {version} is unknown (this reader decodes versions "
            f"{', '.join(map(str, READABLE_LAYOUT_VERSIONS))}); upgrade the reader together with libalnair_cuda"
        )
    layout = (header_bytes, slot_bytes, max_slots, max_devices)
    expected = (HEADER_BYTES, SLOT_BYTES, MAX_SLOTS, MAX_DEVICES)
    if layout != expected:
        raise RegionFormatError(
            f"region version {version} declares header/slot/slots/devices {layout}, expected {expected}"
        )
    if len(data) < REGION_BYTES:
        raise RegionFormatError(f"truncated region: {len(data)} bytes, layout version {version} needs {REGION_BYTES}")
    return RegionHeader(
        layout_version=version,
        compute_percent=compute_percent,
        memory_limit_bytes=None if memory_limit == UNLIMITED else memory_limit,
        created_unix_ns=created,
        generation=generation,
        limits_source=LIMITS_SOURCES.get(limits_source, f"unknown({limits_source})"),
        workload_id=workload_id.split(b"\0", 1)[0].decode("utf-8", "replace"),
    )


# device.sm_util_source (CI_UTIL_SOURCE_* in ci_region_layout.h); 0 = none yet
UTIL_SOURCES = {1: "gputime", 2: "nvml", 3: "nvml-device", 4: "open-loop"}


def _decode_device(data: bytes | memoryview, offset: int) -> DeviceRecord:
    values = DEVICE_STRUCT.unpack_from(data, offset)
    sm_util, source, names = values[13], values[14], values[16]
    return DeviceRecord(
        *values[:13],
        sm_util_percent=None if sm_util == UNKNOWN_U32 else sm_util,
        sm_util_source=UTIL_SOURCES.get(source, f"unknown({source})") if source else None,
        footprint_bytes=values[15],
        training_kernel_launches=names & KERNEL_NAMES_TRAINING_MASK,
        kernel_names_read=bool(names & KERNEL_NAMES_READ),
        torch_kernels_seen=bool(names & KERNEL_NAMES_TORCH_SEEN),
    )


# A process uses one or two of its 16 device records; the others are as the interceptor
# leaves them when it takes the slot (all zero but sm_util_percent, "unknown") or all zero,
# and decode to one value each: they are compared (memcmp), not decoded.
_UNUSED_RECORDS = {bytes(DEVICE_RECORD_BYTES): _decode_device(bytes(DEVICE_RECORD_BYTES), 0),
                   DEVICE_STRUCT.pack(*[0] * 13, UNKNOWN_U32, 0, 0, 0): _IDLE_DEVICE}
assert _decode_device(DEVICE_STRUCT.pack(*[0] * 13, UNKNOWN_U32, 0, 0, 0), 0) == _IDLE_DEVICE


def _device_at(data: bytes | memoryview, offset: int) -> DeviceRecord:
    unused = _UNUSED_RECORDS.get(bytes(data[offset:offset + DEVICE_RECORD_BYTES]))
    return unused if unused is not None else _decode_device(data, offset)


def _decode_slot(data: bytes | memoryview, index: int) -> ProcessSlot | None:
    base = HEADER_BYTES + index * SLOT_BYTES
    seq, state, pid, host_pid, start, updated, sig, period, period_ns, iters = SLOT_HEAD_STRUCT.unpack_from(data, base)
    if state == 0:
        return None
    devices = tuple(_device_at(data, base + 64 + d * DEVICE_RECORD_BYTES) for d in range(MAX_DEVICES))
    return ProcessSlot(
        index=index,
        seq=seq,
        state=SLOT_STATES.get(state, f"unknown({state})"),
        pid=pid,
        host_pid=host_pid or None,
        start_time_ticks=start,
        updated_unix_ns=updated,
        launch_signature=sig,
        iteration_period_launches=period,
        iteration_period_ns=period_ns,
        iterations=iters,
        devices=devices,
    )


def _slot_seqs(data: bytes | memoryview) -> list[tuple[int, int]]:
    """(seq, state) of every slot, without decoding any of them."""
    if _NATIVE_LE and len(data) >= REGION_BYTES:
        # the region as 32-bit words (one C-level cast, no copy): 128 index reads, not 128
        # struct calls — the reader's hottest loop when an exporter polls many regions
        words = memoryview(data)[:REGION_BYTES].cast("I")
        return [(words[w], words[w + 1]) for w in _SEQ_WORDS]
    return [_SEQ_STATE.unpack_from(data, HEADER_BYTES + i * SLOT_BYTES) for i in range(MAX_SLOTS)]


def decode_region(data: bytes | memoryview) -> Region:
    """Decode a region snapshot. Raises :class:`RegionFormatError` on a layout version it cannot read."""
    header = _decode_header(data)
    used = [i for i, (_, state) in enumerate(_slot_seqs(data)) if state]
    slots = tuple(s for i in used if (s := _decode_slot(data, i)) is not None)
    return Region(header=header, slots=slots)


def read_region(path: str | Path, attempts: int = 8) -> Region:
    """Read and decode a live region file, retrying records caught mid-update.

    A record is consistent when its seqlock counter is even and unchanged across two reads.
    Raises :class:`RegionFormatError` (permanent), :class:`RegionBusyError` after ``attempts``
    torn reads, or ``OSError`` when the file cannot be read.
    """
    path = Path(path)
    for attempt in range(attempts):
        if attempt:
            time.sleep(0.001 * attempt)
        with open(path, "rb") as f:
            first = f.read()
            region = decode_region(first)
            if any(s.seq % 2 for s in region.slots):
                continue
            # Consistent if no record in use changed while we decoded it: re-read only their
            # seqlock counters (4 bytes each), not the whole 270 KB file.
            unchanged = True
            for slot in region.slots:
                f.seek(HEADER_BYTES + slot.index * SLOT_BYTES)
                if int.from_bytes(f.read(4), "little") != slot.seq:
                    unchanged = False
                    break
            if unchanged:
                return region
    raise RegionBusyError(f"{path}: a process record was being rewritten on each of {attempts} reads", 0.01)
