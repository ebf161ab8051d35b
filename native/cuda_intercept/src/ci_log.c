/*
 * ci_log.c — diagnostics on stderr. The library is a guest in arbitrary
 * processes: it prints only what an operator must see (invalid limits, a
 * region it cannot use) plus debug lines on request.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "ci_internal.h"

static int ci_log_debug_enabled = -1;
/* The thread whose lines are dropped (ci_log_mute), 0: none. No thread-local storage:
 * that would make the library need the dynamic loader's __tls_get_addr. */
static _Atomic uintptr_t ci_log_muted;

/* Reads ALNAIR_CUDA_DEBUG once; called from the library constructor. */
void ci_log_init(void)
{
    const char *v = getenv("ALNAIR_CUDA_DEBUG");
    ci_log_debug_enabled = (v != NULL && v[0] != '\0' && v[0] != '0') ? 1 : 0;
}

void ci_log_mute(bool on)
{
    atomic_store(&ci_log_muted, on ? (uintptr_t)pthread_self() : 0);
}

/* Formats into a stack buffer and emits it with one write(2) so that lines of
 * concurrent threads and processes do not interleave. Truncates long lines. */
static void ci_log_emit(const char *fmt, va_list ap)
{
    uintptr_t muted = atomic_load_explicit(&ci_log_muted, memory_order_relaxed);
    if (CI_UNLIKELY(muted != 0) && muted == (uintptr_t)pthread_self())
        return;
    char buf[512];
    int n = snprintf(buf, sizeof buf, "alnair-cuda[%d]: ", (int)getpid());
    if (n < 0)
        return;
    int m = vsnprintf(buf + n, sizeof buf - (size_t)n - 1, fmt, ap);
    if (m < 0)
        return;
    size_t len = (size_t)n + (size_t)m;
    if (len > sizeof buf - 2)
        len = sizeof buf - 2;
    buf[len++] = '\n';
    ssize_t ignored = write(STDERR_FILENO, buf, len);
    (void)ignored;
}

void ci_log(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ci_log_emit(fmt, ap);
    va_end(ap);
}

void ci_debug(const char *fmt, ...)
{
    if (ci_log_debug_enabled <= 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    ci_log_emit(fmt, ap);
    va_end(ap);
}
