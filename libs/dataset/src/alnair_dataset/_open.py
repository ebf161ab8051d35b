"""One URL names a tier: ``redis://host:port/db``, ``redis-cluster://host:port[,...]``,
``alluxio://proxy-host:port[/root]`` (an Alluxio 2.9 proxy) or ``dir:///absolute/path``
(the local-mode directory tier)."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote, urlparse

from ._alluxio_tier import AlluxioTier
from ._directory_tier import DirectoryTier
from ._errors import InvalidSpecError
from ._redis_tier import RedisTier
from ._tier import CacheTier

REDIS_SCHEMES = ("redis://", "rediss://", "redis-cluster://")
SCHEMES = (*REDIS_SCHEMES, "alluxio://", "dir://")


def open_tier(url: str, *, budget_bytes: int, prefix: str = "alnair",
              timeout: float = 2.0) -> CacheTier:
    """The tier ``url`` names; ``prefix`` keeps several installations apart in one tier."""
    if url.startswith("dir://"):
        parsed = urlparse(url)
        if parsed.netloc or not parsed.path.startswith("/"):
            raise InvalidSpecError(f"tier URL {url!r}: write dir:///absolute/path")
        return DirectoryTier(Path(unquote(parsed.path)) / prefix, budget_bytes=budget_bytes)
    if url.startswith("alluxio://"):
        return AlluxioTier.from_url(url, budget_bytes=budget_bytes, prefix=prefix, timeout=timeout)
    if url.startswith(REDIS_SCHEMES):
        return RedisTier.from_url(url, budget_bytes=budget_bytes, prefix=prefix, timeout=timeout)
    raise InvalidSpecError(f"tier URL {url!r} must start with one of {', '.join(SCHEMES)}")
