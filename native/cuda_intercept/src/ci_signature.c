/*
 * ci_signature.c — a compact signature of the launch stream that yields the
 * training-iteration period.
 *
 * Training iterations replay the same kernel sequence. We keep a rolling hash
 * over the last CI_SIG_WINDOW launched function handles and remember, in a
 * direct-mapped table, the launch index and time at which each window hash was
 * last seen. When a hash recurs, the distance d (in launches) is a candidate
 * period: repeated layers inside an iteration recur at short distances, while
 * windows that occur once per iteration (loss, optimizer step) recur at exactly
 * the iteration length, which is therefore the LARGEST distance seen. A period
 * P is accepted when two consecutive blocks of launches agree on it; then one
 * window that recurs at distance P becomes the anchor, and every time it comes
 * back the iteration count increases and the elapsed time is the period.
 *
 * Cost per launch: a multiply-add, one table probe; the clock is read only when a
 * time is recorded (an anchor set or passed: about once per iteration), since a clock
 * read costs more than the rest together (bench/launch_bench.c). Lock-free
 * for callers: a thread that finds the state busy skips its update (the
 * signature is a statistic, never a reason to wait). Storage is static.
 */
#include <string.h>

#include "ci_internal.h"
#include "ci_clock.h"
#include "ci_compute_metering.h"

#define CI_SIG_WINDOW 8
#define CI_SIG_TABLE (1u << 14)
#define CI_SIG_BASE 0x100000001b3ull
#define CI_SIG_MIN_BLOCK 1024u

struct ci_sig_entry {
    uint64_t hash;
    uint64_t index;
};

static struct {
    atomic_flag busy;
    uint64_t ring[CI_SIG_WINDOW];
    uint64_t hash;
    uint64_t base_pow; /* CI_SIG_BASE ^ CI_SIG_WINDOW */
    uint64_t n;        /* launches seen */
    uint64_t block_end, block_max, candidate;
    uint64_t period;   /* accepted period in launches, 0 = none */
    uint64_t anchor, anchor_t, anchor_index;
    struct ci_sig_entry table[CI_SIG_TABLE];
} ci_sig = {.busy = ATOMIC_FLAG_INIT};

static _Atomic uint64_t ci_sig_pub_hash, ci_sig_pub_period, ci_sig_pub_period_ns,
    ci_sig_pub_iterations;

/* Spreads pointer bits (handles are aligned and close together). */
static uint64_t ci_sig_mix(uint64_t x)
{
    x ^= x >> 31;
    x *= 0x7fb5d329728ea185ull;
    x ^= x >> 27;
    x *= 0x81dadef4bc2dd44dull;
    x ^= x >> 33;
    return x | 1;
}

/* The clock, read at most once per launch and only when needed (*now 0: not yet). */
static uint64_t ci_sig_now(uint64_t *now)
{
    if (*now == 0)
        *now = ci_now_ns();
    return *now;
}

/* Handles a recurrence of the current window after d launches. */
static void ci_sig_observe(uint64_t d, uint64_t *now)
{
    if (d > ci_sig.block_max)
        ci_sig.block_max = d;
    if (ci_sig.period != 0 && d == ci_sig.period && ci_sig.anchor == 0) {
        ci_sig.anchor = ci_sig.hash;
        ci_sig.anchor_t = ci_sig_now(now);
        ci_sig.anchor_index = ci_sig.n;
    }
}

/* Closes a block of launches: accepts the period when two blocks agree. */
static void ci_sig_end_block(void)
{
    uint64_t cand = ci_sig.block_max;
    if (cand != 0 && cand == ci_sig.candidate) {
        if (cand != ci_sig.period) {
            ci_sig.period = cand;
            ci_sig.anchor = 0;
            atomic_store_explicit(&ci_sig_pub_period, cand, memory_order_relaxed);
        }
    } else if (cand == 0 && ci_sig.candidate == 0 && ci_sig.period != 0) {
        ci_sig.period = 0; /* two blocks without any repetition: no longer periodic */
        ci_sig.anchor = 0;
        atomic_store_explicit(&ci_sig_pub_period, 0, memory_order_relaxed);
    }
    ci_sig.candidate = cand;
    ci_sig.block_max = 0;
    uint64_t len = 4 * cand > CI_SIG_MIN_BLOCK ? 4 * cand : CI_SIG_MIN_BLOCK;
    ci_sig.block_end = ci_sig.n + len;
}

void ci_signature_record(const void *fn)
{
    if (atomic_flag_test_and_set_explicit(&ci_sig.busy, memory_order_acquire))
        return;
    if (CI_UNLIKELY(ci_sig.base_pow == 0)) {
        uint64_t p = 1;
        for (int i = 0; i < CI_SIG_WINDOW; i++)
            p *= CI_SIG_BASE;
        ci_sig.base_pow = p;
    }
    uint64_t x = ci_sig_mix((uint64_t)(uintptr_t)fn);
    size_t pos = (size_t)(ci_sig.n % CI_SIG_WINDOW);
    ci_sig.hash = ci_sig.hash * CI_SIG_BASE + x - ci_sig.ring[pos] * ci_sig.base_pow;
    ci_sig.ring[pos] = x;
    ci_sig.n++;
    if (ci_sig.n >= CI_SIG_WINDOW) {
        uint64_t now = 0;
        struct ci_sig_entry *e = &ci_sig.table[ci_sig.hash & (CI_SIG_TABLE - 1)];
        if (e->hash == ci_sig.hash)
            ci_sig_observe(ci_sig.n - e->index, &now);
        e->hash = ci_sig.hash;
        e->index = ci_sig.n;
        if (ci_sig.anchor != 0 && ci_sig.hash == ci_sig.anchor &&
            ci_sig.n != ci_sig.anchor_index) {
            if (ci_sig.n - ci_sig.anchor_index == ci_sig.period) {
                atomic_fetch_add_explicit(&ci_sig_pub_iterations, 1, memory_order_relaxed);
                atomic_store_explicit(&ci_sig_pub_period_ns, ci_sig_now(&now) - ci_sig.anchor_t,
                                      memory_order_relaxed);
            }
            ci_sig.anchor_t = ci_sig_now(&now);
            ci_sig.anchor_index = ci_sig.n;
        }
        atomic_store_explicit(&ci_sig_pub_hash, ci_sig.hash, memory_order_relaxed);
        if (ci_sig.n >= ci_sig.block_end)
            ci_sig_end_block();
    }
    atomic_flag_clear_explicit(&ci_sig.busy, memory_order_release);
}

void ci_signature_snapshot(struct ci_signature_snapshot *out)
{
    out->hash = atomic_load_explicit(&ci_sig_pub_hash, memory_order_relaxed);
    out->period_launches = atomic_load_explicit(&ci_sig_pub_period, memory_order_relaxed);
    out->period_ns = atomic_load_explicit(&ci_sig_pub_period_ns, memory_order_relaxed);
    out->iterations = atomic_load_explicit(&ci_sig_pub_iterations, memory_order_relaxed);
}

void ci_signature_reset(void)
{
    if (ci_sig.n != 0) {
        memset(ci_sig.ring, 0, sizeof ci_sig.ring);
        memset(ci_sig.table, 0, sizeof ci_sig.table);
    }
    ci_sig.hash = 0;
    ci_sig.n = 0;
    ci_sig.block_end = 0;
    ci_sig.block_max = ci_sig.candidate = ci_sig.period = 0;
    ci_sig.anchor = ci_sig.anchor_t = ci_sig.anchor_index = 0;
    atomic_flag_clear(&ci_sig.busy);
    atomic_store(&ci_sig_pub_hash, 0);
    atomic_store(&ci_sig_pub_period, 0);
    atomic_store(&ci_sig_pub_period_ns, 0);
    atomic_store(&ci_sig_pub_iterations, 0);
}
