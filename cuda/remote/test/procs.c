/*
 * procs — asks a libcuda.so.1 (the client library) for entry points through
 * cuGetProcAddress_v2, as a CUDA runtime does: reads "NAME VERSION" lines
 * and prints "NAME VERSION served|missing".
 *
 *   procs LIB < lines
 */
#include <dlfcn.h>
#include <stdio.h>

typedef int (*gpa_fn)(const char *, void **, int, unsigned long long, int *);

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: procs LIB < lines\n");
        return 2;
    }
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "%s\n", dlerror());
        return 2;
    }
    gpa_fn gpa = (gpa_fn)dlsym(h, "cuGetProcAddress_v2");
    if (!gpa) {
        fprintf(stderr, "no cuGetProcAddress_v2\n");
        return 2;
    }
    char line[256], name[128];
    int version;
    while (fgets(line, sizeof line, stdin)) {
        if (line[0] == '#' || sscanf(line, "%127s %d", name, &version) != 2)
            continue;
        void *fn = NULL;
        int status = -1;
        int r = gpa(name, &fn, version, 0, &status);
        printf("%s %d %s\n", name, version, r == 0 && fn && status == 0 ? "served" : "missing");
    }
    return 0;
}
