/*
 * table.c — the allocation table: what each live allocation made through
 * the hook weighs and on which device, keyed by (kind, pointer or handle).
 * Open addressing with linear probing and tombstones under one mutex; it
 * grows by doubling and never shrinks below its first size.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "hook.h"

enum { EMPTY = 0, TOMB = 0xffffffffu, FIRST = 1024 };

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct allocation *slots;
static size_t cap, live, tombs;

static uint64_t mix(uint64_t k, uint32_t kind) {
    k ^= (uint64_t)kind << 56;
    k += 0x9e3779b97f4a7c15ull;
    k = (k ^ (k >> 30)) * 0xbf58476d1ce4e5b9ull;
    k = (k ^ (k >> 27)) * 0x94d049bb133111ebull;
    return k ^ (k >> 31);
}

static int rehash(size_t ncap) {
    struct allocation *n = calloc(ncap, sizeof *n);
    if (!n)
        return -ENOMEM;
    for (size_t i = 0; i < cap; i++) {
        struct allocation *a = &slots[i];
        if (a->kind == EMPTY || a->kind == TOMB)
            continue;
        size_t j = mix(a->key, a->kind) & (ncap - 1);
        while (n[j].kind != EMPTY)
            j = (j + 1) & (ncap - 1);
        n[j] = *a;
    }
    free(slots);
    slots = n;
    cap = ncap;
    tombs = 0;
    return 0;
}

int table_put(const struct allocation *a) {
    pthread_mutex_lock(&mu);
    int rc = 0;
    if (!slots || (live + tombs + 1) * 4 > cap * 3) {
        size_t ncap = cap ? cap : FIRST;
        while ((live + 1) * 2 > ncap)
            ncap *= 2;
        rc = rehash(ncap);
    }
    if (rc == 0) {
        size_t j = mix(a->key, a->kind) & (cap - 1), tomb = (size_t)-1;
        for (;; j = (j + 1) & (cap - 1)) {
            struct allocation *s = &slots[j];
            if (s->kind == EMPTY)
                break;
            if (s->kind == TOMB) {
                if (tomb == (size_t)-1)
                    tomb = j;
                continue;
            }
            if (s->kind == a->kind && s->key == a->key) { /* reused address: replace */
                *s = *a;
                pthread_mutex_unlock(&mu);
                return 0;
            }
        }
        if (tomb != (size_t)-1) {
            j = tomb;
            tombs--;
        }
        slots[j] = *a;
        live++;
    }
    pthread_mutex_unlock(&mu);
    return rc;
}

int table_take(uint32_t kind, uint64_t key, struct allocation *out) {
    pthread_mutex_lock(&mu);
    int found = 0;
    if (slots) {
        for (size_t j = mix(key, kind) & (cap - 1);; j = (j + 1) & (cap - 1)) {
            struct allocation *s = &slots[j];
            if (s->kind == EMPTY)
                break;
            if (s->kind == kind && s->key == key) {
                *out = *s;
                memset(s, 0, sizeof *s);
                s->kind = TOMB;
                live--;
                tombs++;
                found = 1;
                break;
            }
        }
    }
    pthread_mutex_unlock(&mu);
    return found;
}

uint64_t table_count(void) {
    pthread_mutex_lock(&mu);
    uint64_t n = live;
    pthread_mutex_unlock(&mu);
    return n;
}

/* table_reset empties the table in a child after fork (the child has no
 * device allocations; the mutex may have been held by another thread). */
void table_reset(void) {
    pthread_mutex_init(&mu, NULL);
    free(slots);
    slots = NULL;
    cap = live = tombs = 0;
}
