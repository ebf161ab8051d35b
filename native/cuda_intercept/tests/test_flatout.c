/*
 * test_flatout — unit test of ci_flatout.c, the card's time per token a workload spends
 * flat out. A window far off the mark (the one in which a workload stops: NVML still
 * reads the card flat out for few tokens) is not taken, one within the band is, and a run
 * of such windows is the workload changed: the mark is learnt again from them.
 */
#include "ci_compute_metering.h"
#include "ci_test.h"

static double mark(const struct ci_flatout *f)
{
    return f->card_ns / f->card_tokens;
}

int main(void)
{
    struct ci_flatout f = {0};
    for (int i = 0; i < 8; i++)
        CHECK(ci_flatout_window(&f, 50e6, 50e6 / 150.0, true), "flat-out window %d not taken", i);
    CHECK(mark(&f) > 149.9 && mark(&f) < 150.1, "mark %.1f, not 150", mark(&f));
    /* a window in which the workload stopped: the card read flat out, a fifth of the tokens */
    CHECK(!ci_flatout_window(&f, 50e6, 50e6 / 750.0, true), "a stopping window was taken");
    /* and one with a burst of tokens (a queue refilled): 0.6 x the mark's time a token */
    CHECK(!ci_flatout_window(&f, 50e6, 50e6 / 90.0, true), "a burst window was taken");
    CHECK(mark(&f) > 149.9 && mark(&f) < 150.1, "mark moved to %.1f", mark(&f));
    /* the clock's wander (H100 windows: 0.95-1.15 x) is taken */
    CHECK(ci_flatout_window(&f, 50e6, 50e6 / 170.0, true), "a window at 1.13 x not taken");
    CHECK(ci_flatout_window(&f, 50e6, 50e6 / 135.0, true), "a window at 0.9 x not taken");
    /* the workload changed (another kernel mix): 300 ns a token from now on */
    int taken_at = -1;
    for (int i = 0; i < 12 && taken_at < 0; i++)
        if (ci_flatout_window(&f, 50e6, 50e6 / 300.0, true))
            taken_at = i;
    CHECK(taken_at == 7, "the new regime was taken after %d windows, not 8", taken_at + 1);
    CHECK(mark(&f) > 299.9 && mark(&f) < 300.1, "mark %.1f after the change, not 300", mark(&f));
    for (int i = 0; i < 8; i++)
        CHECK(ci_flatout_window(&f, 50e6, 50e6 / 300.0, true), "the new regime's window %d not taken", i);
    /* below full load once flat out: never taken */
    CHECK(!ci_flatout_window(&f, 30e6, 30e6 / 300.0, false), "a partial window was taken");
    printf("ok outlying windows refused, a changed workload learnt again\n");
    return 0;
}
