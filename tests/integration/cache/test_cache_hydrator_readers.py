"""The hydrator keeps a read-only tier user for each namespace it holds data sets for, on a
real redis-server and a 3-server Redis Cluster: made when a data set is added, made again
when a server restarts without it, removed with the namespace's last data set."""

from __future__ import annotations

from cache_support import write_dataset
from hydrator_support import PHASE, add, remove, running, settings, settled, spec, status

from alnair_common.testing import wait_for
from alnair_common.tier_readers import USER_PREFIX, reader_url
from alnair_dataset import DatasetReader, open_tier

KEY = "a-reader-key-of-32-characters..."


async def test_each_namespace_with_a_data_set_gets_a_reader_that_reads_it(
        bus, nats_server, redis_url, tmp_path, monkeypatch):
    files = write_dataset(tmp_path / "data" / "set", files=3)
    source = f"file://{tmp_path}/data/set"
    admin = open_tier(redis_url, budget_bytes=1 << 40, prefix="t")
    s = settings(nats_server.url, redis_url, tmp_path, cache_allowed_roots=str(tmp_path / "data"),
                 cache_reader_key=KEY, cache_readers_interval_seconds=600)
    async with running(s):
        for namespace in ("team-a", "team-b"):
            done = await settled(bus, f"{namespace}.images", await add(
                bus, spec("images", source, namespace=namespace)))
            assert done.phase == PHASE.CACHE_PHASE_READY
        await add(bus, spec("local-only", source))  # no namespace: no user

        async def users(want):
            got = admin.readers_granted(USER_PREFIX)
            return got if got == want else None

        # Made at once on the add, not after the (10-minute) round.
        await wait_for(lambda: users({"alnair-reader-team-a", "alnair-reader-team-b"}),
                       timeout=10, what="a user per namespace")
        monkeypatch.setenv("ALNAIR_DATASET_NAMESPACE", "team-a")
        with DatasetReader("images", tier_url=reader_url(redis_url, KEY, "team-a"),
                           prefix="t") as reader:
            assert {p: reader.read(p) for p in reader.files()} == files
            assert reader.stats.misses == 0 and reader.stats.tier_errors == 0

        await remove(bus, "images", "team-b")
        await wait_for(lambda: users({"alnair-reader-team-a"}), timeout=10,
                       what="team-b's user removed with its last data set")
        assert await status(bus, "team-b.images") is None
    admin.close()


async def test_a_redis_restarted_without_its_users_gets_them_again(
        bus, nats_server, redis_node, dataplane_bin, tmp_path):
    from alnair_common.testing.redis_cluster import start_redis_node

    write_dataset(tmp_path / "data" / "set", files=2)
    node = redis_node()
    s = settings(nats_server.url, node.url, tmp_path, cache_allowed_roots=str(tmp_path / "data"),
                 cache_reader_key=KEY, cache_readers_interval_seconds=0.5)
    async with running(s):
        await settled(bus, "team-a.images", await add(
            bus, spec("images", f"file://{tmp_path}/data/set", namespace="team-a")))
        node.kill()
        fresh = start_redis_node(dataplane_bin, tmp_path / "redis-again", port=node.port)
        try:
            admin = open_tier(fresh.url, budget_bytes=1, prefix="t")

            async def made():
                return admin.readers_granted(USER_PREFIX) == {"alnair-reader-team-a"} or None

            await wait_for(made, timeout=15, what="the user made again on the new server")
            reader = open_tier(reader_url(fresh.url, KEY, "team-a"), budget_bytes=1, prefix="t")
            assert reader.meta("team-a.images") == {}  # it authenticates (the data are gone)
            reader.close()
            admin.close()
        finally:
            fresh.process.stop()


async def test_a_namespace_cannot_confirm_what_another_cached_from_its_own_sources(
        bus, nats_server, redis_url, tmp_path, monkeypatch):
    """A pod's tier user may GET any chunk by address. With plain SHA-256 addresses it could
    learn whether another namespace cached content it guesses; the chunks of a source the
    rules allow only some namespaces are addressed under a key of those namespaces instead
    (shared among them). Sources a rule for every namespace allows (public data) stay
    deduplicated across all namespaces under plain SHA-256."""
    import hashlib

    from alnair_dataset._redis_tier import connect

    files = {}
    for where in ("a", "b", "both", "public"):  # the same bytes in four places
        files = write_dataset(tmp_path / where / "set", files=3, size=20_000)
    size = sum(map(len, files.values()))
    admin = open_tier(redis_url, budget_bytes=1 << 40, prefix="t")
    both = f"file://{tmp_path}/both"
    s = settings(nats_server.url, redis_url, tmp_path, cache_reader_key=KEY,
                 cache_allowed_sources=f"team-a=file://{tmp_path}/a,team-b=file://{tmp_path}/b,"
                                       f"team-a={both},team-b={both}",
                 cache_allowed_roots=str(tmp_path / "public"), cache_readers_interval_seconds=600)
    async with running(s):
        for ns in ("team-a", "team-b"):
            for name in ("own", "both", "public"):
                where = ns[-1] if name == "own" else name
                done = await settled(bus, f"{ns}.{name}", await add(
                    bus, spec(name, f"file://{tmp_path}/{where}/set", namespace=ns)))
                assert done.phase == PHASE.CACHE_PHASE_READY, done.message
        # each namespace's own set; the set both may cache, once; the public one, once
        assert admin.usage().stored_bytes == 4 * size

        def ids(key: str) -> set[str]:
            return {e.chunks[0] for e in admin.manifest(key).values()}

        plain = {hashlib.sha256(b).hexdigest() for b in files.values()}
        assert ids("team-a.public") == ids("team-b.public") == plain
        assert ids("team-a.both") == ids("team-b.both")
        keyed = [ids("team-a.own"), ids("team-b.own"), ids("team-a.both")]
        assert all(not (k & plain) for k in keyed) and not (keyed[0] & keyed[1]) \
            and not (keyed[0] & keyed[2]) and not (keyed[1] & keyed[2])

        b = connect(reader_url(redis_url, KEY, "team-b"))  # team-b's pods' user
        guess = hashlib.sha256(files[min(files)]).hexdigest()  # content team-b can guess
        assert b.get(admin._chunk_keys(guess)[0]) == files[min(files)]  # public: shared
        for ns in ("team-a", "team-b"):
            admin.release(f"{ns}.public")
            admin.drop_manifest(f"{ns}.public")
        assert b.get(admin._chunk_keys(guess)[0]) is None  # team-a's own copy: not there
        b.close()
        monkeypatch.setenv("ALNAIR_DATASET_NAMESPACE", "team-a")
        with DatasetReader("own", tier_url=reader_url(redis_url, KEY, "team-a"), prefix="t") as reader:
            assert {p: reader.read(p) for p in reader.files()} == files
            assert reader.stats.misses == 0
    admin.close()
