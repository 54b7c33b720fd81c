/*
 * hook.h — internals of libdpucuda, the CUDA driver API hook.
 *
 * Layout:
 *   hook.c    symbol resolution: dlsym, cuGetProcAddress(_v2), the table of
 *             intercepted entry points and the driver functions the hook
 *             calls itself; init; logging
 *   mem.c     memory pre/post hooks: limits, reservations, the allocation
 *             table, virtualised cuMemGetInfo / cuDeviceTotalMem
 *   launch.c  kernel launches: quota tokens, burst estimate, overuse
 *             tracking with events
 *   agent.c   the connection to the dpu-agent (libdpu's dpu_call), retry
 *             with backoff, re-reporting totals after a reconnect
 *   table.c   the thread-safe allocation table
 *   nvml.c    NVML: the device count and handles under CUDA_VISIBLE_DEVICES,
 *             memory, processes and utilisation as the limits make them;
 *             the device's physical use for measuring context memory
 */
#ifndef DPUCUDA_HOOK_H
#define DPUCUDA_HOOK_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "cuda_abi.h"

#define DPUCUDA_EXPORT __attribute__((visibility("default")))
#define DPUCUDA_MAX_DEVICES 64
/* The account of the host's pinned memory, after the devices' (the agent's
 * HostDevice ordinal). */
#define DPUCUDA_HOST_DEVICE DPUCUDA_MAX_DEVICES
#define DPUCUDA_ACCOUNTS (DPUCUDA_MAX_DEVICES + 1)

/* The intercepted entry points, by exported name. X(name, api, version,
 * ptds): api is the name cuGetProcAddress is asked for, version the first
 * CUDA version whose cuda.h maps api to this variant, ptds whether it is
 * the per-thread default stream variant. */
#define DPUCUDA_HOOKED(X)                                                                          \
    X(cuGetProcAddress, "cuGetProcAddress", 11030, 0)                                              \
    X(cuGetProcAddress_v2, "cuGetProcAddress", 12000, 0)                                           \
    X(cuMemAlloc, "cuMemAlloc", 2000, 0)                                                           \
    X(cuMemAlloc_v2, "cuMemAlloc", 3020, 0)                                                        \
    X(cuMemAllocManaged, "cuMemAllocManaged", 6000, 0)                                             \
    X(cuMemAllocPitch, "cuMemAllocPitch", 2000, 0)                                                 \
    X(cuMemAllocPitch_v2, "cuMemAllocPitch", 3020, 0)                                              \
    X(cuMemAllocAsync, "cuMemAllocAsync", 11020, 0)                                                \
    X(cuMemAllocAsync_ptsz, "cuMemAllocAsync", 11020, 1)                                           \
    X(cuMemAllocFromPoolAsync, "cuMemAllocFromPoolAsync", 11020, 0)                                \
    X(cuMemAllocFromPoolAsync_ptsz, "cuMemAllocFromPoolAsync", 11020, 1)                           \
    X(cuMemCreate, "cuMemCreate", 10020, 0)                                                        \
    X(cuArrayCreate, "cuArrayCreate", 2000, 0)                                                     \
    X(cuArrayCreate_v2, "cuArrayCreate", 3020, 0)                                                  \
    X(cuArray3DCreate, "cuArray3DCreate", 2000, 0)                                                 \
    X(cuArray3DCreate_v2, "cuArray3DCreate", 3020, 0)                                              \
    X(cuMipmappedArrayCreate, "cuMipmappedArrayCreate", 5000, 0)                                   \
    X(cuMemFree, "cuMemFree", 2000, 0)                                                             \
    X(cuMemFree_v2, "cuMemFree", 3020, 0)                                                          \
    X(cuMemFreeAsync, "cuMemFreeAsync", 11020, 0)                                                  \
    X(cuMemFreeAsync_ptsz, "cuMemFreeAsync", 11020, 1)                                             \
    X(cuMemRelease, "cuMemRelease", 10020, 0)                                                      \
    X(cuArrayDestroy, "cuArrayDestroy", 2000, 0)                                                   \
    X(cuMipmappedArrayDestroy, "cuMipmappedArrayDestroy", 5000, 0)                                 \
    X(cuMemGetInfo, "cuMemGetInfo", 2000, 0)                                                       \
    X(cuMemGetInfo_v2, "cuMemGetInfo", 3020, 0)                                                    \
    X(cuDeviceTotalMem, "cuDeviceTotalMem", 2000, 0)                                               \
    X(cuDeviceTotalMem_v2, "cuDeviceTotalMem", 3020, 0)                                            \
    X(cuLaunchKernel, "cuLaunchKernel", 4000, 0)                                                   \
    X(cuLaunchKernel_ptsz, "cuLaunchKernel", 7000, 1)                                              \
    X(cuLaunchKernelEx, "cuLaunchKernelEx", 11060, 0)                                              \
    X(cuLaunchKernelEx_ptsz, "cuLaunchKernelEx", 11060, 1)                                         \
    X(cuLaunchCooperativeKernel, "cuLaunchCooperativeKernel", 9000, 0)                             \
    X(cuLaunchCooperativeKernel_ptsz, "cuLaunchCooperativeKernel", 9000, 1)                        \
    X(cuGraphLaunch, "cuGraphLaunch", 10000, 0)                                                    \
    X(cuGraphLaunch_ptsz, "cuGraphLaunch", 10000, 1)                                               \
    X(cuCtxCreate_v2, "cuCtxCreate", 3020, 0)                                                      \
    X(cuCtxCreate_v3, "cuCtxCreate", 11040, 0)                                                     \
    X(cuCtxCreate_v4, "cuCtxCreate", 12050, 0)                                                     \
    X(cuMemAllocHost, "cuMemAllocHost", 2000, 0)                                                   \
    X(cuMemAllocHost_v2, "cuMemAllocHost", 3020, 0)                                                \
    X(cuMemHostAlloc, "cuMemHostAlloc", 2020, 0)                                                   \
    X(cuMemFreeHost, "cuMemFreeHost", 2000, 0)                                                     \
    X(cuMemHostRegister, "cuMemHostRegister", 4000, 0)                                             \
    X(cuMemHostRegister_v2, "cuMemHostRegister", 6050, 0)                                          \
    X(cuMemHostUnregister, "cuMemHostUnregister", 4000, 0)                                         \
    X(cuCtxDestroy_v2, "cuCtxDestroy", 4000, 0)                                                    \
    X(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", 7000, 0)                               \
    X(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease", 7000, 0)                             \
    X(cuDevicePrimaryCtxRelease_v2, "cuDevicePrimaryCtxRelease", 11000, 0)

#define DPUCUDA_SLOT(name, api, version, ptds) SLOT_##name,
enum slot { DPUCUDA_HOOKED(DPUCUDA_SLOT) NSLOTS };
#undef DPUCUDA_SLOT

#define DPUCUDA_HIDDEN __attribute__((visibility("hidden")))

/* The real entry point behind slot s (resolving it on first use); NULL
 * when the driver has none. */
extern DPUCUDA_HIDDEN _Atomic(void *) dpucuda_reals[NSLOTS];
DPUCUDA_HIDDEN void *real_entry_slow(enum slot s);
static inline void *real_entry(enum slot s) {
    void *f = atomic_load_explicit(&dpucuda_reals[s], memory_order_acquire);
    return __builtin_expect(f != NULL, 1) ? f : real_entry_slow(s);
}
#define REAL(name) ((__typeof__(&name))real_entry(SLOT_##name))

/* Driver functions the hook calls but does not intercept. */
struct driver {
    CUresult (*cuCtxGetDevice)(CUdevice *);
    CUresult (*cuCtxGetCurrent)(CUcontext *);
    CUresult (*cuCtxSetCurrent)(CUcontext);
    CUresult (*cuDeviceGetUuid)(CUuuid *, CUdevice);
    CUresult (*cuEventCreate)(CUevent *, unsigned int);
    CUresult (*cuEventRecord)(CUevent, CUstream);
    CUresult (*cuEventQuery)(CUevent);
    CUresult (*cuEventElapsedTime)(float *, CUevent, CUevent);
    CUresult (*cuEventDestroy)(CUevent);
    CUresult (*cuMemGetAllocationGranularity)(size_t *, const CUmemAllocationProp *, int);
    CUresult (*cuStreamIsCapturing)(CUstream, int *);
};
extern struct driver drv;

void hook_init(void); /* idempotent; every entry point calls it first */
void *hook_real_dlsym(void *handle, const char *name); /* the C library's dlsym */
void *hook_nvml_of(const char *name);                  /* the hook of an NVML entry point, or NULL */

/* Logging on stderr, by DPU_CUDA_LOG (error, warn, info, debug; default warn). */
enum { LOG_ERROR = 0, LOG_WARN = 1, LOG_INFO = 2, LOG_DEBUG = 3 };
extern int hook_log_level;
void hook_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define LOGF(level, ...)                                                                           \
    do {                                                                                           \
        if ((level) <= hook_log_level)                                                             \
            hook_log(level, __VA_ARGS__);                                                          \
    } while (0)

uint64_t mono_ns(void);
uint64_t env_u64(const char *name, uint64_t def);

/* One device as this process sees it (ordinal = CUdevice). */
struct throttle;
struct device {
    int ordinal;
    pthread_mutex_t mu;       /* used, reserved */
    uint64_t used;            /* bytes charged: allocations through the hook, and untracked */
    uint64_t reserved;        /* admitted, not yet allocated */
    uint64_t untracked;       /* part of used: the driver's own use beyond the hook's charges (NVML) */
    uint64_t gen;             /* bumped whenever used changes (under mu) */
    _Atomic int freeing;      /* frees in the driver, not yet taken off used */
    _Atomic uint64_t usage_at; /* when the driver's figure was last read (mono_ns); 0 never */
    _Atomic int seen;         /* the process used it: re-report after a reconnect */
    _Atomic int uuid_state;   /* 0 unknown, 1 fetching/fetched */
    unsigned char uuid[16];
    _Atomic uint64_t limit;   /* bytes; 0 unlimited (from the agent) */
    _Atomic uint32_t quota;   /* percent; 0 unlimited */
    _Atomic uint64_t window_ns;
    _Atomic uint64_t kernel_ns; /* kernel time accounted: grants, overuse, local grants */
    _Atomic(struct throttle *) throttle;
    _Atomic uint64_t others;  /* in use by the others under the same limit (agent) */
    _Atomic uint64_t granule; /* the driver's allocation granularity; 0 not yet asked */
    int primary_refs;         /* retains of the primary context (under mu) */
    pthread_mutex_t umu;      /* utilisation sample */
    uint64_t util_at, util_kernel;
};

struct device *device_at(int ordinal);   /* NULL when out of range; learns the UUID */
struct device *device_peek(int ordinal); /* the same without touching the driver */
struct device *host_memory(void);        /* the account of pinned host memory */
struct device *current_device(void);   /* the calling thread's context's device, or NULL */
void device_set_quota(struct device *d, uint32_t quota, uint64_t window_ns);
void devices_reset_after_fork(void);

/* Agent (agent.c). Calls return 0 or a negative errno; -ENOTCONN while the
 * agent is unreachable (the hook then works on what it last heard). */
enum { UPDATE_ALLOC = 1, UPDATE_FREE = 2, UPDATE_SYNC = 3 };
struct token {
    uint64_t grant_ns, wait_ns;
    uint32_t quota;
    uint64_t window_ns;
};
void agent_start(void);
int agent_refresh(struct device *d);
int agent_report(struct device *d, uint32_t kind, uint64_t bytes);
int agent_token(struct device *d, uint64_t want_ns, uint64_t overuse_ns, struct token *t);
/* agent_procs lists the processes under d's limit (pids, bytes in use):
 * their count, or a negative errno. */
int agent_procs(struct device *d, uint32_t *pids, uint64_t *bytes, int cap);
void agent_after_fork(void);

/* Allocation table (table.c). */
enum { ALLOC_PTR = 1, ALLOC_ARRAY = 2, ALLOC_MIPMAP = 3, ALLOC_HANDLE = 4, ALLOC_CONTEXT = 5, ALLOC_CHUNK = 6,
       ALLOC_HOST = 7 };
struct allocation {
    uint64_t key;
    uint32_t kind;
    int32_t device;
    uint64_t bytes; /* charged (ALLOC_CHUNK: the chunk's live allocations) */
    uint64_t size;  /* device pointers: the extent the driver mapped, charged by chunk */
};
int table_put(const struct allocation *a); /* 0, or -ENOMEM */
int table_take(uint32_t kind, uint64_t key, struct allocation *out); /* 1 found (removed), 0 not */
void table_reset(void);
uint64_t table_count(void);

/* NVML (nvml.c). */
int hook_nvml_used(struct device *d, uint64_t *used); /* 0, or -1 without NVML */
/* hook_nvml_process_used is the driver's figure for this process on d
 * (NVML's running-process list; 0 when it is not listed): 0, or -1 without
 * NVML or the figure. */
int hook_nvml_process_used(struct device *d, uint64_t *used);

/* True usage (mem.c): reconcile d's charge with the driver's figure. */
void usage_reconcile(struct device *d);

/* Throttle (launch.c). */
extern DPUCUDA_HIDDEN _Atomic int launch_watch; /* non-zero: launches take the slow path (launch.c) */
void throttle_launch(CUstream stream);
void throttle_synced(struct device *d); /* the agent took the totals: forget unreported overuse */
void throttle_after_fork(void);

/* Hooked entry points (the driver API's signatures). */
CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags);
CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, cuuint64_t flags,
                             CUdriverProcAddressQueryResult *status);
CUresult cuMemAlloc(CUdeviceptr_v1 *dptr, unsigned int bytesize);
CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize);
CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags);
CUresult cuMemAllocPitch(CUdeviceptr_v1 *dptr, unsigned int *pitch, unsigned int width, unsigned int height,
                         unsigned int elem);
CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height, unsigned int elem);
CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream stream);
CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream stream);
CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream stream);
CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream stream);
CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
                     unsigned long long flags);
CUresult cuArrayCreate(CUarray *arr, const CUDA_ARRAY_DESCRIPTOR_v1 *desc);
CUresult cuArrayCreate_v2(CUarray *arr, const CUDA_ARRAY_DESCRIPTOR *desc);
CUresult cuArray3DCreate(CUarray *arr, const CUDA_ARRAY3D_DESCRIPTOR_v1 *desc);
CUresult cuArray3DCreate_v2(CUarray *arr, const CUDA_ARRAY3D_DESCRIPTOR *desc);
CUresult cuMipmappedArrayCreate(CUmipmappedArray *arr, const CUDA_ARRAY3D_DESCRIPTOR *desc, unsigned int levels);
CUresult cuMemFree(CUdeviceptr_v1 dptr);
CUresult cuMemFree_v2(CUdeviceptr dptr);
CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream stream);
CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream stream);
CUresult cuMemRelease(CUmemGenericAllocationHandle handle);
CUresult cuArrayDestroy(CUarray arr);
CUresult cuMipmappedArrayDestroy(CUmipmappedArray arr);
CUresult cuMemGetInfo(unsigned int *free_bytes, unsigned int *total_bytes);
CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total_bytes);
CUresult cuDeviceTotalMem(unsigned int *bytes, CUdevice dev);
CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev);
CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                        unsigned int by, unsigned int bz, unsigned int shmem, CUstream stream, void **params,
                        void **extra);
CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                             unsigned int by, unsigned int bz, unsigned int shmem, CUstream stream, void **params,
                             void **extra);
CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **params, void **extra);
CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f, void **params, void **extra);
CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                   unsigned int bx, unsigned int by, unsigned int bz, unsigned int shmem,
                                   CUstream stream, void **params);
CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                        unsigned int bx, unsigned int by, unsigned int bz, unsigned int shmem,
                                        CUstream stream, void **params);

CUresult cuGraphLaunch(CUgraphExec exec, CUstream stream);
CUresult cuGraphLaunch_ptsz(CUgraphExec exec, CUstream stream);
CUresult cuCtxCreate_v2(CUcontext *ctx, unsigned int flags, CUdevice dev);
CUresult cuCtxCreate_v3(CUcontext *ctx, void *affinity, int n, unsigned int flags, CUdevice dev);
CUresult cuCtxCreate_v4(CUcontext *ctx, void *params, unsigned int flags, CUdevice dev);
CUresult cuMemAllocHost(void **p, unsigned int bytesize);
CUresult cuMemAllocHost_v2(void **p, size_t bytesize);
CUresult cuMemHostAlloc(void **p, size_t bytesize, unsigned int flags);
CUresult cuMemFreeHost(void *p);
CUresult cuMemHostRegister(void *p, size_t bytesize, unsigned int flags);
CUresult cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int flags);
CUresult cuMemHostUnregister(void *p);
CUresult cuCtxDestroy_v2(CUcontext ctx);
CUresult cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice dev);
CUresult cuDevicePrimaryCtxRelease(CUdevice dev);
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev);

/* The library's version, exported for probes: "dpucuda <version>". */
const char *dpucuda_version(void);

#endif /* DPUCUDA_HOOK_H */
