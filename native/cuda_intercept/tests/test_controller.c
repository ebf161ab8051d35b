/*
 * test_controller — unit test of ci_controller.c against a model GPU.
 * The plant: the workload consumes min(rate, demand) tokens/s and its SM
 * utilisation is 100 * consumed / capacity (capped at 100). The controller
 * must reach every target within 1 percentage point in a few steps, never
 * overshoot once landed, behave identically for capacities from 1e2 to 1e10
 * tokens/s (small and large GPUs, tiny and huge grids), not wind up while
 * the workload is demand-limited, and recover quickly when demand returns.
 */
#include <math.h>

#include "ci_compute_metering.h"
#include "ci_test.h"

static double plant_util(double rate, double demand, double capacity, double *consumed)
{
    double c = rate <= 0.0 ? demand : (rate < demand ? rate : demand);
    *consumed = c;
    double u = 100.0 * c / capacity;
    return u > 100.0 ? 100.0 : u;
}

static int steps_to_settle(double target, double capacity, double noise)
{
    struct ci_controller c;
    ci_controller_init(&c, target);
    double util = 0.0, consumed = 0.0;
    int settled = -1;
    unsigned seed = 7;
    for (int k = 0; k < 60; k++) {
        util = plant_util(c.rate, capacity, capacity, &consumed);
        double measured = util;
        if (noise > 0) {
            seed = seed * 1103515245u + 12345u;
            measured += noise * (((double)(seed >> 16 & 0x7fff) / 32767.0) * 2.0 - 1.0);
            if (measured < 0)
                measured = 0;
        }
        if (fabs(util - target) <= 1.0 && settled < 0)
            settled = k;
        if (settled >= 0 && noise == 0.0)
            CHECK(util <= target + 1.0 && util >= target - 1.0,
                  "target %.0f cap %.0g: left the band at step %d (util %.2f)", target, capacity, k,
                  util);
        ci_controller_update(&c, measured, consumed, c.rate > 0 && consumed >= c.rate);
    }
    CHECK(fabs(util - target) <= (noise > 0 ? 2.0 : 0.5), "target %.0f cap %.0g ends at %.2f",
          target, capacity, util);
    return settled;
}

int main(void)
{
    const double targets[] = {10, 30, 50, 70, 90};
    const double caps[] = {1e2, 1e4, 1e6, 1e8, 1e10};
    for (int t = 0; t < 5; t++) {
        int first = -1;
        for (int c = 0; c < 5; c++) {
            int s = steps_to_settle(targets[t], caps[c], 0.0);
            CHECK(s >= 0 && s <= 3, "target %.0f cap %.0g settles in %d steps", targets[t], caps[c], s);
            if (first < 0)
                first = s;
            CHECK(s == first, "settling depends on scale (%d vs %d)", s, first);
            steps_to_settle(targets[t], caps[c], 3.0);
        }
    }
    printf("ok converges on 10..90%% in <=3 steps, identical across 8 decades of scale\n");

    /* demand-limited: no wind-up, then a quick return when demand comes back */
    struct ci_controller c;
    ci_controller_init(&c, 50);
    double consumed, cap = 1e6;
    for (int k = 0; k < 50; k++) {
        double u = plant_util(c.rate, 0.2 * cap, cap, &consumed);
        ci_controller_update(&c, u, consumed, false);
    }
    CHECK(c.rate <= 0.0 || c.rate <= 4 * 0.5 * cap, "wound up to %.0f", c.rate);
    double u = 0;
    int k;
    for (k = 0; k < 20; k++) {
        u = plant_util(c.rate, cap, cap, &consumed);
        if (fabs(u - 50) <= 1.0)
            break;
        ci_controller_update(&c, u, consumed, true);
    }
    CHECK(k <= 4 && u <= 51.0, "after demand returns: %d steps, util %.1f", k, u);
    printf("ok no wind-up while demand-limited; %d steps back to target\n", k);
    return 0;
}
