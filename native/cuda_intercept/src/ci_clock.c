/*
 * ci_clock.c — the clock the bucket, the controller and the GPU-time sampling run on.
 *
 * Release builds: CLOCK_MONOTONIC, CLOCK_REALTIME and nanosleep, nothing else; no hook,
 * no environment variable, no symbol another library could provide (`make
 * check-exports` proves it on the shipped library).
 *
 * Test library (compiled with CI_TEST_CLOCK, build/testlib only): the three calls go to
 * the fake driver's fakecuda_clock_* when it is loaded (weak references, resolved at
 * load time), so a test can run the limiter on virtual time (tests/fake/fake_clock.c):
 * exact results whatever the machine's load, and seconds of controller time in
 * milliseconds. Without the fake driver the real clock is used.
 */
#include <time.h>

#include "ci_clock.h"

#ifdef CI_TEST_CLOCK
#define CI_CLOCK_HOOK __attribute__((weak, visibility("default")))
extern uint64_t fakecuda_clock_ns(void) CI_CLOCK_HOOK;
extern uint64_t fakecuda_clock_unix_ns(void) CI_CLOCK_HOOK;
extern void fakecuda_clock_sleep_ns(uint64_t ns) CI_CLOCK_HOOK;
extern void fakecuda_clock_thread_spawn(int delta) CI_CLOCK_HOOK;

/* Test build: the fake driver's clock when present, else CLOCK_MONOTONIC. */
uint64_t ci_clock_test_now_ns(void)
{
    if (fakecuda_clock_ns != NULL)
        return fakecuda_clock_ns();
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
#endif

/* CLOCK_REALTIME on the controller's time line; never fails. */
uint64_t ci_clock_unix_ns(void)
{
#ifdef CI_TEST_CLOCK
    if (fakecuda_clock_unix_ns != NULL)
        return fakecuda_clock_unix_ns();
#endif
    return ci_unix_ns();
}

/* A thread of the interceptor's is about to start (+1) or did not (-1): a virtual test
 * clock must not run on while it starts. Nothing in a release build. */
void ci_clock_thread_spawn(int delta)
{
#ifdef CI_TEST_CLOCK
    if (fakecuda_clock_thread_spawn != NULL)
        fakecuda_clock_thread_spawn(delta);
#else
    (void)delta;
#endif
}

/* Sleeps until ns nanoseconds have passed, resuming after signals. */
void ci_sleep_ns(uint64_t ns)
{
#ifdef CI_TEST_CLOCK
    if (fakecuda_clock_sleep_ns != NULL) {
        fakecuda_clock_sleep_ns(ns);
        return;
    }
#endif
    struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000ull),
                          .tv_nsec = (long)(ns % 1000000000ull)};
    while (nanosleep(&ts, &ts) != 0) {
    }
}
