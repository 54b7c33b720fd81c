/*
 * cudaprobe — a scripted CUDA driver API client for the hook's tests.
 *
 *   cudaprobe [-m link|dlsym|proc|proc11] [-ptsz] [-v VERSION]
 *
 * It reads one command a line on stdin and answers one line on stdout:
 * "ok [values]" or "err <CUresult>". The mode says how it reaches the
 * driver: link (calls bound at load time: the program links libcuda), dlsym
 * (dlopen + dlsym of the versioned names), proc (cuGetProcAddress_v2 of a
 * CUDA 12.4 caller, itself resolved through cuGetProcAddress as cudart
 * does), proc11 (cuGetProcAddress of a CUDA 11.8 caller). -ptsz asks
 * cuGetProcAddress for the per-thread default stream variants; -v sets the
 * CUDA version the proc modes ask for.
 *
 * Commands: init [DEV], ctx DEV, alloc N, alloc1 N, managed N, pitch W H,
 * async N, pool N, create N [DEV], array W H, array3d W H D,
 * mipmap W H D LEVELS, free P, free1 P, freeasync P, release H,
 * arraydestroy H, mipmapdestroy H, meminfo, meminfo1, totalmem [DEV],
 * kernel US (loads the module once), unload, launch N [plain|ex|coop], sync, sleep MS, next, pid,
 * threads T N BYTES (T threads allocating and freeing BYTES N times each:
 * "ok ALLOCATED REFUSED"), fork BYTES (a child allocates BYTES, holds them
 * 300 ms and exits: "ok CHILDPID"), wait PID, exit;
 * contexts: primary DEV (retain the primary context and make it current),
 * unprimary DEV, ctxdestroy DEV, ctx3 DEV and ctx4 DEV (made with
 * cuCtxCreate_v3/_v4, no affinity or parameters);
 * pinned host memory: hostalloc N, allochost N ("ok PTR"), freehost P,
 * hostregister N (page-aligned memory of N bytes, registered: "ok PTR"),
 * hostunregister P;
 * graphs: graph N (capture N launches of the current kernel on a new
 * stream and instantiate them), graphlaunch N (launch the graph N times:
 * "ok NS");
 * NVML (linked in link mode, dlopen + dlsym otherwise): nvml-count,
 * nvml-mem I ("ok TOTAL FREE USED"), nvml-mem2 I ("ok TOTAL RESERVED FREE
 * USED"), nvml-procs I and nvml-procs1 I ("ok N PID:USED..."), nvml-util I
 * ("ok GPU MEM"), nvml-index I (the index of the handle of index I);
 * phys DEV: the fake driver's own view of the device's use ("ok USED");
 * many N BYTES: N allocations of BYTES, kept ("ok ALLOCATED REFUSED");
 * freemany: free what many kept.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../src/cuda_abi.h"

/* The driver's exports, for link mode. */
CUresult cuInit(unsigned int);
CUresult cuDeviceGet(CUdevice *, int);
CUresult cuCtxCreate_v2(CUcontext *, unsigned int, CUdevice);
CUresult cuCtxCreate_v3(CUcontext *, void *, int, unsigned int, CUdevice);
CUresult cuCtxCreate_v4(CUcontext *, void *, unsigned int, CUdevice);
CUresult cuMemAllocHost_v2(void **, size_t);
CUresult cuMemHostAlloc(void **, size_t, unsigned int);
CUresult cuMemFreeHost(void *);
CUresult cuMemHostRegister_v2(void *, size_t, unsigned int);
CUresult cuMemHostUnregister(void *);
CUresult cuCtxSetCurrent(CUcontext);
CUresult cuCtxSynchronize(void);
CUresult cuMemAlloc_v2(CUdeviceptr *, size_t);
CUresult cuMemAlloc(CUdeviceptr_v1 *, unsigned int);
CUresult cuMemAllocManaged(CUdeviceptr *, size_t, unsigned int);
CUresult cuMemAllocPitch_v2(CUdeviceptr *, size_t *, size_t, size_t, unsigned int);
CUresult cuMemAllocAsync(CUdeviceptr *, size_t, CUstream);
CUresult cuMemAllocFromPoolAsync(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
CUresult cuMemCreate(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long);
CUresult cuArrayCreate_v2(CUarray *, const CUDA_ARRAY_DESCRIPTOR *);
CUresult cuArray3DCreate_v2(CUarray *, const CUDA_ARRAY3D_DESCRIPTOR *);
CUresult cuMipmappedArrayCreate(CUmipmappedArray *, const CUDA_ARRAY3D_DESCRIPTOR *, unsigned int);
CUresult cuMemFree_v2(CUdeviceptr);
CUresult cuMemFree(CUdeviceptr_v1);
CUresult cuMemFreeAsync(CUdeviceptr, CUstream);
CUresult cuMemRelease(CUmemGenericAllocationHandle);
CUresult cuArrayDestroy(CUarray);
CUresult cuMipmappedArrayDestroy(CUmipmappedArray);
CUresult cuMemGetInfo_v2(size_t *, size_t *);
CUresult cuMemGetInfo(unsigned int *, unsigned int *);
CUresult cuDeviceTotalMem_v2(size_t *, CUdevice);
CUresult cuModuleLoadData(CUmodule *, const void *);
CUresult cuModuleUnload(CUmodule);
CUresult cuModuleGetFunction(CUfunction *, CUmodule, const char *);
CUresult cuLaunchKernel(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                        void **, void **);
CUresult cuLaunchKernelEx(const CUlaunchConfig *, CUfunction, void **, void **);
CUresult cuLaunchCooperativeKernel(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                   CUstream, void **);
CUresult cuGetProcAddress(const char *, void **, int, cuuint64_t);
CUresult cuGraphLaunch(CUgraphExec, CUstream);
CUresult cuDevicePrimaryCtxRetain(CUcontext *, CUdevice);
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice);
CUresult cuCtxDestroy_v2(CUcontext);

/* NVML, as the probe uses it. */
typedef struct nvmlDevice_st *nvmlDevice_t;
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct { unsigned int version; unsigned long long total, reserved, free, used; } nvmlMemory_v2_t;
typedef struct { unsigned int pid; unsigned long long usedGpuMemory; } nvmlProcessInfo_v1_t;
typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_t;
typedef struct { unsigned int gpu, memory; } nvmlUtilization_t;
int nvmlInit_v2(void);
int nvmlDeviceGetCount_v2(unsigned int *);
int nvmlDeviceGetHandleByIndex_v2(unsigned int, nvmlDevice_t *);
int nvmlDeviceGetIndex(nvmlDevice_t, unsigned int *);
int nvmlDeviceGetMemoryInfo(nvmlDevice_t, nvmlMemory_t *);
int nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t, nvmlMemory_v2_t *);
int nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t, unsigned int *, nvmlProcessInfo_t *);
int nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t, unsigned int *, nvmlProcessInfo_v1_t *);
int nvmlDeviceGetUtilizationRates(nvmlDevice_t, nvmlUtilization_t *);

static struct {
    int (*Init)(void);
    int (*GetCount)(unsigned int *);
    int (*GetHandleByIndex)(unsigned int, nvmlDevice_t *);
    int (*GetIndex)(nvmlDevice_t, unsigned int *);
    int (*GetMemoryInfo)(nvmlDevice_t, nvmlMemory_t *);
    int (*GetMemoryInfo_v2)(nvmlDevice_t, nvmlMemory_v2_t *);
    int (*Procs3)(nvmlDevice_t, unsigned int *, nvmlProcessInfo_t *);
    int (*Procs1)(nvmlDevice_t, unsigned int *, nvmlProcessInfo_v1_t *);
    int (*Util)(nvmlDevice_t, nvmlUtilization_t *);
} nv;
CUresult cuGetProcAddress_v2(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);

struct api {
    CUresult (*Init)(unsigned int);
    CUresult (*DeviceGet)(CUdevice *, int);
    CUresult (*CtxCreate)(CUcontext *, unsigned int, CUdevice);
    CUresult (*CtxSetCurrent)(CUcontext);
    CUresult (*CtxSynchronize)(void);
    CUresult (*MemAlloc)(CUdeviceptr *, size_t);
    CUresult (*MemAlloc1)(CUdeviceptr_v1 *, unsigned int);
    CUresult (*MemAllocManaged)(CUdeviceptr *, size_t, unsigned int);
    CUresult (*MemAllocPitch)(CUdeviceptr *, size_t *, size_t, size_t, unsigned int);
    CUresult (*MemAllocAsync)(CUdeviceptr *, size_t, CUstream);
    CUresult (*MemAllocFromPoolAsync)(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
    CUresult (*MemCreate)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long);
    CUresult (*ArrayCreate)(CUarray *, const CUDA_ARRAY_DESCRIPTOR *);
    CUresult (*Array3DCreate)(CUarray *, const CUDA_ARRAY3D_DESCRIPTOR *);
    CUresult (*MipmappedArrayCreate)(CUmipmappedArray *, const CUDA_ARRAY3D_DESCRIPTOR *, unsigned int);
    CUresult (*MemFree)(CUdeviceptr);
    CUresult (*MemFree1)(CUdeviceptr_v1);
    CUresult (*MemFreeAsync)(CUdeviceptr, CUstream);
    CUresult (*MemRelease)(CUmemGenericAllocationHandle);
    CUresult (*ArrayDestroy)(CUarray);
    CUresult (*MipmappedArrayDestroy)(CUmipmappedArray);
    CUresult (*MemGetInfo)(size_t *, size_t *);
    CUresult (*MemGetInfo1)(unsigned int *, unsigned int *);
    CUresult (*DeviceTotalMem)(size_t *, CUdevice);
    CUresult (*ModuleLoadData)(CUmodule *, const void *);
    CUresult (*ModuleUnload)(CUmodule);
    CUresult (*ModuleGetFunction)(CUfunction *, CUmodule, const char *);
    CUresult (*LaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             CUstream, void **, void **);
    CUresult (*LaunchKernelEx)(const CUlaunchConfig *, CUfunction, void **, void **);
    CUresult (*LaunchCooperativeKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                        unsigned, CUstream, void **);
    CUresult (*GraphLaunch)(CUgraphExec, CUstream);
    CUresult (*PrimaryCtxRetain)(CUcontext *, CUdevice);
    CUresult (*PrimaryCtxRelease)(CUdevice);
    CUresult (*CtxDestroy)(CUcontext);
    CUresult (*CtxCreate3)(CUcontext *, void *, int, unsigned int, CUdevice);
    CUresult (*CtxCreate4)(CUcontext *, void *, unsigned int, CUdevice);
    CUresult (*MemAllocHost)(void **, size_t);
    CUresult (*MemHostAlloc)(void **, size_t, unsigned int);
    CUresult (*MemFreeHost)(void *);
    CUresult (*MemHostRegister)(void *, size_t, unsigned int);
    CUresult (*MemHostUnregister)(void *);
};

static struct api cu;

#define LINK(field, fn) cu.field = (__typeof__(cu.field))fn

static void resolve_link(void) {
    LINK(Init, cuInit);
    LINK(DeviceGet, cuDeviceGet);
    LINK(CtxCreate, cuCtxCreate_v2);
    LINK(CtxSetCurrent, cuCtxSetCurrent);
    LINK(CtxSynchronize, cuCtxSynchronize);
    LINK(MemAlloc, cuMemAlloc_v2);
    LINK(MemAlloc1, cuMemAlloc);
    LINK(MemAllocManaged, cuMemAllocManaged);
    LINK(MemAllocPitch, cuMemAllocPitch_v2);
    LINK(MemAllocAsync, cuMemAllocAsync);
    LINK(MemAllocFromPoolAsync, cuMemAllocFromPoolAsync);
    LINK(MemCreate, cuMemCreate);
    LINK(ArrayCreate, cuArrayCreate_v2);
    LINK(Array3DCreate, cuArray3DCreate_v2);
    LINK(MipmappedArrayCreate, cuMipmappedArrayCreate);
    LINK(MemFree, cuMemFree_v2);
    LINK(MemFree1, cuMemFree);
    LINK(MemFreeAsync, cuMemFreeAsync);
    LINK(MemRelease, cuMemRelease);
    LINK(ArrayDestroy, cuArrayDestroy);
    LINK(MipmappedArrayDestroy, cuMipmappedArrayDestroy);
    LINK(MemGetInfo, cuMemGetInfo_v2);
    LINK(MemGetInfo1, cuMemGetInfo);
    LINK(DeviceTotalMem, cuDeviceTotalMem_v2);
    LINK(ModuleLoadData, cuModuleLoadData);
    LINK(ModuleUnload, cuModuleUnload);
    LINK(ModuleGetFunction, cuModuleGetFunction);
    LINK(LaunchKernel, cuLaunchKernel);
    LINK(LaunchKernelEx, cuLaunchKernelEx);
    LINK(LaunchCooperativeKernel, cuLaunchCooperativeKernel);
    LINK(GraphLaunch, cuGraphLaunch);
    LINK(PrimaryCtxRetain, cuDevicePrimaryCtxRetain);
    LINK(PrimaryCtxRelease, cuDevicePrimaryCtxRelease_v2);
    LINK(CtxDestroy, cuCtxDestroy_v2);
    LINK(CtxCreate3, cuCtxCreate_v3);
    LINK(CtxCreate4, cuCtxCreate_v4);
    LINK(MemAllocHost, cuMemAllocHost_v2);
    LINK(MemHostAlloc, cuMemHostAlloc);
    LINK(MemFreeHost, cuMemFreeHost);
    LINK(MemHostRegister, cuMemHostRegister_v2);
    LINK(MemHostUnregister, cuMemHostUnregister);
#define NVLINK(field, fn) nv.field = (__typeof__(nv.field))fn
    NVLINK(Init, nvmlInit_v2);
    NVLINK(GetCount, nvmlDeviceGetCount_v2);
    NVLINK(GetHandleByIndex, nvmlDeviceGetHandleByIndex_v2);
    NVLINK(GetIndex, nvmlDeviceGetIndex);
    NVLINK(GetMemoryInfo, nvmlDeviceGetMemoryInfo);
    NVLINK(GetMemoryInfo_v2, nvmlDeviceGetMemoryInfo_v2);
    NVLINK(Procs3, nvmlDeviceGetComputeRunningProcesses_v3);
    NVLINK(Procs1, nvmlDeviceGetComputeRunningProcesses);
    NVLINK(Util, nvmlDeviceGetUtilizationRates);
#undef NVLINK
}

static void *need(void *f, const char *name) {
    if (!f) {
        fprintf(stderr, "cudaprobe: cannot resolve %s\n", name);
        exit(2);
    }
    return f;
}

static void resolve_dlsym(void) {
    void *h = need(dlopen("libcuda.so.1", RTLD_NOW), "libcuda.so.1");
#define SYM(field, name) cu.field = (__typeof__(cu.field))need(dlsym(h, name), name)
    SYM(Init, "cuInit");
    SYM(DeviceGet, "cuDeviceGet");
    SYM(CtxCreate, "cuCtxCreate_v2");
    SYM(CtxSetCurrent, "cuCtxSetCurrent");
    SYM(CtxSynchronize, "cuCtxSynchronize");
    SYM(MemAlloc, "cuMemAlloc_v2");
    SYM(MemAlloc1, "cuMemAlloc");
    SYM(MemAllocManaged, "cuMemAllocManaged");
    SYM(MemAllocPitch, "cuMemAllocPitch_v2");
    SYM(MemAllocAsync, "cuMemAllocAsync");
    SYM(MemAllocFromPoolAsync, "cuMemAllocFromPoolAsync");
    SYM(MemCreate, "cuMemCreate");
    SYM(ArrayCreate, "cuArrayCreate_v2");
    SYM(Array3DCreate, "cuArray3DCreate_v2");
    SYM(MipmappedArrayCreate, "cuMipmappedArrayCreate");
    SYM(MemFree, "cuMemFree_v2");
    SYM(MemFree1, "cuMemFree");
    SYM(MemFreeAsync, "cuMemFreeAsync");
    SYM(MemRelease, "cuMemRelease");
    SYM(ArrayDestroy, "cuArrayDestroy");
    SYM(MipmappedArrayDestroy, "cuMipmappedArrayDestroy");
    SYM(MemGetInfo, "cuMemGetInfo_v2");
    SYM(MemGetInfo1, "cuMemGetInfo");
    SYM(DeviceTotalMem, "cuDeviceTotalMem_v2");
    SYM(ModuleLoadData, "cuModuleLoadData");
    SYM(ModuleUnload, "cuModuleUnload");
    SYM(ModuleGetFunction, "cuModuleGetFunction");
    SYM(LaunchKernel, "cuLaunchKernel");
    SYM(LaunchKernelEx, "cuLaunchKernelEx");
    SYM(LaunchCooperativeKernel, "cuLaunchCooperativeKernel");
    SYM(GraphLaunch, "cuGraphLaunch");
    SYM(PrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
    SYM(PrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2");
    SYM(CtxDestroy, "cuCtxDestroy_v2");
    SYM(CtxCreate3, "cuCtxCreate_v3");
    SYM(CtxCreate4, "cuCtxCreate_v4");
    SYM(MemAllocHost, "cuMemAllocHost_v2");
    SYM(MemHostAlloc, "cuMemHostAlloc");
    SYM(MemFreeHost, "cuMemFreeHost");
    SYM(MemHostRegister, "cuMemHostRegister_v2");
    SYM(MemHostUnregister, "cuMemHostUnregister");
#undef SYM
}

/* resolve_nvml_dlsym finds NVML the way pynvml and frameworks do. */
static void resolve_nvml_dlsym(void) {
    void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    if (!h)
        return;
#define NVSYM(field, name) nv.field = (__typeof__(nv.field))dlsym(h, name)
    NVSYM(Init, "nvmlInit_v2");
    NVSYM(GetCount, "nvmlDeviceGetCount_v2");
    NVSYM(GetHandleByIndex, "nvmlDeviceGetHandleByIndex_v2");
    NVSYM(GetIndex, "nvmlDeviceGetIndex");
    NVSYM(GetMemoryInfo, "nvmlDeviceGetMemoryInfo");
    NVSYM(GetMemoryInfo_v2, "nvmlDeviceGetMemoryInfo_v2");
    NVSYM(Procs3, "nvmlDeviceGetComputeRunningProcesses_v3");
    NVSYM(Procs1, "nvmlDeviceGetComputeRunningProcesses");
    NVSYM(Util, "nvmlDeviceGetUtilizationRates");
#undef NVSYM
}

/* Stream capture is not intercepted: the probe takes it from the driver. */
static struct {
    CUresult (*StreamCreate)(CUstream *, unsigned int);
    CUresult (*BeginCapture)(CUstream, int);
    CUresult (*EndCapture)(CUstream, CUgraph *);
    CUresult (*Instantiate)(CUgraphExec *, CUgraph, unsigned long long);
    CUresult (*StreamSynchronize)(CUstream);
} gr;

static void resolve_graph(void) {
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    if (!h)
        return;
    gr.StreamCreate = (__typeof__(gr.StreamCreate))dlsym(h, "cuStreamCreate");
    gr.BeginCapture = (__typeof__(gr.BeginCapture))dlsym(h, "cuStreamBeginCapture_v2");
    gr.EndCapture = (__typeof__(gr.EndCapture))dlsym(h, "cuStreamEndCapture");
    gr.Instantiate = (__typeof__(gr.Instantiate))dlsym(h, "cuGraphInstantiateWithFlags");
    gr.StreamSynchronize = (__typeof__(gr.StreamSynchronize))dlsym(h, "cuStreamSynchronize");
}

static CUresult (*gpa2)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
static CUresult (*gpa1)(const char *, void **, int, cuuint64_t);
static int proc_version, version_arg;
static cuuint64_t proc_flags;

static void *proc(const char *name, int version) {
    void *f = NULL;
    CUresult r;
    if (gpa2) {
        CUdriverProcAddressQueryResult st = -1;
        r = gpa2(name, &f, version, proc_flags, &st);
        if (r == CUDA_SUCCESS && st != CU_GET_PROC_ADDRESS_SUCCESS)
            r = CUDA_ERROR_NOT_FOUND;
    } else {
        r = gpa1(name, &f, version, proc_flags);
    }
    if (r != CUDA_SUCCESS)
        f = NULL;
    return need(f, name);
}

static void resolve_proc(int v2) {
    void *h = need(dlopen("libcuda.so.1", RTLD_NOW), "libcuda.so.1");
    if (v2) {
        proc_version = version_arg ? version_arg : 12040;
        /* As cudart 12 does: the resolver first, then the resolver through itself. */
        gpa2 = need(dlsym(h, "cuGetProcAddress_v2"), "cuGetProcAddress_v2");
        gpa2 = proc("cuGetProcAddress", proc_version);
    } else {
        proc_version = version_arg ? version_arg : 11080;
        gpa1 = need(dlsym(h, "cuGetProcAddress"), "cuGetProcAddress");
        gpa1 = proc("cuGetProcAddress", proc_version);
    }
#define PROC(field, name) cu.field = (__typeof__(cu.field))proc(name, proc_version)
    PROC(Init, "cuInit");
    PROC(DeviceGet, "cuDeviceGet");
    /* cuCtxCreate's later variants (_v3, _v4) take other parameters; the
     * probe calls the CUDA 3.2 ABI, so it asks for that version. */
    cu.CtxCreate = (__typeof__(cu.CtxCreate))proc("cuCtxCreate", 3020);
    PROC(CtxSetCurrent, "cuCtxSetCurrent");
    PROC(CtxSynchronize, "cuCtxSynchronize");
    PROC(MemAlloc, "cuMemAlloc");
    cu.MemAlloc1 = (__typeof__(cu.MemAlloc1))proc("cuMemAlloc", 2000);
    PROC(MemAllocManaged, "cuMemAllocManaged");
    PROC(MemAllocPitch, "cuMemAllocPitch");
    PROC(MemAllocAsync, "cuMemAllocAsync");
    PROC(MemAllocFromPoolAsync, "cuMemAllocFromPoolAsync");
    PROC(MemCreate, "cuMemCreate");
    PROC(ArrayCreate, "cuArrayCreate");
    PROC(Array3DCreate, "cuArray3DCreate");
    PROC(MipmappedArrayCreate, "cuMipmappedArrayCreate");
    PROC(MemFree, "cuMemFree");
    cu.MemFree1 = (__typeof__(cu.MemFree1))proc("cuMemFree", 2000);
    PROC(MemFreeAsync, "cuMemFreeAsync");
    PROC(MemRelease, "cuMemRelease");
    PROC(ArrayDestroy, "cuArrayDestroy");
    PROC(MipmappedArrayDestroy, "cuMipmappedArrayDestroy");
    PROC(MemGetInfo, "cuMemGetInfo");
    cu.MemGetInfo1 = (__typeof__(cu.MemGetInfo1))proc("cuMemGetInfo", 2000);
    PROC(DeviceTotalMem, "cuDeviceTotalMem");
    PROC(ModuleLoadData, "cuModuleLoadData");
    PROC(ModuleUnload, "cuModuleUnload");
    PROC(ModuleGetFunction, "cuModuleGetFunction");
    PROC(LaunchKernel, "cuLaunchKernel");
    PROC(LaunchKernelEx, "cuLaunchKernelEx");
    PROC(LaunchCooperativeKernel, "cuLaunchCooperativeKernel");
    PROC(GraphLaunch, "cuGraphLaunch");
    PROC(PrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
    PROC(PrimaryCtxRelease, "cuDevicePrimaryCtxRelease");
    PROC(CtxDestroy, "cuCtxDestroy");
    cu.CtxCreate3 = (__typeof__(cu.CtxCreate3))proc("cuCtxCreate", 11040);
    cu.CtxCreate4 = (__typeof__(cu.CtxCreate4))proc("cuCtxCreate", 12050);
    PROC(MemAllocHost, "cuMemAllocHost");
    PROC(MemHostAlloc, "cuMemHostAlloc");
    PROC(MemFreeHost, "cuMemFreeHost");
    PROC(MemHostRegister, "cuMemHostRegister");
    PROC(MemHostUnregister, "cuMemHostUnregister");
#undef PROC
}

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t num(const char *s) { return s ? strtoull(s, NULL, 0) : 0; }

static CUcontext ctxs[16];
static CUmodule module;
static CUfunction function;
static CUgraphExec graph_exec;
static CUdeviceptr kept[65536];
static uint64_t nkept;

static CUresult use_device(int dev) {
    if (dev < 0 || dev >= 16)
        return CUDA_ERROR_INVALID_DEVICE;
    if (!ctxs[dev]) {
        CUdevice d;
        CUresult r = cu.DeviceGet(&d, dev);
        if (r == CUDA_SUCCESS)
            r = cu.CtxCreate(&ctxs[dev], 0, d);
        return r;
    }
    return cu.CtxSetCurrent(ctxs[dev]);
}

struct churn {
    CUcontext ctx;
    uint64_t n, bytes, ok, refused, failed;
};

static void *churn_main(void *arg) {
    struct churn *c = arg;
    if (cu.CtxSetCurrent(c->ctx) != CUDA_SUCCESS) {
        c->failed = c->n;
        return NULL;
    }
    for (uint64_t i = 0; i < c->n; i++) {
        CUdeviceptr p;
        CUresult r = cu.MemAlloc(&p, c->bytes);
        if (r == CUDA_ERROR_OUT_OF_MEMORY) {
            c->refused++;
            continue;
        }
        if (r != CUDA_SUCCESS || cu.MemFree(p) != CUDA_SUCCESS) {
            c->failed++;
            continue;
        }
        c->ok++;
    }
    return NULL;
}

static void reply(CUresult r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void reply(CUresult r, const char *fmt, ...) {
    if (r != CUDA_SUCCESS) {
        printf("err %d\n", r);
    } else {
        printf("ok");
        if (fmt) {
            va_list ap;
            va_start(ap, fmt);
            putchar(' ');
            vprintf(fmt, ap);
            va_end(ap);
        }
        putchar('\n');
    }
    fflush(stdout);
}

int main(int argc, char **argv) {
    const char *mode = "link";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-m") && i + 1 < argc)
            mode = argv[++i];
        else if (!strcmp(argv[i], "-ptsz"))
            proc_flags = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
        else if (!strcmp(argv[i], "-v") && i + 1 < argc)
            version_arg = atoi(argv[++i]);
    }
    if (!strcmp(mode, "link"))
        resolve_link();
    else if (!strcmp(mode, "dlsym"))
        resolve_dlsym();
    else if (!strcmp(mode, "proc"))
        resolve_proc(1);
    else if (!strcmp(mode, "proc11"))
        resolve_proc(0);
    else {
        fprintf(stderr, "cudaprobe: unknown mode %s\n", mode);
        return 2;
    }
    if (strcmp(mode, "link"))
        resolve_nvml_dlsym();
    resolve_graph();
    static int nvml_inited;

    char line[256];
    while (fgets(line, sizeof line, stdin)) {
        char *save = NULL, *cmd = strtok_r(line, " \t\r\n", &save);
        if (!cmd)
            continue;
        char *a1 = strtok_r(NULL, " \t\r\n", &save), *a2 = strtok_r(NULL, " \t\r\n", &save);
        char *a3 = strtok_r(NULL, " \t\r\n", &save), *a4 = strtok_r(NULL, " \t\r\n", &save);
        CUresult r;
        if (!strcmp(cmd, "init")) {
            r = cu.Init(0);
            if (r == CUDA_SUCCESS)
                r = use_device((int)num(a1));
            reply(r, NULL);
        } else if (!strcmp(cmd, "ctx")) {
            reply(use_device((int)num(a1)), NULL);
        } else if (!strcmp(cmd, "alloc")) {
            CUdeviceptr p = 0;
            r = cu.MemAlloc(&p, num(a1));
            reply(r, "%#llx", p);
        } else if (!strcmp(cmd, "alloc1")) {
            CUdeviceptr_v1 p = 0;
            r = cu.MemAlloc1(&p, (unsigned int)num(a1));
            reply(r, "%#x", p);
        } else if (!strcmp(cmd, "managed")) {
            CUdeviceptr p = 0;
            r = cu.MemAllocManaged(&p, num(a1), 1);
            reply(r, "%#llx", p);
        } else if (!strcmp(cmd, "pitch")) {
            CUdeviceptr p = 0;
            size_t pitch = 0;
            r = cu.MemAllocPitch(&p, &pitch, num(a1), num(a2), 4);
            reply(r, "%#llx %zu", p, pitch);
        } else if (!strcmp(cmd, "async")) {
            CUdeviceptr p = 0;
            r = cu.MemAllocAsync(&p, num(a1), NULL);
            reply(r, "%#llx", p);
        } else if (!strcmp(cmd, "pool")) {
            CUdeviceptr p = 0;
            r = cu.MemAllocFromPoolAsync(&p, num(a1), NULL, NULL);
            reply(r, "%#llx", p);
        } else if (!strcmp(cmd, "create")) {
            CUmemAllocationProp prop;
            memset(&prop, 0, sizeof prop);
            prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
            prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
            prop.location.id = (int)num(a2);
            CUmemGenericAllocationHandle h = 0;
            r = cu.MemCreate(&h, num(a1), &prop, 0);
            reply(r, "%#llx", h);
        } else if (!strcmp(cmd, "array")) {
            CUDA_ARRAY_DESCRIPTOR d = {num(a1), num(a2), CU_AD_FORMAT_FLOAT, 4};
            CUarray a = NULL;
            r = cu.ArrayCreate(&a, &d);
            reply(r, "%p", (void *)a);
        } else if (!strcmp(cmd, "array3d")) {
            CUDA_ARRAY3D_DESCRIPTOR d = {num(a1), num(a2), num(a3), CU_AD_FORMAT_UNSIGNED_INT8, 1, 0};
            CUarray a = NULL;
            r = cu.Array3DCreate(&a, &d);
            reply(r, "%p", (void *)a);
        } else if (!strcmp(cmd, "mipmap")) {
            CUDA_ARRAY3D_DESCRIPTOR d = {num(a1), num(a2), num(a3), CU_AD_FORMAT_HALF, 2, 0};
            CUmipmappedArray m = NULL;
            r = cu.MipmappedArrayCreate(&m, &d, (unsigned)num(a4));
            reply(r, "%p", (void *)m);
        } else if (!strcmp(cmd, "free")) {
            reply(cu.MemFree(num(a1)), NULL);
        } else if (!strcmp(cmd, "free1")) {
            reply(cu.MemFree1((CUdeviceptr_v1)num(a1)), NULL);
        } else if (!strcmp(cmd, "freeasync")) {
            reply(cu.MemFreeAsync(num(a1), NULL), NULL);
        } else if (!strcmp(cmd, "release")) {
            reply(cu.MemRelease(num(a1)), NULL);
        } else if (!strcmp(cmd, "arraydestroy")) {
            reply(cu.ArrayDestroy((CUarray)(uintptr_t)num(a1)), NULL);
        } else if (!strcmp(cmd, "mipmapdestroy")) {
            reply(cu.MipmappedArrayDestroy((CUmipmappedArray)(uintptr_t)num(a1)), NULL);
        } else if (!strcmp(cmd, "meminfo")) {
            size_t f = 0, t = 0;
            r = cu.MemGetInfo(&f, &t);
            reply(r, "%zu %zu", f, t);
        } else if (!strcmp(cmd, "meminfo1")) {
            unsigned int f = 0, t = 0;
            r = cu.MemGetInfo1(&f, &t);
            reply(r, "%u %u", f, t);
        } else if (!strcmp(cmd, "totalmem")) {
            size_t t = 0;
            r = cu.DeviceTotalMem(&t, (CUdevice)num(a1));
            reply(r, "%zu", t);
        } else if (!strcmp(cmd, "kernel")) {
            char name[64];
            snprintf(name, sizeof name, "sleep_us:%llu", (unsigned long long)num(a1));
            r = module ? CUDA_SUCCESS : cu.ModuleLoadData(&module, "fake module");
            if (r == CUDA_SUCCESS)
                r = cu.ModuleGetFunction(&function, module, name);
            reply(r, NULL);
        } else if (!strcmp(cmd, "unload")) {
            r = module ? cu.ModuleUnload(module) : CUDA_ERROR_INVALID_HANDLE;
            if (r == CUDA_SUCCESS)
                module = NULL, function = NULL;
            reply(r, NULL);
        } else if (!strcmp(cmd, "launch")) {
            uint64_t n = num(a1), t0 = now_ns();
            r = CUDA_SUCCESS;
            CUlaunchConfig cfg = {1, 1, 1, 32, 1, 1, 0, NULL, NULL, 0};
            for (uint64_t i = 0; i < n && r == CUDA_SUCCESS; i++) {
                if (a2 && !strcmp(a2, "ex"))
                    r = cu.LaunchKernelEx(&cfg, function, NULL, NULL);
                else if (a2 && !strcmp(a2, "coop"))
                    r = cu.LaunchCooperativeKernel(function, 1, 1, 1, 32, 1, 1, 0, NULL, NULL);
                else
                    r = cu.LaunchKernel(function, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL);
            }
            reply(r, "%llu", (unsigned long long)(now_ns() - t0));
        } else if (!strcmp(cmd, "sync")) {
            uint64_t t0 = now_ns();
            r = cu.CtxSynchronize();
            reply(r, "%llu", (unsigned long long)(now_ns() - t0));
        } else if (!strcmp(cmd, "sleep")) {
            usleep((useconds_t)(num(a1) * 1000));
            reply(CUDA_SUCCESS, NULL);
        } else if (!strcmp(cmd, "next")) {
            /* RTLD_NEXT from the program must still see the libraries after
             * it, the hook included: dlsym's interposer passes the caller on. */
            const char *(*v)(void) = (const char *(*)(void))dlsym(RTLD_NEXT, "dpucuda_version");
            if (v)
                reply(CUDA_SUCCESS, "%s", v());
            else
                reply(CUDA_ERROR_NOT_FOUND, NULL);
        } else if (!strcmp(cmd, "threads")) {
            uint64_t nt = num(a1);
            struct churn c[64];
            pthread_t th[64];
            CUcontext ctx = ctxs[0];
            if (nt == 0 || nt > 64) {
                reply(CUDA_ERROR_INVALID_VALUE, NULL);
                continue;
            }
            for (uint64_t i = 0; i < nt; i++) {
                c[i] = (struct churn){.ctx = ctx, .n = num(a2), .bytes = num(a3)};
                pthread_create(&th[i], NULL, churn_main, &c[i]);
            }
            uint64_t ok = 0, refused = 0, failed = 0;
            for (uint64_t i = 0; i < nt; i++) {
                pthread_join(th[i], NULL);
                ok += c[i].ok;
                refused += c[i].refused;
                failed += c[i].failed;
            }
            reply(failed ? CUDA_ERROR_UNKNOWN : CUDA_SUCCESS, "%llu %llu", (unsigned long long)ok,
                  (unsigned long long)refused);
        } else if (!strcmp(cmd, "fork")) {
            fflush(stdout);
            pid_t child = fork();
            if (child == 0) {
                CUdeviceptr p;
                CUresult cr = cu.MemAlloc(&p, num(a1));
                fprintf(stderr, "cudaprobe child %d: alloc %d\n", (int)getpid(), cr);
                usleep(300000);
                _exit(cr == CUDA_SUCCESS ? 0 : 1);
            }
            reply(child > 0 ? CUDA_SUCCESS : CUDA_ERROR_UNKNOWN, "%d", (int)child);
        } else if (!strcmp(cmd, "wait")) {
            int st = 0;
            pid_t w = waitpid((pid_t)num(a1), &st, 0);
            reply(w > 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0 ? CUDA_SUCCESS : CUDA_ERROR_UNKNOWN, NULL);
        } else if (!strcmp(cmd, "pid")) {
            reply(CUDA_SUCCESS, "%d", (int)getpid());
        } else if (!strcmp(cmd, "primary")) {
            CUcontext c = NULL;
            r = cu.PrimaryCtxRetain(&c, (CUdevice)num(a1));
            if (r == CUDA_SUCCESS)
                r = cu.CtxSetCurrent(c);
            reply(r, NULL);
        } else if (!strcmp(cmd, "unprimary")) {
            reply(cu.PrimaryCtxRelease((CUdevice)num(a1)), NULL);
        } else if (!strcmp(cmd, "ctx3") || !strcmp(cmd, "ctx4")) {
            int dev = (int)num(a1);
            r = dev >= 0 && dev < 16 && !ctxs[dev] ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
            if (r == CUDA_SUCCESS)
                r = cmd[3] == '3' ? cu.CtxCreate3(&ctxs[dev], NULL, 0, 0, (CUdevice)dev)
                                  : cu.CtxCreate4(&ctxs[dev], NULL, 0, (CUdevice)dev);
            reply(r, NULL);
        } else if (!strcmp(cmd, "hostalloc") || !strcmp(cmd, "allochost")) {
            void *h = NULL;
            r = cmd[0] == 'h' ? cu.MemHostAlloc(&h, num(a1), 0) : cu.MemAllocHost(&h, num(a1));
            reply(r, "%p", h);
        } else if (!strcmp(cmd, "freehost")) {
            reply(cu.MemFreeHost((void *)(uintptr_t)num(a1)), NULL);
        } else if (!strcmp(cmd, "hostregister")) {
            void *h = aligned_alloc(4096, (num(a1) + 4095) / 4096 * 4096);
            r = h ? cu.MemHostRegister(h, num(a1), 0) : CUDA_ERROR_OUT_OF_MEMORY;
            if (r != CUDA_SUCCESS)
                free(h);
            reply(r, "%p", h);
        } else if (!strcmp(cmd, "hostunregister")) {
            void *h = (void *)(uintptr_t)num(a1);
            r = cu.MemHostUnregister(h);
            if (r == CUDA_SUCCESS)
                free(h);
            reply(r, NULL);
        } else if (!strcmp(cmd, "ctxdestroy")) {
            int dev = (int)num(a1);
            r = dev >= 0 && dev < 16 && ctxs[dev] ? cu.CtxDestroy(ctxs[dev]) : CUDA_ERROR_INVALID_CONTEXT;
            if (r == CUDA_SUCCESS)
                ctxs[dev] = NULL;
            reply(r, NULL);
        } else if (!strcmp(cmd, "graph")) {
            static CUstream gs;
            CUgraph g = NULL;
            r = gr.StreamCreate && gr.BeginCapture && gr.EndCapture && gr.Instantiate ? CUDA_SUCCESS
                                                                                    : CUDA_ERROR_NOT_FOUND;
            if (r == CUDA_SUCCESS && !gs)
                r = gr.StreamCreate(&gs, 0);
            if (r == CUDA_SUCCESS)
                r = gr.BeginCapture(gs, 2 /* relaxed */);
            for (uint64_t i = 0; i < num(a1) && r == CUDA_SUCCESS; i++)
                r = cu.LaunchKernel(function, 1, 1, 1, 32, 1, 1, 0, gs, NULL, NULL);
            CUresult e = r == CUDA_SUCCESS ? gr.EndCapture(gs, &g) : r;
            r = e == CUDA_SUCCESS ? gr.Instantiate(&graph_exec, g, 0) : e;
            reply(r, NULL);
        } else if (!strcmp(cmd, "graphlaunch")) {
            uint64_t n = num(a1), t0 = now_ns();
            r = graph_exec ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
            for (uint64_t i = 0; i < n && r == CUDA_SUCCESS; i++)
                r = cu.GraphLaunch(graph_exec, NULL);
            reply(r, "%llu", (unsigned long long)(now_ns() - t0));
        } else if (!strncmp(cmd, "nvml-", 5)) {
            if (!nv.Init) {
                printf("err no-nvml\n");
                fflush(stdout);
                continue;
            }
            if (!nvml_inited && nv.Init() == 0)
                nvml_inited = 1;
            nvmlDevice_t h = NULL;
            int nr = 0;
            if (strcmp(cmd, "nvml-count"))
                nr = nv.GetHandleByIndex((unsigned)num(a1), &h);
            if (nr) {
                printf("err nvml %d\n", nr);
            } else if (!strcmp(cmd, "nvml-count")) {
                unsigned n = 0;
                nr = nv.GetCount(&n);
                nr ? printf("err nvml %d\n", nr) : printf("ok %u\n", n);
            } else if (!strcmp(cmd, "nvml-index")) {
                unsigned i = 0;
                nr = nv.GetIndex(h, &i);
                nr ? printf("err nvml %d\n", nr) : printf("ok %u\n", i);
            } else if (!strcmp(cmd, "nvml-mem")) {
                nvmlMemory_t m;
                nr = nv.GetMemoryInfo(h, &m);
                nr ? printf("err nvml %d\n", nr) : printf("ok %llu %llu %llu\n", m.total, m.free, m.used);
            } else if (!strcmp(cmd, "nvml-mem2")) {
                nvmlMemory_v2_t m = {.version = (unsigned)sizeof m | 2u << 24};
                nr = nv.GetMemoryInfo_v2(h, &m);
                nr ? printf("err nvml %d\n", nr)
                   : printf("ok %llu %llu %llu %llu\n", m.total, m.reserved, m.free, m.used);
            } else if (!strcmp(cmd, "nvml-procs") || !strcmp(cmd, "nvml-procs1")) {
                nvmlProcessInfo_t p3[8];
                nvmlProcessInfo_v1_t p1[8];
                unsigned n = 8;
                int v1 = !strcmp(cmd, "nvml-procs1");
                nr = v1 ? nv.Procs1(h, &n, p1) : nv.Procs3(h, &n, p3);
                if (nr) {
                    printf("err nvml %d\n", nr);
                } else {
                    printf("ok %u", n);
                    for (unsigned i = 0; i < n; i++)
                        printf(" %u:%llu", v1 ? p1[i].pid : p3[i].pid, v1 ? p1[i].usedGpuMemory : p3[i].usedGpuMemory);
                    printf("\n");
                }
            } else if (!strcmp(cmd, "nvml-util")) {
                nvmlUtilization_t u;
                nr = nv.Util(h, &u);
                nr ? printf("err nvml %d\n", nr) : printf("ok %u %u\n", u.gpu, u.memory);
            } else {
                printf("err unknown-command\n");
            }
            fflush(stdout);
        } else if (!strcmp(cmd, "phys")) {
            int (*f)(int, uint64_t *, uint64_t *) =
                (int (*)(int, uint64_t *, uint64_t *))dlsym(RTLD_DEFAULT, "fakecuda_physical");
            uint64_t t = 0, u = 0;
            r = f && f((int)num(a1), &t, &u) == 0 ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
            reply(r, "%llu", (unsigned long long)u);
        } else if (!strcmp(cmd, "many")) {
            uint64_t n = num(a1), ok = 0, refused = 0;
            r = CUDA_SUCCESS;
            for (uint64_t i = 0; i < n && r == CUDA_SUCCESS; i++) {
                CUdeviceptr p = 0;
                CUresult ar = nkept < sizeof kept / sizeof kept[0] ? cu.MemAlloc(&p, num(a2)) : CUDA_ERROR_INVALID_VALUE;
                if (ar == CUDA_SUCCESS)
                    kept[nkept++] = p, ok++;
                else if (ar == CUDA_ERROR_OUT_OF_MEMORY)
                    refused++;
                else
                    r = ar;
            }
            reply(r, "%llu %llu", (unsigned long long)ok, (unsigned long long)refused);
        } else if (!strcmp(cmd, "freemany")) {
            r = CUDA_SUCCESS;
            while (nkept && r == CUDA_SUCCESS)
                r = cu.MemFree(kept[--nkept]);
            reply(r, NULL);
        } else if (!strcmp(cmd, "exit")) {
            reply(CUDA_SUCCESS, NULL);
            return 0;
        } else {
            printf("err unknown-command\n");
            fflush(stdout);
        }
    }
    return 0;
}
