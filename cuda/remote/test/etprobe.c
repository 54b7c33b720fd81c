/*
 * etprobe — describes the driver's private export tables: for each UUID
 * given, whether the driver (libcuda.so.1 as the loader finds it) serves
 * it, the size its first entry gives, and each entry that is an exported
 * driver function. Run on a GPU machine beside the client, to compare.
 *
 *   etprobe UUID...     (UUID as 32 hex digits, dashes allowed)
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

typedef int (*init_fn)(unsigned);
typedef int (*table_fn)(const void **, const void *);

static int parse(const char *s, unsigned char out[16]) {
    int n = 0;
    for (; *s && n < 32; s++) {
        if (*s == '-')
            continue;
        unsigned v;
        if (sscanf(s, "%1x", &v) != 1)
            return -1;
        if (n % 2 == 0)
            out[n / 2] = (unsigned char)(v << 4);
        else
            out[n / 2] |= (unsigned char)v;
        n++;
    }
    return n == 32 ? 0 : -1;
}

int main(int argc, char **argv) {
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        printf("error=%s\n", dlerror());
        return 2;
    }
    init_fn init = (init_fn)dlsym(h, "cuInit");
    table_fn get = (table_fn)dlsym(h, "cuGetExportTable");
    if (!init || !get || init(0) != 0) {
        printf("error=no driver\n");
        return 2;
    }
    Dl_info self;
    dladdr((void *)get, &self);
    printf("driver=%s\n", self.dli_fname);
    for (int i = 1; i < argc; i++) {
        unsigned char id[16];
        if (parse(argv[i], id) < 0) {
            printf("table %s: bad uuid\n", argv[i]);
            continue;
        }
        const void *t = NULL;
        int r = get(&t, id);
        if (r != 0 || !t) {
            printf("table %s: result %d\n", argv[i], r);
            continue;
        }
        const uintptr_t *e = t;
        uintptr_t size = e[0];
        int n = size % sizeof(void *) == 0 && size >= 8 && size <= 4096 ? (int)(size / sizeof(void *)) : 0;
        printf("table %s: served, first entry %#lx (%d entries if a size)\n", argv[i], (unsigned long)size, n);
        for (int j = 0; j < (n ? n : 8); j++) {
            Dl_info di;
            const char *what = "";
            if (e[j] && dladdr((void *)e[j], &di) && di.dli_sname && di.dli_saddr == (void *)e[j])
                what = di.dli_sname;
            else if (e[j] && dladdr((void *)e[j], &di) && di.dli_fname && strcmp(di.dli_fname, self.dli_fname) == 0)
                what = "(in the driver)";
            printf("  entry %d: %s%s\n", j, e[j] ? "" : "NULL ", what);
        }
    }
    return 0;
}
