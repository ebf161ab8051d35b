"""The hydrator killed (SIGKILL) half-way through a data set, then started again, on Redis
and on Alluxio."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from cache_support import assert_consistent, stored_chunks, upload, write_dataset
from hydrator_support import PHASE, add, remove, settled, spec, status

from alnair.v1 import cache_pb2
from alnair_common import subjects
from alnair_common.testing import wait_for
from alnair_dataset import open_tier

FILES = 40
SIZE = 256 * 1024 + 17


def start_hydrator(env: dict[str, str], log_path) -> subprocess.Popen:
    with open(log_path, "ab") as log:  # the child keeps its own copy of the descriptor
        return subprocess.Popen([sys.executable, "-m", "alnair_cache_hydrator"], env=env,
                                stdout=log, stderr=subprocess.STDOUT)


@pytest.fixture(params=["redis", "alluxio"])
def tier_url(request):
    if request.param == "alluxio":
        return request.getfixturevalue("alluxio")
    return request.getfixturevalue("redis_node")().url


async def test_a_hydrator_killed_mid_way_resumes_without_losing_or_double_counting(
        bus, nats_server, tier_url, s3_server, tmp_path):
    files = write_dataset(tmp_path / "gen", files=FILES, size=SIZE)
    bucket = s3_server.make_bucket()
    upload(s3_server.client(), bucket, "shards", files)
    env = {**os.environ, "ALNAIR_NATS_URL": nats_server.url, "ALNAIR_CACHE_TIER_URL": tier_url,
           "ALNAIR_CACHE_PREFIX": "t", "ALNAIR_CACHE_S3_ENDPOINT_URL": s3_server.endpoint,
           "ALNAIR_CACHE_ALLOWED_SOURCES": f"s3://{bucket}",
           "ALNAIR_CACHE_STATUS_INTERVAL_SECONDS": "0.02", "ALNAIR_DATA_DIR": str(tmp_path),
           "ALNAIR_CACHE_CONCURRENT_HYDRATIONS": "1", "ALNAIR_LOG_FORMAT": "console",
           "ALNAIR_CACHE_HYDRATE_BYTES_PER_SECOND": str(8 * SIZE),  # ~5 s for the whole set
           "AWS_ACCESS_KEY_ID": s3_server.access_key,
           "AWS_SECRET_ACCESS_KEY": s3_server.secret_key, "AWS_DEFAULT_REGION": "us-east-1"}
    progress: list[cache_pb2.CacheDatasetStatus] = []

    async def on_status(_subject, message):
        progress.append(message)

    await bus.subscribe(subjects.cache_status("shards"), cache_pb2.CacheDatasetStatus, on_status)
    log = tmp_path / "hydrator.log"
    first = start_hydrator(env, log)
    try:
        request_id = await add(bus, spec("shards", f"s3://{bucket}/shards"))

        async def half_way():
            s = await status(bus, "shards")
            return s if s is not None and s.files_cached >= 6 else None

        seen = await wait_for(half_way, timeout=30, what="hydration under way")
        first.send_signal(signal.SIGKILL)
        first.wait(10)
    finally:
        first.kill()
    assert seen.phase == PHASE.CACHE_PHASE_HYDRATING
    tier = open_tier(tier_url, budget_bytes=1 << 40, prefix="t")
    done_at_kill = set(tier.manifest("shards"))
    assert 6 <= len(done_at_kill) < FILES
    assert_consistent(tier)

    # The first hydrator's last statuses may still be on their way: only the second's count.
    restarted_at = time.time()
    env["ALNAIR_CACHE_HYDRATE_BYTES_PER_SECOND"] = "0"
    second = start_hydrator(env, log)
    try:
        final = await settled(bus, "shards", request_id, timeout=30)
        assert final.phase == PHASE.CACHE_PHASE_READY, final.message
        resumed = next(p for p in progress if p.phase == PHASE.CACHE_PHASE_HYDRATING
                       and p.observed_at.ToMicroseconds() / 1e6 >= restarted_at)
        todo = int(resumed.message.split()[1])
        assert todo <= FILES - len(done_at_kill), resumed.message  # done files not re-read
        assert (final.files_cached, final.cached_bytes) == (FILES, sum(map(len, files.values())))

        chunks = stored_chunks(tier)
        assert all(refs == {"shards"} for refs in chunks.values())
        assert tier.usage().stored_bytes == sum(map(len, files.values()))
        assert_consistent(tier)
        manifest = tier.manifest("shards")
        for path, data in files.items():  # every byte the tier holds is the source's
            entry = manifest[path]
            assert b"".join(tier.get_chunks(list(entry.chunks))) == data

        await remove(bus, "shards")

        async def released():
            return await status(bus, "shards") is None and tier.usage().chunks == 0

        await wait_for(released, timeout=15, what="every chunk released")
    finally:
        second.terminate()
        second.wait(15)
