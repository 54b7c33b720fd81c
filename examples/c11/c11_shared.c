/*
 * c11_shared — ordinary C11 shared-memory code, nothing dpu-specific in it:
 * every party (a process, see shared_page.h) works on one shared area of
 * two pages at once.
 *
 *   - a counter incremented with atomic_fetch_add;
 *   - a spinlock on an atomic_flag, and under it a plain (non-atomic)
 *     counter incremented with ++ and a plain record of the last holder;
 *   - a lock-free (Treiber) stack with atomic_compare_exchange_strong on a
 *     tagged head: every party pushes its own nodes, then pops as many;
 *   - parties 0 and 1 pass messages: 0 writes a plain message, and a plain
 *     block of words on the second page, then stores a round number with
 *     memory_order_release on the first; 1 waits for the round with
 *     memory_order_acquire and must see that message and the whole block
 *     (then acknowledges the same way). Everything else is on the first
 *     page, so atomics and plain writes meet there.
 *
 * The last party to finish checks the exact sequential result: counter and
 * plain counter at PARTIES x ITERATIONS, every stack node popped exactly
 * once, the stack empty. Exit status 0 only if every check held.
 */
#include "shared_page.h" /* first: it sets the feature macros */

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#define POOL 192   /* stack nodes, shared out among the parties */
#define ROUNDS 25  /* message-passing rounds between parties 0 and 1 */
#define WAIT_S 120 /* how long a party waits for the others */

struct page {
    _Atomic uint64_t arrived;  /* start barrier */
    _Atomic uint64_t finished; /* parties done */
    _Atomic uint64_t counter;  /* atomic_fetch_add */
    atomic_flag lock;          /* spinlock */
    uint64_t plain;            /* incremented under the spinlock */
    uint64_t holder;           /* party of the last increment, under the spinlock */
    _Atomic uint64_t head;     /* stack: tag << 32 | (node + 1), 0 when empty */
    _Atomic uint64_t popped;   /* nodes popped, all parties */
    _Atomic uint64_t failures; /* checks that failed, all parties */
    _Atomic uint64_t round;    /* message passing: 0 -> 1 */
    _Atomic uint64_t ack;      /* message passing: 1 -> 0 */
    uint64_t message;          /* plain, published by the release of round */
    _Atomic uint64_t seen[(POOL + 63) / 64]; /* bitmap of popped nodes */
    _Atomic uint64_t next[POOL];             /* stack links */
};
_Static_assert(sizeof(struct page) <= PAGE_BYTES, "one page");

/* The second page: a block written with plain stores before the release. */
#define BLOCK_WORDS 256
struct block {
    uint64_t word[BLOCK_WORDS];
};
_Static_assert(sizeof(struct block) <= PAGE_BYTES, "one page");

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static int wait_for(_Atomic uint64_t *v, uint64_t want, const char *what) {
    double give_up = now() + WAIT_S;
    while (atomic_load_explicit(v, memory_order_acquire) < want) {
        if (now() > give_up) {
            fprintf(stderr, "c11_shared: gave up waiting for %s\n", what);
            return -1;
        }
        struct timespec pause = {0, 200000};
        nanosleep(&pause, NULL);
    }
    return 0;
}

static void push(struct page *s, uint64_t node) {
    uint64_t h = atomic_load(&s->head);
    do {
        atomic_store_explicit(&s->next[node], h & 0xffffffffu, memory_order_relaxed);
    } while (!atomic_compare_exchange_strong(&s->head, &h, ((h >> 32) + 1) << 32 | (node + 1)));
}

/* pop returns a node, or -1 when the stack is empty. */
static long pop(struct page *s) {
    uint64_t h = atomic_load(&s->head);
    for (;;) {
        if ((h & 0xffffffffu) == 0) return -1;
        uint64_t node = (h & 0xffffffffu) - 1;
        uint64_t next = atomic_load_explicit(&s->next[node], memory_order_relaxed);
        if (atomic_compare_exchange_strong(&s->head, &h, ((h >> 32) + 1) << 32 | next)) return (long)node;
    }
}

static int party(void *mem, void *second, long me, long parties, long iterations) {
    struct page *s = mem;
    struct block *blk = second;
    long per = POOL / parties;
    int bad = 0;
    if (parties < 1 || parties > 8 || me >= parties) {
        fprintf(stderr, "c11_shared: party %ld of %ld: want 1..8 parties\n", me, parties);
        return 2;
    }
    atomic_fetch_add(&s->arrived, 1);
    if (wait_for(&s->arrived, (uint64_t)parties, "the others to arrive") < 0) return 1;
    double start = now();

    for (long i = 0; i < iterations; i++) {
        atomic_fetch_add(&s->counter, 1);
        while (atomic_flag_test_and_set_explicit(&s->lock, memory_order_acquire)) {
        }
        s->plain++;
        s->holder = (uint64_t)me;
        atomic_flag_clear_explicit(&s->lock, memory_order_release);
    }

    for (long i = 0; i < per; i++) push(s, (uint64_t)(me * per + i));
    double give_up = now() + WAIT_S;
    for (long got = 0; got < per;) {
        long node = pop(s);
        if (node < 0) {
            if (now() > give_up) {
                fprintf(stderr, "c11_shared: party %ld: stack empty for too long\n", me);
                return 1;
            }
            continue;
        }
        uint64_t bit = (uint64_t)1 << (node % 64);
        if (atomic_fetch_or(&s->seen[node / 64], bit) & bit) {
            fprintf(stderr, "c11_shared: party %ld: node %ld popped twice\n", me, node);
            bad++;
        }
        atomic_fetch_add(&s->popped, 1);
        got++;
    }

    if (parties >= 2 && me <= 1) {
        for (uint64_t r = 1; r <= ROUNDS; r++) {
            if (me == 0) {
                s->message = 0xC0FFEE00u + r;
                for (int w = 0; w < BLOCK_WORDS; w++) blk->word[w] = r * 1000 + (uint64_t)w;
                atomic_store_explicit(&s->round, r, memory_order_release);
                if (wait_for(&s->ack, r, "the acknowledgement") < 0) return 1;
            } else {
                if (wait_for(&s->round, r, "the next round") < 0) return 1;
                if (s->message != 0xC0FFEE00u + r) {
                    fprintf(stderr, "c11_shared: round %llu: message %#llx after the acquire\n",
                            (unsigned long long)r, (unsigned long long)s->message);
                    bad++;
                }
                for (int w = 0; w < BLOCK_WORDS; w++) {
                    if (blk->word[w] != r * 1000 + (uint64_t)w) {
                        fprintf(stderr, "c11_shared: round %llu: word %d of the second page is %llu after the acquire\n",
                                (unsigned long long)r, w, (unsigned long long)blk->word[w]);
                        bad++;
                        break;
                    }
                }
                atomic_store_explicit(&s->ack, r, memory_order_release);
            }
        }
    }
    double took = now() - start;
    if (bad) atomic_fetch_add(&s->failures, (uint64_t)bad);
    printf("c11_shared: party %ld: %ld iterations, %ld nodes pushed and popped in %.3f s\n", me, iterations, per,
           took);

    if (atomic_fetch_add(&s->finished, 1) + 1 != (uint64_t)parties) return bad ? 1 : 0;
    /* The last to finish checks the whole page. */
    uint64_t want = (uint64_t)(parties * iterations), counter = atomic_load(&s->counter);
    while (atomic_flag_test_and_set_explicit(&s->lock, memory_order_acquire)) {
    }
    uint64_t plain = s->plain;
    atomic_flag_clear_explicit(&s->lock, memory_order_release);
    long missing = 0;
    for (long n = 0; n < per * parties; n++)
        if (!(atomic_load(&s->seen[n / 64]) & ((uint64_t)1 << (n % 64)))) missing++;
    uint64_t failures = atomic_load(&s->failures), popped = atomic_load(&s->popped);
    int ok = counter == want && plain == want && missing == 0 && popped == (uint64_t)(per * parties) &&
             (atomic_load(&s->head) & 0xffffffffu) == 0 && failures == 0;
    printf("c11_shared: %s: counter %llu, plain %llu (want %llu), %llu popped, %ld never popped, %llu failed "
           "checks\n",
           ok ? "verified" : "WRONG", (unsigned long long)counter, (unsigned long long)plain,
           (unsigned long long)want, (unsigned long long)popped, missing, (unsigned long long)failures);
    return ok ? 0 : 1;
}
