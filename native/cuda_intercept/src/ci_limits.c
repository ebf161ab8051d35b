/*
 * ci_limits.c — where the workload's limits come from, and what a tenant can change of them.
 *
 * The tenant controls its own environment and whatever files it can write, so neither may
 * loosen a limit. Two modes, told apart by the FIXED limits file, CI_LIMITS_PATH
 * ("/etc/alnair/limits"; a compile-time constant, never read from the environment; only
 * a test build defines another path, inside its build directory):
 *
 *   container mode — the fixed file exists. The device plugin bind-mounts it read-only,
 *     so the tenant can neither write it nor make the interceptor read another one. It
 *     names the limits AND the workspace (key `workspace`, default CI_LIMITS_WORKSPACE):
 *     ALNAIR_WORKSPACE and any `limits` file inside the workspace are ignored.
 *   local mode — no fixed file. ALNAIR_WORKSPACE (set by the local agent: a developer
 *     setting, since a local workload runs as the platform's own user and could rewrite
 *     anything the agent wrote) names the workspace; its `limits` file is read when present.
 *
 * In both, ALNAIR_VGPU_MEMORY_BYTES and ALNAIR_VGPU_COMPUTE_PERCENT can only TIGHTEN: the
 * result is the smaller of the file's and the variable's; an unset or empty variable
 * changes nothing, so no variable can remove a limit the file sets.
 *
 * Limits file format (one key=value per line, '#' starts a comment, blanks
 * around keys and values ignored):
 *     memory_bytes = 8Gi        # per GPU; bytes, or K/M/G/T (binary) suffixes
 *     compute_percent = 30      # 1..100 of one GPU's SMs
 *     workload_id = default/train-0/main
 *     workspace = /var/run/alnair   # container mode only: where the region is mounted
 *     mps_pipe_directory = /run/alnair/mps/GPU-x   # MPS mode (ci_mps.c): the card's daemon
 * A key the file omits means "no limit" for that resource (no mps_pipe_directory: the
 * time-slicing mode). Like the limits, mps_pipe_directory counts in either file; no
 * variable can set or remove it.
 *
 * Invalid values print one line on stderr and take the strictest meaning:
 * memory 0 bytes (every allocation fails), compute 1 %. Never "unlimited". An invalid
 * mps_pipe_directory (no absolute path) leaves MPS mode off and takes both: the SM
 * partition it asked for cannot be set up, so nothing may run as if it had been.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ci_internal.h"

#ifndef CI_LIMITS_PATH
#define CI_LIMITS_PATH "/etc/alnair/limits"
#endif
/* Container mode's workspace when the fixed file does not name one. */
#define CI_LIMITS_WORKSPACE "/var/run/alnair"
#define CI_LIMITS_FILE_NAME "limits"
#define CI_LIMITS_FILE_MAX 8192

const char *ci_limits_fixed_path(void)
{
    return CI_LIMITS_PATH;
}

/* Skips ASCII blanks. */
static const char *ci_limits_skip_blank(const char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    return s;
}

int ci_limits_parse_bytes(const char *text, uint64_t *out)
{
    if (text == NULL)
        return -1;
    const char *s = ci_limits_skip_blank(text);
    if (*s < '0' || *s > '9')
        return -1;
    uint64_t v = 0;
    while (*s >= '0' && *s <= '9') {
        uint64_t d = (uint64_t)(*s - '0');
        if (v > (UINT64_MAX - d) / 10)
            return -1;
        v = v * 10 + d;
        s++;
    }
    s = ci_limits_skip_blank(s);
    unsigned shift = 0;
    switch (*s) {
    case 'k': case 'K': shift = 10; break;
    case 'm': case 'M': shift = 20; break;
    case 'g': case 'G': shift = 30; break;
    case 't': case 'T': shift = 40; break;
    case 'b': case 'B': case '\0': break;
    default: return -1;
    }
    if (shift != 0) {
        s++;
        if (*s == 'i')
            s++;
        if (*s == 'B' || *s == 'b')
            s++;
    } else if (*s == 'B' || *s == 'b') {
        s++;
    }
    s = ci_limits_skip_blank(s);
    if (*s != '\0')
        return -1;
    if (shift != 0 && v > (UINT64_MAX >> shift))
        return -1;
    *out = v << shift;
    return 0;
}

int ci_limits_parse_percent(const char *text, uint32_t *out)
{
    if (text == NULL)
        return -1;
    const char *s = ci_limits_skip_blank(text);
    if (*s < '0' || *s > '9')
        return -1;
    unsigned v = 0;
    while (*s >= '0' && *s <= '9') {
        v = v * 10 + (unsigned)(*s - '0');
        if (v > 1000)
            return -1;
        s++;
    }
    s = ci_limits_skip_blank(s);
    if (*s == '%')
        s = ci_limits_skip_blank(s + 1);
    if (*s != '\0' || v < 1 || v > 100)
        return -1;
    *out = v;
    return 0;
}

/* Applies one memory value from `origin`; invalid -> 0 bytes, with a message. */
static void ci_limits_set_memory(struct ci_limits *l, const char *value, const char *origin)
{
    uint64_t v;
    if (ci_limits_parse_bytes(value, &v) == 0) {
        l->memory_bytes = v;
        return;
    }
    ci_log("invalid memory limit %s=\"%s\": expected bytes such as 8589934592 or 8Gi; "
           "refusing all GPU memory allocations (limit 0 bytes)", origin, value);
    l->memory_bytes = 0;
}

/* Applies one compute value from `origin`; invalid -> 1 %, with a message. */
static void ci_limits_set_compute(struct ci_limits *l, const char *value, const char *origin)
{
    uint32_t v;
    if (ci_limits_parse_percent(value, &v) == 0) {
        l->compute_percent = v;
        return;
    }
    ci_log("invalid compute limit %s=\"%s\": expected an integer percent 1..100; "
           "using the strictest limit, 1%%", origin, value);
    l->compute_percent = 1;
}

/* Copies `value` into the fixed workload id field (truncating). */
static void ci_limits_set_workload(struct ci_limits *l, const char *value)
{
    snprintf(l->workload_id, sizeof l->workload_id, "%s", value);
}

/* Trims trailing blanks and CR in place. */
static void ci_limits_rtrim(char *s)
{
    size_t n = strlen(s);
    while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r'))
        s[--n] = '\0';
}

/* Applies the fixed file's `workspace`: an absolute path, else no workspace (which in
 * container mode refuses allocations: see ci_region_open). */
static void ci_limits_set_workspace(struct ci_limits *l, const char *value, const char *path)
{
    if (value[0] == '/' && strlen(value) < sizeof l->workspace) {
        snprintf(l->workspace, sizeof l->workspace, "%s", value);
        return;
    }
    ci_log("invalid workspace in %s: \"%s\" (an absolute path of at most %zu bytes); "
           "refusing all GPU memory allocations", path, value, sizeof l->workspace - 1);
    l->workspace[0] = '\0';
}

/* Applies `mps_pipe_directory`: an absolute path, else an error that ci_limits_load turns
 * into the strictest limits once the whole file is read (a later memory_bytes line must
 * not undo it). */
static void ci_limits_set_mps(struct ci_limits *l, const char *value, const char *path)
{
    if (value[0] == '/' && strlen(value) < sizeof l->mps_pipe_directory) {
        snprintf(l->mps_pipe_directory, sizeof l->mps_pipe_directory, "%s", value);
        l->mps_invalid = false;
        return;
    }
    ci_log("invalid mps_pipe_directory in %s: \"%s\" (an absolute path of at most %zu bytes); "
           "no MPS mode, refusing all GPU memory allocations, compute 1%%", path, value,
           sizeof l->mps_pipe_directory - 1);
    l->mps_pipe_directory[0] = '\0';
    l->mps_invalid = true;
}

/* Parses the file contents in `buf` (modified in place). `fixed`: the container mode's
 * file, the only one whose `workspace` counts (a workspace cannot name itself). */
static void ci_limits_parse_file(struct ci_limits *l, char *buf, const char *path, bool fixed)
{
    char *save = NULL;
    int lineno = 0;
    for (char *line = strtok_r(buf, "\n", &save); line != NULL;
         line = strtok_r(NULL, "\n", &save)) {
        lineno++;
        char *hash = strchr(line, '#');
        if (hash != NULL)
            *hash = '\0';
        char *key = (char *)ci_limits_skip_blank(line);
        ci_limits_rtrim(key);
        if (*key == '\0')
            continue;
        char *eq = strchr(key, '=');
        if (eq == NULL) {
            ci_log("%s:%d: ignoring line without '=': \"%s\"", path, lineno, key);
            continue;
        }
        *eq = '\0';
        ci_limits_rtrim(key);
        char *value = (char *)ci_limits_skip_blank(eq + 1);
        char origin[96];
        snprintf(origin, sizeof origin, "%s:%d %s", CI_LIMITS_FILE_NAME, lineno, key);
        if (strcmp(key, "memory_bytes") == 0)
            ci_limits_set_memory(l, value, origin);
        else if (strcmp(key, "compute_percent") == 0)
            ci_limits_set_compute(l, value, origin);
        else if (strcmp(key, "workload_id") == 0)
            ci_limits_set_workload(l, value);
        else if (strcmp(key, "workspace") == 0) {
            if (fixed)
                ci_limits_set_workspace(l, value, path);
        } else if (strcmp(key, "mps_pipe_directory") == 0)
            ci_limits_set_mps(l, value, path);
        else
            ci_log("%s:%d: ignoring unknown key \"%s\"", path, lineno, key);
    }
}

/* Reads the limits file at `path`. Returns 1 when it exists (and was applied), 0 when
 * absent. An existing but unreadable file is treated as "everything invalid". */
static int ci_limits_read_file(struct ci_limits *l, const char *path, bool fixed)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT || errno == ENOTDIR)
            return 0;
        ci_log("cannot read limits file %s (%s): using the strictest limits", path,
               strerror(errno));
        l->memory_bytes = 0;
        l->compute_percent = 1;
        return 1;
    }
    char buf[CI_LIMITS_FILE_MAX + 1];
    size_t len = 0;
    for (;;) {
        ssize_t n = read(fd, buf + len, CI_LIMITS_FILE_MAX - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        len += (size_t)n;
        if (len == CI_LIMITS_FILE_MAX)
            break;
    }
    close(fd);
    buf[len] = '\0';
    ci_limits_parse_file(l, buf, path, fixed);
    return 1;
}

/* Tightens *l with the environment's limit variables: the smaller value wins; an
 * invalid variable is the strictest value (which is never looser than the file). */
static void ci_limits_tighten_from_env(struct ci_limits *l)
{
    const char *mem = getenv("ALNAIR_VGPU_MEMORY_BYTES");
    const char *cpu = getenv("ALNAIR_VGPU_COMPUTE_PERCENT");
    struct ci_limits env = {.memory_bytes = CI_REGION_UNLIMITED, .compute_percent = 100};
    bool given = false;
    if (mem != NULL && mem[0] != '\0') {
        ci_limits_set_memory(&env, mem, "ALNAIR_VGPU_MEMORY_BYTES");
        given = true;
    }
    if (cpu != NULL && cpu[0] != '\0') {
        ci_limits_set_compute(&env, cpu, "ALNAIR_VGPU_COMPUTE_PERCENT");
        given = true;
    }
    if (env.memory_bytes < l->memory_bytes)
        l->memory_bytes = env.memory_bytes;
    if (env.compute_percent < l->compute_percent)
        l->compute_percent = env.compute_percent;
    if (given && l->source == CI_LIMITS_SOURCE_NONE)
        l->source = CI_LIMITS_SOURCE_ENV;
}

/* Container mode: the fixed file names the workspace; the tenant's variable is only
 * noted. A fixed file this process could write is no protection: say so once. */
static void ci_limits_load_container(struct ci_limits *out, const char *path)
{
    const char *ws = getenv("ALNAIR_WORKSPACE");
    if (ws != NULL && ws[0] != '\0' && strcmp(ws, out->workspace) != 0)
        ci_debug("container mode: ignoring ALNAIR_WORKSPACE=%s (the workspace is %s)", ws,
                 out->workspace);
    if (faccessat(AT_FDCWD, path, W_OK, AT_EACCESS) == 0)
        ci_log("the fixed limits file %s is writable by this process: its limits are not "
               "protected from the workload (the device plugin mounts it read-only)", path);
}

void ci_limits_load(struct ci_limits *out)
{
    memset(out, 0, sizeof *out);
    out->memory_bytes = CI_REGION_UNLIMITED;
    out->compute_percent = 100;
    out->source = CI_LIMITS_SOURCE_NONE;
    out->mode = CI_LIMITS_MODE_LOCAL;

    const char *id = getenv("ALNAIR_WORKLOAD_ID");
    if (id != NULL)
        ci_limits_set_workload(out, id);

    snprintf(out->workspace, sizeof out->workspace, "%s", CI_LIMITS_WORKSPACE);
    if (ci_limits_read_file(out, CI_LIMITS_PATH, true)) {
        out->mode = CI_LIMITS_MODE_CONTAINER;
        out->source = CI_LIMITS_SOURCE_FILE;
        ci_limits_load_container(out, CI_LIMITS_PATH);
    } else {
        out->workspace[0] = '\0';
        const char *ws = getenv("ALNAIR_WORKSPACE");
        if (ws != NULL && ws[0] != '\0') {
            if (strlen(ws) + sizeof CI_LIMITS_FILE_NAME + 1 > sizeof out->workspace)
                ci_log("ALNAIR_WORKSPACE is longer than %zu bytes; ignoring it",
                       sizeof out->workspace - sizeof CI_LIMITS_FILE_NAME - 2);
            else
                snprintf(out->workspace, sizeof out->workspace, "%s", ws);
        }
        if (out->workspace[0] != '\0') {
            char path[sizeof out->workspace + sizeof CI_LIMITS_FILE_NAME + 1];
            snprintf(path, sizeof path, "%s/%s", out->workspace, CI_LIMITS_FILE_NAME);
            if (ci_limits_read_file(out, path, false))
                out->source = CI_LIMITS_SOURCE_FILE;
        }
    }
    ci_limits_tighten_from_env(out);
    if (out->mps_invalid) {
        out->memory_bytes = 0;
        out->compute_percent = 1;
    }
}
