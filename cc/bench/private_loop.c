/*
 * private_loop: a memory-bound loop on private memory (two 64 MiB arrays,
 * a[i] = a[i] * 3 + b[i], streaming), to compare the same source built
 * plain, with dpu-cc (gcc; clang without and with -dpu-access-hooks) and with the
 * real ThreadSanitizer. Prints ns_per_element=... and a checksum.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define N (8u << 20) /* 8 Mi elements of 8 bytes per array */
#define REPS 6

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void step(uint64_t *a, const uint64_t *b, size_t n) {
    for (size_t i = 0; i < n; i++) a[i] = a[i] * 3 + b[i];
}

int main(void) {
    uint64_t *a = malloc(N * sizeof *a), *b = malloc(N * sizeof *b);
    if (!a || !b) return 1;
    for (size_t i = 0; i < N; i++) {
        a[i] = i;
        b[i] = i ^ 0x5555;
    }
    step(a, b, N); /* warm */
    double best = 1e9;
    for (int r = 0; r < REPS; r++) {
        double t0 = now();
        step(a, b, N);
        double t = now() - t0;
        if (t < best) best = t;
    }
    uint64_t sum = 0;
    for (size_t i = 0; i < N; i += 4096) sum += a[i];
    printf("ns_per_element=%.3f checksum=%llu\n", best * 1e9 / N, (unsigned long long)sum);
    return 0;
}
