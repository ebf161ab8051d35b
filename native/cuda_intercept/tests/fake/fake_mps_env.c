/*
 * fake_mps_env.c — the MPS client's environment as the fake driver's first calls see it.
 * The real driver reads CUDA_MPS_* when it initialises and connects to MPS; the fake notes
 * what the first cuInit and cuDriverGetVersion (fake_cuda.c) would have read (fakecuda_env_seen).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fake_internal.h"

static const char *const env_vars[] = {"CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
                                       "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"};
#define ENV_VARS (sizeof env_vars / sizeof env_vars[0])
static struct {
    const char *entry;
    int called;
    int set[ENV_VARS];
    char value[ENV_VARS][256];
} env_seen[] = {{"cuInit", 0, {0}, {""}}, {"cuDriverGetVersion", 0, {0}, {""}}};
static pthread_mutex_t env_lock = PTHREAD_MUTEX_INITIALIZER;

void fake_note_env(const char *entry)
{
    pthread_mutex_lock(&env_lock);
    for (size_t i = 0; i < sizeof env_seen / sizeof env_seen[0]; i++) {
        if (strcmp(env_seen[i].entry, entry) != 0 || env_seen[i].called)
            continue;
        env_seen[i].called = 1;
        for (size_t v = 0; v < ENV_VARS; v++) {
            const char *val = getenv(env_vars[v]);
            env_seen[i].set[v] = val != NULL;
            snprintf(env_seen[i].value[v], sizeof env_seen[i].value[v], "%s", val ? val : "");
        }
    }
    pthread_mutex_unlock(&env_lock);
}

FAKE_EXPORT int fakecuda_env_seen(const char *entry, const char *var, char *out, size_t len)
{
    int rc = -1;
    pthread_mutex_lock(&env_lock);
    for (size_t i = 0; i < sizeof env_seen / sizeof env_seen[0]; i++)
        for (size_t v = 0; v < ENV_VARS; v++)
            if (strcmp(env_seen[i].entry, entry) == 0 && strcmp(env_vars[v], var) == 0 &&
                env_seen[i].called) {
                rc = env_seen[i].set[v];
                snprintf(out, len, "%s", env_seen[i].value[v]);
            }
    pthread_mutex_unlock(&env_lock);
    return rc;
}
