/*
 * nvml.c — NVML as the limits make it. Monitoring tools, nvidia-smi and
 * frameworks (PyTorch's memory report) read device memory through NVML,
 * not the driver API, so the hook answers there too:
 *
 *   nvmlDeviceGetCount(_v2), nvmlDeviceGetHandleByIndex(_v2) and
 *   nvmlDeviceGetIndex count and number devices the way CUDA does under
 *   CUDA_VISIBLE_DEVICES (ordinals or GPU-UUID prefixes, parsing stops at
 *   the first entry that names no device), so NVML index i is CUDA
 *   ordinal i;
 *   nvmlDeviceGetMemoryInfo(_v2): under a memory limit, total is the limit
 *   and used is what cuMemGetInfo shows as used: this process's charge,
 *   what it has reserved for allocations in flight, and the others' under
 *   the same limit (a cgroup's or container's);
 *   nvmlDeviceGetComputeRunningProcesses(_v2, _v3) and
 *   nvmlDeviceGetRunningProcessDetailList (compute): under a limit, the
 *   processes whose use counts against it, each with its charge as dpuctl
 *   gpu show reports it: this process, and under a cgroup's, pod's or
 *   container's limit the group's others (GPU_MEM_PROCS), so that the table
 *   adds up to the memory shown used; the graphics and MPS lists are empty
 *   under a limit (the charges are all in the compute list);
 *   nvmlDeviceGetUtilizationRates: under a kernel-time quota, the GPU
 *   figure is this process's accounted kernel time over the interval since
 *   the previous sample (the memory figure is the device's).
 *
 * Devices without a limit are answered by NVML untouched. Programs reach
 * these by linking libnvidia-ml (the exports below come first under
 * LD_PRELOAD) or by dlsym (hook.c's interposer sends nvml* names here).
 * The real functions come from the NVML library's own handle
 * (DPU_NVML_LIBRARY, default libnvidia-ml.so.1).
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpu_wire.h"
#include "hook.h"

typedef int nvmlReturn_t;
enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_FUNCTION_NOT_FOUND = 13
};
typedef struct nvmlDevice_st *nvmlDevice_t;
typedef struct {
    unsigned long long total, free, used;
} nvmlMemory_t;
typedef struct {
    unsigned int version;
    unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;
typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
} nvmlProcessInfo_v1_t;
typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_t;
typedef struct {
    unsigned int gpu, memory;
} nvmlUtilization_t;
typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId, computeInstanceId;
    unsigned long long usedGpuCcProtectedMemory;
} nvmlProcessDetail_v1_t;
typedef struct {
    unsigned int version;
    unsigned int mode; /* NVML_PROCESS_MODE_* */
    unsigned int numProcArrayEntries;
    nvmlProcessDetail_v1_t *procArray;
} nvmlProcessDetailList_v1_t;
enum { NVML_PROCESS_MODE_COMPUTE = 0 };

/* The interposed entry points (NVML's signatures). */
nvmlReturn_t nvmlDeviceGetCount(unsigned int *count);
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count);
nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int i, nvmlDevice_t *h);
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t *h);
nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t h, unsigned int *idx);
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t h, nvmlMemory_t *m);
nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t h, nvmlMemory_v2_t *m);
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t h, unsigned int *count, nvmlProcessInfo_v1_t *infos);
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t h, unsigned int *count, nvmlProcessInfo_t *infos);
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t h, unsigned int *count, nvmlProcessInfo_t *infos);
nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t h, nvmlUtilization_t *u);
nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses(nvmlDevice_t h, unsigned int *count, nvmlProcessInfo_v1_t *infos);
nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v2(nvmlDevice_t h, unsigned int *count, nvmlProcessInfo_t *infos);
nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t h, unsigned int *count, nvmlProcessInfo_t *infos);
nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses(nvmlDevice_t h, unsigned int *count,
                                                     nvmlProcessInfo_v1_t *infos);
nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v2(nvmlDevice_t h, unsigned int *count,
                                                        nvmlProcessInfo_t *infos);
nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v3(nvmlDevice_t h, unsigned int *count,
                                                        nvmlProcessInfo_t *infos);
nvmlReturn_t nvmlDeviceGetRunningProcessDetailList(nvmlDevice_t h, nvmlProcessDetailList_v1_t *list);

/* ---- the real library ---- */

static struct {
    nvmlReturn_t (*Init)(void);
    nvmlReturn_t (*GetCount)(unsigned int *);
    nvmlReturn_t (*GetHandleByIndex)(unsigned int, nvmlDevice_t *);
    nvmlReturn_t (*GetHandleByUUID)(const char *, nvmlDevice_t *);
    nvmlReturn_t (*GetIndex)(nvmlDevice_t, unsigned int *);
    nvmlReturn_t (*GetUUID)(nvmlDevice_t, char *, unsigned int);
    nvmlReturn_t (*GetMemoryInfo)(nvmlDevice_t, nvmlMemory_t *);
    nvmlReturn_t (*GetMemoryInfo_v2)(nvmlDevice_t, nvmlMemory_v2_t *);
    nvmlReturn_t (*GetCountV1)(unsigned int *);
    nvmlReturn_t (*GetHandleByIndexV1)(unsigned int, nvmlDevice_t *);
    nvmlReturn_t (*Procs1)(nvmlDevice_t, unsigned int *, nvmlProcessInfo_v1_t *);
    nvmlReturn_t (*Procs2)(nvmlDevice_t, unsigned int *, nvmlProcessInfo_t *);
    nvmlReturn_t (*Procs3)(nvmlDevice_t, unsigned int *, nvmlProcessInfo_t *);
    nvmlReturn_t (*Utilization)(nvmlDevice_t, nvmlUtilization_t *);
    nvmlReturn_t (*Gfx1)(nvmlDevice_t, unsigned int *, nvmlProcessInfo_v1_t *);
    nvmlReturn_t (*Gfx2)(nvmlDevice_t, unsigned int *, nvmlProcessInfo_t *);
    nvmlReturn_t (*Gfx3)(nvmlDevice_t, unsigned int *, nvmlProcessInfo_t *);
    nvmlReturn_t (*Mps1)(nvmlDevice_t, unsigned int *, nvmlProcessInfo_v1_t *);
    nvmlReturn_t (*Mps2)(nvmlDevice_t, unsigned int *, nvmlProcessInfo_t *);
    nvmlReturn_t (*Mps3)(nvmlDevice_t, unsigned int *, nvmlProcessInfo_t *);
    nvmlReturn_t (*DetailList)(nvmlDevice_t, nvmlProcessDetailList_v1_t *);
} nv;

static pthread_once_t nv_once = PTHREAD_ONCE_INIT;
static void *libnvml;

static void nv_load(void) {
    hook_init();
    const char *path = getenv("DPU_NVML_LIBRARY");
    libnvml = dlopen(path && *path ? path : "libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!libnvml) {
        LOGF(LOG_DEBUG, "no NVML: %s", dlerror());
        return;
    }
#define NV(field, name) nv.field = (__typeof__(nv.field))hook_real_dlsym(libnvml, name)
    NV(Init, "nvmlInit_v2");
    NV(GetCount, "nvmlDeviceGetCount_v2");
    NV(GetCountV1, "nvmlDeviceGetCount");
    NV(GetHandleByIndex, "nvmlDeviceGetHandleByIndex_v2");
    NV(GetHandleByIndexV1, "nvmlDeviceGetHandleByIndex");
    NV(GetHandleByUUID, "nvmlDeviceGetHandleByUUID");
    NV(GetIndex, "nvmlDeviceGetIndex");
    NV(GetUUID, "nvmlDeviceGetUUID");
    NV(GetMemoryInfo, "nvmlDeviceGetMemoryInfo");
    NV(GetMemoryInfo_v2, "nvmlDeviceGetMemoryInfo_v2");
    NV(Procs1, "nvmlDeviceGetComputeRunningProcesses");
    NV(Procs2, "nvmlDeviceGetComputeRunningProcesses_v2");
    NV(Procs3, "nvmlDeviceGetComputeRunningProcesses_v3");
    NV(Utilization, "nvmlDeviceGetUtilizationRates");
    NV(Gfx1, "nvmlDeviceGetGraphicsRunningProcesses");
    NV(Gfx2, "nvmlDeviceGetGraphicsRunningProcesses_v2");
    NV(Gfx3, "nvmlDeviceGetGraphicsRunningProcesses_v3");
    NV(Mps1, "nvmlDeviceGetMPSComputeRunningProcesses");
    NV(Mps2, "nvmlDeviceGetMPSComputeRunningProcesses_v2");
    NV(Mps3, "nvmlDeviceGetMPSComputeRunningProcesses_v3");
    NV(DetailList, "nvmlDeviceGetRunningProcessDetailList");
#undef NV
}

static int nv_ready(void) {
    pthread_once(&nv_once, nv_load);
    return libnvml != NULL;
}

/* ---- CUDA_VISIBLE_DEVICES ---- */

static pthread_once_t vis_once = PTHREAD_ONCE_INIT;
static int nvisible = -1; /* -1: every device, in NVML's order */
static unsigned visible[DPUCUDA_MAX_DEVICES];

static int uuid_text(nvmlDevice_t h, char *buf, unsigned len) {
    return nv.GetUUID && nv.GetUUID(h, buf, len) == NVML_SUCCESS ? 0 : -1;
}

static void vis_parse(void) {
    const char *env = getenv("CUDA_VISIBLE_DEVICES");
    unsigned count = 0;
    if (!env || !nv.GetCount || nv.GetCount(&count) != NVML_SUCCESS)
        return;
    nvisible = 0;
    char buf[1024];
    strncpy(buf, env, sizeof buf - 1);
    buf[sizeof buf - 1] = 0;
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok && nvisible < DPUCUDA_MAX_DEVICES;
         tok = strtok_r(NULL, ",", &save)) {
        while (isspace((unsigned char)*tok))
            tok++;
        int found = -1;
        if (isdigit((unsigned char)*tok)) {
            char *end;
            unsigned long v = strtoul(tok, &end, 10);
            if (v < count)
                found = (int)v;
        } else if (!strncmp(tok, "GPU-", 4)) {
            size_t n = strcspn(tok, " \t");
            for (unsigned i = 0; i < count && found < 0; i++) {
                nvmlDevice_t h;
                char u[96];
                if (nv.GetHandleByIndex(i, &h) == NVML_SUCCESS && uuid_text(h, u, sizeof u) == 0 &&
                    !strncmp(u, tok, n))
                    found = (int)i;
            }
        }
        if (found < 0)
            break; /* as CUDA: the devices named before the first bad entry */
        int dup = 0;
        for (int j = 0; j < nvisible; j++)
            dup |= visible[j] == (unsigned)found;
        if (dup)
            break;
        visible[nvisible++] = (unsigned)found;
    }
    LOGF(LOG_DEBUG, "NVML: %d of %u devices visible", nvisible, count);
}

static void vis_ready(void) { pthread_once(&vis_once, vis_parse); }

/* ordinal_of is the CUDA ordinal of NVML device h, or -1. */
static int ordinal_of(nvmlDevice_t h) {
    unsigned idx;
    if (!nv.GetIndex || nv.GetIndex(h, &idx) != NVML_SUCCESS)
        return -1;
    vis_ready();
    if (nvisible < 0)
        return idx < DPUCUDA_MAX_DEVICES ? (int)idx : -1;
    for (int i = 0; i < nvisible; i++)
        if (visible[i] == idx)
            return i;
    return -1;
}

static int parse_uuid(const char *s, unsigned char out[16]) {
    if (strncmp(s, "GPU-", 4))
        return -1;
    s += 4;
    for (int i = 0; i < 16; i++) {
        while (*s == '-')
            s++;
        unsigned v;
        if (!isxdigit((unsigned char)s[0]) || !isxdigit((unsigned char)s[1]) || sscanf(s, "%2x", &v) != 1)
            return -1;
        out[i] = (unsigned char)v;
        s += 2;
    }
    return 0;
}

/* device_of is the hook's device behind NVML device h: the one with its
 * UUID, else the one at its CUDA ordinal (which then learns the UUID). */
static struct device *device_of(nvmlDevice_t h) {
    char text[96];
    unsigned char u[16];
    int have = uuid_text(h, text, sizeof text) == 0 && parse_uuid(text, u) == 0;
    if (have) {
        for (int i = 0; i < DPUCUDA_MAX_DEVICES; i++) {
            struct device *d = device_peek(i);
            if (atomic_load(&d->uuid_state) == 0)
                continue;
            pthread_mutex_lock(&d->mu);
            int same = !memcmp(d->uuid, u, 16);
            pthread_mutex_unlock(&d->mu);
            if (same)
                return d;
        }
    }
    struct device *d = device_peek(ordinal_of(h));
    if (d && have) {
        int expected = 0;
        if (atomic_compare_exchange_strong(&d->uuid_state, &expected, 1)) {
            pthread_mutex_lock(&d->mu);
            memcpy(d->uuid, u, 16);
            pthread_mutex_unlock(&d->mu);
        }
    }
    return d;
}

/* view is what the limit makes of device d: 0 when it has none. */
static int view(struct device *d, uint64_t *limit, uint64_t *used, uint64_t *own) {
    if (!d)
        return 0;
    atomic_store(&d->seen, 1);
    agent_refresh(d);
    *limit = atomic_load(&d->limit);
    if (!*limit)
        return 0;
    pthread_mutex_lock(&d->mu);
    *own = d->used;
    *used = d->used + d->reserved;
    pthread_mutex_unlock(&d->mu);
    *used += atomic_load(&d->others);
    return 1;
}

/* ---- the interposed entry points ---- */

#define NEED(f)                                                                                    \
    if (!nv_ready() || !nv.f)                                                                      \
    return NVML_ERROR_FUNCTION_NOT_FOUND

DPUCUDA_EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    NEED(GetCount);
    nvmlReturn_t r = nv.GetCount(count);
    vis_ready();
    if (r == NVML_SUCCESS && count && nvisible >= 0)
        *count = (unsigned)nvisible;
    return r;
}

DPUCUDA_EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned int *count) {
    NEED(GetCountV1);
    nvmlReturn_t r = nv.GetCountV1(count);
    vis_ready();
    if (r == NVML_SUCCESS && count && nvisible >= 0)
        *count = (unsigned)nvisible;
    return r;
}

static nvmlReturn_t by_index(nvmlReturn_t (*real)(unsigned int, nvmlDevice_t *), unsigned int i,
                             nvmlDevice_t *h) {
    vis_ready();
    if (nvisible >= 0) {
        if (i >= (unsigned)nvisible)
            return NVML_ERROR_INVALID_ARGUMENT;
        i = visible[i];
    }
    return real(i, h);
}

DPUCUDA_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t *h) {
    NEED(GetHandleByIndex);
    return by_index(nv.GetHandleByIndex, i, h);
}

DPUCUDA_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int i, nvmlDevice_t *h) {
    NEED(GetHandleByIndexV1);
    return by_index(nv.GetHandleByIndexV1, i, h);
}

DPUCUDA_EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t h, unsigned int *idx) {
    NEED(GetIndex);
    nvmlReturn_t r = nv.GetIndex(h, idx);
    vis_ready();
    if (r == NVML_SUCCESS && idx && nvisible >= 0) {
        for (int i = 0; i < nvisible; i++)
            if (visible[i] == *idx) {
                *idx = (unsigned)i;
                return r;
            }
        return NVML_ERROR_NOT_FOUND; /* not one of this process's devices */
    }
    return r;
}

DPUCUDA_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t h, nvmlMemory_t *m) {
    NEED(GetMemoryInfo);
    nvmlReturn_t r = nv.GetMemoryInfo(h, m);
    uint64_t limit, used, own;
    if (r == NVML_SUCCESS && m && view(device_of(h), &limit, &used, &own)) {
        m->total = limit < m->total ? limit : m->total;
        m->used = used;
        m->free = m->total > used ? m->total - used : 0;
    }
    return r;
}

DPUCUDA_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t h, nvmlMemory_v2_t *m) {
    NEED(GetMemoryInfo_v2);
    nvmlReturn_t r = nv.GetMemoryInfo_v2(h, m);
    uint64_t limit, used, own;
    if (r == NVML_SUCCESS && m && view(device_of(h), &limit, &used, &own)) {
        m->total = limit < m->total ? limit : m->total;
        m->reserved = 0; /* the driver's own reservation is not the program's to see under a limit */
        m->used = used;
        m->free = m->total > used ? m->total - used : 0;
    }
    return r;
}

/* scope is the processes under device d's limit with what each has in
 * use, as dpuctl gpu show lists them: this process (own, its charge) and,
 * under a shared limit, the others the agent accounts under it. Processes
 * with nothing in use are left out, as the driver leaves out processes
 * without a context. */
struct scope {
    unsigned n;
    uint32_t pid[GPU_MAX_PROCS + 1];
    uint64_t bytes[GPU_MAX_PROCS + 1];
};

static void scope_of(struct device *d, uint64_t own, struct scope *s) {
    uint32_t me = (uint32_t)getpid(), pids[GPU_MAX_PROCS];
    uint64_t bytes[GPU_MAX_PROCS];
    s->n = 0;
    if (own) {
        s->pid[0] = me;
        s->bytes[0] = own;
        s->n = 1;
    }
    int k = atomic_load(&d->others) ? agent_procs(d, pids, bytes, GPU_MAX_PROCS) : 0;
    for (int i = 0; i < k; i++)
        if (pids[i] != me && bytes[i]) {
            s->pid[s->n] = pids[i];
            s->bytes[s->n++] = bytes[i];
        }
    LOGF(LOG_DEBUG, "NVML process table under the limit of device %d: %u process(es)", d->ordinal, s->n);
}

/* PROCS_BODY answers a running-processes query under a limit with the
 * processes of the limit's scope (compute), or none (graphics, MPS). */
#define PROCS_BODY(real, type, listed)                                                             \
    do {                                                                                           \
        uint64_t limit, used, own;                                                                 \
        struct device *d_ = device_of(h);                                                          \
        if (!count || !view(d_, &limit, &used, &own))                                              \
            return real(h, count, infos);                                                          \
        struct scope s_ = {0};                                                                     \
        if (listed)                                                                                \
            scope_of(d_, own, &s_);                                                                \
        unsigned cap = *count;                                                                     \
        *count = s_.n;                                                                             \
        if (cap < s_.n)                                                                            \
            return NVML_ERROR_INSUFFICIENT_SIZE;                                                   \
        if (s_.n && !infos)                                                                        \
            return NVML_ERROR_INVALID_ARGUMENT;                                                    \
        for (unsigned i = 0; i < s_.n; i++) {                                                      \
            memset(&infos[i], 0, sizeof infos[i]);                                                 \
            infos[i].pid = s_.pid[i];                                                              \
            infos[i].usedGpuMemory = s_.bytes[i];                                                  \
            SET_INSTANCE(infos[i]);                                                                \
        }                                                                                          \
        return NVML_SUCCESS;                                                                       \
    } while (0)

#define PROCS_FN(name, field, type, listed)                                                        \
    DPUCUDA_EXPORT nvmlReturn_t name(nvmlDevice_t h, unsigned int *count, type *infos) {           \
        NEED(field);                                                                               \
        PROCS_BODY(nv.field, type, listed);                                                        \
    }

#define SET_INSTANCE(x) ((x).gpuInstanceId = (x).computeInstanceId = 0xFFFFFFFFu)
PROCS_FN(nvmlDeviceGetComputeRunningProcesses_v3, Procs3, nvmlProcessInfo_t, 1)
PROCS_FN(nvmlDeviceGetComputeRunningProcesses_v2, Procs2, nvmlProcessInfo_t, 1)
PROCS_FN(nvmlDeviceGetGraphicsRunningProcesses_v3, Gfx3, nvmlProcessInfo_t, 0)
PROCS_FN(nvmlDeviceGetGraphicsRunningProcesses_v2, Gfx2, nvmlProcessInfo_t, 0)
PROCS_FN(nvmlDeviceGetMPSComputeRunningProcesses_v3, Mps3, nvmlProcessInfo_t, 0)
PROCS_FN(nvmlDeviceGetMPSComputeRunningProcesses_v2, Mps2, nvmlProcessInfo_t, 0)
#undef SET_INSTANCE

#define SET_INSTANCE(x) ((void)0)
PROCS_FN(nvmlDeviceGetComputeRunningProcesses, Procs1, nvmlProcessInfo_v1_t, 1)
PROCS_FN(nvmlDeviceGetGraphicsRunningProcesses, Gfx1, nvmlProcessInfo_v1_t, 0)
PROCS_FN(nvmlDeviceGetMPSComputeRunningProcesses, Mps1, nvmlProcessInfo_v1_t, 0)
#undef SET_INSTANCE

/* nvmlDeviceGetRunningProcessDetailList (NVML 12.4+, what recent
 * nvidia-smi reads its process table with) answers as the queries above. */
DPUCUDA_EXPORT nvmlReturn_t nvmlDeviceGetRunningProcessDetailList(nvmlDevice_t h, nvmlProcessDetailList_v1_t *list) {
    NEED(DetailList);
    uint64_t limit, used, own;
    struct device *d = device_of(h);
    if (!list || !view(d, &limit, &used, &own))
        return nv.DetailList(h, list);
    struct scope s = {0};
    if (list->mode == NVML_PROCESS_MODE_COMPUTE)
        scope_of(d, own, &s);
    unsigned cap = list->procArray ? list->numProcArrayEntries : 0;
    list->numProcArrayEntries = s.n;
    if (cap < s.n)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    for (unsigned i = 0; i < s.n; i++) {
        memset(&list->procArray[i], 0, sizeof list->procArray[i]);
        list->procArray[i].pid = s.pid[i];
        list->procArray[i].usedGpuMemory = s.bytes[i];
        list->procArray[i].gpuInstanceId = list->procArray[i].computeInstanceId = 0xFFFFFFFFu;
    }
    return NVML_SUCCESS;
}

DPUCUDA_EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t h, nvmlUtilization_t *u) {
    NEED(Utilization);
    nvmlReturn_t r = nv.Utilization(h, u);
    struct device *d = r == NVML_SUCCESS && u ? device_of(h) : NULL;
    if (!d)
        return r;
    agent_refresh(d);
    if (!atomic_load(&d->quota))
        return r;
    uint64_t now = mono_ns(), k = atomic_load(&d->kernel_ns);
    pthread_mutex_lock(&d->umu);
    uint64_t dt = d->util_at ? now - d->util_at : 0, dk = k - d->util_kernel;
    d->util_at = now;
    d->util_kernel = k;
    pthread_mutex_unlock(&d->umu);
    unsigned pct = dt ? (unsigned)(dk * 100 / dt) : 0;
    u->gpu = pct > 100 ? 100 : pct;
    return r;
}

/* ---- for the hook ---- */

#define NVML_VALUE_NOT_AVAILABLE 0xFFFFFFFFFFFFFFFFull /* a figure the driver does not give */

/* nv_handle is NVML's handle of the hook's device d (by its UUID). */
static int nv_handle(struct device *d, nvmlDevice_t *h) {
    static _Atomic int inited; /* 1 ok, -1 failed */
    if (!nv_ready() || !nv.GetHandleByUUID)
        return -1;
    int st = atomic_load(&inited);
    if (st == 0) {
        st = nv.Init && nv.Init() == NVML_SUCCESS ? 1 : -1;
        atomic_store(&inited, st);
    }
    if (st < 0)
        return -1;
    unsigned char u[16];
    pthread_mutex_lock(&d->mu);
    memcpy(u, d->uuid, 16);
    pthread_mutex_unlock(&d->mu);
    char text[48];
    snprintf(text, sizeof text, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1],
             u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
    return nv.GetHandleByUUID(text, h) == NVML_SUCCESS ? 0 : -1;
}

int hook_nvml_used(struct device *d, uint64_t *used) {
    nvmlDevice_t h;
    nvmlMemory_t m;
    if (nv_handle(d, &h) != 0 || !nv.GetMemoryInfo || nv.GetMemoryInfo(h, &m) != NVML_SUCCESS)
        return -1;
    *used = m.used;
    return 0;
}

/* hook_nvml_process_used reads the driver's running-process list (v3, else
 * v2, else v1) and returns this process's entry. */
int hook_nvml_process_used(struct device *d, uint64_t *used) {
    nvmlDevice_t h;
    if (atomic_load(&d->uuid_state) == 0 || nv_handle(d, &h) != 0)
        return -1;
    nvmlReturn_t (*q)(nvmlDevice_t, unsigned int *, nvmlProcessInfo_t *) = nv.Procs3 ? nv.Procs3 : nv.Procs2;
    unsigned me = (unsigned)getpid();
    if (q) {
        nvmlProcessInfo_t small[32], *p = small;
        unsigned n = 32;
        nvmlReturn_t r = q(h, &n, p);
        for (int tries = 0; r == NVML_ERROR_INSUFFICIENT_SIZE && tries < 3; tries++) {
            if (p != small)
                free(p);
            n += 16;
            p = calloc(n, sizeof *p);
            if (!p)
                return -1;
            r = q(h, &n, p);
        }
        int found = r == NVML_SUCCESS ? 0 : -1;
        *used = 0; /* not listed: the driver holds nothing for the process */
        for (unsigned i = 0; r == NVML_SUCCESS && i < n; i++)
            if (p[i].pid == me) {
                *used = p[i].usedGpuMemory;
                found = *used == NVML_VALUE_NOT_AVAILABLE ? -1 : 0;
                break;
            }
        if (p != small)
            free(p);
        return found;
    }
    if (!nv.Procs1)
        return -1;
    nvmlProcessInfo_v1_t p1[64];
    unsigned n = 64;
    if (nv.Procs1(h, &n, p1) != NVML_SUCCESS)
        return -1;
    *used = 0;
    for (unsigned i = 0; i < n; i++)
        if (p1[i].pid == me) {
            *used = p1[i].usedGpuMemory;
            return *used == NVML_VALUE_NOT_AVAILABLE ? -1 : 0;
        }
    return 0;
}

/* hook_nvml_of maps an NVML name to its hook (hook.c's dlsym). */
void *hook_nvml_of(const char *name) {
    static const struct {
        const char *name;
        void *fn;
    } hooks[] = {
        {"nvmlDeviceGetCount", (void *)nvmlDeviceGetCount},
        {"nvmlDeviceGetCount_v2", (void *)nvmlDeviceGetCount_v2},
        {"nvmlDeviceGetHandleByIndex", (void *)nvmlDeviceGetHandleByIndex},
        {"nvmlDeviceGetHandleByIndex_v2", (void *)nvmlDeviceGetHandleByIndex_v2},
        {"nvmlDeviceGetIndex", (void *)nvmlDeviceGetIndex},
        {"nvmlDeviceGetMemoryInfo", (void *)nvmlDeviceGetMemoryInfo},
        {"nvmlDeviceGetMemoryInfo_v2", (void *)nvmlDeviceGetMemoryInfo_v2},
        {"nvmlDeviceGetComputeRunningProcesses", (void *)nvmlDeviceGetComputeRunningProcesses},
        {"nvmlDeviceGetComputeRunningProcesses_v2", (void *)nvmlDeviceGetComputeRunningProcesses_v2},
        {"nvmlDeviceGetComputeRunningProcesses_v3", (void *)nvmlDeviceGetComputeRunningProcesses_v3},
        {"nvmlDeviceGetUtilizationRates", (void *)nvmlDeviceGetUtilizationRates},
        {"nvmlDeviceGetGraphicsRunningProcesses", (void *)nvmlDeviceGetGraphicsRunningProcesses},
        {"nvmlDeviceGetGraphicsRunningProcesses_v2", (void *)nvmlDeviceGetGraphicsRunningProcesses_v2},
        {"nvmlDeviceGetGraphicsRunningProcesses_v3", (void *)nvmlDeviceGetGraphicsRunningProcesses_v3},
        {"nvmlDeviceGetMPSComputeRunningProcesses", (void *)nvmlDeviceGetMPSComputeRunningProcesses},
        {"nvmlDeviceGetMPSComputeRunningProcesses_v2", (void *)nvmlDeviceGetMPSComputeRunningProcesses_v2},
        {"nvmlDeviceGetMPSComputeRunningProcesses_v3", (void *)nvmlDeviceGetMPSComputeRunningProcesses_v3},
        {"nvmlDeviceGetRunningProcessDetailList", (void *)nvmlDeviceGetRunningProcessDetailList},
    };
    for (size_t i = 0; i < sizeof hooks / sizeof hooks[0]; i++)
        if (!strcmp(hooks[i].name, name))
            return hooks[i].fn;
    return NULL;
}
