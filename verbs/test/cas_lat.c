/*
 * cas_lat — the baseline for the verbs latency benchmark: dpu_cas64 round
 * trips through libdpu from one node to a word another node owns, the same
 * operation an RC ATOMIC_CMP_AND_SWP becomes.
 *
 *   cas_lat OWNER_SOCKET CLIENT_SOCKET N
 *
 * prints "cas_p50_us=X cas_min_us=Y".
 */
#define _GNU_SOURCE
#include <dpu.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: cas_lat OWNER_SOCKET CLIENT_SOCKET N\n");
        return 2;
    }
    int n = atoi(argv[3]);
    if (n < 1) n = 1;
    dpu_t *owner, *client;
    dpu_gva_t g;
    int rc = dpu_open(argv[1], &owner);
    if (rc == 0) rc = dpu_open(argv[2], &client);
    if (rc == 0) rc = dpu_alloc(owner, DPU_PAGE_SIZE, &g);
    if (rc < 0) {
        fprintf(stderr, "cas_lat: %s (%s)\n", dpu_strerror(rc), dpu_last_error());
        return 1;
    }
    double *t = calloc((size_t)n, sizeof *t);
    uint64_t v = 0, old;
    for (int i = 0; i < n; i++) {
        double t0 = now_us();
        rc = dpu_cas64(client, g, v, v + 1, &old);
        t[i] = now_us() - t0;
        if (rc < 0 || old != v) {
            fprintf(stderr, "cas_lat: cas %d: %s old %llu\n", i, dpu_strerror(rc), (unsigned long long)old);
            return 1;
        }
        v++;
    }
    qsort(t, (size_t)n, sizeof *t, cmp);
    printf("cas_p50_us=%.2f cas_min_us=%.2f\n", t[n / 2], t[0]);
    dpu_free(owner, g);
    dpu_close(client);
    dpu_close(owner);
    free(t);
    return 0;
}
