"""MPS mode (``ALNAIR_MPS=true``): the plugin runs a control daemon per card and hands it to
containers. The daemons are the fake MPS control program (CI has no GPU), the kubelet the
test kubelet over unix sockets, the bus a real nats-server."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from dp_harness import CARD0, CARD1, ROOT, PluginEnv, allocate, expect_refusal, ids, make_env, preferred

from alnair.v1 import inventory_pb2
from alnair_common import Bus, ConfigError, TypedKV
from alnair_common.natsd import NatsServer
from alnair_common.testing import wait_for
from alnair_device_plugin import DevicePluginService, Resource
from alnair_gpu import SimulatedInventory
from alnair_kubelet.testing import KubeletHarness

FAKE_CONTROL = ROOT / "tests" / "integration" / "local_agent" / "fake_mps_control.py"


def control_program(tmp: Path) -> Path:
    """The fake control program, except that ``-d`` fails for a card whose MPS directory
    holds a ``refuse`` file (a daemon that cannot start, e.g. the GPU is gone)."""
    script = tmp / "mps-control"
    script.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = "-d" ] && [ -e "$CUDA_MPS_LOG_DIRECTORY/../refuse" ]; then\n'
        '  echo "no CUDA-capable device is detected"; exit 1\nfi\n'
        f'exec {sys.executable} {FAKE_CONTROL} "$@"\n')
    script.chmod(0o755)
    return script


@contextlib.asynccontextmanager
async def mps_plugin(tmp_path: Path, nats_server: NatsServer, bus: Bus, *,
                     refuse: tuple[str, ...] = ()) -> AsyncIterator[PluginEnv]:
    mps_dir = tmp_path / "mps"
    for card in refuse:
        (mps_dir / card).mkdir(parents=True, exist_ok=True)
        (mps_dir / card / "refuse").touch()
    envs = make_env(tmp_path, nats_server, bus, SimulatedInventory.parse("sim:2x80"), mps=True,
                    mps_dir=mps_dir, mps_control=str(control_program(tmp_path)), mps_check_seconds=0.2,
                    mps_answer_seconds=1.0)
    try:
        yield await anext(envs)
    finally:
        with contextlib.suppress(StopAsyncIteration):
            await anext(envs)
        for pid_file in mps_dir.glob("*/pipe/daemon.pid"):
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid_file.read_text()), signal.SIGKILL)


def starts(env: PluginEnv, card: str) -> list[dict]:
    log = env.tmp / "mps" / card / "log" / "started.json"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def daemon_pid(env: PluginEnv, card: str) -> int:
    return int((env.tmp / "mps" / card / "pipe" / "daemon.pid").read_text())


def alive(pid: int) -> bool:
    """Running, not a zombie (the daemon's parent is whatever reaps orphans here)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


async def inventory(env: PluginEnv) -> inventory_pb2.NodeInventory:
    stored = await (await TypedKV.open(env.bus, "node_inventory", inventory_pb2.NodeInventory)).get("gpu-node-1")
    assert stored is not None
    return stored.value


async def test_a_daemon_per_card_and_allocate_hands_its_pipe_to_the_container(
        tmp_path: Path, nats_server: NatsServer, bus: Bus) -> None:
    async with mps_plugin(tmp_path, nats_server, bus) as env:
        for card in (CARD0, CARD1):
            assert starts(env, card) == [{"CUDA_VISIBLE_DEVICES": card,
                                          "CUDA_MPS_PIPE_DIRECTORY": str(env.tmp / "mps" / card / "pipe"),
                                          "CUDA_MPS_LOG_DIRECTORY": str(env.tmp / "mps" / card / "log")}]
        found = await inventory(env)
        assert [(g.sharing, g.health) for g in found.gpus] == [
            (inventory_pb2.GPU_SHARING_MPS, inventory_pb2.GPU_HEALTH_HEALTHY)] * 2

        memory = await env.plugin(Resource.MEMORY)
        await env.bind("m1", CARD1, 1, memory_gib=8, compute_percent=30)
        grant = (await allocate(memory, await preferred(memory, Resource.MEMORY, 8))).container_responses[0]
        pipe = str(env.tmp / "mps" / CARD1 / "pipe")
        mounts = {(m.container_path, m.host_path, m.read_only) for m in grant.mounts}
        assert (pipe, pipe, True) in mounts  # the card's daemon, at the path the limits name
        assert len(mounts) == 6
        limits = (env.tmp / "workspaces" / "m1" / "limits").read_text()
        assert f"mps_pipe_directory = {pipe}\n" in limits
        assert "compute_percent = 30" in limits and f"memory_bytes = {8 * 2**30}" in limits
        # The MPS settings are the interceptor's to set from the limits, never handed as variables.
        assert not [k for k in grant.envs if k.startswith("CUDA_MPS_")]


async def test_a_killed_daemon_is_started_again_and_shutdown_stops_them(
        tmp_path: Path, nats_server: NatsServer, bus: Bus) -> None:
    async with mps_plugin(tmp_path, nats_server, bus) as env:
        first = daemon_pid(env, CARD0)
        os.kill(first, signal.SIGKILL)

        async def started_again() -> bool:
            return len(starts(env, CARD0)) == 2

        await wait_for(started_again, timeout=10, what="the daemon started again")
        assert env.service is not None and env.service.mps is not None
        assert env.service.mps.restarts == 1 and len(starts(env, CARD1)) == 1
        pids = [daemon_pid(env, CARD0), daemon_pid(env, CARD1)]
        assert first not in pids and all(alive(p) for p in pids)
        await env.stop()

        async def all_stopped() -> bool:
            return not any(alive(p) for p in pids)

        await wait_for(all_stopped, timeout=5, what="the daemons stopped with the plugin")


async def test_a_card_whose_daemon_cannot_start_is_unhealthy_until_it_answers(
        tmp_path: Path, nats_server: NatsServer, bus: Bus) -> None:
    async with mps_plugin(tmp_path, nats_server, bus, refuse=(CARD1,)) as env:
        found = await inventory(env)
        card0, card1 = found.gpus
        assert card0.health == inventory_pb2.GPU_HEALTH_HEALTHY
        assert card1.health == inventory_pb2.GPU_HEALTH_UNHEALTHY
        assert card1.sharing == inventory_pb2.GPU_SHARING_MPS
        assert "MPS control daemon not answering" in card1.health_reason
        assert "no CUDA-capable device is detected" in card1.health_reason

        memory = await env.plugin(Resource.MEMORY)
        await env.bind("m2", CARD1, 1, memory_gib=4, compute_percent=10)
        await expect_refusal(allocate(memory, ids(Resource.MEMORY, CARD1, range(4))),
                             grpc.StatusCode.INVALID_ARGUMENT, f"GPU {CARD1} is unhealthy (MPS control daemon")

        (env.tmp / "mps" / CARD1 / "refuse").unlink()  # the card can run a daemon again

        async def healthy_again() -> bool:
            return (await inventory(env)).gpus[1].health == inventory_pb2.GPU_HEALTH_HEALTHY

        await wait_for(healthy_again, timeout=10, what="the card healthy again once its daemon answers")
        grant = (await allocate(memory, ids(Resource.MEMORY, CARD1, range(4)))).container_responses[0]
        assert any(m.container_path.endswith(f"{CARD1}/pipe") for m in grant.mounts)


async def test_a_missing_control_program_stops_the_plugin_with_the_fix(
        tmp_path: Path, nats_server: NatsServer, bus: Bus) -> None:
    env = PluginEnv(tmp_path, nats_server, bus, KubeletHarness(tmp_path / "device-plugins"),
                    SimulatedInventory.parse("sim:2x80"),
                    overrides={"mps": True, "mps_dir": tmp_path / "mps", "mps_control": "/nonexistent/mps-control"})
    service = DevicePluginService(env.settings(), source=env.source)
    with pytest.raises(ConfigError, match="cannot run '/nonexistent/mps-control'.*set ALNAIR_MPS=false"):
        await asyncio.wait_for(service.run(), 15)


async def test_without_mps_mode_cards_are_time_sliced(two_gpu_env: PluginEnv) -> None:
    found = await inventory(two_gpu_env)
    assert [g.sharing for g in found.gpus] == [inventory_pb2.GPU_SHARING_TIME_SLICED] * 2
    assert two_gpu_env.service is not None and two_gpu_env.service.mps is None
