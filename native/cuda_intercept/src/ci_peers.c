/*
 * ci_peers.c — the tokens the workload's other processes spent.
 *
 * Why: a compute limit is the workload's, and the GPU time the interceptor measures is
 * only its own process's launches. Fed with that alone, each of N processes held its own
 * share at the limit and the workload got N times it (two processes under a 30 % limit
 * took 60 % on the fake driver): a tenant loosened its limit by starting processes. Each
 * monitor therefore counts the workload's tokens — its own and those its peers publish in
 * their region slots (tokens_charged, every 10 ms) — and measures the workload's share as
 * its own GPU time per token x all of them. Exact for identical processes (data-parallel
 * replicas); a process that launches nothing adds nothing, and one whose kernels take
 * more or less GPU time per token than this one's is counted at this one's.
 *
 * A peer is followed by its slot, pid and start time: at its first sighting its counter
 * is a baseline (what it spent before is no window's), and a counter that goes back
 * starts over. A slot being written (odd seqlock) is read at the next tick.
 *
 * Not a defence against a process of the workload itself: one that rewrites its peers'
 * counters (the region is the workload's to write) can hide their spending, as it can
 * patch this library in its own memory; MPS mode's SM partition is what holds there.
 * Monitor thread only; never takes the region lock.
 */
#include "ci_internal.h"
#include "ci_compute_metering.h"

struct ci_peer {
    bool known;
    int32_t pid;
    uint64_t start;
    uint64_t charged[CI_MAX_DEVICES];
};

static struct ci_peer ci_peers[CI_REGION_MAX_SLOTS];
static uint64_t ci_peers_spent[CI_MAX_DEVICES];

void ci_peers_update(int own_slot, int count)
{
    const struct ci_region *r = ci_region_get();
    if (r == NULL || !ci_region_is_shared())
        return;
    if (count > CI_MAX_DEVICES)
        count = CI_MAX_DEVICES;
    for (int i = 0; i < CI_REGION_MAX_SLOTS; i++) {
        struct ci_peer *p = &ci_peers[i];
        const struct ci_region_slot *s = &r->slots[i];
        uint32_t seq = __atomic_load_n(&s->seq, __ATOMIC_ACQUIRE);
        if (i == own_slot || (seq & 1u) != 0) {
            p->known = p->known && i != own_slot;
            continue;
        }
        uint32_t state = __atomic_load_n(&s->state, __ATOMIC_ACQUIRE);
        int32_t pid = __atomic_load_n(&s->pid, __ATOMIC_ACQUIRE);
        uint64_t start = __atomic_load_n(&s->start_time_ticks, __ATOMIC_ACQUIRE);
        uint64_t charged[CI_MAX_DEVICES];
        for (int d = 0; d < count; d++)
            charged[d] = __atomic_load_n(&s->dev[d].tokens_charged, __ATOMIC_ACQUIRE);
        if (__atomic_load_n(&s->seq, __ATOMIC_ACQUIRE) != seq)
            continue; /* rewritten meanwhile: the next tick reads it */
        if (state != CI_SLOT_ACTIVE) {
            p->known = false;
            continue;
        }
        bool same = p->known && p->pid == pid && p->start == start;
        for (int d = 0; d < count; d++) {
            if (same && charged[d] >= p->charged[d])
                ci_peers_spent[d] += charged[d] - p->charged[d];
            p->charged[d] = charged[d];
        }
        p->known = true;
        p->pid = pid;
        p->start = start;
    }
}

uint64_t ci_peers_charged(int dev)
{
    return dev >= 0 && dev < CI_MAX_DEVICES ? ci_peers_spent[dev] : 0;
}

void ci_peers_after_fork_child(void)
{
    for (int i = 0; i < CI_REGION_MAX_SLOTS; i++)
        ci_peers[i].known = false;
}
