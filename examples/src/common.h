/*
 * common.h — what the examples share: argument parsing, a start barrier
 * and a clock. Not part of libdpu.
 */
#ifndef EXAMPLES_COMMON_H
#define EXAMPLES_COMMON_H

#define _POSIX_C_SOURCE 200809L
#include "dpu.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DEFAULT_ITERATIONS 10000
#define DEFAULT_PARTIES 2
#define BARRIER_WAIT_MS 60000 /* how long a process waits for the others */

struct example_args {
    dpu_gva_t counter; /* the shared 64-bit counter */
    dpu_gva_t barrier; /* the word after it: processes that have arrived */
    long iterations;
    long parties;
};

/* increments_done is how far the loop got, for the failure message (-1:
 * not started). */
static long increments_done = -1;

static void die(const char *prog, const char *what, int rc) {
    fprintf(stderr, "%s: %s: %s (%s)", prog, what, dpu_strerror(rc), dpu_last_error());
    if (increments_done >= 0) fprintf(stderr, " after %ld increments", increments_done);
    fputc('\n', stderr);
    exit(1);
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static long parse_count(const char *prog, const char *what, const char *s) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 0);
    if (errno != 0 || *end != '\0' || v < 1) {
        fprintf(stderr, "%s: %s %s: want a positive number\n", prog, what, s);
        exit(2);
    }
    return v;
}

/* parse_args reads GVA [ITERATIONS [PARTIES]]. */
static struct example_args parse_args(int argc, char **argv, const char *usage) {
    struct example_args a = {.iterations = DEFAULT_ITERATIONS, .parties = DEFAULT_PARTIES};
    if (argc < 2 || argc > 4) {
        fprintf(stderr, "usage: %s %s\n", argv[0], usage);
        exit(2);
    }
    int rc = dpu_gva_parse(argv[1], &a.counter);
    if (rc < 0) {
        fprintf(stderr, "%s: %s: not a GVA (want gva: and 32 hex digits)\n", argv[0], argv[1]);
        exit(2);
    }
    if (a.counter.lo % 8 != 0 || a.counter.lo % DPU_PAGE_SIZE > DPU_PAGE_SIZE - 16) {
        fprintf(stderr, "%s: %s: the counter must be 8-byte aligned with 8 more bytes in its page\n", argv[0],
                argv[1]);
        exit(2);
    }
    a.barrier = dpu_gva_add(a.counter, 8);
    if (argc > 2) a.iterations = parse_count(argv[0], "iterations", argv[2]);
    if (argc > 3) a.parties = parse_count(argv[0], "parties", argv[3]);
    return a;
}

/* barrier: count this process in, then wait (bounded) until all parties
 * have arrived, so that their increments overlap. */
static void barrier(const char *prog, dpu_t *d, const struct example_args *a) {
    uint64_t seen;
    int rc = dpu_fetch_add64(d, a->barrier, 1, &seen);
    if (rc < 0) die(prog, "barrier fetch-add", rc);
    seen++; /* fetch-add returned the count before ours */
    double give_up = now_s() + BARRIER_WAIT_MS / 1000.0;
    while (seen < (uint64_t)a->parties) {
        if (now_s() > give_up) {
            fprintf(stderr, "%s: only %llu of %ld processes arrived within %d ms\n", prog,
                    (unsigned long long)seen, a->parties, BARRIER_WAIT_MS);
            exit(1);
        }
        struct timespec pause = {0, 1000000};
        nanosleep(&pause, NULL);
        if ((rc = dpu_load64(d, a->barrier, &seen)) < 0) die(prog, "barrier load", rc);
    }
}

#endif /* EXAMPLES_COMMON_H */
