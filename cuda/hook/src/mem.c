/*
 * mem.c — device memory: every allocation entry point is checked against
 * the limit the agent gives this process on the device (pre-hook: refuse
 * with CUDA_ERROR_OUT_OF_MEMORY past it) and reported once the driver
 * succeeded (post-hook); every matching free reports the release.
 * cuMemGetInfo and cuDeviceTotalMem report the limit, not the card.
 *
 * What is charged is what the driver takes, not what was asked for. The
 * driver backs device memory in chunks of its allocation granularity
 * (cuMemGetAllocationGranularity; 2 MiB on current GPUs): a large
 * allocation is rounded up to whole chunks, and small ones are packed into
 * shared chunks. So device pointers are charged by the chunks their
 * address range touches: a chunk wholly inside the allocation is its
 * own; a chunk it shares is charged to whichever allocation occupies it
 * first and released with the last one that leaves it (a refcount per
 * chunk). Admission reserves an estimate (rounded to 512 bytes up to
 * SMALL_MAX, to the granularity beyond), so the charge can pass the limit
 * by less than one chunk, never by more. Arrays and handles have no
 * address: arrays are charged as estimated, cuMemCreate
 * handles as asked (the driver requires whole chunks there); managed
 * memory and legacy 32-bit pointers as estimated.
 *
 * Contexts cost device memory before any allocation (the driver's own
 * state, ~0.5–1 GB on current GPUs). The hook measures it once per context,
 * as NVML's device use before and after the driver creates it (a primary
 * context at its first retain), and charges it until the context is
 * destroyed (the primary context: released as often as retained).
 * DPU_CUDA_CONTEXT_BYTES overrides the measurement.
 *
 * Admission reserves the bytes under the device's mutex before the driver
 * call, so threads allocating at once cannot overshoot the limit together;
 * the others under the same limit (a cgroup's processes) count as the
 * agent last reported them. The sizes of arrays and pitched allocations
 * are estimated before the call (format × channels × extent; pitch rounded
 * up to 512 bytes) and recorded as the driver made them after it. Managed,
 * async and pool allocations are charged to the calling thread's current
 * device; cuMemFreeAsync releases when it is enqueued.
 *
 * Pinned host memory (cuMemHostAlloc, cuMemAllocHost, cuMemHostRegister)
 * is charged to the process's host account (the agent's HostDevice) by the
 * pages it pins, against the host limit when one is set (dpuctl gpu set
 * ... device host mem SIZE, or gpu-device = host SIZE 0); a limit of every
 * device does not cover it. cuMemFreeHost and cuMemHostUnregister release
 * it. Contexts made with cuCtxCreate_v3 and _v4 are charged as _v2's.
 *
 * True usage. The driver takes device memory the allocation entry points
 * never see: module images and lazily loaded kernels (cuBLAS, cuDNN),
 * local memory grown for a kernel's stack, the context's own growth. So
 * the charge is reconciled with the driver's own figure for the process
 * (NVML's running-process list, the usedGpuMemory of this pid): whatever
 * the driver holds beyond the hook's charges is charged too, as the
 * device's "untracked" part (reported to the agent like an allocation, so
 * dpuctl gpu show and the limit see it), and given back when the driver's
 * figure falls. Under a limit the figure is read again at every admission
 * that would bring the charge within an eighth of the limit, and at least
 * every DPU_CUDA_USAGE_MS (100 ms) otherwise; the background thread reads
 * it at every refresh. So the allocation that would take the driver's
 * figure past the limit is the one refused. A reading is used only when no
 * allocation or free of the process's was between the driver and the
 * charge while it was taken (it is otherwise dropped, the last one kept):
 * the hook never guesses which side of the reading such a call fell on.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "hook.h"

#define SMALL_MAX (1ull << 20) /* up to this, the driver packs allocations into shared chunks */
#define SMALL_ALIGN 512ull
#define DEFAULT_GRANULE (2ull << 20)

static uint64_t round_up(uint64_t v, uint64_t to) {
    uint64_t r;
    return __builtin_add_overflow(v, to - 1, &r) ? UINT64_MAX : r / to * to;
}

/* granule_of is device d's allocation granularity. */
static uint64_t granule_of(struct device *d) {
    uint64_t g = atomic_load_explicit(&d->granule, memory_order_relaxed);
    if (g)
        return g;
    g = env_u64("DPU_CUDA_GRANULE", 0);
    if (!g && drv.cuMemGetAllocationGranularity) {
        CUmemAllocationProp prop;
        memset(&prop, 0, sizeof prop);
        prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        prop.location.id = d->ordinal;
        size_t q = 0;
        if (drv.cuMemGetAllocationGranularity(&q, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) == CUDA_SUCCESS)
            g = q;
    }
    if (!g || (g & (g - 1)))
        g = DEFAULT_GRANULE;
    atomic_store(&d->granule, g);
    LOGF(LOG_DEBUG, "device %d: allocation granularity %llu", d->ordinal, (unsigned long long)g);
    return g;
}

/* estimate is what an allocation of bytes is admitted as. */
static uint64_t estimate(struct device *d, uint64_t bytes) {
    if (!d || !bytes)
        return bytes;
    return bytes <= SMALL_MAX ? round_up(bytes, SMALL_ALIGN) : round_up(bytes, granule_of(d));
}

/* ---- chunks shared by device pointers ---- */

static pthread_mutex_t chunk_mu = PTHREAD_MUTEX_INITIALIZER;

/* chunk_ref moves chunk c of device dev by delta (+1 or -1) and reports
 * whether that occupied it (first in) or freed it (last out). */
static int chunk_ref(int dev, uint64_t c, int delta) {
    uint64_t key = ((uint64_t)dev << 56) ^ c;
    struct allocation a;
    pthread_mutex_lock(&chunk_mu);
    uint64_t n = table_take(ALLOC_CHUNK, key, &a) ? a.bytes : 0;
    int edge;
    if (delta > 0) {
        edge = n == 0;
        n++;
    } else {
        edge = n == 1;
        n = n ? n - 1 : 0;
    }
    if (n) {
        a = (struct allocation){.key = key, .kind = ALLOC_CHUNK, .device = dev, .bytes = n};
        if (table_put(&a) != 0)
            LOGF(LOG_ERROR, "no memory to track chunk %llu of device %d", (unsigned long long)c, dev);
    }
    pthread_mutex_unlock(&chunk_mu);
    return edge;
}

/* chunks is what [addr, addr+size) costs in chunks of device d as it is
 * mapped (delta +1) or what its release frees (delta -1). */
static uint64_t chunks(struct device *d, uint64_t addr, uint64_t size, int delta) {
    if (!size)
        return 0;
    uint64_t g = granule_of(d), end;
    if (__builtin_add_overflow(addr, size, &end))
        end = UINT64_MAX;
    uint64_t first = addr / g, last = (end - 1) / g, bytes = 0;
    for (int i = 0; i < 2; i++) {
        uint64_t c = i ? last : first;
        if (i && last == first)
            break;
        int whole = c * g >= addr && (end - c * g) >= g;
        if (whole || chunk_ref(d->ordinal, c, delta))
            bytes += g;
    }
    if (last > first + 1)
        bytes += (last - first - 1) * g;
    return bytes;
}

/* ---- true usage ---- */

void usage_reconcile(struct device *d) {
    if (!d || d == host_memory())
        return;
    pthread_mutex_lock(&d->mu);
    uint64_t gen = d->gen;
    int quiet = d->reserved == 0;
    pthread_mutex_unlock(&d->mu);
    uint64_t drv_bytes = 0;
    if (!quiet || atomic_load(&d->freeing) || hook_nvml_process_used(d, &drv_bytes) != 0)
        return;
    atomic_store(&d->usage_at, mono_ns());
    pthread_mutex_lock(&d->mu);
    if (d->gen != gen || d->reserved || atomic_load(&d->freeing)) {
        pthread_mutex_unlock(&d->mu);
        return;
    }
    uint64_t tracked = d->used - d->untracked, want = drv_bytes > tracked ? drv_bytes - tracked : 0,
             was = d->untracked;
    d->untracked = want;
    d->used = tracked + want;
    if (want != was)
        d->gen++;
    pthread_mutex_unlock(&d->mu);
    if (want == was)
        return;
    LOGF(LOG_DEBUG, "device %d: the driver holds %llu bytes for the process, %llu beyond the hook's charges",
         d->ordinal, (unsigned long long)drv_bytes, (unsigned long long)want);
    agent_report(d, want > was ? UPDATE_ALLOC : UPDATE_FREE, want > was ? want - was : was - want);
}

static uint64_t usage_interval_ns(void) {
    static _Atomic uint64_t ns; /* +1, so that 0 means not read yet */
    uint64_t v = atomic_load_explicit(&ns, memory_order_relaxed);
    if (!v) {
        v = env_u64("DPU_CUDA_USAGE_MS", 100) * 1000000ull + 1;
        atomic_store(&ns, v);
    }
    return v - 1;
}

/* usage_before_admit reads the driver's figure when admitting bytes under
 * the limit could depend on it: near the limit, or when the last reading is
 * stale. */
static void usage_before_admit(struct device *d, uint64_t bytes) {
    uint64_t limit = atomic_load(&d->limit);
    if (!limit || d == host_memory())
        return;
    pthread_mutex_lock(&d->mu);
    uint64_t in_use = d->used + d->reserved + atomic_load(&d->others);
    pthread_mutex_unlock(&d->mu);
    uint64_t after, at = atomic_load(&d->usage_at);
    int near = __builtin_add_overflow(in_use, bytes, &after) || after > limit - limit / 8;
    if (near || !at || mono_ns() - at >= usage_interval_ns())
        usage_reconcile(d);
}

static CUresult admit(struct device *d, uint64_t bytes, const char *what) {
    if (!d)
        return CUDA_SUCCESS; /* no current context: the driver will refuse */
    atomic_store(&d->seen, 1);
    agent_refresh(d); /* the freshest limit; while disconnected, the last one */
    usage_before_admit(d, bytes);
    pthread_mutex_lock(&d->mu);
    uint64_t limit = atomic_load(&d->limit), in_use = d->used + d->reserved + atomic_load(&d->others), after;
    int over = limit && (__builtin_add_overflow(in_use, bytes, &after) || after > limit);
    if (!over)
        d->reserved += bytes;
    pthread_mutex_unlock(&d->mu);
    if (over) {
        LOGF(LOG_INFO, "%s of %llu bytes on device %d refused: limit %llu, in use %llu", what,
             (unsigned long long)bytes, d->ordinal, (unsigned long long)limit, (unsigned long long)in_use);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return CUDA_SUCCESS;
}

static void cancel(struct device *d, uint64_t reserved) {
    if (!d)
        return;
    pthread_mutex_lock(&d->mu);
    d->reserved -= reserved;
    pthread_mutex_unlock(&d->mu);
}

/* commit charges an allocation the driver made: bytes, or with size (a
 * device pointer at key) the chunks it touches. */
static void commit(struct device *d, uint64_t reserved, uint32_t kind, uint64_t key, uint64_t bytes, uint64_t size) {
    if (!d)
        return;
    if (size)
        bytes = chunks(d, key, size, +1);
    struct allocation a = {.key = key, .kind = kind, .device = d->ordinal, .bytes = bytes, .size = size};
    int tracked = table_put(&a) == 0;
    pthread_mutex_lock(&d->mu);
    d->reserved -= reserved;
    if (tracked) {
        d->used += bytes;
        d->gen++;
    }
    pthread_mutex_unlock(&d->mu);
    if (!tracked) {
        LOGF(LOG_ERROR, "no memory to track an allocation of %llu bytes; it is not accounted",
             (unsigned long long)bytes);
        return;
    }
    agent_report(d, UPDATE_ALLOC, bytes);
}

static void released(const struct allocation *a) {
    struct device *d = a->device == DPUCUDA_HOST_DEVICE ? host_memory() : device_peek(a->device);
    if (!d)
        return;
    uint64_t bytes = a->size ? chunks(d, a->key, a->size, -1) : a->bytes;
    pthread_mutex_lock(&d->mu);
    uint64_t tracked = d->used - d->untracked;
    bytes = bytes <= tracked ? bytes : tracked;
    d->used -= bytes;
    d->gen++;
    pthread_mutex_unlock(&d->mu);
    agent_report(d, UPDATE_FREE, bytes);
}

/* ---- allocations ---- */

/* ALLOC_BODY admits est (as estimate() rounds it: est_), calls the driver
 * and charges what it made: actual bytes, or with size the chunks of the
 * device pointer at key. */
#define ALLOC_BODY(real_call, dev, est, kind, key, actual, size, what)                             \
    do {                                                                                           \
        struct device *d_ = (dev);                                                                 \
        uint64_t est_ = estimate(d_, est);                                                         \
        CUresult r_ = admit(d_, est_, what);                                                       \
        if (r_ != CUDA_SUCCESS)                                                                    \
            return r_;                                                                             \
        r_ = real_call;                                                                            \
        if (r_ == CUDA_SUCCESS)                                                                    \
            commit(d_, est_, kind, key, actual, size);                                             \
        else                                                                                       \
            cancel(d_, est_);                                                                      \
        return r_;                                                                                 \
    } while (0)

#define NEED_REAL(name)                                                                            \
    __typeof__(&name) real = REAL(name);                                                           \
    if (!real)                                                                                     \
    return CUDA_ERROR_NOT_INITIALIZED

DPUCUDA_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize) {
    NEED_REAL(cuMemAlloc_v2);
    ALLOC_BODY(real(dptr, bytesize), current_device(), bytesize, ALLOC_PTR, *dptr, 0, bytesize, "cuMemAlloc");
}

DPUCUDA_EXPORT CUresult cuMemAlloc(CUdeviceptr_v1 *dptr, unsigned int bytesize) {
    NEED_REAL(cuMemAlloc);
    ALLOC_BODY(real(dptr, bytesize), current_device(), bytesize, ALLOC_PTR, *dptr, est_, 0, "cuMemAlloc");
}

DPUCUDA_EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags) {
    NEED_REAL(cuMemAllocManaged);
    ALLOC_BODY(real(dptr, bytesize, flags), current_device(), bytesize, ALLOC_PTR, *dptr, est_, 0,
               "cuMemAllocManaged");
}

static uint64_t pitched(uint64_t width, uint64_t height) {
    uint64_t pitch = (width + 511) & ~(uint64_t)511, bytes;
    return __builtin_mul_overflow(pitch, height, &bytes) ? UINT64_MAX : bytes;
}

DPUCUDA_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height,
                                           unsigned int elem) {
    NEED_REAL(cuMemAllocPitch_v2);
    ALLOC_BODY(real(dptr, pitch, width, height, elem), current_device(), pitched(width, height), ALLOC_PTR,
               *dptr, 0, (uint64_t)*pitch * height, "cuMemAllocPitch");
}

DPUCUDA_EXPORT CUresult cuMemAllocPitch(CUdeviceptr_v1 *dptr, unsigned int *pitch, unsigned int width,
                                        unsigned int height, unsigned int elem) {
    NEED_REAL(cuMemAllocPitch);
    ALLOC_BODY(real(dptr, pitch, width, height, elem), current_device(), pitched(width, height), ALLOC_PTR,
               *dptr, est_, 0, "cuMemAllocPitch");
}

DPUCUDA_EXPORT CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream stream) {
    NEED_REAL(cuMemAllocAsync);
    ALLOC_BODY(real(dptr, bytesize, stream), current_device(), bytesize, ALLOC_PTR, *dptr, 0, bytesize,
               "cuMemAllocAsync");
}

DPUCUDA_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream stream) {
    NEED_REAL(cuMemAllocAsync_ptsz);
    ALLOC_BODY(real(dptr, bytesize, stream), current_device(), bytesize, ALLOC_PTR, *dptr, 0, bytesize,
               "cuMemAllocAsync");
}

DPUCUDA_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                                CUstream stream) {
    NEED_REAL(cuMemAllocFromPoolAsync);
    ALLOC_BODY(real(dptr, bytesize, pool, stream), current_device(), bytesize, ALLOC_PTR, *dptr, 0, bytesize,
               "cuMemAllocFromPoolAsync");
}

DPUCUDA_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                                     CUstream stream) {
    NEED_REAL(cuMemAllocFromPoolAsync_ptsz);
    ALLOC_BODY(real(dptr, bytesize, pool, stream), current_device(), bytesize, ALLOC_PTR, *dptr, 0, bytesize,
               "cuMemAllocFromPoolAsync");
}

DPUCUDA_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                                    const CUmemAllocationProp *prop, unsigned long long flags) {
    NEED_REAL(cuMemCreate);
    struct device *d = prop && prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE ? device_at(prop->location.id)
                                                                                : current_device();
    ALLOC_BODY(real(handle, size, prop, flags), d, size, ALLOC_HANDLE, *handle, size, 0, "cuMemCreate");
}

/* ---- arrays ---- */

static uint64_t format_bytes(CUarray_format f) {
    switch (f) {
    case CU_AD_FORMAT_UNSIGNED_INT8: case CU_AD_FORMAT_SIGNED_INT8: return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16: case CU_AD_FORMAT_SIGNED_INT16: case CU_AD_FORMAT_HALF: return 2;
    case CU_AD_FORMAT_UNSIGNED_INT32: case CU_AD_FORMAT_SIGNED_INT32: case CU_AD_FORMAT_FLOAT: return 4;
    }
    return 4; /* formats this hook does not know (packed, block-compressed): 4 bytes a channel */
}

/* array_bytes is the size of an array of the given extent (0 height or depth
 * means 1) with `levels` mipmap levels, each half the previous one. */
static uint64_t array_bytes(uint64_t w, uint64_t h, uint64_t dp, CUarray_format f, unsigned ch, unsigned levels) {
    uint64_t total = 0;
    h = h ? h : 1;
    dp = dp ? dp : 1;
    for (unsigned l = 0; l < levels; l++) {
        uint64_t b;
        if (__builtin_mul_overflow(w, h, &b) || __builtin_mul_overflow(b, dp, &b) ||
            __builtin_mul_overflow(b, format_bytes(f) * (ch ? ch : 1), &b) || __builtin_add_overflow(total, b, &total))
            return UINT64_MAX;
        w = w > 1 ? w / 2 : 1;
        h = h > 1 ? h / 2 : 1;
        dp = dp > 1 ? dp / 2 : 1;
    }
    return total;
}

DPUCUDA_EXPORT CUresult cuArrayCreate_v2(CUarray *arr, const CUDA_ARRAY_DESCRIPTOR *desc) {
    NEED_REAL(cuArrayCreate_v2);
    uint64_t b = desc ? array_bytes(desc->Width, desc->Height, 0, desc->Format, desc->NumChannels, 1) : 0;
    ALLOC_BODY(real(arr, desc), current_device(), b, ALLOC_ARRAY, (uint64_t)(uintptr_t)*arr, est_, 0, "cuArrayCreate");
}

DPUCUDA_EXPORT CUresult cuArrayCreate(CUarray *arr, const CUDA_ARRAY_DESCRIPTOR_v1 *desc) {
    NEED_REAL(cuArrayCreate);
    uint64_t b = desc ? array_bytes(desc->Width, desc->Height, 0, desc->Format, desc->NumChannels, 1) : 0;
    ALLOC_BODY(real(arr, desc), current_device(), b, ALLOC_ARRAY, (uint64_t)(uintptr_t)*arr, est_, 0, "cuArrayCreate");
}

DPUCUDA_EXPORT CUresult cuArray3DCreate_v2(CUarray *arr, const CUDA_ARRAY3D_DESCRIPTOR *desc) {
    NEED_REAL(cuArray3DCreate_v2);
    uint64_t b =
        desc ? array_bytes(desc->Width, desc->Height, desc->Depth, desc->Format, desc->NumChannels, 1) : 0;
    ALLOC_BODY(real(arr, desc), current_device(), b, ALLOC_ARRAY, (uint64_t)(uintptr_t)*arr, est_, 0,
               "cuArray3DCreate");
}

DPUCUDA_EXPORT CUresult cuArray3DCreate(CUarray *arr, const CUDA_ARRAY3D_DESCRIPTOR_v1 *desc) {
    NEED_REAL(cuArray3DCreate);
    uint64_t b =
        desc ? array_bytes(desc->Width, desc->Height, desc->Depth, desc->Format, desc->NumChannels, 1) : 0;
    ALLOC_BODY(real(arr, desc), current_device(), b, ALLOC_ARRAY, (uint64_t)(uintptr_t)*arr, est_, 0,
               "cuArray3DCreate");
}

DPUCUDA_EXPORT CUresult cuMipmappedArrayCreate(CUmipmappedArray *arr, const CUDA_ARRAY3D_DESCRIPTOR *desc,
                                               unsigned int levels) {
    NEED_REAL(cuMipmappedArrayCreate);
    uint64_t b =
        desc ? array_bytes(desc->Width, desc->Height, desc->Depth, desc->Format, desc->NumChannels, levels) : 0;
    ALLOC_BODY(real(arr, desc, levels), current_device(), b, ALLOC_MIPMAP, (uint64_t)(uintptr_t)*arr, est_, 0,
               "cuMipmappedArrayCreate");
}

/* ---- frees: the entry leaves the table before the driver call, so an
 * address the driver hands out again at once is not confused with it; a
 * failed free puts it back. ---- */

/* freeing_mark counts a free in the driver on a's device (delta +1, -1),
 * so that no reading of the driver's figure is taken meanwhile. */
static void freeing_mark(const struct allocation *a, int delta) {
    struct device *d = a->device == DPUCUDA_HOST_DEVICE ? NULL : device_peek(a->device);
    if (d)
        atomic_fetch_add(&d->freeing, delta);
}

#define FREE_BODY(real_call, kind, key)                                                            \
    do {                                                                                           \
        struct allocation a_;                                                                      \
        int had_ = table_take(kind, key, &a_);                                                     \
        if (had_)                                                                                  \
            freeing_mark(&a_, +1);                                                                 \
        CUresult r_ = real_call;                                                                   \
        if (had_) {                                                                                \
            if (r_ == CUDA_SUCCESS)                                                                \
                released(&a_);                                                                     \
            else                                                                                   \
                table_put(&a_);                                                                    \
            freeing_mark(&a_, -1);                                                                 \
        }                                                                                          \
        return r_;                                                                                 \
    } while (0)

DPUCUDA_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr) {
    NEED_REAL(cuMemFree_v2);
    FREE_BODY(real(dptr), ALLOC_PTR, dptr);
}

DPUCUDA_EXPORT CUresult cuMemFree(CUdeviceptr_v1 dptr) {
    NEED_REAL(cuMemFree);
    FREE_BODY(real(dptr), ALLOC_PTR, dptr);
}

DPUCUDA_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream stream) {
    NEED_REAL(cuMemFreeAsync);
    FREE_BODY(real(dptr, stream), ALLOC_PTR, dptr);
}

DPUCUDA_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream stream) {
    NEED_REAL(cuMemFreeAsync_ptsz);
    FREE_BODY(real(dptr, stream), ALLOC_PTR, dptr);
}

DPUCUDA_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
    NEED_REAL(cuMemRelease);
    FREE_BODY(real(handle), ALLOC_HANDLE, handle);
}

DPUCUDA_EXPORT CUresult cuArrayDestroy(CUarray arr) {
    NEED_REAL(cuArrayDestroy);
    FREE_BODY(real(arr), ALLOC_ARRAY, (uint64_t)(uintptr_t)arr);
}

DPUCUDA_EXPORT CUresult cuMipmappedArrayDestroy(CUmipmappedArray arr) {
    NEED_REAL(cuMipmappedArrayDestroy);
    FREE_BODY(real(arr), ALLOC_MIPMAP, (uint64_t)(uintptr_t)arr);
}

/* ---- what the program sees of the device's memory ---- */

/* virtualize clamps (free, total) of device d to its limit. */
static void virtualize(struct device *d, uint64_t *free_bytes, uint64_t *total) {
    if (!d)
        return;
    atomic_store(&d->seen, 1);
    agent_refresh(d);
    uint64_t limit = atomic_load(&d->limit);
    if (!limit)
        return;
    pthread_mutex_lock(&d->mu);
    uint64_t in_use = d->used + d->reserved;
    pthread_mutex_unlock(&d->mu);
    in_use += atomic_load(&d->others);
    uint64_t avail = limit > in_use ? limit - in_use : 0;
    if (*total > limit)
        *total = limit;
    if (free_bytes && *free_bytes > avail)
        *free_bytes = avail;
}

DPUCUDA_EXPORT CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total_bytes) {
    NEED_REAL(cuMemGetInfo_v2);
    CUresult r = real(free_bytes, total_bytes);
    if (r == CUDA_SUCCESS && free_bytes && total_bytes) {
        uint64_t f = *free_bytes, t = *total_bytes;
        virtualize(current_device(), &f, &t);
        *free_bytes = f;
        *total_bytes = t;
    }
    return r;
}

DPUCUDA_EXPORT CUresult cuMemGetInfo(unsigned int *free_bytes, unsigned int *total_bytes) {
    NEED_REAL(cuMemGetInfo);
    CUresult r = real(free_bytes, total_bytes);
    if (r == CUDA_SUCCESS && free_bytes && total_bytes) {
        uint64_t f = *free_bytes, t = *total_bytes;
        virtualize(current_device(), &f, &t);
        *free_bytes = (unsigned int)f;
        *total_bytes = (unsigned int)t;
    }
    return r;
}

DPUCUDA_EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev) {
    NEED_REAL(cuDeviceTotalMem_v2);
    CUresult r = real(bytes, dev);
    if (r == CUDA_SUCCESS && bytes) {
        uint64_t t = *bytes;
        virtualize(device_at(dev), NULL, &t);
        *bytes = t;
    }
    return r;
}

DPUCUDA_EXPORT CUresult cuDeviceTotalMem(unsigned int *bytes, CUdevice dev) {
    NEED_REAL(cuDeviceTotalMem);
    CUresult r = real(bytes, dev);
    if (r == CUDA_SUCCESS && bytes) {
        uint64_t t = *bytes;
        virtualize(device_at(dev), NULL, &t);
        *bytes = (unsigned int)t;
    }
    return r;
}

/* ---- contexts ---- */

#define PRIMARY_KEY(dev) ((1ull << 63) | (uint64_t)(dev))

/* context_before samples the device's use before a context is made. */
static int context_before(struct device *d, uint64_t *before) {
    return d && getenv("DPU_CUDA_CONTEXT_BYTES") == NULL && hook_nvml_used(d, before) == 0;
}

/* charge_context charges the memory a new context took on d. */
static void charge_context(struct device *d, uint64_t key, int measured, uint64_t before) {
    uint64_t bytes = env_u64("DPU_CUDA_CONTEXT_BYTES", 0), after;
    if (measured && hook_nvml_used(d, &after) == 0 && after > before)
        bytes = after - before;
    if (!bytes)
        return;
    atomic_store(&d->seen, 1);
    struct allocation a = {.key = key, .kind = ALLOC_CONTEXT, .device = d->ordinal, .bytes = bytes};
    if (table_put(&a) != 0)
        return;
    pthread_mutex_lock(&d->mu);
    d->used += bytes;
    d->gen++;
    pthread_mutex_unlock(&d->mu);
    LOGF(LOG_INFO, "device %d: a context took %llu bytes", d->ordinal, (unsigned long long)bytes);
    agent_report(d, UPDATE_ALLOC, bytes);
}

DPUCUDA_EXPORT CUresult cuCtxCreate_v2(CUcontext *ctx, unsigned int flags, CUdevice dev) {
    NEED_REAL(cuCtxCreate_v2);
    struct device *d = device_at(dev);
    uint64_t before = 0;
    int measured = context_before(d, &before);
    CUresult r = real(ctx, flags, dev);
    if (r == CUDA_SUCCESS && d && ctx)
        charge_context(d, (uint64_t)(uintptr_t)*ctx, measured, before);
    return r;
}

DPUCUDA_EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx) {
    NEED_REAL(cuCtxDestroy_v2);
    FREE_BODY(real(ctx), ALLOC_CONTEXT, (uint64_t)(uintptr_t)ctx);
}

DPUCUDA_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice dev) {
    NEED_REAL(cuDevicePrimaryCtxRetain);
    struct device *d = device_at(dev);
    uint64_t before = 0;
    int first = 0, measured = 0;
    if (d) {
        pthread_mutex_lock(&d->mu);
        first = d->primary_refs == 0;
        pthread_mutex_unlock(&d->mu);
        measured = first && context_before(d, &before);
    }
    CUresult r = real(ctx, dev);
    if (r == CUDA_SUCCESS && d) {
        pthread_mutex_lock(&d->mu);
        first = d->primary_refs++ == 0;
        pthread_mutex_unlock(&d->mu);
        if (first)
            charge_context(d, PRIMARY_KEY(dev), measured, before);
    }
    return r;
}

static void primary_released(CUdevice dev) {
    struct device *d = device_peek(dev);
    if (!d)
        return;
    pthread_mutex_lock(&d->mu);
    int last = d->primary_refs > 0 && --d->primary_refs == 0;
    pthread_mutex_unlock(&d->mu);
    struct allocation a;
    if (last && table_take(ALLOC_CONTEXT, PRIMARY_KEY(dev), &a))
        released(&a);
}

DPUCUDA_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
    NEED_REAL(cuDevicePrimaryCtxRelease_v2);
    CUresult r = real(dev);
    if (r == CUDA_SUCCESS)
        primary_released(dev);
    return r;
}

DPUCUDA_EXPORT CUresult cuDevicePrimaryCtxRelease(CUdevice dev) {
    NEED_REAL(cuDevicePrimaryCtxRelease);
    CUresult r = real(dev);
    if (r == CUDA_SUCCESS)
        primary_released(dev);
    return r;
}

DPUCUDA_EXPORT CUresult cuCtxCreate_v3(CUcontext *ctx, void *affinity, int n, unsigned int flags, CUdevice dev) {
    NEED_REAL(cuCtxCreate_v3);
    struct device *d = device_at(dev);
    uint64_t before = 0;
    int measured = context_before(d, &before);
    CUresult r = real(ctx, affinity, n, flags, dev);
    if (r == CUDA_SUCCESS && d && ctx)
        charge_context(d, (uint64_t)(uintptr_t)*ctx, measured, before);
    return r;
}

DPUCUDA_EXPORT CUresult cuCtxCreate_v4(CUcontext *ctx, void *params, unsigned int flags, CUdevice dev) {
    NEED_REAL(cuCtxCreate_v4);
    struct device *d = device_at(dev);
    uint64_t before = 0;
    int measured = context_before(d, &before);
    CUresult r = real(ctx, params, flags, dev);
    if (r == CUDA_SUCCESS && d && ctx)
        charge_context(d, (uint64_t)(uintptr_t)*ctx, measured, before);
    return r;
}

/* ---- pinned host memory: charged by the pages it pins ---- */

#define HOST_PAGE 4096ull

/* pinned is what pinning [p, p+n) takes: the pages the range touches. */
static uint64_t pinned(uint64_t p, uint64_t n) {
    if (!n)
        return 0;
    uint64_t end;
    if (__builtin_add_overflow(p, n, &end))
        return UINT64_MAX;
    return round_up(end, HOST_PAGE) - p / HOST_PAGE * HOST_PAGE;
}

/* HOST_BODY admits bytes on the host account, calls the driver and charges
 * the pages of the memory at key. */
#define HOST_BODY(real_call, bytes, key, what)                                                     \
    do {                                                                                           \
        struct device *h_ = host_memory();                                                         \
        uint64_t b_ = (bytes);                                                                     \
        CUresult r_ = admit(h_, b_, what);                                                         \
        if (r_ != CUDA_SUCCESS)                                                                    \
            return r_;                                                                             \
        r_ = real_call;                                                                            \
        if (r_ == CUDA_SUCCESS)                                                                    \
            commit(h_, b_, ALLOC_HOST, key, b_, 0);                                                \
        else                                                                                       \
            cancel(h_, b_);                                                                        \
        return r_;                                                                                 \
    } while (0)

DPUCUDA_EXPORT CUresult cuMemAllocHost_v2(void **p, size_t bytesize) {
    NEED_REAL(cuMemAllocHost_v2);
    HOST_BODY(real(p, bytesize), pinned(0, bytesize), (uint64_t)(uintptr_t)*p, "cuMemAllocHost");
}

DPUCUDA_EXPORT CUresult cuMemAllocHost(void **p, unsigned int bytesize) {
    NEED_REAL(cuMemAllocHost);
    HOST_BODY(real(p, bytesize), pinned(0, bytesize), (uint64_t)(uintptr_t)*p, "cuMemAllocHost");
}

DPUCUDA_EXPORT CUresult cuMemHostAlloc(void **p, size_t bytesize, unsigned int flags) {
    NEED_REAL(cuMemHostAlloc);
    HOST_BODY(real(p, bytesize, flags), pinned(0, bytesize), (uint64_t)(uintptr_t)*p, "cuMemHostAlloc");
}

DPUCUDA_EXPORT CUresult cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int flags) {
    NEED_REAL(cuMemHostRegister_v2);
    HOST_BODY(real(p, bytesize, flags), pinned((uint64_t)(uintptr_t)p, bytesize), (uint64_t)(uintptr_t)p,
              "cuMemHostRegister");
}

DPUCUDA_EXPORT CUresult cuMemHostRegister(void *p, size_t bytesize, unsigned int flags) {
    NEED_REAL(cuMemHostRegister);
    HOST_BODY(real(p, bytesize, flags), pinned((uint64_t)(uintptr_t)p, bytesize), (uint64_t)(uintptr_t)p,
              "cuMemHostRegister");
}

DPUCUDA_EXPORT CUresult cuMemFreeHost(void *p) {
    NEED_REAL(cuMemFreeHost);
    FREE_BODY(real(p), ALLOC_HOST, (uint64_t)(uintptr_t)p);
}

DPUCUDA_EXPORT CUresult cuMemHostUnregister(void *p) {
    NEED_REAL(cuMemHostUnregister);
    FREE_BODY(real(p), ALLOC_HOST, (uint64_t)(uintptr_t)p);
}
