/*
 * counter_lock — increment a shared counter under a page lock.
 *
 *   counter_lock GVA [ITERATIONS [PARTIES]]
 *
 * The same counter and start barrier as counter_cas, but each increment is
 * a plain read-modify-write — load, add 1, store — made safe by holding the
 * page's lock around it (dpu_lock / dpu_unlock: ownership of the page plus a
 * pin). The lock moves the page to this node, so the load and the store are
 * served here; the next locker on another node takes the page, with its
 * content, when this one unlocks. Once all PARTIES processes have finished,
 * the counter has grown by exactly PARTIES x ITERATIONS.
 *
 * A pin is bounded by the agent (100 ms by default): a lock held longer is
 * revoked and dpu_unlock fails with EPERM. This program then stops with an
 * error, because its increment may have raced with another process's.
 */
#include "common.h"

int main(int argc, char **argv) {
    struct example_args a = parse_args(argc, argv, "GVA [ITERATIONS [PARTIES]]");
    dpu_t *d;
    int rc = dpu_open(NULL, &d);
    if (rc < 0) die(argv[0], "open", rc);
    barrier(argv[0], d, &a);

    uint64_t v = 0;
    double start = now_s();
    for (increments_done = 0; increments_done < a.iterations; increments_done++) {
        if ((rc = dpu_lock(d, a.counter)) < 0) die(argv[0], "lock", rc);
        if ((rc = dpu_load64(d, a.counter, &v)) < 0) die(argv[0], "load", rc);
        if ((rc = dpu_store64(d, a.counter, v + 1)) < 0) die(argv[0], "store", rc);
        if ((rc = dpu_unlock(d, a.counter)) < 0) {
            if (rc == -EPERM)
                die(argv[0], "unlock (the lock was revoked while held: this increment may have raced)", rc);
            die(argv[0], "unlock", rc);
        }
    }
    double took = now_s() - start;
    printf("counter_lock: %ld increments, %.3f s (%.1f us each), counter %llu after my last\n", a.iterations, took,
           took * 1e6 / (double)a.iterations, (unsigned long long)(v + 1));
    dpu_close(d);
    return 0;
}
