"""Write CUDA interceptor regions from Python — for tests of the region's readers.

The exporter's tests cannot run GPU workloads; they build the exact bytes the interceptor
would leave in ``$ALNAIR_WORKSPACE/cuda.region`` with :class:`RegionWriter` and update
process records while the exporter reads them, using the same seqlock protocol as the C
library (odd ``seq`` while a record is rewritten). The layout comes from
:mod:`alnair_common.cuda_region`; a region written here decodes there and vice versa.

The robust mutex in the header is left zeroed: these regions are for readers, and a real
interceptor attaching to one would treat it as foreign only if its magic were wrong.
"""

from __future__ import annotations

import os
import time
from dataclasses import astuple
from pathlib import Path

from ..cuda_region import (
    DEVICE_RECORD_BYTES,
    DEVICE_STRUCT,
    HEADER_BYTES,
    HEADER_STRUCT,
    KERNEL_NAMES_READ,
    KERNEL_NAMES_TORCH_SEEN,
    KERNEL_NAMES_TRAINING_MASK,
    LAYOUT_VERSION,
    LIMITS_SOURCES,
    MAGIC,
    MAX_DEVICES,
    MAX_SLOTS,
    REGION_BYTES,
    SLOT_BYTES,
    SLOT_HEAD_STRUCT,
    SLOT_STATES,
    UNKNOWN_U32,
    UNLIMITED,
    DeviceRecord,
)

__all__ = ["RegionWriter", "encode_device", "encode_header"]

_STATE_CODES = {name: code for code, name in SLOT_STATES.items()}
_SOURCE_CODES = {name: code for code, name in LIMITS_SOURCES.items()}


def encode_header(
    *,
    memory_limit_bytes: int | None = None,
    compute_percent: int = 100,
    workload_id: str = "",
    limits_source: str = "env",
    created_unix_ns: int | None = None,
    generation: int = 0,
    layout_version: int = LAYOUT_VERSION,
) -> bytes:
    """The 512 header bytes (mutex and reserved words zero)."""
    wid = workload_id.encode()[:63]
    head = HEADER_STRUCT.pack(
        MAGIC,
        layout_version,
        HEADER_BYTES,
        SLOT_BYTES,
        MAX_SLOTS,
        MAX_DEVICES,
        compute_percent,
        UNLIMITED if memory_limit_bytes is None else memory_limit_bytes,
        time.time_ns() if created_unix_ns is None else created_unix_ns,
        generation,
        _SOURCE_CODES[limits_source],
        0,
        wid,
    )
    return head + bytes(HEADER_BYTES - len(head))


def encode_device(record: DeviceRecord) -> bytes:
    """The 128 bytes of one device record."""
    values = astuple(record)
    sm = UNKNOWN_U32 if values[13] is None else values[13]
    names = (
        (KERNEL_NAMES_READ if record.kernel_names_read else 0)
        | (KERNEL_NAMES_TORCH_SEEN if record.torch_kernels_seen else 0)
        | (record.training_kernel_launches & KERNEL_NAMES_TRAINING_MASK)
    )
    return DEVICE_STRUCT.pack(*values[:13], sm, 0, record.footprint_bytes, names)


class RegionWriter:
    """Creates a region file and rewrites its process slots like the interceptor does."""

    def __init__(self, path: str | Path, **header: object) -> None:
        self.path = Path(path)
        self._seq = [0] * MAX_SLOTS
        data = bytearray(REGION_BYTES)
        data[:HEADER_BYTES] = encode_header(**header)  # type: ignore[arg-type]
        tmp = self.path.with_suffix(".tmp")
        tmp.write_bytes(data)
        os.replace(tmp, self.path)

    def write_slot(
        self,
        index: int,
        *,
        pid: int,
        state: str = "active",
        host_pid: int = 0,
        devices: dict[int, DeviceRecord] | None = None,
        start_time_ticks: int = 0,
        launch_signature: int = 0,
        iteration_period_launches: int = 0,
        iteration_period_ns: int = 0,
        iterations: int = 0,
        updated_unix_ns: int | None = None,
        leave_torn: bool = False,
    ) -> None:
        """(Re)writes slot ``index``; ``leave_torn`` stops half-way (odd seq) to test readers."""
        if not 0 <= index < MAX_SLOTS:
            raise ValueError(f"slot index {index} outside 0..{MAX_SLOTS - 1}")
        base = HEADER_BYTES + index * SLOT_BYTES
        seq = self._seq[index] | 1
        body = bytearray(SLOT_BYTES)
        SLOT_HEAD_STRUCT.pack_into(
            body,
            0,
            seq,
            _STATE_CODES[state],
            pid,
            host_pid,
            start_time_ticks,
            time.time_ns() if updated_unix_ns is None else updated_unix_ns,
            launch_signature,
            iteration_period_launches,
            iteration_period_ns,
            iterations,
        )
        for d in range(MAX_DEVICES):
            record = (devices or {}).get(d, DeviceRecord())
            off = 64 + d * DEVICE_RECORD_BYTES
            body[off : off + DEVICE_RECORD_BYTES] = encode_device(record)
        fd = os.open(self.path, os.O_RDWR)
        try:
            os.pwrite(fd, seq.to_bytes(4, "little"), base)  # odd: record being rewritten
            os.pwrite(fd, bytes(body[4:]), base + 4)
            if not leave_torn:
                seq += 1
                os.pwrite(fd, seq.to_bytes(4, "little"), base)
        finally:
            os.close(fd)
        self._seq[index] = seq
