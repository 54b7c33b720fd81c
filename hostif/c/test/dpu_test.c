/*
 * dpu_test: exercises every call of libdpu against a live server.
 *
 * Run by go test ./hostif/c/ with DPU_SOCKET (host 1) and
 * DPU_TEST_PEER_SOCKET (host 2, sharing host 1's memory) set. Prints "ok"
 * and exits 0 when everything holds; names the failing check otherwise.
 */
#define _GNU_SOURCE
#include "dpu.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int checks;

#define CHECK(cond)                                                                      \
    do {                                                                                 \
        checks++;                                                                        \
        if (!(cond)) {                                                                   \
            fprintf(stderr, "%s:%d: check failed: %s (last error: %s)\n", __FILE__,      \
                    __LINE__, #cond, dpu_last_error());                                  \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)

#define OK(call)                                                                         \
    do {                                                                                 \
        int rc_ = (call);                                                                \
        checks++;                                                                        \
        if (rc_ != 0) {                                                                  \
            fprintf(stderr, "%s:%d: %s = %d (%s; %s)\n", __FILE__, __LINE__, #call, rc_, \
                    dpu_strerror(rc_), dpu_last_error());                                \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)

#define FAILS(call, err) CHECK((call) == -(err))

static void sleep_ms(int ms) {
    struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

static void test_gva_text(void) {
    dpu_gva_t g = {0x0000000700000001ull, 0x0000000000001008ull}, back;
    char buf[DPU_GVA_TEXT_LEN + 1];
    OK(dpu_gva_format(g, buf, sizeof buf));
    CHECK(strcmp(buf, "gva:00000007000000010000000000001008") == 0);
    OK(dpu_gva_parse(buf, &back));
    CHECK(back.hi == g.hi && back.lo == g.lo);
    OK(dpu_gva_parse("gva:ABCDEF00000000000000000000000001", &back));
    CHECK(back.hi == 0xabcdef0000000000ull && back.lo == 1);
    FAILS(dpu_gva_format(g, buf, 36), ERANGE);
    FAILS(dpu_gva_parse("gva:0000000700000001000000000000100", &back), EINVAL);
    FAILS(dpu_gva_parse("gva:000000070000000100000000000010080", &back), EINVAL);
    FAILS(dpu_gva_parse("GVA:00000007000000010000000000001008", &back), EINVAL);
    FAILS(dpu_gva_parse("gva:0000000700000001000000000000100g", &back), EINVAL);
    FAILS(dpu_gva_parse(NULL, &back), EINVAL);
    CHECK(strcmp(dpu_strerror(-EACCES), "permission denied") == 0);
    CHECK(strcmp(dpu_strerror(ETIMEDOUT), "timed out") == 0);
    CHECK(strcmp(dpu_strerror(-99999), "unknown error") == 0);
    CHECK(dpu_gva_add(g, 8).lo == 0x1010);
}

struct adder {
    dpu_t *d;
    dpu_gva_t word, cas_word;
    int n;
    int err;
};

/* Threads share one connection for fetch-add, and use their own default
 * connection (atomic_cas_remote) for a CAS loop. */
static void *add_thread(void *p) {
    struct adder *a = p;
    for (int i = 0; i < a->n; i++) {
        uint64_t old;
        int rc = dpu_fetch_add64(a->d, a->word, 1, &old);
        if (rc < 0) {
            a->err = rc;
            return NULL;
        }
        uint64_t expected = 0, seen;
        for (;;) {
            errno = 0;
            seen = atomic_cas_remote(a->cas_word, expected, expected + 1);
            if (errno != 0) {
                a->err = -errno;
                return NULL;
            }
            if (seen == expected) break;
            expected = seen;
        }
    }
    return NULL;
}

/* A bulk mover stores its own pattern over its pages of a shared extent
 * through one connection, loads it back and compares, several rounds. */
struct mover {
    dpu_t *d;
    dpu_gva_t at;
    size_t len;
    uint8_t seed;
    int err, bad;
};

static void *move_thread(void *p) {
    struct mover *m = p;
    uint8_t *out = malloc(m->len), *in = malloc(m->len);
    if (!out || !in) {
        m->err = -ENOMEM;
        free(out);
        free(in);
        return NULL;
    }
    for (int round = 0; round < 4 && m->err == 0 && !m->bad; round++) {
        for (size_t i = 0; i < m->len; i++) out[i] = (uint8_t)(i * 31 + m->seed + round);
        memset(in, 0, m->len);
        if ((m->err = dpu_store(m->d, m->at, out, m->len)) == 0 && (m->err = dpu_load(m->d, m->at, in, m->len)) == 0)
            m->bad = memcmp(out, in, m->len) != 0;
    }
    free(out);
    free(in);
    return NULL;
}

int main(void) {
    const char *peer_path = getenv("DPU_TEST_PEER_SOCKET");
    if (!getenv("DPU_SOCKET") || !peer_path) {
        fprintf(stderr, "set DPU_SOCKET and DPU_TEST_PEER_SOCKET\n");
        return 2;
    }
    test_gva_text();

    dpu_t *bad;
    CHECK(dpu_open("/nonexistent/dpu0.sock", &bad) == -ENOENT && bad == NULL);

    dpu_t *d, *d2, *peer;
    OK(dpu_open(NULL, &d)); /* $DPU_SOCKET */
    OK(dpu_open(getenv("DPU_SOCKET"), &d2));
    OK(dpu_open(peer_path, &peer));
    CHECK(dpu_machine(d) == 1 && dpu_machine(peer) == 2);
    dpu_set_timeout(d, 10000);

    /* alloc, load, store, atomics */
    dpu_gva_t g, g2;
    OK(dpu_alloc(d, 3 * DPU_PAGE_SIZE - 100, &g));
    CHECK(g.lo % DPU_PAGE_SIZE == 0 && (g.hi & 0xffffffffu) == 1);
    OK(dpu_alloc_mode(d, 1, 0644, &g2));
    uint64_t v = 1;
    OK(dpu_store64(d, g, 0x1122334455667788ull));
    OK(dpu_load64(d, g, &v));
    CHECK(v == 0x1122334455667788ull);
    uint8_t big[6000], back[6000];
    for (size_t i = 0; i < sizeof big; i++) big[i] = (uint8_t)(i * 13 + 1);
    OK(dpu_store(d, dpu_gva_add(g, 1000), big, sizeof big)); /* spans pages 0..1 */
    OK(dpu_load(d, dpu_gva_add(g, 1000), back, sizeof back));
    CHECK(memcmp(big, back, sizeof big) == 0);
    dpu_gva_t w = dpu_gva_add(g, 2 * DPU_PAGE_SIZE + 64);
    uint64_t old = 99;
    OK(dpu_cas64(d, w, 0, 10, &old));
    CHECK(old == 0);
    OK(dpu_cas64(d, w, 0, 20, &old));
    CHECK(old == 10);
    OK(dpu_fetch_add64(d, w, 5, &old));
    CHECK(old == 10);
    OK(dpu_load64(d, w, &v));
    CHECK(v == 15);
    FAILS(dpu_cas64(d, dpu_gva_add(w, 4), 0, 1, &old), EINVAL);
    CHECK(strlen(dpu_last_error()) > 0);
    FAILS(dpu_fetch_add64(d, dpu_gva_add(w, 1), 1, &old), EINVAL);

    /* the seed's form */
    errno = 0;
    CHECK(atomic_cas_remote(w, 15, 16) == 15 && errno == 0);
    CHECK(atomic_cas_remote(w, 15, 17) == 16 && errno == 0);
    errno = 0;
    CHECK(atomic_cas_remote(dpu_gva_add(w, 3), 0, 1) == 0 && errno == EINVAL);

    /* where */
    int tier = -1, hops = -1;
    OK(dpu_where(d, w, &tier, &hops));
    CHECK(tier == DPU_TIER_MACHINE && hops == 0);
    OK(dpu_where(peer, w, &tier, &hops));
    CHECK(tier == DPU_TIER_NEIGHBOUR && hops == 1);
    dpu_location_t loc;
    OK(dpu_locate(d, w, &loc));
    CHECK(loc.owner == 1 && loc.speed == DPU_SPEED_MEMORY && loc.version >= 3);

    /* the cluster clock: both hosts read one clock, which moves on */
    dpu_clock_t c1 = dpu_clock(d), c2 = dpu_clock(peer), c3 = dpu_clock(d);
    CHECK(c1.error >= 0 && c2.error >= 0 && c3.error >= 0);
    CHECK(c1.time <= c2.time + c2.error + c1.error && c2.time <= c3.time + c3.error + c2.error);
    CHECK(c1.time < c3.time && c1.ref == c3.ref);

    /* map: raw reads cost a load, library reads are consistent */
    const void *lva = NULL;
    OK(dpu_subscribe(d, DPU_EVENTS_ALL));
    OK(dpu_map(d, g, 3 * DPU_PAGE_SIZE, &lva));
    const uint8_t *mem = lva;
    CHECK(memcmp(mem + 1000, big, sizeof big) == 0);
    OK(dpu_read64(d, mem + 2 * DPU_PAGE_SIZE + 64, &v));
    CHECK(v == 16);
    memset(back, 0, sizeof back);
    OK(dpu_read(d, mem + 1000, back, sizeof back));
    CHECK(memcmp(big, back, sizeof big) == 0);
    OK(dpu_where(d, w, &tier, &hops));
    CHECK(tier == DPU_TIER_LOCAL);
    dpu_gva_t t;
    OK(dpu_translate_lva(d, mem + DPU_PAGE_SIZE + 17, &t));
    CHECK(t.hi == g.hi && t.lo == g.lo + DPU_PAGE_SIZE + 17);
    const void *l2 = NULL;
    OK(dpu_translate_gva(d, w, &l2));
    CHECK(l2 == mem + 2 * DPU_PAGE_SIZE + 64);
    FAILS(dpu_read64(d, mem + 3, &v), EFAULT);
    FAILS(dpu_read64(d, &v, &v), EFAULT);

    /* writes acknowledged on this host are in the mapping at once */
    for (uint64_t i = 0; i < 100; i++) {
        dpu_t *writer = (i & 1) ? d2 : d;
        OK(dpu_store64(writer, dpu_gva_add(g, 8 * (i % 16)), i * 7 + 1));
        const volatile uint64_t *raw = (const volatile uint64_t *)(const void *)(mem + 8 * (i % 16));
        CHECK(*raw == i * 7 + 1);
        OK(dpu_read64(d, mem + 8 * (i % 16), &v));
        CHECK(v == i * 7 + 1);
    }

    /* writes through another host reach the mapping: small ones as
     * updates, large ones as invalidations (re-fetched by reads) */
    OK(dpu_store64(peer, dpu_gva_add(g, 256), 0xfeed));
    dpu_event_t ev;
    int updated = 0;
    for (int i = 0; i < 200 && !updated; i++) {
        OK(dpu_next_event(d, &ev, 5000));
        updated = ev.type == DPU_EVENT_UPDATED && ev.page.lo == g.lo && ev.offset == 256 && ev.length == 8;
    }
    CHECK(updated);
    CHECK(*(const volatile uint64_t *)(const void *)(mem + 256) == 0xfeed);
    uint8_t page1[DPU_PAGE_SIZE];
    memset(page1, 0xa5, sizeof page1);
    OK(dpu_store(peer, dpu_gva_add(g, DPU_PAGE_SIZE), page1, sizeof page1));
    int invalidated = 0;
    for (int i = 0; i < 200 && !invalidated; i++) {
        OK(dpu_next_event(d, &ev, 5000));
        invalidated = ev.type == DPU_EVENT_INVALIDATED && ev.page.lo == g.lo + DPU_PAGE_SIZE;
    }
    CHECK(invalidated);
    OK(dpu_read(d, mem + DPU_PAGE_SIZE, back, DPU_PAGE_SIZE));
    CHECK(memcmp(back, page1, DPU_PAGE_SIZE) == 0);
    int refetched = 0;
    for (int i = 0; i < 2000 && !refetched; i++) {
        refetched = memcmp(mem + DPU_PAGE_SIZE, page1, DPU_PAGE_SIZE) == 0;
        if (!refetched) sleep_ms(1);
    }
    CHECK(refetched);
    FAILS(dpu_next_event(d2, &ev, 10), ETIMEDOUT);

    /* locks: per host, bounded, and across hosts */
    OK(dpu_lock(d, g2));
    FAILS(dpu_trylock(d2, g2), EBUSY);
    FAILS(dpu_lock_timeout(d2, g2, 50), ETIMEDOUT);
    FAILS(dpu_lock_timeout(peer, g2, 50), ETIMEDOUT);
    FAILS(dpu_unlock(d2, g2), EPERM);
    FAILS(dpu_lock(d, g2), EDEADLK);
    OK(dpu_unlock(d, g2));
    OK(dpu_lock(peer, g2));
    OK(dpu_where(d, g2, &tier, &hops));
    CHECK(tier == DPU_TIER_NEIGHBOUR && hops == 1);
    OK(dpu_unlock(peer, g2));
    OK(dpu_acquire(d, g2, 0));
    OK(dpu_release(d, g2));
    FAILS(dpu_release(d, g2), EPERM);

    /* unmap and free */
    FAILS(dpu_free(d, g), EBUSY);
    FAILS(dpu_unmap(d, g2), EINVAL);
    OK(dpu_unmap(d, g));
    FAILS(dpu_translate_lva(d, mem, &t), ENOENT);
    FAILS(dpu_read64(d, mem, &v), EFAULT);
    OK(dpu_map(d, g, 1, &lva)); /* the region is reused */
    OK(dpu_read64(d, lva, &v));
    CHECK(v == 96 * 7 + 1); /* the last of the writes above to offset 0 */
    OK(dpu_unmap(d, g));
    OK(dpu_free(d, g));
    FAILS(dpu_load64(d, g, &v), ENOENT);
    FAILS(dpu_free(d, g), ENOENT);

    /* multi-page transfers: many pages in flight, unaligned ends, from a
     * host one hop away, and several threads on one connection */
    enum { BULK_PAGES = 40 };
    dpu_gva_t bulk;
    OK(dpu_alloc(d, BULK_PAGES * DPU_PAGE_SIZE, &bulk));
    size_t blen = BULK_PAGES * DPU_PAGE_SIZE - 300;
    uint8_t *bout = malloc(BULK_PAGES * DPU_PAGE_SIZE), *bin = malloc(BULK_PAGES * DPU_PAGE_SIZE);
    CHECK(bout && bin);
    for (size_t i = 0; i < blen; i++) bout[i] = (uint8_t)(i * 7 + 3);
    OK(dpu_store(peer, dpu_gva_add(bulk, 100), bout, blen));
    memset(bin, 0, blen);
    OK(dpu_load(d, dpu_gva_add(bulk, 100), bin, blen));
    CHECK(memcmp(bout, bin, blen) == 0);
    memset(bin, 0, blen);
    OK(dpu_load(peer, dpu_gva_add(bulk, 100), bin, blen));
    CHECK(memcmp(bout, bin, blen) == 0);
    enum { MOVERS = 4 };
    pthread_t mt[MOVERS];
    struct mover mv[MOVERS];
    for (int i = 0; i < MOVERS; i++) {
        size_t share = BULK_PAGES / MOVERS * DPU_PAGE_SIZE;
        mv[i] = (struct mover){peer, dpu_gva_add(bulk, share * (size_t)i), share, (uint8_t)(i * 50), 0, 0};
        CHECK(pthread_create(&mt[i], NULL, move_thread, &mv[i]) == 0);
    }
    for (int i = 0; i < MOVERS; i++) {
        CHECK(pthread_join(mt[i], NULL) == 0);
        if (mv[i].err != 0) fprintf(stderr, "mover %d: %s\n", i, dpu_strerror(mv[i].err));
        CHECK(mv[i].err == 0 && !mv[i].bad);
    }
    /* A transfer that runs past its extent fails with the first failing
     * page's error, and every page before that one is written. */
    dpu_gva_t shortx;
    OK(dpu_alloc(d, 2 * DPU_PAGE_SIZE, &shortx));
    for (size_t i = 0; i < 2 * DPU_PAGE_SIZE; i++) bout[i] = (uint8_t)(i * 11 + 5);
    int src = dpu_store(peer, shortx, bout, BULK_PAGES * DPU_PAGE_SIZE);
    CHECK(src == -ENOENT || src == -ESTALE);
    CHECK(strstr(dpu_last_error(), "store") != NULL);
    memset(bin, 0, 2 * DPU_PAGE_SIZE);
    OK(dpu_load(d, shortx, bin, 2 * DPU_PAGE_SIZE));
    CHECK(memcmp(bout, bin, 2 * DPU_PAGE_SIZE) == 0);
    int lrc = dpu_load(peer, shortx, bin, BULK_PAGES * DPU_PAGE_SIZE);
    CHECK(lrc == -ENOENT || lrc == -ESTALE);
    OK(dpu_load64(peer, shortx, &v)); /* the connection goes on */
    /* dpu_storev: buffers at addresses of their own, from a host one hop
     * away, in one window; a buffer past the extent fails the call, and
     * *done counts the leading buffers stored whole. */
    size_t vdone = 99;
    dpu_iov_t iv[4] = {{dpu_gva_add(shortx, DPU_PAGE_SIZE + 50), bout + 7, 100},
                       {dpu_gva_add(shortx, 5), bout + 300, DPU_PAGE_SIZE + 10},
                       {dpu_gva_add(shortx, 2 * DPU_PAGE_SIZE), bout, 8},
                       {shortx, bout, 4}};
    OK(dpu_storev(peer, iv, 2, &vdone));
    CHECK(vdone == 2);
    OK(dpu_load(d, shortx, bin, 2 * DPU_PAGE_SIZE));
    CHECK(memcmp(bin + DPU_PAGE_SIZE + 50, bout + 7, 100) == 0 && memcmp(bin + 5, bout + 300, DPU_PAGE_SIZE + 10) == 0);
    for (size_t i = 0; i < 2 * DPU_PAGE_SIZE; i++) bout[i] = (uint8_t)(i * 13 + 1);
    int vrc = dpu_storev(peer, iv, 4, &vdone);
    CHECK(vrc == -ENOENT || vrc == -ESTALE);
    CHECK(vdone == 2);
    OK(dpu_load(d, shortx, bin, 2 * DPU_PAGE_SIZE));
    CHECK(memcmp(bin + DPU_PAGE_SIZE + 50, bout + 7, 100) == 0 && memcmp(bin + 5, bout + 300, DPU_PAGE_SIZE + 10) == 0);
    OK(dpu_storev(peer, iv, 0, &vdone));
    CHECK(vdone == 0);
    OK(dpu_free(d, shortx));
    OK(dpu_free(d, bulk));
    free(bout);
    free(bin);

    /* many threads on one connection, plus per-thread connections */
    dpu_gva_t counter;
    OK(dpu_alloc(d, 1, &counter));
    enum { THREADS = 8, EACH = 200 };
    pthread_t th[THREADS];
    struct adder ad[THREADS];
    for (int i = 0; i < THREADS; i++) {
        ad[i] = (struct adder){d, counter, dpu_gva_add(counter, 8), EACH, 0};
        CHECK(pthread_create(&th[i], NULL, add_thread, &ad[i]) == 0);
    }
    for (int i = 0; i < THREADS; i++) {
        CHECK(pthread_join(th[i], NULL) == 0);
        if (ad[i].err != 0)
            fprintf(stderr, "adder %d: %s\n", i, dpu_strerror(ad[i].err));
        CHECK(ad[i].err == 0);
    }
    OK(dpu_load64(d, counter, &v));
    CHECK(v == THREADS * EACH);
    OK(dpu_load64(d, dpu_gva_add(counter, 8), &v));
    CHECK(v == THREADS * EACH);
    OK(dpu_free(d, counter));
    OK(dpu_free(d, g2));

    dpu_close(peer);
    dpu_close(d2);
    dpu_close(d);
    printf("ok %d checks\n", checks);
    return 0;
}
