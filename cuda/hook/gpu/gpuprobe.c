/*
 * gpuprobe — a CUDA driver API program for gpu-test.sh on a real GPU.
 *
 *   gpuprobe [-max BYTES] [-chunk BYTES] [-hold SECONDS] [-kernels N]
 *            [-kernel-us US] [-launch-bench N] [-graph G] [-ptx FILE]
 *
 * On device 0 (primary context) it reports what the device says of its
 * memory, allocates CHUNK bytes (64 MiB) at a time until MAX (4 GiB) or
 * until refused, reports what it got, holds it for SECONDS, frees it, then
 * runs N spin kernels of about US microseconds each back to back and
 * reports the wall time, and (with -launch-bench) times N launches of an
 * empty kernel. With -graph G the kernel loop runs as a CUDA graph of G
 * spin kernels (stream capture) launched N/G times with cuGraphLaunch.
 * Output lines are key=value.
 *
 * Built with -DREAL against the toolkit's cuda.h it calls the driver through
 * linked symbols; otherwise it uses libdpucuda's declarations (cuda_abi.h)
 * and resolves every entry point through cuGetProcAddress_v2, the way CUDA
 * runtimes do. The kernel is PTX from -ptx FILE (nvcc -ptx spin.cu) or the
 * PTX below, loaded with cuModuleLoadData.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifdef REAL
#include <cuda.h>
#else
#include "../src/cuda_abi.h"
#endif

static const char spin_ptx[] =
    ".version 7.0\n"
    ".target sm_70\n"
    ".address_size 64\n"
    ".visible .entry spin(.param .u64 spin_cycles)\n"
    "{\n"
    "  .reg .pred %p<2>;\n"
    "  .reg .b64 %rd<6>;\n"
    "  ld.param.u64 %rd1, [spin_cycles];\n"
    "  mov.u64 %rd2, %clock64;\n"
    "LOOP:\n"
    "  mov.u64 %rd3, %clock64;\n"
    "  sub.s64 %rd4, %rd3, %rd2;\n"
    "  setp.lt.s64 %p1, %rd4, %rd1;\n"
    "  @%p1 bra LOOP;\n"
    "  ret;\n"
    "}\n";

struct api {
    CUresult (*Init)(unsigned int);
    CUresult (*DriverGetVersion)(int *);
    CUresult (*DeviceGet)(CUdevice *, int);
    CUresult (*DeviceGetName)(char *, int, CUdevice);
    CUresult (*DeviceTotalMem)(size_t *, CUdevice);
    CUresult (*DevicePrimaryCtxRetain)(CUcontext *, CUdevice);
    CUresult (*CtxSetCurrent)(CUcontext);
    CUresult (*CtxSynchronize)(void);
    CUresult (*MemGetInfo)(size_t *, size_t *);
    CUresult (*MemAlloc)(CUdeviceptr *, size_t);
    CUresult (*MemFree)(CUdeviceptr);
    CUresult (*ModuleLoadData)(CUmodule *, const void *);
    CUresult (*ModuleGetFunction)(CUfunction *, CUmodule, const char *);
    CUresult (*LaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             CUstream, void **, void **);
    CUresult (*EventCreate)(CUevent *, unsigned int);
    CUresult (*EventRecord)(CUevent, CUstream);
    CUresult (*EventSynchronize)(CUevent);
    CUresult (*EventElapsedTime)(float *, CUevent, CUevent);
    CUresult (*StreamCreate)(CUstream *, unsigned int);
    CUresult (*StreamBeginCapture)(CUstream, int);
    CUresult (*StreamEndCapture)(CUstream, CUgraph *);
    CUresult (*GraphInstantiate)(CUgraphExec *, CUgraph, unsigned long long);
    CUresult (*GraphLaunch)(CUgraphExec, CUstream);
    CUresult (*StreamSynchronize)(CUstream);
};
static struct api cu;

static void die(const char *what, CUresult r) {
    printf("error=%s:%d\n", what, (int)r);
    fflush(stdout);
    exit(1);
}

#define CHECK(call, what)                                                                          \
    do {                                                                                           \
        CUresult r_ = (call);                                                                      \
        if (r_ != CUDA_SUCCESS)                                                                    \
            die(what, r_);                                                                         \
    } while (0)

#ifdef REAL
static const char *resolve(void) {
    cu.Init = cuInit;
    cu.DriverGetVersion = cuDriverGetVersion;
    cu.DeviceGet = cuDeviceGet;
    cu.DeviceGetName = cuDeviceGetName;
    cu.DeviceTotalMem = cuDeviceTotalMem;
    cu.DevicePrimaryCtxRetain = cuDevicePrimaryCtxRetain;
    cu.CtxSetCurrent = cuCtxSetCurrent;
    cu.CtxSynchronize = cuCtxSynchronize;
    cu.MemGetInfo = cuMemGetInfo;
    cu.MemAlloc = cuMemAlloc;
    cu.MemFree = cuMemFree;
    cu.ModuleLoadData = cuModuleLoadData;
    cu.ModuleGetFunction = cuModuleGetFunction;
    cu.LaunchKernel = cuLaunchKernel;
    cu.EventCreate = cuEventCreate;
    cu.EventRecord = cuEventRecord;
    cu.EventSynchronize = cuEventSynchronize;
    cu.EventElapsedTime = cuEventElapsedTime;
    cu.StreamCreate = cuStreamCreate;
    cu.StreamBeginCapture = (CUresult(*)(CUstream, int))cuStreamBeginCapture;
    cu.StreamEndCapture = cuStreamEndCapture;
    cu.GraphInstantiate = cuGraphInstantiateWithFlags;
    cu.GraphLaunch = cuGraphLaunch;
    cu.StreamSynchronize = cuStreamSynchronize;
    return "linked symbols (cuda.h)";
}
#else
static CUresult (*gpa)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);

static void *proc(const char *name) {
    void *f = NULL;
    CUdriverProcAddressQueryResult st;
    CUresult r = gpa(name, &f, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &st);
    if (r != CUDA_SUCCESS || !f)
        die(name, r);
    return f;
}

static const char *resolve(void) {
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    if (!h) {
        printf("error=dlopen:%s\n", dlerror());
        exit(1);
    }
    gpa = (__typeof__(gpa))dlsym(h, "cuGetProcAddress_v2");
    if (!gpa) {
        printf("error=no cuGetProcAddress_v2\n");
        exit(1);
    }
    gpa = (__typeof__(gpa))proc("cuGetProcAddress");
#define PROC(field, name) cu.field = (__typeof__(cu.field))proc(name)
    PROC(Init, "cuInit");
    PROC(DriverGetVersion, "cuDriverGetVersion");
    PROC(DeviceGet, "cuDeviceGet");
    PROC(DeviceGetName, "cuDeviceGetName");
    PROC(DeviceTotalMem, "cuDeviceTotalMem");
    PROC(DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
    PROC(CtxSetCurrent, "cuCtxSetCurrent");
    PROC(CtxSynchronize, "cuCtxSynchronize");
    PROC(MemGetInfo, "cuMemGetInfo");
    PROC(MemAlloc, "cuMemAlloc");
    PROC(MemFree, "cuMemFree");
    PROC(ModuleLoadData, "cuModuleLoadData");
    PROC(ModuleGetFunction, "cuModuleGetFunction");
    PROC(LaunchKernel, "cuLaunchKernel");
    PROC(EventCreate, "cuEventCreate");
    PROC(EventRecord, "cuEventRecord");
    PROC(EventSynchronize, "cuEventSynchronize");
    PROC(EventElapsedTime, "cuEventElapsedTime");
    PROC(StreamCreate, "cuStreamCreate");
    PROC(StreamBeginCapture, "cuStreamBeginCapture");
    PROC(StreamEndCapture, "cuStreamEndCapture");
    PROC(GraphInstantiate, "cuGraphInstantiateWithFlags");
    PROC(GraphLaunch, "cuGraphLaunch");
    PROC(StreamSynchronize, "cuStreamSynchronize");
#undef PROC
    return "cuGetProcAddress_v2 (CUDA 12.0 caller)";
}
#endif

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static char *read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = (char *)calloc(1, (size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    return b;
}

static unsigned long long size_arg(const char *s) {
    char *end;
    unsigned long long v = strtoull(s, &end, 0);
    switch (*end) {
    case 'K': return v << 10;
    case 'M': return v << 20;
    case 'G': return v << 30;
    }
    return v;
}

static void meminfo(const char *when) {
    size_t f = 0, t = 0;
    CHECK(cu.MemGetInfo(&f, &t), "cuMemGetInfo");
    printf("meminfo_%s_free=%zu\nmeminfo_%s_total=%zu\n", when, f, when, t);
}

int main(int argc, char **argv) {
    unsigned long long max = 4ull << 30, chunk = 64ull << 20, kernels = 200, kernel_us = 1000, bench = 0, graph = 0;
    int hold = 0;
    const char *ptx_file = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-max")) max = size_arg(argv[i + 1]);
        else if (!strcmp(argv[i], "-chunk")) chunk = size_arg(argv[i + 1]);
        else if (!strcmp(argv[i], "-hold")) hold = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-kernels")) kernels = strtoull(argv[i + 1], NULL, 0);
        else if (!strcmp(argv[i], "-kernel-us")) kernel_us = strtoull(argv[i + 1], NULL, 0);
        else if (!strcmp(argv[i], "-launch-bench")) bench = strtoull(argv[i + 1], NULL, 0);
        else if (!strcmp(argv[i], "-ptx")) ptx_file = argv[i + 1];
        else if (!strcmp(argv[i], "-graph")) graph = strtoull(argv[i + 1], NULL, 0);
    }
    printf("pid=%d\nresolution=%s\n", (int)getpid(), resolve());
    CHECK(cu.Init(0), "cuInit");
    int ver = 0;
    cu.DriverGetVersion(&ver);
    CUdevice dev;
    CUcontext ctx;
    char name[128] = {0};
    CHECK(cu.DeviceGet(&dev, 0), "cuDeviceGet");
    cu.DeviceGetName(name, sizeof name, dev);
    CHECK(cu.DevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
    CHECK(cu.CtxSetCurrent(ctx), "cuCtxSetCurrent");
    size_t total = 0;
    CHECK(cu.DeviceTotalMem(&total, dev), "cuDeviceTotalMem");
    printf("device=%s\ndriver_api=%d\ndevice_total=%zu\n", name, ver, total);
    meminfo("start");

    /* Memory: allocate until refused or max. */
    size_t n = 0, cap = (size_t)(max / chunk) + 1;
    CUdeviceptr *ptrs = (CUdeviceptr *)calloc(cap, sizeof *ptrs);
    CUresult refused = CUDA_SUCCESS;
    double t0 = now_ms();
    while ((unsigned long long)(n + 1) * chunk <= max) {
        CUresult r = cu.MemAlloc(&ptrs[n], chunk);
        if (r != CUDA_SUCCESS) {
            refused = r;
            break;
        }
        n++;
    }
    printf("allocated=%llu\nallocations=%zu\nrefused_code=%d\nalloc_ms=%.1f\n", (unsigned long long)n * chunk, n,
           (int)refused, now_ms() - t0);
    meminfo("held");
    printf("holding=%d\n", hold);
    fflush(stdout);
    if (hold > 0)
        sleep((unsigned)hold);
    for (size_t i = 0; i < n; i++)
        CHECK(cu.MemFree(ptrs[i]), "cuMemFree");
    free(ptrs);
    meminfo("freed");

    /* Kernels. */
    char *ptx = ptx_file ? read_file(ptx_file) : NULL;
    CUmodule mod;
    CUfunction spin;
    CHECK(cu.ModuleLoadData(&mod, ptx ? ptx : spin_ptx), "cuModuleLoadData");
    CHECK(cu.ModuleGetFunction(&spin, mod, "spin"), "cuModuleGetFunction");
    printf("ptx=%s\n", ptx ? ptx_file : "embedded");
    CUevent e0, e1;
    CHECK(cu.EventCreate(&e0, CU_EVENT_DEFAULT), "cuEventCreate");
    CHECK(cu.EventCreate(&e1, CU_EVENT_DEFAULT), "cuEventCreate");
    /* Calibrate: how many clock cycles make kernel_us. */
    long long cycles = 1000000;
    void *args[] = {&cycles};
    float ms = 0;
    CHECK(cu.EventRecord(e0, NULL), "cuEventRecord");
    CHECK(cu.LaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL), "cuLaunchKernel");
    CHECK(cu.EventRecord(e1, NULL), "cuEventRecord");
    CHECK(cu.EventSynchronize(e1), "cuEventSynchronize");
    CHECK(cu.EventElapsedTime(&ms, e0, e1), "cuEventElapsedTime");
    if (ms > 0)
        cycles = (long long)((double)cycles * ((double)kernel_us / 1000.0) / ms);
    CUstream gs = NULL;
    CUgraphExec exec = NULL;
    if (graph) {
        CUgraph g;
        CHECK(cu.StreamCreate(&gs, 0), "cuStreamCreate");
        CHECK(cu.StreamBeginCapture(gs, 2 /* CU_STREAM_CAPTURE_MODE_RELAXED */), "cuStreamBeginCapture");
        for (unsigned long long i = 0; i < graph; i++)
            CHECK(cu.LaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, gs, args, NULL), "cuLaunchKernel (capture)");
        CHECK(cu.StreamEndCapture(gs, &g), "cuStreamEndCapture");
        CHECK(cu.GraphInstantiate(&exec, g, 0), "cuGraphInstantiateWithFlags");
        CHECK(cu.GraphLaunch(exec, gs), "cuGraphLaunch");
        CHECK(cu.StreamSynchronize(gs), "cuStreamSynchronize");
        printf("graph_kernels=%llu\n", graph);
    }
    t0 = now_ms();
    CHECK(cu.EventRecord(e0, gs), "cuEventRecord");
    if (graph) {
        for (unsigned long long i = 0; i < kernels / graph; i++)
            CHECK(cu.GraphLaunch(exec, gs), "cuGraphLaunch");
    } else {
        for (unsigned long long i = 0; i < kernels; i++)
            CHECK(cu.LaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL), "cuLaunchKernel");
    }
    CHECK(cu.EventRecord(e1, gs), "cuEventRecord");
    CHECK(cu.CtxSynchronize(), "cuCtxSynchronize");
    double wall = now_ms() - t0;
    CHECK(cu.EventElapsedTime(&ms, e0, e1), "cuEventElapsedTime");
    printf("kernels=%llu\nkernel_us=%llu\nkernels_wall_ms=%.1f\nkernels_gpu_span_ms=%.1f\n", kernels, kernel_us, wall,
           (double)ms);

    if (bench) {
        long long zero = 0;
        void *zargs[] = {&zero};
        CHECK(cu.CtxSynchronize(), "cuCtxSynchronize");
        t0 = now_ms();
        for (unsigned long long i = 0; i < bench; i++)
            CHECK(cu.LaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, NULL, zargs, NULL), "cuLaunchKernel");
        double enq = now_ms() - t0;
        CHECK(cu.CtxSynchronize(), "cuCtxSynchronize");
        printf("launch_bench=%llu\nlaunch_enqueue_ns=%.1f\nlaunch_total_ns=%.1f\n", bench, enq * 1e6 / (double)bench,
               (now_ms() - t0) * 1e6 / (double)bench);
    }
    printf("done=1\n");
    return 0;
}
