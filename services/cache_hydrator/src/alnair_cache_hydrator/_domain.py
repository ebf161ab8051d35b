"""The hydrator's domain objects, converted from and to protobuf at the edge.

Names are checked on the way in: a data set's name becomes a subject token, a bucket key
and part of the tier's keys, so it is held to ``[A-Za-z0-9][A-Za-z0-9_-]{0,62}``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from enum import Enum
from urllib.parse import urlparse

from google.protobuf.timestamp_pb2 import Timestamp

from alnair.v1 import cache_pb2
from alnair_common.dataset_refs import bus_name_problem

from ._errors import InvalidRequestError


class Phase(Enum):
    PENDING = cache_pb2.CACHE_PHASE_PENDING
    HYDRATING = cache_pb2.CACHE_PHASE_HYDRATING
    READY = cache_pb2.CACHE_PHASE_READY
    FAILED = cache_pb2.CACHE_PHASE_FAILED
    REMOVED = cache_pb2.CACHE_PHASE_REMOVED
    EVICTED = cache_pb2.CACHE_PHASE_EVICTED


def _check_name(what: str, value: str, *, optional: bool = False) -> str:
    if optional and not value:
        return value
    problem = bus_name_problem(what, value)
    if problem is not None:
        raise InvalidRequestError(problem)
    return value


@dataclass(frozen=True)
class DatasetSpec:
    name: str
    source: str
    namespace: str = ""
    owner: str = ""
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    pin: bool = False

    @property
    def key(self) -> str:
        """The data set's id in the tier, the bucket and its status subject."""
        return f"{self.namespace}.{self.name}" if self.namespace else self.name

    def same_data(self, other: DatasetSpec) -> bool:
        """Whether two specs select the same bytes (pin and owner aside)."""
        return (self.source, self.include, self.exclude) == (other.source, other.include,
                                                             other.exclude)

    @classmethod
    def from_proto(cls, m: cache_pb2.CacheDatasetSpec) -> DatasetSpec:
        name = _check_name("data set name", m.name)
        namespace = _check_name("namespace", m.namespace, optional=True)
        scheme = urlparse(m.source).scheme
        if scheme not in ("s3", "file"):
            raise InvalidRequestError(
                f"data set {name!r}: source {m.source!r} must be s3://bucket/prefix or "
                "file:///absolute/path")
        for pattern in (*m.include, *m.exclude):
            if not pattern or len(pattern) > 256:
                raise InvalidRequestError(f"data set {name!r}: empty or over-long pattern")
        return cls(name, m.source, namespace, m.owner, tuple(m.include), tuple(m.exclude), m.pin)

    def to_proto(self) -> cache_pb2.CacheDatasetSpec:
        return cache_pb2.CacheDatasetSpec(
            name=self.name, namespace=self.namespace, owner=self.owner, source=self.source,
            include=list(self.include), exclude=list(self.exclude), pin=self.pin)


@dataclass(frozen=True)
class DatasetStatus:
    spec: DatasetSpec
    phase: Phase
    request_id: str = ""
    message: str = ""
    reason: str = ""
    total_bytes: int = 0
    cached_bytes: int = 0
    files_total: int = 0
    files_cached: int = 0
    chunks: int = 0
    unique_bytes: int = 0
    dedup_saved_bytes: int = 0
    observed_at: datetime = field(default_factory=lambda: datetime.now(UTC))

    def evolve(self, **changes: object) -> DatasetStatus:
        return replace(self, observed_at=datetime.now(UTC), **changes)  # type: ignore[arg-type]

    @property
    def progress(self) -> float:
        if self.total_bytes:
            return min(1.0, self.cached_bytes / self.total_bytes)
        return 1.0 if self.phase is Phase.READY else 0.0

    def to_proto(self) -> cache_pb2.CacheDatasetStatus:
        when = Timestamp()
        when.FromDatetime(self.observed_at)
        return cache_pb2.CacheDatasetStatus(
            dataset=self.spec.name, namespace=self.spec.namespace, source=self.spec.source,
            phase=self.phase.value, total_bytes=self.total_bytes, cached_bytes=self.cached_bytes,
            files_total=self.files_total, files_cached=self.files_cached, message=self.message,
            observed_at=when, reason=self.reason, dedup_saved_bytes=self.dedup_saved_bytes,
            progress=self.progress, spec=self.spec.to_proto(), request_id=self.request_id,
            chunks=self.chunks, unique_bytes=self.unique_bytes)

    @classmethod
    def from_proto(cls, m: cache_pb2.CacheDatasetStatus) -> DatasetStatus:
        """A status this service wrote (the bucket); trusted, but still checked."""
        return cls(
            spec=DatasetSpec.from_proto(m.spec), phase=Phase(m.phase), request_id=m.request_id,
            message=m.message, reason=m.reason, total_bytes=m.total_bytes,
            cached_bytes=m.cached_bytes, files_total=m.files_total, files_cached=m.files_cached,
            chunks=m.chunks, unique_bytes=m.unique_bytes, dedup_saved_bytes=m.dedup_saved_bytes,
            observed_at=m.observed_at.ToDatetime(UTC))


@dataclass(frozen=True)
class AddRequest:
    request_id: str
    spec: DatasetSpec


@dataclass(frozen=True)
class RemoveRequest:
    request_id: str
    name: str
    namespace: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}.{self.name}" if self.namespace else self.name


def request_from_proto(m: cache_pb2.CacheDatasetRequest) -> AddRequest | RemoveRequest:
    if not m.request_id or len(m.request_id) > 128:
        raise InvalidRequestError("a cache request needs a request_id of 1 to 128 characters")
    which = m.WhichOneof("action")
    if which == "add":
        return AddRequest(m.request_id, DatasetSpec.from_proto(m.add))
    if which == "remove":
        return RemoveRequest(m.request_id, _check_name("data set name", m.remove.name),
                             _check_name("namespace", m.remove.namespace, optional=True))
    raise InvalidRequestError(f"cache request {m.request_id!r} says neither add nor remove")
