/*
 * ci_pace.c — a workload's pace alone: the tokens per second it spends without a limit
 * while it has the card to itself, the 100 % mark of a workload that never filled the card
 * alone (a launch-bound loop: a time limit above the share of the time it uses would not
 * bind it; see ci_monitor.c).
 *
 * A moving mean over the monitor's windows (1/CI_PACE_WEIGHT each). A window more than
 * CI_PACE_BAND off the pace is left out: under it, the window was partly idle — a pause (a
 * script changing phase, a trainer saving a checkpoint), no measure of the pace: one such
 * window just before a limit set a launch-bound loop's pace 6 % low on an H100 (0.94 x
 * every limit); over it is left out alike, so that leaving windows out does not lean the
 * mean either way. CI_PACE_OUTLIERS in a row are a workload that changed: the pace starts
 * again from the last of them. Monitor thread only.
 */
#include <math.h>

#include "ci_compute_metering.h"

#define CI_PACE_WEIGHT 8   /* moving mean, 1/8 per window */
#define CI_PACE_BAND 0.1   /* a window this far off the pace is an outlier ... */
#define CI_PACE_OUTLIERS 5 /* ... unless this many in a row: it changed */

void ci_pace_window(struct ci_pace *p, double spent)
{
    double pace = p->tokens_per_s;
    bool off = pace > 0.0 && fabs(spent - pace) > CI_PACE_BAND * pace;
    p->off = off ? p->off + 1 : 0;
    if (off && p->off < CI_PACE_OUTLIERS)
        return;
    if (off) {
        p->tokens_per_s = spent; /* it changed: start again from where it is now */
        p->off = 0;
        return;
    }
    p->tokens_per_s = pace <= 0.0 ? spent : pace + (spent - pace) / CI_PACE_WEIGHT;
}

double ci_pace_cap(const struct ci_pace *p, double target_percent)
{
    if (p->tokens_per_s <= 0.0 || target_percent >= 100.0)
        return 0.0;
    double cap = p->tokens_per_s * target_percent / 100.0;
    return cap < 1.0 ? 1.0 : cap;
}
