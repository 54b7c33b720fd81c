/*
 * fabbw — the fabric's raw rate for what the remoting moves, with no GPU
 * and no remoting. A region is allocated on the node of SOCK_DST.
 *
 * Raw: one dpu_store of BYTES from a connection to SOCK_SRC into the
 * region (libdpu sends it as STORE_BULK requests through the connection's
 * bulk area), one dpu_load of them back across the fabric, and one
 * dpu_load at SOCK_DST (local): the fabric's bulk rate the remoting is
 * measured against.
 *
 * Staged, for each way of moving pages (bulk chunks, then one page a
 * request): a pool of THREADS connections to SOCK_SRC stores BYTES into
 * the region as staging pages (mbox.c's pages_store: header, data,
 * CRC-32C), then a pool on SOCK_DST loads them back checked (pages_load),
 * as a copy to the device crosses the fabric; then SOCK_SRC loads them
 * across the fabric.
 *
 *   fabbw SOCK_SRC SOCK_DST BYTES [THREADS] [ROUNDS]
 *
 * Prints, the best of ROUNDS (default 3) each: fabric_raw_store_MBps,
 * fabric_raw_load_MBps, fabric_raw_local_load_MBps, then for MODE bulk
 * and paged fabric_MODE_store_MBps, fabric_MODE_local_load_MBps,
 * fabric_MODE_staged_MBps (the two one after the other, as one staged
 * chunk goes) and fabric_MODE_remote_load_MBps; fabric_ok=1 when every
 * transfer came back whole.
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

static double rate(size_t bytes, double t0, double t1) { return (double)bytes / (t1 - t0) / 1e6; }
static void best(double *b, double v) { if (v > *b) *b = v; }

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: fabbw SOCK_SRC SOCK_DST BYTES [THREADS] [ROUNDS]\n");
        return 2;
    }
    size_t bytes = (size_t)strtoull(argv[3], NULL, 10);
    int threads = argc > 4 ? atoi(argv[4]) : 8;
    int rounds = argc > 5 ? atoi(argv[5]) : 3;
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
    double raw_s = 0, raw_l = 0, raw_ll = 0;
    double st[2] = {0, 0}, ll[2] = {0, 0}, sg[2] = {0, 0}, rl[2] = {0, 0};
    uint64_t seq = 1;
    for (int round = 0; round < rounds && rc == 0; round++) {
        double t0 = now_s();
        rc = dpu_store(src, region, buf, bytes);
        double t1 = now_s();
        memset(back, 0, bytes);
        double t2 = now_s();
        if (rc == 0)
            rc = dpu_load(src, region, back, bytes);
        double t3 = now_s();
        if (rc == 0 && memcmp(buf, back, bytes) != 0)
            rc = -1;
        memset(back, 0, bytes);
        double t4 = now_s();
        if (rc == 0)
            rc = dpu_load(dst, region, back, bytes);
        double t5 = now_s();
        if (rc == 0 && memcmp(buf, back, bytes) != 0)
            rc = -1;
        best(&raw_s, rate(bytes, t0, t1));
        best(&raw_l, rate(bytes, t2, t3));
        best(&raw_ll, rate(bytes, t4, t5));
        for (int mode = 0; mode < 2 && rc == 0; mode++) {
            struct xfer x = {.mode = mode ? RW_XFER_PAGED : 0};
            struct rw_stage_hdr tag = {seq++, 42};
            memset(back, 0, bytes);
            t0 = now_s();
            rc = pages_store(ps, src, region, buf, bytes, tag, &x);
            t1 = now_s();
            if (rc == 0)
                rc = pages_load(pd, dst, region, back, bytes, tag, &x);
            t2 = now_s();
            if (rc == 0 && memcmp(buf, back, bytes) != 0)
                rc = -1;
            memset(back, 0, bytes);
            t3 = now_s();
            if (rc == 0)
                rc = pages_load(ps, src, region, back, bytes, tag, &x);
            t4 = now_s();
            if (rc == 0 && memcmp(buf, back, bytes) != 0)
                rc = -1;
            best(&st[mode], rate(bytes, t0, t1));
            best(&ll[mode], rate(bytes, t1, t2));
            best(&sg[mode], rate(bytes, t0, t2));
            best(&rl[mode], rate(bytes, t3, t4));
        }
    }
    if (rc != 0)
        fprintf(stderr, "fabbw: %s (%s)\n", rc == -1 ? "bytes differ" : dpu_strerror(rc), dpu_last_error());
    printf("fabric_bytes=%zu\nfabric_threads=%d\nfabric_ok=%d\n", bytes, threads, rc == 0);
    printf("fabric_raw_store_MBps=%.1f\nfabric_raw_load_MBps=%.1f\nfabric_raw_local_load_MBps=%.1f\n", raw_s, raw_l,
           raw_ll);
    static const char *names[2] = {"bulk", "paged"};
    for (int m = 0; m < 2; m++)
        printf("fabric_%s_store_MBps=%.1f\nfabric_%s_local_load_MBps=%.1f\nfabric_%s_staged_MBps=%.1f\n"
               "fabric_%s_remote_load_MBps=%.1f\n",
               names[m], st[m], names[m], ll[m], names[m], sg[m], names[m], rl[m]);
    pool_free(ps);
    pool_free(pd);
    dpu_free(dst, region);
    dpu_close(src);
    dpu_close(dst);
    return rc != 0;
}
