"""Read-only access to the cache tier for the pods of one Kubernetes namespace.

A training pod that reads its data set through the cache needs the tier's address and a
credential. The hydrator's own credential would let any tenant overwrite or delete every data
set, so each namespace gets a tier user of its own that can read only that namespace's data
sets (their descriptions and manifests) and chunks by id, and write nothing — not even its
readers' leases, since any write would let a tenant fill the memory every namespace shares:
a read-only user of a Redis tier (``RedisTier.grant_reader``).

The password is derived, not stored: HMAC-SHA256 of the namespace under the reader key
(Secret ``alnair-credentials``, key ``cache-reader-key``). The hydrator, which holds the
tier's admin password, creates the users of the namespaces it holds data sets for; the
admission webhook writes the same credential into the tier URL it hands the pod. So no
credential crosses the bus, and no component needs to write Secrets in tenants'
namespaces (which would take a cluster-wide permission to write any Secret). The price: the
credential is in the pod's environment, which whoever can read pods in that namespace can
see — the tenants entitled to it, and no one else's.

Only the Redis tier has users; a ``dir:///`` tier is a node's directory and Alluxio 2.9's
open-source proxy authenticates no one, so pods are given neither (they read the source).
"""

from __future__ import annotations

import hashlib
import hmac
import re
from typing import Annotated
from urllib.parse import quote, urlparse

from pydantic import AfterValidator, SecretStr

USER_PREFIX = "alnair-reader-"
SCHEMES = ("redis", "rediss", "redis-cluster")
# A Kubernetes namespace is a DNS label: no dots, so "<namespace>." ends it in a tier key.
_NAMESPACE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def reader_user(namespace: str) -> str:
    """The tier user of ``namespace``'s pods; ValueError for a name that is not a namespace."""
    if not _NAMESPACE.match(namespace):
        raise ValueError(f"{namespace!r} is not a Kubernetes namespace name (a DNS label)")
    return USER_PREFIX + namespace


def check_key(key: str) -> str:
    """``key`` if it is empty (no users) or long enough to derive passwords from."""
    if key and len(key) < 16:
        raise ValueError("the cache reader key must be at least 16 characters "
                         "(scripts/bus-credentials writes a random one into alnair-credentials)")
    return key


def _checked(value: SecretStr) -> SecretStr:
    check_key(value.get_secret_value())
    return value


ReaderKey = Annotated[SecretStr, AfterValidator(_checked)]
"""A settings field holding the reader key (ALNAIR_CACHE_READER_KEY), checked on load."""


def reader_password(key: str, namespace: str) -> str:
    """The password of ``reader_user(namespace)``, derived from the reader key."""
    if not check_key(key):
        raise ValueError("no cache reader key to derive a tier user's password from")
    reader_user(namespace)  # validates
    digest = hmac.new(key.encode(), f"alnair-cache-reader:{namespace}".encode(), hashlib.sha256)
    return digest.hexdigest()


def has_users(tier_url: str) -> bool:
    """Whether the tier at ``tier_url`` can hold per-namespace users."""
    return urlparse(tier_url).scheme in SCHEMES


def reader_url(tier_url: str, key: str, namespace: str) -> str:
    """``tier_url`` with the namespace's reader credential in place of any it carries."""
    parsed = urlparse(tier_url)
    if parsed.scheme not in SCHEMES:
        raise ValueError(f"tier {tier_url!r} has no users (only {', '.join(SCHEMES)} tiers do)")
    hosts = parsed.netloc.rpartition("@")[2]
    credential = f"{quote(reader_user(namespace), safe='')}:{reader_password(key, namespace)}"
    return parsed._replace(netloc=f"{credential}@{hosts}").geturl()
