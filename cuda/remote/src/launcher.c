/*
 * dpu-cuda-launcher — runs the CUDA driver API calls of remote clients
 * (libdpucuda-remote.so) on this node's GPU.
 *
 *   dpu-cuda-launcher [-s SOCK] [-door-file PATH] [-slots N] [-staging PAGES]
 *                     [-threads N] [-mode OCTAL] [-driver LIB] [-dead-ms MS] [-v]
 *
 * It attaches to the node's host interface (SOCK, default $DPU_SOCKET or
 * $DPU_RUN_DIR/dpu0.sock), allocates its door page and one inbox per slot,
 * prints the door's GVA (and writes it to PATH), then serves: a thread per
 * slot takes one client session at a time. Within a session the calls run
 * in order, in the memory service (allocation, memset, info), the transfer
 * service (copies, module loading, launches, streams, events) and the
 * advise service (prefetch, advice). Every handle a client names is an id
 * of the session's own tables; every copy and memset must lie inside the
 * session's allocations or module globals. When a session ends (BYE, or its
 * heartbeat stops) everything it held is released. SIGINT/SIGTERM end the
 * launcher after freeing its pages.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <execinfo.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cu.h"
#include "dpu.h"
#include "mbox.h"
#include "wire.h"

/* ---- the real driver ---- */
#define DRIVER_FNS(X)                                                                                       \
    X(cuInit, CUresult (*)(unsigned))                                                                       \
    X(cuDriverGetVersion, CUresult (*)(int *))                                                              \
    X(cuDeviceGetCount, CUresult (*)(int *))                                                                \
    X(cuDeviceGet, CUresult (*)(CUdevice *, int))                                                           \
    X(cuDeviceGetName, CUresult (*)(char *, int, CUdevice))                                                 \
    X(cuDeviceGetUuid, CUresult (*)(CUuuid *, CUdevice))                                                    \
    X(cuDeviceTotalMem_v2, CUresult (*)(size_t *, CUdevice))                                                \
    X(cuDeviceGetAttribute, CUresult (*)(int *, int, CUdevice))                                             \
    X(cuDevicePrimaryCtxRetain, CUresult (*)(CUcontext *, CUdevice))                                        \
    X(cuDevicePrimaryCtxRelease_v2, CUresult (*)(CUdevice))                                                 \
    X(cuDevicePrimaryCtxReset_v2, CUresult (*)(CUdevice))                                                   \
    X(cuCtxCreate_v2, CUresult (*)(CUcontext *, unsigned, CUdevice))                                        \
    X(cuCtxDestroy_v2, CUresult (*)(CUcontext))                                                             \
    X(cuCtxSetCurrent, CUresult (*)(CUcontext))                                                             \
    X(cuCtxSynchronize, CUresult (*)(void))                                                                 \
    X(cuCtxGetLimit, CUresult (*)(size_t *, int))                                                           \
    X(cuDeviceGetDevResource, CUresult (*)(CUdevice, void *, int))                                          \
    X(cuCtxGetDevResource, CUresult (*)(CUcontext, void *, int))                                            \
    X(cuCtxSetLimit, CUresult (*)(int, size_t))                                                             \
    X(cuMemAlloc_v2, CUresult (*)(CUdeviceptr *, size_t))                                                   \
    X(cuMemFree_v2, CUresult (*)(CUdeviceptr))                                                              \
    X(cuMemGetInfo_v2, CUresult (*)(size_t *, size_t *))                                                    \
    X(cuMemAllocHost_v2, CUresult (*)(void **, size_t))                                                     \
    X(cuMemFreeHost, CUresult (*)(void *))                                                                  \
    X(cuMemHostAlloc, CUresult (*)(void **, size_t, unsigned))                                              \
    X(cuMemsetD8Async, CUresult (*)(CUdeviceptr, unsigned char, size_t, CUstream))                          \
    X(cuMemsetD16Async, CUresult (*)(CUdeviceptr, unsigned short, size_t, CUstream))                        \
    X(cuMemsetD32Async, CUresult (*)(CUdeviceptr, unsigned, size_t, CUstream))                              \
    X(cuMemcpyHtoDAsync_v2, CUresult (*)(CUdeviceptr, const void *, size_t, CUstream))                      \
    X(cuMemcpyDtoHAsync_v2, CUresult (*)(void *, CUdeviceptr, size_t, CUstream))                            \
    X(cuMemcpyDtoDAsync_v2, CUresult (*)(CUdeviceptr, CUdeviceptr, size_t, CUstream))                       \
    X(cuMemGetAddressRange_v2, CUresult (*)(CUdeviceptr *, size_t *, CUdeviceptr))                          \
    X(cuModuleLoadData, CUresult (*)(CUmodule *, const void *))                                             \
    X(cuModuleUnload, CUresult (*)(CUmodule))                                                               \
    X(cuModuleGetFunction, CUresult (*)(CUfunction *, CUmodule, const char *))                              \
    X(cuModuleGetGlobal_v2, CUresult (*)(CUdeviceptr *, size_t *, CUmodule, const char *))                  \
    X(cuLibraryLoadData, CUresult (*)(CUlibrary *, const void *, void *, void *, unsigned, void *, void *,   \
                                      unsigned))                                                            \
    X(cuLibraryUnload, CUresult (*)(CUlibrary))                                                             \
    X(cuLibraryGetKernel, CUresult (*)(CUkernel *, CUlibrary, const char *))                                \
    X(cuKernelGetFunction, CUresult (*)(CUfunction *, CUkernel))                                            \
    X(cuFuncGetParamInfo, CUresult (*)(CUfunction, size_t, size_t *, size_t *))                             \
    X(cuKernelGetParamInfo, CUresult (*)(CUkernel, size_t, size_t *, size_t *))                             \
    X(cuFuncGetAttribute, CUresult (*)(int *, CUfunction_attribute, CUfunction))                            \
    X(cuFuncSetAttribute, CUresult (*)(CUfunction, CUfunction_attribute, int))                              \
    X(cuKernelGetAttribute, CUresult (*)(int *, CUfunction_attribute, CUkernel, CUdevice))                  \
    X(cuKernelSetAttribute, CUresult (*)(CUfunction_attribute, int, CUkernel, CUdevice))                    \
    X(cuCtxGetDevice, CUresult (*)(CUdevice *))                                                             \
    X(cuLaunchKernel, CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,   \
                                   unsigned, CUstream, void **, void **))                                   \
    X(cuLaunchKernelEx, CUresult (*)(const CUlaunchConfig *, CUfunction, void **, void **))                 \
    X(cuStreamCreateWithPriority, CUresult (*)(CUstream *, unsigned, int))                                  \
    X(cuStreamDestroy_v2, CUresult (*)(CUstream))                                                           \
    X(cuStreamSynchronize, CUresult (*)(CUstream))                                                          \
    X(cuStreamQuery, CUresult (*)(CUstream))                                                                \
    X(cuStreamWaitEvent, CUresult (*)(CUstream, CUevent, unsigned))                                         \
    X(cuEventCreate, CUresult (*)(CUevent *, unsigned))                                                     \
    X(cuEventDestroy_v2, CUresult (*)(CUevent))                                                             \
    X(cuEventRecord, CUresult (*)(CUevent, CUstream))                                                       \
    X(cuEventSynchronize, CUresult (*)(CUevent))                                                            \
    X(cuEventQuery, CUresult (*)(CUevent))                                                                  \
    X(cuEventElapsedTime, CUresult (*)(float *, CUevent, CUevent))                                          \
    X(cuOccupancyMaxActiveBlocksPerMultiprocessor, CUresult (*)(int *, CUfunction, int, size_t))            \
    X(cuMemPrefetchAsync, CUresult (*)(CUdeviceptr, size_t, CUdevice, CUstream))                            \
    X(cuMemAdvise, CUresult (*)(CUdeviceptr, size_t, int, CUdevice))                                       \
    X(cuOccupancyMaxActiveClusters, CUresult (*)(int *, CUfunction, const CUlaunchConfig *))                 \
    X(cuOccupancyMaxPotentialClusterSize, CUresult (*)(int *, CUfunction, const CUlaunchConfig *))           \
    X(cuOccupancyAvailableDynamicSMemPerBlock, CUresult (*)(size_t *, CUfunction, int, int))                 \
    X(cuLibraryGetGlobal, CUresult (*)(CUdeviceptr *, size_t *, CUlibrary, const char *))                    \
    X(cuTensorMapEncodeTiled, CUresult (*)(CUtensorMap *, int, uint32_t, void *, const uint64_t *,           \
                                           const uint64_t *, const uint32_t *, const uint32_t *, int, int, int, \
                                           int))                                                            \
    X(cuTensorMapEncodeIm2col, CUresult (*)(CUtensorMap *, int, uint32_t, void *, const uint64_t *,          \
                                            const uint64_t *, const int *, const int *, uint32_t, uint32_t,    \
                                            const uint32_t *, int, int, int, int))                          \
    X(cuTensorMapReplaceAddress, CUresult (*)(CUtensorMap *, void *))

static struct {
#define FIELD(name, type) __typeof__(type) name;
    DRIVER_FNS(FIELD)
#undef FIELD
} drv;

static int verbose;
static void logf_(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void logf_(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "dpu-cuda-launcher: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

static int load_driver(const char *path) {
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        logf_("dlopen %s: %s", path, dlerror());
        return -1;
    }
#define LOAD(name, type) drv.name = (type)dlsym(h, #name);
    DRIVER_FNS(LOAD)
#undef LOAD
    if (!drv.cuInit || !drv.cuMemAlloc_v2 || !drv.cuLaunchKernel || !drv.cuModuleLoadData) {
        logf_("%s lacks the driver API", path);
        return -1;
    }
    return 0;
}

#define CALL(name, ...) (drv.name ? drv.name(__VA_ARGS__) : CUDA_ERROR_NOT_SUPPORTED)

/* ---- sessions ---- */
enum { K_FREE = 0, K_CTX, K_PRIMARY, K_MODULE, K_FUNC, K_LIBRARY, K_KERNEL, K_STREAM, K_EVENT };

struct laycache; /* a function's parameter layout, kept from its first launch */

struct obj {
    int kind;
    void *p;
    struct laycache *lay; /* K_FUNC, K_KERNEL */
    int dev;       /* K_PRIMARY */
    uint32_t owner; /* K_FUNC: its module; K_KERNEL: its library */
    void *ctx;      /* the context current when it was made */
};

struct range { uint64_t base, size; int global; void *ctx; };

/* An asynchronous device-to-host copy the client has not fetched yet: the
 * bytes land in buf (pinned when the driver gives it) on the copy's stream,
 * and ev completes with them. */
struct pending {
    uint64_t id;
    unsigned char *buf;
    size_t bytes, cap;
    int pinned, done;
    void *ev, *ctx;
};
#define PINNED_CACHE 8 /* freed pinned buffers kept for reuse */
struct pinned { void *p; size_t cap; void *ctx; };

struct session {
    int slot;
    struct mbox mb;
    uint64_t token;
    struct obj *objs;
    uint32_t nobjs, capobjs;
    struct range *ranges;
    size_t nranges, capranges;
    unsigned char *buf; /* staging-sized bounce buffer */
    size_t bufsize;
    uint64_t hb, hb_at; /* the client's last heartbeat, and when it changed */
    dpu_gva_t door;
    uint64_t calls;
    void *cur; /* the real context current for the request being served */
    unsigned char *img; /* a large image being sent in parts (IMAGE_PUT) */
    uint64_t imgsize, imgfill;
    struct pending *pend; /* asynchronous copies to the client not fetched yet */
    size_t npend, cappend;
    struct pinned cache[PINNED_CACHE];
    uint64_t batches, batched;
    /* The pinned staging buffer copies to and from the device go through
     * (cuMemHostAlloc, portable; pageable buf when the driver gives none):
     * the bytes of staging page k at k * RW_STAGE_DATA. An asynchronous
     * copy to the device out of it marks its pages busy until its event
     * completes; they are not written before. */
    unsigned char *pin;
    void *pin_ctx;
    struct { uint32_t stage, pages; void *ev, *ctx; } busy[2];
    uint64_t corrupt; /* staged transfers refused as corrupt */
};

static dpu_t *D; /* the main thread's connection; each slot thread has its own */
static const char *SOCK;
static struct pool *POOL;
static dpu_gva_t DOOR;
static uint32_t SLOTS = 4, STAGING = STAGING_PAGES_DEFAULT, DEAD_MS = HEARTBEAT_DEAD_MS;
static atomic_int stopping;

static uint32_t obj_add(struct session *s, int kind, void *p) {
    for (uint32_t i = 0; i < s->nobjs; i++)
        if (s->objs[i].kind == K_FREE) {
            free(s->objs[i].lay);
            s->objs[i] = (struct obj){.kind = kind, .p = p, .ctx = s->cur};
            return i + 1;
        }
    if (s->nobjs == s->capobjs) {
        uint32_t cap = s->capobjs ? s->capobjs * 2 : 64;
        if (cap > 1u << 20)
            return 0;
        struct obj *n = realloc(s->objs, cap * sizeof *n);
        if (!n)
            return 0;
        s->objs = n;
        s->capobjs = cap;
    }
    s->objs[s->nobjs] = (struct obj){.kind = kind, .p = p, .ctx = s->cur};
    return ++s->nobjs;
}

static struct obj *obj_get(struct session *s, uint32_t id, int kind) {
    if (id == 0 || id > s->nobjs)
        return NULL;
    struct obj *o = &s->objs[id - 1];
    if (o->kind != kind && !(kind == K_CTX && o->kind == K_PRIMARY))
        return NULL;
    return o;
}

static int range_add(struct session *s, uint64_t base, uint64_t size, int global) {
    if (s->nranges == s->capranges) {
        size_t cap = s->capranges ? s->capranges * 2 : 64;
        struct range *n = realloc(s->ranges, cap * sizeof *n);
        if (!n)
            return -1;
        s->ranges = n;
        s->capranges = cap;
    }
    s->ranges[s->nranges++] = (struct range){base, size, global, s->cur};
    return 0;
}

static int range_del(struct session *s, uint64_t base) {
    for (size_t i = 0; i < s->nranges; i++)
        if (s->ranges[i].base == base && !s->ranges[i].global) {
            s->ranges[i] = s->ranges[--s->nranges];
            return 0;
        }
    return -1;
}

/* inside: [p, p+n) lies in one of the session's ranges. */
static int inside(struct session *s, uint64_t p, uint64_t n) {
    for (size_t i = 0; i < s->nranges; i++) {
        struct range *r = &s->ranges[i];
        if (p >= r->base && p - r->base <= r->size && n <= r->size - (p - r->base))
            return 1;
    }
    return 0;
}

static CUstream stream_of(struct session *s, uint32_t id, int *ok) {
    *ok = 1;
    if (id == RW_STREAM_LEGACY)
        return NULL;
    if (id == RW_STREAM_PER_THREAD)
        return CU_STREAM_PER_THREAD;
    struct obj *o = obj_get(s, id, K_STREAM);
    if (!o) {
        *ok = 0;
        return NULL;
    }
    return (CUstream)o->p;
}

static void pending_drop(struct session *s, size_t i);
static void pinned_flush(struct session *s);
static void pin_free(struct session *s);
static CUresult staged_fail(struct session *s, int e);

static void session_release(struct session *s) {
    while (s->npend > 0)
        pending_drop(s, s->npend - 1);
    pinned_flush(s);
    pin_free(s);
    /* Events and streams, then functions/kernels (nothing to free), modules
     * and libraries, memory, contexts last. */
    static const int order[] = {K_EVENT, K_STREAM, K_MODULE, K_LIBRARY};
    for (size_t k = 0; k < sizeof order / sizeof order[0]; k++)
        for (uint32_t i = 0; i < s->nobjs; i++) {
            struct obj *o = &s->objs[i];
            if (o->kind != order[k])
                continue;
            CALL(cuCtxSetCurrent, (CUcontext)o->ctx);
            switch (o->kind) {
            case K_EVENT: CALL(cuEventDestroy_v2, (CUevent)o->p); break;
            case K_STREAM: CALL(cuStreamDestroy_v2, (CUstream)o->p); break;
            case K_MODULE: CALL(cuModuleUnload, (CUmodule)o->p); break;
            case K_LIBRARY: CALL(cuLibraryUnload, (CUlibrary)o->p); break;
            }
            o->kind = K_FREE;
        }
    for (size_t i = 0; i < s->nranges; i++)
        if (!s->ranges[i].global) {
            CALL(cuCtxSetCurrent, (CUcontext)s->ranges[i].ctx);
            CALL(cuMemFree_v2, (CUdeviceptr)s->ranges[i].base);
        }
    s->nranges = 0;
    CALL(cuCtxSetCurrent, NULL);
    for (uint32_t i = 0; i < s->nobjs; i++) {
        struct obj *o = &s->objs[i];
        if (o->kind == K_CTX)
            CALL(cuCtxDestroy_v2, (CUcontext)o->p);
        else if (o->kind == K_PRIMARY)
            CALL(cuDevicePrimaryCtxRelease_v2, o->dev);
        o->kind = K_FREE;
    }
    CALL(cuCtxSetCurrent, NULL);
    for (uint32_t i = 0; i < s->nobjs; i++) {
        free(s->objs[i].lay);
        s->objs[i].lay = NULL;
    }
    s->nobjs = 0;
    free(s->img);
    s->img = NULL;
    s->imgsize = s->imgfill = 0;
}

struct laycache {
    struct rw_func f;
    struct rw_param p[RW_MAX_PARAMS];
};

/* params_of asks the driver for a function's (or kernel's) parameter
 * layout and appends it to a reply. */
static uint32_t params_of(CUfunction f, CUkernel k, struct rw_func *out, uint32_t cap) {
    uint32_t n = 0, end = 0;
    for (; n < RW_MAX_PARAMS && sizeof *out + (n + 1) * sizeof out->param[0] <= cap; n++) {
        size_t off = 0, size = 0;
        CUresult r = k ? CALL(cuKernelGetParamInfo, k, n, &off, &size) : CALL(cuFuncGetParamInfo, f, n, &off, &size);
        if (r != CUDA_SUCCESS)
            break;
        out->param[n].offset = (uint32_t)off;
        out->param[n].size = (uint32_t)size;
        if (off + size > end)
            end = (uint32_t)(off + size);
    }
    out->nparams = n;
    out->argbytes = end;
    return (uint32_t)(sizeof *out + n * sizeof out->param[0]);
}

#define NEED(cond)                                                                                          \
    do {                                                                                                    \
        if (!(cond))                                                                                        \
            return CUDA_ERROR_INVALID_VALUE;                                                                \
    } while (0)

static uint32_t u32at(const unsigned char *b, size_t off) {
    uint32_t v;
    memcpy(&v, b + off, 4);
    return v;
}
static uint64_t u64at(const unsigned char *b, size_t off) {
    uint64_t v;
    memcpy(&v, b + off, 8);
    return v;
}

/* name_at: a NUL-terminated name at body[off..len). */
static const char *name_at(const unsigned char *body, uint32_t len, uint32_t off) {
    if (off >= len || !memchr(body + off, 0, len - off))
        return NULL;
    return (const char *)body + off;
}

/* staged_image reads an image of n bytes out of the staging area into a
 * fresh buffer. */
static CUresult staged(struct session *s, uint64_t seq, uint64_t n, unsigned char **out) {
    if (n == 0 || n > s->bufsize)
        return CUDA_ERROR_INVALID_VALUE;
    unsigned char *img = malloc(n + 1);
    if (!img)
        return CUDA_ERROR_OUT_OF_MEMORY;
    int e = mbox_get(&s->mb, img, n, seq);
    if (e < 0) {
        free(img);
        return staged_fail(s, e);
    }
    img[n] = 0;
    *out = img;
    return CUDA_SUCCESS;
}

/* func_of: a session's function or library kernel. */
static struct obj *func_of(struct session *s, uint32_t id) {
    struct obj *o = obj_get(s, id, K_FUNC);
    return o ? o : obj_get(s, id, K_KERNEL);
}

/* launch_config builds a launch's configuration from the wire: only
 * attributes that hold plain values are forwarded, and events are the
 * session's. */
static CUresult launch_config(struct session *s, const struct rw_launch *l, const unsigned char *wire,
                              CUlaunchConfig *cfg, CUlaunchAttribute *at) {
    int ok;
    memset(cfg, 0, sizeof *cfg);
    cfg->gridDimX = l->grid[0], cfg->gridDimY = l->grid[1], cfg->gridDimZ = l->grid[2];
    cfg->blockDimX = l->block[0], cfg->blockDimY = l->block[1], cfg->blockDimZ = l->block[2];
    cfg->sharedMemBytes = l->shmem;
    cfg->hStream = stream_of(s, l->stream, &ok);
    if (!ok)
        return CUDA_ERROR_INVALID_HANDLE;
    cfg->attrs = at;
    for (uint32_t i = 0; i < l->nattrs; i++) {
        struct rw_attr a;
        memcpy(&a, wire + i * sizeof a, sizeof a);
        memset(&at[i], 0, sizeof at[i]);
        at[i].id = (int)a.id;
        memcpy(at[i].value.raw, a.value, sizeof a.value);
        switch (a.id) {
        case CU_LAUNCH_ATTRIBUTE_IGNORE:
        case CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW:
        case CU_LAUNCH_ATTRIBUTE_COOPERATIVE:
        case CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY:
        case CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION:
        case CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
        case CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION:
        case CU_LAUNCH_ATTRIBUTE_PRIORITY:
        case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP:
        case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN:
        case CU_LAUNCH_ATTRIBUTE_PREFERRED_CLUSTER_DIMENSION:
        case CU_LAUNCH_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
        case 15: /* CUDA 13's scheduling preferences: plain values */
        case 16:
            break;
        case CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT:
        case CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT: {
            uint64_t id;
            memcpy(&id, a.value, 8);
            struct obj *e = id <= UINT32_MAX ? obj_get(s, (uint32_t)id, K_EVENT) : NULL;
            if (!e)
                return CUDA_ERROR_INVALID_HANDLE;
            memcpy(at[i].value.raw, &e->p, sizeof e->p);
            break;
        }
        default:
            return CUDA_ERROR_NOT_SUPPORTED;
        }
    }
    cfg->numAttrs = l->nattrs;
    return CUDA_SUCCESS;
}

/* tensor_map encodes a tensor map on the real driver. Like the driver, it
 * takes any global address: a library may encode a map with a placeholder
 * address and set the real one later (cuTensorMapReplaceAddress), and the
 * map is bytes the client's own kernels use, which may read any address of
 * the session's context anyway (the isolation is the driver's context).
 * Shapes the driver would refuse are refused here. */
static CUresult tensor_map(const struct rw_tmap *t, CUtensorMap *map) {
    memset(map, 0, sizeof *map);
    if (t->kind == 2) {
        memcpy(map, t->map, sizeof *map);
        return CALL(cuTensorMapReplaceAddress, map, (void *)(uintptr_t)t->addr);
    }
    if (t->kind > 1 || t->rank < 1 || t->rank > 5 || (t->kind == 1 && t->rank < 3))
        return CUDA_ERROR_INVALID_VALUE;
    void *addr = (void *)(uintptr_t)t->addr;
    if (t->kind == 0)
        return CALL(cuTensorMapEncodeTiled, map, (int)t->dtype, t->rank, addr, t->dim, t->stride, t->box,
                    t->elem_stride, (int)t->interleave, (int)t->swizzle, (int)t->l2promo, (int)t->oobfill);
    return CALL(cuTensorMapEncodeIm2col, map, (int)t->dtype, t->rank, addr, t->dim, t->stride, t->lower, t->upper,
                t->channels_per_pixel, t->pixels_per_column, t->elem_stride, (int)t->interleave, (int)t->swizzle,
                (int)t->l2promo, (int)t->oobfill);
}

/* ---- asynchronous copies to the client ---- */
static void pinned_flush(struct session *s) {
    for (int i = 0; i < PINNED_CACHE; i++)
        if (s->cache[i].p) {
            CALL(cuCtxSetCurrent, (CUcontext)s->cache[i].ctx);
            CALL(cuMemFreeHost, s->cache[i].p);
            s->cache[i].p = NULL;
        }
}

/* buffer_get: a buffer of at least n bytes for a copy, pinned when the
 * driver gives pinned memory (reused from the cache when one fits). */
static unsigned char *buffer_get(struct session *s, size_t n, size_t *cap, int *pinned) {
    for (int i = 0; i < PINNED_CACHE; i++)
        if (s->cache[i].p && s->cache[i].cap >= n && s->cache[i].cap / 4 <= n && s->cache[i].ctx == s->cur) {
            void *p = s->cache[i].p;
            *cap = s->cache[i].cap;
            *pinned = 1;
            s->cache[i].p = NULL;
            return p;
        }
    size_t c = (n + 65535) & ~(size_t)65535;
    void *p = NULL;
    if (CALL(cuMemAllocHost_v2, &p, c) == CUDA_SUCCESS && p) {
        *cap = c;
        *pinned = 1;
        return p;
    }
    *cap = n;
    *pinned = 0;
    return malloc(n);
}

static void buffer_put(struct session *s, unsigned char *p, size_t cap, int pinned, void *ctx) {
    if (!pinned) {
        free(p);
        return;
    }
    int slot = -1;
    for (int i = 0; i < PINNED_CACHE; i++)
        if (!s->cache[i].p) {
            slot = i;
            break;
        }
    if (slot < 0) { /* full: the smallest goes */
        slot = 0;
        for (int i = 1; i < PINNED_CACHE; i++)
            if (s->cache[i].cap < s->cache[slot].cap)
                slot = i;
        if (s->cache[slot].cap > cap) {
            CALL(cuCtxSetCurrent, (CUcontext)ctx);
            CALL(cuMemFreeHost, p);
            CALL(cuCtxSetCurrent, (CUcontext)s->cur);
            return;
        }
        CALL(cuCtxSetCurrent, (CUcontext)s->cache[slot].ctx);
        CALL(cuMemFreeHost, s->cache[slot].p);
        CALL(cuCtxSetCurrent, (CUcontext)s->cur);
    }
    s->cache[slot] = (struct pinned){p, cap, ctx};
}

static void pending_drop(struct session *s, size_t i) {
    struct pending *p = &s->pend[i];
    CALL(cuCtxSetCurrent, (CUcontext)p->ctx);
    if (p->ev)
        CALL(cuEventDestroy_v2, p->ev);
    CALL(cuCtxSetCurrent, (CUcontext)s->cur);
    buffer_put(s, p->buf, p->cap, p->pinned, p->ctx);
    s->pend[i] = s->pend[--s->npend];
}

static struct pending *pending_find(struct session *s, uint64_t id, size_t *at) {
    for (size_t i = 0; i < s->npend; i++)
        if (s->pend[i].id == id) {
            *at = i;
            return &s->pend[i];
        }
    return NULL;
}

/* ---- the pinned staging buffer ---- */
static void busy_wait(struct session *s, int i) {
    if (!s->busy[i].ev)
        return;
    CALL(cuCtxSetCurrent, (CUcontext)s->busy[i].ctx);
    CALL(cuEventSynchronize, (CUevent)s->busy[i].ev);
    CALL(cuEventDestroy_v2, (CUevent)s->busy[i].ev);
    CALL(cuCtxSetCurrent, (CUcontext)s->cur);
    s->busy[i].ev = NULL;
}

/* pin_wait waits for the asynchronous copies out of staging pages
 * [stage, stage + pages) of the pinned buffer. */
static void pin_wait(struct session *s, uint32_t stage, uint32_t pages) {
    for (int i = 0; i < 2; i++)
        if (s->busy[i].ev && stage < s->busy[i].stage + s->busy[i].pages && s->busy[i].stage < stage + pages)
            busy_wait(s, i);
}

static void pin_free(struct session *s) {
    for (int i = 0; i < 2; i++)
        busy_wait(s, i);
    if (s->pin) {
        CALL(cuCtxSetCurrent, (CUcontext)s->pin_ctx);
        CALL(cuMemFreeHost, s->pin);
        CALL(cuCtxSetCurrent, (CUcontext)s->cur);
        s->pin = NULL;
    }
}

/* pin_buf: the staging buffer for a copy of pages [stage, stage + pages)
 * in the current context, its busy pages waited for; pinned when the
 * driver gives pinned memory, else the pageable bounce buffer. */
static unsigned char *pin_buf(struct session *s, uint32_t stage, uint32_t pages, int *pinned) {
    if (!s->pin && s->cur) {
        void *p = NULL;
        if ((CALL(cuMemHostAlloc, &p, s->bufsize, 1 /* CU_MEMHOSTALLOC_PORTABLE */) == CUDA_SUCCESS && p) ||
            (CALL(cuMemAllocHost_v2, &p, s->bufsize) == CUDA_SUCCESS && p)) {
            s->pin = p;
            s->pin_ctx = s->cur;
        }
    }
    *pinned = s->pin != NULL;
    if (!s->pin)
        return s->buf;
    pin_wait(s, stage, pages);
    return s->pin;
}

/* pin_busy marks pages [stage, stage + pages) busy until the work queued
 * on st so far (an asynchronous copy out of them) is done. */
static CUresult pin_busy(struct session *s, uint32_t stage, uint32_t pages, CUstream st) {
    int i = s->busy[0].ev ? (s->busy[1].ev ? 0 : 1) : 0;
    busy_wait(s, i);
    void *ev = NULL;
    CUresult r = CALL(cuEventCreate, (CUevent *)&ev, 2 /* CU_EVENT_DISABLE_TIMING */);
    if (r == CUDA_SUCCESS && (r = CALL(cuEventRecord, (CUevent)ev, st)) != CUDA_SUCCESS) {
        CALL(cuEventDestroy_v2, (CUevent)ev);
        ev = NULL;
    }
    if (!ev) /* no event: wait for the stream instead */
        return r ? r : CALL(cuStreamSynchronize, st);
    s->busy[i].stage = stage;
    s->busy[i].pages = pages;
    s->busy[i].ev = ev;
    s->busy[i].ctx = s->cur;
    return CUDA_SUCCESS;
}

/* staged_fail: the request's answer when its staged bytes could not be
 * taken: CUDA_ERROR_UNKNOWN (a corrupt chunk is logged). */
static CUresult staged_fail(struct session *s, int e) {
    if (e == -EBADMSG) {
        s->corrupt++;
        logf_("slot %u: a staged chunk arrived corrupt (CRC-32C); the request fails", s->slot);
    }
    return CUDA_ERROR_UNKNOWN;
}

#define MAX_PENDING 4096

static CUresult dispatch(struct session *s, const struct rw_hdr *h, const unsigned char *b, uint32_t len,
                         unsigned char *rep, uint32_t *rlen) {
    *rlen = 0;
    CUresult r;
    int ok;
    if (h->ctx) {
        struct obj *c = obj_get(s, h->ctx, K_CTX);
        if (!c)
            return CUDA_ERROR_INVALID_CONTEXT;
        r = CALL(cuCtxSetCurrent, (CUcontext)c->p);
        if (r)
            return r;
        s->cur = c->p;
    } else {
        CALL(cuCtxSetCurrent, NULL);
        s->cur = NULL;
    }
    switch (h->op) {
    case OP_DEVICE_INFO: {
        NEED(len == 4);
        struct rw_device_info *di = (void *)rep;
        memset(di, 0, sizeof *di);
        CUdevice dev;
        if ((r = CALL(cuDeviceGet, &dev, (int)u32at(b, 0))))
            return r;
        if ((r = CALL(cuDeviceGetName, di->name, sizeof di->name, dev)))
            return r;
        CUuuid u;
        if (CALL(cuDeviceGetUuid, &u, dev) == CUDA_SUCCESS)
            memcpy(di->uuid, u.bytes, 16);
        size_t total = 0;
        CALL(cuDeviceTotalMem_v2, &total, dev);
        di->total_mem = total;
        for (int a = 1; a < RW_ATTRS; a++) {
            int v = 0;
            if (CALL(cuDeviceGetAttribute, &v, a, dev) == CUDA_SUCCESS) {
                di->attr[a] = v;
                di->attr_ok[a / 8] |= (uint8_t)(1u << (a % 8));
            }
        }
        *rlen = sizeof *di;
        return CUDA_SUCCESS;
    }
    case OP_PRIMARY_RETAIN: {
        NEED(len == 4);
        CUdevice dev;
        CUcontext c;
        if ((r = CALL(cuDeviceGet, &dev, (int)u32at(b, 0))) || (r = CALL(cuDevicePrimaryCtxRetain, &c, dev)))
            return r;
        /* One id per device's primary context, however often retained. */
        for (uint32_t i = 0; i < s->nobjs; i++)
            if (s->objs[i].kind == K_PRIMARY && s->objs[i].dev == dev) {
                CALL(cuDevicePrimaryCtxRelease_v2, dev);
                memcpy(rep, &(uint32_t){i + 1}, 4);
                *rlen = 4;
                return CUDA_SUCCESS;
            }
        uint32_t id = obj_add(s, K_PRIMARY, c);
        if (!id) {
            CALL(cuDevicePrimaryCtxRelease_v2, dev);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        s->objs[id - 1].dev = dev;
        memcpy(rep, &id, 4);
        *rlen = 4;
        return CUDA_SUCCESS;
    }
    case OP_PRIMARY_RELEASE:
    case OP_PRIMARY_RESET:
        /* The session keeps its one retain until it ends: the client counts. */
        NEED(len == 4);
        return CUDA_SUCCESS;
    case OP_CTX_CREATE: {
        NEED(len == 8);
        CUdevice dev;
        CUcontext c;
        if ((r = CALL(cuDeviceGet, &dev, (int)u32at(b, 4))) || (r = CALL(cuCtxCreate_v2, &c, u32at(b, 0), dev)))
            return r;
        uint32_t id = obj_add(s, K_CTX, c);
        if (!id) {
            CALL(cuCtxDestroy_v2, c);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        memcpy(rep, &id, 4);
        *rlen = 4;
        return CUDA_SUCCESS;
    }
    case OP_CTX_DESTROY: {
        NEED(len == 4);
        struct obj *o = obj_get(s, u32at(b, 0), K_CTX);
        if (!o || o->kind != K_CTX)
            return CUDA_ERROR_INVALID_CONTEXT;
        void *dead = o->p;
        pin_free(s); /* its copies done; the buffer may be the context's */
        r = CALL(cuCtxSetCurrent, NULL);
        r = CALL(cuCtxDestroy_v2, (CUcontext)dead);
        o->kind = K_FREE;
        for (size_t i = s->npend; i-- > 0;)
            if (s->pend[i].ctx == dead) { /* its event and buffer went with it */
                if (!s->pend[i].pinned)
                    free(s->pend[i].buf);
                s->pend[i] = s->pend[--s->npend];
            }
        for (int i = 0; i < PINNED_CACHE; i++)
            if (s->cache[i].ctx == dead)
                s->cache[i].p = NULL;
        s->cur = NULL;
        /* What lived in it went with it. */
        for (size_t i = 0; i < s->nranges;)
            if (s->ranges[i].ctx == dead)
                s->ranges[i] = s->ranges[--s->nranges];
            else
                i++;
        for (uint32_t i = 0; i < s->nobjs; i++)
            if (s->objs[i].kind != K_FREE && s->objs[i].kind != K_CTX && s->objs[i].kind != K_PRIMARY &&
                s->objs[i].ctx == dead)
                s->objs[i].kind = K_FREE;
        return r;
    }
    case OP_CTX_SYNC:
        return CALL(cuCtxSynchronize);
    case OP_MEM_ALLOC: {
        NEED(len == 8);
        CUdeviceptr p;
        if ((r = CALL(cuMemAlloc_v2, &p, u64at(b, 0))))
            return r;
        if (range_add(s, p, u64at(b, 0), 0) < 0) {
            CALL(cuMemFree_v2, p);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        memcpy(rep, &p, 8);
        *rlen = 8;
        return CUDA_SUCCESS;
    }
    case OP_MEM_FREE: {
        NEED(len == 8);
        uint64_t p = u64at(b, 0);
        if (range_del(s, p) < 0)
            return CUDA_ERROR_INVALID_VALUE;
        return CALL(cuMemFree_v2, p);
    }
    case OP_MEM_INFO: {
        size_t fr = 0, tot = 0;
        if ((r = CALL(cuMemGetInfo_v2, &fr, &tot)))
            return r;
        uint64_t v[2] = {fr, tot};
        memcpy(rep, v, 16);
        *rlen = 16;
        return CUDA_SUCCESS;
    }
    case OP_MEM_RANGE: {
        NEED(len == 8);
        uint64_t p = u64at(b, 0);
        for (size_t i = 0; i < s->nranges; i++)
            if (p >= s->ranges[i].base && p - s->ranges[i].base < s->ranges[i].size) {
                uint64_t v[2] = {s->ranges[i].base, s->ranges[i].size};
                memcpy(rep, v, 16);
                *rlen = 16;
                return CUDA_SUCCESS;
            }
        return CUDA_ERROR_NOT_FOUND;
    }
    case OP_MEMSET: {
        struct rw_memset m;
        NEED(len == sizeof m);
        memcpy(&m, b, sizeof m);
        NEED(m.elem == 1 || m.elem == 2 || m.elem == 4);
        NEED(m.count <= UINT64_MAX / m.elem && inside(s, m.dptr, m.count * m.elem));
        CUstream st = stream_of(s, m.stream, &ok);
        if (!ok)
            return CUDA_ERROR_INVALID_HANDLE;
        r = m.elem == 1   ? CALL(cuMemsetD8Async, m.dptr, (unsigned char)m.value, m.count, st)
            : m.elem == 2 ? CALL(cuMemsetD16Async, m.dptr, (unsigned short)m.value, m.count, st)
                          : CALL(cuMemsetD32Async, m.dptr, m.value, m.count, st);
        if (r == CUDA_SUCCESS && !m.async)
            r = CALL(cuStreamSynchronize, st);
        return r;
    }
    case OP_HTOD:
    case OP_DTOH:
    case OP_DTOD: {
        struct rw_copy c;
        NEED(len == sizeof c);
        memcpy(&c, b, sizeof c);
        CUstream st = stream_of(s, c.stream, &ok);
        if (!ok)
            return CUDA_ERROR_INVALID_HANDLE;
        if (h->op == OP_DTOD) {
            NEED(inside(s, c.dst, c.bytes) && inside(s, c.src, c.bytes));
            r = CALL(cuMemcpyDtoDAsync_v2, c.dst, c.src, c.bytes, st);
            if (r == CUDA_SUCCESS && !c.async)
                r = CALL(cuStreamSynchronize, st);
            return r;
        }
        NEED(c.bytes <= s->bufsize && mbox_fits(&s->mb, c.stage, c.bytes));
        uint32_t pages = (uint32_t)((c.bytes + RW_STAGE_DATA - 1) / RW_STAGE_DATA);
        int pinned;
        if (h->op == OP_HTOD) {
            NEED(inside(s, c.dst, c.bytes));
            unsigned char *buf = pin_buf(s, c.stage, pages, &pinned);
            unsigned char *at = pinned ? buf + (size_t)c.stage * RW_STAGE_DATA : buf;
            int e = mbox_get_at(&s->mb, c.stage, at, c.bytes, h->seq);
            if (e < 0)
                return staged_fail(s, e);
            /* Out of pinned memory the copy is asynchronous: its pages stay
             * busy until it is done (a synchronous copy completes first). */
            r = CALL(cuMemcpyHtoDAsync_v2, c.dst, at, c.bytes, st);
            if (r == CUDA_SUCCESS && !c.async)
                r = CALL(cuStreamSynchronize, st);
            else if (r == CUDA_SUCCESS && pinned)
                r = pin_busy(s, c.stage, pages, st);
            return r;
        }
        NEED(inside(s, c.src, c.bytes));
        unsigned char *buf = pin_buf(s, c.stage, pages, &pinned);
        unsigned char *at = pinned ? buf + (size_t)c.stage * RW_STAGE_DATA : buf;
        r = CALL(cuMemcpyDtoHAsync_v2, at, c.src, c.bytes, st);
        if (r == CUDA_SUCCESS)
            r = CALL(cuStreamSynchronize, st);
        if (r == CUDA_SUCCESS && mbox_put_at(&s->mb, c.stage, at, c.bytes, h->seq) < 0)
            return CUDA_ERROR_UNKNOWN;
        return r;
    }
    case OP_HTOD_INLINE: {
        struct rw_copy c;
        NEED(len >= sizeof c);
        memcpy(&c, b, sizeof c);
        NEED(c.bytes == len - sizeof c && inside(s, c.dst, c.bytes));
        CUstream st = stream_of(s, c.stream, &ok);
        if (!ok)
            return CUDA_ERROR_INVALID_HANDLE;
        /* From the request's (pageable) page: taken before the driver returns. */
        return CALL(cuMemcpyHtoDAsync_v2, c.dst, b + sizeof c, c.bytes, st);
    }
    case OP_DTOH_ASYNC: {
        struct rw_copy c;
        NEED(len == sizeof c);
        memcpy(&c, b, sizeof c);
        NEED(c.bytes > 0 && inside(s, c.src, c.bytes));
        CUstream st = stream_of(s, c.stream, &ok);
        if (!ok)
            return CUDA_ERROR_INVALID_HANDLE;
        size_t at;
        NEED(!pending_find(s, c.dst, &at));
        if (s->npend >= MAX_PENDING)
            return CUDA_ERROR_OUT_OF_MEMORY;
        if (s->npend == s->cappend) {
            size_t cap = s->cappend ? s->cappend * 2 : 16;
            struct pending *n = realloc(s->pend, cap * sizeof *n);
            if (!n)
                return CUDA_ERROR_OUT_OF_MEMORY;
            s->pend = n;
            s->cappend = cap;
        }
        struct pending p = {.id = c.dst, .bytes = c.bytes, .ctx = s->cur};
        if (!(p.buf = buffer_get(s, c.bytes, &p.cap, &p.pinned)))
            return CUDA_ERROR_OUT_OF_MEMORY;
        r = CALL(cuMemcpyDtoHAsync_v2, p.buf, c.src, c.bytes, st);
        if (r == CUDA_SUCCESS && (r = CALL(cuEventCreate, (CUevent *)&p.ev, 2 /* CU_EVENT_DISABLE_TIMING */)) == 0)
            r = CALL(cuEventRecord, (CUevent)p.ev, st);
        s->pend[s->npend++] = p;
        if (r)
            pending_drop(s, s->npend - 1);
        return r;
    }
    case OP_DTOH_FETCH: {
        struct rw_fetch f;
        NEED(len == sizeof f);
        memcpy(&f, b, sizeof f);
        size_t at;
        struct pending *p = pending_find(s, f.id, &at);
        if (!p)
            return CUDA_ERROR_NOT_FOUND;
        NEED(f.off <= p->bytes && f.len <= p->bytes - f.off && f.len <= s->bufsize && mbox_fits(&s->mb, f.stage, f.len));
        if (!p->done) {
            CUcontext pc = (CUcontext)p->ctx;
            CALL(cuCtxSetCurrent, pc);
            r = f.wait ? CALL(cuEventSynchronize, (CUevent)p->ev) : CALL(cuEventQuery, (CUevent)p->ev);
            CALL(cuCtxSetCurrent, (CUcontext)s->cur);
            if (r == CUDA_ERROR_NOT_READY)
                return r;
            if (r) {
                pending_drop(s, at);
                return r;
            }
            p->done = 1;
        }
        if (mbox_put_at(&s->mb, f.stage, p->buf + f.off, f.len, h->seq) < 0)
            return CUDA_ERROR_UNKNOWN;
        if (f.off + f.len == p->bytes)
            pending_drop(s, at);
        return CUDA_SUCCESS;
    }
    case OP_MODULE_LOAD:
    case OP_LIBRARY_LOAD: {
        NEED(len == 8);
        unsigned char *img;
        if (h->flags & RW_IMAGE) {
            NEED(s->img && s->imgsize == u64at(b, 0) && s->imgfill == s->imgsize);
            img = s->img;
            s->img = NULL;
            s->imgsize = s->imgfill = 0;
        } else if ((r = staged(s, h->seq, u64at(b, 0), &img))) {
            return r;
        }
        void *handle = NULL;
        if (h->op == OP_MODULE_LOAD)
            r = CALL(cuModuleLoadData, (CUmodule *)&handle, img);
        else
            r = CALL(cuLibraryLoadData, (CUlibrary *)&handle, img, NULL, NULL, 0, NULL, NULL, 0);
        free(img);
        if (r)
            return r;
        uint32_t id = obj_add(s, h->op == OP_MODULE_LOAD ? K_MODULE : K_LIBRARY, handle);
        if (!id) {
            if (h->op == OP_MODULE_LOAD)
                CALL(cuModuleUnload, handle);
            else
                CALL(cuLibraryUnload, handle);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        memcpy(rep, &id, 4);
        *rlen = 4;
        return CUDA_SUCCESS;
    }
    case OP_IMAGE_PUT: {
        /* Parts in order: offset 0 starts an image, each part continues it. */
        NEED(len == 24);
        uint64_t off = u64at(b, 0), n = u64at(b, 8), total = u64at(b, 16);
        NEED(total > 0 && total <= RW_IMAGE_MAX && n > 0 && n <= s->bufsize && off <= total && n <= total - off);
        if (off == 0) {
            free(s->img);
            s->img = malloc(total + 1);
            if (!s->img)
                return CUDA_ERROR_OUT_OF_MEMORY;
            s->img[total] = 0;
            s->imgsize = total;
            s->imgfill = 0;
        }
        NEED(s->img && total == s->imgsize && off == s->imgfill);
        int e = mbox_get(&s->mb, s->img + off, n, h->seq);
        if (e < 0)
            return staged_fail(s, e);
        s->imgfill += n;
        return CUDA_SUCCESS;
    }
    case OP_MODULE_UNLOAD:
    case OP_LIBRARY_UNLOAD: {
        NEED(len == 4);
        int kind = h->op == OP_MODULE_UNLOAD ? K_MODULE : K_LIBRARY;
        struct obj *o = obj_get(s, u32at(b, 0), kind);
        if (!o)
            return CUDA_ERROR_INVALID_HANDLE;
        r = kind == K_MODULE ? CALL(cuModuleUnload, o->p) : CALL(cuLibraryUnload, o->p);
        uint32_t id = u32at(b, 0);
        o->kind = K_FREE;
        for (uint32_t i = 0; i < s->nobjs; i++) /* its functions and kernels go with it */
            if ((s->objs[i].kind == K_FUNC || s->objs[i].kind == K_KERNEL) && s->objs[i].owner == id)
                s->objs[i].kind = K_FREE;
        return r;
    }
    case OP_MODULE_FUNCTION:
    case OP_LIBRARY_KERNEL: {
        NEED(len > 4);
        const char *name = name_at(b, len, 4);
        NEED(name);
        int mk = h->op == OP_MODULE_FUNCTION ? K_MODULE : K_LIBRARY;
        struct obj *o = obj_get(s, u32at(b, 0), mk);
        if (!o)
            return CUDA_ERROR_INVALID_HANDLE;
        void *fn = NULL;
        if (mk == K_MODULE)
            r = CALL(cuModuleGetFunction, (CUfunction *)&fn, (CUmodule)o->p, name);
        else
            r = CALL(cuLibraryGetKernel, (CUkernel *)&fn, (CUlibrary)o->p, name);
        if (r)
            return r;
        uint32_t id = obj_add(s, mk == K_MODULE ? K_FUNC : K_KERNEL, fn);
        if (!id)
            return CUDA_ERROR_OUT_OF_MEMORY;
        s->objs[id - 1].owner = u32at(b, 0);
        struct rw_func *f = (void *)rep;
        f->id = id;
        *rlen = params_of(mk == K_MODULE ? fn : NULL, mk == K_MODULE ? NULL : fn, f, RW_BODY_MAX);
        return CUDA_SUCCESS;
    }
    case OP_KERNEL_FUNCTION: {
        NEED(len == 4);
        struct obj *o = obj_get(s, u32at(b, 0), K_KERNEL);
        if (!o)
            return CUDA_ERROR_INVALID_HANDLE;
        CUfunction fn;
        if ((r = CALL(cuKernelGetFunction, &fn, (CUkernel)o->p)))
            return r;
        uint32_t id = obj_add(s, K_FUNC, fn);
        if (!id)
            return CUDA_ERROR_OUT_OF_MEMORY;
        s->objs[id - 1].owner = o->owner;
        struct rw_func *f = (void *)rep;
        f->id = id;
        *rlen = params_of(fn, NULL, f, RW_BODY_MAX);
        return CUDA_SUCCESS;
    }
    case OP_MODULE_GLOBAL:
    case OP_LIBRARY_GLOBAL: {
        NEED(len > 4);
        const char *name = name_at(b, len, 4);
        NEED(name);
        struct obj *o = obj_get(s, u32at(b, 0), h->op == OP_MODULE_GLOBAL ? K_MODULE : K_LIBRARY);
        if (!o)
            return CUDA_ERROR_INVALID_HANDLE;
        CUdeviceptr p;
        size_t n;
        if (h->op == OP_MODULE_GLOBAL)
            r = CALL(cuModuleGetGlobal_v2, &p, &n, (CUmodule)o->p, name);
        else
            r = CALL(cuLibraryGetGlobal, &p, &n, (CUlibrary)o->p, name);
        if (r)
            return r;
        if (!inside(s, p, n))
            range_add(s, p, n, 1);
        uint64_t v[2] = {p, n};
        memcpy(rep, v, 16);
        *rlen = 16;
        return CUDA_SUCCESS;
    }
    case OP_FUNC_ATTR:
    case OP_FUNC_SET_ATTR:
    case OP_OCCUPANCY: {
        NEED(len == (h->op == OP_OCCUPANCY ? 16u : h->op == OP_FUNC_ATTR ? 8u : 12u));
        uint32_t id = u32at(b, 0);
        struct obj *o = obj_get(s, id, K_FUNC);
        if (!o)
            o = obj_get(s, id, K_KERNEL);
        if (!o)
            return CUDA_ERROR_INVALID_HANDLE;
        int v = 0;
        CUdevice dev = 0;
        if (o->kind == K_KERNEL && h->op != OP_OCCUPANCY) {
            /* A library's kernel has its attributes per device: the current context's. */
            if ((r = CALL(cuCtxGetDevice, &dev)))
                return r;
            if (h->op == OP_FUNC_SET_ATTR)
                return CALL(cuKernelSetAttribute, (int)u32at(b, 4), (int)u32at(b, 8), (CUkernel)o->p, dev);
            r = CALL(cuKernelGetAttribute, &v, (int)u32at(b, 4), (CUkernel)o->p, dev);
        } else if (h->op == OP_FUNC_ATTR)
            r = CALL(cuFuncGetAttribute, &v, (int)u32at(b, 4), (CUfunction)o->p);
        else if (h->op == OP_FUNC_SET_ATTR) {
            r = CALL(cuFuncSetAttribute, (CUfunction)o->p, (int)u32at(b, 4), (int)u32at(b, 8));
            if (r && verbose)
                logf_("cuFuncSetAttribute(%p, %d, %d) in context %u: %d", o->p, (int)u32at(b, 4), (int)u32at(b, 8),
                      h->ctx, r);
            return r;
        }
        else
            r = CALL(cuOccupancyMaxActiveBlocksPerMultiprocessor, &v, (CUfunction)o->p, (int)u32at(b, 4),
                     u64at(b, 8));
        if (r)
            return r;
        memcpy(rep, &v, 4);
        *rlen = 4;
        return CUDA_SUCCESS;
    }
    case OP_LAUNCH: {
        struct rw_launch l;
        NEED(len >= sizeof l);
        memcpy(&l, b, sizeof l);
        NEED(l.nattrs <= RW_MAX_ATTRS && len >= sizeof l + l.nattrs * sizeof(struct rw_attr));
        size_t head = sizeof l + l.nattrs * sizeof(struct rw_attr);
        struct obj *o = func_of(s, l.func);
        if (!o)
            return CUDA_ERROR_INVALID_HANDLE;
        CUlaunchConfig cfg;
        CUlaunchAttribute at[RW_MAX_ATTRS];
        if ((r = launch_config(s, &l, b + sizeof l, &cfg, at)))
            return r;
        const unsigned char *args;
        if (h->flags & RW_STAGED) {
            NEED(len == head && l.argbytes <= s->bufsize);
            int e = mbox_get(&s->mb, s->buf, l.argbytes, h->seq);
            if (e < 0)
                return staged_fail(s, e);
            args = s->buf;
        } else {
            NEED(len == head + l.argbytes);
            args = b + head;
        }
        /* The parameters' layout comes from the driver, not the client
         * (asked once a function). */
        if (!o->lay) {
            struct laycache *lc = malloc(sizeof *lc);
            if (!lc)
                return CUDA_ERROR_OUT_OF_MEMORY;
            params_of(o->kind == K_FUNC ? o->p : NULL, o->kind == K_KERNEL ? o->p : NULL, &lc->f, sizeof *lc);
            o->lay = lc;
        }
        struct laycache *lay = o->lay;
        NEED(lay->f.argbytes <= l.argbytes);
        void *argv[RW_MAX_PARAMS];
        for (uint32_t i = 0; i < lay->f.nparams; i++)
            argv[i] = (void *)(args + lay->p[i].offset);
        if (cfg.numAttrs)
            return CALL(cuLaunchKernelEx, &cfg, (CUfunction)o->p, argv, NULL);
        return CALL(cuLaunchKernel, (CUfunction)o->p, l.grid[0], l.grid[1], l.grid[2], l.block[0], l.block[1],
                    l.block[2], l.shmem, cfg.hStream, argv, NULL);
    }
    case OP_CLUSTER_OCC: {
        struct rw_launch l;
        NEED(len >= sizeof l);
        memcpy(&l, b, sizeof l);
        NEED(l.nattrs <= RW_MAX_ATTRS && len == sizeof l + l.nattrs * sizeof(struct rw_attr) && l.reserved <= 1);
        struct obj *o = func_of(s, l.func);
        if (!o)
            return CUDA_ERROR_INVALID_HANDLE;
        CUfunction fn = (CUfunction)o->p;
        if (o->kind == K_KERNEL && (r = CALL(cuKernelGetFunction, &fn, (CUkernel)o->p)))
            return r;
        CUlaunchConfig cfg;
        CUlaunchAttribute at[RW_MAX_ATTRS];
        if ((r = launch_config(s, &l, b + sizeof l, &cfg, at)))
            return r;
        int v = 0;
        r = l.reserved == 0 ? CALL(cuOccupancyMaxActiveClusters, &v, fn, &cfg)
                            : CALL(cuOccupancyMaxPotentialClusterSize, &v, fn, &cfg);
        if (r)
            return r;
        memcpy(rep, &v, 4);
        *rlen = 4;
        return CUDA_SUCCESS;
    }
    case OP_DYN_SMEM: {
        NEED(len == 12);
        struct obj *o = func_of(s, u32at(b, 0));
        if (!o)
            return CUDA_ERROR_INVALID_HANDLE;
        CUfunction fn = (CUfunction)o->p;
        if (o->kind == K_KERNEL && (r = CALL(cuKernelGetFunction, &fn, (CUkernel)o->p)))
            return r;
        size_t n = 0;
        if ((r = CALL(cuOccupancyAvailableDynamicSMemPerBlock, &n, fn, (int)u32at(b, 4), (int)u32at(b, 8))))
            return r;
        uint64_t v = n;
        memcpy(rep, &v, 8);
        *rlen = 8;
        return CUDA_SUCCESS;
    }
    case OP_CTX_LIMIT: {
        /* In the request's context (a primary context is shared by the
         * launcher's sessions, and so are its limits, as in one process). */
        NEED(len == 16 && u32at(b, 0) <= 1);
        if (!s->cur)
            return CUDA_ERROR_INVALID_CONTEXT;
        if (u32at(b, 0))
            return CALL(cuCtxSetLimit, (int)u32at(b, 4), (size_t)u64at(b, 8));
        size_t v = 0;
        if ((r = CALL(cuCtxGetLimit, &v, (int)u32at(b, 4))))
            return r;
        uint64_t w = v;
        memcpy(rep, &w, 8);
        *rlen = 8;
        return CUDA_SUCCESS;
    }
    case OP_DEV_RESOURCE: {
        /* CUdevResource: 144 bytes; its last 8 (the next resource of a
         * list) are a pointer here and are not sent. */
        NEED(len == 12 && u32at(b, 0) <= 1);
        _Alignas(8) unsigned char res[144];
        memset(res, 0, sizeof res);
        if (u32at(b, 0) == 0) {
            CUdevice dev;
            if ((r = CALL(cuDeviceGet, &dev, (int)u32at(b, 4))))
                return r;
            r = CALL(cuDeviceGetDevResource, dev, res, (int)u32at(b, 8));
        } else {
            struct obj *c = obj_get(s, u32at(b, 4), K_CTX);
            if (!c)
                return CUDA_ERROR_INVALID_CONTEXT;
            r = CALL(cuCtxGetDevResource, (CUcontext)c->p, res, (int)u32at(b, 8));
        }
        if (r)
            return r;
        memset(res + 136, 0, 8);
        memcpy(rep, res, sizeof res);
        *rlen = sizeof res;
        return CUDA_SUCCESS;
    }
    case OP_TENSOR_MAP: {
        struct rw_tmap t;
        NEED(len == sizeof t);
        memcpy(&t, b, sizeof t);
        _Alignas(64) CUtensorMap map;
        if ((r = tensor_map(&t, &map)))
            return r;
        memcpy(rep, &map, sizeof map);
        *rlen = sizeof map;
        return CUDA_SUCCESS;
    }
    case OP_STREAM_CREATE: {
        NEED(len == 8);
        CUstream st;
        if ((r = CALL(cuStreamCreateWithPriority, &st, u32at(b, 0), (int)u32at(b, 4))))
            return r;
        uint32_t id = obj_add(s, K_STREAM, st);
        if (!id) {
            CALL(cuStreamDestroy_v2, st);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        memcpy(rep, &id, 4);
        *rlen = 4;
        return CUDA_SUCCESS;
    }
    case OP_EVENT_CREATE: {
        NEED(len == 4);
        CUevent e;
        if ((r = CALL(cuEventCreate, &e, u32at(b, 0))))
            return r;
        uint32_t id = obj_add(s, K_EVENT, e);
        if (!id) {
            CALL(cuEventDestroy_v2, e);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        memcpy(rep, &id, 4);
        *rlen = 4;
        return CUDA_SUCCESS;
    }
    case OP_STREAM_DESTROY:
    case OP_EVENT_DESTROY: {
        NEED(len == 4);
        int kind = h->op == OP_STREAM_DESTROY ? K_STREAM : K_EVENT;
        struct obj *o = obj_get(s, u32at(b, 0), kind);
        if (!o)
            return CUDA_ERROR_INVALID_HANDLE;
        r = kind == K_STREAM ? CALL(cuStreamDestroy_v2, o->p) : CALL(cuEventDestroy_v2, o->p);
        o->kind = K_FREE;
        return r;
    }
    case OP_STREAM_SYNC:
    case OP_STREAM_QUERY: {
        NEED(len == 4);
        CUstream st = stream_of(s, u32at(b, 0), &ok);
        if (!ok)
            return CUDA_ERROR_INVALID_HANDLE;
        return h->op == OP_STREAM_SYNC ? CALL(cuStreamSynchronize, st) : CALL(cuStreamQuery, st);
    }
    case OP_STREAM_WAIT_EVENT: {
        NEED(len == 12);
        CUstream st = stream_of(s, u32at(b, 0), &ok);
        struct obj *e = obj_get(s, u32at(b, 4), K_EVENT);
        if (!ok || !e)
            return CUDA_ERROR_INVALID_HANDLE;
        return CALL(cuStreamWaitEvent, st, (CUevent)e->p, u32at(b, 8));
    }
    case OP_EVENT_RECORD: {
        NEED(len == 8);
        struct obj *e = obj_get(s, u32at(b, 0), K_EVENT);
        CUstream st = stream_of(s, u32at(b, 4), &ok);
        if (!ok || !e)
            return CUDA_ERROR_INVALID_HANDLE;
        return CALL(cuEventRecord, (CUevent)e->p, st);
    }
    case OP_EVENT_SYNC:
    case OP_EVENT_QUERY: {
        NEED(len == 4);
        struct obj *e = obj_get(s, u32at(b, 0), K_EVENT);
        if (!e)
            return CUDA_ERROR_INVALID_HANDLE;
        return h->op == OP_EVENT_SYNC ? CALL(cuEventSynchronize, e->p) : CALL(cuEventQuery, e->p);
    }
    case OP_EVENT_ELAPSED: {
        NEED(len == 8);
        struct obj *a = obj_get(s, u32at(b, 0), K_EVENT), *z = obj_get(s, u32at(b, 4), K_EVENT);
        if (!a || !z)
            return CUDA_ERROR_INVALID_HANDLE;
        float ms = 0;
        if ((r = CALL(cuEventElapsedTime, &ms, a->p, z->p)))
            return r;
        memcpy(rep, &ms, 4);
        *rlen = 4;
        return CUDA_SUCCESS;
    }
    case OP_ADVISE: {
        struct rw_advise a;
        NEED(len == sizeof a);
        memcpy(&a, b, sizeof a);
        NEED(inside(s, a.dptr, a.bytes));
        CUstream st = stream_of(s, a.stream, &ok);
        if (!ok)
            return CUDA_ERROR_INVALID_HANDLE;
        return a.kind == 0 ? CALL(cuMemPrefetchAsync, a.dptr, a.bytes, a.device, st)
                           : CALL(cuMemAdvise, a.dptr, a.bytes, a.value, a.device);
    }
    default:
        return CUDA_ERROR_NOT_SUPPORTED;
    }
}

/* batch runs the records of an OP_BATCH request in order. Its status is
 * the first error a record met (the records after it still run, as the
 * calls after a failed one do); its body the index of that record and how
 * many ran. */
static CUresult batch(struct session *s, const struct rw_hdr *h, const unsigned char *b, uint32_t len,
                      unsigned char *rep, uint32_t *rlen) {
    static _Thread_local unsigned char scratch[RW_PAGE];
    CUresult first = CUDA_SUCCESS;
    uint32_t failed = 0, i = 0;
    size_t off = 0;
    while (off < len) {
        struct rw_rec rc;
        CUresult r;
        if (len - off < sizeof rc) {
            r = CUDA_ERROR_INVALID_VALUE;
            off = len;
        } else {
            memcpy(&rc, b + off, sizeof rc);
            if (rc.len > len - off - sizeof rc) {
                r = CUDA_ERROR_INVALID_VALUE;
                off = len;
            } else {
                switch (rc.op) {
                case OP_LAUNCH: case OP_MEMSET: case OP_HTOD_INLINE: case OP_DTOD: case OP_DTOH_ASYNC:
                case OP_EVENT_RECORD: case OP_STREAM_WAIT_EVENT: {
                    struct rw_hdr rh = *h;
                    rh.op = rc.op;
                    rh.ctx = rc.ctx;
                    rh.flags = 0;
                    rh.len = rc.len;
                    uint32_t rl = 0;
                    r = dispatch(s, &rh, b + off + sizeof rc, rc.len, scratch, &rl);
                    break;
                }
                default:
                    r = CUDA_ERROR_NOT_SUPPORTED;
                }
                off += RW_REC_SPAN(rc.len);
            }
        }
        if (r != CUDA_SUCCESS && first == CUDA_SUCCESS) {
            first = r;
            failed = i;
            if (verbose)
                logf_("slot %u: batch record %u: %d", s->slot, i, r);
        }
        i++;
    }
    s->batches++;
    s->batched += i;
    uint32_t out[2] = {failed, i};
    memcpy(rep, out, sizeof out);
    *rlen = sizeof out;
    return first;
}

/* ---- slots ---- */
static __thread dpu_t *SD; /* this slot thread's connection */

static dpu_gva_t slot_field(uint32_t slot, size_t off) {
    return dpu_gva_add(DOOR, offsetof(struct rw_door, slot) + slot * sizeof(struct rw_door_slot) + off);
}

static int session_alive(void *arg) {
    struct session *s = arg;
    if (atomic_load(&stopping))
        return -ECANCELED;
    uint64_t now = mono_ms();
    if (now - s->hb_at < 500)
        return 0;
    uint64_t hb;
    if (dpu_load64(SD, slot_field(s->slot, offsetof(struct rw_door_slot, heartbeat)), &hb) < 0)
        return 0;
    if (hb != s->hb) {
        s->hb = hb;
        s->hb_at = now;
        return 0;
    }
    if (now - s->hb_at > DEAD_MS)
        return -EPIPE;
    return 0;
}

static void serve_session(struct session *s) {
    static _Thread_local unsigned char body[RW_PAGE], rep[RW_PAGE];
    for (;;) {
        struct rw_hdr h;
        int e = mbox_recv(&s->mb, 0, &h, body, sizeof body, -1, session_alive, s);
        if (e < 0) {
            logf_("slot %u: session ends: %s", s->slot, e == -EPIPE ? "heartbeat stopped" : dpu_strerror(e));
            return;
        }
        uint32_t rlen = 0;
        CUresult r;
        if (h.op == OP_HELLO) {
            struct rw_hello_reply hr = {.version = RW_VERSION, .staging_pages = STAGING};
            CALL(cuDriverGetVersion, &hr.driver_version);
            CALL(cuDeviceGetCount, &hr.device_count);
            struct rw_hello hi;
            if (h.len >= sizeof hi) {
                memcpy(&hi, body, sizeof hi);
                hi.name[sizeof hi.name - 1] = 0;
                s->mb.xfer = hi.xfer & RW_XFER_PAGED;
                logf_("slot %u: session of pid %u (%s)%s", s->slot, hi.pid, hi.name,
                      s->mb.xfer ? ", staging pages one at a time" : "");
            }
            memcpy(rep, &hr, sizeof hr);
            rlen = sizeof hr;
            r = CUDA_SUCCESS;
        } else if (h.op == OP_BYE) {
            r = CUDA_SUCCESS;
        } else if (h.op == OP_BATCH) {
            r = batch(s, &h, body, h.len, rep, &rlen);
        } else {
            r = dispatch(s, &h, body, h.len, rep, &rlen);
        }
        s->calls++;
        if (verbose)
            logf_("slot %u: op %u len %u -> %d", s->slot, h.op, h.len, r);
        struct rw_hdr out = {.seq = h.seq, .op = h.op, .status = r, .token = s->token};
        if ((e = mbox_send(&s->mb, &out, rep, rlen)) < 0) {
            logf_("slot %u: reply: %s", s->slot, dpu_strerror(e));
            return;
        }
        if (h.op == OP_BYE)
            return;
    }
}

struct slot_arg {
    uint32_t slot;
    dpu_gva_t inbox;
};

static void *slot_main(void *arg) {
    struct slot_arg a = *(struct slot_arg *)arg;
    free(arg);
    struct session s = {.slot = (int)a.slot};
    s.bufsize = (size_t)STAGING * RW_STAGE_DATA;
    s.buf = malloc(s.bufsize);
    if (!s.buf)
        return NULL;
    int e = dpu_open(SOCK, &SD);
    if (e < 0) {
        logf_("slot %u: connection: %s", a.slot, dpu_strerror(e));
        free(s.buf);
        return NULL;
    }
    while (!atomic_load(&stopping)) {
        uint64_t tok = 0;
        if (dpu_load64(SD, slot_field(a.slot, offsetof(struct rw_door_slot, token)), &tok) < 0 || tok == 0) {
            usleep(10000);
            continue;
        }
        /* Claimed: wait (bounded) for the client to publish its inbox. */
        uint64_t hi = 0, lo = 0, t0 = mono_ms();
        while (mono_ms() - t0 < 5000 && !atomic_load(&stopping)) {
            uint64_t cli[2] = {0, 0};
            if (dpu_load(SD, slot_field(a.slot, offsetof(struct rw_door_slot, cli_hi)), cli, sizeof cli) == 0)
                hi = cli[0], lo = cli[1];
            if (hi || lo)
                break;
            usleep(1000);
        }
        if (hi || lo) {
            s.token = tok;
            s.mb = (struct mbox){.d = SD, .own = a.inbox, .peer = {hi, lo}, .staging_pages = STAGING,
                                 .pool = POOL, .token = tok, .alive = session_alive, .alive_arg = &s};
            s.hb = 0;
            s.hb_at = mono_ms();
            s.calls = 0;
            s.batches = s.batched = 0;
            s.corrupt = 0;
            serve_session(&s);
            session_release(&s);
            logf_("slot %u: released after %llu calls (%llu asynchronous operations in %llu batches, %llu corrupt "
                  "chunks refused)",
                  a.slot, (unsigned long long)s.calls, (unsigned long long)s.batched, (unsigned long long)s.batches,
                  (unsigned long long)s.corrupt);
        } else {
            logf_("slot %u: claimed but no inbox published; freeing the slot", a.slot);
        }
        uint64_t zero[2] = {0, 0};
        dpu_store(SD, slot_field(a.slot, offsetof(struct rw_door_slot, cli_hi)), zero, sizeof zero);
        uint64_t old;
        dpu_cas64(SD, slot_field(a.slot, offsetof(struct rw_door_slot, token)), tok, 0, &old);
    }
    free(s.buf);
    free(s.objs);
    free(s.ranges);
    free(s.pend);
    dpu_close(SD);
    return NULL;
}

/* on_fault prints where the launcher crashed (a driver or a request it
 * did not expect) before dying with the signal's default action. */
static void on_fault(int sig) {
    void *bt[64];
    int n = backtrace(bt, 64);
    static const char msg[] = "dpu-cuda-launcher: fatal signal; backtrace:\n";
    ssize_t w = write(2, msg, sizeof msg - 1);
    (void)w;
    backtrace_symbols_fd(bt, n, 2);
    signal(sig, SIG_DFL);
    raise(sig);
}

static void on_signal(int sig) {
    (void)sig;
    atomic_store(&stopping, 1);
}

#ifndef LAUNCHER_NO_MAIN
int main(int argc, char **argv) {
    const char *sock = NULL, *door_file = NULL, *driver = "libcuda.so.1";
    unsigned mode = 0600;
    int threads = 8;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-s") && v)
            sock = v, i++;
        else if (!strcmp(a, "-door-file") && v)
            door_file = v, i++;
        else if (!strcmp(a, "-slots") && v)
            SLOTS = (uint32_t)strtoul(v, NULL, 10), i++;
        else if (!strcmp(a, "-staging") && v)
            STAGING = (uint32_t)strtoul(v, NULL, 10), i++;
        else if (!strcmp(a, "-threads") && v)
            threads = atoi(v), i++;
        else if (!strcmp(a, "-mode") && v)
            mode = (unsigned)strtoul(v, NULL, 8), i++;
        else if (!strcmp(a, "-driver") && v)
            driver = v, i++;
        else if (!strcmp(a, "-dead-ms") && v)
            DEAD_MS = (uint32_t)strtoul(v, NULL, 10), i++;
        else if (!strcmp(a, "-v"))
            verbose = 1;
        else {
            fprintf(stderr, "usage: dpu-cuda-launcher [-s SOCK] [-door-file PATH] [-slots N] [-staging PAGES] "
                            "[-threads N] [-mode OCTAL] [-driver LIB] [-dead-ms MS] [-v]\n");
            return 2;
        }
    }
    if (SLOTS < 1 || SLOTS > DOOR_SLOTS || STAGING < 1 || STAGING > 65536 || mode > 0777) {
        fprintf(stderr, "dpu-cuda-launcher: -slots 1..%u, -staging 1..65536, -mode <= 0777\n", DOOR_SLOTS);
        return 2;
    }
    if (load_driver(driver) < 0)
        return 1;
    CUresult r = drv.cuInit(0);
    if (r) {
        logf_("cuInit: %d", r);
        return 1;
    }
    int e = dpu_open(sock, &D);
    if (e < 0) {
        logf_("dpu_open %s: %s", sock ? sock : "(default)", dpu_strerror(e));
        return 1;
    }
    SOCK = sock;
    POOL = pool_new(sock, threads);
    struct rw_door door = {.magic = RW_MAGIC, .version = RW_VERSION, .nslots = SLOTS};
    dpu_gva_t inbox[DOOR_SLOTS];
    if ((e = dpu_alloc_mode(D, RW_PAGE, mode, &DOOR)) < 0) {
        logf_("alloc door: %s", dpu_strerror(e));
        return 1;
    }
    uint32_t made = 0;
    for (; made < SLOTS; made++) {
        if ((e = dpu_alloc_mode(D, (size_t)(1 + STAGING) * RW_PAGE, mode, &inbox[made])) < 0) {
            logf_("alloc inbox: %s", dpu_strerror(e));
            break;
        }
        door.slot[made].srv_hi = inbox[made].hi;
        door.slot[made].srv_lo = inbox[made].lo;
        door.slot[made].staging_pages = STAGING;
    }
    int status = 0;
    if (made == SLOTS && (e = dpu_store(D, DOOR, &door, sizeof door)) < 0) {
        logf_("write door: %s", dpu_strerror(e));
        made = 0;
    }
    if (made == SLOTS) {
        char text[DPU_GVA_TEXT_LEN + 1];
        dpu_gva_format(DOOR, text, sizeof text);
        printf("%s\n", text);
        fflush(stdout);
        if (door_file) {
            char tmp[4096];
            snprintf(tmp, sizeof tmp, "%s.tmp", door_file);
            FILE *f = fopen(tmp, "w");
            if (f) {
                fprintf(f, "%s\n", text);
                fclose(f);
                rename(tmp, door_file);
            }
        }
        logf_("serving %u slots at %s (machine %u, staging %u pages)", SLOTS, text, dpu_machine(D), STAGING);
        struct sigaction sa = {.sa_handler = on_signal};
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGTERM, &sa, NULL);
        signal(SIGSEGV, on_fault);
        signal(SIGBUS, on_fault);
        signal(SIGABRT, on_fault);
        pthread_t th[DOOR_SLOTS];
        uint32_t started = 0;
        for (; started < SLOTS; started++) {
            struct slot_arg *sa2 = malloc(sizeof *sa2);
            if (!sa2)
                break;
            *sa2 = (struct slot_arg){started, inbox[started]};
            if (pthread_create(&th[started], NULL, slot_main, sa2) != 0) {
                free(sa2);
                break;
            }
        }
        uint64_t beat = 0;
        while (!atomic_load(&stopping)) {
            dpu_store64(D, dpu_gva_add(DOOR, offsetof(struct rw_door, launcher_heartbeat)), ++beat);
            for (int i = 0; i < 10 && !atomic_load(&stopping); i++)
                usleep(HEARTBEAT_MS * 100);
        }
        uint64_t t0 = mono_ms();
        for (uint32_t i = 0; i < started; i++)
            pthread_join(th[i], NULL);
        if (verbose)
            logf_("slots stopped in %llu ms", (unsigned long long)(mono_ms() - t0));
    } else {
        status = 1;
    }
    uint64_t t1 = mono_ms();
    for (uint32_t i = 0; i < made; i++)
        dpu_free(D, inbox[i]);
    dpu_free(D, DOOR);
    if (verbose)
        logf_("pages freed in %llu ms", (unsigned long long)(mono_ms() - t1));
    pool_free(POOL);
    dpu_close(D);
    return status;
}
#endif /* LAUNCHER_NO_MAIN */
