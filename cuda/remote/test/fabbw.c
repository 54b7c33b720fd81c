/*
 * fabbw — the fabric's raw rate for the pages the remoting moves, with no
 * GPU and no remoting: a region is allocated on the node of SOCK_DST; a
 * pool of THREADS connections to SOCK_SRC STOREs BYTES into it as staging
 * pages (header, data, checksum: mbox.c's pages_store), then a pool on
 * SOCK_DST LOADs them back checked (pages_load), as a copy to the device
 * crosses the fabric; then SOCK_SRC LOADs them across the fabric.
 *
 *   fabbw SOCK_SRC SOCK_DST BYTES [THREADS]
 *
 * Prints fabric_store_MBps, fabric_local_load_MBps, fabric_staged_MBps (the
 * two one after the other, as one staged chunk goes) and
 * fabric_remote_load_MBps.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mbox.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: fabbw SOCK_SRC SOCK_DST BYTES [THREADS]\n");
        return 2;
    }
    size_t bytes = (size_t)strtoull(argv[3], NULL, 10);
    int threads = argc > 4 ? atoi(argv[4]) : 8;
    dpu_t *src, *dst;
    if (dpu_open(argv[1], &src) < 0 || dpu_open(argv[2], &dst) < 0) {
        fprintf(stderr, "fabbw: open: %s\n", dpu_last_error());
        return 1;
    }
    size_t pages = (bytes + RW_STAGE_DATA - 1) / RW_STAGE_DATA;
    dpu_gva_t region;
    if (dpu_alloc_mode(dst, pages * RW_PAGE, 0666, &region) < 0) {
        fprintf(stderr, "fabbw: alloc: %s\n", dpu_last_error());
        return 1;
    }
    struct pool *ps = pool_new(argv[1], threads), *pd = pool_new(argv[2], threads);
    unsigned char *buf = malloc(bytes), *back = malloc(bytes);
    if (!ps || !pd || !buf || !back)
        return 1;
    for (size_t i = 0; i < bytes; i++)
        buf[i] = (unsigned char)(i * 131 + 7);
    int rc = 0;
    double best_store = 0, best_load = 0, best_staged = 0, best_remote = 0;
    for (uint64_t round = 1; round <= 3 && rc == 0; round++) {
        struct rw_stage_hdr tag = {round, 42};
        memset(back, 0, bytes);
        double t0 = now_s();
        rc = pages_store(ps, src, region, buf, bytes, tag, NULL);
        double t1 = now_s();
        if (rc == 0)
            rc = pages_load(pd, dst, region, back, bytes, tag, NULL);
        double t2 = now_s();
        if (rc == 0 && memcmp(buf, back, bytes) != 0)
            rc = -1;
        memset(back, 0, bytes);
        double t3 = now_s();
        if (rc == 0)
            rc = pages_load(ps, src, region, back, bytes, tag, NULL);
        double t4 = now_s();
        if (rc == 0 && memcmp(buf, back, bytes) != 0)
            rc = -1;
        double s = bytes / (t1 - t0) / 1e6, l = bytes / (t2 - t1) / 1e6, st = bytes / (t2 - t0) / 1e6,
               r = bytes / (t4 - t3) / 1e6;
        if (s > best_store) best_store = s;
        if (l > best_load) best_load = l;
        if (st > best_staged) best_staged = st;
        if (r > best_remote) best_remote = r;
    }
    printf("fabric_bytes=%zu\nfabric_threads=%d\nfabric_ok=%d\n", bytes, threads, rc == 0);
    printf("fabric_store_MBps=%.1f\nfabric_local_load_MBps=%.1f\nfabric_staged_MBps=%.1f\nfabric_remote_load_MBps=%.1f\n",
           best_store, best_load, best_staged, best_remote);
    pool_free(ps);
    pool_free(pd);
    dpu_free(dst, region);
    dpu_close(src);
    dpu_close(dst);
    return rc != 0;
}
