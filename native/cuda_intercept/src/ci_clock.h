/*
 * ci_clock.h — the library's time (ci_clock.c): the controller's and the token bucket's
 * clock, and wall-clock time for the region's timestamps.
 */
#ifndef CI_CLOCK_H
#define CI_CLOCK_H

#include <stdint.h>
#include <time.h>

/* The controller's and the bucket's time. A release build reads CLOCK_MONOTONIC and
 * nanosleep and nothing else. The test library (CI_TEST_CLOCK, the testlib build only)
 * reads the fake driver's clock, which a test can make virtual (tests/fake/fake_clock.c);
 * without the fake driver it falls back to the real clock. */
#ifdef CI_TEST_CLOCK
uint64_t ci_clock_test_now_ns(void);
static inline uint64_t ci_now_ns(void)
{
    return ci_clock_test_now_ns();
}
#else
static inline uint64_t ci_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
#endif

/* Wall-clock time on the controller's time line (NVML's sample timestamps): virtual
 * under a virtual test clock, CLOCK_REALTIME otherwise. */
uint64_t ci_clock_unix_ns(void);

/* Wall-clock time for timestamps that readers compare with their own clock (the
 * region's): always CLOCK_REALTIME. */
static inline uint64_t ci_unix_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Sleeps ns nanoseconds of the controller's time (restarting on EINTR until the
 * deadline). */
void ci_sleep_ns(uint64_t ns);

/* Before starting a thread of the library's own (+1), and when that failed (-1): tells a
 * virtual test clock; nothing in a release build. */
void ci_clock_thread_spawn(int delta);

#endif /* CI_CLOCK_H */
