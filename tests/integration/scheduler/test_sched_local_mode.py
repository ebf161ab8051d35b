"""Local mode: `alnair up --gpus sim:2x80`, three `alnair run` workloads at once.

The same scheduler places them as it places pods: each run gets a card by UUID in
``CUDA_VISIBLE_DEVICES`` and its limits in the interceptor's variables, and no card holds
more than it has.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from alnair_common.natsd import free_port
from alnair_common.testing import wait_until

ALNAIR = [sys.executable, "-m", "alnair_cli"]
GIB = 1024**3
DUMP_ENV = ("import json, os, sys, time; "
            "open(sys.argv[1], 'w').write(json.dumps(dict(os.environ))); time.sleep(4)")


@pytest.mark.timeout(300)
async def test_three_local_runs_get_distinct_correct_assignments(tmp_path: Path) -> None:
    data_dir, port = tmp_path / "alnair", free_port()
    log = open(tmp_path / "up.log", "wb")  # noqa: ASYNC230 - the console of `alnair up`
    up = subprocess.Popen([*ALNAIR, "up", "--data-dir", str(data_dir), "--port", str(port),  # noqa: ASYNC220
                           "--gpus", "sim:2x80"], stdout=log, stderr=subprocess.STDOUT,
                          env={**os.environ, "COLUMNS": "200"})
    try:
        def ready() -> bool:
            if up.poll() is not None:
                raise AssertionError(f"alnair up exited {up.returncode}: "
                                     f"{(tmp_path / 'up.log').read_text()[-3000:]}")
            done = subprocess.run([*ALNAIR, "status", "--data-dir", str(data_dir), "--json"],
                                  capture_output=True, text=True, timeout=30)
            return done.returncode == 0 and all(
                s["health"]["ready"] for s in json.loads(done.stdout)["services"])

        await asyncio.to_thread(wait_until, ready, timeout=150, interval=1.0, what="alnair up ready")
        requests = [(30, 40), (30, 40), (30, 40)]
        runs = []
        for i, (mem, comp) in enumerate(requests):
            runs.append(await asyncio.create_subprocess_exec(
                *ALNAIR, "run", "--data-dir", str(data_dir), "--gpu-memory", str(mem),
                "--gpu-compute", str(comp), "--name", f"job-{i}", "--wait", "60", "--",
                sys.executable, "-c", DUMP_ENV, str(tmp_path / f"env-{i}.json"),
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT))
        outputs = await asyncio.wait_for(asyncio.gather(*(r.communicate() for r in runs)), 120)
        for r, (out, _) in zip(runs, outputs, strict=True):
            assert r.returncode == 0, out.decode()[-2000:]
        envs = [json.loads((tmp_path / f"env-{i}.json").read_text()) for i in range(3)]
        per_card: dict[str, list[int]] = {}
        for env, (mem, comp) in zip(envs, requests, strict=True):
            assert env["ALNAIR_VGPU_MEMORY_BYTES"] == str(mem * GIB)
            assert env["ALNAIR_VGPU_COMPUTE_PERCENT"] == str(comp)
            card = env["CUDA_VISIBLE_DEVICES"]
            assert card and "," not in card, card
            m, c = per_card.setdefault(card, [0, 0])
            per_card[card] = [m + mem, c + comp]
        # Three 30 GiB / 40 % runs at once on 2 × 80 GiB: cost-saving packs two on one card,
        # the third cannot fit there (90 GiB, 120 %) and takes the other card.
        assert len(per_card) == 2 and sorted(per_card.values()) == [[30, 40], [60, 80]], per_card
        assert len({e["ALNAIR_WORKLOAD_ID"] for e in envs}) == 3

        # Bigger than any card: the scheduler's reason reaches the user and the run ends.
        too_big = await asyncio.create_subprocess_exec(
            *ALNAIR, "run", "--data-dir", str(data_dir), "--gpu-memory", "100", "--gpu-compute",
            "10", "--name", "too-big", "--wait", "60", "--", sys.executable, "-c", "pass",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
        out, _ = await asyncio.wait_for(too_big.communicate(), 90)
        text = " ".join(out.decode().split())
        assert too_big.returncode == 1, text
        assert "100 GiB requested, but the largest card has 80 GiB" in text, text
    finally:
        up.send_signal(2)
        try:
            await asyncio.wait_for(asyncio.to_thread(up.wait), 60)
        finally:
            log.close()
