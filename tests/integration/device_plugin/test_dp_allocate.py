"""GetPreferredAllocation and Allocate against assignments published on the bus."""

from __future__ import annotations

import asyncio
import stat
import urllib.request
from pathlib import Path

import grpc
import grpc.aio
from dp_harness import CARD0, CARD1, PluginEnv, allocate, expect_refusal, ids, preferred
from prometheus_client import REGISTRY

from alnair.v1 import platform_pb2, workload_pb2
from alnair_common import subjects
from alnair_common.testing import wait_for
from alnair_device_plugin import Resource, unit_id


async def test_preferred_allocation_steers_to_the_assigned_card(two_gpu_env: PluginEnv) -> None:
    memory, compute = await two_gpu_env.plugin(Resource.MEMORY), await two_gpu_env.plugin(Resource.COMPUTE)
    await two_gpu_env.bind("a1", CARD1, 1, memory_gib=10, compute_percent=30)
    chosen = await preferred(memory, Resource.MEMORY, 10)
    assert chosen == ids(Resource.MEMORY, CARD1, range(10))
    assert await preferred(compute, Resource.COMPUTE, 30) == ids(Resource.COMPUTE, CARD1, range(30))


async def test_allocate_returns_card_interceptor_limits_and_workspace(two_gpu_env: PluginEnv) -> None:
    env = two_gpu_env
    memory, compute = await env.plugin(Resource.MEMORY), await env.plugin(Resource.COMPUTE)
    await env.bind("a1", CARD1, 1, memory_gib=10, compute_percent=30)
    answer = await allocate(memory, await preferred(memory, Resource.MEMORY, 10))
    grant = answer.container_responses[0]
    assert dict(grant.envs) == {
        "CUDA_VISIBLE_DEVICES": CARD1, "NVIDIA_VISIBLE_DEVICES": CARD1,
        "LD_PRELOAD": "/usr/local/alnair/lib/libalnair_cuda.so", "ALNAIR_WORKSPACE": "/var/run/alnair",
        "ALNAIR_WORKLOAD_ID": "ml/pod-a1", "ALNAIR_VGPU_MEMORY_BYTES": str(10 * 2**30),
        "ALNAIR_VGPU_COMPUTE_PERCENT": "30",
    }
    workspace = env.tmp / "workspaces" / "a1"
    mounts = [(m.container_path, m.host_path, m.read_only) for m in grant.mounts]
    assert set(mounts) == {
        # The tenant cannot add, delete or replace anything in its workspace...
        ("/var/run/alnair", str(workspace), True),
        # ...but writes its region, which is its own mount (so it cannot be unlinked either).
        ("/var/run/alnair/cuda.region", str(workspace / "cuda.region"), False),
        # The limits at the path compiled into the interceptor, read-only.
        ("/etc/alnair/limits", str(workspace / "limits"), True),
        # The library for every process of the container, LD_PRELOAD or not.
        ("/etc/ld.so.preload", str(workspace / "ld.so.preload"), True),
        ("/usr/local/alnair/lib/libalnair_cuda.so", str(env.tmp / "lib" / "libalnair_cuda.so"), True),
    }
    targets = [m[0] for m in mounts]
    assert targets.index("/var/run/alnair") < targets.index("/var/run/alnair/cuda.region")
    limits = workspace / "limits"
    assert f"memory_bytes = {10 * 2**30}" in limits.read_text()
    assert "compute_percent = 30" in limits.read_text()
    assert "workspace = /var/run/alnair" in limits.read_text()  # the fixed file names the workspace
    assert (workspace / "ld.so.preload").read_text() == "/usr/local/alnair/lib/libalnair_cuda.so\n"
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in workspace.iterdir()}
    assert modes == {"limits": 0o444, "ld.so.preload": 0o444, "cuda.region": 0o666}
    assert stat.S_IMODE(workspace.stat().st_mode) == 0o755
    # A region is world-writable (any container user must write it): no host user reaches it.
    assert stat.S_IMODE(workspace.parent.stat().st_mode) == 0o700

    # The same container's compute units find the same assignment and the same workspace.
    second = (await allocate(compute, await preferred(compute, Resource.COMPUTE, 30))).container_responses[0]
    assert dict(second.envs) == dict(grant.envs)
    assert {m.host_path for m in second.mounts} == {m.host_path for m in grant.mounts}

    # The workload ends: its workspace goes.
    await env.workload_phase("a1", workload_pb2.WORKLOAD_PHASE_SUCCEEDED)
    await wait_for(lambda: asyncio.sleep(0, not workspace.exists()), what="workspace removed")


async def test_allocation_without_assignment_fails_with_a_reason(two_gpu_env: PluginEnv) -> None:
    memory = await two_gpu_env.plugin(Resource.MEMORY)
    reason = await expect_refusal(allocate(memory, ids(Resource.MEMORY, CARD0, range(4))),
                                  grpc.StatusCode.FAILED_PRECONDITION, "no scheduler assignment on the bus matches")
    assert "4 GiB requested on GPU-sim-0000-80g" in reason
    await expect_refusal(preferred(memory, Resource.MEMORY, 4), grpc.StatusCode.FAILED_PRECONDITION,
                         "no scheduler assignment on this node waits for 4 GiB")
    # An assignment for another card does not make units of this card acceptable.
    await two_gpu_env.bind("b1", CARD1, 1, memory_gib=4, compute_percent=0)
    await expect_refusal(allocate(memory, ids(Resource.MEMORY, CARD0, range(4))),
                         grpc.StatusCode.FAILED_PRECONDITION, "none waiting on this card")
    assert not (two_gpu_env.tmp / "workspaces" / "b1").exists()


async def test_same_memory_with_different_compute_is_not_guessed(two_gpu_env: PluginEnv) -> None:
    memory = await two_gpu_env.plugin(Resource.MEMORY)
    await two_gpu_env.bind("c1", CARD0, 0, memory_gib=8, compute_percent=20)
    await two_gpu_env.bind("c2", CARD0, 0, memory_gib=8, compute_percent=50)
    await expect_refusal(allocate(memory, ids(Resource.MEMORY, CARD0, range(8))),
                         grpc.StatusCode.FAILED_PRECONDITION, "refusing to guess")


async def test_malformed_requests_are_refused_and_the_plugin_keeps_serving(two_gpu_env: PluginEnv) -> None:
    env = two_gpu_env
    memory, compute = await env.plugin(Resource.MEMORY), await env.plugin(Resource.COMPUTE)
    await expect_refusal(allocate(memory, ["GPU-nope-m1"]), grpc.StatusCode.INVALID_ARGUMENT,
                         "unknown device ID 'GPU-nope-m1'")
    await expect_refusal(allocate(memory, [unit_id(Resource.MEMORY, CARD0, 80)]), grpc.StatusCode.INVALID_ARGUMENT,
                         "unknown device ID")
    await expect_refusal(allocate(compute, ids(Resource.COMPUTE, CARD0, range(60)),
                                  ids(Resource.COMPUTE, CARD0, range(40, 100))),
                         grpc.StatusCode.INVALID_ARGUMENT, "120 % of compute requested on GPU-sim-0000-80g")
    two_cards = ids(Resource.MEMORY, CARD0, range(2)) + ids(Resource.MEMORY, CARD1, range(2))
    await expect_refusal(allocate(memory, two_cards),
                         grpc.StatusCode.INVALID_ARGUMENT, "units of 2 GPUs")
    await expect_refusal(allocate(memory, [unit_id(Resource.MEMORY, CARD0, 1)] * 2), grpc.StatusCode.INVALID_ARGUMENT,
                         "repeated")
    await expect_refusal(allocate(memory, []), grpc.StatusCode.INVALID_ARGUMENT, "no device IDs")

    # Still serving: a valid request after all that is granted, and its units cannot be given twice.
    await env.bind("d1", CARD0, 0, memory_gib=2, compute_percent=0)
    granted = await allocate(memory, ids(Resource.MEMORY, CARD0, range(2)))
    assert granted.container_responses[0].envs["CUDA_VISIBLE_DEVICES"] == CARD0
    assert "ALNAIR_VGPU_COMPUTE_PERCENT" not in granted.container_responses[0].envs
    await env.bind("d2", CARD0, 0, memory_gib=2, compute_percent=0)
    await expect_refusal(allocate(memory, ids(Resource.MEMORY, CARD0, range(2))), grpc.StatusCode.INVALID_ARGUMENT,
                         "already allocated")


async def test_bind_naming_a_gpu_this_node_lacks_is_rejected_with_an_error_event(two_gpu_env: PluginEnv) -> None:
    errors: list[platform_pb2.ErrorEvent] = []

    async def collect(_: str, event: platform_pb2.ErrorEvent) -> None:
        errors.append(event)

    await two_gpu_env.bus.subscribe(subjects.error("device-plugin"), platform_pb2.ErrorEvent, collect)
    await two_gpu_env.bind("e1", "GPU-elsewhere", 3, memory_gib=4, compute_percent=10, wait=False)
    await wait_for(lambda: asyncio.sleep(0, errors), what="error event")
    assert "names GPU GPU-elsewhere, which node gpu-node-1 does not have" in errors[0].message
    assert two_gpu_env.service is not None and two_gpu_env.service.index is not None
    assert two_gpu_env.service.index.get("e1") is None


async def test_restart_keeps_assignments_and_cleans_up_what_ended_meanwhile(two_gpu_env: PluginEnv) -> None:
    env = two_gpu_env
    memory = await env.plugin(Resource.MEMORY)
    await env.bind("r1", CARD0, 0, memory_gib=4, compute_percent=0)
    await env.bind("r2", CARD1, 1, memory_gib=6, compute_percent=0)
    await allocate(memory, ids(Resource.MEMORY, CARD0, range(4)))
    workspace = env.tmp / "workspaces" / "r1"
    assert workspace.is_dir()
    registrations = len(env.kubelet.registrations)
    await env.stop()

    # While the plugin is down: r1 ends, a new pod is bound, and a stray directory appears.
    await env.workload_phase("r1", workload_pb2.WORKLOAD_PHASE_DELETED)
    await env.bind("r3", CARD1, 1, memory_gib=3, compute_percent=0, wait=False)
    (env.tmp / "workspaces" / "stray").mkdir()

    await env.start()
    memory = await env.plugin(Resource.MEMORY, after=registrations)
    await wait_for(lambda: asyncio.sleep(0, not workspace.exists()), what="r1's workspace removed after restart")
    assert not (env.tmp / "workspaces" / "stray").exists()
    # r2 (bound before the restart) and r3 (bound while down) both allocate.
    for uid, size in (("r2", 6), ("r3", 3)):
        await wait_for(lambda uid=uid: asyncio.sleep(0, env.service.index.get(uid)), what=f"{uid} indexed")
        chosen = await preferred(memory, Resource.MEMORY, size)
        answer = await allocate(memory, chosen)
        assert answer.container_responses[0].envs["ALNAIR_WORKLOAD_ID"] == f"ml/pod-{uid}"
        assert Path(answer.container_responses[0].mounts[0].host_path).name == uid


async def test_refusals_and_grants_are_counted_and_metrics_pass_promtool(two_gpu_env: PluginEnv, promtool) -> None:
    def count(outcome: str) -> float:
        return REGISTRY.get_sample_value("alnair_device_plugin_requests_total", {
            "resource": "alnair/vgpu-memory", "method": "Allocate", "outcome": outcome}) or 0.0

    refused, granted = count("invalid-argument"), count("ok")
    memory = await two_gpu_env.plugin(Resource.MEMORY)
    await expect_refusal(allocate(memory, ["GPU-nope-m1"]), grpc.StatusCode.INVALID_ARGUMENT, "unknown device ID")
    await two_gpu_env.bind("m1", CARD0, 0, memory_gib=1, compute_percent=0)
    await allocate(memory, ids(Resource.MEMORY, CARD0, range(1)))
    assert (count("invalid-argument") - refused, count("ok") - granted) == (1.0, 1.0)
    assert two_gpu_env.service is not None and two_gpu_env.service.http is not None
    url = f"http://127.0.0.1:{two_gpu_env.service.http.port}/metrics"
    exposition = await asyncio.to_thread(lambda: urllib.request.urlopen(url, timeout=5).read().decode())
    assert 'alnair_device_plugin_registrations_total{resource="alnair/vgpu-memory"}' in exposition
    assert promtool(exposition) == []


async def test_allocate_waits_briefly_for_a_bind_decision_still_in_flight(two_gpu_env: PluginEnv) -> None:
    memory = await two_gpu_env.plugin(Resource.MEMORY)
    call = asyncio.ensure_future(allocate(memory, ids(Resource.MEMORY, CARD1, range(5))))
    # Not a wait for something: it puts the decision on the bus after the kubelet's call arrived.
    await asyncio.sleep(0.1)
    assert not call.done()
    await two_gpu_env.bind("late", CARD1, 1, memory_gib=5, compute_percent=0, wait=False)
    answer = await call
    assert answer.container_responses[0].envs["ALNAIR_WORKLOAD_ID"] == "ml/pod-late"
