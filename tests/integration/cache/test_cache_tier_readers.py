"""A namespace's read-only tier user (what a pod on Kubernetes reads the cache with), against
a real redis-server and a 3-server Redis Cluster: it reads its own namespace's data sets
through the data client, and nothing it is not given."""

from __future__ import annotations

import pytest
import redis as redis_py
from cache_support import MIB, hydrate_directly, write_dataset

from alnair_common.tier_readers import USER_PREFIX, reader_password, reader_url, reader_user
from alnair_dataset import DatasetReader, FileEntry, TierPermissionError, TierUnavailableError, open_tier

KEY = "a-reader-key-of-32-characters..."


@pytest.fixture
def data(tmp_path):
    files = write_dataset(tmp_path / "src", files=4, size=MIB + 333)
    files.update(write_dataset(tmp_path / "src", files=12, size=5000, sub="small", seed=2))
    return tmp_path / "src", files


@pytest.fixture
def admin(redis_url):
    tier = open_tier(redis_url, budget_bytes=1 << 40, prefix="t")
    yield tier
    tier.close()


@pytest.fixture
def grant(admin, redis_url):
    """Make a namespace's reader as the hydrator does; the URL its pods are handed."""
    def make(namespace: str) -> str:
        admin.grant_reader(namespace, reader_user(namespace), reader_password(KEY, namespace))
        return reader_url(redis_url, KEY, namespace)
    return make


def test_a_namespace_reader_reads_its_data_set_from_the_cache(admin, grant, data, monkeypatch):
    root, files = data
    hydrate_directly(admin, "team-a.images", f"file://{root}")
    url = grant("team-a")
    monkeypatch.setenv("ALNAIR_DATASET_NAMESPACE", "team-a")
    with DatasetReader("images", tier_url=url, prefix="t") as reader:
        assert reader.key == "team-a.images"
        for path, got in reader.iter_files(reader.files()):
            assert got == files[path], path
        reader._renew()  # as its lease thread does: refused, and not a tier error
        assert admin.readers("team-a.images") == 0  # a pod's user writes no lease
        assert reader.stats.misses == 0 and reader.stats.tier_errors == 0
        assert reader.stats.hits == len(files)
    assert "last_read" not in admin.meta("team-a.images")


def test_a_reader_granted_by_an_older_platform_without_hmget_still_reads_from_the_cache(
        admin, grant, data, monkeypatch):
    """Users granted before readers asked for a batch's manifest entries with HMGET lack it
    until they are granted again: the client asks one HGET each instead of reading the
    source (the refusal is no tier error)."""
    root, files = data
    hydrate_directly(admin, "team-a.images", f"file://{root}", only=0, phase="hydrating")
    url = grant("team-a")
    admin._on_every_server("ACL", "SETUSER", reader_user("team-a"), "-hmget")  # on each server
    monkeypatch.setenv("ALNAIR_DATASET_NAMESPACE", "team-a")
    with DatasetReader("images", tier_url=url, prefix="t") as reader:
        hydrate_directly(admin, "team-a.images", f"file://{root}")  # cached after it started
        order = sorted(files)
        assert reader.read_many(order) == [files[p] for p in order]
        assert reader.read_many(order) == [files[p] for p in order]
        stats = reader.stats
    assert (stats.hits, stats.misses, stats.tier_errors) == (2 * len(files), 0, 0)


def test_a_half_cached_data_set_reads_whole_and_the_reader_stops_writing_back(admin, grant, data,
                                                                             monkeypatch):
    root, files = data
    hydrate_directly(admin, "team-a.images", f"file://{root}", only=6, phase="hydrating")
    before = set(admin.manifest("team-a.images"))
    url = grant("team-a")
    monkeypatch.setenv("ALNAIR_DATASET_NAMESPACE", "team-a")
    with DatasetReader("images", tier_url=url, prefix="t") as reader:
        for path, got in reader.iter_files(reader.files()):
            assert got == files[path], path
        reader.flush(timeout=30)
        for path in sorted(files):  # a second pass: the cached files still come from the tier
            assert reader.read(path) == files[path]
        stats = reader.stats
    assert stats.written_back == 0 and stats.tier_errors == 0
    assert stats.hits == 2 * len(before)
    assert set(admin.manifest("team-a.images")) == before  # nothing written by the pod


def test_a_namespace_reader_is_refused_everything_else(admin, grant, data):
    root, _ = data
    hydrate_directly(admin, "team-a.images", f"file://{root}")
    hydrate_directly(admin, "team-b.images", f"file://{root}")
    hydrate_directly(admin, "team.images", f"file://{root}")
    entry = next(iter(admin.manifest("team-a.images").values()))
    grant("team-a")
    mine = open_tier(grant("team"), budget_bytes=1 << 40, prefix="t")
    assert set(mine.manifest("team.images")) == set(admin.manifest("team.images"))
    refused = {
        "another namespace's manifest": lambda: mine.manifest("team-a.images"),
        "another namespace's description": lambda: mine.meta("team-b.images"),
        "another namespace's lease": lambda: mine.lease("team-a.images", "x", 30),
        "its own lease": lambda: mine.lease("team.images", "x", 30),
        "writing a chunk": lambda: mine.put_chunk("team.images", "ab" * 32, b"forged"),
        "its own manifest": lambda: mine.record_file("team.images", FileEntry(
            "small/part-000.bin", 3, "v", ("ab" * 32,))),
        "its own description": lambda: mine.set_meta("team.images", {"phase": "ready"}),
        "dropping its data set": lambda: mine.drop_manifest("team.images"),
        "releasing chunks": lambda: mine.release("team.images"),
        "the usage": mine.usage,
        "granting itself": lambda: mine.grant_reader("team-a", "x", "y"),
    }
    for what, attempt in refused.items():
        with pytest.raises(TierPermissionError, match="not permitted"):
            attempt()
            pytest.fail(what)
    for command in (["FLUSHALL"], ["KEYS", "*"], ["CONFIG", "GET", "*"], ["ACL", "LIST"],
                    ["SCAN", "0"], ["DEL", "t:ds:{team.images}:files"],
                    ["SET", "t:ds:{team.images}:last_read", "1e12"],
                    ["ZADD", "t:ds:{team.images}:readers", "1e12", "forged"]):
        with pytest.raises(redis_py.exceptions.NoPermissionError):
            mine.client.execute_command(*command)
    assert mine.get_chunks(list(entry.chunks))[0] is not None  # chunks by id: yes
    assert set(admin.manifest("team.images")) == set(admin.manifest("team-a.images"))
    mine.close()


def test_users_are_listed_and_a_revoked_one_falls_back_to_the_source(admin, grant, data, monkeypatch):
    root, files = data
    hydrate_directly(admin, "team-a.images", f"file://{root}")
    url = grant("team-a")
    grant("team-b")
    assert admin.readers_granted(USER_PREFIX) == {"alnair-reader-team-a", "alnair-reader-team-b"}
    grant("team-a")  # again: still one user, its readers keep their connections
    monkeypatch.setenv("ALNAIR_DATASET_NAMESPACE", "team-a")
    with DatasetReader("images", tier_url=url, prefix="t", breaker_seconds=60) as reader:
        paths = reader.files()
        assert reader.read(paths[0]) == files[paths[0]]
        admin.revoke_reader("alnair-reader-team-a")
        for path in paths[1:]:
            assert reader.read(path) == files[path]
        assert reader.stats.tier_errors >= 1 and reader.stats.misses >= 1
    assert admin.readers_granted(USER_PREFIX) == {"alnair-reader-team-b"}
    with pytest.raises(TierUnavailableError):
        open_tier(url, budget_bytes=1, prefix="t").meta("team-a.images")


def test_a_forged_lease_or_last_read_cannot_pin_a_data_set(admin, data):
    """Leases are written with the hydrator's user only (local readers): one longer than any
    reader takes is dropped, a last read in the future reads as now."""
    root, _ = data
    hydrate_directly(admin, "team-a.images", f"file://{root}")
    admin.lease("team-a.images", "honest", 30)
    admin.client.zadd("t:ds:{team-a.images}:readers", {"forged": 1e12})
    admin.client.set("t:ds:{team-a.images}:last_read", "1e12")
    assert admin.readers("team-a.images") == 1
    assert float(admin.meta("team-a.images")["last_read"]) < 1e11
    admin.client.set("t:ds:{team-a.images}:last_read", "not a number")
    assert float(admin.meta("team-a.images")["last_read"]) == 0
