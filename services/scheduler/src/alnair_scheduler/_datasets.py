"""Data locality: where each cached data set is hot, and the score term built on it.

The cache hydrator keeps the latest status of every data set in the ``cache_datasets``
bucket; its ``nodes`` are the nodes whose tier holds the cached bytes locally (empty for a
cluster-wide Redis, which is equally far from every node). A node's *warmth* for one data
set is 1 when the data set is READY there, its progress when it is HYDRATING (or FAILED
with bytes cached: readers hit what is in), and 0 otherwise; for a workload reading several
data sets it is their mean.

The term only reorders: placement filters the cards that fit first, then subtracts
``weight × warmth`` from the primary key the profile ranks by (each profile's primary key
spans 0..1), and adds as much for a node holding none of the workload's data sets but other
hot ones (see :meth:`DatasetLocations.preference`): another data set's node is the last
resort. With weight 1 a node holding all the data beats any node holding none, whatever the
profile prefers; a smaller weight lets the profile win when its own difference is larger;
0 turns the term off. A data set the bucket does not know gives no preference, and the
reason on the decision says so.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from ._cluster import Cluster
from ._domain import Card, Profile, Workload

# How much a node that holds none of a workload's data but other data sets counts against
# it, relative to a node holding all of the workload's own data (1): as much, so that under
# any profile (whose primary keys span 0..1) such a node is taken only when no node without
# hot data fits. Nodes holding some of the workload's own data are never counted against.
OTHERS_SHARE = 1.0


class CachePhase(StrEnum):
    PENDING = "pending"
    HYDRATING = "hydrating"
    READY = "ready"
    FAILED = "failed"
    REMOVED = "removed"
    EVICTED = "evicted"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class DatasetLocation:
    """One data set as the hydrator last reported it (``key``: ``namespace.name`` or, for
    local mode, ``name``)."""

    key: str
    phase: CachePhase
    progress: float
    nodes: tuple[str, ...]

    @property
    def warmth(self) -> float:
        """0..1: how much of the data set a reader on one of ``nodes`` finds locally."""
        if self.phase is CachePhase.READY:
            return 1.0
        if self.phase in (CachePhase.HYDRATING, CachePhase.FAILED):
            return min(max(self.progress, 0.0), 1.0)
        return 0.0


def display_name(key: str) -> str:
    """``imagenet`` of ``team-a.imagenet`` (names and namespaces hold no dots)."""
    return key.rsplit(".", 1)[-1]


class DatasetLocations:
    """The ``cache_datasets`` bucket as the scheduler needs it: data set key → location."""

    def __init__(self) -> None:
        self._by_key: dict[str, DatasetLocation] = {}
        self._per_node: dict[str, float] | None = None  # node → summed warmth of all data sets

    def put(self, location: DatasetLocation) -> None:
        self._by_key[location.key] = location
        self._per_node = None

    def drop(self, key: str) -> None:
        self._by_key.pop(key, None)
        self._per_node = None

    def get(self, key: str) -> DatasetLocation | None:
        return self._by_key.get(key)

    def __len__(self) -> int:
        return len(self._by_key)

    def warmth(self, datasets: Sequence[str]) -> dict[str, float]:
        """Node → mean warmth over ``datasets`` (nodes holding none of them are absent)."""
        if not datasets:
            return {}
        total: dict[str, float] = {}
        for key in datasets:
            loc = self._by_key.get(key)
            if loc is None or not loc.nodes or loc.warmth <= 0:
                continue
            for node in loc.nodes:
                total[node] = total.get(node, 0.0) + loc.warmth
        return {node: w / len(datasets) for node, w in total.items()}

    def preference(self, datasets: Sequence[str], weight: float) -> dict[str, float]:
        """Node → bonus for a workload reading ``datasets``: ``weight`` × its warmth there;
        on a node holding none of them, minus ``OTHERS_SHARE`` × ``weight`` × the warmth of
        the other data sets hot there (at most one data set's worth), so a reader whose data
        node is full takes a cold node that fits rather than another data set's readers'
        room. Empty when none of ``datasets`` is hot anywhere: no preference at all, not even
        that avoidance."""
        own = self.warmth(datasets)
        if weight <= 0 or not own:
            return {}
        if self._per_node is None:
            self._per_node = {}
            for loc in self._by_key.values():
                for node in loc.nodes:
                    self._per_node[node] = self._per_node.get(node, 0.0) + loc.warmth
        prefer = {node: weight * warmth for node, warmth in own.items()}
        for node, total in self._per_node.items():
            if node not in own and total > 0:
                prefer[node] = -weight * OTHERS_SHARE * min(1.0, total)
        return prefer

    def explain(self, datasets: Sequence[str], node: str, fits: Mapping[str, bool],
                weight: float = 1.0) -> list[str]:
        """One reason per data set for placing on ``node``: hot here, hot elsewhere (and why
        not there: ``fits`` says whether a node had a card that fitted), or no preference."""
        out = []
        for key in datasets:
            name = display_name(key)
            loc = self._by_key.get(key)
            if loc is None:
                out.append(f"dataset {name} unknown to the cache (no status in cache_datasets): "
                           "no preference")
                continue
            percent = f"{loc.warmth * 100:.0f}% cached"
            if loc.warmth <= 0:
                out.append(f"dataset {name} not cached ({loc.phase.value}): no preference")
            elif not loc.nodes:
                out.append(f"dataset {name} {loc.phase.value} ({percent}) in a tier local to no "
                           "node: no preference")
            elif weight <= 0:
                out.append(f"dataset {name} hot on {', '.join(loc.nodes)} ({percent}); data "
                           "locality is off (dataset_locality_weight 0)")
            elif node in loc.nodes:
                state = "hot" if loc.phase is CachePhase.READY else loc.phase.value
                out.append(f"dataset {name} {state} on {node} ({percent})")
            else:
                out.append(f"dataset {name} hot on {', '.join(loc.nodes)} ({percent}), not on "
                           f"{node}: {_why_elsewhere(loc.nodes, fits)}")
        return out


def placement_reason(locations: DatasetLocations, cluster: Cluster, w: Workload, card: Card,
                     profile: Profile, weight: float) -> str:
    """Why ``card`` for ``w``, for people (BindDecision.reason): the profile, then what each
    data set it reads had to say. Worked out before the share is committed, so "no card
    there fits" is about the cluster the decision saw."""
    mode = " (MPS: an SM partition)" if card.mps else ""
    parts = [f"{profile.value} profile chose gpu{card.index} on {card.node}{mode}"]
    if w.dataset_error:
        parts.append(f"data sets not read ({w.dataset_error}): no preference")
    if w.datasets and w.request is not None:
        request = w.request
        hot = {n for key in w.datasets if (loc := locations.get(key)) is not None for n in loc.nodes}
        fits = {n: any(s.card.healthy and s.free_memory >= request.memory_gib
                       and s.free_compute >= request.compute_percent
                       for s in cluster.nodes.get(n, {}).values())
                for n in hot if n != card.node}
        parts.extend(locations.explain(w.datasets, card.node, fits, weight))
    return "; ".join(parts)


def _why_elsewhere(nodes: Sequence[str], fits: Mapping[str, bool]) -> str:
    if not any(fits.get(n, False) for n in nodes):
        return "no card there fits the request"
    return "the profile's preference outweighed data locality there"
