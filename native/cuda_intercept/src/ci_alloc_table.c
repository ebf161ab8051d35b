/*
 * ci_alloc_table.c — what each live allocation was charged, so that frees
 * return exactly that amount to the right device.
 *
 * An open-addressing hash table (linear probing, backward-shift deletion)
 * keyed by (address or VMM handle, kind). Storage comes from mmap, not malloc,
 * and grows by doubling; it is touched on allocation and free paths only,
 * never on the launch path. A process-local mutex guards it; it is never held
 * across a driver call.
 */
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>

#include "ci_memory_accounting.h"

struct ci_alloc_entry {
    uint64_t key;    /* 0 = empty slot (kind disambiguates a real key of 0) */
    uint64_t bytes;
    uint16_t kind;   /* CI_ALLOC_*; 0 = empty */
    uint16_t dev;
    uint32_t pad;
};

static pthread_mutex_t ci_alloc_lock = PTHREAD_MUTEX_INITIALIZER;
static struct ci_alloc_entry *ci_alloc_slots;
static size_t ci_alloc_cap;   /* power of two, 0 before first use */
static size_t ci_alloc_count;

/* Mixes the key bits so that aligned addresses spread over the table. */
static size_t ci_alloc_hash(uint64_t key, int kind)
{
    uint64_t x = key ^ ((uint64_t)kind << 56);
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return (size_t)x;
}

/* Inserts without growing; the table must have room. */
static void ci_alloc_put(struct ci_alloc_entry *slots, size_t cap, const struct ci_alloc_entry *e)
{
    size_t i = ci_alloc_hash(e->key, e->kind) & (cap - 1);
    while (slots[i].kind != 0) {
        if (slots[i].key == e->key && slots[i].kind == e->kind)
            break; /* replace: the driver reused an address we missed a free for */
        i = (i + 1) & (cap - 1);
    }
    if (slots[i].kind == 0)
        ci_alloc_count++;
    slots[i] = *e;
}

/* Doubles the table. Returns 0, or -1 when mmap fails (table unchanged). */
static int ci_alloc_grow(void)
{
    size_t ncap = ci_alloc_cap ? ci_alloc_cap * 2 : 4096;
    void *p = mmap(NULL, ncap * sizeof(struct ci_alloc_entry), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return -1;
    struct ci_alloc_entry *old = ci_alloc_slots;
    size_t ocap = ci_alloc_cap;
    ci_alloc_slots = p;
    ci_alloc_cap = ncap;
    ci_alloc_count = 0;
    for (size_t i = 0; i < ocap; i++)
        if (old[i].kind != 0)
            ci_alloc_put(ci_alloc_slots, ci_alloc_cap, &old[i]);
    if (old != NULL)
        munmap(old, ocap * sizeof(struct ci_alloc_entry));
    return 0;
}

int ci_alloc_table_insert(uint64_t key, int kind, uint64_t bytes, int dev)
{
    struct ci_alloc_entry e = {.key = key, .bytes = bytes, .kind = (uint16_t)kind,
                               .dev = (uint16_t)dev};
    int rc = 0;
    pthread_mutex_lock(&ci_alloc_lock);
    if ((ci_alloc_count + 1) * 2 > ci_alloc_cap && ci_alloc_grow() != 0)
        rc = -1;
    if (rc == 0)
        ci_alloc_put(ci_alloc_slots, ci_alloc_cap, &e);
    pthread_mutex_unlock(&ci_alloc_lock);
    return rc;
}

int ci_alloc_table_remove(uint64_t key, int kind, uint64_t *bytes, int *dev)
{
    int rc = -1;
    pthread_mutex_lock(&ci_alloc_lock);
    if (ci_alloc_cap != 0) {
        size_t mask = ci_alloc_cap - 1;
        size_t i = ci_alloc_hash(key, kind) & mask;
        while (ci_alloc_slots[i].kind != 0) {
            if (ci_alloc_slots[i].key == key && ci_alloc_slots[i].kind == kind) {
                *bytes = ci_alloc_slots[i].bytes;
                *dev = ci_alloc_slots[i].dev;
                rc = 0;
                break;
            }
            i = (i + 1) & mask;
        }
        if (rc == 0) {
            /* Backward-shift deletion keeps probe chains intact without tombstones. */
            size_t hole = i, j = i;
            for (;;) {
                j = (j + 1) & mask;
                if (ci_alloc_slots[j].kind == 0)
                    break;
                size_t home = ci_alloc_hash(ci_alloc_slots[j].key, ci_alloc_slots[j].kind) & mask;
                /* Move j into the hole unless its home lies cyclically in (hole, j]. */
                bool between = hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
                if (!between) {
                    ci_alloc_slots[hole] = ci_alloc_slots[j];
                    hole = j;
                }
            }
            memset(&ci_alloc_slots[hole], 0, sizeof ci_alloc_slots[hole]);
            ci_alloc_count--;
        }
    }
    pthread_mutex_unlock(&ci_alloc_lock);
    return rc;
}

void ci_alloc_table_reset(void)
{
    pthread_mutex_lock(&ci_alloc_lock);
    if (ci_alloc_slots != NULL)
        memset(ci_alloc_slots, 0, ci_alloc_cap * sizeof(struct ci_alloc_entry));
    ci_alloc_count = 0;
    pthread_mutex_unlock(&ci_alloc_lock);
}

void ci_alloc_table_lock_for_fork(void)
{
    pthread_mutex_lock(&ci_alloc_lock);
}

void ci_alloc_table_unlock_after_fork(void)
{
    pthread_mutex_unlock(&ci_alloc_lock);
}
