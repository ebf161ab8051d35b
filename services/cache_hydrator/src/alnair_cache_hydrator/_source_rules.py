"""Which sources each namespace may have the cache read: the operator's rules.

The hydrator reads every source with its own identity — the S3 credentials of its pod or
node, the directories its node mounts — for every tenant alike. Without rules a tenant could
name another tenant's bucket or directory in a Dataset and read it back from the cache (a
confused deputy). So a source is hydrated only when a rule allows it for the data set's
namespace:

    ALNAIR_CACHE_ALLOWED_SOURCES="team-a=s3://team-a-data,team-b=s3://shared/b,s3://public-sets"

Each comma-separated rule is ``[NAMESPACE=]PREFIX``: a rule without a namespace applies to
every namespace and to local mode's data sets (which have none); ``PREFIX`` is ``s3://``
(every bucket), ``s3://bucket``, ``s3://bucket/key/prefix`` (whole path segments: ``s3://b/a``
allows ``s3://b/a/x``, not ``s3://b/ab``) or ``file:///directory``. Each directory of
``ALNAIR_CACHE_ALLOWED_ROOTS`` is a ``file://`` rule for every namespace. Directories are
compared after resolving links, so ``file:///data/a/../b`` is ``/data/b``. S3 prefixes with
empty, ``.`` or ``..`` segments are refused outright: S3 keeps them literally, but a server
backed by a file system may resolve them out of the allowed prefix.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

from alnair_dataset import InvalidSpecError, PathNotAllowedError

_NAMESPACE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
VARIABLE = "ALNAIR_CACHE_ALLOWED_SOURCES"


@dataclass(frozen=True)
class SourceRule:
    namespace: str | None  # None: every namespace, and local mode
    scheme: str  # "s3" or "file"
    bucket: str  # s3: "" for every bucket
    path: tuple[str, ...]  # s3: key prefix segments; file: the directory's segments as given

    def __str__(self) -> str:
        if self.scheme == "file":
            return "file://" + "/" + "/".join(self.path)
        return "s3://" + "/".join((self.bucket, *self.path)) if self.bucket else "s3://"

    def applies_to(self, namespace: str) -> bool:
        return self.namespace is None or self.namespace == namespace


class SourceRules:
    """The operator's rules; :meth:`check` refuses a source no rule allows for a namespace."""

    def __init__(self, rules: Iterable[SourceRule]) -> None:
        self.rules = tuple(rules)

    @classmethod
    def parse(cls, sources: str, roots: str = "") -> SourceRules:
        """Rules from ``ALNAIR_CACHE_ALLOWED_SOURCES`` and ``ALNAIR_CACHE_ALLOWED_ROOTS``'s
        directories; ValueError names the rule that is wrong and the form it should have."""
        rules = [_parse_rule(item) for item in _items(sources)]
        for root in _items(roots):
            if not Path(root).is_absolute():
                raise ValueError(f"allowed root {root!r} must be an absolute directory")
            rules.append(SourceRule(None, "file", "", _segments(root)))
        return cls(rules)

    def _allowing(self, uri: str) -> list[SourceRule]:
        """The rules that allow ``uri``, for whichever namespaces they name."""
        parsed = urlparse(uri)
        if parsed.scheme == "s3":
            segments = _s3_segments(uri, parsed.path)
            return [r for r in self.rules if r.scheme == "s3" and r.bucket in ("", parsed.netloc)
                    and segments[:len(r.path)] == r.path]
        if parsed.scheme == "file":
            real = Path(os.path.realpath(unquote(parsed.path)))
            return [r for r in self.rules if r.scheme == "file" and (
                real == (root := Path(os.path.realpath("/" + "/".join(r.path))))
                or root in real.parents)]
        return []

    def check(self, namespace: str, uri: str) -> None:
        parsed = urlparse(uri)
        if parsed.scheme not in ("s3", "file") or any(
                r.applies_to(namespace) for r in self._allowing(uri)):
            return  # open_source refuses other schemes with its own message
        if parsed.scheme == "file":
            real = os.path.realpath(unquote(parsed.path))
            uri = f"{uri} (resolved: {real})" if real != unquote(parsed.path) else uri
        applicable = [r for r in self.rules if r.applies_to(namespace)]
        whose = f"namespace {namespace!r}" if namespace else "local data sets"
        mine = ", ".join(str(r) for r in applicable) or "none"
        example = "s3://bucket/prefix" if parsed.scheme == "s3" else "file:///directory"
        raise PathNotAllowedError(
            f"source {uri} is outside what the cache may read for {whose} (allowed: {mine}); "
            f"the operator allows more on the cache hydrator with {VARIABLE}="
            f"'{namespace + '=' if namespace else ''}{example}'"
            + ("" if parsed.scheme == "s3" else " or ALNAIR_CACHE_ALLOWED_ROOTS (every namespace)"))

    def readers(self, uri: str) -> frozenset[str] | None:
        """The namespaces the rules let cache ``uri``; None when a rule for every namespace
        does (then any tenant may cache it, and its chunks are shared by all: see the
        service's chunk addresses)."""
        rules = self._allowing(uri)
        if any(r.namespace is None for r in rules):
            return None
        return frozenset(r.namespace for r in rules if r.namespace is not None)


_PROFILE = re.compile(r"^[A-Za-z0-9_.+@-]{1,64}$")


def parse_profiles(text: str) -> dict[str, str]:
    """``NAMESPACE=PROFILE,...`` (``ALNAIR_CACHE_S3_PROFILES``): the profile of the AWS shared
    credentials and config files each namespace's S3 sources are read with, so that each
    tenant's data sets are read with keys that reach only its buckets. A namespace not named
    is read with the process's default credentials."""
    profiles: dict[str, str] = {}
    for item in _items(text):
        namespace, sep, profile = (p.strip() for p in item.partition("="))
        if not sep or not _NAMESPACE.match(namespace) or not _PROFILE.match(profile):
            raise ValueError(f"ALNAIR_CACHE_S3_PROFILES entry {item!r} must be NAMESPACE=PROFILE "
                             "(a namespace, then a profile name of the AWS credentials file)")
        if profiles.setdefault(namespace, profile) != profile:
            raise ValueError(f"ALNAIR_CACHE_S3_PROFILES names two profiles for {namespace!r}")
    return profiles


def _parse_rule(item: str) -> SourceRule:
    namespace: str | None = None
    prefix = item
    head, sep, tail = item.partition("=")
    if sep and "://" not in head:  # an '=' inside a URI is not a namespace's
        namespace, prefix = head.strip(), tail.strip()
        if not _NAMESPACE.match(namespace):
            raise ValueError(f"{VARIABLE} rule {item!r}: {namespace!r} is not a namespace "
                             "(a DNS-1123 label); leave 'NAMESPACE=' out for every namespace")
    parsed = urlparse(prefix)
    if parsed.scheme == "s3":
        if parsed.query or parsed.fragment:
            raise ValueError(f"{VARIABLE} rule {item!r}: an S3 prefix has no query or fragment")
        try:
            segments = _s3_segments(prefix, parsed.path)
        except InvalidSpecError as e:
            raise ValueError(f"{VARIABLE} rule {item!r}: {e}") from None
        if segments and not parsed.netloc:
            raise ValueError(f"{VARIABLE} rule {item!r}: a key prefix needs its bucket")
        return SourceRule(namespace, "s3", parsed.netloc, segments)
    if parsed.scheme == "file" and parsed.netloc in ("", "localhost") and parsed.path.startswith("/"):
        return SourceRule(namespace, "file", "", _segments(unquote(parsed.path)))
    raise ValueError(f"{VARIABLE} rule {item!r} must be [NAMESPACE=]s3://[bucket[/prefix]] "
                     "or [NAMESPACE=]file:///directory")


def _items(text: str) -> list[str]:
    """The comma-separated entries of a setting, blanks dropped."""
    return [i.strip() for i in text.split(",") if i.strip()]


def _segments(path: str) -> tuple[str, ...]:
    return tuple(s for s in path.split("/") if s)


def _s3_segments(uri: str, path: str) -> tuple[str, ...]:
    """A key prefix's segments; a trailing slash adds none. InvalidSpecError for empty, '.'
    or '..' segments, which a file-system-backed S3 server may resolve."""
    key = path.lstrip("/").rstrip("/")
    if not key:
        return ()
    segments = tuple(key.split("/"))
    if path.startswith("//") or any(s in ("", ".", "..") for s in segments):
        raise InvalidSpecError(f"{uri}: the key prefix has an empty, '.' or '..' segment; "
                               "name the prefix without them")
    return segments
