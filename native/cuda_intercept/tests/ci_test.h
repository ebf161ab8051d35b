/*
 * ci_test.h — helpers shared by the C test programs. Each program runs with
 * LD_PRELOAD=libalnair_cuda.so, LD_LIBRARY_PATH=<fake driver dir> and a fresh
 * ALNAIR_WORKSPACE (tests/run_tests.sh), prints one "ok ..." line per check
 * group and exits 0, or prints the failing check and exits 1.
 */
#ifndef CI_TEST_H
#define CI_TEST_H

#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ci_cuda.h"
#include "ci_hooks.h"
#include "ci_region_layout.h"
#include "fake_control.h"

/* Prototypes of every wrapped driver / NVML entry point, from the one list. */
#define CT_X_DECL(sym, base, ver, ptds, handler, params, args) CUresult sym params;
CI_CUDA_HOOKS(CT_X_DECL)
#undef CT_X_DECL

#define CHECK(cond, ...)                                                        \
    do {                                                                        \
        if (!(cond)) {                                                          \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);     \
            fprintf(stderr, __VA_ARGS__);                                       \
            fprintf(stderr, "\n");                                              \
            exit(1);                                                            \
        }                                                                       \
    } while (0)

#define CHECK_CU(call) CHECK((call) == CUDA_SUCCESS, "%s failed", #call)

/* The fake driver's clock, which the test library's interceptor reads too: virtual
 * when the test set FAKECUDA_VIRTUAL_TIME=1 before its first CUDA call. */
static inline double ct_now_s(void)
{
    return (double)fakecuda_clock_ns() / 1e9;
}

static inline void ct_sleep_ms(unsigned ms)
{
    fakecuda_clock_sleep_ns((uint64_t)ms * 1000000ull);
}

/* Maps the region of workspace `ws` read-write (tests also poke the lock). */
static inline struct ci_region *ct_region_in(const char *ws)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", ws, CI_REGION_FILE_NAME);
    int fd = open(path, O_RDWR);
    CHECK(fd >= 0, "cannot open %s", path);
    void *p = mmap(NULL, sizeof(struct ci_region), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    CHECK(p != MAP_FAILED, "cannot map %s", path);
    return p;
}

/* Maps the workspace region ($ALNAIR_WORKSPACE) read-write. */
static inline struct ci_region *ct_region(void)
{
    const char *ws = getenv("ALNAIR_WORKSPACE");
    CHECK(ws != NULL, "ALNAIR_WORKSPACE not set");
    return ct_region_in(ws);
}

/* The active slot of process `pid`, or NULL. */
static inline struct ci_region_slot *ct_slot_of(struct ci_region *r, int pid)
{
    for (int i = 0; i < CI_REGION_MAX_SLOTS; i++)
        if (r->slots[i].state == CI_SLOT_ACTIVE && r->slots[i].pid == pid)
            return &r->slots[i];
    return NULL;
}

/* Waits (up to 2 s) until the monitor has published a record of slot `s`
 * for which field >= want; returns the last value seen. */
#define CT_WAIT_FIELD(s, devi, field, want)                                      \
    ({                                                                          \
        uint64_t v_ = 0;                                                        \
        for (int i_ = 0; i_ < 400; i_++) {                                      \
            v_ = __atomic_load_n(&(s)->dev[devi].field, __ATOMIC_ACQUIRE);       \
            if (v_ >= (uint64_t)(want))                                         \
                break;                                                          \
            ct_sleep_ms(5);                                                     \
        }                                                                       \
        v_;                                                                     \
    })

static inline void ct_set_env(const char *k, const char *v)
{
    CHECK(setenv(k, v, 1) == 0, "setenv %s", k);
}

/* Writes `text` to `path` (replacing it). */
static inline void ct_write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    CHECK(f != NULL, "cannot write %s", path);
    fputs(text, f);
    fclose(f);
}

/* Writes the workspace limits file. */
static inline void ct_write_limits(const char *text)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/limits", getenv("ALNAIR_WORKSPACE"));
    ct_write_file(path, text);
}

/* Plays the device plugin: writes the test library's fixed limits file (CI_LIMITS_PATH,
 * a path in the build directory) and creates the empty region in `workspace` when
 * `region` is set. */
static inline void ct_container(const char *text, const char *workspace, int region)
{
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", CI_LIMITS_PATH);
    *strrchr(dir, '/') = '\0';
    mkdir(dir, 0755);
    ct_write_file(CI_LIMITS_PATH, text);
    if (region) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", workspace, CI_REGION_FILE_NAME);
        ct_write_file(path, "");
    }
}

/* Lines of file `path` that contain `needle`. */
static inline int ct_count_lines_with(const char *path, const char *needle)
{
    FILE *f = fopen(path, "r");
    CHECK(f != NULL, "open %s", path);
    char line[1024];
    int n = 0;
    while (fgets(line, sizeof line, f))
        n += strstr(line, needle) != NULL;
    fclose(f);
    return n;
}

/* Sends stderr to file `path` until dup2(saved, 2); returns the saved descriptor. */
static inline int ct_capture_stderr(const char *path)
{
    int saved = dup(2);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    CHECK(fd >= 0 && saved >= 0, "capture");
    dup2(fd, 2);
    close(fd);
    return saved;
}

#endif
