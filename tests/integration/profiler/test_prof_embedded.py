"""Local mode without a MongoDB URL: the embedded store, same code path; `alnair profile NAME`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from prof_support import P, batch, event, events_settled, publish_batches, running, settings

from alnair_common import Bus, subjects
from alnair_common.natsd import NatsServer
from alnair_common.testing import wait_for
from alnair_profiler import open_store


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "alnair_cli", *args], capture_output=True, text=True,
                          timeout=60, env={"PATH": "/usr/bin:/bin", "COLUMNS": "160"})


async def test_local_mode_profiles_into_the_embedded_store_and_the_cli_shows_them(
    nats_server: NatsServer, bus: Bus, tmp_path: Path,
) -> None:
    data = tmp_path / "alnair-home"
    s = settings(nats_server.url, data)
    assert s.mongo_url is None
    owner = ("PodGroup", "gang", "pg-1")
    async with running(s) as service:
        assert "embedded store" in service.store.description
        for uid in ("loc-1", "loc-2"):
            await bus.publish(subjects.workload_events(),
                              event(uid, f"notebook-{uid}", P.WORKLOAD_PHASE_RUNNING, 1, kube=False,
                                    namespace="local", owner=owner))
        await events_settled(bus)
        await publish_batches(bus, [batch(i, {"loc-1": {"util": 0.25, "gpu_mem": 3 * 2**30, "cpu": 1.5},
                                              "loc-2": {"util": 0.75, "gpu_mem": 1 * 2**30, "cpu": 0.5}})
                                    for i in range(8)])
        for uid in ("loc-1", "loc-2"):
            await bus.publish(subjects.workload_events(),
                              event(uid, f"notebook-{uid}", P.WORKLOAD_PHASE_SUCCEEDED, 2, kube=False,
                                    namespace="local", owner=owner, end=8.0))

        async def both_written() -> bool:
            owners = await service.store.run(service.store.owners_named, "gang")
            return bool(owners) and owners[0]["workload_count"] == 2

        await wait_for(both_written, what="two local profiles and their owner in the embedded store")

    store = open_store(mongo_url=None, database="alnair", collection="workload_profiles",
                       embedded_dir=data / "profiler" / "store")
    try:
        [doc] = store.profiles_named("notebook-loc-1")
        [owner_doc] = store.owners_named("gang")
    finally:
        store.close()
    assert doc["mode"] == "LOCAL" and doc["series"]["gpu_memory_bytes"]["max"] == 3 * 2**30
    assert doc["series"]["gpu_utilization_ratio"]["deciles"] == pytest.approx([0.25] * 10)
    assert owner_doc["maxima"]["gpu_utilization_ratio"] == pytest.approx(0.75)

    shown = _cli("profile", "notebook-loc-1", "--data-dir", str(data))
    assert shown.returncode == 0, shown.stderr
    assert "local/notebook-loc-1" in shown.stdout and "gpu_memory_bytes" in shown.stdout
    assert "3 GiB" in shown.stdout and "PodGroup/gang" in shown.stdout

    as_json = _cli("profile", "gang", "--data-dir", str(data), "--json")
    assert as_json.returncode == 0, as_json.stderr
    parsed = json.loads(as_json.stdout)
    assert parsed["workloads"] == [] and parsed["owners"][0]["workload_count"] == 2

    missing = _cli("profile", "nope", "--data-dir", str(data))
    assert missing.returncode == 1 and "no profile named 'nope'" in missing.stderr

    nowhere = _cli("profile", "x", "--data-dir", str(tmp_path / "empty"))
    assert nowhere.returncode == 1 and "no profiles yet" in nowhere.stderr
