"""Where a data set's bytes come from: an S3 bucket prefix or a local directory.

A local directory stands in for NFS as well: a mounted NFS export is a directory to its
reader. Every file carries a *version* (S3's ETag; a local file's mtime in ns and size), and
reads are made against it: a file that changed since it was listed raises
:class:`SourceChangedError` instead of mixing two versions' bytes.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import unquote, urlparse

from ._errors import (
    AccessDeniedError,
    InvalidSpecError,
    NoSuchBucketError,
    SourceChangedError,
    SourceError,
    SourceUnreachableError,
)


@dataclass(frozen=True)
class SourceFile:
    path: str  # relative to the source root, "/"-separated
    size: int
    version: str


class Source(Protocol):
    uri: str

    def list(self) -> list[SourceFile]: ...

    def read(self, file: SourceFile, start: int = 0, end: int | None = None) -> bytes:
        """Bytes ``start``..``end`` of ``file`` as listed; SourceChangedError if it changed."""

    def close(self) -> None:
        """Release connections (an S3 client's sockets); the source is not used after."""


def selected(path: str, include: Sequence[str], exclude: Sequence[str]) -> bool:
    """Whether a relative path is in the data set (fnmatch; ``*`` also matches ``/``)."""
    if include and not any(fnmatch.fnmatchcase(path, p) for p in include):
        return False
    return not any(fnmatch.fnmatchcase(path, p) for p in exclude)


def open_source(uri: str, *, include: Sequence[str] = (), exclude: Sequence[str] = (),
                s3_options: dict[str, Any] | None = None) -> Source:
    """The source a URI names. Which sources a reader may use is the caller's to decide (the
    hydrator's rules: alnair_cache_hydrator._source_rules)."""
    parsed = urlparse(uri)
    if parsed.scheme == "file":
        if parsed.netloc not in ("", "localhost"):
            raise InvalidSpecError(f"source {uri!r}: file:// URIs name a local path "
                                   "(file:///data/set), not a host")
        return LocalSource(uri, Path(unquote(parsed.path)), include, exclude)
    if parsed.scheme == "s3":
        if not parsed.netloc:
            raise InvalidSpecError(f"source {uri!r} names no bucket (s3://bucket/prefix)")
        return S3Source(uri, parsed.netloc, parsed.path.lstrip("/"), include, exclude,
                        s3_options or {})
    raise InvalidSpecError(f"source {uri!r}: the scheme must be s3:// or file://")


class LocalSource:
    def __init__(self, uri: str, root: Path, include: Sequence[str], exclude: Sequence[str]) -> None:
        self.uri = uri
        if not root.is_absolute():
            raise InvalidSpecError(f"source {uri!r}: the path must be absolute")
        real = Path(os.path.realpath(root))
        self.root = real
        self.include, self.exclude = tuple(include), tuple(exclude)

    def list(self) -> list[SourceFile]:
        if not self.root.is_dir():
            raise SourceUnreachableError(f"source {self.uri!r}: {self.root} is not a directory "
                                         "(missing, or the mount is gone)")
        files = []
        for dirpath, dirnames, filenames in os.walk(self.root):
            dirnames.sort()
            for name in sorted(filenames):
                full = Path(dirpath) / name
                rel = full.relative_to(self.root).as_posix()
                if not selected(rel, self.include, self.exclude):
                    continue
                try:
                    st = full.stat()
                except OSError:
                    continue  # vanished while listing: not part of this listing
                if full.is_symlink() and not _inside(Path(os.path.realpath(full)), self.root):
                    continue  # a link out of the source is not the source's data
                files.append(SourceFile(rel, st.st_size, _version(st)))
        return files

    def read(self, file: SourceFile, start: int = 0, end: int | None = None) -> bytes:
        full = self.root / file.path
        try:
            with open(full, "rb") as f:
                if not _inside(_opened_path(f.fileno(), full), self.root):
                    # listed inside the source, swapped for a link out of it since
                    raise SourceChangedError(f"{self.uri}/{file.path} now leads outside the "
                                             "source; not read")
                if _version(os.fstat(f.fileno())) != file.version:
                    raise SourceChangedError(f"{self.uri}/{file.path} changed since it was listed")
                f.seek(start)
                data = f.read((end if end is not None else file.size) - start)
                if _version(os.fstat(f.fileno())) != file.version:
                    raise SourceChangedError(f"{self.uri}/{file.path} changed while it was read")
        except FileNotFoundError as e:
            raise SourceChangedError(f"{self.uri}/{file.path} was removed since it was listed") from e
        except OSError as e:
            raise SourceUnreachableError(f"{self.uri}/{file.path}: {e}") from e
        return data


    def close(self) -> None:
        return None  # files are opened per read

def _version(st: os.stat_result) -> str:
    return f"{st.st_mtime_ns}-{st.st_size}"


def _opened_path(fd: int, path: Path) -> Path:
    """The file an open descriptor is (no race with a link swapped after the open)."""
    try:
        return Path(os.readlink(f"/proc/self/fd/{fd}"))
    except OSError:  # no /proc: resolve the name instead
        return Path(os.path.realpath(path))


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


class S3Source:
    """An S3 bucket prefix, through boto3 (endpoint and keys from ``s3_options`` or the
    usual AWS environment: ``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ...). ``s3_options``
    may name a ``profile`` of the AWS shared credentials and config files instead."""

    def __init__(self, uri: str, bucket: str, prefix: str, include: Sequence[str],
                 exclude: Sequence[str], s3_options: dict[str, Any]) -> None:
        self.uri, self.bucket = uri, bucket
        self.prefix = prefix if not prefix or prefix.endswith("/") else prefix + "/"
        self.include, self.exclude = tuple(include), tuple(exclude)
        self._options = s3_options
        self._client: Any = None

    @property
    def client(self) -> Any:
        if self._client is None:
            try:
                import boto3
                from botocore.config import Config
                from botocore.exceptions import BotoCoreError
            except ImportError as e:
                raise SourceError("s3:// sources need boto3: pip install 'alnair-dataset[s3]'") from e
            config = Config(retries={"max_attempts": 2, "mode": "standard"}, connect_timeout=3,
                            read_timeout=30, max_pool_connections=32)
            # A session of its own: boto3's default session caches the credentials it first
            # saw for the life of the process.
            options = dict(self._options)
            profile = options.pop("profile", None)
            try:
                session = boto3.session.Session(profile_name=profile)
            except BotoCoreError as e:  # ProfileNotFound, a file that does not parse
                raise AccessDeniedError(f"{self.uri}: S3 profile {profile!r}: {e}") from e
            self._client = session.client("s3", config=config, **options)
        return self._client

    def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            client.close()

    def list(self) -> list[SourceFile]:
        files = []
        with self._s3_errors("listing"):
            pages = self.client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=self.prefix)
            for page in pages:
                for obj in page.get("Contents", []):
                    rel = obj["Key"][len(self.prefix):]
                    if rel and not rel.endswith("/") and selected(rel, self.include, self.exclude):
                        files.append(SourceFile(rel, int(obj["Size"]), obj["ETag"].strip('"')))
        files.sort(key=lambda f: f.path)
        return files

    def read(self, file: SourceFile, start: int = 0, end: int | None = None) -> bytes:
        end = file.size if end is None else end
        if end <= start:
            return b""
        args: dict[str, Any] = {"Bucket": self.bucket, "Key": self.prefix + file.path,
                                "Range": f"bytes={start}-{end - 1}"}
        if file.version:
            args["IfMatch"] = f'"{file.version}"'
        with self._s3_errors(f"reading {file.path}"):
            return self.client.get_object(**args)["Body"].read()

    def _s3_errors(self, what: str) -> Any:
        return _S3Errors(self, what)


class _S3Errors:
    """Turns botocore's errors into this package's, with the bucket and what was done."""

    def __init__(self, source: S3Source, what: str) -> None:
        self.source, self.what = source, what

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Any, error: BaseException | None, tb: Any) -> bool:
        if error is None or isinstance(error, SourceError):
            return False
        from botocore.exceptions import (
            BotoCoreError,
            ClientError,
            EndpointConnectionError,
            NoCredentialsError,
        )

        where = f"{self.source.uri}: {self.what}"
        if isinstance(error, ClientError):
            code = error.response.get("Error", {}).get("Code", "")
            if code == "NoSuchBucket":
                raise NoSuchBucketError(f"{where}: bucket {self.source.bucket!r} does not exist") from error
            if code in ("PreconditionFailed", "NoSuchKey", "InvalidRange"):
                raise SourceChangedError(f"{where}: the object changed since it was listed "
                                         f"({code})") from error
            if code in ("AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "403"):
                raise AccessDeniedError(f"{where}: access denied ({code}); check the S3 keys "
                                        "the cache uses") from error
            raise SourceError(f"{where}: {code or error}") from error
        if isinstance(error, NoCredentialsError):
            raise AccessDeniedError(
                f"{where}: no S3 credentials in this process; give it AWS_ACCESS_KEY_ID and "
                "AWS_SECRET_ACCESS_KEY (or AWS_PROFILE, ~/.aws/credentials, an instance role) — "
                "in local mode the hydrator has alnair up's environment and a workload "
                "alnair run's") from error
        if isinstance(error, EndpointConnectionError | BotoCoreError | OSError):
            raise SourceUnreachableError(f"{where}: {error}") from error
        return False
