/* mbox.c — fabric mailboxes (mbox.h). */
#define _GNU_SOURCE
#include "mbox.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

uint64_t mono_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

uint64_t fnv64(const void *p, size_t n) {
    const unsigned char *b = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

/* ---- CRC-32C ---- */
static uint32_t crc_table[8][256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;
static int crc_hw;

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xff];
#if defined(__x86_64__)
    __builtin_cpu_init();
    crc_hw = __builtin_cpu_supports("sse4.2");
#endif
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) static uint32_t crc_sse42(uint32_t c, const unsigned char *b, size_t n) {
    uint64_t c64 = c;
    for (; n >= 8; n -= 8, b += 8) {
        uint64_t v;
        memcpy(&v, b, 8);
        c64 = __builtin_ia32_crc32di(c64, v);
    }
    c = (uint32_t)c64;
    for (; n > 0; n--, b++)
        c = __builtin_ia32_crc32qi(c, *b);
    return c;
}
#endif

uint32_t crc32c(uint32_t crc, const void *p, size_t n) {
    pthread_once(&crc_once, crc_init);
    const unsigned char *b = p;
    uint32_t c = ~crc;
#if defined(__x86_64__)
    if (crc_hw)
        return ~crc_sse42(c, b, n);
#endif
    for (; n >= 8; n -= 8, b += 8) {
        uint32_t lo = c ^ ((uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24);
        c = crc_table[7][lo & 0xff] ^ crc_table[6][(lo >> 8) & 0xff] ^ crc_table[5][(lo >> 16) & 0xff] ^
            crc_table[4][lo >> 24] ^ crc_table[3][b[4]] ^ crc_table[2][b[5]] ^ crc_table[1][b[6]] ^ crc_table[0][b[7]];
    }
    for (; n > 0; n--, b++)
        c = (c >> 8) ^ crc_table[0][(c ^ *b) & 0xff];
    return ~c;
}

/* ---- staging pages ---- */
#define HDR sizeof(struct rw_stage_hdr)

static uint32_t page_sum(const unsigned char *page, size_t m, uint32_t index) {
    unsigned char ix[4];
    memcpy(ix, &index, 4);
    return crc32c(crc32c(0, page, HDR + m), ix, 4);
}

void page_format(unsigned char *page, const void *data, size_t m, struct rw_stage_hdr tag, uint32_t index) {
    memcpy(page, &tag, HDR);
    memcpy(page + HDR, data, m);
    struct rw_stage_tail t = {page_sum(page, m, index), index};
    memcpy(page + HDR + m, &t, sizeof t);
}

int page_check(const unsigned char *page, size_t m, struct rw_stage_hdr tag, uint32_t index) {
    if (m > RW_STAGE_DATA)
        return PAGE_STALE;
    struct rw_stage_hdr h;
    struct rw_stage_tail t;
    memcpy(&h, page, HDR);
    memcpy(&t, page + HDR + m, sizeof t);
    if (h.seq != tag.seq || h.token != tag.token)
        return PAGE_STALE;
    if (t.crc == page_sum(page, m, index) && t.index == index)
        return PAGE_OK;
    return PAGE_BAD;
}

/* ---- fault injection (tests) ---- */
static pthread_once_t fault_once = PTHREAD_ONCE_INIT;
static long fault_chunk; /* 0: none */
static _Atomic long chunks_stored;

static void fault_init(void) {
    const char *f = getenv("DPU_CUDA_REMOTE_FAULT");
    if (f && !strncmp(f, "corrupt-chunk=", 14))
        fault_chunk = strtol(f + 14, NULL, 10);
}

/* fault_base counts the chunks of a store job of len bytes, in transfer
 * order: the number of the job's first chunk less one. */
static long fault_base(size_t len) {
    pthread_once(&fault_once, fault_init);
    if (fault_chunk <= 0)
        return 0;
    long chunks = (long)(((len + RW_STAGE_DATA - 1) / RW_STAGE_DATA + RW_CHUNK_PAGES - 1) / RW_CHUNK_PAGES);
    return atomic_fetch_add(&chunks_stored, chunks);
}

/* fault_hit: chunk c of a job whose chunks follow base is the one to corrupt. */
static int fault_hit(long base, size_t c) {
    if (fault_chunk <= 0 || base + (long)c + 1 != fault_chunk)
        return 0;
    fprintf(stderr, "dpucuda mbox: DPU_CUDA_REMOTE_FAULT: corrupting staged chunk %ld\n", fault_chunk);
    return 1;
}

/* ---- the pool ----
 * A pool moves the chunks of one job at a time: chunk j (RW_CHUNK_PAGES
 * pages) of the job goes to thread j % n. */
struct job {
    dpu_t *d;
    int store;
    dpu_gva_t base;
    unsigned char *buf;
    size_t len;
    struct rw_stage_hdr tag;
    struct xfer x;
    int on_caller; /* run by the caller's thread: it calls x.alive itself */
    long fault;    /* stores: the chunks stored before this job's (fault injection) */
};

struct pool {
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    int n, stop;
    uint64_t gen;      /* bumped per job */
    int pending;       /* threads still working on the job */
    int err;           /* first error of the job */
    _Atomic int abort; /* non-zero: the job's waits end with it (the peer is gone) */
    struct job job;
    pthread_mutex_t jobmu; /* one job at a time */
    pthread_t *th;
    dpu_t **conns; /* one a thread */
};

struct worker { struct pool *p; int k; };

static void pause_us(long us) {
    struct timespec ts = {0, us * 1000};
    nanosleep(&ts, NULL);
}

#define STALE_WAIT_MS 30000 /* how long a staging page may lag its message */
#define CHUNK_BYTES ((size_t)RW_CHUNK_PAGES * RW_PAGE)

/* settle waits until the staging page at g (whose m data bytes and
 * trailer are at page, loaded once already) is page index of the job's
 * message, loading it again as needed, and copies its data to dst. */
static int settle(struct pool *p, const struct job *j, dpu_t *d, dpu_gva_t g, unsigned char *page, size_t m,
                  uint32_t index, unsigned char *dst) {
    size_t whole = HDR + m + RW_STAGE_TRAILER;
    uint64_t start = 0, bad_since = 0, next_alive = 0;
    uint32_t bad_sum = 0;
    for (unsigned tries = 0;; tries++) {
        if (tries > 0) {
            int r = dpu_load(d, g, page, whole);
            if (r < 0)
                return r;
        }
        int c = page_check(page, m, j->tag, index);
        if (c == PAGE_OK) {
            memcpy(dst, page + HDR, m);
            return 0;
        }
        uint64_t now = mono_ms();
        if (c == PAGE_BAD) {
            /* Current header, wrong sum: still arriving while it changes;
             * corrupt once it has stayed the same for RW_CORRUPT_MS. */
            uint32_t h = crc32c(0, page, whole);
            if (bad_since == 0 || h != bad_sum) {
                bad_since = now;
                bad_sum = h;
            } else if (now - bad_since > RW_CORRUPT_MS) {
                fprintf(stderr, "dpucuda mbox: staging page %u of message %llu is corrupt (CRC-32C)\n", index,
                        (unsigned long long)j->tag.seq);
                return -EBADMSG;
            }
        } else {
            bad_since = 0;
        }
        if (start == 0)
            start = now;
        else if (now - start > STALE_WAIT_MS)
            return -ETIMEDOUT;
        if (p) {
            int a = atomic_load(&p->abort);
            if (a)
                return a;
        }
        if (j->on_caller && j->x.alive && now >= next_alive) {
            next_alive = now + 100;
            int a = j->x.alive(j->x.arg);
            if (a)
                return a;
        }
        pause_us(tries < 100 ? 20 : 200);
    }
}

/* move_chunk moves pages [first, first + np) of the job; scratch holds
 * CHUNK_BYTES (np pages). */
static int move_chunk(struct pool *p, const struct job *j, dpu_t *d, size_t first, size_t np,
                      unsigned char *scratch) {
    size_t off0 = first * RW_STAGE_DATA;
    size_t last_m = j->len - (first + np - 1) * RW_STAGE_DATA;
    if (last_m > RW_STAGE_DATA)
        last_m = RW_STAGE_DATA;
    size_t span = (np - 1) * RW_PAGE + HDR + last_m + RW_STAGE_TRAILER; /* bytes of the chunk's range */
    dpu_gva_t g0 = dpu_gva_add(j->base, first * RW_PAGE);
    int paged = j->x.mode & RW_XFER_PAGED;
    if (j->store) {
        for (size_t q = 0; q < np; q++) {
            size_t m = q + 1 < np ? RW_STAGE_DATA : last_m;
            page_format(scratch + q * RW_PAGE, j->buf + off0 + q * RW_STAGE_DATA, m, j->tag, (uint32_t)(first + q));
        }
        if (fault_hit(j->fault, first / RW_CHUNK_PAGES))
            scratch[HDR] ^= 0x5a;
        if (!paged)
            return dpu_store(d, g0, scratch, span);
        for (size_t q = 0; q < np; q++) {
            size_t m = q + 1 < np ? RW_STAGE_DATA : last_m;
            int r = dpu_store(d, dpu_gva_add(g0, q * RW_PAGE), scratch + q * RW_PAGE, HDR + m + RW_STAGE_TRAILER);
            if (r < 0)
                return r;
        }
        return 0;
    }
    if (!paged) {
        int r = dpu_load(d, g0, scratch, span);
        if (r < 0)
            return r;
    }
    for (size_t q = 0; q < np; q++) {
        size_t m = q + 1 < np ? RW_STAGE_DATA : last_m;
        dpu_gva_t g = dpu_gva_add(g0, q * RW_PAGE);
        unsigned char *page = scratch + q * RW_PAGE;
        if (paged) {
            int r = dpu_load(d, g, page, HDR + m + RW_STAGE_TRAILER);
            if (r < 0)
                return r;
        }
        int r = settle(p, j, d, g, page, m, (uint32_t)(first + q), j->buf + off0 + q * RW_STAGE_DATA);
        if (r < 0)
            return r;
    }
    return 0;
}

static int move_chunks(struct pool *p, const struct job *j, dpu_t *d, int k, int n, unsigned char *scratch) {
    size_t pages = (j->len + RW_STAGE_DATA - 1) / RW_STAGE_DATA;
    for (size_t c = (size_t)k; c * RW_CHUNK_PAGES < pages; c += (size_t)n) {
        size_t first = c * RW_CHUNK_PAGES, np = pages - first < RW_CHUNK_PAGES ? pages - first : RW_CHUNK_PAGES;
        int r = move_chunk(p, j, d, first, np, scratch);
        if (r < 0)
            return r;
        if (p && atomic_load(&p->abort))
            return atomic_load(&p->abort);
    }
    return 0;
}

static void *worker_main(void *arg) {
    struct worker w = *(struct worker *)arg;
    free(arg);
    struct pool *p = w.p;
    unsigned char *scratch = malloc(CHUNK_BYTES);
    uint64_t seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->stop && p->gen == seen)
            pthread_cond_wait(&p->work, &p->mu);
        if (p->stop)
            break;
        seen = p->gen;
        struct job j = p->job;
        pthread_mutex_unlock(&p->mu);
        int r = scratch ? move_chunks(p, &j, p->conns[w.k], w.k, p->n, scratch) : -ENOMEM;
        pthread_mutex_lock(&p->mu);
        if (r < 0 && p->err == 0)
            p->err = r;
        if (r < 0 && !atomic_load(&p->abort))
            atomic_store(&p->abort, r); /* the others stop too: the job has failed */
        if (--p->pending == 0)
            pthread_cond_broadcast(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
    free(scratch);
    return NULL;
}

struct pool *pool_new(const char *sock, int n) {
    if (n < 1)
        n = 1;
    if (n > 64)
        n = 64;
    struct pool *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    pthread_mutex_init(&p->mu, NULL);
    pthread_mutex_init(&p->jobmu, NULL);
    pthread_cond_init(&p->work, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&p->done, &ca);
    pthread_condattr_destroy(&ca);
    p->th = calloc((size_t)n, sizeof *p->th);
    p->conns = calloc((size_t)n, sizeof *p->conns);
    if (!p->th || !p->conns) {
        free(p->th);
        free(p->conns);
        free(p);
        return NULL;
    }
    for (int i = 0; i < n; i++) {
        if (dpu_open(sock, &p->conns[i]) < 0)
            break;
        struct worker *w = malloc(sizeof *w);
        if (!w) {
            dpu_close(p->conns[i]);
            break;
        }
        w->p = p;
        w->k = i;
        if (pthread_create(&p->th[i], NULL, worker_main, w) != 0) {
            free(w);
            dpu_close(p->conns[i]);
            break;
        }
        p->n++;
    }
    if (p->n == 0) {
        pool_free(p);
        return NULL;
    }
    return p;
}

void pool_free(struct pool *p) {
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->n; i++) {
        pthread_join(p->th[i], NULL);
        dpu_close(p->conns[i]);
    }
    free(p->th);
    free(p->conns);
    pthread_mutex_destroy(&p->mu);
    pthread_mutex_destroy(&p->jobmu);
    pthread_cond_destroy(&p->work);
    pthread_cond_destroy(&p->done);
    free(p);
}

static int run_job(struct pool *p, dpu_t *d, int store, dpu_gva_t base, void *buf, size_t len,
                   struct rw_stage_hdr tag, const struct xfer *x) {
    if (len == 0)
        return 0;
    struct job j = {.d = d, .store = store, .base = base, .buf = buf, .len = len, .tag = tag};
    if (x)
        j.x = *x;
    if (store)
        j.fault = fault_base(len);
    if (!p || len <= RW_STAGE_DATA) {
        /* One page (or no pool): no hand-off. */
        j.on_caller = 1;
        unsigned char one[RW_PAGE];
        unsigned char *scratch = len <= RW_STAGE_DATA ? one : malloc(CHUNK_BYTES);
        if (!scratch)
            return -ENOMEM;
        int r = move_chunks(NULL, &j, d, 0, 1, scratch);
        if (scratch != one)
            free(scratch);
        return r;
    }
    pthread_mutex_lock(&p->jobmu);
    pthread_mutex_lock(&p->mu);
    p->job = j;
    p->err = 0;
    atomic_store(&p->abort, 0);
    p->pending = p->n;
    p->gen++;
    pthread_cond_broadcast(&p->work);
    while (p->pending > 0) {
        /* Each page op is bounded by its connection's timeout; a load waits
         * for pages while the peer lives (x->alive, asked here). */
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_nsec += 100 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&p->done, &p->mu, &ts);
        if (p->pending > 0 && !store && j.x.alive && !atomic_load(&p->abort)) {
            pthread_mutex_unlock(&p->mu);
            int a = j.x.alive(j.x.arg);
            pthread_mutex_lock(&p->mu);
            if (a && !atomic_load(&p->abort))
                atomic_store(&p->abort, a);
        }
    }
    int r = p->err;
    pthread_mutex_unlock(&p->mu);
    pthread_mutex_unlock(&p->jobmu);
    return r;
}

int pages_store(struct pool *p, dpu_t *d, dpu_gva_t base, const void *buf, size_t len, struct rw_stage_hdr tag,
                const struct xfer *x) {
    return run_job(p, d, 1, base, (void *)buf, len, tag, x);
}

int pages_load(struct pool *p, dpu_t *d, dpu_gva_t base, void *buf, size_t len, struct rw_stage_hdr tag,
               const struct xfer *x) {
    return run_job(p, d, 0, base, buf, len, tag, x);
}

size_t mbox_capacity(const struct mbox *m) { return (size_t)m->staging_pages * RW_STAGE_DATA; }

int mbox_send(struct mbox *m, const struct rw_hdr *h, const void *body, uint32_t len) {
    if (len > RW_BODY_MAX)
        return -EMSGSIZE;
    unsigned char page[RW_PAGE];
    struct rw_hdr hh = *h;
    hh.len = len;
    memcpy(page, &hh, sizeof hh);
    if (len)
        memcpy(page + sizeof hh, body, len);
    uint64_t sum = fnv64(page, sizeof hh + len);
    memcpy(page + sizeof hh + len, &sum, 8);
    /* One STORE; the receiver checks the sum, as the bytes of a write from
     * another node may reach it in pieces. */
    return dpu_store(m->d, m->peer, page, sizeof hh + len + 8);
}


int mbox_recv(struct mbox *m, uint64_t want, struct rw_hdr *h, void *body, uint32_t cap, int timeout_ms,
              int (*alive)(void *), void *arg) {
    unsigned char page[RW_PAGE];
    uint64_t start = mono_ms(), next_alive = start + 100;
    unsigned spins = 0;
    size_t probe = sizeof(struct rw_hdr) + 256 + 8; /* most messages fit; a longer body is loaded whole */
    for (;;) {
        int r = dpu_load(m->d, m->own, page, probe);
        if (r < 0)
            return r;
        struct rw_hdr hh;
        memcpy(&hh, page, sizeof hh);
        if (hh.seq != 0 && hh.seq != m->last_seen && (want == 0 || hh.seq == want) &&
            (m->token == 0 || hh.token == m->token) && hh.len <= RW_BODY_MAX) {
            int whole = 1;
            if (sizeof hh + hh.len + 8 > probe) {
                r = dpu_load(m->d, m->own, page, sizeof hh + hh.len + 8);
                if (r < 0)
                    return r;
                memcpy(&hh, page, sizeof hh);
                whole = hh.len <= RW_BODY_MAX;
            }
            uint64_t sum = 0;
            if (whole)
                memcpy(&sum, page + sizeof hh + hh.len, 8);
            if (!whole || sum != fnv64(page, sizeof hh + hh.len))
                goto wait; /* not all of it is here yet */
            if (hh.len > cap)
                return -EPROTO;
            *h = hh;
            if (hh.len)
                memcpy(body, page + sizeof hh, hh.len);
            m->last_seen = hh.seq;
            return 0;
        }
    wait:;
        uint64_t now = mono_ms();
        if (timeout_ms >= 0 && now - start >= (uint64_t)timeout_ms)
            return -ETIMEDOUT;
        if (alive && now >= next_alive) {
            next_alive = now + 100;
            int a = alive(arg);
            if (a)
                return a;
        }
        /* Spin a while (a reply usually follows within tens of
         * microseconds), then poll every 20 us, then every 200 us. */
        spins++;
        if (spins > 2000)
            pause_us(200);
        else if (spins > 200)
            pause_us(20);
    }
}

int mbox_fits(const struct mbox *m, uint32_t stage, size_t len) {
    size_t pages = (len + RW_STAGE_DATA - 1) / RW_STAGE_DATA;
    return stage <= m->staging_pages && pages <= m->staging_pages - stage;
}

int mbox_put(struct mbox *m, const void *buf, size_t len, uint64_t seq) { return mbox_put_at(m, 0, buf, len, seq); }
int mbox_get(struct mbox *m, void *buf, size_t len, uint64_t seq) { return mbox_get_at(m, 0, buf, len, seq); }

int mbox_put_at(struct mbox *m, uint32_t stage, const void *buf, size_t len, uint64_t seq) {
    if (!m->d)
        return -ENOTCONN;
    if (!mbox_fits(m, stage, len))
        return -EMSGSIZE;
    struct rw_stage_hdr tag = {seq, m->token};
    struct xfer x = {.mode = m->xfer};
    int r = pages_store(m->pool, m->d, dpu_gva_add(m->peer, (size_t)(1 + stage) * RW_PAGE), buf, len, tag, &x);
    if (r < 0)
        fprintf(stderr, "dpucuda mbox: storing %zu staged bytes: %s (%s)\n", len, dpu_strerror(r), dpu_last_error());
    return r;
}

int mbox_get_at(struct mbox *m, uint32_t stage, void *buf, size_t len, uint64_t seq) {
    if (!m->d)
        return -ENOTCONN;
    if (!mbox_fits(m, stage, len))
        return -EMSGSIZE;
    struct rw_stage_hdr tag = {seq, m->token};
    struct xfer x = {.mode = m->xfer, .alive = m->alive, .arg = m->alive_arg};
    int r = pages_load(m->pool, m->d, dpu_gva_add(m->own, (size_t)(1 + stage) * RW_PAGE), buf, len, tag, &x);
    if (r < 0)
        fprintf(stderr, "dpucuda mbox: loading %zu staged bytes: %s (%s)\n", len, dpu_strerror(r), dpu_last_error());
    return r;
}
