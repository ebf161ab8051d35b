"""The cache hydrator against real servers: nats-server, redis-server, Alluxio 2.9, versitygw
(S3)."""

from __future__ import annotations

import pytest
from cache_support import MIB, assert_consistent, stored_chunks, upload, write_dataset
from hydrator_support import PHASE, ErrorEvents, add, remove, running, settings, settled, spec, status
from prometheus_client import generate_latest

from alnair.v1 import cache_pb2
from alnair_common import subjects
from alnair_common.testing import wait_for
from alnair_dataset import DatasetReader, open_tier


@pytest.fixture(params=["redis", "alluxio"])
def tier_url(request):
    """A redis-server or Alluxio: the hydrator treats both alike."""
    if request.param == "alluxio":
        return request.getfixturevalue("alluxio")
    return request.getfixturevalue("redis_node")().url


@pytest.fixture(params=["single", "cluster", "alluxio"])
def any_tier_url(request):
    """One redis-server, a Redis Cluster of three (the hydrator is given its seed URL), or
    Alluxio's proxy."""
    if request.param == "alluxio":
        return request.getfixturevalue("alluxio")
    if request.param == "cluster":
        return request.getfixturevalue("redis_cluster")(masters=3).url
    return request.getfixturevalue("redis_node")().url


def tier_of(url: str):
    return open_tier(url, budget_bytes=1 << 40, prefix="t")


async def test_two_users_adding_the_same_s3_data_set_store_it_once(
        bus, nats_server, any_tier_url, s3_server, tmp_path, monkeypatch, promtool):
    tier_url = any_tier_url
    files = write_dataset(tmp_path / "gen", files=5)
    bucket = s3_server.make_bucket()
    upload(s3_server.client(), bucket, "imagenet", files)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", s3_server.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3_server.secret_key)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    s = settings(nats_server.url, tier_url, tmp_path, cache_s3_endpoint_url=s3_server.endpoint,
                 cache_allowed_sources=f"s3://{bucket}")
    logical = sum(len(d) for d in files.values())
    async with running(s):
        a = await settled(bus, "alice-imagenet", await add(bus, spec(
            "alice-imagenet", f"s3://{bucket}/imagenet", owner="alice")))
        b = await settled(bus, "bob-imagenet", await add(bus, spec(
            "bob-imagenet", f"s3://{bucket}/imagenet/", owner="bob")))
        for st in (a, b):
            assert st.phase == PHASE.CACHE_PHASE_READY, st.message
            assert (st.files_total, st.files_cached) == (5, 5)
            assert st.total_bytes == st.cached_bytes == logical and st.progress == 1.0
        assert b.unique_bytes == logical and b.dedup_saved_bytes == pytest.approx(logical / 2, abs=2)
        tier = tier_of(tier_url)
        assert tier.usage().stored_bytes == logical
        assert all(refs == {"alice-imagenet", "bob-imagenet"} for refs in stored_chunks(tier).values())

        exposition = "\n".join(line for line in generate_latest().decode().splitlines()
                               if "alnair_cache_" in line) + "\n"
        assert 'alnair_cache_hydrator_hydrations_total{phase="ready",reason="none"}' in exposition
        gauge = next(line for line in exposition.splitlines()
                     if line.startswith("alnair_cache_tier_stored_bytes "))
        assert float(gauge.split()[1]) == logical
        assert promtool(exposition) == []
        # a training job needs only the name and the tier: the tier says where the data are
        with DatasetReader("bob-imagenet", tier_url=tier_url, prefix="t") as reader:
            assert {p: reader.read(p) for p in reader.files()} == files
            assert reader.stats.misses == 0
        await remove(bus, "alice-imagenet")
        await _gone(bus, "alice-imagenet")

        assert tier.usage().stored_bytes == logical  # bob still reads it
        await remove(bus, "bob-imagenet")
        await _gone(bus, "bob-imagenet")
        assert tier.usage().stored_bytes == 0 and stored_chunks(tier) == {}


async def _gone(bus, name):
    from alnair_common.testing import wait_for

    async def probe():
        return await status(bus, name) is None

    await wait_for(probe, timeout=10, what=f"{name} removed")


async def test_bad_input_gets_a_clear_reason_and_the_service_keeps_running(
        bus, nats_server, tier_url, s3_server, tmp_path, monkeypatch):
    allowed = tmp_path / "data"
    write_dataset(allowed / "good", files=2)
    write_dataset(tmp_path / "private", files=1)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", s3_server.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3_server.secret_key)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    s = settings(nats_server.url, tier_url, tmp_path, cache_allowed_roots=str(allowed),
                 cache_allowed_sources="s3://", cache_s3_endpoint_url=s3_server.endpoint,
                 cache_budget_bytes=3 * MIB)
    errors = await ErrorEvents.follow(bus)
    async with running(s):
        cases = {
            "no-bucket": ("s3://no-such-bucket/x", "no-such-bucket", "does not exist"),
            "outside": (f"file://{tmp_path}/private", "path-not-allowed", "outside what the cache may read"),
            "escape": (f"file://{allowed}/../private", "path-not-allowed", "(resolved: "),
            "missing-dir": (f"file://{allowed}/none", "source-unreachable", "not a directory"),
            "too-big": (f"file://{allowed}/good", "insufficient-capacity", "needs 4.0 MiB"),
        }
        for name, (source, reason, text) in cases.items():
            st = await settled(bus, name, await add(bus, spec(name, source)))
            assert (st.phase, st.reason) == (PHASE.CACHE_PHASE_FAILED, reason), st.message
            assert text in st.message
        assert tier_of(tier_url).usage().stored_bytes == 0  # nothing half-written kept

        await add(bus, spec("bad name!", f"file://{allowed}/good"))
        await errors.matching("'bad name!' is not valid")
        await add(bus, spec("web", "http://example.com/data"))
        await errors.matching("must be s3://bucket/prefix or file:///absolute/path")
        await remove(bus, "never-added")
        await errors.matching("no data set 'never-added' to remove")

        small = write_dataset(allowed / "small", files=1, size=100_000)
        ok = await settled(bus, "small", await add(bus, spec("small", f"file://{allowed}/small")))
        assert ok.phase == PHASE.CACHE_PHASE_READY and ok.cached_bytes == len(next(iter(small.values())))
        answers: list[cache_pb2.CacheDatasetStatus] = []

        async def on_status(_subject: str, m: cache_pb2.CacheDatasetStatus) -> None:
            answers.append(m)
        await bus.subscribe(subjects.cache_status("small"), cache_pb2.CacheDatasetStatus, on_status)
        clash = await add(bus, spec("small", f"file://{allowed}/good", owner="mallory"))
        await errors.matching("data set 'small' already exists with other data")
        # the refusal is answered on the status subject, with the request id and the asked-for
        # source, so the asker can show it; the bucket keeps the data set that is there
        [refusal] = await wait_for(lambda: _true([a for a in answers if a.request_id == clash]),
                                   what="the refusal answered on the status subject")
        assert (refusal.phase, refusal.reason) == (PHASE.CACHE_PHASE_FAILED, "invalid-spec")
        assert refusal.source == f"file://{allowed}/good" and "already exists" in refusal.message
        again = await status(bus, "small")
        assert again.phase == PHASE.CACHE_PHASE_READY and again.source == f"file://{allowed}/small"
        fixed = await settled(bus, "outside", await add(bus, spec("outside", f"file://{allowed}/small")))
        assert fixed.phase == PHASE.CACHE_PHASE_READY  # a failed data set can be given a new source
        assert_consistent(tier_of(tier_url))


async def test_eviction_spares_pinned_and_in_use_data_sets(bus, nats_server, tier_url, tmp_path):
    root = tmp_path / "data"
    for i, name in enumerate("abcde"):
        write_dataset(root / name, files=2, seed=10 + i)  # 2 x ~2 MiB, distinct bytes
    size = sum(f.stat().st_size for f in (root / "a").rglob("*.bin"))
    s = settings(nats_server.url, tier_url, tmp_path, cache_allowed_roots=str(root),
                 cache_budget_bytes=3 * size + MIB)
    readers = []
    async with running(s):
        async def ready(name, **extra):
            st = await settled(bus, name, await add(bus, spec(name, f"file://{root}/{name}", **extra)))
            assert st.phase == PHASE.CACHE_PHASE_READY, st.message
            return st

        await ready("a")
        await ready("b", pin=True)
        await ready("c")
        readers.append(DatasetReader("c", tier_url=tier_url, prefix="t"))  # a job reads c
        await ready("d")  # no room: a (not pinned, not read) goes
        evicted = await status(bus, "a")
        assert (evicted.phase, evicted.reason) == (PHASE.CACHE_PHASE_EVICTED, "evicted")
        assert "make room for d" in evicted.message
        for name in "bcd":
            assert (await status(bus, name)).phase == PHASE.CACHE_PHASE_READY
        readers.append(DatasetReader("d", tier_url=tier_url, prefix="t"))

        full = await settled(bus, "e", await add(bus, spec("e", f"file://{root}/e")))
        assert (full.phase, full.reason) == (PHASE.CACHE_PHASE_FAILED, "insufficient-capacity")
        assert "b (pinned)" in full.message and "c (being read)" in full.message
        with readers[0] as reader:  # c is still whole: every byte from the tier
            for path in reader.files():
                assert reader.read(path) == (root / "c" / path).read_bytes()
            assert reader.stats.misses == 0
        readers[1].close()
        again = await settled(bus, "a", await add(bus, spec("a", f"file://{root}/a")))
        assert again.phase == PHASE.CACHE_PHASE_READY
        # c and d are no longer read; c was read longer ago, so it made room
        assert (await status(bus, "c")).phase == PHASE.CACHE_PHASE_EVICTED
        assert (await status(bus, "d")).phase == PHASE.CACHE_PHASE_READY
        assert_consistent(tier_of(tier_url))


async def test_a_source_changing_while_hydrating_fails_without_listing_the_changed_file(
        bus, nats_server, tier_url, tmp_path):
    root = tmp_path / "data"
    files = write_dataset(root / "live", files=8, size=200_000)
    s = settings(nats_server.url, tier_url, tmp_path, cache_allowed_roots=str(root),
                 cache_hydrate_bytes_per_second=800_000)  # ~2 s for the whole set
    async with running(s):
        request_id = await add(bus, spec("live", f"file://{root}/live"))

        async def under_way():
            st = await status(bus, "live")
            return st if st is not None and st.files_cached >= 1 else None

        await wait_for(under_way, timeout=10, what="hydration under way")
        last = sorted(files)[-1]
        (root / "live" / last).write_bytes(b"a newer version")  # listed, not yet read
        failed = await settled(bus, "live", request_id)
        assert (failed.phase, failed.reason) == (PHASE.CACHE_PHASE_FAILED, "source-changed")
        assert last in failed.message and "changed since it was listed" in failed.message
        manifest = tier_of(tier_url).manifest("live")
        assert last not in manifest and 1 <= len(manifest) < len(files)
        with DatasetReader("live", tier_url=tier_url, prefix="t") as reader:  # still correct
            assert reader.read(last) == b"a newer version"
            assert reader.read(sorted(files)[0]) == files[sorted(files)[0]]
        again = await settled(bus, "live", await add(bus, spec("live", f"file://{root}/live")))
        assert again.phase == PHASE.CACHE_PHASE_READY  # adding it again hydrates the new version


async def test_a_data_set_lost_with_its_redis_is_hydrated_again_when_added(
        bus, nats_server, redis_node, dataplane_bin, tmp_path):
    from alnair_common.testing.redis_cluster import start_redis_node

    files = write_dataset(tmp_path / "data" / "set", files=3)
    node = redis_node()
    s = settings(nats_server.url, node.url, tmp_path, cache_allowed_roots=str(tmp_path / "data"))
    async with running(s):
        first = await settled(bus, "set", await add(bus, spec("set", f"file://{tmp_path}/data/set")))
        assert first.phase == PHASE.CACHE_PHASE_READY
        node.kill()  # the cache is gone; the bucket still says READY
        fresh = start_redis_node(dataplane_bin, tmp_path / "redis-again", port=node.port)
        try:
            again = await settled(bus, "set", await add(bus, spec("set", f"file://{tmp_path}/data/set")))
            assert again.phase == PHASE.CACHE_PHASE_READY and again.files_cached == 3
            with DatasetReader("set", tier_url=fresh.url, prefix="t") as reader:
                assert {p: reader.read(p) for p in reader.files()} == files
                assert reader.stats.misses == 0
        finally:
            fresh.process.stop()


async def _true(value):
    return value or None
