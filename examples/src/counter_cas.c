/*
 * counter_cas — increment a shared counter with atomic_cas_remote.
 *
 *   counter_cas GVA [ITERATIONS [PARTIES]]
 *
 * GVA is a 64-bit counter in the global address space (from
 * "dpuctl mem alloc"); the word after it is a start barrier. Every one of
 * PARTIES processes (default 2), on any nodes, runs this with the same GVA:
 * each counts itself in at the barrier, waits for the others, then adds 1
 * to the counter ITERATIONS times (default 10000) with compare-and-swap at
 * the page's owner, retrying with the value the CAS found when another
 * process got there first. No increment is lost: once all have finished
 * the counter has grown by exactly PARTIES x ITERATIONS.
 *
 * The node is the one whose socket $DPU_SOCKET names (else
 * $DPU_RUN_DIR/dpu0.sock, else /run/dpu/dpu0.sock). It prints one line:
 * increments, retries, time, and the value after its last increment.
 */
#include "common.h"

int main(int argc, char **argv) {
    struct example_args a = parse_args(argc, argv, "GVA [ITERATIONS [PARTIES]]");
    dpu_t *d;
    int rc = dpu_open(NULL, &d);
    if (rc < 0) die(argv[0], "open", rc);
    barrier(argv[0], d, &a);

    uint64_t expected = 0, retries = 0;
    double start = now_s();
    increments_done = 0;
    while (increments_done < a.iterations) {
        errno = 0; /* atomic_cas_remote returns 0 and sets errno on failure */
        uint64_t old = atomic_cas_remote(a.counter, expected, expected + 1);
        if (old == 0 && errno != 0) die(argv[0], "atomic_cas_remote", -errno);
        if (old == expected) {
            increments_done++;
            expected++;
        } else {
            retries++;
            expected = old; /* another process moved it: try from there */
        }
    }
    double took = now_s() - start;
    printf("counter_cas: %ld increments, %llu retries, %.3f s (%.1f us each), counter %llu after my last\n",
           a.iterations, (unsigned long long)retries, took, took * 1e6 / (double)a.iterations,
           (unsigned long long)expected);
    dpu_close(d);
    return 0;
}
