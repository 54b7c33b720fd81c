/*
 * trace.c — the call trace of the client's trace build
 * (build/trace/libcuda.so.1, compiled with -finstrument-functions): with
 * DPU_CUDA_REMOTE_TRACE=1 every driver API entry point of this library
 * that the program calls is logged by name when it is entered, so that a
 * library failing on an answer served here (no forwarded call fails) can
 * be followed call by call.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

void __cyg_profile_func_enter(void *fn, void *site) __attribute__((no_instrument_function));
void __cyg_profile_func_exit(void *fn, void *site) __attribute__((no_instrument_function));

static int tracing = -1;

void __cyg_profile_func_enter(void *fn, void *site) {
    (void)site;
    if (tracing < 0) {
        const char *v = getenv("DPU_CUDA_REMOTE_TRACE");
        tracing = v && *v == '1';
    }
    if (!tracing)
        return;
    Dl_info di;
    if (dladdr(fn, &di) && di.dli_sname && di.dli_saddr == fn && di.dli_sname[0] == 'c' && di.dli_sname[1] == 'u')
        fprintf(stderr, "libdpucuda-remote: call %s\n", di.dli_sname);
}

void __cyg_profile_func_exit(void *fn, void *site) { (void)fn, (void)site; }

/* With the trace build preloaded (LD_PRELOAD), the dynamic symbol lookups a
 * program's libraries make are logged too: dlopen of any file, dlsym of
 * driver names (cu...), with whether they were found. */
typedef void *(*dlsym_fn)(void *, const char *);
typedef void *(*dlopen_fn)(const char *, int);
static dlsym_fn real_dlsym(void) __attribute__((no_instrument_function));
static dlsym_fn real_dlsym(void) {
    static dlsym_fn f;
    if (!f)
        f = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
    if (!f)
        f = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
    return f;
}
void *dlsym(void *h, const char *name) __attribute__((no_instrument_function, visibility("default")));
void *dlsym(void *h, const char *name) {
    void *p = real_dlsym()(h, name);
    if (tracing < 0) {
        const char *v = getenv("DPU_CUDA_REMOTE_TRACE");
        tracing = v && *v == '1';
    }
    if (tracing && name[0] == 'c' && name[1] == 'u')
        fprintf(stderr, "libdpucuda-remote: dlsym %s: %s\n", name, p ? "found" : "NOT FOUND");
    return p;
}
void *dlopen(const char *file, int mode) __attribute__((no_instrument_function, visibility("default")));
void *dlopen(const char *file, int mode) {
    static dlopen_fn f;
    if (!f)
        f = (dlopen_fn)dlvsym(RTLD_NEXT, "dlopen", "GLIBC_2.34");
    if (!f)
        f = (dlopen_fn)dlvsym(RTLD_NEXT, "dlopen", "GLIBC_2.2.5");
    void *h = f(file, mode);
    if (tracing < 0) {
        const char *v = getenv("DPU_CUDA_REMOTE_TRACE");
        tracing = v && *v == '1';
    }
    if (tracing)
        fprintf(stderr, "libdpucuda-remote: dlopen %s: %s\n", file ? file : "(self)", h ? "loaded" : "failed");
    return h;
}
