"""The scheduler's model of the cluster: every card, its capacity and its committed shares.

The committed shares mirror the ``gpu_allocations`` KV bucket, which stays the truth: the
model is rebuilt from it on start and updated only after a compare-and-set commit (or a
release) succeeded, so a crash between the two loses nothing. A card that leaves the
inventory while it still holds shares is kept, unhealthy, until its shares are released —
forgetting it would let a returning card be filled twice.
"""

from __future__ import annotations

from dataclasses import dataclass

from ._domain import Card, Share


class CardState:
    """A card and its shares, with the committed totals kept current (placement reads them
    for every card of every node on every attempt)."""

    __slots__ = ("card", "shares", "used_memory", "used_compute")

    def __init__(self, card: Card, shares: dict[str, Share] | None = None) -> None:
        self.card = card
        self.shares: dict[str, Share] = {}
        self.used_memory = 0
        self.used_compute = 0
        self.replace(list((shares or {}).values()))

    def put(self, share: Share) -> None:
        self.drop(share.workload.uid)
        self.shares[share.workload.uid] = share
        self.used_memory += share.memory_gib
        self.used_compute += share.compute_percent

    def drop(self, uid: str) -> None:
        old = self.shares.pop(uid, None)
        if old is not None:
            self.used_memory -= old.memory_gib
            self.used_compute -= old.compute_percent

    def replace(self, shares: list[Share]) -> None:
        self.shares = {s.workload.uid: s for s in shares}
        self.used_memory = sum(s.memory_gib for s in self.shares.values())
        self.used_compute = sum(s.compute_percent for s in self.shares.values())

    @property
    def free_memory(self) -> int:
        return self.card.memory_gib - self.used_memory

    @property
    def free_compute(self) -> int:
        return self.card.compute_percent - self.used_compute

    @property
    def used_ratio(self) -> float:
        """Mean of the memory and compute fractions committed, 0..1 (more when over)."""
        c = self.card
        mem = self.used_memory / c.memory_gib if c.memory_gib else 1.0
        comp = self.used_compute / c.compute_percent if c.compute_percent else 1.0
        return (mem + comp) / 2


@dataclass(frozen=True)
class NodeStats:
    """A node's healthy cards summed up, so placement can rank and prune whole nodes."""

    load: float  # mean committed ratio of its healthy cards
    min_ratio: float  # least committed healthy card
    max_free_memory: int
    max_free_compute: int
    healthy: int


class Cluster:
    """Nodes → cards → shares, with an index from workload uid to its card.

    Per-node summaries are cached and dropped whenever one of the node's cards changes, so
    a placement over a thousand nodes reads a thousand summaries, not eight thousand cards.
    """

    def __init__(self) -> None:
        self.nodes: dict[str, dict[str, CardState]] = {}
        self.simulated: dict[str, bool] = {}
        self._placed: dict[str, str] = {}  # workload uid -> gpu uuid
        self._where: dict[str, str] = {}  # gpu uuid -> node
        self._stats: dict[str, NodeStats] = {}
        self._largest: tuple[int, int] | None = None

    def node_stats(self, node: str) -> NodeStats:
        cached = self._stats.get(node)
        if cached is not None:
            return cached
        healthy = [s for s in self.nodes.get(node, {}).values() if s.card.healthy]
        if not healthy:
            stats = NodeStats(0.0, 0.0, 0, 0, 0)
        else:
            ratios = [s.used_ratio for s in healthy]
            stats = NodeStats(sum(ratios) / len(ratios), min(ratios),
                              max(s.free_memory for s in healthy),
                              max(s.free_compute for s in healthy), len(healthy))
        self._stats[node] = stats
        return stats

    def _touch(self, node: str) -> None:
        self._stats.pop(node, None)

    # -- inventory ------------------------------------------------------------------------

    def set_inventory(self, node: str, cards: list[Card], simulated: bool = False) -> None:
        """Replace a node's cards; shares on cards that vanished are kept on an unhealthy stub."""
        old = self.nodes.get(node, {})
        self._touch(node)
        self._largest = None
        new: dict[str, CardState] = {}
        for card in cards:
            previous = old.get(card.uuid) or self._find(card.uuid)
            new[card.uuid] = CardState(card, dict(previous.shares) if previous else {})
            if previous is not None and previous.card.node != node:
                self.nodes.get(previous.card.node, {}).pop(card.uuid, None)
                self._touch(previous.card.node)
        for uuid, state in old.items():
            if uuid not in new and state.shares:
                c = state.card
                new[uuid] = CardState(
                    Card(c.node, c.uuid, c.index, c.memory_gib, c.compute_percent, False,
                         "missing from the node's inventory"),
                    state.shares,
                )
        self.nodes[node] = new
        for uuid in old:
            if uuid not in new and self._where.get(uuid) == node:
                del self._where[uuid]
        for uuid in new:
            self._where[uuid] = node
        self.simulated[node] = simulated

    def card(self, uuid: str) -> CardState | None:
        return self._find(uuid)

    def _find(self, uuid: str) -> CardState | None:
        node = self._where.get(uuid)
        return None if node is None else self.nodes.get(node, {}).get(uuid)

    def cards(self) -> list[CardState]:
        return [s for cards in self.nodes.values() for s in cards.values()]

    def largest_card(self) -> tuple[int, int]:
        """(memory GiB, compute %) of the biggest healthy card; (0, 0) with none."""
        if self._largest is None:
            healthy = [s.card for s in self.cards() if s.card.healthy]
            self._largest = (max((c.memory_gib for c in healthy), default=0),
                             max((c.compute_percent for c in healthy), default=0))
        return self._largest

    # -- shares ---------------------------------------------------------------------------

    def set_shares(self, card: Card, shares: list[Share]) -> None:
        """Adopt what KV says a card holds (start-up, or after losing a commit race)."""
        state = self._find(card.uuid)
        if state is None:
            # Allocation known before the inventory: keep it, not placeable until the
            # inventory says the card is there and healthy.
            stub = Card(card.node, card.uuid, card.index, card.memory_gib, card.compute_percent,
                        False, "no inventory received for this card yet")
            state = CardState(stub)
            self.nodes.setdefault(card.node, {})[card.uuid] = state
            self._where[card.uuid] = card.node
        self._touch(state.card.node)
        for uid in list(state.shares):
            self._placed.pop(uid, None)
        state.replace(shares)
        for uid in state.shares:
            self._placed[uid] = card.uuid

    def add_share(self, uuid: str, share: Share) -> None:
        state = self._find(uuid)
        if state is None:
            raise KeyError(f"card {uuid} is not in the model")
        state.put(share)
        self._placed[share.workload.uid] = uuid
        self._touch(state.card.node)

    def remove_share(self, uid: str) -> str | None:
        """Forget a workload's share; the card's uuid, or None when it had none."""
        uuid = self._placed.pop(uid, None)
        if uuid is None:
            return None
        state = self._find(uuid)
        if state is not None:
            state.drop(uid)
            self._touch(state.card.node)
            if not state.shares and not state.card.healthy and state.card.health_reason.startswith(
                    "missing"):
                self.nodes.get(state.card.node, {}).pop(uuid, None)
                self._where.pop(uuid, None)
        return uuid

    def placement_of(self, uid: str) -> tuple[CardState, Share] | None:
        uuid = self._placed.get(uid)
        if uuid is None:
            return None
        state = self._find(uuid)
        if state is None or uid not in state.shares:
            return None
        return state, state.shares[uid]

    def is_placed(self, uid: str) -> bool:
        return uid in self._placed
