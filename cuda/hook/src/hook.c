/*
 * hook.c — how libdpucuda gets between a program and the CUDA driver.
 *
 * A program reaches driver entry points in three ways, and each is covered:
 *
 *   1. Linked against libcuda.so.1: its calls bind to the first definition
 *      in the global scope, and LD_PRELOAD puts this library first. The
 *      hook exports every intercepted entry point under the driver's own
 *      (version-suffixed) names: cuMemAlloc_v2, cuLaunchKernel_ptsz, ...
 *   2. dlopen + dlsym: this library exports dlsym. For an intercepted name
 *      that exists in the handle it returns the hook; everything else goes
 *      to the real dlsym (found with dlvsym, not a glibc-private symbol) as
 *      a tail call, so RTLD_NEXT still resolves relative to the caller.
 *   3. cuGetProcAddress / cuGetProcAddress_v2 (how CUDA 11.3+ runtimes find
 *      every entry point): the hook asks the driver, then returns its own
 *      function for the variant the caller's version and flags select (the
 *      _v2 form for a CUDA >= 3.2 caller of cuMemAlloc, the _ptsz form with
 *      CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, cuGetProcAddress_v2
 *      itself for a CUDA 12 caller), keeping the driver's pointer as the
 *      real function.
 *
 * The real functions come from the driver library itself (dlopen of
 * libcuda.so.1, lookups scoped to its handle), never from the global scope,
 * which would find this library again.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hook.h"

#define DPUCUDA_VERSION "dpucuda 1.0"

typedef void *(*dlsym_fn)(void *, const char *);

struct hooked {
    const char *name;
    const char *api;
    int version;
    int ptds;
    void *hook;
};

#define DPUCUDA_ENTRY(name, api, version, ptds) {#name, api, version, ptds, (void *)name},
static const struct hooked hooked[NSLOTS] = {DPUCUDA_HOOKED(DPUCUDA_ENTRY)};
#undef DPUCUDA_ENTRY

_Atomic(void *) dpucuda_reals[NSLOTS];
#define reals dpucuda_reals
struct driver drv;
int hook_log_level = LOG_WARN;

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static _Atomic int init_done;
static void *libcuda;
static _Atomic(dlsym_fn) real_dlsym_fn;

DPUCUDA_EXPORT const char *dpucuda_version(void) { return DPUCUDA_VERSION; }

/* ---- the real dlsym ---- */

static dlsym_fn real_dlsym(void) {
    dlsym_fn f = atomic_load_explicit(&real_dlsym_fn, memory_order_acquire);
    if (f)
        return f;
    static const char *const versions[] = {"GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17", "GLIBC_2.0"};
    for (size_t i = 0; i < sizeof versions / sizeof versions[0] && !f; i++)
        f = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", versions[i]);
    if (!f) {
        fprintf(stderr, "dpucuda: cannot find the real dlsym\n");
        abort();
    }
    atomic_store_explicit(&real_dlsym_fn, f, memory_order_release);
    return f;
}

void *hook_real_dlsym(void *handle, const char *name) { return real_dlsym()(handle, name); }

/* ---- logging and small helpers ---- */

void hook_log(int level, const char *fmt, ...) {
    static const char *const names[] = {"error", "warn", "info", "debug"};
    char buf[512];
    int n = snprintf(buf, sizeof buf, "dpucuda[%d] %s: ", (int)getpid(), names[level & 3]);
    va_list ap;
    va_start(ap, fmt);
    if (n > 0 && (size_t)n < sizeof buf)
        n += vsnprintf(buf + n, sizeof buf - (size_t)n, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n >= sizeof buf - 1)
        n = (int)sizeof buf - 2;
    buf[n++] = '\n';
    ssize_t w = write(2, buf, (size_t)n);
    (void)w;
}

uint64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t env_u64(const char *name, uint64_t def) {
    const char *s = getenv(name);
    if (!s || !*s)
        return def;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    return *end ? def : v;
}

/* ---- init ---- */

static void *driver_sym(const char *name) { return libcuda ? real_dlsym()(libcuda, name) : NULL; }

static void after_fork_child(void) {
    devices_reset_after_fork();
    table_reset();
    throttle_after_fork();
    agent_after_fork();
}

static void init_once_fn(void) {
    const char *lvl = getenv("DPU_CUDA_LOG");
    if (lvl) {
        if (!strcmp(lvl, "error")) hook_log_level = LOG_ERROR;
        else if (!strcmp(lvl, "info")) hook_log_level = LOG_INFO;
        else if (!strcmp(lvl, "debug")) hook_log_level = LOG_DEBUG;
    }
    const char *path = getenv("DPU_CUDA_DRIVER");
    libcuda = dlopen(path && *path ? path : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!libcuda)
        LOGF(LOG_ERROR, "cannot open the CUDA driver: %s", dlerror());
    drv.cuCtxGetDevice = (CUresult(*)(CUdevice *))driver_sym("cuCtxGetDevice");
    drv.cuCtxGetCurrent = (CUresult(*)(CUcontext *))driver_sym("cuCtxGetCurrent");
    drv.cuCtxSetCurrent = (CUresult(*)(CUcontext))driver_sym("cuCtxSetCurrent");
    drv.cuDeviceGetUuid = (CUresult(*)(CUuuid *, CUdevice))driver_sym("cuDeviceGetUuid_v2");
    if (!drv.cuDeviceGetUuid)
        drv.cuDeviceGetUuid = (CUresult(*)(CUuuid *, CUdevice))driver_sym("cuDeviceGetUuid");
    drv.cuEventCreate = (CUresult(*)(CUevent *, unsigned int))driver_sym("cuEventCreate");
    drv.cuEventRecord = (CUresult(*)(CUevent, CUstream))driver_sym("cuEventRecord");
    drv.cuEventQuery = (CUresult(*)(CUevent))driver_sym("cuEventQuery");
    drv.cuEventElapsedTime = (CUresult(*)(float *, CUevent, CUevent))driver_sym("cuEventElapsedTime");
    drv.cuEventDestroy = (CUresult(*)(CUevent))driver_sym("cuEventDestroy_v2");
    drv.cuMemGetAllocationGranularity =
        (CUresult(*)(size_t *, const CUmemAllocationProp *, int))driver_sym("cuMemGetAllocationGranularity");
    drv.cuStreamIsCapturing = (CUresult(*)(CUstream, int *))driver_sym("cuStreamIsCapturing");
    pthread_atfork(NULL, NULL, after_fork_child);
    LOGF(LOG_DEBUG, "%s loaded, driver %s", DPUCUDA_VERSION, libcuda ? "found" : "missing");
    agent_start();
    /* Published last: a thread that finds a real function skips init. */
    for (int i = 0; i < NSLOTS; i++) {
        void *f = driver_sym(hooked[i].name);
        void *expected = NULL;
        if (f && f != hooked[i].hook)
            atomic_compare_exchange_strong(&reals[i], &expected, f);
    }
    atomic_store_explicit(&init_done, 1, memory_order_release);
}

void hook_init(void) {
    if (atomic_load_explicit(&init_done, memory_order_acquire))
        return;
    pthread_once(&init_once, init_once_fn);
}

void *real_entry_slow(enum slot s) {
    hook_init();
    return atomic_load_explicit(&reals[s], memory_order_acquire);
}

static int is_hook(const void *f) {
    for (int i = 0; i < NSLOTS; i++)
        if (hooked[i].hook == f)
            return 1;
    return 0;
}

/* learn records f as the real function of slot s unless it has one. */
static void learn(int s, void *f) {
    void *expected = NULL;
    if (f && !is_hook(f))
        atomic_compare_exchange_strong(&reals[s], &expected, f);
}

/* ---- dlsym ---- */

static int find_hooked(const char *name) {
    for (int i = 0; i < NSLOTS; i++)
        if (!strcmp(hooked[i].name, name))
            return i;
    return -1;
}

static __attribute__((noinline)) void *dlsym_hooked(dlsym_fn real, void *handle, const char *symbol) {
    if (symbol[0] == 'n') {
        void *h = hook_nvml_of(symbol);
        if (!h || !real(handle, symbol))
            return NULL;
        LOGF(LOG_DEBUG, "dlsym %s: hooked", symbol);
        return h;
    }
    int s = find_hooked(symbol);
    if (s < 0)
        return NULL;
    void *f = real(handle, symbol);
    if (!f)
        return NULL;
    hook_init();
    learn(s, f);
    LOGF(LOG_DEBUG, "dlsym %s: hooked", symbol);
    return hooked[s].hook;
}

#ifndef DPUCUDA_NO_DLSYM /* sanitizer builds: their runtimes call dlsym before they are ready */
DPUCUDA_EXPORT void *dlsym(void *handle, const char *symbol) {
    dlsym_fn real = real_dlsym();
    if ((symbol[0] == 'c' && symbol[1] == 'u') || (symbol[0] == 'n' && !strncmp(symbol, "nvml", 4))) {
        void *h = dlsym_hooked(real, handle, symbol);
        if (h)
            return h;
    }
    return real(handle, symbol); /* a tail call: RTLD_NEXT sees the caller's address */
}
#endif

/* ---- cuGetProcAddress ---- */

/* select returns the slot of the variant of api a caller of CUDA version
 * `version` with `flags` expects, or -1 when the hook does not intercept it. */
static int select_variant(const char *api, int version, cuuint64_t flags) {
    int best = -1, ptds = -1;
    for (int i = 0; i < NSLOTS; i++) {
        const struct hooked *h = &hooked[i];
        if (strcmp(h->api, api) != 0 || h->version > version)
            continue;
        if (h->ptds)
            ptds = i;
        else if (best < 0 || h->version > hooked[best].version)
            best = i;
    }
    if ((flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) && ptds >= 0)
        return ptds;
    return best;
}

typedef CUresult (*gpa_fn)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);

/* ask_driver resolves through the driver's own cuGetProcAddress. */
static CUresult ask_driver(const char *symbol, void **pfn, int version, cuuint64_t flags) {
    gpa_fn v2 = (gpa_fn)atomic_load(&reals[SLOT_cuGetProcAddress_v2]);
    if (v2)
        return v2(symbol, pfn, version, flags, NULL);
    CUresult (*v1)(const char *, void **, int, cuuint64_t) =
        (CUresult(*)(const char *, void **, int, cuuint64_t))atomic_load(&reals[SLOT_cuGetProcAddress]);
    return v1 ? v1(symbol, pfn, version, flags) : CUDA_ERROR_NOT_FOUND;
}

/* intercept_proc returns the hook for what the driver resolved, fn. The
 * variant is the one the caller's version and flags select in this hook's
 * table; the driver must agree: asked at that variant's own version it must
 * answer fn too. Otherwise the driver has a newer variant (another ABI) the
 * hook does not know, and the caller gets the driver's function untouched. */
static void *intercept_proc(const char *symbol, void *fn, int version, cuuint64_t flags) {
    if (!symbol || symbol[0] != 'c' || symbol[1] != 'u')
        return fn;
    int s = select_variant(symbol, version, flags);
    if (s < 0)
        return fn;
    if (hooked[s].version < version && !is_hook(fn)) {
        void *at = NULL;
        if (ask_driver(symbol, &at, hooked[s].version, flags) != CUDA_SUCCESS || at != fn) {
            LOGF(LOG_WARN, "cuGetProcAddress %s (%d): the driver has a variant newer than %s; not intercepted",
                 symbol, version, hooked[s].name);
            return fn;
        }
    }
    learn(s, fn);
    if (!atomic_load_explicit(&reals[s], memory_order_acquire))
        return fn; /* no real function to call: leave the caller the driver's */
    LOGF(LOG_DEBUG, "cuGetProcAddress %s (%d, flags %llu): %s", symbol, version, flags, hooked[s].name);
    return hooked[s].hook;
}

DPUCUDA_EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, cuuint64_t flags,
                                            CUdriverProcAddressQueryResult *status) {
    hook_init();
    CUresult (*real)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *) =
        REAL(cuGetProcAddress_v2);
    if (!real)
        return CUDA_ERROR_NOT_FOUND;
    CUresult r = real(symbol, pfn, version, flags, status);
    if (r == CUDA_SUCCESS && pfn && *pfn)
        *pfn = intercept_proc(symbol, *pfn, version, flags);
    return r;
}

DPUCUDA_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags) {
    hook_init();
    CUresult (*real)(const char *, void **, int, cuuint64_t) = REAL(cuGetProcAddress);
    CUresult r;
    if (real) {
        r = real(symbol, pfn, version, flags);
    } else {
        CUresult (*v2)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *) =
            REAL(cuGetProcAddress_v2);
        if (!v2)
            return CUDA_ERROR_NOT_FOUND;
        r = v2(symbol, pfn, version, flags, NULL);
    }
    if (r == CUDA_SUCCESS && pfn && *pfn)
        *pfn = intercept_proc(symbol, *pfn, version, flags);
    return r;
}

/* ---- devices ---- */

static struct device devices[DPUCUDA_ACCOUNTS]; /* the devices, then pinned host memory */
static pthread_once_t devices_once = PTHREAD_ONCE_INIT;

static void devices_init(void) {
    for (int i = 0; i < DPUCUDA_ACCOUNTS; i++) {
        devices[i].ordinal = i;
        pthread_mutex_init(&devices[i].mu, NULL);
        pthread_mutex_init(&devices[i].umu, NULL);
    }
}

struct device *device_peek(int ordinal) {
    if (ordinal < 0 || ordinal >= DPUCUDA_MAX_DEVICES)
        return NULL;
    pthread_once(&devices_once, devices_init);
    return &devices[ordinal];
}

struct device *host_memory(void) {
    pthread_once(&devices_once, devices_init);
    return &devices[DPUCUDA_HOST_DEVICE];
}

struct device *device_at(int ordinal) {
    struct device *d = device_peek(ordinal);
    if (!d)
        return NULL;
    int expected = 0;
    if (atomic_load_explicit(&d->uuid_state, memory_order_acquire) == 0 &&
        atomic_compare_exchange_strong(&d->uuid_state, &expected, 1)) {
        CUuuid u;
        if (drv.cuDeviceGetUuid && drv.cuDeviceGetUuid(&u, ordinal) == CUDA_SUCCESS) {
            pthread_mutex_lock(&d->mu);
            memcpy(d->uuid, u.bytes, sizeof d->uuid);
            pthread_mutex_unlock(&d->mu);
        } else {
            atomic_store(&d->uuid_state, 0); /* try again on the next use */
        }
    }
    return d;
}

struct device *current_device(void) {
    CUdevice dev;
    if (!drv.cuCtxGetDevice || drv.cuCtxGetDevice(&dev) != CUDA_SUCCESS)
        return NULL;
    return device_at(dev);
}

void devices_reset_after_fork(void) {
    pthread_once(&devices_once, devices_init);
    for (int i = 0; i < DPUCUDA_ACCOUNTS; i++) {
        struct device *d = &devices[i];
        pthread_mutex_init(&d->mu, NULL);
        pthread_mutex_init(&d->umu, NULL);
        d->used = d->reserved = d->untracked = d->gen = 0;
        atomic_store(&d->freeing, 0);
        atomic_store(&d->usage_at, 0);
        d->primary_refs = 0;
        d->util_at = d->util_kernel = 0;
        atomic_store(&d->others, 0);
        atomic_store(&d->seen, 0);
        atomic_store(&d->kernel_ns, 0);
        atomic_store(&d->throttle, NULL);
    }
}
