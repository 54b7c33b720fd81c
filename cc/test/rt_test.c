/*
 * rt_test: the dpu-cc runtime on private and shared memory. Built with
 * dpu-cc; run by go test ./cc/ with DPU_SOCKET (host 1) and
 * DPU_TEST_PEER_SOCKET (host 2) set. Every C11 atomic of every size is
 * applied to private memory and to a dpu_mmap page, the results compared
 * with each other and, for the page, with what the peer host reads through
 * its node. Prints "ok" and exits 0 when everything holds.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "dpu.h"

static int checks;
#define CHECK(cond)                                                                        \
    do {                                                                                   \
        checks++;                                                                          \
        if (!(cond)) {                                                                     \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);       \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

struct cell {
    _Atomic uint64_t u64;
    _Atomic uint32_t u32[2];
    _Atomic uint16_t u16[4];
    _Atomic uint8_t u8[8];
    atomic_flag flag;
    uint64_t plain;
};

/* exercise applies the same sequence of atomics to c and returns a digest
 * of the values the operations returned. */
static uint64_t exercise(struct cell *c) {
    uint64_t h = 0;
#define MIX(v) (h = h * 1000003u ^ (uint64_t)(v))
    MIX(atomic_fetch_add(&c->u64, 5));
    MIX(atomic_fetch_sub(&c->u64, 2));
    MIX(atomic_fetch_or(&c->u64, 0xf0));
    MIX(atomic_fetch_and(&c->u64, 0xff));
    MIX(atomic_fetch_xor(&c->u64, 0x0f));
    MIX(atomic_exchange(&c->u64, 1234567890123ull));
    uint64_t e64 = 1;
    MIX(atomic_compare_exchange_strong(&c->u64, &e64, 7)); /* fails */
    MIX(e64);
    MIX(atomic_compare_exchange_strong(&c->u64, &e64, 7)); /* swaps */
    MIX(atomic_load(&c->u64));
    for (int i = 0; i < 2; i++) {
        MIX(atomic_fetch_add(&c->u32[i], 0xfffffff0u)); /* wraps within its 32 bits */
        MIX(atomic_fetch_add(&c->u32[i], 0x20));
        uint32_t e = 3;
        MIX(atomic_compare_exchange_strong(&c->u32[i], &e, 9));
        MIX(e);
        atomic_store(&c->u32[i], 0xdeadbeefu + (uint32_t)i);
    }
    for (int i = 0; i < 4; i++) {
        MIX(atomic_fetch_add(&c->u16[i], (uint16_t)(0xfff0 + i)));
        MIX(atomic_fetch_add(&c->u16[i], 0x20));
        MIX(atomic_exchange(&c->u16[i], (uint16_t)(100 + i)));
        uint16_t e = (uint16_t)(100 + i);
        MIX(atomic_compare_exchange_weak(&c->u16[i], &e, (uint16_t)(200 + i)));
    }
    for (int i = 0; i < 8; i++) {
        MIX(atomic_fetch_add(&c->u8[i], (uint8_t)(250 + i)));
        MIX(atomic_fetch_or(&c->u8[i], 0x80));
        atomic_store_explicit(&c->u8[i], (uint8_t)(i + 1), memory_order_release);
        MIX(atomic_load_explicit(&c->u8[i], memory_order_acquire));
    }
    MIX(atomic_flag_test_and_set(&c->flag));
    MIX(atomic_flag_test_and_set(&c->flag));
    atomic_flag_clear(&c->flag);
    MIX(atomic_flag_test_and_set(&c->flag));
    c->plain = h;
    atomic_thread_fence(memory_order_seq_cst);
    return h;
}

static struct cell private_cell;

static int adds = 100000;

static void *adder(void *p) {
    _Atomic uint64_t *v = p;
    for (int i = 0; i < adds; i++) atomic_fetch_add_explicit(v, 1, memory_order_relaxed);
    return NULL;
}

int main(void) {
    /* Private memory: native atomics, also across threads. */
    uint64_t want = exercise(&private_cell);
    struct cell after;
    memcpy(&after, &private_cell, sizeof after);
    _Atomic uint64_t *shared_private = &private_cell.u64;
    atomic_store(shared_private, 0);
    pthread_t t[2];
    for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, adder, (void *)shared_private);
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    CHECK(atomic_load(shared_private) == 200000);

    /* A shared page: the same operations at the owner. */
    dpu_t *d, *peer;
    CHECK(dpu_open(getenv("DPU_SOCKET"), &d) == 0);
    CHECK(dpu_open(getenv("DPU_TEST_PEER_SOCKET"), &peer) == 0);
    dpu_gva_t g;
    CHECK(dpu_alloc(d, DPU_PAGE_SIZE, &g) == 0);
    void *page;
    CHECK(dpu_mmap(peer, g, DPU_PAGE_SIZE, PROT_READ | PROT_WRITE, &page) == 0);
    struct cell *c = page;
    CHECK(exercise(c) == want);
    CHECK(c->plain == want); /* a plain read after the fence */

    /* What the node holds equals what private memory holds. */
    uint8_t owner[sizeof(struct cell)];
    CHECK(dpu_load(d, g, owner, sizeof owner) == 0);
    CHECK(memcmp(owner, &after, offsetof(struct cell, plain)) == 0);
    uint64_t plain;
    memcpy(&plain, owner + offsetof(struct cell, plain), 8);
    CHECK(plain == want); /* written back by the fence */

    /* Threads adding to one shared word: every add counted. */
    atomic_store(&c->u64, 0);
    adds = 500;
    for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, adder, (void *)&c->u64);
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    uint64_t sum;
    CHECK(dpu_load64(d, g, &sum) == 0);
    CHECK(sum == 1000);
    CHECK(dpu_munmap(peer, page, DPU_PAGE_SIZE) == 0);
    dpu_close(peer);
    dpu_close(d);
    printf("ok %d checks\n", checks);
    return 0;
}
