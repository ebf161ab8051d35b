"""Filter and score: which card of which node takes a request, or why none can.

One workload goes on exactly one card: a node passes when one of its healthy cards has the
requested GiB and percent free. Among the passing cards the profile decides:

* ``cost-saving`` packs: the most-used node (ties by name), then the most-used card on it
  that still fits, so whole nodes stay empty for big jobs (and can be scaled away);
* ``high-performance`` spreads: the least-used card, and among equally used cards the
  least-used node — tenants interfere through the card they share, so the card comes first;
* ``utilisation-aware`` prefers the card with the most *measured* headroom (peak SM
  utilisation over the window, or the committed compute where no fresh sample exists), and
  also refuses a card whose measured memory in use leaves too little room.

Ties break on node name and card index so the same state always gives the same answer.
``overlay`` adds uncommitted usage (a gang being planned) on top of the committed shares.
``prefer`` (node → bonus, the data-locality term of ``_datasets``) is subtracted from the
profile's primary key of every card that fits: it reorders the fitting cards, never adds one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from ._cluster import CardState, Cluster
from ._domain import Profile, Rejection, Request
from ._utilisation import UtilisationTracker

Overlay = dict[str, tuple[int, int]]
SHOWN_NODES = 3


@dataclass(frozen=True)
class NoFit:
    """No card fits: the per-node reasons and a one-line summary for people."""

    code: str
    summary: str
    rejections: tuple[Rejection, ...]


@dataclass(frozen=True)
class _Free:
    state: CardState
    memory: int
    compute: int
    measured_util: float | None


def _free(state: CardState, overlay: Overlay, util: UtilisationTracker | None) -> _Free:
    extra_m, extra_c = overlay.get(state.card.uuid, (0, 0))
    memory = state.free_memory - extra_m
    compute = state.free_compute - extra_c
    measured = util.load(state.card.uuid) if util is not None else None
    if measured is None:
        return _Free(state, memory, compute, None)
    measured_free = math.floor(state.card.memory_gib - measured.memory_used_gib)
    return _Free(state, min(memory, measured_free), compute, measured.utilization_ratio)


def _ratio(state: CardState, overlay: Overlay, add: Request | None = None) -> float:
    c = state.card
    extra_m, extra_c = overlay.get(c.uuid, (0, 0))
    mem = state.used_memory + extra_m + (add.memory_gib if add else 0)
    comp = state.used_compute + extra_c + (add.compute_percent if add else 0)
    return (mem / c.memory_gib + comp / max(c.compute_percent, 1)) / 2


def choose_card(cluster: Cluster, request: Request, profile: Profile,
                util: UtilisationTracker | None = None,
                overlay: Overlay | None = None,
                prefer: Mapping[str, float] | None = None) -> CardState | NoFit:
    """The best card for ``request`` under ``profile``, or why no card fits.

    The search reads every card once (the committed totals are kept on each card); the
    per-node reasons are only worked out when nothing fits.
    """
    overlay = overlay or {}
    tracker = util if profile is Profile.UTILISATION_AWARE else None
    if not overlay and tracker is None and not prefer:
        found = _ranked(cluster, request, profile)
        return found if found is not None else _why_not(cluster, request, overlay, None)
    need_m, need_c = request.memory_gib, request.compute_percent
    best: CardState | None = None
    best_key: tuple[float | str | int, ...] | None = None
    for cards in cluster.nodes.values():
        fitting: list[_Free] = []
        load_sum, healthy = 0.0, 0
        for state in cards.values():
            card = state.card
            if not card.healthy:
                continue
            healthy += 1
            extra = overlay.get(card.uuid) if overlay else None
            em, ec = extra if extra else (0, 0)
            load_sum += ((state.used_memory + em) / card.memory_gib
                         + (state.used_compute + ec) / max(card.compute_percent, 1)) / 2
            if (card.memory_gib - state.used_memory - em < need_m
                    or card.compute_percent - state.used_compute - ec < need_c):
                continue
            f = _free(state, overlay, tracker) if tracker is not None else \
                _Free(state, card.memory_gib - state.used_memory - em,
                      card.compute_percent - state.used_compute - ec, None)
            if f.memory >= need_m:
                fitting.append(f)
        if not fitting:
            continue
        node_load = load_sum / healthy
        bonus = prefer.get(fitting[0].state.card.node, 0.0) if prefer else 0.0
        for f in fitting:
            key = _key(profile, f, node_load, overlay, request)
            if bonus:
                key = (float(key[0]) - bonus, *key[1:])
            if best_key is None or key < best_key:
                best, best_key = f.state, key
    if best is not None:
        return best
    return _why_not(cluster, request, overlay, tracker)


def _why_not(cluster: Cluster, request: Request, overlay: Overlay,
             tracker: UtilisationTracker | None) -> NoFit:
    rejections = []
    for node in sorted(cluster.nodes):
        cards = cluster.nodes[node]
        frees = [_free(s, overlay, tracker) for s in cards.values() if s.card.healthy]
        rejections.append(_reject(node, cards, frees, request, tracker is not None))
    return _no_fit(request, rejections, cluster)


def _ranked(cluster: Cluster, request: Request, profile: Profile) -> CardState | None:
    """Cost-saving and high-performance without reading every card: nodes are ranked by
    their cached summaries and the search stops as soon as no later node can win."""
    need_m, need_c = request.memory_gib, request.compute_percent
    candidates = []
    for node in cluster.nodes:
        st = cluster.node_stats(node)
        if st.healthy and st.max_free_memory >= need_m and st.max_free_compute >= need_c:
            candidates.append((node, st))
    best: CardState | None = None
    best_key: tuple[float | str | int, ...] | None = None
    if profile is Profile.COST_SAVING:
        candidates.sort(key=lambda x: (-x[1].load, x[0]))
    else:
        candidates.sort(key=lambda x: (x[1].min_ratio, x[1].load, x[0]))
    for node, st in candidates:
        if best is not None and profile is Profile.COST_SAVING:
            break  # the fullest node with a fitting card wins outright
        if best_key is not None and (st.min_ratio, st.load, node) > best_key[:3]:
            break  # every card here ranks after the best found
        for state in cluster.nodes[node].values():
            card = state.card
            if not (card.healthy and state.free_memory >= need_m and state.free_compute >= need_c):
                continue
            f = _Free(state, state.free_memory, state.free_compute, None)
            key = _key(profile, f, st.load, {}, request)
            if best_key is None or key < best_key:
                best, best_key = state, key
    return best


def _key(profile: Profile, f: _Free, node_load: float, overlay: Overlay,
         request: Request) -> tuple[float | str | int, ...]:
    card = f.state.card
    if profile is Profile.COST_SAVING:
        return (-node_load, card.node, -_ratio(f.state, overlay, request), card.index)
    if profile is Profile.HIGH_PERFORMANCE:
        return (_ratio(f.state, overlay), node_load, card.node, card.index)
    committed = 1 - f.compute / max(card.compute_percent, 1)
    load = committed if f.measured_util is None else max(committed, f.measured_util)
    return (load, node_load, card.node, card.index)


def _reject(node: str, cards: dict[str, CardState], frees: list[_Free], request: Request,
            measured: bool) -> tuple[int, Rejection]:
    if not cards:
        return (-1, Rejection(node, "no-gpus", "node has no GPUs in its inventory"))
    if not frees:
        reasons = "; ".join(f"gpu{s.card.index}: {s.card.health_reason or 'unhealthy'}"
                            for s in sorted(cards.values(), key=lambda s: s.card.index))
        return (-1, Rejection(node, "unhealthy", f"no healthy GPU ({reasons})"))
    mem_ok = [f for f in frees if f.memory >= request.memory_gib]
    if mem_ok:
        code = "insufficient-compute"
    elif measured and any(f.state.free_memory >= request.memory_gib for f in frees):
        code = "insufficient-measured-memory"
    else:
        code = "insufficient-memory"
    top = max(frees, key=lambda f: (f.memory, f.compute))
    listed = ", ".join(f"gpu{f.state.card.index} {f.memory} GiB/{f.compute} %"
                       for f in sorted(frees, key=lambda f: f.state.card.index))
    return (top.memory, Rejection(node, code, f"{request} requested; free: {listed}"))


def _no_fit(request: Request, rejections: list[tuple[int, Rejection]], cluster: Cluster) -> NoFit:
    if not rejections:
        return NoFit("no-nodes", "no node with Alnair GPUs is known yet (no inventory received)", ())
    ordered = sorted(rejections, key=lambda r: (-r[0], r[1].node))
    codes = {r.code for _, r in ordered}
    code = codes.pop() if len(codes) == 1 else "insufficient-resources"
    shown = []
    for _, r in ordered[:SHOWN_NODES]:
        shown.append(f"{r.node}: {r.message.split('free: ', 1)[-1]}")
    more = len(ordered) - SHOWN_NODES
    tail = f" (and {more} more nodes)" if more > 0 else ""
    summary = f"no card with {request} free: " + "; ".join(shown) + tail
    return NoFit(code, summary, tuple(r for _, r in ordered))


def too_big(cluster: Cluster, request: Request) -> str | None:
    """Why ``request`` exceeds every healthy card, or None; such a request is never split."""
    mem, comp = cluster.largest_card()
    if mem == 0:
        return None
    if request.memory_gib > mem:
        return (f"{request.memory_gib} GiB requested, but the largest card has {mem} GiB; Alnair "
                "places a workload on one card and never splits it across cards: ask for at most "
                f"{mem} GiB, or request whole GPUs (nvidia.com/gpu) from the default scheduler")
    if request.compute_percent > comp:
        return f"{request.compute_percent} % compute requested, but the largest card offers {comp} %"
    return None
