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
 * kernel US, launch N [plain|ex|coop], sync, sleep MS, next, pid,
 * threads T N BYTES (T threads allocating and freeing BYTES N times each:
 * "ok ALLOCATED REFUSED"), fork BYTES (a child allocates BYTES, holds them
 * 300 ms and exits: "ok CHILDPID"), wait PID, exit.
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
CUresult cuModuleGetFunction(CUfunction *, CUmodule, const char *);
CUresult cuLaunchKernel(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                        void **, void **);
CUresult cuLaunchKernelEx(const CUlaunchConfig *, CUfunction, void **, void **);
CUresult cuLaunchCooperativeKernel(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                   CUstream, void **);
CUresult cuGetProcAddress(const char *, void **, int, cuuint64_t);
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
    CUresult (*ModuleGetFunction)(CUfunction *, CUmodule, const char *);
    CUresult (*LaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             CUstream, void **, void **);
    CUresult (*LaunchKernelEx)(const CUlaunchConfig *, CUfunction, void **, void **);
    CUresult (*LaunchCooperativeKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                        unsigned, CUstream, void **);
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
    LINK(ModuleGetFunction, cuModuleGetFunction);
    LINK(LaunchKernel, cuLaunchKernel);
    LINK(LaunchKernelEx, cuLaunchKernelEx);
    LINK(LaunchCooperativeKernel, cuLaunchCooperativeKernel);
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
    SYM(ModuleGetFunction, "cuModuleGetFunction");
    SYM(LaunchKernel, "cuLaunchKernel");
    SYM(LaunchKernelEx, "cuLaunchKernelEx");
    SYM(LaunchCooperativeKernel, "cuLaunchCooperativeKernel");
#undef SYM
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
    PROC(CtxCreate, "cuCtxCreate");
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
    PROC(ModuleGetFunction, "cuModuleGetFunction");
    PROC(LaunchKernel, "cuLaunchKernel");
    PROC(LaunchKernelEx, "cuLaunchKernelEx");
    PROC(LaunchCooperativeKernel, "cuLaunchCooperativeKernel");
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
