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
