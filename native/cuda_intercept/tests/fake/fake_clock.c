/*
 * fake_clock.c — the fake driver's clock, real or virtual (tests only).
 *
 * Real (default): CLOCK_MONOTONIC / CLOCK_REALTIME and nanosleep.
 *
 * Virtual (FAKECUDA_VIRTUAL_TIME=1): a discrete-event clock. Time stands still
 * while any participating thread runs and jumps, when every one of them sleeps,
 * to the earliest wake-up among them. A thread participates from its first call
 * to the clock (the interceptor's test build reads its clock here: see
 * src/ci_clock.c) until it exits; a process leaves at exit. So a busy machine
 * only makes a test slower, never changes what it measures, and a 4 s
 * convergence run takes as long as the CPU work it contains. With
 * FAKECUDA_SHARED_GPU the clock lives in the shared GPU file: every process of
 * the shared GPU sees one time line. Every process of one clock must agree on
 * FAKECUDA_VIRTUAL_TIME.
 *
 * A thread the interceptor is about to start (its monitor) is a participant from
 * before it exists (fakecuda_clock_thread_spawn), so that time cannot run on while
 * it starts up in real time; so is the thread that starts it, from then on (a test's
 * main thread that had not read the clock yet let the new monitor run alone: on a
 * loaded machine 4.5 s of virtual time went by, launch-free, before its first launch).
 *
 * A participant that blocks in real time on something other than this clock
 * would stop the clock for everyone: a sleeper that sees no progress for
 * FAKE_CLOCK_STALL_S of real time prints the participants and aborts, so a test
 * fails instead of hanging. Entries of processes that died are dropped.
 */
#include <errno.h>
#include <linux/futex.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "fake_internal.h"

#define FAKE_CLOCK_STALL_S 30
#define FAKE_CLOCK_POLL_NS 2000000L

enum { TH_FREE, TH_RUN, TH_SLEEP };

static int clock_virtual = -1; /* -1 unknown, read once from the environment */
static int clock_gone;          /* this process has left the clock (exiting) */
static pthread_key_t clock_key;
static pthread_once_t clock_key_once = PTHREAD_ONCE_INIT;
static __thread int clock_me = -1; /* this thread's participant slot */

static uint64_t real_ns(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void real_sleep_ns(uint64_t ns)
{
    struct timespec ts = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

static int is_virtual(void)
{
    int v = __atomic_load_n(&clock_virtual, __ATOMIC_RELAXED);
    if (v < 0) {
        v = env_u64("FAKECUDA_VIRTUAL_TIME", 0) != 0;
        __atomic_store_n(&clock_virtual, v, __ATOMIC_RELAXED);
    }
    return v;
}

void vclock_init(struct vclock *c, int pshared)
{
    memset(c, 0, sizeof *c);
    pthread_mutexattr_t ma;
    pthread_mutexattr_init(&ma);
    pthread_mutexattr_setrobust(&ma, PTHREAD_MUTEX_ROBUST);
    if (pshared)
        pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED);
    pthread_mutex_init(&c->lock, &ma);
    pthread_mutexattr_destroy(&ma);
    c->now_ns = real_ns(CLOCK_MONOTONIC);
    c->unix_offset_ns = (int64_t)real_ns(CLOCK_REALTIME) - (int64_t)c->now_ns;
}

/* Wakes every sleeper of the clock, in any process (a futex on the shared word: unlike a
 * process-shared condition variable it survives a waiter that dies). Lock held. */
static void clock_wake_all(struct vclock *c)
{
    __atomic_add_fetch(&c->seq, 1, __ATOMIC_RELEASE);
    syscall(SYS_futex, &c->seq, FUTEX_WAKE, INT32_MAX, NULL, NULL, 0);
}

/* Waits (lock released) until the word moves on from `seen` or the poll interval ends. */
static void clock_wait(struct vclock *c, uint32_t seen)
{
    struct timespec rel = {0, FAKE_CLOCK_POLL_NS};
    pthread_mutex_unlock(&c->lock);
    syscall(SYS_futex, &c->seq, FUTEX_WAIT, seen, &rel, NULL, 0);
}

static void clock_lock(struct vclock *c)
{
    if (pthread_mutex_lock(&c->lock) == EOWNERDEAD)
        pthread_mutex_consistent(&c->lock);
}

static void clock_leave_thread(void *arg)
{
    (void)arg;
    struct vclock *c = gpu_vclock();
    if (clock_me < 0)
        return;
    clock_lock(c);
    c->th[clock_me].state = TH_FREE;
    clock_wake_all(c);
    pthread_mutex_unlock(&c->lock);
    clock_me = -1;
}

static void clock_make_key(void)
{
    pthread_key_create(&clock_key, clock_leave_thread);
}

/* This thread's slot, taken as running on first use. Lock held. */
static int clock_join(struct vclock *c)
{
    pthread_once(&clock_key_once, clock_make_key);
    if (clock_me >= 0 && c->th[clock_me].state != TH_FREE &&
        c->th[clock_me].pid == (unsigned)getpid())
        return clock_me;
    int spawned = -1; /* a slot reserved for a new thread of this process */
    for (int i = 0; i < VCLOCK_THREADS && spawned < 0; i++)
        if (c->th[i].state == TH_RUN && c->th[i].pid == (unsigned)getpid() && c->th[i].tid == 0)
            spawned = i;
    for (int i = spawned >= 0 ? spawned : 0; i < VCLOCK_THREADS; i++) {
        if (c->th[i].state != TH_FREE && i != spawned)
            continue;
        c->th[i].state = TH_RUN;
        c->th[i].pid = (unsigned)getpid();
        c->th[i].tid = (unsigned)syscall(SYS_gettid);
        clock_me = i;
        pthread_setspecific(clock_key, c); /* non-NULL: the destructor runs */
        return i;
    }
    fprintf(stderr, "fake_clock: more than %d threads on one virtual clock\n", VCLOCK_THREADS);
    abort();
}

/* A process that ended without leaving (a crash) must not stop the clock. */
static int clock_pid_alive(unsigned pid)
{
    if (pid == (unsigned)getpid())
        return 1;
    if (kill((pid_t)pid, 0) != 0 && errno == ESRCH)
        return 0;
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/%u/stat", pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *close_paren = strrchr(buf, ')');
    return close_paren == NULL || close_paren[1] == '\0' || close_paren[2] != 'Z';
}

static void clock_prune(struct vclock *c)
{
    for (int i = 0; i < VCLOCK_THREADS; i++)
        if (c->th[i].state != TH_FREE && !clock_pid_alive(c->th[i].pid))
            c->th[i].state = TH_FREE;
}

/* When every participant sleeps: moves time to the earliest wake-up and marks
 * every thread due then as running (before any of them gets the CPU, so no
 * other sleeper can advance past them). Returns 1 when time moved. Lock held. */
static int clock_try_advance(struct vclock *c)
{
    uint64_t next = UINT64_MAX;
    for (int i = 0; i < VCLOCK_THREADS; i++) {
        if (c->th[i].state == TH_RUN)
            return 0;
        if (c->th[i].state == TH_SLEEP && c->th[i].wake_ns < next)
            next = c->th[i].wake_ns;
    }
    if (next == UINT64_MAX)
        return 0;
    if (next > c->now_ns)
        c->now_ns = next;
    for (int i = 0; i < VCLOCK_THREADS; i++)
        if (c->th[i].state == TH_SLEEP && c->th[i].wake_ns <= c->now_ns)
            c->th[i].state = TH_RUN;
    c->progress++;
    clock_wake_all(c);
    return 1;
}

static void clock_stalled(struct vclock *c)
{
    fprintf(stderr, "fake_clock: virtual time stalled for %d s at %llu ns; participants:\n",
            FAKE_CLOCK_STALL_S, (unsigned long long)c->now_ns);
    for (int i = 0; i < VCLOCK_THREADS; i++)
        if (c->th[i].state != TH_FREE)
            fprintf(stderr, "  pid %u tid %u %s wake %llu\n", c->th[i].pid, c->th[i].tid,
                    c->th[i].state == TH_RUN ? "running" : "sleeping",
                    (unsigned long long)c->th[i].wake_ns);
    abort();
}

FAKE_EXPORT void fakecuda_clock_thread_spawn(int delta)
{
    if (!is_virtual() || clock_gone)
        return;
    struct vclock *c = gpu_vclock();
    clock_lock(c);
    if (delta > 0)
        clock_join(c); /* the spawner too: its own start-up must not run in free time */
    for (int i = 0; i < VCLOCK_THREADS; i++) {
        if (delta > 0 && c->th[i].state == TH_FREE) {
            c->th[i].state = TH_RUN;
            c->th[i].pid = (unsigned)getpid();
            c->th[i].tid = 0;
            break;
        }
        if (delta < 0 && c->th[i].state == TH_RUN && c->th[i].pid == (unsigned)getpid() &&
            c->th[i].tid == 0) {
            c->th[i].state = TH_FREE;
            clock_wake_all(c);
            break;
        }
    }
    pthread_mutex_unlock(&c->lock);
}

FAKE_EXPORT uint64_t fakecuda_clock_ns(void)
{
    if (!is_virtual())
        return real_ns(CLOCK_MONOTONIC);
    struct vclock *c = gpu_vclock();
    clock_lock(c);
    if (!clock_gone)
        clock_join(c);
    uint64_t now = c->now_ns;
    pthread_mutex_unlock(&c->lock);
    return now;
}

FAKE_EXPORT uint64_t fakecuda_clock_unix_ns(void)
{
    if (!is_virtual())
        return real_ns(CLOCK_REALTIME);
    struct vclock *c = gpu_vclock();
    return fakecuda_clock_ns() + (uint64_t)c->unix_offset_ns;
}

FAKE_EXPORT void fakecuda_clock_sleep_ns(uint64_t ns)
{
    if (!is_virtual()) {
        real_sleep_ns(ns);
        return;
    }
    if (clock_gone) {
        real_sleep_ns(ns < 1000000 ? ns : 1000000);
        return;
    }
    struct vclock *c = gpu_vclock();
    clock_lock(c);
    int me = clock_join(c);
    uint64_t wake = c->now_ns + (ns ? ns : 1);
    c->th[me].state = TH_SLEEP;
    c->th[me].wake_ns = wake;
    uint64_t seen = c->progress, since = real_ns(CLOCK_MONOTONIC);
    while (c->now_ns < wake) {
        if (clock_try_advance(c))
            continue;
        uint32_t word = __atomic_load_n(&c->seq, __ATOMIC_ACQUIRE);
        clock_wait(c, word);
        clock_lock(c);
        if (__atomic_load_n(&c->seq, __ATOMIC_ACQUIRE) == word)
            clock_prune(c); /* nothing moved for a poll interval: a dead process? */
        if (c->progress != seen) {
            seen = c->progress;
            since = real_ns(CLOCK_MONOTONIC);
        } else if (real_ns(CLOCK_MONOTONIC) - since > FAKE_CLOCK_STALL_S * 1000000000ull) {
            clock_stalled(c);
        }
    }
    c->th[me].state = TH_RUN;
    pthread_mutex_unlock(&c->lock);
}

static void clock_before_fork(void)
{
    if (is_virtual())
        clock_lock(gpu_vclock());
}

static void clock_after_fork_parent(void)
{
    if (is_virtual())
        pthread_mutex_unlock(&gpu_vclock()->lock);
}

/* A forked child is a new participant (the parent's slot is not its own); a private
 * clock's copy names only the parent's threads, which are not the child's. */
static void clock_after_fork_child(void)
{
    clock_me = -1;
    if (!is_virtual())
        return;
    struct vclock *c = gpu_vclock();
    if (!fakecuda_gpu_shared())
        for (int i = 0; i < VCLOCK_THREADS; i++)
            c->th[i].state = TH_FREE;
    pthread_mutex_unlock(&c->lock);
}

/* At exit the process leaves the clock: its threads must not hold time back. */
__attribute__((destructor)) static void clock_leave_process(void)
{
    if (is_virtual() != 1)
        return;
    struct vclock *c = gpu_vclock();
    clock_lock(c);
    clock_gone = 1;
    for (int i = 0; i < VCLOCK_THREADS; i++)
        if (c->th[i].state != TH_FREE && c->th[i].pid == (unsigned)getpid())
            c->th[i].state = TH_FREE;
    clock_wake_all(c);
    pthread_mutex_unlock(&c->lock);
}

__attribute__((constructor)) static void clock_init_fork(void)
{
    pthread_atfork(clock_before_fork, clock_after_fork_parent, clock_after_fork_child);
}
