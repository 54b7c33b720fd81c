/*
 * fakegpu.c — a CPU stand-in for libcuda.so.1, the test double behind the
 * launcher's driver interface (tests here have no GPU). Device memory is
 * host memory; a module is a text image ("fakegpu" ... "fakegpu-end") naming kernels that run
 * on the CPU when launched (vecadd, matmul, scale, spin); streams and
 * events complete at once (events record a timestamp). Enough of the
 * driver API for the launcher and the probe: nothing more.
 *
 * Two spins stand for what a GPU does on its own time: spin(-1) waits
 * (at most GATE_WAIT_S) until the file $FAKEGPU_GATE exists, as a long
 * kernel would keep its stream busy, and fails with
 * CUDA_ERROR_LAUNCH_TIMEOUT if it never does; spin(-2) faults as a kernel
 * reading a bad address does: CUDA_ERROR_ILLEGAL_ADDRESS, sticky (every
 * call of the process fails with it after).
 */
#define _GNU_SOURCE
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cu.h"

#define EXPORT __attribute__((visibility("default")))

struct CUctx_st { int dev; };
struct CUmod_st { int magic; };
struct CUfunc_st { int kind; };
struct CUstream_st { int magic; };
struct CUevent_st { uint64_t at; };

static struct CUctx_st primary = {0};
static __thread CUcontext cur;
static int inited;

enum { K_VECADD = 1, K_MATMUL, K_SCALE, K_SPIN };
static struct CUfunc_st fns[] = {{K_VECADD}, {K_MATMUL}, {K_SCALE}, {K_SPIN}};
/* Parameter layouts (offset, size) as the real driver reports them. */
static const struct { int n; size_t off[4], size[4]; } lay[] = {
    {0, {0}, {0}},
    {4, {0, 8, 16, 24}, {8, 8, 8, 4}},   /* vecadd(const float *a, const float *b, float *c, int n) */
    {4, {0, 8, 16, 24}, {8, 8, 8, 4}},   /* matmul(const float *A, const float *B, float *C, int n) */
    {3, {0, 8, 12}, {8, 4, 4}},          /* scale(float *x, float f, int n) */
    {1, {0}, {4}},                       /* spin(int loops) */
};

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#define NEED_INIT() do { if (!inited) return CUDA_ERROR_NOT_INITIALIZED; } while (0)
static CUresult sticky; /* a fault's error, returned by every call after */
#define STICKY() do { if (sticky) return sticky; } while (0)
#define GATE_WAIT_S 20

EXPORT CUresult cuInit(unsigned f) { (void)f; inited = 1; return CUDA_SUCCESS; }
EXPORT CUresult cuDriverGetVersion(int *v) { *v = 13000; return CUDA_SUCCESS; }
EXPORT CUresult cuDeviceGetCount(int *n) { NEED_INIT(); *n = 1; return CUDA_SUCCESS; }
EXPORT CUresult cuDeviceGet(CUdevice *d, int o) {
    NEED_INIT();
    if (o != 0)
        return CUDA_ERROR_INVALID_DEVICE;
    *d = 0;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuDeviceGetName(char *n, int len, CUdevice d) {
    (void)d;
    strncpy(n, "fakegpu CPU device", (size_t)len);
    n[len - 1] = 0;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuDeviceGetUuid(CUuuid *u, CUdevice d) {
    (void)d;
    memcpy(u->bytes, "fakegpu-uuid-000", 16);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuDeviceTotalMem_v2(size_t *b, CUdevice d) { (void)d; *b = 8ull << 30; return CUDA_SUCCESS; }
EXPORT CUresult cuDeviceGetAttribute(int *v, int a, CUdevice d) {
    (void)d;
    switch (a) {
    case 1: *v = 1024; return CUDA_SUCCESS;                 /* max threads per block */
    case 16: *v = 4; return CUDA_SUCCESS;                   /* multiprocessors */
    case 2: case 3: *v = 1024; return CUDA_SUCCESS;         /* max block x, y */
    case 4: *v = 64; return CUDA_SUCCESS;                   /* max block z */
    case 5: *v = 0x7fffffff; return CUDA_SUCCESS;           /* max grid x */
    case 6: case 7: *v = 65535; return CUDA_SUCCESS;        /* max grid y, z */
    case 75: *v = 9; return CUDA_SUCCESS;                   /* compute capability */
    case 76: *v = 0; return CUDA_SUCCESS;
    case 33: *v = 0x1b; return CUDA_SUCCESS;                /* PCI bus */
    default:
        if (a > 0 && a < 130) { *v = a; return CUDA_SUCCESS; }
        return CUDA_ERROR_INVALID_VALUE;
    }
}
EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d) { (void)d; *c = &primary; return CUDA_SUCCESS; }
EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d) { (void)d; return CUDA_SUCCESS; }
EXPORT CUresult cuCtxCreate_v2(CUcontext *c, unsigned f, CUdevice d) {
    (void)f;
    *c = calloc(1, sizeof **c);
    (*c)->dev = d;
    cur = *c;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuCtxDestroy_v2(CUcontext c) { if (c != &primary) free(c); return CUDA_SUCCESS; }
EXPORT CUresult cuCtxSetCurrent(CUcontext c) { cur = c; return CUDA_SUCCESS; }
EXPORT CUresult cuCtxGetCurrent(CUcontext *c) { *c = cur; return CUDA_SUCCESS; }
EXPORT CUresult cuCtxSynchronize(void) { STICKY(); return cur ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT; }

#define NEED_CTX() do { if (!cur) return CUDA_ERROR_INVALID_CONTEXT; } while (0)
/* Allocations carry their size in front (HEAD bytes, keeping the block's
 * alignment): free memory is the 7 GiB the device starts with less what
 * is allocated, pinned host memory included, so a test sees what a
 * session left behind. */
#define HEAD 4096
static _Atomic size_t held;
static void *held_alloc(size_t n) {
    void *m = NULL;
    if (posix_memalign(&m, HEAD, HEAD + (n ? n : 1)))
        return NULL;
    memcpy(m, &n, sizeof n);
    atomic_fetch_add(&held, n);
    return (char *)m + HEAD;
}
static void held_free(void *p) {
    if (!p)
        return;
    size_t n;
    memcpy(&n, (char *)p - HEAD, sizeof n);
    atomic_fetch_sub(&held, n);
    free((char *)p - HEAD);
}
EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n) {
    NEED_CTX();
    if (n > (7ull << 30) - atomic_load(&held))
        return CUDA_ERROR_OUT_OF_MEMORY;
    void *m = held_alloc(n);
    if (!m)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *p = (CUdeviceptr)(uintptr_t)m;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuMemFree_v2(CUdeviceptr p) { NEED_CTX(); held_free((void *)(uintptr_t)p); return CUDA_SUCCESS; }
EXPORT CUresult cuMemGetInfo_v2(size_t *f, size_t *t) {
    NEED_CTX();
    *f = (7ull << 30) - atomic_load(&held);
    *t = 8ull << 30;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuMemAllocHost_v2(void **p, size_t n) {
    NEED_CTX();
    return (*p = held_alloc(n)) ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}
EXPORT CUresult cuMemFreeHost(void *p) { held_free(p); return CUDA_SUCCESS; }
EXPORT CUresult cuMemHostAlloc(void **p, size_t n, unsigned flags) { (void)flags; return cuMemAllocHost_v2(p, n); }
EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr d, const void *s, size_t n) { NEED_CTX(); STICKY(); memcpy((void *)(uintptr_t)d, s, n); return CUDA_SUCCESS; }
EXPORT CUresult cuMemcpyDtoH_v2(void *d, CUdeviceptr s, size_t n) { NEED_CTX(); STICKY(); memcpy(d, (void *)(uintptr_t)s, n); return CUDA_SUCCESS; }
EXPORT CUresult cuMemcpyDtoD_v2(CUdeviceptr d, CUdeviceptr s, size_t n) { NEED_CTX(); memmove((void *)(uintptr_t)d, (void *)(uintptr_t)s, n); return CUDA_SUCCESS; }
EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr d, const void *s, size_t n, CUstream st) { (void)st; return cuMemcpyHtoD_v2(d, s, n); }
EXPORT CUresult cuMemcpyDtoHAsync_v2(void *d, CUdeviceptr s, size_t n, CUstream st) { (void)st; return cuMemcpyDtoH_v2(d, s, n); }
EXPORT CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st) { (void)st; return cuMemcpyDtoD_v2(d, s, n); }
EXPORT CUresult cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, CUstream s) { (void)s; NEED_CTX(); memset((void *)(uintptr_t)d, v, n); return CUDA_SUCCESS; }
EXPORT CUresult cuMemsetD32Async(CUdeviceptr d, unsigned v, size_t n, CUstream s) {
    (void)s;
    NEED_CTX();
    for (size_t i = 0; i < n; i++)
        memcpy((char *)(uintptr_t)d + 4 * i, &v, 4);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuMemsetD8_v2(CUdeviceptr d, unsigned char v, size_t n) { return cuMemsetD8Async(d, v, n, NULL); }
EXPORT CUresult cuMemsetD32_v2(CUdeviceptr d, unsigned v, size_t n) { return cuMemsetD32Async(d, v, n, NULL); }

static struct CUmod_st the_module = {0x66616b65};
EXPORT CUresult cuModuleLoadData(CUmodule *m, const void *img) {
    NEED_CTX();
    /* The whole image must arrive: "fakegpu" first, "fakegpu-end\n" last. */
    size_t n = img ? strlen(img) : 0;
    if (n < 19 || strncmp(img, "fakegpu", 7) != 0 || strcmp((const char *)img + n - 12, "fakegpu-end\n") != 0)
        return CUDA_ERROR_INVALID_IMAGE;
    *m = &the_module;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuModuleUnload(CUmodule m) { return m == &the_module ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE; }
EXPORT CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name) {
    if (m != &the_module)
        return CUDA_ERROR_INVALID_HANDLE;
    static const char *names[] = {"vecadd", "matmul", "scale", "spin"};
    for (int i = 0; i < 4; i++)
        if (!strcmp(name, names[i])) {
            *f = &fns[i];
            return CUDA_SUCCESS;
        }
    return CUDA_ERROR_NOT_FOUND;
}
EXPORT CUresult cuFuncGetParamInfo(CUfunction f, size_t i, size_t *off, size_t *size) {
    if (!f || f->kind < 1 || f->kind > 4)
        return CUDA_ERROR_INVALID_HANDLE;
    if ((int)i >= lay[f->kind].n)
        return CUDA_ERROR_INVALID_VALUE;
    *off = lay[f->kind].off[i];
    *size = lay[f->kind].size[i];
    return CUDA_SUCCESS;
}
EXPORT CUresult cuFuncGetAttribute(int *v, int a, CUfunction f) { (void)a, (void)f; *v = 1024; return CUDA_SUCCESS; }

EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                               unsigned bz, unsigned shmem, CUstream s, void **p, void **extra) {
    (void)shmem, (void)s, (void)extra, (void)gz, (void)bz;
    NEED_CTX();
    STICKY();
    if (!f)
        return CUDA_ERROR_INVALID_HANDLE;
    switch (f->kind) {
    case K_VECADD: {
        const float *a = *(float **)p[0], *b = *(float **)p[1];
        float *c = *(float **)p[2];
        int n = *(int *)p[3];
        size_t threads = (size_t)gx * bx;
        for (size_t i = 0; i < threads && i < (size_t)n; i++)
            c[i] = a[i] + b[i];
        return CUDA_SUCCESS;
    }
    case K_MATMUL: {
        const float *A = *(float **)p[0], *B = *(float **)p[1];
        float *C = *(float **)p[2];
        int n = *(int *)p[3];
        if ((size_t)gx * bx < (size_t)n || (size_t)gy * by < (size_t)n)
            return CUDA_ERROR_INVALID_VALUE;
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++) {
                float acc = 0;
                for (int k = 0; k < n; k++)
                    acc += A[i * n + k] * B[k * n + j];
                C[i * n + j] = acc;
            }
        return CUDA_SUCCESS;
    }
    case K_SCALE: {
        float *x = *(float **)p[0], fct = *(float *)p[1];
        int n = *(int *)p[2];
        for (int i = 0; i < n; i++)
            x[i] *= fct;
        return CUDA_SUCCESS;
    }
    case K_SPIN: {
        int loops = *(int *)p[0];
        if (loops == -2)
            return sticky = CUDA_ERROR_ILLEGAL_ADDRESS;
        if (loops == -1) {
            const char *gate = getenv("FAKEGPU_GATE");
            for (int i = 0; gate && i < GATE_WAIT_S * 1000; i++) {
                if (access(gate, F_OK) == 0)
                    return CUDA_SUCCESS;
                usleep(1000);
            }
            return sticky = 702; /* CUDA_ERROR_LAUNCH_TIMEOUT */
        }
        return CUDA_SUCCESS;
    }
    }
    return CUDA_ERROR_INVALID_HANDLE;
}

EXPORT CUresult cuStreamCreateWithPriority(CUstream *s, unsigned f, int p) {
    (void)f, (void)p;
    NEED_CTX();
    *s = calloc(1, sizeof **s);
    return *s ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}
EXPORT CUresult cuStreamCreate(CUstream *s, unsigned f) { return cuStreamCreateWithPriority(s, f, 0); }
EXPORT CUresult cuStreamDestroy_v2(CUstream s) { free(s); return CUDA_SUCCESS; }
EXPORT CUresult cuStreamSynchronize(CUstream s) { (void)s; NEED_CTX(); STICKY(); return CUDA_SUCCESS; }
EXPORT CUresult cuStreamQuery(CUstream s) { (void)s; STICKY(); return CUDA_SUCCESS; }
/* Streams are done at once: a host function runs at once. */
EXPORT CUresult cuLaunchHostFunc(CUstream s, CUhostFn fn, void *data) { (void)s; STICKY(); fn(data); return CUDA_SUCCESS; }
EXPORT CUresult cuStreamAddCallback(CUstream s, CUstreamCallback cb, void *data, unsigned f) {
    (void)f;
    cb(s, sticky, data);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned f) { (void)s, (void)e, (void)f; return CUDA_SUCCESS; }
EXPORT CUresult cuEventCreate(CUevent *e, unsigned f) {
    (void)f;
    *e = calloc(1, sizeof **e);
    return *e ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}
EXPORT CUresult cuEventDestroy_v2(CUevent e) { free(e); return CUDA_SUCCESS; }
EXPORT CUresult cuEventRecord(CUevent e, CUstream s) { (void)s; e->at = now_ns(); return CUDA_SUCCESS; }
EXPORT CUresult cuEventSynchronize(CUevent e) { STICKY(); return e->at ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE; }
EXPORT CUresult cuEventQuery(CUevent e) { (void)e; STICKY(); return CUDA_SUCCESS; }
EXPORT CUresult cuEventElapsedTime(float *ms, CUevent a, CUevent b) {
    if (!a->at || !b->at)
        return CUDA_ERROR_NOT_READY;
    *ms = (float)((double)(b->at - a->at) / 1e6);
    return CUDA_SUCCESS;
}
/* Launches with attributes: the attributes a GPU would schedule by are
 * checked for shape, then the kernel runs as cuLaunchKernel's does. */
EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig *c, CUfunction f, void **p, void **extra) {
    if (!c || (c->numAttrs && !c->attrs))
        return CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < c->numAttrs; i++)
        if (c->attrs[i].id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION &&
            (c->attrs[i].value.clusterDim.x == 0 || c->gridDimX % c->attrs[i].value.clusterDim.x))
            return CUDA_ERROR_INVALID_VALUE;
    return cuLaunchKernel(f, c->gridDimX, c->gridDimY, c->gridDimZ, c->blockDimX, c->blockDimY, c->blockDimZ,
                          c->sharedMemBytes, c->hStream, p, extra);
}
EXPORT CUresult cuOccupancyMaxActiveClusters(int *n, CUfunction f, const CUlaunchConfig *c) {
    NEED_CTX();
    if (!n || !f || !c)
        return CUDA_ERROR_INVALID_VALUE;
    unsigned cl = 1;
    for (unsigned i = 0; i < c->numAttrs; i++)
        if (c->attrs[i].id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION)
            cl = c->attrs[i].value.clusterDim.x;
    *n = (int)(132 / (cl ? cl : 1));
    return CUDA_SUCCESS;
}
/* A tensor map here records the address, the rank and the dimensions. */
EXPORT CUresult cuTensorMapEncodeTiled(CUtensorMap *m, int dtype, uint32_t rank, void *addr, const uint64_t *dim,
                                       const uint64_t *stride, const uint32_t *box, const uint32_t *es, int il,
                                       int sw, int l2, int oob) {
    (void)stride, (void)box, (void)es, (void)il, (void)sw, (void)l2, (void)oob;
    if (!m || rank < 1 || rank > 5 || ((uintptr_t)addr & 15))
        return CUDA_ERROR_INVALID_VALUE;
    memset(m, 0, sizeof *m);
    m->opaque[0] = (uint64_t)(uintptr_t)addr;
    m->opaque[1] = (uint64_t)rank << 32 | (uint32_t)dtype;
    for (uint32_t i = 0; i < rank; i++)
        m->opaque[2 + i] = dim[i];
    return CUDA_SUCCESS;
}
EXPORT CUresult cuTensorMapReplaceAddress(CUtensorMap *m, void *addr) {
    if (!m || ((uintptr_t)addr & 15))
        return CUDA_ERROR_INVALID_VALUE;
    m->opaque[0] = (uint64_t)(uintptr_t)addr;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuGetErrorString(CUresult e, const char **s) { (void)e; *s = "fakegpu error"; return CUDA_SUCCESS; }
