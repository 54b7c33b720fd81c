/*
 * shared_bench: the costs of shared memory under dpu-cc, each next to its
 * baseline in the same run. Built with dpu-cc. DPU_SOCKET is this node,
 * DPU_BENCH_OWNER_SOCKET the node that allocates the pages (one hop away
 * on a 2-node fabric). Prints key=value pairs (nanoseconds, medians):
 *
 *   direct_fetch_add_ns   dpu_fetch_add64 on a page of the owner
 *   cc_fetch_add_ns       atomic_fetch_add on the same word through dpu_mmap
 *   load64_ns             dpu_load64 of a page of the owner
 *   load_page_ns          dpu_load of a whole page of the owner (what a fault fetches)
 *   first_touch_ns        the first read of a dpu_mmap page (a userfaultfd fault)
 *   touch_load64_ns       dpu_load64 of a page of the owner, taken right before
 *                         each first touch (the touches' own baseline)
 *   hook_touch_ns         the same page brought in by dpu_mmap_touch, as an
 *                         access hook does (no fault), then read
 *   resident_read_ns      a 64-bit read of a present dpu_mmap page (per read)
 *   private_read_ns       the same loop on malloc'd memory
 */
#define _GNU_SOURCE
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "dpu.h"

#if defined(__clang__)
#define NATIVE __attribute__((no_sanitize("thread"), noinline))
#else
#define NATIVE __attribute__((no_sanitize_thread, noinline))
#endif

#define OPS 2000
#define BLOCK 100
#define TOUCH_PAGES 256 /* the first half faults, the second is brought in by the hook's call */

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp);
    return v[n / 2];
}

static void must(int rc, const char *what) {
    if (rc < 0) {
        fprintf(stderr, "shared_bench: %s: %s (%s)\n", what, dpu_strerror(rc), dpu_last_error());
        exit(1);
    }
}

/* Plain reads outside the instrumentation: what uninstrumented code pays. */
NATIVE static uint64_t read_words(const volatile uint64_t *p, size_t words, int reps) {
    uint64_t s = 0;
    for (int r = 0; r < reps; r++)
        for (size_t i = 0; i < words; i++) s += p[i];
    return s;
}

NATIVE static uint64_t first_read(const volatile uint64_t *p) { return *p; }

int main(void) {
    dpu_t *d, *owner;
    must(dpu_open(NULL, &d), "open");
    must(dpu_open(getenv("DPU_BENCH_OWNER_SOCKET"), &owner), "open the owner's node");
    dpu_gva_t g;
    must(dpu_alloc_mode(owner, (2 + TOUCH_PAGES) * DPU_PAGE_SIZE, 0666, &g), "alloc");
    dpu_gva_t unmapped = dpu_gva_add(g, DPU_PAGE_SIZE);
    void *page;
    must(dpu_mmap(d, g, DPU_PAGE_SIZE, PROT_READ | PROT_WRITE, &page), "mmap");
    _Atomic uint64_t *word = page;

    static double direct[OPS], viacc[OPS], load[OPS], loadpage[OPS];
    static char pagebuf[DPU_PAGE_SIZE];
    uint64_t old;
    for (int i = 0; i < 50; i++) { /* warm both paths */
        must(dpu_fetch_add64(d, g, 1, &old), "fetch-add");
        atomic_fetch_add(word, 1);
    }
    for (int b = 0; b < OPS; b += BLOCK) {
        for (int i = b; i < b + BLOCK; i++) {
            double t0 = now_ns();
            must(dpu_fetch_add64(d, g, 1, &old), "fetch-add");
            direct[i] = now_ns() - t0;
        }
        for (int i = b; i < b + BLOCK; i++) {
            double t0 = now_ns();
            atomic_fetch_add(word, 1);
            viacc[i] = now_ns() - t0;
        }
        for (int i = b; i < b + BLOCK; i++) {
            uint64_t v;
            double t0 = now_ns();
            must(dpu_load64(d, unmapped, &v), "load64");
            load[i] = now_ns() - t0;
        }
        for (int i = b; i < b + BLOCK; i++) {
            double t0 = now_ns();
            must(dpu_load(d, unmapped, pagebuf, DPU_PAGE_SIZE), "load");
            loadpage[i] = now_ns() - t0;
        }
    }
    uint64_t total;
    must(dpu_load64(owner, g, &total), "load64");
    if (total != 100 + 2 * OPS) {
        fprintf(stderr, "shared_bench: counter %llu, want %d\n", (unsigned long long)total, 100 + 2 * OPS);
        return 1;
    }

    /* First touch: a fault per page, each fetching the page from the owner. */
    void *area;
    must(dpu_mmap(d, dpu_gva_add(g, 2 * DPU_PAGE_SIZE), TOUCH_PAGES * DPU_PAGE_SIZE, PROT_READ, &area), "mmap");
    /* The refs the mapping took make the node fetch its replicas; let that
     * settle so the faults are measured alone. */
    struct timespec settle = {0, 300000000};
    nanosleep(&settle, NULL);
    static double touch[TOUCH_PAGES / 2], hook[TOUCH_PAGES / 2], tload[TOUCH_PAGES / 2];
    for (int i = 0; i < TOUCH_PAGES / 2; i++) {
        uint64_t v;
        double tl = now_ns();
        must(dpu_load64(d, unmapped, &v), "load64");
        tload[i] = now_ns() - tl;
        const volatile uint64_t *p = (const volatile uint64_t *)((char *)area + (size_t)i * DPU_PAGE_SIZE);
        double t0 = now_ns();
        first_read(p);
        touch[i] = now_ns() - t0;
        p = (const volatile uint64_t *)((char *)area + (size_t)(i + TOUCH_PAGES / 2) * DPU_PAGE_SIZE);
        t0 = now_ns();
        must(dpu_mmap_touch((const void *)p, 0), "touch");
        first_read(p);
        hook[i] = now_ns() - t0;
    }

    /* Resident reads: the page is here and fresh; no fault, no hook. */
    uint64_t *priv = malloc(DPU_PAGE_SIZE);
    memset(priv, 1, DPU_PAGE_SIZE);
    enum { REPS = 20000 };
    double t0 = now_ns();
    uint64_t s1 = read_words(area, DPU_PAGE_SIZE / 8, REPS);
    double shared_t = now_ns() - t0;
    t0 = now_ns();
    uint64_t s2 = read_words(priv, DPU_PAGE_SIZE / 8, REPS);
    double priv_t = now_ns() - t0;
    double reads = (double)REPS * DPU_PAGE_SIZE / 8;

    printf("direct_fetch_add_ns=%.0f cc_fetch_add_ns=%.0f load64_ns=%.0f load_page_ns=%.0f first_touch_ns=%.0f hook_touch_ns=%.0f touch_load64_ns=%.0f "
           "resident_read_ns=%.3f private_read_ns=%.3f checksum=%llu\n",
           median(direct, OPS), median(viacc, OPS), median(load, OPS), median(loadpage, OPS), median(touch, TOUCH_PAGES / 2), median(hook, TOUCH_PAGES / 2), median(tload, TOUCH_PAGES / 2),
           shared_t / reads, priv_t / reads, (unsigned long long)(s1 + s2));
    must(dpu_munmap(d, area, TOUCH_PAGES * DPU_PAGE_SIZE), "munmap");
    must(dpu_munmap(d, page, DPU_PAGE_SIZE), "munmap");
    must(dpu_free(owner, g), "free");
    dpu_close(d);
    dpu_close(owner);
    return 0;
}
