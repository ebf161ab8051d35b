"""The Redis cache tier, one server or a Redis Cluster.

Key layout (``P`` is the prefix, ``g`` the first two hex digits of the chunk id):

* ``P:chunk:{g}:<id>`` the chunk's bytes; ``P:refs:{g}:<id>`` the set of data sets that
  reference it; ``P:usage:{g}`` bytes and chunks stored in group ``g``. The hash tag
  ``{g}`` puts the three in one slot, so a Lua script stores or frees a chunk and keeps
  the usage exact atomically, even in a cluster; 256 groups spread chunks over the
  cluster's servers, and the tier's usage is the sum of 256 small hashes.
* ``P:ds:{<dataset>}:files`` the manifest (path → entry JSON), ``P:ds:{<dataset>}:chunks``
  the journal of every chunk id the data set took a reference on, and ``P:ds:{<dataset>}:meta``
  its source, patterns and phase, so a reader needs only the name (one slot per data set);
  ``P:ds:{<dataset>}:readers`` its readers' leases and ``P:ds:{<dataset>}:last_read`` when
  one last renewed (the only keys a reader writes, and only a reader with the hydrator's user).
* Users: the hydrator's (the URL's, or the default user) may do everything; each Kubernetes
  namespace's pods get a read-only user (:meth:`RedisTier.grant_reader`,
  ``alnair_common.tier_readers``).

Redis must run with ``maxmemory-policy noeviction``: the tier keeps its own budget, and a
server evicting chunks behind its back would leave manifests pointing at nothing (readers
would still fall back to the source, but the cache would silently stop being one).
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Iterator, Sequence
from typing import Any
from urllib.parse import unquote, urlparse

import redis as redis_py
from redis._parsers.encoders import Encoder
from redis.backoff import NoBackoff
from redis.cluster import ClusterNode, RedisCluster
from redis.connection import HiredisRespSerializer, PythonRespSerializer
from redis.retry import Retry
from redis.utils import HIREDIS_AVAILABLE

from ._errors import InvalidSpecError, TierPermissionError, TierUnavailableError
from ._manifest import FileEntry
from ._tier import CacheTier, DatasetFootprint, TierUsage

GROUPS = 256
_SAFE = re.compile(r"[^A-Za-z0-9_.:/-]")

# KEYS: chunk, refs, usage, journal   ARGV: dataset, data   (journal is in another slot in a
# cluster, so it is written by the caller before this runs; see ref_existing/put_chunk)
_PUT = """
local new = 0
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('SET', KEYS[1], ARGV[2])
  redis.call('HINCRBY', KEYS[3], 'bytes', string.len(ARGV[2]))
  redis.call('HINCRBY', KEYS[3], 'chunks', 1)
  new = 1
end
redis.call('SADD', KEYS[2], ARGV[1])
return new
"""
# A whole file in one round trip (one server, not a cluster: the keys span slots).
# KEYS: journal, files, then per piece chunk, refs, usage   ARGV: dataset, path, entry, then per
# piece its id and bytes. Returns 1 per piece newly stored, else 0.
_PUT_FILE = """
local new = {}
for i = 0, (#KEYS - 2) / 3 - 1 do
  local k, a = 3 + 3 * i, 4 + 2 * i
  redis.call('SADD', KEYS[1], ARGV[a])
  new[i + 1] = 0
  if redis.call('EXISTS', KEYS[k]) == 0 then
    redis.call('SET', KEYS[k], ARGV[a + 1])
    redis.call('HINCRBY', KEYS[k + 2], 'bytes', string.len(ARGV[a + 1]))
    redis.call('HINCRBY', KEYS[k + 2], 'chunks', 1)
    new[i + 1] = 1
  end
  redis.call('SADD', KEYS[k + 1], ARGV[1])
end
redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
return new
"""
_REF_IF_PRESENT = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('SADD', KEYS[2], ARGV[1])
return 1
"""
# Returns the bytes freed (0 if other data sets still reference the chunk).
_UNREF = """
redis.call('SREM', KEYS[2], ARGV[1])
if redis.call('SCARD', KEYS[2]) > 0 then return 0 end
local size = redis.call('STRLEN', KEYS[1])
if size > 0 then
  redis.call('DEL', KEYS[1])
  redis.call('HINCRBY', KEYS[3], 'bytes', -size)
  redis.call('HINCRBY', KEYS[3], 'chunks', -1)
end
redis.call('DEL', KEYS[2])
return size
"""

# What a namespace's reader may run: reads of its data sets' descriptions and manifests and of
# chunks by id, nothing that writes (a write, even of its own lease, would let a tenant fill
# the servers' memory that every namespace shares); and what redis-py sends on connecting:
# SELECT for a URL's database (key patterns hold in every database), and to a cluster (its
# CLIENT SETINFO, unknown before Redis 7.2, may fail: redis-py ignores that).
READER_COMMANDS = ("+get", "+hget", "+hmget", "+hgetall", "+time", "+ping", "+select", "+command",
                   "+cluster|slots", "+cluster|shards", "+cluster|nodes", "+readonly")

# The longest lease a reader may take (DatasetReader's lease_seconds: 30 by default).
MAX_LEASE_SECONDS = 3600.0

# InvalidResponse: what answers is not a Redis server (its port reused by another server).
REDIS_ERRORS = (redis_py.ConnectionError, redis_py.TimeoutError, redis_py.ResponseError,
                redis_py.exceptions.InvalidResponse, redis_py.exceptions.RedisClusterException,
                redis_py.exceptions.ClusterError, redis_py.exceptions.ClusterDownError,
                redis_py.exceptions.SlotNotCoveredError, OSError)


# A command with a value at least this long is packed without copying the value (see ValuePacker).
LARGE_VALUE = 128 << 10
_BUFFERS = (bytes, bytearray, memoryview)


class ValuePacker:
    """Packs commands for the tier's connections; replies are parsed by hiredis all the same.

    hiredis' packer copies every value into one fresh buffer with the command: for a 1 MiB
    chunk 1.3–1.5 ms of client CPU (a 1 MiB allocation, its page faults, the copy; how much
    depends on the allocator's state), against 0.2–0.4 ms for redis-py's Python packer,
    which hands the value's own buffer to ``sendall``. Below :data:`LARGE_VALUE` the copy is
    cheap and hiredis' packing, in C, is the faster of the two, so small commands (every
    read's) keep it."""

    def __init__(self) -> None:
        # redis-py's own buffer cutoff: a value longer than this is sent as a piece of its own.
        self.large = PythonRespSerializer(6000, Encoder("utf-8", "strict", False).encode)
        self.small = HiredisRespSerializer() if HIREDIS_AVAILABLE else self.large

    def pack(self, *args: Any) -> list[Any]:
        for arg in args:
            if isinstance(arg, _BUFFERS) and len(arg) >= LARGE_VALUE:
                return self.large.pack(*args)
        return self.small.pack(*args)


VALUE_PACKER = ValuePacker()


class _ClusterConnection(redis_py.Connection):
    """A cluster node's connection, with :class:`ValuePacker` (RedisCluster passes no packer
    to its nodes' connections, but may be given their class)."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("command_packer", VALUE_PACKER)
        super().__init__(**kwargs)


def connect(url: str, *, timeout: float = 2.0) -> Any:
    """A client for ``redis://[user:password@]host:port/db`` or
    ``redis-cluster://[user:password@]host:port[,host:port]``, whose connections pack values
    in place (:class:`ValuePacker`)."""
    parsed = urlparse(url)
    if parsed.scheme == "redis-cluster":
        userinfo, _, hosts = parsed.netloc.rpartition("@")
        user, _, password = userinfo.partition(":")
        first, *rest = [_host_port(part) for part in hosts.split(",")]
        try:
            # Given a URL (the first server's), RedisCluster builds its nodes' pools with the
            # connection class given; given only startup nodes, it would ignore the class.
            return RedisCluster(url=f"redis://{first[0]}:{first[1]}",
                                startup_nodes=[ClusterNode(*node) for node in rest],
                                username=unquote(user) or None, password=unquote(password) or None,
                                socket_timeout=timeout, socket_connect_timeout=timeout,
                                retry=Retry(NoBackoff(), 1), connection_class=_ClusterConnection)
        except REDIS_ERRORS as e:
            raise TierUnavailableError(f"Redis Cluster at {parsed.netloc} unreachable: {e}") from e
    if parsed.scheme not in ("redis", "rediss"):
        raise InvalidSpecError(f"tier URL {url!r} must start with redis://, rediss:// or "
                               "redis-cluster://")
    return redis_py.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout,
                                   command_packer=VALUE_PACKER)


def _number(raw: bytes) -> float:
    try:
        return float(raw)
    except ValueError:
        return 0.0


def _host_port(part: str) -> tuple[str, int]:
    host, _, port = part.rpartition(":")
    return host or "127.0.0.1", int(port or 6379)


@contextlib.contextmanager
def _reachable(what: str) -> Iterator[None]:
    try:
        yield
    except redis_py.exceptions.NoPermissionError as e:
        raise TierPermissionError(f"Redis tier: {what} is not permitted for this tier user "
                                  f"(a pod's read-only user reads only its namespace's data "
                                  f"sets): {e}") from e
    except REDIS_ERRORS as e:
        raise TierUnavailableError(f"Redis tier: {what} failed: {type(e).__name__}: {e}") from e


class RedisTier(CacheTier):
    """A :class:`~alnair_dataset.CacheTier` on Redis; safe to share between threads."""

    name = "redis"
    # One pipeline's replies pile up in the server's and the client's buffers until the last
    # is read: with eight DataLoader workers on a 16-core host, a batch of 256 samples of
    # 62 KB came 2.7x faster as 32 pipelines of 8 samples than as one of 256 (one GET a
    # sample: 2.9x); on 2 cores with one or two readers 8 a pipeline was within 20-30 % of
    # the best size there (scripts/gpu/redis_paths.py, docs/benchmarks.md).
    request_bytes = 512 << 10

    def __init__(self, client: Any, *, budget_bytes: int, prefix: str = "alnair") -> None:
        self.client = client
        self.budget_bytes = budget_bytes
        self.prefix = prefix
        self._put = client.register_script(_PUT)
        self._put_file = client.register_script(_PUT_FILE)
        self._ref = client.register_script(_REF_IF_PRESENT)
        self._unref = client.register_script(_UNREF)
        self._hmget = True  # False once the server refused it this user (file_entries)

    @classmethod
    def from_url(cls, url: str, *, budget_bytes: int, prefix: str = "alnair",
                 timeout: float = 2.0) -> RedisTier:
        return cls(connect(url, timeout=timeout), budget_bytes=budget_bytes, prefix=prefix)

    # -- keys -------------------------------------------------------------------------------

    def _chunk_keys(self, chunk: str) -> list[str]:
        g = chunk[:2]
        return [f"{self.prefix}:chunk:{{{g}}}:{chunk}", f"{self.prefix}:refs:{{{g}}}:{chunk}",
                f"{self.prefix}:usage:{{{g}}}"]

    def _ds(self, dataset: str, what: str) -> str:
        return f"{self.prefix}:ds:{{{_SAFE.sub('_', dataset)}}}:{what}"

    # -- chunks -----------------------------------------------------------------------------

    def usage(self) -> TierUsage:
        with _reachable("reading usage"):
            pipe = self.client.pipeline(transaction=False)
            for g in range(GROUPS):
                pipe.hmget(f"{self.prefix}:usage:{{{g:02x}}}", "bytes", "chunks")
            rows = pipe.execute()
        stored = sum(int(b or 0) for b, _ in rows)
        chunks = sum(int(c or 0) for _, c in rows)
        return TierUsage(stored, chunks, self.budget_bytes)

    def ref_existing(self, dataset: str, chunk: str) -> bool:
        with _reachable("referencing a chunk"):
            self.client.sadd(self._ds(dataset, "chunks"), chunk)
            return bool(self._ref(keys=self._chunk_keys(chunk)[:2], args=[dataset]))

    def put_chunk(self, dataset: str, chunk: str, data: bytes, *, journaled: bool = False) -> bool:
        with _reachable("storing a chunk"):
            if not journaled:
                self.client.sadd(self._ds(dataset, "chunks"), chunk)
            return bool(self._put(keys=self._chunk_keys(chunk), args=[dataset, data]))

    def put_file(self, dataset: str, entry: FileEntry, pieces: Sequence[bytes]) -> list[bool]:
        """One script on one server: the journal, each piece stored and referenced, the entry
        (atomic, so journaled before referenced and listed last as the steps would be). A
        cluster keeps the steps: a data set's keys and a chunk's are in different slots."""
        if isinstance(self.client, RedisCluster):
            return super().put_file(dataset, entry, pieces)
        keys = [self._ds(dataset, "chunks"), self._ds(dataset, "files")]
        args: list[str | bytes] = [dataset, entry.path, entry.to_json()]
        for chunk, piece in zip(entry.chunks, pieces, strict=True):
            keys += self._chunk_keys(chunk)
            args += [chunk, piece]
        with _reachable("storing a file"):
            return [bool(n) for n in self._put_file(keys=keys, args=args)]

    def get_chunks(self, chunks: list[str]) -> list[bytes | None]:
        with _reachable("reading chunks"):
            if len(chunks) == 1:  # most files of image data sets: skip the pipeline's cost
                return [self.client.get(self._chunk_keys(chunks[0])[0])]
            pipe = self.client.pipeline(transaction=False)
            for chunk in chunks:
                pipe.get(self._chunk_keys(chunk)[0])
            return pipe.execute()

    # -- manifests --------------------------------------------------------------------------

    def record_file(self, dataset: str, entry: FileEntry) -> None:
        with _reachable("recording a file"):
            self.client.hset(self._ds(dataset, "files"), entry.path, entry.to_json())

    def file_entry(self, dataset: str, path: str) -> FileEntry | None:
        with _reachable("reading a manifest entry"):
            raw = self.client.hget(self._ds(dataset, "files"), path)
        return None if raw is None else FileEntry.from_json(path, raw)

    def file_entries(self, dataset: str, paths: Sequence[str]) -> list[FileEntry | None]:
        """One ``HMGET`` (a data set's manifest is one hash, in one slot of a cluster). A
        pod's reader user granted by an older platform may lack ``HMGET``: then one ``HGET``
        each, as that platform's clients asked."""
        if not paths:
            return []
        if self._hmget:
            try:
                with _reachable("reading manifest entries"):
                    raws = self.client.hmget(self._ds(dataset, "files"), list(paths))
            except TierPermissionError:
                self._hmget = False
            else:
                return [None if raw is None else FileEntry.from_json(path, raw)
                        for path, raw in zip(paths, raws, strict=True)]
        return super().file_entries(dataset, paths)

    def manifest(self, dataset: str) -> dict[str, FileEntry]:
        with _reachable("reading a manifest"):
            raw = self.client.hgetall(self._ds(dataset, "files"))
        return {k.decode(): FileEntry.from_json(k.decode(), v) for k, v in raw.items()}

    def footprint(self, dataset: str) -> DatasetFootprint:
        files = self.manifest(dataset)
        with _reachable("measuring a data set"):
            chunks = [c.decode() for c in self.client.sscan_iter(self._ds(dataset, "chunks"),
                                                                 count=1000)]
            pipe = self.client.pipeline(transaction=False)
            for chunk in chunks:
                keys = self._chunk_keys(chunk)
                pipe.strlen(keys[0])
                pipe.scard(keys[1])
            rows = pipe.execute()
        sizes, holders = rows[0::2], rows[1::2]
        unique = sum(sizes)
        attributed = sum(s / max(1, h) for s, h in zip(sizes, holders, strict=True))
        return DatasetFootprint(len(files), sum(e.size for e in files.values()), len(chunks),
                                unique, round(attributed))

    def release(self, dataset: str, keep: set[str] | None = None) -> int:
        journal = self._ds(dataset, "chunks")
        freed = 0
        with _reachable("releasing references"):
            for raw in list(self.client.sscan_iter(journal, count=1000)):
                chunk = raw.decode()
                if keep is not None and chunk in keep:
                    continue
                freed += int(self._unref(keys=self._chunk_keys(chunk), args=[dataset]))
                self.client.srem(journal, chunk)  # only after the reference is gone
        return freed

    def forget_files(self, dataset: str, paths: list[str]) -> None:
        if paths:
            with _reachable("forgetting files"):
                self.client.hdel(self._ds(dataset, "files"), *paths)

    def set_meta(self, dataset: str, meta: dict[str, str]) -> None:
        with _reachable("writing a data set's description"):
            self.client.hset(self._ds(dataset, "meta"), mapping=meta)

    def meta(self, dataset: str) -> dict[str, str]:
        with _reachable("reading a data set's description"):
            pipe = self.client.pipeline(transaction=False)
            pipe.hgetall(self._ds(dataset, "meta"))
            pipe.get(self._ds(dataset, "last_read"))
            raw, last_read = pipe.execute()
        meta = {k.decode(): v.decode() for k, v in raw.items()}
        if meta and last_read:  # readers write it: one in the future is read as now
            meta["last_read"] = f"{min(_number(last_read), time.time()):.3f}"
        return meta

    def lease(self, dataset: str, reader: str, ttl: float) -> None:
        with _reachable("renewing a reader's lease"):
            now = self._now()
            self.client.zadd(self._ds(dataset, "readers"), {reader: now + ttl})
            self.client.set(self._ds(dataset, "last_read"), f"{now:.3f}")

    def unlease(self, dataset: str, reader: str) -> None:
        with _reachable("ending a reader's lease"):
            self.client.zrem(self._ds(dataset, "readers"), reader)

    def readers(self, dataset: str) -> int:
        """Live leases. One longer than :data:`MAX_LEASE_SECONDS` (a reader's bug, or a forger
        with the hydrator's user) would keep the data set from eviction for ever: dropped."""
        with _reachable("counting readers"):
            key = self._ds(dataset, "readers")
            now = self._now()
            self.client.zremrangebyscore(key, "-inf", now)
            self.client.zremrangebyscore(key, f"({now + MAX_LEASE_SECONDS}", "+inf")
            return int(self.client.zcard(key))

    def _now(self) -> float:
        """The server's clock, so leases written from several machines compare."""
        seconds, micros = self.client.time()
        return seconds + micros / 1e6

    def drop_manifest(self, dataset: str) -> None:
        with _reachable("dropping a manifest"):
            self.client.delete(self._ds(dataset, "meta"))
            self.client.delete(self._ds(dataset, "readers"))
            self.client.delete(self._ds(dataset, "last_read"))
            self.client.delete(self._ds(dataset, "files"))

    # -- users ------------------------------------------------------------------------------

    def grant_reader(self, namespace: str, user: str, password: str) -> None:
        """Make (or remake) ``user``: a reader of ``namespace``'s data sets only, that writes
        nothing (not even leases: its readers' use is the platform's to track), on every
        server of a cluster (Redis keeps users per server). Idempotent; a remade user keeps
        its connections."""
        ds = f"{self.prefix}:ds:{{{namespace}.*}}"
        rules = ["reset", "on", f">{password}", f"%R~{ds}:meta", f"%R~{ds}:last_read",
                 f"%R~{ds}:files", f"%R~{self.prefix}:chunk:*", *READER_COMMANDS]
        with _reachable(f"granting {user}"):
            self._on_every_server("ACL", "SETUSER", user, *rules)

    def readers_granted(self, prefix: str) -> set[str]:
        """The users whose name starts with ``prefix`` on any server."""
        with _reachable("listing users"):
            replies = self._on_every_server("ACL", "USERS")
        return {u.decode() for reply in replies for u in reply if u.decode().startswith(prefix)}

    def revoke_reader(self, user: str) -> None:
        """Delete ``user`` (its connections are closed) on every server."""
        with _reachable(f"revoking {user}"):
            self._on_every_server("ACL", "DELUSER", user)

    def _on_every_server(self, *command: str) -> list[Any]:
        if isinstance(self.client, RedisCluster):
            replies = self.client.execute_command(*command, target_nodes=RedisCluster.ALL_NODES)
            return list(replies.values()) if isinstance(replies, dict) else [replies]
        return [self.client.execute_command(*command)]

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.client.close()
