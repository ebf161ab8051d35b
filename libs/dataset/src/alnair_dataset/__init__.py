"""alnair_dataset: the dataset cache's tier and the data client training code reads with.

Few dependencies on purpose (redis, fsspec; boto3 for s3:// sources, requests for an
``alluxio://`` tier): it is installed into
arbitrary training images and knows nothing of the platform's bus. The hydrator service
uses the same tier code to write what readers read.

``mount`` (the ``[mount]`` extra, libfuse from the OS) presents data sets as a read-only
file tree, for code that opens paths.

Errors: every exception is a :class:`DatasetError`; its ``reason`` is the code a
CacheDatasetStatus carries and ``temporary`` says whether retrying can help.
"""

from ._alluxio_tier import AlluxioTier
from ._chunking import CHUNK_BYTES, chunk_id, content_defined_chunks, fixed_chunks, keyed_chunk_ids
from ._directory_tier import DirectoryTier
from ._errors import (
    AccessDeniedError,
    CapacityError,
    DatasetError,
    InvalidSpecError,
    NoSuchBucketError,
    PathNotAllowedError,
    SourceChangedError,
    SourceError,
    SourceUnreachableError,
    TierPermissionError,
    TierUnavailableError,
)
from ._filesystem import DatasetFileSystem
from ._manifest import FileEntry
from ._mount import MountError, is_mounted, mount, spawn_mount, unmount
from ._open import open_tier
from ._reader import DatasetEnvironment, DatasetReader, ReadStats, dataset_environment, dataset_variable
from ._redis_tier import RedisTier, connect
from ._samples import CachedSamples, loader_options
from ._sources import LocalSource, S3Source, Source, SourceFile, open_source, selected
from ._store import Budget, StoreResult, gib, store_file
from ._tier import CacheTier, DatasetFootprint, TierUsage

__all__ = [
    "CHUNK_BYTES",
    "AccessDeniedError",
    "AlluxioTier",
    "Budget",
    "CacheTier",
    "CachedSamples",
    "CapacityError",
    "DatasetEnvironment",
    "DatasetError",
    "DatasetFileSystem",
    "DatasetFootprint",
    "DatasetReader",
    "DirectoryTier",
    "FileEntry",
    "InvalidSpecError",
    "LocalSource",
    "MountError",
    "NoSuchBucketError",
    "PathNotAllowedError",
    "ReadStats",
    "RedisTier",
    "S3Source",
    "Source",
    "SourceChangedError",
    "SourceError",
    "SourceFile",
    "SourceUnreachableError",
    "StoreResult",
    "TierPermissionError",
    "TierUnavailableError",
    "TierUsage",
    "chunk_id",
    "keyed_chunk_ids",
    "connect",
    "content_defined_chunks",
    "dataset_environment",
    "dataset_variable",
    "fixed_chunks",
    "gib",
    "is_mounted",
    "loader_options",
    "mount",
    "open_source",
    "open_tier",
    "selected",
    "spawn_mount",
    "store_file",
    "unmount",
]
