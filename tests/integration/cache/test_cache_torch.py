"""A PyTorch DataLoader (CPU, worker processes) reading through the cache: every sample
equals the source, whether the data set is cached, half-cached or not cached.

Real PyTorch: `scripts/test` installs it (the workspace's ``torch`` dependency group).
"""

from __future__ import annotations

import pytest
import torch
from cache_support import hydrate_directly, write_dataset

from alnair_dataset import CachedSamples, loader_options, open_tier


def as_tensor(data: bytes):
    return torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else torch.empty(0)


@pytest.fixture(params=["redis", "alluxio"])
def tier_url(request):
    if request.param == "alluxio":
        return request.getfixturevalue("alluxio")
    return request.getfixturevalue("redis_node")().url


@pytest.mark.parametrize("state", ["cached", "half", "not-cached"])
def test_a_dataloader_reads_every_sample_equal_to_the_source(tier_url, tmp_path, state):
    files = write_dataset(tmp_path / "src", files=12, size=300_000)
    url = tier_url
    tier = open_tier(url, budget_bytes=1 << 40, prefix="t")
    only = {"cached": None, "half": 6, "not-cached": 0}[state]
    hydrate_directly(tier, "ds", f"file://{tmp_path}/src", only=only,
                     phase="ready" if state == "cached" else "hydrating")
    samples = CachedSamples("ds", tier_url=url, prefix="t")  # bytes pass through the loader
    options = {**loader_options(workers=2, batch_size=1), "shuffle": False, "batch_size": None}
    loader = torch.utils.data.DataLoader(samples, **options)
    for epoch in range(2):
        got = list(loader)
        assert got == [files[p] for p in sorted(files)], f"epoch {epoch}"
    # Batches: the DataLoader fetches each with one __getitems__ call (read_many).
    batched = torch.utils.data.DataLoader(samples, batch_size=5, num_workers=2, collate_fn=list)
    got = [blob for batch in batched for blob in batch]
    assert got == [files[p] for p in sorted(files)]
    samples.close()
    tensors = CachedSamples("ds", tier_url=url, prefix="t", transform=as_tensor)
    first = next(iter(torch.utils.data.DataLoader(tensors, batch_size=None, num_workers=1)))
    assert first.shape == (len(files[sorted(files)[0]]),)
    assert int(first[:1000].sum()) == sum(files[sorted(files)[0]][:1000])
    tensors.close()


class StreamsSeen(CachedSamples):
    """Sample i is how many tier streams the reader of the process that read it may use."""

    def __getitem__(self, index: int) -> int:
        return self.reader.tier_streams


def test_dataloader_workers_share_the_tier_streams(redis_node, tmp_path):
    """Each worker's reader gets threads / workers tier streams (eight readers' requests at
    once were served ~3x slower than one at a time each), a reader outside a DataLoader
    all its threads, and an explicit setting wins."""
    write_dataset(tmp_path / "src", files=8, size=1000)
    url = redis_node().url
    hydrate_directly(open_tier(url, budget_bytes=1 << 40, prefix="t"), "ds", f"file://{tmp_path}/src")

    def seen(samples: CachedSamples, workers: int) -> set[int]:
        loader = torch.utils.data.DataLoader(samples, batch_size=None, num_workers=workers)
        return set(loader)

    assert seen(StreamsSeen("ds", tier_url=url, prefix="t"), 2) == {4}
    assert seen(StreamsSeen("ds", tier_url=url, prefix="t", threads=6), 2) == {3}
    assert seen(StreamsSeen("ds", tier_url=url, prefix="t", threads=1), 2) == {1}
    assert seen(StreamsSeen("ds", tier_url=url, prefix="t", tier_streams=5), 2) == {5}
    alone = StreamsSeen("ds", tier_url=url, prefix="t")
    assert seen(alone, 0) == {8}
    alone.close()
