"""The data client against real redis-server, Redis Cluster, Alluxio 2.9 and versitygw: every
byte read equals the source's, whether the data set is cached, half-cached, not cached, or
its tier dies while it is read."""

from __future__ import annotations

import gc
import pickle
import random
import threading
import time

import fsspec
import pytest
from cache_support import MIB, hydrate_directly, upload, write_dataset

from alnair_dataset import CachedSamples, DatasetReader, loader_options, open_tier
from alnair_dataset._redis_tier import RedisTier


def tier_of(url: str):
    return open_tier(url, budget_bytes=1 << 40, prefix="t")


@pytest.fixture(params=["redis", "directory", "alluxio"])
def any_url(request, tmp_path):
    """A redis-server, the local-mode directory tier or Alluxio: readers treat all alike."""
    if request.param == "directory":
        return f"dir://{tmp_path}/tier"
    if request.param == "alluxio":
        return request.getfixturevalue("alluxio")
    return request.getfixturevalue("redis_node")().url


@pytest.fixture(params=["redis", "alluxio"])
def server_url(request):
    """A tier on a server, Redis or Alluxio (what a pod reads through in a cluster)."""
    if request.param == "alluxio":
        return request.getfixturevalue("alluxio")
    return request.getfixturevalue("redis_node")().url


@pytest.fixture
def data(tmp_path):
    files = write_dataset(tmp_path / "src", files=6, size=MIB + 333)
    files.update(write_dataset(tmp_path / "src", files=20, size=5000, sub="small", seed=2))
    (tmp_path / "src" / "empty.bin").write_bytes(b"")
    files["empty.bin"] = b""
    return tmp_path / "src", files


@pytest.mark.parametrize("state", ["cached", "half", "not-cached", "unknown-to-tier"])
def test_every_byte_read_equals_the_source_in_every_state(any_url, data, state):
    root, files = data
    url = any_url
    tier = tier_of(url)
    uri = f"file://{root}"
    if state != "unknown-to-tier":
        only = {"cached": None, "half": 10, "not-cached": 0}[state]
        hydrate_directly(tier, "ds", uri, only=only,
                         phase="ready" if state == "cached" else "hydrating")
    with DatasetReader("ds", tier_url=url, prefix="t", source=uri) as reader:
        assert reader.files() == sorted(files)
        for path, got in reader.iter_files(reader.files(), ahead=4):
            assert got == files[path], path
        first_pass_hits = reader.stats.hits
        rng = random.Random(3)
        for path in rng.sample(sorted(files), 8):  # ranges across chunk boundaries
            size = len(files[path])
            a = rng.randrange(0, size + 1)
            b = rng.randrange(a, size + 1)
            assert reader.read(path, a, b) == files[path][a:b]
        order = rng.sample(sorted(files), len(files))  # a shuffled DataLoader batch
        misses = reader.stats.misses
        assert reader.read_many(order) == [files[p] for p in order]
        stats = reader.stats
        if state == "cached":
            assert stats.misses == misses
        if state == "cached":
            assert stats.misses == 0 and stats.hits > 0
        if state in ("not-cached", "unknown-to-tier"):
            assert first_pass_hits == 0


def test_a_miss_is_written_back_and_the_next_epoch_hits(any_url, data):
    root, files = data
    url = any_url
    tier = tier_of(url)
    hydrate_directly(tier, "ds", f"file://{root}", only=5, phase="hydrating")
    with DatasetReader("ds", tier_url=url, prefix="t") as first:
        for path, got in first.iter_files(first.files()):
            assert got == files[path]
        first.flush(timeout=30)
    assert first.stats.written_back > 0
    assert set(tier.manifest("ds")) == set(files)
    with DatasetReader("ds", tier_url=url, prefix="t") as second:
        for path, got in second.iter_files(second.files()):
            assert got == files[path]
        assert second.stats.misses == 0


def test_a_chunk_file_cut_short_in_the_directory_tier_is_read_from_the_source(tmp_path, data):
    """A chunk found shorter than its place in the file says (disk trouble, another writer)
    is a miss, read from the source, not short data handed to the training loop."""
    root, files = data
    url = f"dir://{tmp_path}/tier"
    tier = tier_of(url)
    hydrate_directly(tier, "ds", f"file://{root}")
    big = sorted(p for p in files if len(files[p]) > MIB)[0]
    first_chunk = tier.file_entry("ds", big).chunks[0]
    chunk_file = next((tmp_path / "tier" / "t" / "chunks").glob(f"*/{first_chunk}"))
    with DatasetReader("ds", tier_url=url, prefix="t", source=f"file://{root}",
                       write_back=False) as reader:
        assert reader.read(big) == files[big] and reader.stats.hits == 1
        with chunk_file.open("r+b") as f:
            f.truncate(MIB // 2)
        assert reader.read(big) == files[big], "short data returned"
        assert reader.read(big, MIB - 10, MIB + 10) == files[big][MIB - 10:MIB + 10]
        assert (reader.stats.hits, reader.stats.misses) == (1, 2)


def test_a_batch_reads_hits_together_and_the_rest_from_the_source(redis_node, data, monkeypatch):
    """read_many (what a DataLoader batch calls): every file equal to the source when a
    chunk of one was lost, when the batch takes several tier requests (each at most
    the tier's request_bytes of chunks: one 16 MB pipeline read slower than 32 of 512 KB), and once the
    server is gone."""
    root, files = data
    node = redis_node()
    tier = tier_of(node.url)
    hydrate_directly(tier, "ds", f"file://{root}")
    monkeypatch.setattr(RedisTier, "request_bytes", 3 * MIB)  # 1 MiB chunks: 3 a request
    requests: list[int] = []  # bytes each tier request returned
    get_chunks = RedisTier.get_chunks

    def counted(self: RedisTier, chunks: list[str]) -> list[bytes | None]:
        got = get_chunks(self, chunks)
        requests.append(sum(len(c) for c in got if c is not None))
        return got

    monkeypatch.setattr(RedisTier, "get_chunks", counted)
    paths = sorted(files)
    lost = max(paths, key=lambda p: len(files[p]))
    tier.client.delete(tier._chunk_keys(tier.file_entry("ds", lost).chunks[1])[0])
    order = random.Random(5).sample(paths, len(paths))
    with DatasetReader("ds", tier_url=node.url, prefix="t", write_back=False,
                       breaker_seconds=60) as reader:
        assert reader.read_many(order) == [files[p] for p in order]
        assert len(requests) >= 3 and max(requests) <= 3 * MIB, requests  # 6 MiB + 100 KB
        non_empty = sum(1 for p in paths if files[p])
        assert (reader.stats.hits, reader.stats.misses) == (non_empty - 1, 1)
        node.kill()
        assert reader.read_many(order) == [files[p] for p in order]
        assert reader.stats.misses == 1 + non_empty and reader.stats.tier_errors >= 1


def test_a_batch_reads_its_large_files_at_once_and_its_small_ones_together(redis_node, data, monkeypatch):
    """read_many with files over the tier's request_bytes (512 KB on Redis): the large files
    go to up to tier_streams streams on the reader's threads, several requests in flight at
    once (all in one stream, a batch of eight 16 MiB shards read at 115 MB/s where eight
    read() calls on threads got 732), while the small files share one request; one stream,
    one request at a time; every byte as the source's."""
    root, files = data
    node = redis_node()
    hydrate_directly(tier_of(node.url), "ds", f"file://{root}")
    get_chunks = RedisTier.get_chunks
    lock = threading.Lock()
    in_flight, most, requests = [0], [0], []  # requests: (chunks asked for, bytes returned)

    def slowed(self: RedisTier, chunks: list[str]) -> list[bytes | None]:
        with lock:
            in_flight[0] += 1
            most[0] = max(most[0], in_flight[0])
        time.sleep(0.05)
        got = get_chunks(self, chunks)
        with lock:
            in_flight[0] -= 1
            requests.append((len(chunks), sum(len(c) for c in got if c is not None)))
        return got

    monkeypatch.setattr(RedisTier, "get_chunks", slowed)
    order = random.Random(11).sample(sorted(files), len(files))
    large = [p for p in files if len(files[p]) > RedisTier.request_bytes]
    with DatasetReader("ds", tier_url=node.url, prefix="t", write_back=False, threads=4) as reader:
        assert reader.read_many(order) == [files[p] for p in order]
        assert reader.stats.misses == 0
    assert len(large) == 6 and most[0] >= 2, f"large files' requests were never in flight together: {most}"
    assert most[0] <= 4, f"{most[0]} requests in flight, over the reader's 4 tier streams"
    most[0] = 0  # one stream (a DataLoader worker beside seven others): one request at a time
    with DatasetReader("ds", tier_url=node.url, prefix="t", write_back=False, tier_streams=1) as reader:
        assert reader.read_many(order) == [files[p] for p in order]
    assert most[0] == 1, f"{most[0]} requests in flight from a reader of one tier stream"
    small_bytes = sum(len(files[p]) for p in files if 0 < len(files[p]) <= RedisTier.request_bytes)
    assert small_bytes in [b for _, b in requests], f"the small files did not share one request: {requests}"
    assert all(b <= RedisTier.request_bytes or n == 1 for n, b in requests), requests


def test_a_batch_asks_for_the_entries_its_reader_lacks_in_one_request(redis_node, data):
    """A reader opened before the files were cached — a DataLoader worker in epoch 2 reading
    what the other workers wrote back in epoch 1 — asks the server for a batch's manifest
    entries with one HMGET, not one HGET a file (the server's own command counts), and keeps
    them: the same batch again asks for none."""
    root, files = data
    node = redis_node()
    tier = tier_of(node.url)
    hydrate_directly(tier, "ds", f"file://{root}", only=0, phase="hydrating")
    order = random.Random(7).sample(sorted(files), len(files))

    def manifest_calls() -> dict[str, int]:
        stats = tier.client.info("commandstats")
        return {c: stats.get(f"cmdstat_{c}", {}).get("calls", 0) for c in ("hget", "hmget")}

    with DatasetReader("ds", tier_url=node.url, prefix="t", write_back=False) as reader:
        hydrate_directly(tier, "ds", f"file://{root}")  # cached after the reader started
        tier.client.config_resetstat()
        assert reader.read_many(order) == [files[p] for p in order]
        assert manifest_calls() == {"hget": 0, "hmget": 1}
        assert (reader.stats.hits, reader.stats.misses) == (len(files) - 1, 0)  # - the empty file
        tier.client.config_resetstat()
        assert reader.read_many(order) == [files[p] for p in order]
        assert manifest_calls() == {"hget": 0, "hmget": 0}


def test_killing_the_redis_server_while_reading_falls_back_to_the_source(redis_node, data):
    root, files = data
    node = redis_node()
    hydrate_directly(tier_of(node.url), "ds", f"file://{root}")
    read = {}
    with DatasetReader("ds", tier_url=node.url, prefix="t", breaker_seconds=60) as reader:
        paths = reader.files()
        for i, (path, got) in enumerate(reader.iter_files(paths, ahead=2)):
            if i == 5:
                node.kill()
            read[path] = got
        assert reader.stats.hits >= 5 and reader.stats.misses > 0 and reader.stats.tier_errors >= 1
    assert read == files


def test_killing_the_alluxio_proxy_while_reading_falls_back_to_the_source(alluxio_server, alluxio,
                                                                        data):
    root, files = data
    hydrate_directly(tier_of(alluxio), "ds", f"file://{root}")
    proxy = alluxio_server.start_proxy("killed")  # a proxy of its own, on the same namespace
    try:
        url = proxy.url + alluxio.removeprefix(alluxio_server.url)
        read = {}
        with DatasetReader("ds", tier_url=url, prefix="t", breaker_seconds=60) as reader:
            for i, (path, got) in enumerate(reader.iter_files(reader.files(), ahead=2)):
                if i == 5:
                    proxy.kill()
                read[path] = got
            assert reader.stats.hits >= 5 and reader.stats.misses > 0 and reader.stats.tier_errors >= 1
        assert read == files
    finally:
        proxy.stop()


def test_losing_one_server_of_a_cluster_loses_only_its_chunks(redis_cluster, data):
    root, files = data
    plane = redis_cluster(masters=3)
    hydrate_directly(tier_of(plane.url), "ds", f"file://{root}")
    plane.nodes[2].kill()
    with DatasetReader("ds", tier_url=plane.url, prefix="t", breaker_seconds=0.0,
                       timeout=0.5, write_back=False) as reader:
        for path in reader.files():
            assert reader.read(path) == files[path]


def test_s3_misses_are_read_from_the_bucket(server_url, s3_server, tmp_path):
    files = write_dataset(tmp_path / "gen", files=3, size=MIB + 1)
    bucket = s3_server.make_bucket()
    upload(s3_server.client(), bucket, "p", files)
    url = server_url
    with DatasetReader("s3ds", tier_url=url, prefix="t", source=f"s3://{bucket}/p",
                       s3_options=s3_server.client_options()) as reader:
        assert {p: reader.read(p) for p in reader.files()} == files
        assert reader.stats.source_bytes == sum(map(len, files.values()))
    assert reader.source._client is None  # its sockets closed with the reader, not by the GC


def test_fsspec_and_map_style_samples_read_the_same_bytes(server_url, data):
    root, files = data
    url = server_url
    hydrate_directly(tier_of(url), "ds", f"file://{root}", only=12, phase="hydrating")
    fs = fsspec.filesystem("alnair", dataset="ds", tier_url=url, prefix="t")
    assert fs.ls("", detail=False) == ["empty.bin", "small", "train"]
    assert len(fs.ls("small")) == 20 and fs.isdir("train") and fs.size("train/part-001.bin") == MIB + 1333
    with fs.open("train/part-002.bin", block_size=1 << 16) as f:
        f.seek(MIB - 10)
        assert f.read(20) == files["train/part-002.bin"][MIB - 10:MIB + 10]
    assert fs.cat_file("small/part-003.bin", -100) == files["small/part-003.bin"][-100:]
    fs.close()

    samples = CachedSamples("ds", tier_url=url, prefix="t", transform=len)
    clone = pickle.loads(pickle.dumps(samples))  # as a DataLoader worker gets it
    assert [clone[i] for i in range(len(clone))] == [len(files[p]) for p in sorted(files)]
    samples.close()
    clone.close()
    assert loader_options(workers=2)["persistent_workers"] is True


def test_a_reader_dropped_without_close_ends_its_lease(redis_node, data):
    """A reader nobody closes must not renew its lease for ever (its data set could never be
    evicted, its thread would outlive every server it talked to): once collected, its
    thread ends and the lease runs out."""
    root, _ = data
    url = redis_node().url
    tier = tier_of(url)
    hydrate_directly(tier, "ds", f"file://{root}", only=4, phase="hydrating")
    reader = DatasetReader("ds", tier_url=url, prefix="t", lease_seconds=1.0)
    thread = reader._leasing
    assert thread is not None and thread.is_alive() and tier.readers("ds") == 1
    time.sleep(1.5)  # renewed meanwhile: still in use
    assert tier.readers("ds") == 1
    del reader
    gc.collect()
    thread.join(timeout=5)
    assert not thread.is_alive()
    deadline = time.monotonic() + 10
    while tier.readers("ds") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert tier.readers("ds") == 0


def test_a_tier_address_answered_by_another_server_reads_from_the_source(nats_server, redis_node, data):
    """The tier's address reached a server that is not Redis (here a nats-server, as when a
    stopped Redis's port is taken by another): every read comes from the source, the lease
    renewals fail quietly, and nothing escapes on the reader's threads."""
    root, files = data
    url = redis_node().url
    hydrate_directly(tier_of(url), "ds", f"file://{root}", only=None, phase="ready")
    wrong = f"redis://127.0.0.1:{nats_server.port}/0"
    errors: list[BaseException] = []
    hook = threading.excepthook
    threading.excepthook = lambda args: errors.append(args.exc_value)
    try:
        with DatasetReader("ds", tier_url=wrong, prefix="t", source=f"file://{root}",
                           lease_seconds=0.3, breaker_seconds=0.0) as reader:
            for path in reader.files():
                assert reader.read(path) == files[path], path
            assert reader.stats.hits == 0 and reader.stats.tier_errors >= 1
            time.sleep(0.5)  # a renewal or two against the wrong server
    finally:
        threading.excepthook = hook
    assert errors == []
