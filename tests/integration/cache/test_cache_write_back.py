"""The data client's write-backs against a real redis-server, the directory tier and (for
storing) Alluxio 2.9: they never hold up a read, never leave a wrong or half-written entry,
stay within the budget and see room made meanwhile, and stop for a data set removed while
they run."""

from __future__ import annotations

import contextlib
import fcntl
import random
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cache_support import assert_consistent, stored_chunks

from alnair_dataset import Budget, CapacityError, DatasetReader, RedisTier, _reader, open_source, open_tier, store_file

SIZE = 4096


@pytest.fixture(params=["redis", "directory"])
def url(request, tmp_path):
    if request.param == "directory":
        return f"dir://{tmp_path}/tier"
    return request.getfixturevalue("redis_node")().url


@pytest.fixture
def data(tmp_path) -> tuple[Path, dict[str, bytes]]:
    """20 files of 4 KiB (one chunk each) under tmp_path/src."""
    rng = random.Random(7)
    files = {f"f/{i:02d}.bin": rng.randbytes(SIZE) for i in range(20)}
    for rel, blob in files.items():
        (tmp_path / "src" / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "src" / rel).write_bytes(blob)
    return tmp_path / "src", files


def listed(url: str, root: Path, *, budget: int = 1 << 40):
    """The tier, knowing the data set "ds" as `alnair dataset add` leaves it: readers write back."""
    tier = open_tier(url, budget_bytes=budget, prefix="t")
    tier.set_meta("ds", {"source": f"file://{root}", "include": "[]", "exclude": "[]",
                         "phase": "hydrating", "budget_bytes": str(budget)})
    return tier


@contextlib.contextmanager
def writes_held(tier) -> Iterator[None]:
    """Every write to the tier waits until the block ends, reads go on: Redis pauses its
    clients' writes (CLIENT PAUSE WRITE); the directory tier's writers wait for the chunk-group
    locks, held here as another process would."""
    if isinstance(tier, RedisTier):
        tier.client.client_pause(60_000, all=False)
        try:
            yield
        finally:
            tier.client.client_unpause()
        return
    held = []
    try:
        for group in range(256):
            lock = open(tier.root / "locks" / f"{group:02x}", "a+")  # noqa: SIM115 - closed below
            held.append(lock)
            fcntl.flock(lock, fcntl.LOCK_EX)
        yield
    finally:
        for lock in held:
            fcntl.flock(lock, fcntl.LOCK_UN)
            lock.close()


def test_a_full_write_back_queue_drops_fills_and_never_holds_up_a_read(url, data, monkeypatch):
    root, files = data
    tier = listed(url, root)
    monkeypatch.setattr(_reader, "WRITE_BACK_QUEUE_BYTES", 2 * SIZE)
    # two read threads: had the write-backs shared them, prefetching would wait behind the stuck writes
    with DatasetReader("ds", tier_url=url, prefix="t", threads=2, timeout=60) as reader:
        with writes_held(tier):
            assert dict(reader.iter_files(reader.files(), ahead=4)) == files
            assert reader.stats.write_backs_dropped == len(files) - 2
        reader.flush(timeout=30)
        assert reader.stats.written_back == 2
    assert len(tier.manifest("ds")) == 2
    assert_consistent(tier)
    monkeypatch.undo()  # room for the whole data set in the queue again
    with DatasetReader("ds", tier_url=url, prefix="t") as second:  # writes back what was dropped
        assert dict(second.iter_files(second.files())) == files
        assert second.stats.hits == 2
        second.flush(timeout=30)
    with DatasetReader("ds", tier_url=url, prefix="t") as third:
        assert dict(third.iter_files(third.files())) == files
        assert third.stats.misses == 0
    assert_consistent(tier)


def test_a_batch_leaves_its_misses_in_the_tier_when_it_returns(url, data):
    """read_many (a DataLoader batch) writes each miss on the thread that read it, before it
    returns: with several threads reading misses the two writers fell behind, and the next
    epoch missed too. So the next batch hits every file, with no flush in between; files
    written already are not written again."""
    root, files = data
    tier = listed(url, root)
    paths = sorted(files)
    with DatasetReader("ds", tier_url=url, prefix="t", threads=4) as reader:
        assert reader.read_many(paths[:5]) == [files[p] for p in paths[:5]]
        assert reader.stats.written_back == 5  # no flush: already done
        assert reader.read_many(paths) == [files[p] for p in paths]
        assert (reader.stats.hits, reader.stats.misses, reader.stats.written_back) == (5, 20, 20)
        assert reader.read_many(paths) == [files[p] for p in paths]
        assert (reader.stats.hits, reader.stats.misses) == (25, 20)
        assert reader.stats.write_backs_dropped == 0
    assert set(tier.manifest("ds")) == set(paths)
    assert_consistent(tier)


def test_a_batch_whose_write_backs_fail_still_reads_every_file(url, data, monkeypatch):
    """A fill that fails (here: the directory tier's disk, or Redis, refusing the write) is no
    failed read: the batch returns every file from the source and writing pauses."""
    root, files = data
    tier = listed(url, root)
    paths = sorted(files)

    def broken(*_args, **_kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(_reader, "store_file", broken)
    with DatasetReader("ds", tier_url=url, prefix="t", threads=4) as reader:
        assert reader.read_many(paths) == [files[p] for p in paths]
        assert reader.stats.written_back == 0 and reader.stats.misses == len(paths)
    assert tier.manifest("ds") == {}


def test_a_removed_data_set_gets_no_entries_once_the_reader_noticed(url, data):
    root, files = data
    tier = listed(url, root)
    with DatasetReader("ds", tier_url=url, prefix="t") as reader:
        first, *rest = reader.files()
        assert reader.read(first) == files[first]
        reader.flush(timeout=30)
        assert set(tier.manifest("ds")) == {first}
        deadline = time.monotonic() + 30
        while True:  # removed as the hydrator removes it, until a write-back finds it gone
            tier.release("ds")
            tier.drop_manifest("ds")
            reader._renew()  # as its lease thread does meanwhile (a directory tier's rewrites meta.json)
            assert reader.read(first) == files[first]  # its chunk is gone: a miss, written back
            reader.flush(timeout=30)
            if not tier.manifest("ds"):
                break
            assert time.monotonic() < deadline, "the reader never noticed the removal"
        for path in rest:
            assert reader.read(path) == files[path]
        reader.flush(timeout=30)
        assert reader.stats.write_backs_dropped == 0
    assert tier.manifest("ds") == {}
    assert stored_chunks(tier) == {}
    assert tier.usage().stored_bytes == 0


def test_a_small_files_write_back_is_one_round_trip_and_no_description_read(redis_node, data, monkeypatch):
    root, files = data
    node = redis_node()
    listed(node.url, root)
    client = node.client()
    with DatasetReader("ds", tier_url=node.url, prefix="t") as reader:
        first, *rest = reader.files()
        reader.read(first)  # the first write-back also loads the tier's scripts into the server
        reader.flush(timeout=30)
        client.config_resetstat()
        sent: list[str] = []  # every command the reader's client sends, a pipeline as one
        tier_client = reader.tier.client
        command, pipeline = tier_client.execute_command, tier_client.pipeline
        monkeypatch.setattr(tier_client, "execute_command", lambda *a, **k: sent.append(a[0]) or command(*a, **k))
        monkeypatch.setattr(tier_client, "pipeline", lambda *a, **k: sent.append("pipeline") or pipeline(*a, **k))
        started = time.monotonic()
        for path in rest:
            assert reader.read(path) == files[path]
        reader.flush(timeout=30)
        seconds = time.monotonic() - started
        assert reader.stats.written_back == len(files)
        calls = {k.removeprefix("cmdstat_"): v["calls"] for k, v in client.info("commandstats").items()}
    # per file: the read's manifest entry (HMGET of one field), then one script storing the
    # chunk, journaling and referencing it and listing the file; no "is it stored already?"
    # script first
    assert sent.count("HMGET") == len(rest) and "HGET" not in sent
    assert sent.count("EVALSHA") == calls["evalsha"] == len(rest)
    assert {"SADD", "HSET", "SET"}.isdisjoint(sent)
    # the data set's description (a pipeline): once per RECHECK_SECONDS, not once per file
    assert sent.count("pipeline") <= 1 + seconds / _reader.RECHECK_SECONDS
    assert calls.get("hgetall", 0) <= 1 + seconds / _reader.RECHECK_SECONDS
    assert len(sent) <= 2 * len(rest) + 1 + seconds / _reader.RECHECK_SECONDS


@pytest.fixture(params=["redis", "directory", "alluxio"])
def any_url(request, tmp_path):
    if request.param == "directory":
        return f"dir://{tmp_path}/tier"
    if request.param == "alluxio":
        return request.getfixturevalue("alluxio")
    return request.getfixturevalue("redis_node")().url


def test_a_budget_that_ran_out_sees_the_room_made_meanwhile(any_url, data):
    root, _ = data
    tier = open_tier(any_url, budget_bytes=3 * SIZE, prefix="t")
    source = open_source(f"file://{root}")
    a, b, c, d = source.list()[:4]
    for file in (a, b):
        store_file(tier, "other", source, file, Budget(tier))
    budget = Budget(tier)  # as a reader keeps one for all its write-backs
    store_file(tier, "ds", source, c, budget)
    with pytest.raises(CapacityError):
        store_file(tier, "ds", source, d, budget)
    tier.release("other")
    tier.drop_manifest("other")
    store_file(tier, "ds", source, d, budget)  # not refused until 256 stores later
    assert set(tier.manifest("ds")) == {c.path, d.path}
    assert tier.usage().stored_bytes == 2 * SIZE
    assert_consistent(tier)


def test_a_small_chunk_already_stored_is_referenced_and_not_charged_twice(any_url, data):
    root, _ = data
    tier = open_tier(any_url, budget_bytes=2 * SIZE, prefix="t")
    source = open_source(f"file://{root}")
    a, b = source.list()[:2]
    store_file(tier, "one", source, a, Budget(tier))
    budget = Budget(tier)
    assert store_file(tier, "two", source, a, budget).new_bytes == 0  # same bytes: a reference
    assert store_file(tier, "two", source, b, budget).new_bytes == SIZE  # the room is still there
    full = Budget(tier)
    assert store_file(tier, "three", source, a, full).new_bytes == 0  # no room, yet stored already
    chunks = stored_chunks(tier)
    assert sorted(map(sorted, chunks.values())) == [["one", "three", "two"], ["two"]]
    assert tier.usage().stored_bytes == 2 * SIZE
    assert_consistent(tier)
