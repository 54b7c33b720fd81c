/*
 * copyprobe — synchronous copies to the device and back, checked and timed
 * (cuda.h's ABI, linked to libcuda.so.1: the fake driver locally, or
 * libdpucuda-remote).
 *
 *   copyprobe [-sizes B,B,...] [-iters N] [-loop] [-expect-fail] [-fill]
 *
 * For each size (default 1, 4072, 4073, 260609, 3145733: a byte, a staging
 * page's data, a page and a byte, a 64-page chunk and a byte, several
 * chunks across both staging halves) it copies a pattern to the device and
 * back N times (default 1), compares, and prints size_B_wrong (bytes that
 * differ, 0 when every copy is whole), size_B_htod_MBps and
 * size_B_dtoh_MBps (the best of the N). -loop copies the first size
 * forever (printing started=1 first; a test kills it mid-copy).
 * -expect-fail is the corrupt-chunk check (one chunk of one direction
 * corrupt): the device range is zeroed and the pattern copied there
 * (htod_rc=), then read back into a buffer filled with 0xee (dtoh_rc=;
 * dtoh_first_page_delivered: the bytes of the first page's range that
 * changed), then read back again (htod_first_chunk_delivered: the
 * non-zero bytes of the first chunk's range on the device); after_ok=1
 * when a full round trip then succeeds.
 * mem_free= is cuMemGetInfo's free bytes before the probe allocates.
 * Ends with done=1.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cu.h"

CUresult cuInit(unsigned);
CUresult cuDeviceGet(CUdevice *, int);
CUresult cuDevicePrimaryCtxRetain(CUcontext *, CUdevice);
CUresult cuCtxSetCurrent(CUcontext);
CUresult cuMemGetInfo_v2(size_t *, size_t *);
CUresult cuMemAlloc_v2(CUdeviceptr *, size_t);
CUresult cuMemFree_v2(CUdeviceptr);
CUresult cuMemcpyHtoD_v2(CUdeviceptr, const void *, size_t);
CUresult cuMemcpyDtoH_v2(void *, CUdeviceptr, size_t);
CUresult cuMemsetD8_v2(CUdeviceptr, unsigned char, size_t);

#define CHUNK_DATA (64u * 4072u) /* RW_CHUNK_PAGES * RW_STAGE_DATA */
#define PAGE_DATA 4072u

#define CK(x)                                                                                               \
    do {                                                                                                    \
        CUresult r_ = (x);                                                                                  \
        if (r_ != CUDA_SUCCESS) {                                                                           \
            printf("error=%s:%d %s -> %d\n", __FILE__, __LINE__, #x, r_);                                   \
            return 1;                                                                                       \
        }                                                                                                   \
    } while (0)

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void pattern(unsigned char *b, size_t n, unsigned seed) {
    uint32_t x = 2463534242u ^ seed;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 17, x ^= x << 5;
        b[i] = (unsigned char)(x | 1); /* never 0: a zeroed byte is one not delivered */
    }
}

int main(int argc, char **argv) {
    size_t sizes[32] = {1, 4072, 4073, 260609, 3145733};
    int nsizes = 5, iters = 1, loop = 0, expect_fail = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-sizes") && i + 1 < argc) {
            nsizes = 0;
            for (char *t = strtok(argv[++i], ","); t && nsizes < 32; t = strtok(NULL, ","))
                sizes[nsizes++] = (size_t)strtoull(t, NULL, 10);
        } else if (!strcmp(argv[i], "-iters") && i + 1 < argc) {
            iters = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "-loop")) {
            loop = 1;
        } else if (!strcmp(argv[i], "-expect-fail")) {
            expect_fail = 1;
        } else {
            fprintf(stderr, "usage: copyprobe [-sizes B,B,...] [-iters N] [-loop] [-expect-fail]\n");
            return 2;
        }
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    CUdevice dev;
    CUcontext ctx;
    CK(cuInit(0));
    CK(cuDeviceGet(&dev, 0));
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    size_t fr = 0, tot = 0;
    CK(cuMemGetInfo_v2(&fr, &tot));
    printf("mem_free=%zu\nmem_total=%zu\n", fr, tot);
    size_t max = 0;
    for (int i = 0; i < nsizes; i++)
        if (sizes[i] > max)
            max = sizes[i];
    unsigned char *src = malloc(max), *back = malloc(max);
    CUdeviceptr d;
    if (!src || !back || max == 0)
        return 1;
    CK(cuMemAlloc_v2(&d, max));
    if (expect_fail) {
        size_t n = sizes[0];
        pattern(src, n, 1);
        CK(cuMemsetD8_v2(d, 0, n));
        printf("htod_rc=%d\n", cuMemcpyHtoD_v2(d, src, n));
        memset(back, 0xee, n);
        printf("dtoh_rc=%d\n", cuMemcpyDtoH_v2(back, d, n));
        size_t delivered = 0;
        for (size_t i = 0; i < n && i < PAGE_DATA; i++)
            delivered += back[i] != 0xee;
        printf("dtoh_first_page_delivered=%zu\n", delivered);
        memset(back, 0, n);
        CK(cuMemcpyDtoH_v2(back, d, n));
        delivered = 0;
        for (size_t i = 0; i < n && i < CHUNK_DATA; i++)
            delivered += back[i] != 0;
        printf("htod_first_chunk_delivered=%zu\n", delivered);
        pattern(src, n, 2);
        memset(back, 0, n);
        int ok = cuMemcpyHtoD_v2(d, src, n) == CUDA_SUCCESS && cuMemcpyDtoH_v2(back, d, n) == CUDA_SUCCESS &&
                 memcmp(src, back, n) == 0;
        printf("after_ok=%d\n", ok);
    } else if (loop) {
        pattern(src, sizes[0], 3);
        printf("started=1\n");
        for (long round = 1;; round++) {
            CK(cuMemcpyHtoD_v2(d, src, sizes[0]));
            CK(cuMemcpyDtoH_v2(back, d, sizes[0]));
            printf("round=%ld\n", round);
        }
    } else {
        for (int k = 0; k < nsizes; k++) {
            size_t n = sizes[k];
            double best_h = 0, best_d = 0;
            size_t wrong = 0;
            for (int it = 0; it < iters; it++) {
                pattern(src, n, (unsigned)(k * 131 + it));
                memset(back, 0, n);
                double t0 = now_s();
                CK(cuMemcpyHtoD_v2(d, src, n));
                double t1 = now_s();
                CK(cuMemcpyDtoH_v2(back, d, n));
                double t2 = now_s();
                for (size_t i = 0; i < n; i++)
                    wrong += src[i] != back[i];
                double h = (double)n / (t1 - t0) / 1e6, dd = (double)n / (t2 - t1) / 1e6;
                if (h > best_h) best_h = h;
                if (dd > best_d) best_d = dd;
            }
            printf("size_%zu_wrong=%zu\nsize_%zu_htod_MBps=%.1f\nsize_%zu_dtoh_MBps=%.1f\n", n, wrong, n, best_h, n,
                   best_d);
        }
    }
    CK(cuMemFree_v2(d));
    free(src);
    free(back);
    printf("done=1\n");
    return 0;
}
