"""The ``alnair-device-plugin`` process: refuses bad GPU settings clearly, serves a real kubelet socket."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

from alnair_common.natsd import NatsServer
from alnair_device_plugin import Resource
from alnair_kubelet.api import deviceplugin as dp
from alnair_kubelet.testing import KubeletHarness

ENTRY = [sys.executable, "-m", "alnair_device_plugin"]


def environment(tmp_path: Path, nats_url: str, gpus: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ALNAIR_")}
    env.update(ALNAIR_NATS_URL=nats_url, ALNAIR_GPUS=gpus, ALNAIR_NODE_NAME="proc-node",
               ALNAIR_DEVICE_PLUGIN_DIR=str(tmp_path / "dp"), ALNAIR_WORKSPACE_ROOT=str(tmp_path / "ws"),
               ALNAIR_STATE_DIR=str(tmp_path / "ws" / ".device-plugin"), ALNAIR_KUBELET_POLL_SECONDS="0.1",
               ALNAIR_POD_RESOURCES_SOCKET=str(tmp_path / "pr.sock"), ALNAIR_LOG_FORMAT="console")
    return env


async def run(env: dict[str, str], timeout: float = 30) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(*ENTRY, env=env, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.STDOUT)
    out, _ = await asyncio.wait_for(proc.communicate(), timeout)
    return proc.returncode or 0, out.decode()


async def test_bad_gpu_setting_exits_2_with_the_accepted_forms(tmp_path: Path) -> None:
    code, out = await run(environment(tmp_path, "nats://127.0.0.1:1", "h200"))
    assert code == 2, out
    assert "ALNAIR_GPUS='h200'" in out and "sim:<N>x<GiB>" in out


async def test_no_nvml_exits_1_naming_the_fix(tmp_path: Path, nats_server: NatsServer) -> None:
    code, out = await run(environment(tmp_path, nats_server.url, "nvml"))
    assert code == 1, out
    assert "ALNAIR_GPUS='nvml': NVML cannot start" in out and "sim:2x80" in out
    assert "Traceback" not in out


async def test_process_registers_serves_and_stops_on_sigterm(tmp_path: Path, nats_server: NatsServer) -> None:
    kubelet = KubeletHarness(tmp_path / "dp")
    await kubelet.start()
    proc = await asyncio.create_subprocess_exec(*ENTRY, env=environment(tmp_path, nats_server.url, "sim:1x8"),
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    try:
        registration = await kubelet.wait_registered(Resource.MEMORY.resource_name, timeout=30)
        stream = kubelet.plugin(registration).ListAndWatch(dp.Empty(), timeout=10)
        assert len((await stream.read()).devices) == 8
        stream.cancel()
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = await asyncio.wait_for(proc.communicate(), 30)
        await kubelet.stop()
    assert proc.returncode == 0, out.decode()
