/*
 * ci_mps.c — MPS mode: the workload's limits become its MPS client settings.
 *
 * With `mps_pipe_directory` in the limits file, the node runs an MPS control daemon for
 * the card (started by Alnair, outside the workload) and the workload's compute share is
 * an SM partition (MPS's active-thread percentage), its memory limit also MPS's pinned
 * device memory limit. The driver takes a client's settings from the process's
 * environment, which the tenant controls; the interceptor is the trusted piece inside the
 * process (its limits come from a file the tenant cannot write in container mode), so it
 * writes them itself, from the limits, over whatever the process had:
 *
 *     CUDA_MPS_PIPE_DIRECTORY            mps_pipe_directory
 *     CUDA_MPS_ACTIVE_THREAD_PERCENTAGE  compute_percent        (a compute limit only)
 *     CUDA_MPS_PINNED_DEVICE_MEM_LIMIT   0=<MiB>M[,1=<MiB>M...] (a memory limit only; the
 *                                        limit in MiB rounded down, the same for every
 *                                        ordinal the process can see)
 *
 * A lower active-thread percentage of the process's own is replaced too: the limits
 * already are the stricter of the file and ALNAIR_VGPU_COMPUTE_PERCENT (the one way to
 * ask for less), and what MPS enforces then is what the region publishes. Without a
 * compute (memory) limit the percentage (pinned limit) is left as the process has it: it
 * can only restrict the process itself (MPS: a client's value only lowers the daemon's).
 *
 * When: the library constructor (before main: before any driver entry point the program
 * calls, unhooked ones such as cuDriverGetVersion included, and before the driver could
 * read its environment); then, since the program may change its environment at any time,
 * before the interceptor opens the driver library (the first hooked call, often the CUDA
 * runtime's cuGetProcAddress: with the constructor's reading of the limits), when the
 * limits are loaded for good, before every real cuInit and before every context creation.
 * setenv runs only where a value differs: it may reallocate `environ` under another
 * thread's getenv.
 *
 * The time-slicing throttle is off only while MPS is in effect: MPS mode and the control
 * daemon's socket (`control`) in the pipe directory when the limits are loaded. Without a
 * daemon the driver quietly runs without MPS, so the throttle keeps enforcing the compute
 * limit (said once on stderr). Memory is the interceptor's in both modes; the pinned limit
 * is a second line of defence.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ci_internal.h"

enum { CI_MPS_PIPE, CI_MPS_THREADS, CI_MPS_PINNED, CI_MPS_VARS };

static const char *const ci_mps_names[CI_MPS_VARS] = {
    "CUDA_MPS_PIPE_DIRECTORY",
    "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
    "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT",
};

/* The limits to write: the constructor's reading until they are loaded for good. */
static struct ci_limits ci_mps_early_limits;
static const struct ci_limits *_Atomic ci_mps_limits = &ci_mps_early_limits;
static _Atomic bool ci_mps_replaced[CI_MPS_VARS]; /* a process's own value was reported */
static _Atomic bool ci_mps_set_failed;            /* a setenv failed: keep the throttle */
static _Atomic bool ci_mps_partitioned;           /* the throttle is off (see above) */

/* Devices the process can see, 1..CI_MAX_DEVICES: the entries of CUDA_VISIBLE_DEVICES
 * when set, else the /dev/nvidiaN nodes (a container has only its own). An ordinal too
 * many costs nothing; one too few would leave a device without MPS's pinned limit. */
static int ci_mps_device_count(void)
{
    int n = 0;
    const char *v = getenv("CUDA_VISIBLE_DEVICES");
    if (v != NULL) {
        for (const char *s = v; *s != '\0';) {
            const char *end = strchr(s, ',');
            size_t len = end != NULL ? (size_t)(end - s) : strlen(s);
            n += len > 0;
            s += len + (end != NULL);
        }
    } else {
        DIR *d = opendir("/dev");
        for (struct dirent *e; d != NULL && (e = readdir(d)) != NULL;) {
            const char *s = e->d_name;
            if (strncmp(s, "nvidia", 6) != 0 || s[6] == '\0')
                continue;
            s += 6;
            while (*s >= '0' && *s <= '9')
                s++;
            n += *s == '\0';
        }
        if (d != NULL)
            closedir(d);
    }
    return n < 1 ? 1 : n > CI_MAX_DEVICES ? CI_MAX_DEVICES : n;
}

/* Sets variable `var` to `want` unless it already has that value; reports (debug, once
 * per variable) a value of the process's own that it replaces. */
static void ci_mps_set(int var, const char *want)
{
    const char *name = ci_mps_names[var];
    const char *have = getenv(name);
    if (have != NULL && strcmp(have, want) == 0)
        return;
    if (have != NULL && !atomic_exchange(&ci_mps_replaced[var], true))
        ci_debug("MPS mode: replacing the process's %s=\"%s\" with \"%s\" (the limits')", name,
                 have, want);
    if (setenv(name, want, 1) != 0 && !atomic_exchange(&ci_mps_set_failed, true))
        ci_log("MPS mode: cannot set %s (%s): the time-slicing throttle stays on", name,
               strerror(errno));
}

/* Writes the MPS client variables of limits `l` where they differ; nothing without
 * mps_pipe_directory. Never fails (a failed setenv keeps the throttle on). */
static void ci_mps_apply(const struct ci_limits *l)
{
    if (l->mps_pipe_directory[0] == '\0')
        return;
    ci_mps_set(CI_MPS_PIPE, l->mps_pipe_directory);
    if (l->compute_percent < 100) {
        char threads[16];
        snprintf(threads, sizeof threads, "%u", l->compute_percent);
        ci_mps_set(CI_MPS_THREADS, threads);
    }
    if (l->memory_bytes != CI_REGION_UNLIMITED) {
        char pinned[CI_MAX_DEVICES * 28];
        size_t at = 0;
        int count = ci_mps_device_count();
        for (int d = 0; d < count; d++)
            at += (size_t)snprintf(pinned + at, sizeof pinned - at, "%s%d=%lluM", d ? "," : "",
                                   d, (unsigned long long)(l->memory_bytes >> 20));
        ci_mps_set(CI_MPS_PINNED, pinned);
    }
}

void ci_mps_early(void)
{
    ci_log_mute(true);
    ci_limits_load(&ci_mps_early_limits);
    ci_log_mute(false);
    ci_mps_apply(&ci_mps_early_limits);
}

void ci_mps_start(const struct ci_limits *l)
{
    atomic_store(&ci_mps_limits, l);
    if (l->mps_pipe_directory[0] == '\0')
        return;
    ci_mps_apply(l);
    char path[sizeof l->mps_pipe_directory + 8];
    snprintf(path, sizeof path, "%s/control", l->mps_pipe_directory);
    struct stat st;
    bool daemon = stat(path, &st) == 0 && S_ISSOCK(st.st_mode);
    if (!daemon)
        ci_log("MPS mode: no MPS control daemon at %s (no control socket): the driver runs "
               "without MPS, so the time-slicing throttle enforces the compute limit",
               l->mps_pipe_directory);
    atomic_store(&ci_mps_partitioned, daemon && !atomic_load(&ci_mps_set_failed));
    const char *threads = getenv(ci_mps_names[CI_MPS_THREADS]);
    const char *pinned = getenv(ci_mps_names[CI_MPS_PINNED]);
    ci_debug("MPS mode: pipe directory %s, active threads %s, pinned memory %s; throttle %s",
             l->mps_pipe_directory, threads != NULL ? threads : "(unset)",
             pinned != NULL ? pinned : "(unset)",
             atomic_load(&ci_mps_partitioned) ? "off (the SM partition is the limit)" : "on");
}

void ci_mps_enforce(void)
{
    ci_mps_apply(atomic_load(&ci_mps_limits));
    if (atomic_load(&ci_mps_set_failed))
        atomic_store(&ci_mps_partitioned, false);
}

bool ci_mps_partition_active(void)
{
    return atomic_load_explicit(&ci_mps_partitioned, memory_order_relaxed);
}
