"""alnair_common.cuda_region decodes what libalnair_cuda writes, and refuses what it must.

The regions come from real runs of the C tests (release build): a deterministic fixture
workload with known counters, the 64-thread/fork test (exited children), the memory test
and a throttled run. The Python writer's regions must decode identically.
"""

from __future__ import annotations

import os
import struct

import pytest
from interceptor_harness import NativeBuild

from alnair_common.cuda_region import (
    FILE_NAME,
    HEADER_BYTES,
    LAYOUT_VERSION,
    REGION_BYTES,
    DeviceRecord,
    RegionBusyError,
    RegionFormatError,
    decode_region,
    read_region,
)
from alnair_common.testing.cuda_region_writer import RegionWriter

MiB = 1 << 20


def test_fixture_region_counters_match_what_the_workload_did(native_build: NativeBuild) -> None:
    region = read_region(native_build.workspace("release", "region_fixture") / FILE_NAME)
    h = region.header
    assert (h.layout_version, h.limits_source, h.workload_id) == (LAYOUT_VERSION, "file", "fixture/ns/pod")
    assert h.memory_limit_bytes == 1 << 30 and h.compute_percent == 100
    (slot,) = region.slots
    assert slot.state == "exited" and slot.pid > 0 and slot.seq % 2 == 0
    assert list(slot.active_devices()) == [0]
    dev = slot.devices[0]
    assert dev.kernel_launches == 1000 and dev.graph_launches == 10
    assert dev.memcpy_htod_bytes == 3 * MiB + 64 * 32
    assert dev.memcpy_dtoh_bytes == 2 * 512 * 1024
    assert dev.memcpy_dtod_bytes == 4096
    assert dev.alloc_count == 2 and dev.alloc_denied == 1
    assert dev.memory_used_bytes == 0  # an exited process holds nothing
    assert dev.memory_peak_bytes == 6 * MiB
    assert dev.token_rate_per_s == 0 and dev.throttled_ns == 0  # no compute limit
    assert region.memory_used_bytes(0) == 0 and region.active() == ()


def test_forked_children_have_their_own_exited_records(native_build: NativeBuild) -> None:
    region = read_region(native_build.workspace("release", "threads_and_fork") / FILE_NAME)
    assert region.header.memory_limit_bytes == 64 * MiB
    exited = [s for s in region.slots if s.state == "exited"]
    assert len(exited) == 6  # the parent (at exit) and its five children
    children = [s for s in exited if s.devices[0].kernel_launches == 10]
    assert len(children) == 5
    assert all(s.devices[0].alloc_count == 1 for s in children)
    (parent,) = [s for s in exited if s not in children]
    assert parent.devices[0].kernel_launches == 64 * 200
    assert parent.devices[0].memcpy_htod_bytes == 64 * 200 * 100


def test_context_footprint_is_published_per_process(native_build: NativeBuild) -> None:
    """footprint_two_processes: each process charged its own context (5 MiB + 12345 bytes);
    the child exited holding it, the parent released it first."""
    region = read_region(native_build.workspace("release", "footprint_two_processes") / FILE_NAME)
    context = 5 * MiB + 12345
    records = sorted((s.devices[0] for s in region.slots), key=lambda d: d.footprint_bytes)
    assert [d.footprint_bytes for d in records] == [0, context]
    assert all(d.memory_peak_bytes >= context for d in records)
    assert region.memory_used_bytes(0) == 0 and region.active() == ()


def test_kernel_names_word_decodes_per_process(native_build: NativeBuild) -> None:
    """kernel_names: the parent launched 300 backward + 50 multi_tensor_apply kernels among
    1150 (PyTorch-named elementwise, a custom kernel, a handle the driver cannot name); its
    forked child only the custom kernel. kernel_names_unavailable: the driver gave no names."""
    region = read_region(native_build.workspace("release", "kernel_names") / FILE_NAME)
    parent, child = sorted((s.devices[0] for s in region.slots), key=lambda d: -d.kernel_launches)
    assert (parent.kernel_launches, parent.training_kernel_launches) == (1150, 350)
    assert parent.kernel_names_read and parent.torch_kernels_seen
    assert (child.kernel_launches, child.training_kernel_launches) == (100, 0)
    assert child.kernel_names_read and not child.torch_kernels_seen
    (blind,) = read_region(native_build.workspace("release", "kernel_names_unavailable") / FILE_NAME).slots
    dev = blind.devices[0]
    assert dev.kernel_launches == 400
    assert (dev.training_kernel_launches, dev.kernel_names_read, dev.torch_kernels_seen) == (0, False, False)


def test_layout_3_region_decodes_with_kernel_names_unknown(native_build: NativeBuild) -> None:
    """Layout 3 had a reserved zero word where kernel_names is: a reader of 4 still reads a
    region written by an older library (names not read), but no version it does not know."""
    data = bytearray((native_build.workspace("release", "region_fixture") / FILE_NAME).read_bytes())
    struct.pack_into("<I", data, 8, 3)
    region = decode_region(bytes(data))
    dev = region.slots[0].devices[0]
    assert region.header.layout_version == 3 and dev.kernel_launches == 1000
    assert (dev.training_kernel_launches, dev.kernel_names_read, dev.torch_kernels_seen) == (0, False, False)
    struct.pack_into("<I", data, 8, 2)
    with pytest.raises(RegionFormatError, match="layout version 2 is unknown"):
        decode_region(bytes(data))


def test_throttled_run_publishes_bucket_and_utilisation(native_build: NativeBuild) -> None:
    region = read_region(native_build.workspace("release", "throttle_30_sm132") / FILE_NAME)
    assert region.header.compute_percent == 30
    dev = region.slots[0].devices[0]
    assert dev.token_rate_per_s > 0 and dev.throttled_ns > 0 and dev.tokens_charged > 0
    assert dev.sm_util_percent is not None and 10 <= dev.sm_util_percent <= 50


def test_signature_region_has_the_iteration_period(native_build: NativeBuild) -> None:
    slot = read_region(native_build.workspace("release", "signature") / FILE_NAME).slots[0]
    assert slot.iteration_period_launches == 73
    assert slot.iterations >= 100 and slot.iteration_period_ns > 1_000_000
    assert slot.launch_signature != 0


def test_truncated_and_foreign_data_raise_clear_errors(native_build: NativeBuild) -> None:
    data = (native_build.workspace("release", "memory_apis") / FILE_NAME).read_bytes()
    assert len(data) == REGION_BYTES
    decode_region(data)
    with pytest.raises(RegionFormatError, match="header alone needs 512"):
        decode_region(data[:100])
    with pytest.raises(RegionFormatError, match=f"needs {REGION_BYTES}"):
        decode_region(data[:-1])
    newer = bytearray(data)
    struct.pack_into("<I", newer, 8, LAYOUT_VERSION + 1)
    with pytest.raises(RegionFormatError, match=f"layout version {LAYOUT_VERSION + 1} is unknown"):
        decode_region(bytes(newer))
    with pytest.raises(RegionFormatError, match="not an interceptor region"):
        decode_region(bytes(REGION_BYTES))
    odd = bytearray(data)
    struct.pack_into("<I", odd, 16, 4096)  # slot size
    with pytest.raises(RegionFormatError, match="expected"):
        decode_region(bytes(odd))


def test_python_writer_round_trips_and_matches_the_c_layout(tmp_path, native_build: NativeBuild) -> None:
    c_region = read_region(native_build.workspace("release", "region_fixture") / FILE_NAME)
    path = tmp_path / FILE_NAME
    writer = RegionWriter(
        path,
        memory_limit_bytes=1 << 30,
        compute_percent=100,
        workload_id="fixture/ns/pod",
        limits_source="file",
    )
    c_slot = c_region.slots[0]
    writer.write_slot(
        0,
        pid=c_slot.pid,
        state="exited",
        devices={0: c_slot.devices[0]},
        start_time_ticks=c_slot.start_time_ticks,
        updated_unix_ns=c_slot.updated_unix_ns,
        launch_signature=c_slot.launch_signature,
    )
    py_region = read_region(path)
    assert py_region.header.workload_id == c_region.header.workload_id
    assert py_region.header.memory_limit_bytes == c_region.header.memory_limit_bytes
    assert py_region.slots[0].devices == c_slot.devices
    assert py_region.slots[0].pid == c_slot.pid
    assert os.path.getsize(path) == REGION_BYTES
    # a live update: two active processes, one holding memory on GPU 1
    writer.write_slot(
        5,
        pid=4242,
        host_pid=98765,
        devices={1: DeviceRecord(memory_used_bytes=7, kernel_launches=3, sm_util_percent=42, footprint_bytes=5)},
    )
    region = read_region(path)
    (active,) = region.active()
    assert active.host_pid == 98765 and active.active_devices()[1].sm_util_percent == 42
    assert active.active_devices()[1].footprint_bytes == 5
    names = DeviceRecord(kernel_launches=9000, training_kernel_launches=2**62 - 1, kernel_names_read=True)
    writer.write_slot(6, pid=4343, devices={0: names})
    (record,) = (s.devices[0] for s in read_region(path).active() if s.pid == 4343)
    assert record == names and not record.torch_kernels_seen
    assert region.memory_used_bytes(1) == 7 and region.memory_used_bytes(0) == 0


def test_reader_retries_then_reports_a_record_left_mid_update(tmp_path) -> None:
    path = tmp_path / FILE_NAME
    writer = RegionWriter(path)
    writer.write_slot(0, pid=1, leave_torn=True)
    with pytest.raises(RegionBusyError, match="being rewritten"):
        read_region(path, attempts=3)
    writer.write_slot(0, pid=1)
    assert read_region(path).slots[0].seq % 2 == 0
    assert HEADER_BYTES == 512
