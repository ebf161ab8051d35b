"""Shared by the dataset-cache tests: deterministic data sets and tier invariants."""

from __future__ import annotations

import hashlib
import random
from pathlib import Path
from urllib.parse import unquote

from alnair_dataset import AlluxioTier, DirectoryTier, RedisTier

MIB = 1 << 20


def write_dataset(root: Path, files: int = 6, *, seed: int = 1, size: int = 2 * MIB + 12345,
                  sub: str = "train") -> dict[str, bytes]:
    """``files`` files of random bytes (sizes not multiples of a chunk) under root/sub."""
    rng = random.Random(seed)
    out: dict[str, bytes] = {}
    for i in range(files):
        data = rng.randbytes(size + i * 1000)
        rel = f"{sub}/part-{i:03d}.bin"
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
        out[rel] = data
    return out


def upload(s3, bucket: str, prefix: str, files: dict[str, bytes]) -> None:
    for rel, data in files.items():
        s3.put_object(Bucket=bucket, Key=f"{prefix}/{rel}", Body=data)


Tier = RedisTier | DirectoryTier | AlluxioTier


def reopened(tier: Tier) -> Tier:
    """The same tier as a restarted process would open it (its connection reused)."""
    if isinstance(tier, RedisTier):
        return RedisTier(tier.client, budget_bytes=tier.budget_bytes, prefix=tier.prefix)
    if isinstance(tier, AlluxioTier):
        return AlluxioTier(tier.rest, root=tier.root, budget_bytes=tier.budget_bytes)
    return DirectoryTier(tier.root, budget_bytes=tier.budget_bytes)


def _alluxio_names(tier: AlluxioTier, directory: str) -> dict[str, int]:
    """Name -> length of the entries of ``directory`` (the tier's own ``+`` names left out)."""
    return {e["name"]: e["length"] for e in tier.rest.list(f"{tier.root}/{directory}")
            if not e["name"].startswith("+")}


def stored_chunks(tier: Tier) -> dict[str, set[str]]:
    """Every chunk id in the tier and the data sets referencing it, read key by key."""
    if isinstance(tier, AlluxioTier):
        return {cid: {unquote(r) for r in _alluxio_names(tier, f"refs/{cid}")}
                for cid in _alluxio_names(tier, "chunks")}
    if isinstance(tier, DirectoryTier):
        out = {c.name: set() for c in (tier.root / "chunks").glob("*/*")}
        for ref in (tier.root / "refs").glob("*/*/*"):
            out.setdefault(ref.parent.name, set()).add(unquote(ref.name))
        return out
    client = tier.client
    out: dict[str, set[str]] = {}
    for key in client.scan_iter(match=f"{tier.prefix}:chunk:*", count=1000):
        cid = key.decode().rsplit(":", 1)[1]
        refs = client.smembers(f"{tier.prefix}:refs:{{{cid[:2]}}}:{cid}")
        out[cid] = {r.decode() for r in refs}
    return out


def assert_consistent(tier: Tier) -> None:
    """Usage equals what is stored; no chunk without referrers; every manifest chunk stored."""
    chunks = stored_chunks(tier)
    if isinstance(tier, AlluxioTier):
        sizes = _alluxio_names(tier, "chunks")
        unpinned = [e["name"] for e in tier.rest.list(f"{tier.root}/chunks") if not e["pinned"]]
        assert not unpinned, f"chunks a full worker may evict: {unpinned}"
        assert tier.usage().stored_bytes == sum(sizes.values())
        assert tier.usage().chunks == len(chunks)
        assert all(refs for refs in chunks.values()), "a stored chunk nobody references"
        for cid in chunks:
            data = tier.rest.read(f"{tier.root}/chunks/{cid}")
            assert len(data) == sizes[cid] and hashlib.sha256(data).hexdigest() == cid
        return
    if isinstance(tier, DirectoryTier):
        sizes = {cid: (tier.root / "chunks" / cid[:2] / cid).stat().st_size for cid in chunks}
        assert tier.usage().stored_bytes == sum(sizes.values())
        assert tier.usage().chunks == len(chunks)
        assert all(refs for refs in chunks.values()), "a stored chunk nobody references"
        for cid, (data,) in ((c, tier.get_chunks([c])) for c in chunks):
            assert data is not None and hashlib.sha256(data).hexdigest() == cid
        return
    sizes = {cid: tier.client.strlen(f"{tier.prefix}:chunk:{{{cid[:2]}}}:{cid}") for cid in chunks}
    usage = tier.usage()
    assert usage.stored_bytes == sum(sizes.values())
    assert usage.chunks == len(chunks)
    assert all(refs for refs in chunks.values()), "a stored chunk nobody references"
    for cid, data_len in sizes.items():
        data = tier.client.get(f"{tier.prefix}:chunk:{{{cid[:2]}}}:{cid}")
        assert len(data) == data_len and hashlib.sha256(data).hexdigest() == cid


def hydrate_directly(tier: Tier, name: str, uri: str, *, only: int | None = None,
                     phase: str = "ready", budget: int = 1 << 40) -> None:
    """Put a data set (or its first ``only`` files) in the tier as the hydrator would."""
    from alnair_dataset import Budget, open_source, store_file

    source = open_source(uri)
    tier.set_meta(name, {"source": uri, "include": "[]", "exclude": "[]", "phase": phase,
                         "budget_bytes": str(budget)})
    for f in source.list()[:only]:
        store_file(tier, name, source, f, Budget(tier))
