/*
 * fakecuda.c — a small stand-in for the NVIDIA driver library (libcuda.so.1)
 * for testing libdpucuda on machines without a GPU.
 *
 * It implements the driver entry points the hook intercepts or calls, over
 * host memory and the host clock:
 *
 *   - devices: FAKECUDA_DEVICES of them (default 2), each with
 *     FAKECUDA_MEM bytes (default 16 GiB; suffixes K, M, G) and a fixed
 *     UUID (fa ce 00 … 00 ordinal);
 *   - memory: device pointers live in anonymous mappings reserved without
 *     backing (MAP_NORESERVE), so large limits cost nothing until touched,
 *     laid out as the real driver lays them out: in chunks of the
 *     allocation granularity (FAKECUDA_GRANULE, default 2 MiB), a large
 *     allocation (over 1 MiB) rounded up to whole chunks of its own, small
 *     ones packed at 512-byte alignment into shared chunks. The device's
 *     use ("physical", what cuMemGetInfo and the fake NVML report) is its
 *     chunks, plus FAKECUDA_CTX_MEM (default 0) per live context; arrays,
 *     and cuMemCreate handles are counted as asked but not backed;
 *   - graphs: stream capture records the kernels launched on a capturing
 *     stream; cuGraphLaunch runs them in order on the device timeline;
 *   - kernels: a function named "sleep_us:N" runs for N microseconds,
 *     any other name for FAKECUDA_KERNEL_US (default 0). Each device has one
 *     timeline: a launch starts when the previous work ends, and events
 *     complete when the timeline reaches them, so event timing and
 *     synchronisation behave like a busy GPU;
 *   - cuGetProcAddress(_v2) resolves from its own table by name, version and
 *     per-thread-stream flag, as the real driver does.
 *
 * Set FAKECUDA_TRACE=1 to log every call on stderr. At exit, with
 * FAKECUDA_STATS=path, it appends "launches N kernel_ns T mem_peak B" per
 * device to path.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "../src/cuda_abi.h"

#define EXPORT __attribute__((visibility("default")))
#define MAX_DEVICES 16

struct device {
    uint64_t total;
    uint64_t used;
    uint64_t peak;
    uint64_t busy_until; /* ns, CLOCK_MONOTONIC: when queued work ends */
    uint64_t kernel_ns;
    atomic_ulong launches;
};

struct CUctx_st { int dev; };
struct CUfunc_st { uint64_t ns; };
struct CUmod_st { int dev; uint64_t mem; };
struct CUevent_st { int dev; int recorded; uint64_t at; unsigned flags; };
struct CUstream_st { int dev; int capturing; struct CUgraph_st *graph; };
struct CUgraph_st { int n; struct CUfunc_st *fns[256]; };
struct CUgraphExec_st { struct CUgraph_st g; };

/* A chunk of device memory in which small allocations are packed. */
#define SLOT 512u
struct chunk {
    int dev;
    uint64_t base;      /* aligned to the granule */
    void *map;          /* the mapping it lies in, and its length */
    size_t maplen;
    uint32_t live;      /* allocations in it */
    unsigned char *used; /* one byte a 512-byte slot */
    struct chunk *next;
};
struct CUmemPoolHandle_st { int dev; };

/* An allocation the fake knows: device pointer, array or handle. */
struct block {
    uint64_t key;
    int kind;
    int dev;
    uint64_t bytes;
    void *map; /* backing of device pointers (large ones) */
    size_t maplen;
    uint64_t phys;          /* what it adds to the device's use */
    struct chunk *chunk;    /* small ones: the chunk and the slots they hold */
    uint32_t slot, nslots;
    struct block *next;
};
enum { B_PTR = 1, B_ARRAY, B_MIPMAP, B_HANDLE };

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct device devs[MAX_DEVICES];
static int ndevs;
static int initialized;
static pid_t owner; /* the process that initialised the driver (a forked child's copy is not its) */
static uint64_t default_kernel_ns;
static int tracing;
static struct block *blocks;
static uint64_t next_id = 0x1000;
static __thread struct CUctx_st *current;
static struct CUctx_st primary[MAX_DEVICES];
static int primary_refs[MAX_DEVICES];
static struct chunk *chunks;
static uint64_t granule = 2u << 20, ctx_mem;

static void trace(const char *fmt, ...) {
    if (!tracing)
        return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "fakecuda: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void sleep_until(uint64_t t) {
    for (;;) {
        uint64_t n = now_ns();
        if (n >= t)
            return;
        uint64_t d = t - n;
        struct timespec ts = {(time_t)(d / 1000000000ull), (long)(d % 1000000000ull)};
        nanosleep(&ts, NULL);
    }
}

static uint64_t parse_size(const char *s, uint64_t def) {
    if (!s || !*s)
        return def;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    switch (*end) {
    case 'K': case 'k': v <<= 10; break;
    case 'M': case 'm': v <<= 20; break;
    case 'G': case 'g': v <<= 30; break;
    case 'T': case 't': v <<= 40; break;
    }
    return v;
}

static void write_stats(void) {
    const char *path = getenv("FAKECUDA_STATS");
    if (!path || !initialized)
        return;
    FILE *f = fopen(path, "a");
    if (!f)
        return;
    for (int i = 0; i < ndevs; i++)
        fprintf(f, "device %d launches %lu kernel_ns %llu mem_peak %llu mem_used %llu\n", i,
                atomic_load(&devs[i].launches), (unsigned long long)devs[i].kernel_ns,
                (unsigned long long)devs[i].peak, (unsigned long long)devs[i].used);
    fclose(f);
}

EXPORT CUresult cuInit(unsigned int flags) {
    (void)flags;
    pthread_mutex_lock(&mu);
    if (!initialized) {
        tracing = getenv("FAKECUDA_TRACE") && *getenv("FAKECUDA_TRACE") == '1';
        ndevs = (int)parse_size(getenv("FAKECUDA_DEVICES"), 2);
        if (ndevs < 1 || ndevs > MAX_DEVICES)
            ndevs = 2;
        uint64_t mem = parse_size(getenv("FAKECUDA_MEM"), 16ull << 30);
        for (int i = 0; i < ndevs; i++) {
            devs[i].total = mem;
            primary[i].dev = i;
        }
        default_kernel_ns = parse_size(getenv("FAKECUDA_KERNEL_US"), 0) * 1000;
        granule = parse_size(getenv("FAKECUDA_GRANULE"), 2u << 20);
        if (granule < SLOT || (granule & (granule - 1)))
            granule = 2u << 20;
        ctx_mem = parse_size(getenv("FAKECUDA_CTX_MEM"), 0);
        owner = getpid();
        initialized = 1;
        atexit(write_stats);
    }
    pthread_mutex_unlock(&mu);
    trace("cuInit");
    return CUDA_SUCCESS;
}

#define NEED_INIT()                                                                                \
    do {                                                                                           \
        if (!initialized)                                                                          \
            return CUDA_ERROR_NOT_INITIALIZED;                                                     \
    } while (0)

#define NEED_CTX()                                                                                 \
    do {                                                                                           \
        NEED_INIT();                                                                               \
        if (!current)                                                                              \
            return CUDA_ERROR_INVALID_CONTEXT;                                                     \
    } while (0)

EXPORT CUresult cuDriverGetVersion(int *v) {
    if (!v)
        return CUDA_ERROR_INVALID_VALUE;
    *v = 12040;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetCount(int *n) {
    NEED_INIT();
    *n = ndevs;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGet(CUdevice *d, int ordinal) {
    NEED_INIT();
    if (ordinal < 0 || ordinal >= ndevs)
        return CUDA_ERROR_INVALID_DEVICE;
    *d = ordinal;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice d) {
    NEED_INIT();
    if (d < 0 || d >= ndevs || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    snprintf(name, (size_t)len, "Fake GPU %d", d);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetUuid(CUuuid *u, CUdevice d) {
    NEED_INIT();
    if (!u || d < 0 || d >= ndevs)
        return CUDA_ERROR_INVALID_VALUE;
    memset(u->bytes, 0, sizeof u->bytes);
    u->bytes[0] = (char)0xfa;
    u->bytes[1] = (char)0xce;
    u->bytes[15] = (char)d;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetUuid_v2(CUuuid *u, CUdevice d) { return cuDeviceGetUuid(u, d); }

EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice d) {
    NEED_INIT();
    if (!bytes || d < 0 || d >= ndevs)
        return CUDA_ERROR_INVALID_VALUE;
    *bytes = devs[d].total;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceTotalMem(unsigned int *bytes, CUdevice d) {
    size_t b;
    CUresult r = cuDeviceTotalMem_v2(&b, d);
    if (r == CUDA_SUCCESS)
        *bytes = b > 0xffffffffu ? 0xffffffffu : (unsigned int)b;
    return r;
}

static CUresult take(int dev, uint64_t bytes);

/* Contexts: one per cuCtxCreate, plus a primary context per device. */
EXPORT CUresult cuCtxCreate_v2(CUcontext *c, unsigned int flags, CUdevice d) {
    (void)flags;
    NEED_INIT();
    if (!c || d < 0 || d >= ndevs)
        return CUDA_ERROR_INVALID_VALUE;
    struct CUctx_st *x = calloc(1, sizeof *x);
    if (!x)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&mu);
    CUresult r = take(d, ctx_mem);
    pthread_mutex_unlock(&mu);
    if (r != CUDA_SUCCESS) {
        free(x);
        return r;
    }
    x->dev = d;
    current = x;
    *c = x;
    trace("cuCtxCreate device %d", d);
    return CUDA_SUCCESS;
}

/* The later forms: execution affinity and creation parameters are not
 * modelled; without them they are cuCtxCreate_v2. */
EXPORT CUresult cuCtxCreate_v3(CUcontext *c, void *affinity, int n, unsigned int flags, CUdevice d) {
    if (affinity || n)
        return CUDA_ERROR_NOT_SUPPORTED;
    return cuCtxCreate_v2(c, flags, d);
}
EXPORT CUresult cuCtxCreate_v4(CUcontext *c, void *params, unsigned int flags, CUdevice d) {
    if (params)
        return CUDA_ERROR_NOT_SUPPORTED;
    return cuCtxCreate_v2(c, flags, d);
}

/* Pinned host memory: page-aligned host memory; registration is noted and
 * refused twice for the same address, as the driver does. */
#define MAX_REGISTERED 64
static void *registered[MAX_REGISTERED];
EXPORT CUresult cuMemHostAlloc(void **p, size_t bytes, unsigned int flags) {
    (void)flags;
    NEED_INIT();
    if (!p || !bytes)
        return CUDA_ERROR_INVALID_VALUE;
    if (posix_memalign(p, 4096, bytes) != 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    trace("cuMemHostAlloc %zu", bytes);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuMemAllocHost_v2(void **p, size_t bytes) { return cuMemHostAlloc(p, bytes, 0); }
EXPORT CUresult cuMemAllocHost(void **p, unsigned int bytes) { return cuMemHostAlloc(p, bytes, 0); }
EXPORT CUresult cuMemFreeHost(void *p) {
    NEED_INIT();
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    free(p);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuMemHostRegister_v2(void *p, size_t bytes, unsigned int flags) {
    (void)flags;
    NEED_INIT();
    if (!p || !bytes)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&mu);
    int free_slot = -1;
    for (int i = 0; i < MAX_REGISTERED; i++) {
        if (registered[i] == p) {
            pthread_mutex_unlock(&mu);
            return 712; /* CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED */
        }
        if (!registered[i] && free_slot < 0)
            free_slot = i;
    }
    if (free_slot >= 0)
        registered[free_slot] = p;
    pthread_mutex_unlock(&mu);
    return free_slot >= 0 ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}
EXPORT CUresult cuMemHostRegister(void *p, size_t bytes, unsigned int flags) {
    return cuMemHostRegister_v2(p, bytes, flags);
}
EXPORT CUresult cuMemHostUnregister(void *p) {
    NEED_INIT();
    pthread_mutex_lock(&mu);
    for (int i = 0; i < MAX_REGISTERED; i++)
        if (p && registered[i] == p) {
            registered[i] = NULL;
            pthread_mutex_unlock(&mu);
            return CUDA_SUCCESS;
        }
    pthread_mutex_unlock(&mu);
    return 713; /* CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED */
}

EXPORT CUresult cuCtxDestroy_v2(CUcontext c) {
    NEED_INIT();
    if (!c)
        return CUDA_ERROR_INVALID_VALUE;
    if (current == c)
        current = NULL;
    if (c < primary || c >= primary + MAX_DEVICES) {
        pthread_mutex_lock(&mu);
        devs[c->dev].used -= ctx_mem;
        pthread_mutex_unlock(&mu);
        free(c);
    }
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d) {
    NEED_INIT();
    if (!c || d < 0 || d >= ndevs)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&mu);
    CUresult r = primary_refs[d] ? CUDA_SUCCESS : take(d, ctx_mem);
    if (r == CUDA_SUCCESS)
        primary_refs[d]++;
    pthread_mutex_unlock(&mu);
    if (r == CUDA_SUCCESS)
        *c = &primary[d];
    return r;
}

EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d) {
    NEED_INIT();
    if (d < 0 || d >= ndevs)
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&mu);
    CUresult r = primary_refs[d] ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
    if (r == CUDA_SUCCESS && --primary_refs[d] == 0)
        devs[d].used -= ctx_mem;
    pthread_mutex_unlock(&mu);
    return r;
}
EXPORT CUresult cuDevicePrimaryCtxRelease(CUdevice d) { return cuDevicePrimaryCtxRelease_v2(d); }

EXPORT CUresult cuCtxSetCurrent(CUcontext c) {
    NEED_INIT();
    current = c;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxGetCurrent(CUcontext *c) {
    NEED_INIT();
    *c = current;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxGetDevice(CUdevice *d) {
    NEED_CTX();
    *d = current->dev;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxSynchronize(void) {
    NEED_CTX();
    pthread_mutex_lock(&mu);
    uint64_t t = devs[current->dev].busy_until;
    pthread_mutex_unlock(&mu);
    sleep_until(t);
    return CUDA_SUCCESS;
}

/* Memory. */
static CUresult take(int dev, uint64_t bytes) {
    if (devs[dev].used + bytes > devs[dev].total || devs[dev].used + bytes < bytes)
        return CUDA_ERROR_OUT_OF_MEMORY;
    devs[dev].used += bytes;
    if (devs[dev].used > devs[dev].peak)
        devs[dev].peak = devs[dev].used;
    return CUDA_SUCCESS;
}

/* allocate records a block of kind on the current device; with map, the
 * key is the address of a fresh mapping. */
/* map_aligned maps len bytes aligned to the granule: the aligned start, and
 * the mapping to unmap. */
static uint64_t map_aligned(uint64_t len, void **map, size_t *maplen) {
    size_t n = len + granule;
    void *m = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED)
        return 0;
    *map = m;
    *maplen = n;
    return ((uint64_t)(uintptr_t)m + granule - 1) & ~(granule - 1);
}

/* place lays a device pointer of bytes out as the real driver does (under
 * mu): small ones packed into a chunk, large ones in whole chunks. */
static CUresult place(struct block *b, int dev, uint64_t bytes) {
    if (bytes > (1u << 20)) {
        uint64_t len = (bytes + granule - 1) / granule * granule;
        CUresult r = take(dev, len);
        if (r != CUDA_SUCCESS)
            return r;
        b->key = map_aligned(len, &b->map, &b->maplen);
        if (!b->key) {
            devs[dev].used -= len;
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        b->phys = len;
        return CUDA_SUCCESS;
    }
    uint32_t per = (uint32_t)(granule / SLOT), n = (uint32_t)((bytes + SLOT - 1) / SLOT);
    for (struct chunk *c = chunks; c; c = c->next) {
        if (c->dev != dev)
            continue;
        for (uint32_t i = 0, run = 0; i < per; i++) {
            run = c->used[i] ? 0 : run + 1;
            if (run == n) {
                uint32_t first = i + 1 - n;
                memset(c->used + first, 1, n);
                c->live++;
                b->chunk = c, b->slot = first, b->nslots = n;
                b->key = c->base + (uint64_t)first * SLOT;
                return CUDA_SUCCESS;
            }
        }
    }
    CUresult r = take(dev, granule);
    if (r != CUDA_SUCCESS)
        return r;
    struct chunk *c = calloc(1, sizeof *c);
    unsigned char *u = calloc(per, 1);
    uint64_t base = c && u ? map_aligned(granule, &c->map, &c->maplen) : 0;
    if (!base) {
        devs[dev].used -= granule;
        free(c);
        free(u);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    c->dev = dev, c->base = base, c->used = u, c->live = 1;
    memset(u, 1, n);
    c->next = chunks;
    chunks = c;
    b->chunk = c, b->slot = 0, b->nslots = n;
    b->key = base;
    return CUDA_SUCCESS;
}

/* unplace releases what place took (under mu). */
static void unplace(struct block *b) {
    if (b->map) {
        devs[b->dev].used -= b->phys;
        munmap(b->map, b->maplen);
        return;
    }
    struct chunk *c = b->chunk;
    memset(c->used + b->slot, 0, b->nslots);
    if (--c->live)
        return;
    for (struct chunk **p = &chunks; *p; p = &(*p)->next)
        if (*p == c) {
            *p = c->next;
            break;
        }
    devs[c->dev].used -= granule;
    munmap(c->map, c->maplen);
    free(c->used);
    free(c);
}

static CUresult allocate(int kind, int dev, uint64_t bytes, int map, int legacy, uint64_t *key) {
    if (bytes == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (map && !legacy) {
        struct block *b = calloc(1, sizeof *b);
        if (!b)
            return CUDA_ERROR_OUT_OF_MEMORY;
        pthread_mutex_lock(&mu);
        CUresult r = place(b, dev, bytes);
        if (r == CUDA_SUCCESS) {
            if (devs[dev].used > devs[dev].peak)
                devs[dev].peak = devs[dev].used;
            b->kind = kind, b->dev = dev, b->bytes = bytes;
            b->next = blocks;
            blocks = b;
            *key = b->key;
        }
        pthread_mutex_unlock(&mu);
        if (r != CUDA_SUCCESS)
            free(b);
        trace("allocate kind %d %llu bytes on device %d: %d %#llx", kind, (unsigned long long)bytes, dev, r,
              (unsigned long long)*key);
        return r;
    }
    pthread_mutex_lock(&mu);
    CUresult r = take(dev, bytes);
    if (r != CUDA_SUCCESS) {
        pthread_mutex_unlock(&mu);
        trace("allocate %llu on device %d: out of memory", (unsigned long long)bytes, dev);
        return r;
    }
    struct block *b = calloc(1, sizeof *b);
    if (!b) {
        devs[dev].used -= bytes;
        pthread_mutex_unlock(&mu);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (devs[dev].used > devs[dev].peak)
        devs[dev].peak = devs[dev].used;
    b->kind = kind;
    b->dev = dev;
    b->bytes = bytes;
    b->key = next_id;
    next_id += 0x1000;
    b->next = blocks;
    blocks = b;
    *key = b->key;
    pthread_mutex_unlock(&mu);
    trace("allocate kind %d %llu bytes on device %d: %#llx", kind, (unsigned long long)bytes, dev,
          (unsigned long long)*key);
    return CUDA_SUCCESS;
}

static CUresult release(int kind, uint64_t key) {
    pthread_mutex_lock(&mu);
    for (struct block **p = &blocks; *p; p = &(*p)->next) {
        struct block *b = *p;
        if (b->kind == kind && b->key == key) {
            *p = b->next;
            if (b->map || b->chunk)
                unplace(b);
            else
                devs[b->dev].used -= b->bytes;
            pthread_mutex_unlock(&mu);
            trace("release kind %d %#llx", kind, (unsigned long long)key);
            free(b);
            return CUDA_SUCCESS;
        }
    }
    pthread_mutex_unlock(&mu);
    return CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t bytes) {
    NEED_CTX();
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t k;
    CUresult r = allocate(B_PTR, current->dev, bytes, 1, 0, &k);
    if (r == CUDA_SUCCESS)
        *p = k;
    return r;
}

EXPORT CUresult cuMemAlloc(CUdeviceptr_v1 *p, unsigned int bytes) {
    NEED_CTX();
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t k;
    CUresult r = allocate(B_PTR, current->dev, bytes, 1, 1, &k);
    if (r == CUDA_SUCCESS)
        *p = (CUdeviceptr_v1)k;
    return r;
}

EXPORT CUresult cuMemAllocManaged(CUdeviceptr *p, size_t bytes, unsigned int flags) {
    (void)flags;
    return cuMemAlloc_v2(p, bytes);
}

EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *p, size_t *pitch, size_t width, size_t height,
                                   unsigned int elem) {
    NEED_CTX();
    if (!p || !pitch || width == 0 || height == 0 || (elem != 4 && elem != 8 && elem != 16))
        return CUDA_ERROR_INVALID_VALUE;
    size_t pt = (width + 511) & ~(size_t)511;
    CUresult r = cuMemAlloc_v2(p, pt * height);
    if (r == CUDA_SUCCESS)
        *pitch = pt;
    return r;
}

EXPORT CUresult cuMemAllocPitch(CUdeviceptr_v1 *p, unsigned int *pitch, unsigned int width,
                                unsigned int height, unsigned int elem) {
    NEED_CTX();
    if (!p || !pitch || width == 0 || height == 0 || (elem != 4 && elem != 8 && elem != 16))
        return CUDA_ERROR_INVALID_VALUE;
    unsigned int pt = (width + 511) & ~511u;
    CUresult r = cuMemAlloc(p, pt * height);
    if (r == CUDA_SUCCESS)
        *pitch = pt;
    return r;
}

EXPORT CUresult cuMemAllocAsync(CUdeviceptr *p, size_t bytes, CUstream s) {
    (void)s;
    return cuMemAlloc_v2(p, bytes);
}
EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *p, size_t bytes, CUstream s) {
    return cuMemAllocAsync(p, bytes, s);
}

EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *p, size_t bytes, CUmemoryPool pool, CUstream s) {
    (void)pool;
    (void)s;
    return cuMemAlloc_v2(p, bytes);
}
EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *p, size_t bytes, CUmemoryPool pool, CUstream s) {
    return cuMemAllocFromPoolAsync(p, bytes, pool, s);
}

EXPORT CUresult cuMemFree_v2(CUdeviceptr p) {
    NEED_INIT();
    return release(B_PTR, p);
}
EXPORT CUresult cuMemFree(CUdeviceptr_v1 p) {
    NEED_INIT();
    return release(B_PTR, p);
}
EXPORT CUresult cuMemFreeAsync(CUdeviceptr p, CUstream s) {
    (void)s;
    return cuMemFree_v2(p);
}
EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr p, CUstream s) { return cuMemFreeAsync(p, s); }

EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t bytes, const CUmemAllocationProp *prop,
                            unsigned long long flags) {
    (void)flags;
    NEED_INIT();
    if (!h || !prop || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE || prop->location.id < 0 ||
        prop->location.id >= ndevs)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t k;
    CUresult r = allocate(B_HANDLE, prop->location.id, bytes, 0, 0, &k);
    if (r == CUDA_SUCCESS)
        *h = k;
    return r;
}

EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle h) {
    NEED_INIT();
    return release(B_HANDLE, h);
}

static uint64_t format_bytes(CUarray_format f) {
    switch (f) {
    case CU_AD_FORMAT_UNSIGNED_INT8: case CU_AD_FORMAT_SIGNED_INT8: return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16: case CU_AD_FORMAT_SIGNED_INT16: case CU_AD_FORMAT_HALF: return 2;
    case CU_AD_FORMAT_UNSIGNED_INT32: case CU_AD_FORMAT_SIGNED_INT32: case CU_AD_FORMAT_FLOAT: return 4;
    }
    return 0;
}

static CUresult array(CUarray *a, uint64_t w, uint64_t h, uint64_t d, CUarray_format f, unsigned ch, int kind,
                      unsigned levels) {
    NEED_CTX();
    uint64_t fb = format_bytes(f);
    if (!a || w == 0 || fb == 0 || (ch != 1 && ch != 2 && ch != 4))
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t bytes = 0;
    for (unsigned l = 0; l < levels; l++) {
        bytes += w * (h ? h : 1) * (d ? d : 1) * fb * ch;
        w = w > 1 ? w / 2 : 1;
        h = h > 1 ? h / 2 : h;
        d = d > 1 ? d / 2 : d;
    }
    uint64_t k;
    CUresult r = allocate(kind, current->dev, bytes, 0, 0, &k);
    if (r == CUDA_SUCCESS)
        *a = (CUarray)(uintptr_t)k;
    return r;
}

EXPORT CUresult cuArrayCreate_v2(CUarray *a, const CUDA_ARRAY_DESCRIPTOR *d) {
    if (!d)
        return CUDA_ERROR_INVALID_VALUE;
    return array(a, d->Width, d->Height, 0, d->Format, d->NumChannels, B_ARRAY, 1);
}
EXPORT CUresult cuArrayCreate(CUarray *a, const CUDA_ARRAY_DESCRIPTOR_v1 *d) {
    if (!d)
        return CUDA_ERROR_INVALID_VALUE;
    return array(a, d->Width, d->Height, 0, d->Format, d->NumChannels, B_ARRAY, 1);
}
EXPORT CUresult cuArray3DCreate_v2(CUarray *a, const CUDA_ARRAY3D_DESCRIPTOR *d) {
    if (!d)
        return CUDA_ERROR_INVALID_VALUE;
    return array(a, d->Width, d->Height, d->Depth, d->Format, d->NumChannels, B_ARRAY, 1);
}
EXPORT CUresult cuArray3DCreate(CUarray *a, const CUDA_ARRAY3D_DESCRIPTOR_v1 *d) {
    if (!d)
        return CUDA_ERROR_INVALID_VALUE;
    return array(a, d->Width, d->Height, d->Depth, d->Format, d->NumChannels, B_ARRAY, 1);
}
EXPORT CUresult cuArrayDestroy(CUarray a) {
    NEED_INIT();
    return release(B_ARRAY, (uint64_t)(uintptr_t)a);
}
EXPORT CUresult cuMipmappedArrayCreate(CUmipmappedArray *m, const CUDA_ARRAY3D_DESCRIPTOR *d, unsigned levels) {
    if (!d || !m || levels == 0)
        return CUDA_ERROR_INVALID_VALUE;
    return array((CUarray *)m, d->Width, d->Height, d->Depth, d->Format, d->NumChannels, B_MIPMAP, levels);
}
EXPORT CUresult cuMipmappedArrayDestroy(CUmipmappedArray m) {
    NEED_INIT();
    return release(B_MIPMAP, (uint64_t)(uintptr_t)m);
}

EXPORT CUresult cuMemGetInfo_v2(size_t *free_, size_t *total) {
    NEED_CTX();
    if (!free_ || !total)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&mu);
    *total = devs[current->dev].total;
    *free_ = devs[current->dev].total - devs[current->dev].used;
    pthread_mutex_unlock(&mu);
    return CUDA_SUCCESS;
}
/* A variant the hook does not know: the table maps CUDA 13.0 callers of
 * cuMemGetInfo to it (same ABI here), so tests can check the hook leaves
 * what it cannot vouch for alone. Not exported. */
static CUresult cuMemGetInfo_v3_test(size_t *free_, size_t *total) { return cuMemGetInfo_v2(free_, total); }

EXPORT CUresult cuMemGetInfo(unsigned int *free_, unsigned int *total) {
    size_t f, t;
    CUresult r = cuMemGetInfo_v2(&f, &t);
    if (r == CUDA_SUCCESS) {
        *free_ = f > 0xffffffffu ? 0xffffffffu : (unsigned int)f;
        *total = t > 0xffffffffu ? 0xffffffffu : (unsigned int)t;
    }
    return r;
}

EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n) {
    NEED_CTX();
    cuCtxSynchronize();
    memcpy((void *)(uintptr_t)dst, src, n);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n) {
    NEED_CTX();
    cuCtxSynchronize();
    memcpy(dst, (const void *)(uintptr_t)src, n);
    return CUDA_SUCCESS;
}

/* Modules and kernels. A module takes FAKECUDA_MODULE_MEM bytes of its
 * device (none by default) until it is unloaded: the driver's own memory,
 * which no allocation entry point sees (as code and lazily loaded kernels
 * on a real GPU). */
EXPORT CUresult cuModuleLoadData(CUmodule *m, const void *image) {
    NEED_CTX();
    if (!m || !image)
        return CUDA_ERROR_INVALID_VALUE;
    struct CUmod_st *mod = calloc(1, sizeof *mod);
    if (!mod)
        return CUDA_ERROR_OUT_OF_MEMORY;
    mod->dev = current->dev;
    mod->mem = parse_size(getenv("FAKECUDA_MODULE_MEM"), 0);
    pthread_mutex_lock(&mu);
    CUresult r = take(mod->dev, mod->mem);
    pthread_mutex_unlock(&mu);
    if (r != CUDA_SUCCESS) {
        free(mod);
        return r;
    }
    *m = mod;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuModuleUnload(CUmodule m) {
    if (!m)
        return CUDA_ERROR_INVALID_HANDLE;
    pthread_mutex_lock(&mu);
    devs[m->dev].used -= m->mem;
    pthread_mutex_unlock(&mu);
    free(m);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name) {
    NEED_CTX();
    if (!f || !m || !name)
        return CUDA_ERROR_INVALID_VALUE;
    struct CUfunc_st *fn = calloc(1, sizeof *fn);
    if (!fn)
        return CUDA_ERROR_OUT_OF_MEMORY;
    fn->ns = default_kernel_ns;
    if (strncmp(name, "sleep_us:", 9) == 0)
        fn->ns = strtoull(name + 9, NULL, 10) * 1000;
    *f = fn;
    return CUDA_SUCCESS;
}

static CUresult launch(CUfunction f, CUstream s) {
    NEED_CTX();
    if (!f)
        return CUDA_ERROR_INVALID_HANDLE;
    if (s && s->capturing) {
        struct CUgraph_st *g = s->graph;
        if (g->n == (int)(sizeof g->fns / sizeof g->fns[0]))
            return CUDA_ERROR_OUT_OF_MEMORY;
        g->fns[g->n++] = f;
        return CUDA_SUCCESS;
    }
    int dev = s ? s->dev : current->dev;
    struct device *d = &devs[dev];
    atomic_fetch_add_explicit(&d->launches, 1, memory_order_relaxed);
    if (f->ns == 0)
        return CUDA_SUCCESS;
    uint64_t n = now_ns();
    pthread_mutex_lock(&mu);
    uint64_t start = d->busy_until > n ? d->busy_until : n;
    d->busy_until = start + f->ns;
    d->kernel_ns += f->ns;
    pthread_mutex_unlock(&mu);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                               unsigned bz, unsigned shmem, CUstream s, void **params, void **extra) {
    (void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)shmem, (void)params, (void)extra;
    return launch(f, s);
}
EXPORT CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                    unsigned by, unsigned bz, unsigned shmem, CUstream s, void **params,
                                    void **extra) {
    return cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shmem, s, params, extra);
}
EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig *c, CUfunction f, void **params, void **extra) {
    (void)params, (void)extra;
    if (!c)
        return CUDA_ERROR_INVALID_VALUE;
    return launch(f, c->hStream);
}
EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *c, CUfunction f, void **params, void **extra) {
    return cuLaunchKernelEx(c, f, params, extra);
}
EXPORT CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                          unsigned by, unsigned bz, unsigned shmem, CUstream s, void **params) {
    (void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)shmem, (void)params;
    return launch(f, s);
}
EXPORT CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                               unsigned bx, unsigned by, unsigned bz, unsigned shmem, CUstream s,
                                               void **params) {
    return cuLaunchCooperativeKernel(f, gx, gy, gz, bx, by, bz, shmem, s, params);
}

/* Graphs, from stream capture. */
EXPORT CUresult cuStreamBeginCapture_v2(CUstream s, int mode) {
    (void)mode;
    NEED_CTX();
    if (!s || s->capturing)
        return CUDA_ERROR_INVALID_VALUE;
    s->graph = calloc(1, sizeof *s->graph);
    if (!s->graph)
        return CUDA_ERROR_OUT_OF_MEMORY;
    s->capturing = 1;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuStreamIsCapturing(CUstream s, int *status) {
    NEED_CTX();
    if (!status)
        return CUDA_ERROR_INVALID_VALUE;
    *status = s && s->capturing;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuStreamEndCapture(CUstream s, CUgraph *g) {
    NEED_CTX();
    if (!s || !s->capturing || !g)
        return CUDA_ERROR_INVALID_VALUE;
    s->capturing = 0;
    *g = s->graph;
    s->graph = NULL;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec *e, CUgraph g, unsigned long long flags) {
    (void)flags;
    NEED_CTX();
    if (!e || !g)
        return CUDA_ERROR_INVALID_VALUE;
    struct CUgraphExec_st *x = malloc(sizeof *x);
    if (!x)
        return CUDA_ERROR_OUT_OF_MEMORY;
    x->g = *g;
    *e = x;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuGraphLaunch(CUgraphExec e, CUstream s) {
    NEED_CTX();
    if (!e)
        return CUDA_ERROR_INVALID_VALUE;
    for (int i = 0; i < e->g.n; i++) {
        CUresult r = launch(e->g.fns[i], s && !s->capturing ? s : NULL);
        if (r != CUDA_SUCCESS)
            return r;
    }
    return CUDA_SUCCESS;
}
EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec e, CUstream s) { return cuGraphLaunch(e, s); }
EXPORT CUresult cuGraphExecDestroy(CUgraphExec e) {
    free(e);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuGraphDestroy(CUgraph g) {
    free(g);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemGetAllocationGranularity(size_t *g, const CUmemAllocationProp *prop, int flags) {
    (void)flags;
    NEED_INIT();
    if (!g || !prop)
        return CUDA_ERROR_INVALID_VALUE;
    *g = granule;
    return CUDA_SUCCESS;
}

/* fakecuda_owner is the process the fake NVML lists as the devices' user:
 * the one that initialised the driver. */
EXPORT int fakecuda_owner(void);
EXPORT int fakecuda_owner(void) { return initialized ? (int)owner : 0; }

/* fakecuda_physical is the fake device's use as the fake NVML reports it:
 * the chunks its allocations occupy and its contexts. */
EXPORT int fakecuda_physical(int dev, uint64_t *total, uint64_t *used);
EXPORT int fakecuda_physical(int dev, uint64_t *total, uint64_t *used) {
    if (!initialized || dev < 0 || dev >= ndevs)
        return -1;
    pthread_mutex_lock(&mu);
    *total = devs[dev].total;
    *used = devs[dev].used;
    pthread_mutex_unlock(&mu);
    return 0;
}

/* Streams: every stream of a device shares its one timeline. */
EXPORT CUresult cuStreamCreate(CUstream *s, unsigned int flags) {
    (void)flags;
    NEED_CTX();
    struct CUstream_st *x = calloc(1, sizeof *x);
    if (!x)
        return CUDA_ERROR_OUT_OF_MEMORY;
    x->dev = current->dev;
    *s = x;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuStreamDestroy_v2(CUstream s) {
    free(s);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuStreamSynchronize(CUstream s) {
    NEED_CTX();
    pthread_mutex_lock(&mu);
    uint64_t t = devs[s ? s->dev : current->dev].busy_until;
    pthread_mutex_unlock(&mu);
    sleep_until(t);
    return CUDA_SUCCESS;
}

/* Events complete when their device's timeline reaches them. */
EXPORT CUresult cuEventCreate(CUevent *e, unsigned int flags) {
    NEED_CTX();
    struct CUevent_st *x = calloc(1, sizeof *x);
    if (!x)
        return CUDA_ERROR_OUT_OF_MEMORY;
    x->dev = current->dev;
    x->flags = flags;
    *e = x;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuEventDestroy_v2(CUevent e) {
    free(e);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuEventRecord(CUevent e, CUstream s) {
    NEED_CTX();
    if (!e)
        return CUDA_ERROR_INVALID_HANDLE;
    uint64_t n = now_ns();
    pthread_mutex_lock(&mu);
    uint64_t busy = devs[s ? s->dev : e->dev].busy_until;
    e->at = busy > n ? busy : n;
    e->recorded = 1;
    pthread_mutex_unlock(&mu);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuEventRecord_ptsz(CUevent e, CUstream s) { return cuEventRecord(e, s); }
EXPORT CUresult cuEventQuery(CUevent e) {
    NEED_INIT();
    if (!e)
        return CUDA_ERROR_INVALID_HANDLE;
    return !e->recorded || now_ns() >= e->at ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}
EXPORT CUresult cuEventSynchronize(CUevent e) {
    NEED_INIT();
    if (!e)
        return CUDA_ERROR_INVALID_HANDLE;
    if (e->recorded)
        sleep_until(e->at);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuEventElapsedTime(float *ms, CUevent a, CUevent b) {
    NEED_INIT();
    if (!ms || !a || !b || !a->recorded || !b->recorded || (a->flags | b->flags) & CU_EVENT_DISABLE_TIMING)
        return CUDA_ERROR_INVALID_HANDLE;
    uint64_t n = now_ns();
    if (n < a->at || n < b->at)
        return CUDA_ERROR_NOT_READY;
    *ms = (float)(((double)b->at - (double)a->at) / 1e6);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuGetErrorString(CUresult r, const char **s) {
    switch (r) {
    case CUDA_SUCCESS: *s = "no error"; break;
    case CUDA_ERROR_OUT_OF_MEMORY: *s = "out of memory"; break;
    case CUDA_ERROR_NOT_INITIALIZED: *s = "initialization error"; break;
    case CUDA_ERROR_INVALID_VALUE: *s = "invalid argument"; break;
    default: *s = "unknown error"; break;
    }
    return CUDA_SUCCESS;
}

/* cuGetProcAddress: the driver's own table. Each entry is one exported
 * variant of an API: the name the caller asks for, the first CUDA version
 * whose headers map that name to this variant, and whether it is the
 * per-thread default stream form. */
struct proc {
    const char *api;
    int version;
    int ptds;
    void *fn;
};

EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags);
EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, cuuint64_t flags,
                                    CUdriverProcAddressQueryResult *status);

#define P(api, ver, fn) {api, ver, 0, (void *)fn}
#define PT(api, ver, fn) {api, ver, 1, (void *)fn}
static const struct proc procs[] = {
    P("cuInit", 2000, cuInit),
    P("cuDriverGetVersion", 2020, cuDriverGetVersion),
    P("cuDeviceGet", 2000, cuDeviceGet),
    P("cuDeviceGetCount", 2000, cuDeviceGetCount),
    P("cuDeviceGetName", 2000, cuDeviceGetName),
    P("cuDeviceGetUuid", 9020, cuDeviceGetUuid),
    P("cuDeviceGetUuid", 11040, cuDeviceGetUuid_v2),
    P("cuDeviceTotalMem", 2000, cuDeviceTotalMem),
    P("cuDeviceTotalMem", 3020, cuDeviceTotalMem_v2),
    P("cuCtxCreate", 3020, cuCtxCreate_v2),
    P("cuCtxCreate", 11040, cuCtxCreate_v3),
    P("cuCtxCreate", 12050, cuCtxCreate_v4),
    P("cuMemAllocHost", 2000, cuMemAllocHost),
    P("cuMemAllocHost", 3020, cuMemAllocHost_v2),
    P("cuMemHostAlloc", 2020, cuMemHostAlloc),
    P("cuMemFreeHost", 2000, cuMemFreeHost),
    P("cuMemHostRegister", 4000, cuMemHostRegister),
    P("cuMemHostRegister", 6050, cuMemHostRegister_v2),
    P("cuMemHostUnregister", 4000, cuMemHostUnregister),
    P("cuCtxDestroy", 4000, cuCtxDestroy_v2),
    P("cuCtxSetCurrent", 4000, cuCtxSetCurrent),
    P("cuCtxGetCurrent", 4000, cuCtxGetCurrent),
    P("cuCtxGetDevice", 2000, cuCtxGetDevice),
    P("cuCtxSynchronize", 2000, cuCtxSynchronize),
    P("cuDevicePrimaryCtxRetain", 7000, cuDevicePrimaryCtxRetain),
    P("cuDevicePrimaryCtxRelease", 7000, cuDevicePrimaryCtxRelease),
    P("cuDevicePrimaryCtxRelease", 11000, cuDevicePrimaryCtxRelease_v2),
    P("cuMemGetAllocationGranularity", 10020, cuMemGetAllocationGranularity),
    P("cuStreamBeginCapture", 10010, cuStreamBeginCapture_v2),
    P("cuStreamEndCapture", 10000, cuStreamEndCapture),
    P("cuStreamIsCapturing", 10000, cuStreamIsCapturing),
    P("cuGraphInstantiate", 11040, cuGraphInstantiateWithFlags),
    P("cuGraphInstantiateWithFlags", 11040, cuGraphInstantiateWithFlags),
    P("cuGraphLaunch", 10000, cuGraphLaunch),
    PT("cuGraphLaunch", 10000, cuGraphLaunch_ptsz),
    P("cuGraphExecDestroy", 10000, cuGraphExecDestroy),
    P("cuGraphDestroy", 10000, cuGraphDestroy),
    P("cuMemAlloc", 2000, cuMemAlloc),
    P("cuMemAlloc", 3020, cuMemAlloc_v2),
    P("cuMemAllocManaged", 6000, cuMemAllocManaged),
    P("cuMemAllocPitch", 2000, cuMemAllocPitch),
    P("cuMemAllocPitch", 3020, cuMemAllocPitch_v2),
    P("cuMemAllocAsync", 11020, cuMemAllocAsync),
    PT("cuMemAllocAsync", 11020, cuMemAllocAsync_ptsz),
    P("cuMemAllocFromPoolAsync", 11020, cuMemAllocFromPoolAsync),
    PT("cuMemAllocFromPoolAsync", 11020, cuMemAllocFromPoolAsync_ptsz),
    P("cuMemFree", 2000, cuMemFree),
    P("cuMemFree", 3020, cuMemFree_v2),
    P("cuMemFreeAsync", 11020, cuMemFreeAsync),
    PT("cuMemFreeAsync", 11020, cuMemFreeAsync_ptsz),
    P("cuMemCreate", 10020, cuMemCreate),
    P("cuMemRelease", 10020, cuMemRelease),
    P("cuArrayCreate", 2000, cuArrayCreate),
    P("cuArrayCreate", 3020, cuArrayCreate_v2),
    P("cuArray3DCreate", 2000, cuArray3DCreate),
    P("cuArray3DCreate", 3020, cuArray3DCreate_v2),
    P("cuArrayDestroy", 2000, cuArrayDestroy),
    P("cuMipmappedArrayCreate", 5000, cuMipmappedArrayCreate),
    P("cuMipmappedArrayDestroy", 5000, cuMipmappedArrayDestroy),
    P("cuMemGetInfo", 2000, cuMemGetInfo),
    P("cuMemGetInfo", 3020, cuMemGetInfo_v2),
    P("cuMemGetInfo", 13000, cuMemGetInfo_v3_test),
    P("cuMemcpyHtoD", 3020, cuMemcpyHtoD_v2),
    P("cuMemcpyDtoH", 3020, cuMemcpyDtoH_v2),
    P("cuModuleLoadData", 2000, cuModuleLoadData),
    P("cuModuleUnload", 2000, cuModuleUnload),
    P("cuModuleGetFunction", 2000, cuModuleGetFunction),
    P("cuLaunchKernel", 4000, cuLaunchKernel),
    PT("cuLaunchKernel", 7000, cuLaunchKernel_ptsz),
    P("cuLaunchKernelEx", 11060, cuLaunchKernelEx),
    PT("cuLaunchKernelEx", 11060, cuLaunchKernelEx_ptsz),
    P("cuLaunchCooperativeKernel", 9000, cuLaunchCooperativeKernel),
    PT("cuLaunchCooperativeKernel", 9000, cuLaunchCooperativeKernel_ptsz),
    P("cuStreamCreate", 2000, cuStreamCreate),
    P("cuStreamDestroy", 4000, cuStreamDestroy_v2),
    P("cuStreamSynchronize", 2000, cuStreamSynchronize),
    P("cuEventCreate", 2000, cuEventCreate),
    P("cuEventDestroy", 4000, cuEventDestroy_v2),
    P("cuEventRecord", 2000, cuEventRecord),
    PT("cuEventRecord", 7000, cuEventRecord_ptsz),
    P("cuEventQuery", 2000, cuEventQuery),
    P("cuEventSynchronize", 2000, cuEventSynchronize),
    P("cuEventElapsedTime", 2000, cuEventElapsedTime),
    P("cuGetErrorString", 6000, cuGetErrorString),
    P("cuGetProcAddress", 11030, cuGetProcAddress),
    P("cuGetProcAddress", 12000, cuGetProcAddress_v2),
};

EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, cuuint64_t flags,
                                    CUdriverProcAddressQueryResult *status) {
    if (!symbol || !pfn)
        return CUDA_ERROR_INVALID_VALUE;
    const struct proc *best = NULL, *ptds = NULL;
    int known = 0;
    for (size_t i = 0; i < sizeof procs / sizeof procs[0]; i++) {
        const struct proc *p = &procs[i];
        if (strcmp(p->api, symbol) != 0)
            continue;
        known = 1;
        if (p->version > version)
            continue;
        if (p->ptds)
            ptds = p;
        else if (!best || p->version > best->version)
            best = p;
    }
    if ((flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) && ptds)
        best = ptds;
    *pfn = best ? best->fn : NULL;
    if (status)
        *status = best ? CU_GET_PROC_ADDRESS_SUCCESS
                       : known ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    trace("cuGetProcAddress %s %d %llu: %p", symbol, version, flags, *pfn);
    return best ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags) {
    return cuGetProcAddress_v2(symbol, pfn, version, flags, NULL);
}
