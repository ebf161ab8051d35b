"""The scheduler's brain: the model, kept current from events, and the placement cycle.

Events only update the model and wake the cycle; the cycle places every pending workload in
arrival order (gangs at the position of their oldest member). A placement is committed with
compare-and-set in KV *before* it is announced, and the model follows KV, so the worst a
crash can do is leave a committed share unannounced — re-announced when the restarted
scheduler has replayed the events. Until that replay is done the cycle does not run: a
workload that looks pending early in the replay may have finished later in it.

An event about a workload that holds a share is checked before it changes anything: it must
come from the adapter of the workload's mode and name the node the share is committed on
(any adapter may publish any workload's events on the bus). An implausible one is refused
with its reason, logged and counted, and frees nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Mapping

from alnair_common import AlnairError, get_logger

from . import _metrics
from ._cluster import Cluster
from ._convert import adapter_of_mode
from ._datasets import DatasetLocation, DatasetLocations, placement_reason
from ._domain import (
    WRONG_NODE,
    WRONG_SOURCE,
    Adapter,
    Assignment,
    Card,
    Failure,
    Gang,
    ImplausibleEventError,
    Phase,
    Profile,
    Share,
    Workload,
    WorkloadId,
)
from ._errors import CardFullError, InvalidRequestError
from ._gang_cycle import place_gang
from ._outbox import Outbox
from ._placement import NoFit, choose_card, too_big
from ._store import AllocationStore
from ._utilisation import UtilisationTracker

log = get_logger("alnair.scheduler")
MAX_BIND_FAILURES = 5


class Engine:
    def __init__(self, store: AllocationStore, outbox: Outbox, *, instance: str,
                 default_profile: Profile, scheduler_name: str,
                 util: UtilisationTracker | None = None,
                 clock: Callable[[], float] = time.time,
                 gang_reserve_after_seconds: float = 30.0,
                 dataset_locality_weight: float = 1.0) -> None:
        self.store = store
        self.outbox = outbox
        self.instance = instance
        self.default_profile = default_profile
        self.scheduler_name = scheduler_name
        self.util = util or UtilisationTracker()
        self.clock = clock
        self.gang_reserve_after = gang_reserve_after_seconds
        self.cluster = Cluster()
        self.datasets = DatasetLocations()
        self.locality_weight = dataset_locality_weight
        self.workloads: dict[str, Workload] = {}
        # Pending and not yet committed: what a cycle looks at (never the whole model).
        self.waiting: set[str] = set()
        self.gangs: dict[str, Gang] = {}
        self._last_seq: dict[str, int] = {}
        self._inventory_at: dict[str, float] = {}
        self._bind_failures: dict[str, int] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self.unannounced: dict[str, tuple[Workload, Assignment, str]] = {}
        # Placements whose decision is being published right now (not by ``announce``).
        self._announcing: set[str] = set()
        self._announce_tasks: set[asyncio.Task[None]] = set()
        self._announce_slots = asyncio.Semaphore(64)
        self.active = False
        self.kick = asyncio.Event()

    # -- model updates --------------------------------------------------------------------

    async def restore(self) -> int:
        """Adopt every committed share from KV; the number of shares adopted."""
        count = 0
        for card, shares in await self.store.load_all():
            self.cluster.set_shares(card, shares)
            count += len(shares)
        return count

    def on_inventory(self, node: str, cards: list[Card], observed_at: float,
                     simulated: bool = False) -> None:
        if observed_at and observed_at < self._inventory_at.get(node, 0.0):
            return
        self._inventory_at[node] = observed_at
        self.cluster.set_inventory(node, cards, simulated)
        self.kick.set()

    def on_dataset(self, location: DatasetLocation) -> None:
        """A data set's latest status: where it is hot now. Waiting workloads that read it
        are placed with the news on the next cycle."""
        self.datasets.put(location)
        self.kick.set()

    def on_dataset_gone(self, key: str) -> None:
        self.datasets.drop(key)

    def on_gang(self, g: Gang) -> None:
        old = self.gangs.get(g.key)
        if old is not None:
            # Our own verdicts and what we last wrote survive the echo of our status patch.
            g.last_status = old.last_status
            if old.failed_reason and not g.deleted:
                g.phase, g.failed_reason = old.phase, old.failed_reason
            elif old.phase == "Scheduled" and g.phase == "Pending":
                g.phase = old.phase
        self.gangs[g.key] = g
        self.kick.set()

    async def on_workload(self, w: Workload, assigned_gpu: str = "") -> None:
        """Apply a workload event; raises :class:`ImplausibleEventError` (after logging and
        counting it) for one its workload's adapter cannot have sent, which changes nothing —
        not even the last sequence, so the real event with that sequence still counts."""
        uid = w.ref.uid
        if w.sequence and w.sequence <= self._last_seq.get(uid, 0):
            return
        self._refuse_implausible(w)
        self._last_seq[uid] = w.sequence or self._last_seq.get(uid, 0)
        if w.phase is Phase.FINISHED:
            self.workloads.pop(uid, None)
            self.waiting.discard(uid)
            self.unannounced.pop(uid, None)
            self._bind_failures.pop(uid, None)
            self.outbox.forget(uid)
            await self.release(uid, assigned_gpu)
            return
        if w.scheduler_name != self.scheduler_name:
            return
        known = self.workloads.get(uid)
        if known is not None and known.phase is not Phase.PENDING and w.phase is Phase.PENDING:
            return  # a late pending echo after we saw it bound
        self.workloads[uid] = w
        if w.phase is Phase.PENDING:
            if not self.cluster.is_placed(uid):
                self.waiting.add(uid)
            self.kick.set()
        else:
            self.waiting.discard(uid)
            self.unannounced.pop(uid, None)
            if assigned_gpu and not self.cluster.is_placed(uid):
                await self._adopt(w, assigned_gpu)

    def _refuse_implausible(self, w: Workload) -> None:
        """Raise if ``w`` is about a workload holding a share and cannot be its adapter's.

        Only a workload with a committed share is checked: that is what an event could free
        (a terminal event) or move. Its adapter is the one of its mode (the share keeps the
        mode, so this holds right after a restart too); its node is the one its share is
        committed on. An event naming no node is plausible only until the adapter has said
        where the workload runs: a pod deleted before its binding has no node.
        """
        placed = self.cluster.placement_of(w.ref.uid)
        if placed is None:
            return
        state, share = placed
        known = self.workloads.get(w.ref.uid)
        mode = share.workload.mode or (known.ref.mode if known is not None else 0) or w.ref.mode
        expected = adapter_of_mode(mode)
        allowed = {expected} if expected is not None else set(Adapter)
        node = state.card.node
        reported = known.node if known is not None and known.phase in (
            Phase.BOUND, Phase.RUNNING) else ""
        problem = None
        if Adapter.of_source(w.source) not in allowed:
            problem = (WRONG_SOURCE, f"sent by {w.source or 'an unnamed source'}, but this "
                       f"workload's events come from {' or '.join(sorted(allowed))}")
        elif w.node and w.node != node:
            problem = (WRONG_NODE, f"it names node {w.node}, but the workload's share is "
                       f"committed on {node}")
        elif not w.node and reported:
            problem = (WRONG_NODE, f"it names no node, but {reported} reported running it")
        if problem is None:
            return
        reason, detail = problem
        _metrics.EVENTS_REFUSED.labels(reason).inc()
        # Replaying the history after a restart refuses it again: said once, when it arrived.
        (log.warning if self.active else log.info)(
            "implausible workload event refused", reason=reason, workload=str(w.ref),
            uid=w.ref.uid, phase=w.phase.value, source=w.source or None, node=w.node or None,
            bound_node=node, gpu=state.card.uuid, detail=detail, replayed=not self.active)
        raise ImplausibleEventError(reason, f"{w.phase.value} event for {w.ref} ({w.ref.uid}) "
                                    f"refused [{reason}]: {detail}; its share of "
                                    f"{state.card.uuid} stays committed")

    async def _adopt(self, w: Workload, gpu_uuid: str) -> None:
        """Count a bound workload that holds no share (the bucket was lost or purged, or it
        was bound before this scheduler ran): its card is taken whether we placed it or not."""
        state = self.cluster.card(gpu_uuid)
        if state is None or w.request is None:
            log.warning("bound workload on an unknown card not counted", workload=str(w.ref),
                        gpu=gpu_uuid)
            return
        share = Share(w.ref, w.request.memory_gib, w.request.compute_percent, w.pod_group or "",
                      w.profile or self.default_profile.value, self.clock(), self.instance)
        async with self._card_lock(gpu_uuid):
            try:
                shares = await self.store.commit(state.card, share)
            except CardFullError as e:
                log.warning("bound workload does not fit its card's committed shares",
                            workload=str(w.ref), error=str(e))
                return
            self.cluster.set_shares(state.card, shares)
        log.info("adopted the share of a bound workload", workload=str(w.ref), gpu=gpu_uuid)

    async def on_bind_result(self, wid: WorkloadId, ok: bool, reason: str, gpu_uuid: str,
                             answered: tuple[str, int, int] | None = None) -> None:
        """An adapter's answer; ``answered`` is (node, GiB, %) of the decision it answers.

        A failure releases the share only when it answers the decision the share stands
        for: an adapter that refused some other decision for the workload (an older one, or
        one the scheduler never made) says nothing about this one.
        """
        w = self.workloads.get(wid.uid)
        if ok or w is None or w.phase is not Phase.PENDING:
            if ok and w is not None:
                w.phase = Phase.BOUND
                self.waiting.discard(wid.uid)
            return
        placed = self.cluster.placement_of(wid.uid)
        if placed is None or placed[0].card.uuid != gpu_uuid:
            return  # a result about an older decision
        state, share = placed
        if answered is not None and answered != (state.card.node, share.memory_gib,
                                                 share.compute_percent):
            log.info("bind failure about another decision ignored", workload=str(wid),
                     gpu=gpu_uuid, answered=list(answered), reason=reason)
            return
        await self.release(wid.uid, gpu_uuid)
        failures = self._bind_failures.get(wid.uid, 0) + 1
        self._bind_failures[wid.uid] = failures
        permanent = failures >= MAX_BIND_FAILURES
        await self.outbox.fail(Failure(
            wid, "bind-failed",
            f"binding to {placed[0].card.node} gpu{placed[0].card.index} failed ({failures} of "
            f"{MAX_BIND_FAILURES} attempts): {reason}", permanent=permanent))
        if permanent:
            self.workloads.pop(wid.uid, None)
        else:
            self.waiting.add(wid.uid)
        self.kick.set()

    async def release(self, uid: str, assigned_gpu: str) -> None:
        placed = self.cluster.placement_of(uid)
        gpu = placed[0].card.uuid if placed else assigned_gpu
        self.cluster.remove_share(uid)
        if not gpu:
            return
        async with self._card_lock(gpu):
            shares = await self.store.release(gpu, uid)
            state = self.cluster.card(gpu)
            if shares is not None and state is not None:
                self.cluster.set_shares(state.card, shares)
        self.kick.set()

    def _card_lock(self, gpu_uuid: str) -> asyncio.Lock:
        """One KV operation per card at a time in this process, its result applied to the
        model before the next starts: otherwise a commit that read the card before a release
        could put the released share back into the model after the release applied."""
        lock = self._locks.get(gpu_uuid)
        if lock is None:
            lock = self._locks[gpu_uuid] = asyncio.Lock()
        return lock

    # -- the cycle ------------------------------------------------------------------------

    async def activate(self) -> None:
        """Replay done: re-announce committed but unbound placements, then start placing."""
        for w in list(self.workloads.values()):
            placed = self.cluster.placement_of(w.ref.uid)
            if w.phase is Phase.PENDING and placed is not None:
                state, share = placed
                profile = Profile(share.profile) if share.profile in Profile._value2member_map_ \
                    else self.default_profile
                a = Assignment(state.card.node, state.card.uuid, state.card.index,
                               share.memory_gib, share.compute_percent, profile, share.committed_at)
                self.unannounced[w.ref.uid] = (w, a, share.pod_group)
        self.active = True
        self.kick.set()

    async def loop(self, stop: asyncio.Event, tick_seconds: float) -> None:
        """Run a cycle whenever something changed, and at least every ``tick_seconds``."""
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.kick.wait(), tick_seconds)
            self.kick.clear()
            if not self.active:
                continue
            started = time.perf_counter()
            try:
                await self.run_cycle()
            except AlnairError as e:
                log.warning("scheduling cycle interrupted; retrying", error=str(e))
                await asyncio.sleep(min(tick_seconds, 0.5))
                self.kick.set()
            _metrics.CYCLE_SECONDS.observe(time.perf_counter() - started)

    async def run_cycle(self) -> None:
        self.outbox.new_cycle()
        await self.announce()
        for uid in [u for u in self.waiting if self.cluster.is_placed(u) or u not in self.workloads]:
            self.waiting.discard(uid)
        pending = sorted((self.workloads[u] for u in self.waiting),
                         key=lambda w: (w.created_at, w.ref.uid))
        _metrics.PENDING.set(len(pending))
        seen_groups: set[str] = set()
        holder: str | None = None
        for w in pending:
            key = w.group_key
            if holder is not None:
                if key != holder:
                    await self.outbox.fail(Failure(
                        w.ref, "held-for-gang",
                        f"held so that the older PodGroup {holder}, which cannot fit yet, is not "
                        "starved by later workloads; capacity it needs is being drained"))
                continue
            if key is None:
                await self.place_one(w)
            elif key not in seen_groups:
                seen_groups.add(key)
                if await self._place_gang(key):
                    holder = key
        await self.announce()

    async def announce(self) -> None:
        """Publish every committed placement not yet announced (and not being announced)."""
        for uid, entry in list(self.unannounced.items()):
            if uid in self._announcing:
                continue
            w, a, group = entry
            await self.outbox.bind(w.ref, a, group)
            if self.unannounced.get(uid) is entry:
                self.unannounced.pop(uid, None)

    def _announce_soon(self, uid: str) -> None:
        """Publish ``uid``'s decision without holding the cycle up for the bus's ack.

        The share is committed in KV already, so the decision is safe to publish whenever:
        the cycle goes on placing the next workload (a burst is placed at the pace of the
        commits, not commits plus publishes). A publish that fails leaves the placement in
        ``unannounced`` for the next cycle; a crash leaves it for the restarted scheduler's
        replay, as before.
        """
        entry = self.unannounced.get(uid)
        if entry is None or uid in self._announcing:
            return
        self._announcing.add(uid)
        task = asyncio.create_task(self._announce_one(uid, entry), name=f"announce:{uid}")
        self._announce_tasks.add(task)
        task.add_done_callback(self._announce_tasks.discard)

    async def _announce_one(self, uid: str, entry: tuple[Workload, Assignment, str]) -> None:
        w, a, group = entry
        try:
            async with self._announce_slots:
                await self.outbox.bind(w.ref, a, group)
        except Exception as e:  # noqa: BLE001 - the next cycle announces it again
            log.warning("announcing a placement failed; the next cycle retries",
                        workload=str(w.ref), error=str(e))
            self.kick.set()
            return
        finally:
            self._announcing.discard(uid)
        current = self.unannounced.get(uid)
        if current is entry:
            self.unannounced.pop(uid, None)
        elif current is not None:
            self.kick.set()  # placed again meanwhile (a failed bind): announce the new one

    def profile_of(self, w: Workload) -> Profile:
        return Profile.parse(w.profile) if w.profile else self.default_profile

    def preference(self, w: Workload) -> Mapping[str, float]:
        """Node → data-locality bonus for ``w`` (see ``_datasets``); empty when it reads no
        cached data set, none of them is hot anywhere, or the term is off."""
        if not w.datasets:
            return {}
        return self.datasets.preference(w.datasets, self.locality_weight)


    async def _reject_invalid(self, w: Workload, e: InvalidRequestError) -> None:
        self.workloads.pop(w.ref.uid, None)
        self.waiting.discard(w.ref.uid)
        await self.outbox.fail(Failure(w.ref, e.code, str(e), permanent=True))

    async def check(self, w: Workload) -> Profile | None:
        """The workload's profile, or None after rejecting what can never be placed."""
        if w.invalid is not None:
            await self._reject_invalid(w, w.invalid)
            return None
        try:
            profile = self.profile_of(w)
        except InvalidRequestError as e:
            await self._reject_invalid(w, e)
            return None
        assert w.request is not None
        big = too_big(self.cluster, w.request)
        if big is not None:
            await self.outbox.fail(Failure(w.ref, "request-exceeds-card", big, permanent=True))
            return None
        return profile

    async def place_one(self, w: Workload, pod_group: str = "") -> bool:
        profile = await self.check(w)
        if profile is None:
            return False
        assert w.request is not None
        choice = choose_card(self.cluster, w.request, profile, self.util,
                             prefer=self.preference(w))
        if isinstance(choice, NoFit):
            await self.outbox.fail(Failure(w.ref, choice.code, choice.summary, choice.rejections))
            return False
        return await self.commit(w, choice.card, profile, pod_group)

    async def commit(self, w: Workload, card: Card, profile: Profile, pod_group: str, *,
                     announce: bool = True) -> bool:
        """Commit ``w``'s share on ``card`` (CAS) and, unless a gang defers it, announce it.

        A gang commits every member before announcing any: a member announced and then
        rolled back would already be on its way to a node.
        """
        assert w.request is not None
        now = self.clock()
        reason = placement_reason(self.datasets, self.cluster, w, card, profile,
                                  self.locality_weight)
        share = Share(w.ref, w.request.memory_gib, w.request.compute_percent, pod_group,
                      profile.value, now, self.instance)
        async with self._card_lock(card.uuid):
            try:
                shares = await self.store.commit(card, share)
            except CardFullError as e:
                _metrics.COMMIT_CONFLICTS.inc()
                log.info("commit lost to another writer; re-reading the card", error=str(e))
                current = await self.store.read(card.uuid)
                if current is not None:
                    self.cluster.set_shares(card, current[1])
                self.kick.set()
                return False
            self.cluster.set_shares(card, shares)
        if w.ref.uid not in self.workloads:
            # It finished or was deleted while the commit was in flight: give the card back.
            await self.release(w.ref.uid, card.uuid)
            return False
        a = Assignment(card.node, card.uuid, card.index, share.memory_gib,
                       share.compute_percent, profile, now, reason)
        self.unannounced[w.ref.uid] = (w, a, pod_group)
        if announce:  # at once: latency is per pod, not per cycle
            self._announce_soon(w.ref.uid)
        return True

    async def withdraw(self, uid: str) -> None:
        """Give back a share committed with ``announce=False`` and not announced: a gang
        member whose group lost a race before the group was announced."""
        self.unannounced.pop(uid, None)
        await self.release(uid, "")

    async def _place_gang(self, key: str) -> bool:
        """Try the gang; True when it has been blocked long enough to hold later workloads."""
        return await place_gang(self, key)
