/*
 * ci_controller.c — turns measured utilisation into a token refill rate.
 *
 * Model: while the bucket limits the workload, SM utilisation is proportional
 * to the token rate. Each step measures, over ONE window, the workload's
 * utilisation u and this process's token consumption c. Then c * T / u is
 * the rate that would have given exactly the target T in that window — a
 * proportional estimate that needs no plant constant, so it is the same on a
 * 16-SM and a 132-SM GPU, for 1-block and 10 000-block kernels, and for one
 * or several processes of the workload (each scales its own share by T/u).
 * The new rate is the geometric mean of the current rate and that estimate:
 *
 *     ln r' = ln r + 1/2 * (ln(c * T / u) - ln r)
 *
 * i.e. an integrator on the log-error with gain 1/2 (the I part) driven by a
 * feed-forward proportional estimate (the P part). While launches wait for
 * tokens (binding) c is taken as r and it reduces to r' = r * sqrt(T/u): the
 * error halves every step, monotonically, without overshoot. When the bucket
 * does not bind, anchoring on the measured c (not r) stops wind-up while the
 * workload itself launches less than the bucket allows. One step never moves the rate more
 * than 4x, so a noisy sample cannot swing it.
 *
 * Ramp-up: the controller starts unthrottled (rate 0) so a new workload runs
 * at full speed until the first window shows it above target, then lands
 * directly on the estimate.
 */
#include "ci_compute_metering.h"

#define CI_CTL_MIN_UTIL 0.5 /* percent: below this a window says nothing */
#define CI_CTL_MAX_STEP 4.0 /* largest factor of change per step */

void ci_controller_init(struct ci_controller *c, double target_percent)
{
    c->rate = 0.0;
    c->target = target_percent;
    c->updates = 0;
}

double ci_controller_update(struct ci_controller *c, double util, double consumed,
                            bool binding)
{
    if (c->target >= 100.0) {
        c->rate = 0.0;
        return 0.0;
    }
    if (consumed <= 0.0 && !binding)
        return c->rate; /* nothing launched and nobody waiting: nothing learned */
    if (util < CI_CTL_MIN_UTIL)
        util = CI_CTL_MIN_UTIL;
    /* While launches wait for tokens the bucket sets the pace, so the rate is the
     * consumption (a window spent waiting out one big grid's debt spends nothing
     * yet must not shrink the rate); otherwise anchor on what was really spent. */
    double base = (binding && c->rate > 0.0) ? c->rate : consumed;
    double estimate = base * c->target / util;
    double next;
    if (c->rate <= 0.0) {
        if (util <= c->target)
            return 0.0; /* ramp-up: still below target, stay unthrottled */
        next = estimate;
    } else {
        next = __builtin_sqrt(c->rate * estimate);
        if (next > c->rate * CI_CTL_MAX_STEP)
            next = c->rate * CI_CTL_MAX_STEP;
        if (next < c->rate / CI_CTL_MAX_STEP)
            next = c->rate / CI_CTL_MAX_STEP;
    }
    if (next < 1.0)
        next = 1.0;
    c->rate = next;
    c->updates++;
    return next;
}
