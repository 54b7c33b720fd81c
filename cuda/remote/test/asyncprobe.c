/*
 * asyncprobe — the asynchronous semantics of the remote driver, against
 * the fake driver (fake/fakegpu.c) behind the launcher.
 *
 *   asyncprobe MODULE GATE [-launches N]
 *
 * GATE is the file the launcher's fake waits for in spin(-1) ($FAKEGPU_GATE
 * of the launcher): N such launches must all return before any has run
 * (the probe creates GATE only after the last one returned), then the
 * stream synchronises. Then: work on two streams, ordered by events,
 * mixing asynchronous memsets, launches, small and large copies to the
 * device, a device-to-device copy and copies back, gives the result of
 * running it in order; a launch the driver refuses on the launcher returns
 * success and its error comes back at the next synchronisation, once; a
 * fault (spin(-2)) is sticky. Prints key=value lines.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cu.h"

CUresult cuInit(unsigned);
CUresult cuDeviceGet(CUdevice *, int);
CUresult cuDevicePrimaryCtxRetain(CUcontext *, CUdevice);
CUresult cuCtxSetCurrent(CUcontext);
CUresult cuCtxSynchronize(void);
CUresult cuModuleLoadData(CUmodule *, const void *);
CUresult cuModuleGetFunction(CUfunction *, CUmodule, const char *);
CUresult cuMemAlloc_v2(CUdeviceptr *, size_t);
CUresult cuMemAllocHost_v2(void **, size_t);
CUresult cuMemcpyHtoD_v2(CUdeviceptr, const void *, size_t);
CUresult cuMemcpyDtoH_v2(void *, CUdeviceptr, size_t);
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr, const void *, size_t, CUstream);
CUresult cuMemcpyDtoHAsync_v2(void *, CUdeviceptr, size_t, CUstream);
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr, CUdeviceptr, size_t, CUstream);
CUresult cuMemsetD32Async(CUdeviceptr, unsigned, size_t, CUstream);
CUresult cuLaunchKernel(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                        void **, void **);
CUresult cuStreamCreate(CUstream *, unsigned);
CUresult cuStreamSynchronize(CUstream);
CUresult cuStreamQuery(CUstream);
CUresult cuEventCreate(CUevent *, unsigned);
CUresult cuEventRecord(CUevent, CUstream);
CUresult cuEventSynchronize(CUevent);
CUresult cuEventQuery(CUevent);
CUresult cuStreamWaitEvent(CUstream, CUevent, unsigned);
CUresult cuLaunchHostFunc(CUstream, CUhostFn, void *);
CUresult cuStreamAddCallback(CUstream, CUstreamCallback, void *, unsigned);

static volatile int hostfn_ran, callback_status = -1, saw_copy = -1;
static void on_host(void *p) {
    (void)p;
    hostfn_ran++;
}
static void on_stream(CUstream s, CUresult status, void *p) {
    (void)s, (void)p;
    callback_status = (int)status;
}
static float *seen;
static int seen_n;
static void on_copy(void *p) {
    (void)p;
    saw_copy = seen[0] == 30.0f && seen[seen_n - 1] == 5.0f;
}

#define CK(x)                                                                                               \
    do {                                                                                                    \
        CUresult r_ = (x);                                                                                  \
        if (r_ != CUDA_SUCCESS) {                                                                           \
            printf("error=%s:%d %s -> %d\n", __FILE__, __LINE__, #x, r_);                                   \
            return 1;                                                                                       \
        }                                                                                                   \
    } while (0)

static unsigned fbits(float f) {
    unsigned u;
    memcpy(&u, &f, 4);
    return u;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: asyncprobe MODULE GATE [-launches N]\n");
        return 2;
    }
    int launches = 2000;
    if (argc >= 5 && !strcmp(argv[3], "-launches"))
        launches = atoi(argv[4]);
    FILE *f = fopen(argv[1], "rb");
    if (!f) {
        perror(argv[1]);
        return 2;
    }
    char img[65536] = {0};
    if (fread(img, 1, sizeof img - 1, f) == 0)
        return 2;
    fclose(f);
    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CUfunction fscale, fspin, fmm;
    CK(cuInit(0));
    CK(cuDeviceGet(&dev, 0));
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    CK(cuModuleLoadData(&mod, img));
    CK(cuModuleGetFunction(&fscale, mod, "scale"));
    CK(cuModuleGetFunction(&fspin, mod, "spin"));
    CK(cuModuleGetFunction(&fmm, mod, "matmul"));
    CUstream s1, s2;
    CK(cuStreamCreate(&s1, 1));
    CK(cuStreamCreate(&s2, 1));

    /* 1. Launches return before the kernels run: the fake runs none of
     * them until GATE exists, and GATE is made after the last returns. */
    size_t gbytes = 1 << 20;
    unsigned char *gsrc = malloc(gbytes);
    memset(gsrc, 7, gbytes);
    CUdeviceptr gdst;
    CUevent ge;
    CK(cuMemAlloc_v2(&gdst, gbytes));
    CK(cuEventCreate(&ge, 0));
    int gate = -1, bad = 0;
    void *pg[] = {&gate};
    for (int i = 0; i < launches; i++) {
        CUresult r = cuLaunchKernel(fspin, 1, 1, 1, 32, 1, 1, 0, s1, pg, NULL);
        if (r != CUDA_SUCCESS) {
            printf("gated_launch_%d=%d\n", i, r);
            bad++;
            break;
        }
    }
    printf("gated_launches_returned=%d\n", bad == 0);
    /* A host function and a stream callback return at once and run after
     * the work before them (here: not before GATE). */
    printf("hostfn_returned=%d\n", cuLaunchHostFunc(s1, on_host, NULL));
    printf("callback_returned=%d\n", cuStreamAddCallback(s1, on_stream, NULL, 0));
    printf("hostfn_ran_before_gate=%d\n", hostfn_ran);
    /* A large copy to the device returns too, and a query of an event
     * recorded after it all says not ready without waiting. */
    printf("big_copy_returned=%d\n", cuMemcpyHtoDAsync_v2(gdst, gsrc, gbytes, s1));
    memset(gsrc, 0, gbytes); /* taken at the call */
    CK(cuEventRecord(ge, s1));
    printf("query_before_gate=%d\n", cuEventQuery(ge));
    int fd = open(argv[2], O_CREAT | O_WRONLY, 0644);
    if (fd >= 0)
        close(fd);
    printf("gated_sync=%d\n", cuStreamSynchronize(s1));
    printf("hostfn_ran=%d\ncallback_status=%d\n", hostfn_ran, callback_status);
    unsigned char gback[64];
    CK(cuMemcpyDtoH_v2(gback, gdst + gbytes - 64, sizeof gback));
    printf("big_copy_ok=%d\n", gback[0] == 7 && gback[63] == 7);

    /* 2. Order across two streams and kinds of operation. */
    int n = 1 << 18, half = n / 2;
    size_t bytes = (size_t)n * sizeof(float);
    CUdeviceptr x, y;
    CK(cuMemAlloc_v2(&x, bytes));
    CK(cuMemAlloc_v2(&y, 64 * sizeof(float)));
    /* Pinned memory (cuMemAllocHost) for the copies back: those complete
     * in stream order; one into pageable memory completes at the call. */
    float *h, *h2, *big = malloc((size_t)half * sizeof(float)), small[16], back[16];
    CK(cuMemAllocHost_v2((void **)&h, bytes));
    CK(cuMemAllocHost_v2((void **)&h2, 16 * sizeof(float)));
    for (int i = 0; i < half; i++)
        big[i] = 5.0f;
    for (int i = 0; i < 16; i++)
        small[i] = 10.0f;
    CUevent e1, e2;
    CK(cuEventCreate(&e1, 0));
    CK(cuEventCreate(&e2, 0));
    float two = 2.0f, three = 3.0f;
    void *p2[] = {&x, &two, &n}, *p3[] = {&x, &three, &n};
    CK(cuMemsetD32Async(x, fbits(1.0f), (size_t)n, s1));
    CK(cuLaunchKernel(fscale, (unsigned)(n + 255) / 256, 1, 1, 256, 1, 1, 0, s1, p2, NULL)); /* all 2 */
    CK(cuEventRecord(e1, s1));
    CK(cuStreamWaitEvent(s2, e1, 0));
    CK(cuMemcpyHtoDAsync_v2(x, small, sizeof small, s2)); /* [0,16) 10 */
    memset(small, 0, sizeof small); /* taken at the call (pageable) */
    CK(cuLaunchKernel(fscale, (unsigned)(n + 255) / 256, 1, 1, 256, 1, 1, 0, s2, p3, NULL)); /* 30, 6 */
    CK(cuMemcpyHtoDAsync_v2(x + (size_t)half * sizeof(float), big, (size_t)half * sizeof(float), s2)); /* 5 */
    CK(cuMemcpyDtoDAsync_v2(x + 100 * sizeof(float), x, 16 * sizeof(float), s2)); /* [100,116) 30 */
    CK(cuMemcpyDtoHAsync_v2(h, x, bytes, s2));
    seen = h, seen_n = n;
    CK(cuLaunchHostFunc(s2, on_copy, NULL)); /* it sees the copy before it */
    CK(cuEventRecord(e2, s2));
    /* A copy back, then a copy out of the same memory on the stream. */
    CK(cuMemcpyDtoHAsync_v2(h2, x, 16 * sizeof(float), s2));
    CK(cuMemcpyHtoDAsync_v2(y, h2, 16 * sizeof(float), s2));
    CK(cuEventSynchronize(e2));
    int wrong = 0;
    for (int i = 0; i < n; i++) {
        float want = i < 16 ? 30.0f : i >= 100 && i < 116 ? 30.0f : i < half ? 6.0f : 5.0f;
        wrong += h[i] != want;
    }
    CK(cuStreamSynchronize(s2));
    CK(cuMemcpyDtoH_v2(back, y, sizeof back));
    for (int i = 0; i < 16; i++)
        wrong += h2[i] != 30.0f || back[i] != 30.0f;
    printf("order_wrong=%d\nhostfn_saw_copy=%d\n", wrong, saw_copy);
    float page[16] = {0};
    CK(cuMemcpyDtoHAsync_v2(page, x, sizeof page, s1));
    printf("pageable_copy_done=%d\n", page[0] == 30.0f && page[15] == 30.0f);
    /* A query finds the copies done and they are there when it says so. */
    memset(h, 0, bytes);
    CK(cuMemcpyDtoHAsync_v2(h, x, bytes, s1));
    CK(cuEventRecord(e1, s1));
    CUresult q;
    time_t give_up = time(NULL) + 60;
    while ((q = cuEventQuery(e1)) == CUDA_ERROR_NOT_READY && time(NULL) < give_up)
        ;
    printf("query=%d\nquery_copy_ok=%d\n", q, h[0] == 30.0f && h[n - 1] == 5.0f);

    /* 3. A launch the launcher's driver refuses (matmul's grid does not
     * cover the matrix): success at the call, its error at the next
     * synchronisation, once; the launches after it ran. */
    int m = 64;
    void *pm[] = {&x, &x, &y, &m};
    float half_f = 0.5f;
    void *ph[] = {&x, &half_f, &n};
    CUresult launch_r = CUDA_SUCCESS;
    for (int i = 0; i < 3; i++)
        launch_r |= cuLaunchKernel(fscale, (unsigned)(n + 255) / 256, 1, 1, 256, 1, 1, 0, s1, ph, NULL);
    CUresult refused = cuLaunchKernel(fmm, 1, 1, 1, 16, 16, 1, 0, s1, pm, NULL);
    for (int i = 0; i < 3; i++)
        launch_r |= cuLaunchKernel(fscale, (unsigned)(n + 255) / 256, 1, 1, 256, 1, 1, 0, s1, ph, NULL);
    printf("good_launches=%d\nrefused_launch=%d\n", launch_r, refused);
    printf("first_sync=%d\n", cuStreamSynchronize(s1));
    printf("second_sync=%d\n", cuStreamSynchronize(s1));
    float one = 0;
    CK(cuMemcpyDtoH_v2(&one, x + 200 * sizeof(float), sizeof one));
    printf("after_refused_ok=%d\n", one == 6.0f / 64.0f);
    /* Refused at the call, as the driver does: a block too large. */
    printf("oversized_block=%d\n", cuLaunchKernel(fscale, 1, 1, 1, 2048, 1, 1, 0, s1, ph, NULL));

    /* 4. A fault is sticky. */
    int fault = -2;
    void *pf[] = {&fault};
    printf("fault_launch=%d\n", cuLaunchKernel(fspin, 1, 1, 1, 32, 1, 1, 0, s1, pf, NULL));
    printf("fault_sync=%d\n", cuCtxSynchronize());
    printf("after_fault_launch=%d\n", cuLaunchKernel(fscale, 1, 1, 1, 32, 1, 1, 0, s1, ph, NULL));
    printf("after_fault_query=%d\n", cuStreamQuery(s2));
    printf("done=1\n");
    return 0;
}
