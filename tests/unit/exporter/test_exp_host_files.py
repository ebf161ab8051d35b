"""Host usage parsing over files in the kernel's exact formats (cgroup v2, /proc), laid out as
a kubelet leaves them: a pod's containers share the pod cgroup, which is what gets counted."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from alnair_exporter import CgroupPodResolver, HostReader

UID = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
POD = f"kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID.replace('-', '_')}.slice"


# /proc/<pid>/net/dev as the kernel writes it (two header lines, 16 counters per interface)
NET_DEV = (
    "Inter-|   Receive                                                |  Transmit\n"
    " face |bytes    packets errs drop fifo frame compressed multicast"
    "|bytes    packets errs drop fifo colls carrier compressed\n"
    "    lo:     500       5    0    0    0     0          0         0"
    "      500       5    0    0    0     0       0          0\n"
    "  eth0:    4000      40    0    0    0     0          0         0"
    "     3000      30    0    0    0     0       0          0\n"
)


@pytest.fixture
def host(tmp_path: Path) -> tuple[Path, Path]:
    proc, cgroup = tmp_path / "proc", tmp_path / "cgroup"
    for pid, container in ((100, f"cri-containerd-{'a' * 64}.scope"), (200, f"cri-containerd-{'b' * 64}.scope")):
        (proc / str(pid) / "net").mkdir(parents=True)
        (proc / str(pid) / "cgroup").write_text(f"0::/{POD}/{container}\n")
        (proc / str(pid) / "ns").mkdir()
        (proc / str(pid) / "ns" / "net").symlink_to("net:[4026532000]")  # one pod, one network namespace
        (proc / str(pid) / "net" / "dev").write_text(NET_DEV)
    pod = cgroup / POD
    pod.mkdir(parents=True)
    (pod / "cpu.stat").write_text("usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\n")
    (pod / "memory.current").write_text("1048576\n")
    (pod / "io.stat").write_text("8:0 rbytes=1000 wbytes=2000 rios=1 wios=2 dbytes=0 dios=0\n"
                                 "8:16 rbytes=10 wbytes=20 rios=1 wios=1 dbytes=0 dios=0\n")
    (proc / "300").mkdir()
    (proc / "300" / "cgroup").write_text("0::/user.slice/session-1.scope\n")
    return proc, cgroup


def test_a_pods_containers_are_counted_once_at_the_pod_level(host: tuple[Path, Path]) -> None:
    proc, cgroup = host
    reader = HostReader(proc, cgroup)
    assert reader.cgroup_of(100) == reader.cgroup_of(200) == cgroup / POD
    c = reader.counters({100, 200})
    assert c.cpu_seconds_total == 2.5 and c.memory_bytes == 1 << 20
    assert (c.disk_read_bytes_total, c.disk_write_bytes_total) == (1010, 2020)
    # the containers share the pod's network namespace: counted once, loopback excluded
    assert (c.network_receive_bytes_total, c.network_transmit_bytes_total) == (4000, 3000)


def test_missing_files_leave_quantities_unknown_not_zero(host: tuple[Path, Path]) -> None:
    proc, cgroup = host
    reader = HostReader(proc, cgroup)
    c = reader.counters({300, 999})  # 300's cgroup has no files here; 999 does not exist
    assert c.cpu_seconds_total is None and c.memory_bytes is None
    assert not reader.usage_known(c)


def test_pod_uid_from_the_cgroup_path_for_both_cgroup_drivers(host: tuple[Path, Path], tmp_path: Path) -> None:
    proc, _ = host
    resolver = CgroupPodResolver(proc)
    assert resolver.workload_uid(100) == UID  # systemd driver: '_' in the slice name
    (proc / "400").mkdir()
    (proc / "400" / "cgroup").write_text(f"0::/kubepods/besteffort/pod{UID}/{'c' * 64}\n")  # cgroupfs driver
    assert resolver.workload_uid(400) == UID
    assert resolver.workload_uid(300) is None  # not in a pod
    assert resolver.workload_uid(999) is None  # gone


def test_a_process_in_no_pod_is_accounted_by_its_own_proc_files(host: tuple[Path, Path]) -> None:
    proc, cgroup = host
    pid = proc / "300"  # in user.slice: shares its cgroup and network with the machine
    ticks = os.sysconf("SC_CLK_TCK")
    # utime stime cutime cstime = 3, 1, 2, 0 seconds in clock ticks; the name holds ") ("
    (pid / "stat").write_text(f"300 (py) (x) S 1 300 300 0 -1 4194304 100 0 0 0 {3 * ticks} {ticks} "
                              f"{2 * ticks} 0 20 0 1 0 12345 1000000 250 18446744073709551615\n")
    (pid / "statm").write_text("5000 256 100 1 0 400 0\n")
    (pid / "io").write_text("rchar: 10\nwchar: 20\nsyscr: 1\nsyscw: 2\nread_bytes: 4096\nwrite_bytes: 8192\n"
                            "cancelled_write_bytes: 0\n")
    c = HostReader(proc, cgroup).counters({300})
    assert c.cpu_seconds_total == 6.0
    assert c.memory_bytes == 256 * os.sysconf("SC_PAGE_SIZE")
    assert (c.disk_read_bytes_total, c.disk_write_bytes_total) == (4096, 8192)
    assert c.network_receive_bytes_total is None  # the machine's traffic is not the workload's
    both = HostReader(proc, cgroup).counters({100, 300})  # a pod's PID and a loose one add up
    assert both.cpu_seconds_total == 2.5 + 6.0 and both.network_receive_bytes_total == 4000
