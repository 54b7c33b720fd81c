/*
 * fakenvml.c — a small stand-in for NVML (libnvidia-ml.so.1) beside the
 * fake driver, for testing libdpucuda's NVML answers without a GPU.
 *
 * It reports the fake driver's devices (FAKECUDA_DEVICES, default 2, with
 * the fake's UUIDs fa ce 00 … 00 ordinal) and their use as the fake driver
 * accounts it (fakecuda_physical: chunks and contexts, not bytes asked
 * for) when the fake driver is loaded and initialised in the process, else
 * FAKECUDA_MEM free. The running-processes query lists the process that
 * initialised the fake driver (the caller, or for a forked child its
 * parent) with that use; utilisation is FAKENVML_UTIL percent (default 50) for
 * both figures.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

typedef int nvmlReturn_t;
enum { OK = 0, UNINIT = 1, INVALID = 2, NOT_FOUND = 6, SIZE = 7 };
struct nvmlDevice_st { int index; };
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

static struct nvmlDevice_st devs[16];
static int inited;

static unsigned count(void) {
    const char *s = getenv("FAKECUDA_DEVICES");
    int n = s && *s ? atoi(s) : 2;
    return n < 1 || n > 16 ? 2 : (unsigned)n;
}

static uint64_t env_size(const char *name, uint64_t def) {
    const char *s = getenv(name);
    if (!s || !*s)
        return def;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    switch (*end) {
    case 'K': case 'k': v <<= 10; break;
    case 'M': case 'm': v <<= 20; break;
    case 'G': case 'g': v <<= 30; break;
    }
    return v;
}

/* physical asks the fake driver, if it is in the process, and which
 * process it lists as the user (the one that initialised it). */
static void physical_of(int dev, uint64_t *total, uint64_t *used, unsigned *pid) {
    *total = env_size("FAKECUDA_MEM", 16ull << 30);
    *used = 0;
    *pid = (unsigned)getpid();
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!h)
        return;
    int (*f)(int, uint64_t *, uint64_t *) = (int (*)(int, uint64_t *, uint64_t *))dlsym(h, "fakecuda_physical");
    int (*o)(void) = (int (*)(void))dlsym(h, "fakecuda_owner");
    uint64_t t, u;
    if (f && f(dev, &t, &u) == 0)
        *total = t, *used = u;
    if (o && o() > 0)
        *pid = (unsigned)o();
    dlclose(h);
}

static void physical(int dev, uint64_t *total, uint64_t *used) {
    unsigned pid;
    physical_of(dev, total, used, &pid);
}

#define NEED()                                                                                     \
    do {                                                                                           \
        if (!inited)                                                                               \
            return UNINIT;                                                                         \
    } while (0)
#define DEV(h)                                                                                     \
    do {                                                                                           \
        NEED();                                                                                    \
        if (!(h) || (h) < devs || (h) >= devs + count())                                           \
            return INVALID;                                                                        \
    } while (0)

EXPORT nvmlReturn_t nvmlInit_v2(void);
EXPORT nvmlReturn_t nvmlInit_v2(void) {
    for (int i = 0; i < 16; i++)
        devs[i].index = i;
    inited++;
    return OK;
}
EXPORT nvmlReturn_t nvmlInit(void);
EXPORT nvmlReturn_t nvmlInit(void) { return nvmlInit_v2(); }
EXPORT nvmlReturn_t nvmlShutdown(void);
EXPORT nvmlReturn_t nvmlShutdown(void) {
    NEED();
    inited--;
    return OK;
}

EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *n);
EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *n) {
    NEED();
    if (!n)
        return INVALID;
    *n = count();
    return OK;
}
EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned int *n);
EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned int *n) { return nvmlDeviceGetCount_v2(n); }

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t *h);
EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t *h) {
    NEED();
    if (!h || i >= count())
        return INVALID;
    *h = &devs[i];
    return OK;
}
EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int i, nvmlDevice_t *h);
EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int i, nvmlDevice_t *h) {
    return nvmlDeviceGetHandleByIndex_v2(i, h);
}

static void uuid(int i, char *buf, unsigned len) {
    snprintf(buf, len, "GPU-face0000-0000-0000-0000-0000000000%02x", i);
}

EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t h, char *buf, unsigned int len);
EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t h, char *buf, unsigned int len) {
    DEV(h);
    if (!buf || len < 41)
        return SIZE;
    uuid(h->index, buf, len);
    return OK;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *u, nvmlDevice_t *h);
EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *u, nvmlDevice_t *h) {
    NEED();
    char buf[64];
    for (unsigned i = 0; u && h && i < count(); i++) {
        uuid((int)i, buf, sizeof buf);
        if (!strcmp(buf, u)) {
            *h = &devs[i];
            return OK;
        }
    }
    return NOT_FOUND;
}

EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t h, unsigned int *i);
EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t h, unsigned int *i) {
    DEV(h);
    if (!i)
        return INVALID;
    *i = (unsigned)h->index;
    return OK;
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t h, nvmlMemory_t *m);
EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t h, nvmlMemory_t *m) {
    DEV(h);
    if (!m)
        return INVALID;
    uint64_t t, u;
    physical(h->index, &t, &u);
    m->total = t, m->used = u, m->free = t - u;
    return OK;
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t h, nvmlMemory_v2_t *m);
EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t h, nvmlMemory_v2_t *m) {
    DEV(h);
    if (!m)
        return INVALID;
    uint64_t t, u;
    physical(h->index, &t, &u);
    m->total = t, m->reserved = 1u << 20, m->used = u, m->free = t - u - m->reserved;
    return OK;
}

#define PROCS(type)                                                                                \
    do {                                                                                           \
        DEV(h);                                                                                    \
        if (!n)                                                                                    \
            return INVALID;                                                                        \
        uint64_t t, u;                                                                             \
        unsigned pid;                                                                              \
        physical_of(h->index, &t, &u, &pid);                                                       \
        unsigned want = u ? 1 : 0, cap = *n;                                                       \
        *n = want;                                                                                 \
        if (cap < want)                                                                            \
            return SIZE;                                                                           \
        if (want) {                                                                                \
            memset(&p[0], 0, sizeof(type));                                                        \
            p[0].pid = pid;                                                                        \
            p[0].usedGpuMemory = u;                                                                \
        }                                                                                          \
        return OK;                                                                                 \
    } while (0)

EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t h, unsigned int *n, nvmlProcessInfo_t *p);
EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t h, unsigned int *n, nvmlProcessInfo_t *p) {
    PROCS(nvmlProcessInfo_t);
}
EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t h, unsigned int *n, nvmlProcessInfo_t *p);
EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t h, unsigned int *n, nvmlProcessInfo_t *p) {
    PROCS(nvmlProcessInfo_t);
}
EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t h, unsigned int *n, nvmlProcessInfo_v1_t *p);
EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t h, unsigned int *n, nvmlProcessInfo_v1_t *p) {
    PROCS(nvmlProcessInfo_v1_t);
}

EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t h, nvmlUtilization_t *u);
EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t h, nvmlUtilization_t *u) {
    DEV(h);
    if (!u)
        return INVALID;
    const char *s = getenv("FAKENVML_UTIL");
    u->gpu = u->memory = s && *s ? (unsigned)atoi(s) : 50;
    return OK;
}
