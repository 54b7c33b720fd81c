/* mbox.c — fabric mailboxes (mbox.h). */
#define _GNU_SOURCE
#include "mbox.h"

#include <errno.h>
#include <pthread.h>
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

/* A pool moves the pages of one job at a time: page i of the job goes to
 * thread i % n. */
struct pool {
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    int n, stop;
    uint64_t gen;      /* bumped per job */
    int pending;       /* threads still working on the job */
    int err;           /* first error of the job */
    /* the job */
    dpu_t *d;
    int store;
    dpu_gva_t base;
    unsigned char *buf;
    size_t len;
    struct rw_stage_hdr tag;
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

static int move_pages(struct pool *p, dpu_t *d, int k, int n) {
    size_t pages = (p->len + RW_STAGE_DATA - 1) / RW_STAGE_DATA;
    unsigned char page[RW_PAGE];
    for (size_t i = (size_t)k; i < pages; i += (size_t)n) {
        size_t off = i * RW_STAGE_DATA, m = p->len - off < RW_STAGE_DATA ? p->len - off : RW_STAGE_DATA;
        dpu_gva_t g = dpu_gva_add(p->base, i * RW_PAGE);
        int r;
        size_t whole = sizeof p->tag + m;
        if (p->store) {
            memcpy(page, &p->tag, sizeof p->tag);
            memcpy(page + sizeof p->tag, p->buf + off, m);
            uint64_t sum = fnv64(page, whole);
            memcpy(page + whole, &sum, 8);
            r = dpu_store(d, g, page, whole + 8);
        } else {
            uint64_t start = 0;
            for (unsigned tries = 0;; tries++) {
                r = dpu_load(d, g, page, whole + 8);
                if (r < 0)
                    break;
                struct rw_stage_hdr h;
                uint64_t sum;
                memcpy(&h, page, sizeof h);
                memcpy(&sum, page + whole, 8);
                if (h.seq == p->tag.seq && h.token == p->tag.token && sum == fnv64(page, whole)) {
                    memcpy(p->buf + off, page + sizeof h, m);
                    break;
                }
                if (start == 0)
                    start = mono_ms();
                else if (mono_ms() - start > STALE_WAIT_MS) {
                    r = -ETIMEDOUT;
                    break;
                }
                pause_us(tries < 100 ? 20 : 200);
            }
        }
        if (r < 0)
            return r;
    }
    return 0;
}

static void *worker_main(void *arg) {
    struct worker w = *(struct worker *)arg;
    free(arg);
    struct pool *p = w.p;
    uint64_t seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->stop && p->gen == seen)
            pthread_cond_wait(&p->work, &p->mu);
        if (p->stop)
            break;
        seen = p->gen;
        pthread_mutex_unlock(&p->mu);
        int r = move_pages(p, p->conns[w.k], w.k, p->n);
        pthread_mutex_lock(&p->mu);
        if (r < 0 && p->err == 0)
            p->err = r;
        if (--p->pending == 0)
            pthread_cond_broadcast(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
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
    pthread_cond_init(&p->done, NULL);
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
                   struct rw_stage_hdr tag) {
    if (len == 0)
        return 0;
    if (!p || len <= RW_STAGE_DATA) {
        /* One page: no hand-off. */
        struct pool one = {.d = d, .store = store, .base = base, .buf = buf, .len = len, .tag = tag};
        return move_pages(&one, d, 0, 1);
    }
    pthread_mutex_lock(&p->jobmu);
    pthread_mutex_lock(&p->mu);
    p->d = d;
    p->store = store;
    p->base = base;
    p->buf = buf;
    p->len = len;
    p->tag = tag;
    p->err = 0;
    p->pending = p->n;
    p->gen++;
    pthread_cond_broadcast(&p->work);
    while (p->pending > 0)
        pthread_cond_wait(&p->done, &p->mu); /* each page op is bounded by the connection's timeout */
    int r = p->err;
    pthread_mutex_unlock(&p->mu);
    pthread_mutex_unlock(&p->jobmu);
    return r;
}

int pages_store(struct pool *p, dpu_t *d, dpu_gva_t base, const void *buf, size_t len, struct rw_stage_hdr tag) {
    return run_job(p, d, 1, base, (void *)buf, len, tag);
}

int pages_load(struct pool *p, dpu_t *d, dpu_gva_t base, void *buf, size_t len, struct rw_stage_hdr tag) {
    return run_job(p, d, 0, base, buf, len, tag);
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
    int r = pages_store(m->pool, m->d, dpu_gva_add(m->peer, (size_t)(1 + stage) * RW_PAGE), buf, len, tag);
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
    int r = pages_load(m->pool, m->d, dpu_gva_add(m->own, (size_t)(1 + stage) * RW_PAGE), buf, len, tag);
    if (r < 0)
        fprintf(stderr, "dpucuda mbox: loading %zu staged bytes: %s (%s)\n", len, dpu_strerror(r), dpu_last_error());
    return r;
}
