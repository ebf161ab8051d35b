"""A data set as numbered samples, for PyTorch's DataLoader (or anything map-style).

:class:`CachedSamples` needs no torch: a DataLoader takes any object with ``__len__`` and
``__getitem__``. It pickles without its reader (threads and sockets do not cross into a
worker process) and opens one lazily in each worker, so ``num_workers`` > 0 just works.
A DataLoader with a batch size fetches each batch with one call (``__getitems__``), so the
cached samples of a batch come from the tier together.
:func:`loader_options` is the DataLoader configuration that keeps the GPU fed from the
cache: several workers, each prefetching, kept alive across epochs.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

from ._reader import DatasetReader


class CachedSamples:
    """Sample ``i`` is ``transform(bytes of the i-th file)`` (files in sorted order)."""

    def __init__(self, dataset: str | None = None, *, transform: Callable[[bytes], Any] | None = None,
                 include: Callable[[str], bool] | None = None, **reader_options: Any) -> None:
        self.dataset = dataset
        self.transform = transform
        self.reader_options = reader_options
        self._reader: DatasetReader | None = None
        self._pid = os.getpid()
        files = self.reader.files()
        self.paths = [p for p in files if include is None or include(p)]

    @property
    def reader(self) -> DatasetReader:
        if self._reader is None or self._pid != os.getpid():
            self._reader, self._pid = DatasetReader(self.dataset, **self.reader_options), os.getpid()
            if "tier_streams" not in self.reader_options:  # the DataLoader's workers share the server
                self._reader.tier_streams = max(1, self._reader.tier_streams // _loader_workers())
        return self._reader

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> Any:
        data = self.reader.read(self.paths[index])
        return self.transform(data) if self.transform is not None else data

    def __getitems__(self, indices: list[int]) -> list[Any]:
        """A whole batch at once (PyTorch's DataLoader asks so when the data set has this):
        its cached samples come from the tier in one request instead of one each."""
        blobs = self.reader.read_many([self.paths[i] for i in indices])
        return blobs if self.transform is None else [self.transform(b) for b in blobs]

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_reader"] = None
        return state

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None


def _loader_workers() -> int:
    """How many DataLoader workers read beside this process (1 outside a worker); torch is
    not imported for it: a worker process has it already."""
    data = sys.modules.get("torch.utils.data")
    info = data.get_worker_info() if data is not None else None
    return info.num_workers if info is not None else 1


def loader_options(*, workers: int | None = None, batch_size: int = 32) -> dict[str, Any]:
    """Keyword arguments for ``torch.utils.data.DataLoader`` reading through the cache."""
    workers = workers if workers is not None else min(8, os.cpu_count() or 1)
    options: dict[str, Any] = {"batch_size": batch_size, "num_workers": workers,
                               "shuffle": True}
    if workers:
        options |= {"prefetch_factor": 4, "persistent_workers": True}
    return options
