/*
 * launchbench — the cost of cuLaunchKernel as the program sees it.
 *
 *   launchbench N [ROUNDS]
 *
 * Launches a zero-length kernel (of the fake driver) N times per round and
 * prints the best round's time per launch: "launch_ns X". Run it with and
 * without LD_PRELOAD=libdpucuda.so; the difference is the hook's cost on
 * the launch path.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "../src/cuda_abi.h"

CUresult cuInit(unsigned int);
CUresult cuDeviceGet(CUdevice *, int);
CUresult cuCtxCreate_v2(CUcontext *, unsigned int, CUdevice);
CUresult cuModuleLoadData(CUmodule *, const void *);
CUresult cuModuleGetFunction(CUfunction *, CUmodule, const char *);
CUresult cuLaunchKernel(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                        void **, void **);

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int main(int argc, char **argv) {
    uint64_t n = argc > 1 ? strtoull(argv[1], NULL, 10) : 1000000;
    int rounds = argc > 2 ? atoi(argv[2]) : 5;
    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CUfunction f;
    if (cuInit(0) || cuDeviceGet(&dev, 0) || cuCtxCreate_v2(&ctx, 0, dev) || cuModuleLoadData(&mod, "fake") ||
        cuModuleGetFunction(&f, mod, "sleep_us:0")) {
        fprintf(stderr, "launchbench: driver setup failed\n");
        return 1;
    }
    double best = 1e18;
    for (int r = 0; r < rounds; r++) {
        uint64_t t0 = now_ns();
        for (uint64_t i = 0; i < n; i++) {
            if (cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL) != CUDA_SUCCESS) {
                fprintf(stderr, "launchbench: launch failed\n");
                return 1;
            }
        }
        double per = (double)(now_ns() - t0) / (double)(n ? n : 1);
        if (per < best)
            best = per;
    }
    printf("launch_ns %.2f\n", best);
    return 0;
}
