/*
 * dpu_bench: latency of libdpu calls against a live server, printed as
 * "name=value" pairs for go test -bench ./hostif/c/ to report.
 *
 *   read64_ns   dpu_read64 of a valid mapped replica (consistent read)
 *   raw_ns      a plain load from the same mapping
 *   cas_p50_ns  dpu_cas64 round trip on an unmapped page, median
 *   cas_mapped_p50_ns  the same on a page this process maps (the server
 *               also rewrites the replica before it replies)
 *   echo_p50_ns bare SOCK_SEQPACKET send+recv of a same-sized message to
 *               $DPU_BENCH_ECHO (a server that sends every message back)
 *
 * DPU_BENCH_N sets the number of round trips (default 20000).
 */
#define _GNU_SOURCE
#include "dpu.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp);
    return v[n / 2];
}

static void die(const char *what, int rc) {
    fprintf(stderr, "%s: %s (%s)\n", what, dpu_strerror(rc), dpu_last_error());
    exit(1);
}

int main(void) {
    int n = getenv("DPU_BENCH_N") ? atoi(getenv("DPU_BENCH_N")) : 20000;
    if (n < 10) n = 10;
    dpu_t *d;
    int rc;
    if ((rc = dpu_open(NULL, &d)) < 0) die("open", rc);
    dpu_gva_t g;
    if ((rc = dpu_alloc(d, DPU_PAGE_SIZE, &g)) < 0) die("alloc", rc);
    if ((rc = dpu_store64(d, dpu_gva_add(g, 64), 42)) < 0) die("store", rc);
    const void *lva;
    if ((rc = dpu_map(d, g, DPU_PAGE_SIZE, &lva)) < 0) die("map", rc);
    const uint8_t *p = (const uint8_t *)lva + 64;

    /* consistent reads of a valid replica */
    const long reads = 20000000;
    uint64_t v = 0, sum = 0;
    double t0 = now_ns();
    for (long i = 0; i < reads; i++) {
        if ((rc = dpu_read64(d, p, &v)) < 0) die("read64", rc);
        sum += v;
    }
    double read_ns = (now_ns() - t0) / (double)reads;
    t0 = now_ns();
    for (long i = 0; i < reads; i++) sum += *(const volatile uint64_t *)(const void *)p;
    double raw_ns = (now_ns() - t0) / (double)reads;
    if (sum != 42ull * 2 * (uint64_t)reads) die("read sum", -1);

    /* CAS round trips: on an unmapped page, then on the mapped one */
    dpu_gva_t plain;
    if ((rc = dpu_alloc(d, DPU_PAGE_SIZE, &plain)) < 0) die("alloc", rc);
    double *lat = malloc(sizeof(double) * (size_t)n);
    double cas = 0, cas_mapped = 0;
    for (int round = 0; round < 2; round++) {
        dpu_gva_t at = round == 0 ? plain : g;
        for (int i = 0; i < n; i++) {
            uint64_t old;
            double s = now_ns();
            if ((rc = dpu_cas64(d, at, (uint64_t)i, (uint64_t)i + 1, &old)) < 0) die("cas", rc);
            lat[i] = now_ns() - s;
            if (old != (uint64_t)i) die("cas value", -1);
        }
        if (round == 0) cas = median(lat, n);
        else cas_mapped = median(lat, n);
    }

    /* bare echo round trips of a CAS-sized message */
    double echo = 0;
    const char *ep = getenv("DPU_BENCH_ECHO");
    if (ep) {
        int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        strncpy(sa.sun_path, ep, sizeof sa.sun_path - 1);
        if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) die("echo connect", -1);
        char msg[48] = {0}, in[64];
        for (int i = 0; i < n; i++) {
            double s = now_ns();
            if (send(fd, msg, sizeof msg, 0) != (ssize_t)sizeof msg || recv(fd, in, sizeof in, 0) <= 0)
                die("echo", -1);
            lat[i] = now_ns() - s;
        }
        echo = median(lat, n);
        close(fd);
    }
    printf("read64_ns=%.2f raw_ns=%.2f cas_p50_ns=%.0f cas_mapped_p50_ns=%.0f echo_p50_ns=%.0f\n", read_ns, raw_ns,
           cas, cas_mapped, echo);
    free(lat);
    dpu_unmap(d, g);
    dpu_free(d, g);
    dpu_free(d, plain);
    dpu_close(d);
    return 0;
}
