/*
 * libdpu over a ring pair, against hostif/ring/ringtest's stand-in agent
 * (run by c_test.go): a 4 KiB store and load, CAS, and fetch-adds from
 * several threads sharing one connection, whose sum must be exact. The
 * same program runs with DPU_RINGS=0 (the socket); the Go side checks
 * which way the requests came.
 *
 * With DPU_RING_TEST_BENCH=N it instead times N CAS round trips on one
 * thread and prints "cas_p50_ns=... cas_p99_ns=...".
 */
#define _GNU_SOURCE
#include "dpu.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHECK(x)                                                                        \
    do {                                                                                \
        int rc_ = (x);                                                                  \
        if (rc_ != 0) {                                                                 \
            fprintf(stderr, "%s:%d: %s: %d %s\n", __FILE__, __LINE__, #x, rc_, dpu_last_error()); \
            exit(1);                                                                    \
        }                                                                               \
    } while (0)

enum { THREADS = 8, EACH = 500 };

static dpu_t *conn;
static dpu_gva_t counter;

static void *adder(void *arg) {
    (void)arg;
    for (int i = 0; i < EACH; i++) CHECK(dpu_fetch_add64(conn, counter, 1, NULL));
    return NULL;
}

static long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000L + t.tv_nsec;
}

static int cmp(const void *a, const void *b) {
    long x = *(const long *)a, y = *(const long *)b;
    return (x > y) - (x < y);
}

static void bench(int n) {
    long *t = calloc((size_t)n, sizeof *t);
    if (!t) exit(1);
    uint64_t old = 0;
    for (int i = 0; i < 1000; i++) CHECK(dpu_cas64(conn, counter, old, old, &old)); /* warm up */
    for (int i = 0; i < n; i++) {
        long t0 = now_ns();
        CHECK(dpu_cas64(conn, counter, old, old + 1, &old));
        t[i] = now_ns() - t0;
        old++;
    }
    qsort(t, (size_t)n, sizeof *t, cmp);
    printf("cas_p50_ns=%ld cas_p99_ns=%ld\n", t[n / 2], t[n * 99 / 100]);
    free(t);
}

int main(void) {
    CHECK(dpu_open(NULL, &conn));
    CHECK(dpu_alloc(conn, 4096, &counter));
    const char *b = getenv("DPU_RING_TEST_BENCH");
    if (b && atoi(b) > 0) {
        bench(atoi(b));
        dpu_close(conn);
        return 0;
    }
    static uint8_t page[4096], back[4096];
    for (int i = 0; i < 4096; i++) page[i] = (uint8_t)(i * 7);
    CHECK(dpu_store(conn, counter, page, sizeof page));
    CHECK(dpu_load(conn, counter, back, sizeof back));
    if (memcmp(page, back, sizeof page) != 0) {
        fprintf(stderr, "4 KiB load differs from the store\n");
        return 1;
    }
    CHECK(dpu_store64(conn, counter, 0));
    pthread_t th[THREADS];
    for (int i = 0; i < THREADS; i++) pthread_create(&th[i], NULL, adder, NULL);
    for (int i = 0; i < THREADS; i++) pthread_join(th[i], NULL);
    uint64_t old = 0;
    CHECK(dpu_cas64(conn, counter, THREADS * EACH, 7, &old));
    if (old != THREADS * EACH) {
        fprintf(stderr, "counter %llu after %d fetch-adds\n", (unsigned long long)old, THREADS * EACH);
        return 1;
    }
    uint64_t v = 0;
    CHECK(dpu_load64(conn, counter, &v));
    if (v != 7) {
        fprintf(stderr, "cas did not swap: %llu\n", (unsigned long long)v);
        return 1;
    }
    dpu_close(conn);
    printf("ok %d fetch-adds from %d threads\n", THREADS * EACH, THREADS);
    return 0;
}
