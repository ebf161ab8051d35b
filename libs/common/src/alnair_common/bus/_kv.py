"""Shared state in JetStream key-value buckets, updated with compare-and-set.

Readers get the value with its revision; writers say which revision they saw. A writer that
lost a race gets :class:`RevisionConflictError` and re-reads — :meth:`TypedKV.mutate` does the
loop — so two schedulers can never both commit the same GPU share. Readers that keep a copy follow
the bucket with :meth:`TypedKV.watch` (current values, then changes; see ``_kv_watch``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Generic, TypeVar

import nats.errors
import nats.js.errors
from google.protobuf.message import Message
from nats.js import JetStreamContext
from nats.js.api import KeyValueConfig, StorageType
from nats.js.kv import KeyValue

from .. import subjects
from ..errors import BusUnavailableError, PermanentError, RevisionConflictError, TemporaryError
from ._client import Bus
from ._kv_watch import KVWatch

M = TypeVar("M", bound=Message)


@dataclass(frozen=True)
class Versioned(Generic[M]):
    value: M
    revision: int


@contextlib.contextmanager
def _reachable(bucket: str, what: str) -> Iterator[None]:
    """The server away or slow is a TemporaryError like any other bus outage."""
    try:
        yield
    except (nats.js.errors.KeyNotFoundError, nats.js.errors.KeyWrongLastSequenceError,
            nats.js.errors.NoKeysError, nats.js.errors.BucketNotFoundError):
        raise
    except (TimeoutError, nats.errors.Error) as e:
        raise BusUnavailableError(f"{what} in bucket {bucket!r} failed: {e!r}") from e


class TypedKV(Generic[M]):
    """A bucket whose values are all ``message_type``."""

    def __init__(self, kv: KeyValue, bucket: str, message_type: type[M], *,
                 js: JetStreamContext, service: str = "") -> None:
        self._kv = kv
        self._js = js  # for the bucket's stream state (keys)
        self.bucket = bucket
        self.message_type = message_type
        self.service = service  # labels the watch's decode-error counter

    @classmethod
    async def open(cls, bus: Bus, bucket: str, message_type: type[M]) -> TypedKV[M]:
        """Open ``bucket``, creating it from the table in alnair_common.subjects if absent. A
        bucket the table does not name is refused: a misspelt name would otherwise create
        an empty bucket of its own, and its reader would wait on it for ever."""
        spec = next((b for b in subjects.BUCKETS if b.name == bucket), None)
        if spec is None:
            known = ", ".join(b.name for b in subjects.BUCKETS)
            raise PermanentError(f"KV bucket {bucket!r} is not in alnair_common.subjects.BUCKETS "
                                 f"({known}); use one of its *_BUCKET names, or add the bucket there")
        try:
            kv = await bus.js.key_value(bucket)
        except nats.js.errors.BucketNotFoundError:
            kv = await bus.js.create_key_value(
                KeyValueConfig(bucket=bucket, history=spec.history, description=spec.description,
                               max_bytes=spec.max_bytes, storage=StorageType.FILE)
            )
        return cls(kv, bucket, message_type, js=bus.js, service=bus.service)

    async def watch(self, keys: str = ">") -> KVWatch[M]:
        """Follow the keys matching ``keys``: every current value, then each put and delete."""
        watcher = await self._kv.watch(keys)
        target = 0
        if keys == ">":
            # The newest revision the bucket holds now: the watch has caught up only once it
            # has taken it too (nats-py's end-of-values marker alone can come first, see KVWatch).
            with _reachable(self.bucket, "stream info"):
                state = (await self._js.stream_info(f"KV_{self.bucket}")).state
            target = state.last_seq if state.messages else 0
        return KVWatch(watcher, self.bucket, self.message_type, self.service, target=target)

    async def current(self, timeout: float = 60.0) -> dict[str, M]:
        """Every current value in one pass — a watch stopped once it has caught up — instead
        of a get per key: a restarted service reads the state, not a round trip per record."""
        watch = await self.watch()
        values: dict[str, M] = {}

        async def take() -> None:
            async for update in watch:
                if update.value is None:
                    values.pop(update.key, None)
                else:
                    values[update.key] = update.value

        reader = asyncio.create_task(take(), name=f"current:{self.bucket}")
        try:
            await watch.caught_up(timeout)
        finally:
            await watch.stop()
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader
        return values

    async def get(self, key: str) -> Versioned[M] | None:
        try:
            with _reachable(self.bucket, f"get {key!r}"):
                entry = await self._kv.get(key)
        except nats.js.errors.KeyNotFoundError:
            return None
        if entry.value is None or entry.operation in ("DEL", "PURGE"):
            return None
        value = self.message_type()
        value.ParseFromString(entry.value)
        return Versioned(value, entry.revision or 0)

    async def put(self, key: str, value: M) -> int:
        """Unconditional write (for state with a single writer, e.g. a node's inventory)."""
        with _reachable(self.bucket, f"put {key!r}"):
            return await self._kv.put(key, value.SerializeToString())

    async def create(self, key: str, value: M) -> int:
        """Write only if ``key`` does not exist."""
        try:
            with _reachable(self.bucket, f"create {key!r}"):
                return await self._kv.create(key, value.SerializeToString())
        except nats.js.errors.KeyWrongLastSequenceError as e:
            raise RevisionConflictError(self.bucket, key, None) from e

    async def update(self, key: str, value: M, revision: int) -> int:
        """Write only if ``key`` is still at ``revision``."""
        try:
            with _reachable(self.bucket, f"update {key!r}"):
                return await self._kv.update(key, value.SerializeToString(), last=revision)
        except nats.js.errors.KeyWrongLastSequenceError as e:
            raise RevisionConflictError(self.bucket, key, revision) from e

    async def delete(self, key: str, revision: int | None = None) -> None:
        try:
            with _reachable(self.bucket, f"delete {key!r}"):
                await self._kv.delete(key, last=revision)
        except nats.js.errors.KeyWrongLastSequenceError as e:
            raise RevisionConflictError(self.bucket, key, revision) from e

    async def purge(self, key: str) -> None:
        """Forget ``key`` and its history (one marker stays until :meth:`purge_deletes`)."""
        with _reachable(self.bucket, f"purge {key!r}"):
            await self._kv.purge(key)

    async def purge_deletes(self, older_than_seconds: float) -> None:
        """Drop the markers that deletes and purges older than this left behind."""
        with _reachable(self.bucket, "purge old delete markers"):
            await self._kv.purge_deletes(olderthan=int(older_than_seconds))

    async def keys(self) -> list[str]:
        """Every key with a value (deleted ones left out).

        From the stream's per-subject state, not nats-py's ``keys()``: that creates a
        consumer per call which the server keeps until it times out, and frequent listings
        (`alnair ps`, `alnair run`) ran into the server's limit of consumers per stream.
        """
        prefix = f"$KV.{self.bucket}."
        with _reachable(self.bucket, "list keys"):
            info = await self._js.stream_info(f"KV_{self.bucket}", subjects_filter=f"{prefix}>")
        names = [subject[len(prefix):] for subject in sorted(info.state.subjects or {})]
        return [k for k in names if await self.get(k) is not None]

    async def mutate(self, key: str, change: Callable[[M | None], M], *, attempts: int = 20) -> M:
        """Read, apply ``change`` to a copy, write back with compare-and-set; retry on races.

        ``change`` may raise to refuse the update (e.g. a card would go over capacity).
        """
        for _ in range(attempts):
            current = await self.get(key)
            base = None
            if current is not None:
                base = self.message_type()
                base.CopyFrom(current.value)
            new = change(base)
            try:
                if current is None:
                    await self.create(key, new)
                else:
                    await self.update(key, new, current.revision)
                return new
            except RevisionConflictError:
                continue
        raise TemporaryError(f"{self.bucket}/{key}: lost {attempts} compare-and-set races in a row")

