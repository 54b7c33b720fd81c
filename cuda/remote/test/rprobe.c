/*
 * rprobe — a CUDA driver API program (cuda.h's ABI, linked to libcuda.so.1)
 * that the remote tests run twice, against a local driver and through
 * libdpucuda-remote, and whose results must be identical.
 *
 *   rprobe MODULE [-n ELEMS] [-m MATRIX] [-launches N] [-bw BYTES]
 *
 * MODULE holds the kernels vecadd, matmul, scale and spin (PTX from
 * gpu/kernels.cu on a GPU; "fakegpu" for the fake driver). It prints
 * key=value lines: checksums (FNV-1a of the result bytes) that must match,
 * then timings (launch cost, copy bandwidth) that need not.
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
CUresult cuDeviceGetName(char *, int, CUdevice);
CUresult cuDevicePrimaryCtxRetain(CUcontext *, CUdevice);
CUresult cuCtxSetCurrent(CUcontext);
CUresult cuCtxSynchronize(void);
CUresult cuModuleLoadData(CUmodule *, const void *);
CUresult cuModuleGetFunction(CUfunction *, CUmodule, const char *);
CUresult cuMemAlloc_v2(CUdeviceptr *, size_t);
CUresult cuMemFree_v2(CUdeviceptr);
CUresult cuMemcpyHtoD_v2(CUdeviceptr, const void *, size_t);
CUresult cuMemcpyDtoH_v2(void *, CUdeviceptr, size_t);
CUresult cuMemcpyDtoD_v2(CUdeviceptr, CUdeviceptr, size_t);
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr, const void *, size_t, CUstream);
CUresult cuMemcpyDtoHAsync_v2(void *, CUdeviceptr, size_t, CUstream);
CUresult cuMemsetD32_v2(CUdeviceptr, unsigned, size_t);
CUresult cuLaunchKernel(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                        void **, void **);
CUresult cuStreamCreate(CUstream *, unsigned);
CUresult cuStreamDestroy_v2(CUstream);
CUresult cuStreamSynchronize(CUstream);
CUresult cuEventCreate(CUevent *, unsigned);
CUresult cuEventRecord(CUevent, CUstream);
CUresult cuEventSynchronize(CUevent);
CUresult cuEventElapsedTime(float *, CUevent, CUevent);
CUresult cuEventDestroy_v2(CUevent);
CUresult cuStreamWaitEvent(CUstream, CUevent, unsigned);
CUresult cuLaunchKernelEx(const CUlaunchConfig *, CUfunction, void **, void **);
CUresult cuOccupancyMaxActiveClusters(int *, CUfunction, const CUlaunchConfig *);
CUresult cuTensorMapEncodeTiled(CUtensorMap *, int, uint32_t, void *, const uint64_t *, const uint64_t *,
                                const uint32_t *, const uint32_t *, int, int, int, int);
CUresult cuTensorMapReplaceAddress(CUtensorMap *, void *);

static int fails;
#define CK(x)                                                                                               \
    do {                                                                                                    \
        CUresult r_ = (x);                                                                                  \
        if (r_ != CUDA_SUCCESS) {                                                                           \
            printf("error=%s:%d %s -> %d\n", __FILE__, __LINE__, #x, r_);                                   \
            fails++;                                                                                        \
            return 1;                                                                                       \
        }                                                                                                   \
    } while (0)

static uint64_t fnv(const void *p, size_t n) {
    const unsigned char *b = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}
static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: rprobe MODULE [-n ELEMS] [-m MATRIX] [-launches N] [-bw BYTES]\n");
        return 2;
    }
    int n = 1 << 20, m = 128, launches = 2000;
    size_t bw = 64u << 20;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-n"))
            n = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-m"))
            m = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-launches"))
            launches = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-bw"))
            bw = (size_t)strtoull(argv[i + 1], NULL, 10);
    }
    FILE *f = fopen(argv[1], "rb");
    if (!f) {
        perror(argv[1]);
        return 2;
    }
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *img = calloc(1, (size_t)len + 1);
    if (!img || fread(img, 1, (size_t)len, f) != (size_t)len)
        return 2;
    fclose(f);

    CUdevice dev;
    CUcontext ctx;
    char name[256];
    CK(cuInit(0));
    CK(cuDeviceGet(&dev, 0));
    CK(cuDeviceGetName(name, sizeof name, dev));
    printf("device=%s\n", name);
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    CUmodule mod;
    CUfunction fadd, fmm, fscale, fspin;
    CK(cuModuleLoadData(&mod, img));
    CK(cuModuleGetFunction(&fadd, mod, "vecadd"));
    CK(cuModuleGetFunction(&fmm, mod, "matmul"));
    CK(cuModuleGetFunction(&fscale, mod, "scale"));
    CK(cuModuleGetFunction(&fspin, mod, "spin"));

    /* vector add */
    size_t vb = (size_t)n * sizeof(float);
    float *a = malloc(vb), *b = malloc(vb), *c = malloc(vb);
    for (int i = 0; i < n; i++) {
        a[i] = (float)i * 0.5f;
        b[i] = (float)(i % 1000) * 2.0f;
    }
    CUdeviceptr da, db, dc;
    CK(cuMemAlloc_v2(&da, vb));
    CK(cuMemAlloc_v2(&db, vb));
    CK(cuMemAlloc_v2(&dc, vb));
    CK(cuMemcpyHtoD_v2(da, a, vb));
    CK(cuMemcpyHtoD_v2(db, b, vb));
    void *pa[] = {&da, &db, &dc, &n};
    CK(cuLaunchKernel(fadd, (unsigned)(n + 255) / 256, 1, 1, 256, 1, 1, 0, NULL, pa, NULL));
    CK(cuMemcpyDtoH_v2(c, dc, vb));
    int bad = 0;
    for (int i = 0; i < n; i++)
        bad += c[i] != a[i] + b[i];
    printf("vecadd_wrong=%d\nvecadd_sum=%016llx\n", bad, (unsigned long long)fnv(c, vb));

    /* matrix multiply (custom kernel) */
    size_t mb = (size_t)m * m * sizeof(float);
    float *A = malloc(mb), *B = malloc(mb), *C = malloc(mb);
    for (int i = 0; i < m * m; i++) {
        A[i] = (float)((i * 7) % 13) - 6.0f;
        B[i] = (float)((i * 5) % 11) - 5.0f;
    }
    CUdeviceptr dA, dB, dC;
    CK(cuMemAlloc_v2(&dA, mb));
    CK(cuMemAlloc_v2(&dB, mb));
    CK(cuMemAlloc_v2(&dC, mb));
    CK(cuMemcpyHtoD_v2(dA, A, mb));
    CK(cuMemcpyHtoD_v2(dB, B, mb));
    void *pm[] = {&dA, &dB, &dC, &m};
    CK(cuLaunchKernel(fmm, (unsigned)(m + 15) / 16, (unsigned)(m + 15) / 16, 1, 16, 16, 1, 0, NULL, pm, NULL));
    CK(cuMemcpyDtoH_v2(C, dC, mb));
    bad = 0;
    for (int i = 0; i < m; i += 17)
        for (int j = 0; j < m; j += 13) {
            float acc = 0;
            for (int k = 0; k < m; k++)
                acc += A[i * m + k] * B[k * m + j];
            bad += acc != C[i * m + j];
        }
    printf("matmul_wrong=%d\nmatmul_sum=%016llx\n", bad, (unsigned long long)fnv(C, mb));

    /* streams and events: two streams scale halves; one waits on the other */
    CUstream s1, s2;
    CUevent e0, e1, e2;
    CK(cuStreamCreate(&s1, 1));
    CK(cuStreamCreate(&s2, 1));
    CK(cuEventCreate(&e0, 0));
    CK(cuEventCreate(&e1, 0));
    CK(cuEventCreate(&e2, 0));
    int half = n / 2;
    float f1 = 3.0f, f2 = -0.25f;
    CUdeviceptr dh = da + (size_t)half * sizeof(float);
    CK(cuEventRecord(e0, s1));
    CK(cuMemcpyHtoDAsync_v2(da, a, vb, s1));
    CK(cuEventRecord(e1, s1));
    CK(cuStreamWaitEvent(s2, e1, 0));
    void *ps1[] = {&da, &f1, &half}, *ps2[] = {&dh, &f2, &half};
    CK(cuLaunchKernel(fscale, (unsigned)(half + 255) / 256, 1, 1, 256, 1, 1, 0, s1, ps1, NULL));
    CK(cuLaunchKernel(fscale, (unsigned)(half + 255) / 256, 1, 1, 256, 1, 1, 0, s2, ps2, NULL));
    CK(cuMemcpyDtoHAsync_v2(c, da, (size_t)half * sizeof(float), s1));
    CK(cuMemcpyDtoHAsync_v2(c + half, dh, (size_t)half * sizeof(float), s2));
    CK(cuEventRecord(e2, s2));
    CK(cuStreamSynchronize(s1));
    CK(cuEventSynchronize(e2));
    float ms = -1;
    CK(cuEventElapsedTime(&ms, e0, e2));
    bad = 0;
    for (int i = 0; i < n; i++)
        bad += c[i] != a[i] * (i < half ? f1 : f2);
    printf("streams_wrong=%d\nstreams_sum=%016llx\nstreams_elapsed_ok=%d\n", bad, (unsigned long long)fnv(c, vb),
           ms >= 0);

    /* memset and device-to-device */
    CK(cuMemsetD32_v2(dc, 0x3f800000u, (size_t)n));
    CK(cuMemcpyDtoD_v2(db, dc, vb));
    CK(cuMemcpyDtoH_v2(b, db, vb));
    bad = 0;
    for (int i = 0; i < n; i++)
        bad += b[i] != 1.0f;
    printf("memset_dtod_wrong=%d\n", bad);

    /* a launch with attributes (a cluster of 2, programmatic stream
     * serialization), the cluster occupancy, a tensor map */
    {
        CUlaunchAttribute at[2];
        memset(at, 0, sizeof at);
        at[0].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
        at[0].value.clusterDim.x = 2, at[0].value.clusterDim.y = 1, at[0].value.clusterDim.z = 1;
        at[1].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        at[1].value.raw[0] = 1;
        unsigned grid = (unsigned)((n + 255) / 256 + 1) & ~1u;
        CUlaunchConfig lc = {grid, 1, 1, 256, 1, 1, 0, NULL, at, 2};
        CK(cuMemsetD32_v2(dc, 0, (size_t)n));
        CK(cuLaunchKernelEx(&lc, fadd, pa, NULL));
        CK(cuMemcpyDtoH_v2(c, dc, vb));
        /* da holds the scaled halves, db the ones written above. */
        bad = 0;
        for (int i = 0; i < n; i++) {
            float want = a[i] * (i < half ? f1 : f2);
            bad += c[i] != want + b[i];
        }
        printf("launch_ex_wrong=%d\n", bad);
        int clusters = 0;
        lc.numAttrs = 1;
        CK(cuOccupancyMaxActiveClusters(&clusters, fadd, &lc));
        printf("clusters_ok=%d\n", clusters > 0);
        CUtensorMap tm;
        uint64_t dim[2] = {256, (uint64_t)n / 256}, stride[1] = {256 * sizeof(float)};
        uint32_t box[2] = {32, 8}, es[2] = {1, 1};
        CK(cuTensorMapEncodeTiled(&tm, 7 /* FLOAT32 */, 2, (void *)(uintptr_t)da, dim, stride, box, es, 0, 0, 0, 0));
        CK(cuTensorMapReplaceAddress(&tm, (void *)(uintptr_t)db));
        /* A shape the driver refuses is refused through the fabric too. */
        CUresult r = cuTensorMapEncodeTiled(&tm, 7, 6, (void *)(uintptr_t)dc, dim, stride, box, es, 0, 0, 0, 0);
        printf("tensor_map_ok=1\ntensor_map_rank6_refused=%d\n", r != CUDA_SUCCESS);
    }

    /* timings */
    int loops = 0;
    void *pz[] = {&loops};
    CK(cuCtxSynchronize());
    double t0 = now_s();
    for (int i = 0; i < launches; i++)
        CK(cuLaunchKernel(fspin, 1, 1, 1, 32, 1, 1, 0, NULL, pz, NULL));
    CK(cuCtxSynchronize());
    double t1 = now_s();
    printf("launch_us=%.2f\n", (t1 - t0) * 1e6 / launches);
    unsigned char *big = malloc(bw), *back = malloc(bw);
    for (size_t i = 0; i < bw; i++)
        big[i] = (unsigned char)(i * 131 + 7);
    CUdeviceptr dbig;
    CK(cuMemAlloc_v2(&dbig, bw));
    CK(cuMemcpyHtoD_v2(dbig, big, bw)); /* warm */
    t0 = now_s();
    CK(cuMemcpyHtoD_v2(dbig, big, bw));
    t1 = now_s();
    CK(cuMemcpyDtoH_v2(back, dbig, bw));
    double t2 = now_s();
    printf("bw_roundtrip_ok=%d\n", memcmp(big, back, bw) == 0);
    printf("htod_MBps=%.1f\ndtoh_MBps=%.1f\n", bw / (t1 - t0) / 1e6, bw / (t2 - t1) / 1e6);
    CK(cuMemFree_v2(dbig));
    CK(cuMemFree_v2(da));
    CK(cuMemFree_v2(db));
    CK(cuMemFree_v2(dc));
    CK(cuMemFree_v2(dA));
    CK(cuMemFree_v2(dB));
    CK(cuMemFree_v2(dC));
    CK(cuEventDestroy_v2(e0));
    CK(cuEventDestroy_v2(e1));
    CK(cuEventDestroy_v2(e2));
    CK(cuStreamDestroy_v2(s1));
    CK(cuStreamDestroy_v2(s2));
    printf("done=1\n");
    return fails != 0;
}
