"""Every tier against its real server: redis-server, a 3-server Redis Cluster, the local
directory, and Alluxio 2.9 (master + worker + proxy); the same tests for each."""

from __future__ import annotations

import random
import threading

import pytest
from cache_support import MIB, assert_consistent, reopened, stored_chunks, write_dataset

from alnair_common.natsd import free_port
from alnair_common.testing import wait_until
from alnair_dataset import (
    Budget,
    CapacityError,
    FileEntry,
    InvalidSpecError,
    SourceChangedError,
    TierUnavailableError,
    chunk_id,
    open_source,
    open_tier,
    store_file,
)


@pytest.fixture(params=["single", "cluster", "directory", "alluxio"])
def tier(request, tmp_path):
    if request.param == "directory":
        url = f"dir://{tmp_path}/tier"
    elif request.param == "alluxio":
        url = request.getfixturevalue("alluxio")
    else:
        servers = request.getfixturevalue("redis_node" if request.param == "single" else "redis_cluster")
        url = servers().url if request.param == "single" else servers(masters=3).url
    t = open_tier(url, budget_bytes=256 * MIB, prefix="t")
    yield t
    t.close()


@pytest.fixture(params=["redis", "alluxio"])
def server_url(request):
    """One server of each kind a tier can live on (the tests of one tier's behaviour)."""
    if request.param == "alluxio":
        return request.getfixturevalue("alluxio")
    return request.getfixturevalue("redis_node")().url


def hydrate(tier, dataset, source):
    budget = Budget(tier)
    return [store_file(tier, dataset, source, f, budget) for f in source.list()]


def test_two_users_caching_the_same_data_store_it_once(tier, tmp_path):
    files = write_dataset(tmp_path / "src")
    alice = open_source(f"file://{tmp_path}/src")
    bob = open_source(f"file://{tmp_path}/src/")
    first = hydrate(tier, "alice/imagenet", alice)
    second = hydrate(tier, "bob/imagenet", bob)

    logical = sum(len(d) for d in files.values())
    assert sum(r.new_bytes for r in first) == logical
    assert sum(r.new_bytes for r in second) == 0
    assert tier.usage().stored_bytes == logical
    assert all(refs == {"alice/imagenet", "bob/imagenet"} for refs in stored_chunks(tier).values())
    fp = tier.footprint("bob/imagenet")
    assert (fp.files, fp.cached_bytes, fp.unique_bytes) == (len(files), logical, logical)
    assert fp.dedup_saved_bytes == pytest.approx(logical / 2, abs=2)
    assert_consistent(tier)

    assert tier.release("alice/imagenet") == 0  # bob still holds every chunk
    assert tier.usage().stored_bytes == logical
    assert tier.release("bob/imagenet") == logical
    assert tier.usage().stored_bytes == 0 and stored_chunks(tier) == {}


def test_a_file_repeated_after_a_crash_counts_each_reference_once(tier, tmp_path):
    write_dataset(tmp_path / "src", files=3)
    source = open_source(f"file://{tmp_path}/src")
    listing = source.list()

    class Crash(Exception):
        pass

    class CrashingSource:
        """The source of a hydrator that dies after reading a few chunks."""

        uri = source.uri
        reads = 0

        def read(self, file, start=0, end=None):
            CrashingSource.reads += 1
            if CrashingSource.reads == 5:
                raise Crash
            return source.read(file, start, end)

    with pytest.raises(Crash):
        for f in listing:
            store_file(tier, "ds", CrashingSource(), f, Budget(tier))
    assert set(tier.manifest("ds")) == {listing[0].path}  # the half-done file is not listed
    assert_consistent(tier)

    again = reopened(tier)  # as a restarted hydrator finds it
    for f in listing:
        store_file(again, "ds", source, f, Budget(again))
    for f in listing:  # and once more, as a redelivered request would
        store_file(again, "ds", source, f, Budget(again))
    assert set(again.manifest("ds")) == {f.path for f in listing}
    assert all(refs == {"ds"} for refs in stored_chunks(again).values())
    assert again.usage().stored_bytes == sum(f.size for f in listing)
    assert_consistent(again)
    assert again.release("ds") == sum(f.size for f in listing)
    assert again.usage().chunks == 0


def test_small_files_stored_whole_are_deduplicated_journaled_and_within_the_budget(tier, tmp_path):
    """A small file goes to the tier in one call (one script on one Redis server, the steps one
    by one on a cluster and the other tiers): the same accounting as chunk by chunk."""
    rng = random.Random(5)
    same, half = rng.randbytes(4096), rng.randbytes(1024)
    files = {"a.bin": same, "b.bin": same,  # the same bytes twice: stored once
             "c.bin": half * 2,  # two identical chunks of one file (chunk_bytes 1 KiB below)
             "d.bin": rng.randbytes(3000), "e.bin": b""}
    for name, blob in files.items():
        (tmp_path / "src" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "src" / name).write_bytes(blob)
    source = open_source(f"file://{tmp_path}/src")
    distinct = len(same) + len(half) + 3000
    tier.budget_bytes = distinct  # exactly: a duplicate not given back would refuse the last file
    budget = Budget(tier)
    listing = source.list()
    first = [store_file(tier, "one", source, f, budget, chunk_bytes=1024 if f.path == "c.bin" else 4096)
             for f in listing]
    assert sum(r.new_bytes for r in first) == tier.usage().stored_bytes == distinct
    assert not budget.try_reserve(1)  # nothing left, as the tier says
    again = [store_file(tier, "two", source, f, Budget(tier), chunk_bytes=r.entry.chunk_bytes)
             for f, r in zip(listing, first, strict=True)]  # no room, all stored already
    assert [r.new_bytes for r in again] == [0] * len(files)
    manifest = tier.manifest("two")
    assert manifest == tier.manifest("one") == {r.entry.path: r.entry for r in first}
    assert manifest["c.bin"].chunks == (chunk_id(half),) * 2 and manifest["e.bin"].chunks == ()
    for path, entry in manifest.items():
        assert b"".join(tier.get_chunks(list(entry.chunks))) == files[path]
    assert all(refs == {"one", "two"} for refs in stored_chunks(tier).values())
    assert_consistent(tier)
    (tmp_path / "src" / "d.bin").write_bytes(b"changed")
    with pytest.raises(SourceChangedError):
        store_file(tier, "three", source, listing[3], Budget(tier))  # d.bin, as listed before
    assert tier.manifest("three") == {}
    assert tier.release("one") == 0  # the journal found every reference "one" took
    assert tier.release("two") == distinct and stored_chunks(tier) == {}
    assert tier.usage().stored_bytes == 0


def test_a_lease_counts_its_reader_until_it_ends_or_expires(tier):
    tier.set_meta("ds", {"phase": "ready", "source": "file:///x"})
    tier.lease("ds", "r1", 60)
    tier.lease("ds", "r1", 60)  # a renewal: still one reader
    tier.lease("ds", "r2", 1.0)
    assert tier.readers("ds") == 2
    meta = tier.meta("ds")
    assert meta["phase"] == "ready" and float(meta["last_read"]) > 0  # renewals keep the phase
    wait_until(lambda: tier.readers("ds") == 1, timeout=15, what="r2's lease to run out")
    tier.unlease("ds", "r1")
    assert tier.readers("ds") == 0
    tier.drop_manifest("ds")
    assert tier.meta("ds") == {} and tier.manifest("ds") == {}


def test_a_data_set_over_the_budget_is_refused_with_numbers(server_url, tmp_path):
    tier = open_tier(server_url, budget_bytes=3 * MIB, prefix="t")
    write_dataset(tmp_path / "src", files=3)
    source = open_source(f"file://{tmp_path}/src")
    with pytest.raises(CapacityError, match=rf"needs .* MiB more, .* MiB free in tier {tier.name}"):
        hydrate(tier, "big", source)
    assert tier.usage().stored_bytes <= 3 * MIB
    assert_consistent(tier)


def test_a_file_changed_while_read_is_not_listed(server_url, tmp_path):
    tier = open_tier(server_url, budget_bytes=64 * MIB, prefix="t")
    write_dataset(tmp_path / "src", files=1)
    source = open_source(f"file://{tmp_path}/src")
    (listed,) = source.list()
    (tmp_path / "src" / listed.path).write_bytes(b"new content")
    with pytest.raises(SourceChangedError, match="changed"):
        store_file(tier, "ds", source, listed, Budget(tier))
    assert tier.manifest("ds") == {}


@pytest.mark.parametrize(("url", "says"), [
    ("alluxio://proxy:port", "the port is not a number"),
    ("alluxio:///root", "write alluxio://proxy-host:port"),
    ("alluxio://proxy:39999?write_type=SOMETIMES", "one of MUST_CACHE, CACHE_THROUGH"),
    ("alluxio://proxy:39999?cache=yes", "the only option is write_type"),
])
def test_a_bad_alluxio_url_is_refused_saying_how_to_write_it(url, says):
    with pytest.raises(InvalidSpecError, match=says):
        open_tier(url, budget_bytes=MIB)


def test_an_unreachable_alluxio_proxy_is_a_temporary_tier_error(tmp_path):
    from alnair_common.natsd import free_port

    tier = open_tier(f"alluxio://127.0.0.1:{free_port()}", budget_bytes=MIB, timeout=0.5)
    with pytest.raises(TierUnavailableError, match=r"Alluxio proxy at 127\.0\.0\.1:\d+: .* failed") as e:
        tier.usage()
    assert e.value.temporary


def test_a_proxy_without_the_rest_api_is_named_with_the_setting_to_change(alluxio_server, alluxio):
    """Alluxio 2.9's default proxy serves its v2 S3 servlet in place of the REST paths API."""
    proxy = alluxio_server.start_proxy("s3v2", {"alluxio.proxy.s3.v2.version.enabled": "true"})
    try:
        tier = open_tier(proxy.url + alluxio.removeprefix(alluxio_server.url), budget_bytes=MIB)
        with pytest.raises(TierUnavailableError,
                           match="set alluxio.proxy.s3.v2.version.enabled=false"):
            tier.usage()
    finally:
        proxy.stop()


def test_an_entry_left_open_by_a_dead_writer_reads_as_absent_and_is_replaced(alluxio):
    """Alluxio keeps a file whose writer never closed it "incomplete", and reading it fails:
    the tier reads it as a miss, and the next record replaces it."""
    tier = open_tier(alluxio, budget_bytes=MIB, prefix="t")
    entry = FileEntry("a/b.bin", 3, "v1", ("0" * 64,))
    tier.record_file("ds", entry)
    where = tier.rest.status(f"{tier.root}/datasets/ds/files")["path"] + "/a%2Fb.bin"
    tier.rest.delete(where)
    tier.rest.call(where, "create-file", {"recursive": True})  # opened, never closed
    assert tier.file_entry("ds", "a/b.bin") is None
    assert tier.manifest("ds") == {}
    tier.record_file("ds", entry)
    assert tier.file_entry("ds", "a/b.bin") == entry
    tier.close()


def test_an_entry_read_while_two_writers_rewrite_it_is_whole_or_absent(tier):
    """A reader's write-back and the hydrator may record the same file at once while a third
    process reads it: every read is one writer's whole entry or nothing, never an error."""
    versions = [FileEntry("a/b.bin", n, f"v{n}", (f"{n:064x}",)) for n in range(1, 9)]
    tier.record_file("ds", versions[0])
    failures: list[BaseException] = []
    reading = threading.Event()
    done = threading.Event()

    def write(mine: list[FileEntry]) -> None:
        # Writers keep rewriting until the reader has read enough, so reads overlap writes
        # however fast the server answers.
        try:
            reading.wait(10)
            while not done.is_set():
                for entry in mine:
                    tier.record_file("ds", entry)
        except BaseException as e:  # noqa: BLE001 - reported by the assertion below
            failures.append(e)

    writers = [threading.Thread(target=write, args=(versions[i::2],)) for i in range(2)]
    for w in writers:
        w.start()
    seen: list[FileEntry | None] = []
    try:
        reading.set()
        while len(seen) < 300 and any(w.is_alive() for w in writers):
            seen.append(tier.file_entry("ds", "a/b.bin"))
    finally:
        done.set()
        for w in writers:
            w.join()
    assert not failures, failures
    assert len(seen) == 300 and all(e is None or e in versions for e in seen)
    assert tier.file_entry("ds", "a/b.bin") in versions
    assert list(tier.manifest("ds")) == ["a/b.bin"]


def test_a_failed_alluxio_read_is_made_once_more_and_a_file_gone_by_then_is_absent(alluxio, monkeypatch):
    """A stream read that fails (CI saw one stall past the timeout while writers replaced the
    file) is made again; if the file is gone by then the read says absent; a dead proxy fails."""
    from alnair_dataset import _alluxio_rest

    tier = open_tier(alluxio, budget_bytes=MIB, prefix="t")
    path = f"{tier.root}/f"
    tier.rest.write_new(path, b"abc")
    real, failed = tier.rest._post, []

    def failing_once(then=None):  # type: ignore[no-untyped-def]
        def post(url, what, **kw):  # type: ignore[no-untyped-def]
            if url.endswith("/read") and not failed:
                failed.append(url)
                if then:
                    then()
                raise TierUnavailableError("injected: the read stalled past its timeout")
            return real(url, what, **kw)
        return post

    monkeypatch.setattr(tier.rest, "_post", failing_once())
    assert tier.rest.read(path) == b"abc"
    assert len(failed) == 1
    failed.clear()
    monkeypatch.setattr(tier.rest, "_post", failing_once(lambda: tier.rest.delete(path)))
    with pytest.raises(_alluxio_rest.NotFound):
        tier.rest.read(path)
    monkeypatch.setattr(tier.rest, "_post", real)
    dead = _alluxio_rest.AlluxioRest("127.0.0.1", free_port(), timeout=0.5)
    with pytest.raises(TierUnavailableError):
        dead.read(path)
    tier.close()


def test_a_write_is_renamed_only_once_the_master_completed_it(alluxio, monkeypatch):
    """The 2.9 proxy may close a stream after its close call answered: the tier waits for the
    master's completion (and says so when it never comes) instead of renaming an open file."""
    from alnair_dataset import _alluxio_rest

    tier = open_tier(alluxio, budget_bytes=MIB, prefix="t")
    tier.rest.write_new(f"{tier.root}/done", b"abc")
    assert tier.rest.status(f"{tier.root}/done")["completed"] is True
    tier.rest.call(f"{tier.root}/open", "create-file", {"recursive": True})  # never closed
    monkeypatch.setattr(_alluxio_rest, "COMPLETE_SECONDS", 0.5)
    with pytest.raises(TierUnavailableError, match="not completed within"):
        tier.rest._until_complete(f"{tier.root}/open")
    tier.close()
