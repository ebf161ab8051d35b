"""Shared state in JetStream key-value buckets, updated with compare-and-set.

Readers get the value with its revision; writers say which revision they saw. A writer that
lost a race gets :class:`RevisionConflictError` and re-reads — :meth:`TypedKV.mutate` does the
loop — so two schedulers can never both commit the same GPU share. Readers that keep a copy follow
the bucket with :meth:`TypedKV.watch` (current values, then changes; see ``_kv_watch``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

import nats.js.errors
from google.protobuf.message import Message
from nats.js.api import KeyValueConfig, StorageType
from nats.js.kv import KeyValue

from .. import subjects
from ..errors import RevisionConflictError, TemporaryError
from ._client import Bus
from ._kv_watch import KVWatch

M = TypeVar("M", bound=Message)


@dataclass(frozen=True)
class Versioned(Generic[M]):
    value: M
    revision: int


class TypedKV(Generic[M]):
    """A bucket whose values are all ``message_type``."""

    def __init__(self, kv: KeyValue, bucket: str, message_type: type[M], *,
                 service: str = "") -> None:
        self._kv = kv
        self.bucket = bucket
        self.message_type = message_type
        self.service = service  # labels the watch's decode-error counter

    @classmethod
    async def open(cls, bus: Bus, bucket: str, message_type: type[M]) -> TypedKV[M]:
        """Open ``bucket``, creating it from the table in alnair_common.subjects if absent."""
        spec = next((b for b in subjects.BUCKETS if b.name == bucket), None)
        try:
            kv = await bus.js.key_value(bucket)
        except nats.js.errors.BucketNotFoundError:
            history = spec.history if spec else 5
            description = spec.description if spec else ""
            kv = await bus.js.create_key_value(
                KeyValueConfig(bucket=bucket, history=history, description=description,
                               storage=StorageType.FILE)
            )
        return cls(kv, bucket, message_type, service=bus.service)

    async def watch(self, keys: str = ">") -> KVWatch[M]:
        """Follow the keys matching ``keys``: every current value, then each put and delete."""
        watcher = await self._kv.watch(keys)
        return KVWatch(watcher, self.bucket, self.message_type, self.service)

    async def get(self, key: str) -> Versioned[M] | None:
        try:
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
        return await self._kv.put(key, value.SerializeToString())

    async def create(self, key: str, value: M) -> int:
        """Write only if ``key`` does not exist."""
        try:
            return await self._kv.create(key, value.SerializeToString())
        except nats.js.errors.KeyWrongLastSequenceError as e:
            raise RevisionConflictError(self.bucket, key, None) from e

    async def update(self, key: str, value: M, revision: int) -> int:
        """Write only if ``key`` is still at ``revision``."""
        try:
            return await self._kv.update(key, value.SerializeToString(), last=revision)
        except nats.js.errors.KeyWrongLastSequenceError as e:
            raise RevisionConflictError(self.bucket, key, revision) from e

    async def delete(self, key: str, revision: int | None = None) -> None:
        try:
            await self._kv.delete(key, last=revision)
        except nats.js.errors.KeyWrongLastSequenceError as e:
            raise RevisionConflictError(self.bucket, key, revision) from e

    async def keys(self) -> list[str]:
        try:
            return list(await self._kv.keys())
        except nats.js.errors.NoKeysError:
            return []

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

