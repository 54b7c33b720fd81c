/*
 * libdpu: the C client of the host interface (hostif/PROTOCOL.md).
 *
 * Threading: a dpu_t is shared by any number of threads. Each request takes
 * a waiter slot (its index is the low byte of the request id), is sent with
 * one send(2), and waits for its reply. There is no reader thread: waiting
 * threads take turns reading the socket (leader/follower). The leader reads
 * one message at a time and hands each reply to its waiter; when the leader's
 * own reply has come it passes the role on to another waiting thread. A lone
 * thread thus costs one send and one receive per request.
 *
 * Every wait is bounded: by the connection's timeout for requests, and by
 * SO_RCVTIMEO (so the leader re-checks deadlines) for reads.
 */
#define _GNU_SOURCE
#include "dpu.h"
#include "internal.h"
#include "ring.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

/* ---- wire format (hostif/wire) ---- */

enum {
    HDR = 32,
    PAGE = DPU_PAGE_SIZE,
    MAX_BODY = 8 + PAGE,
    MAX_MSG = HDR + MAX_BODY,
    MAX_MAP_PAGES = 64,
    SLOT_SIZE = 64,
    HELLO_LEN = 40,
    PROTO_MIN = 1,
    PROTO_MAX = 1,
};

enum {
    KIND_REQUEST = 1, KIND_REPLY = 2, KIND_EVENT = 3,
};

enum {
    OP_HELLO = 1, OP_ALLOC = 2, OP_FREE = 3, OP_MAP = 4, OP_UNMAP = 5, OP_TRANSLATE = 6,
    OP_LOAD = 7, OP_STORE = 8, OP_CAS = 9, OP_FETCH_ADD = 10, OP_ACQUIRE = 11, OP_RELEASE = 12,
    OP_LOCK = 13, OP_UNLOCK = 14, OP_WHERE = 15, OP_SUBSCRIBE = 16, OP_RINGS = 17,
    OP_CLOCK = 19, OP_BULK = 20, OP_STORE_BULK = 21, OP_LOAD_BULK = 22,
};

enum { SLOT_VALID = 2 };
enum { LOCK_TRY = 1 };

static void put16(uint8_t *b, uint16_t v) { b[0] = (uint8_t)v; b[1] = (uint8_t)(v >> 8); }
static void put32(uint8_t *b, uint32_t v) { for (int i = 0; i < 4; i++) b[i] = (uint8_t)(v >> (8 * i)); }
static void put64(uint8_t *b, uint64_t v) { for (int i = 0; i < 8; i++) b[i] = (uint8_t)(v >> (8 * i)); }
static uint16_t get16(const uint8_t *b) { return (uint16_t)(b[0] | b[1] << 8); }
static uint32_t get32(const uint8_t *b) { uint32_t v = 0; for (int i = 3; i >= 0; i--) v = v << 8 | b[i]; return v; }
static uint64_t get64(const uint8_t *b) { uint64_t v = 0; for (int i = 7; i >= 0; i--) v = v << 8 | b[i]; return v; }

static void put_header(uint8_t *b, uint16_t op, uint64_t id, dpu_gva_t g) {
    put16(b, op);
    b[2] = KIND_REQUEST;
    b[3] = 0;
    put32(b + 4, 0);
    put64(b + 8, id);
    put64(b + 16, g.hi);
    put64(b + 24, g.lo);
}

/* ---- connection state ---- */

enum { W_FREE = 0, W_WAITING, W_DONE, W_ABANDONED };
enum { UNDO_SLOT = 0xff, MAX_WAITERS = 255, EVQ = 256 };

struct waiter {
    int state;
    uint64_t id;
    uint16_t op;
    dpu_gva_t gva;         /* request: for undoing an abandoned call */
    uint64_t lva, bytes;
    uint32_t status;       /* reply */
    dpu_gva_t rgva;
    uint8_t *body;         /* caller's buffer (valid while W_WAITING) */
    size_t cap, len;
    int fds[MAX_MAP_PAGES];
    int nfds;
    int sleeping;          /* its thread sleeps on cv in call_wait */
    pthread_cond_t cv;
};

struct mapping {
    struct mapping *next;
    dpu_gva_t gva;
    size_t first, pages;   /* region page index and count */
};

struct dpu {
    int fd;
    pid_t pid;              /* the process that opened it (a forked child's dpu_close only closes) */
    char path[sizeof(((struct sockaddr_un *)0)->sun_path)]; /* the socket, for dpu__reopen */
    int timeout_ms;
    pthread_mutex_t mu;
    pthread_cond_t slot_cv;
    struct waiter *w;
    unsigned nw;
    uint64_t seq;
    unsigned hint;
    int reading;            /* a thread is the reader */
    int broken;             /* the connection failed with this errno */
    int ev_waiting;         /* threads in dpu_next_event */
    pthread_cond_t ev_cv;
    dpu_event_t ev[EVQ];
    unsigned ev_head, ev_len;
    int ev_lost;

    uint8_t rx[MAX_MSG];
    union { /* aligned for struct cmsghdr */
        uint8_t buf[CMSG_SPACE(MAX_MAP_PAGES * sizeof(int))];
        struct cmsghdr align;
    } rx_oob;

    uint32_t machine, nslots, max_map_pages;
    const uint8_t *status;
    size_t status_len;

    uint8_t *region;        /* reserved range for mappings */
    size_t region_pages;
    _Atomic uint32_t *slot_of; /* status slot of each region page, 0 = none */
    struct extent *free_ext;
    struct mapping *maps;

    /* The ring pair (PROTOCOL.md §12), when the agent offered one. */
    struct dpu_ring *ring;
    pthread_mutex_t ring_mu;    /* serialises submitters */
    _Atomic int ring_inflight;  /* submitted on the ring, not yet reaped */
    long ring_spin_ns;          /* how long the reader spins before sleeping */

    /* The bulk area (PROTOCOL.md §4, BULK), asked for by the first
     * transfer longer than a page: BULK_SLOTS slots of BULK_SLOT bytes,
     * each held by one transfer request in flight. */
    pthread_mutex_t bulk_mu;    /* serialises the ask */
    int bulk_state;             /* 0 not asked, 1 mapped, -1 the agent offers none */
    uint8_t *bulk;
    size_t bulk_len;
    _Atomic uint32_t bulk_free; /* a bit per free slot */
};

static _Thread_local char last_err[256];

static int fail(int err, const char *fmt, const char *detail) {
    snprintf(last_err, sizeof last_err, fmt, detail ? detail : "");
    return -err;
}

const char *dpu_last_error(void) { return last_err; }

/* ---- time ---- */

static struct timespec deadline_in(int ms) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    t.tv_sec += ms / 1000;
    t.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (t.tv_nsec >= 1000000000L) {
        t.tv_sec++;
        t.tv_nsec -= 1000000000L;
    }
    return t;
}

static bool past(const struct timespec *d) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec > d->tv_sec || (t.tv_sec == d->tv_sec && t.tv_nsec >= d->tv_nsec);
}

/* ---- receiving and dispatching (reader role) ---- */

static void close_fds(const int *fds, int n) {
    for (int i = 0; i < n; i++) close(fds[i]);
}

/* recv_one reads one message into d->rx. >0: its length (*nfds descriptors
 * in fds); 0: nothing within SO_RCVTIMEO; <0: the connection is gone. */
static ssize_t recv_one(dpu_t *d, int *fds, int *nfds) {
    struct iovec iov = {d->rx, sizeof d->rx};
    struct msghdr mh = {0};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    mh.msg_control = d->rx_oob.buf;
    mh.msg_controllen = sizeof d->rx_oob.buf;
    *nfds = 0;
    ssize_t n = recvmsg(d->fd, &mh, MSG_CMSG_CLOEXEC);
    if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return 0;
        return -errno;
    }
    if (n == 0) return -ECONNRESET;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
        int k = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
        for (int i = 0; i < k; i++) {
            int fd;
            memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
            if (*nfds < MAX_MAP_PAGES) fds[(*nfds)++] = fd;
            else close(fd);
        }
    }
    if (mh.msg_flags & MSG_TRUNC) {
        close_fds(fds, *nfds);
        *nfds = 0;
        return 0; /* not a message of this protocol: drop it */
    }
    return n;
}

static void send_undo(dpu_t *d, const struct waiter *w);

static void push_event(dpu_t *d, const uint8_t *m, size_t n) {
    if (n != HDR + 16) return;
    if (d->ev_len == EVQ) {
        d->ev_lost = 1;
        return;
    }
    dpu_event_t *e = &d->ev[(d->ev_head + d->ev_len++) % EVQ];
    e->type = get16(m);
    e->reason = (int)get32(m + 4);
    e->seq = get64(m + 8);
    e->page.hi = get64(m + 16);
    e->page.lo = get64(m + 24);
    e->version = get64(m + HDR);
    e->offset = get16(m + HDR + 8);
    e->length = get16(m + HDR + 10);
    pthread_cond_broadcast(&d->ev_cv);
}

/* dispatch hands the message in d->rx to its waiter. Called with d->mu. */
static void dispatch(dpu_t *d, size_t n, int *fds, int nfds) {
    const uint8_t *m = d->rx;
    if (n < HDR || (m[2] != KIND_REPLY && m[2] != KIND_EVENT)) {
        close_fds(fds, nfds);
        return;
    }
    if (m[2] == KIND_EVENT) {
        close_fds(fds, nfds);
        push_event(d, m, n);
        return;
    }
    uint64_t id = get64(m + 8);
    unsigned slot = (unsigned)(id & 0xff);
    if (slot >= d->nw || d->w[slot].id != id) {
        close_fds(fds, nfds);
        return;
    }
    struct waiter *w = &d->w[slot];
    w->status = get32(m + 4);
    w->rgva.hi = get64(m + 16);
    w->rgva.lo = get64(m + 24);
    if (w->state == W_ABANDONED) {
        close_fds(fds, nfds);
        if (w->status == 0) {
            w->rgva.hi = get64(m + 16);
            send_undo(d, w);
        }
        w->state = W_FREE;
        w->id = 0;
        pthread_cond_signal(&d->slot_cv);
        return;
    }
    if (w->state != W_WAITING) {
        close_fds(fds, nfds);
        return;
    }
    size_t len = n - HDR;
    if (w->status != 0) { /* error text */
        size_t t = len < sizeof last_err - 1 ? len : sizeof last_err - 1;
        w->len = 0;
        if (w->body && w->cap > 0) {
            t = t < w->cap - 1 ? t : w->cap - 1;
            memcpy(w->body, m + HDR, t);
            w->body[t] = 0;
            w->len = t;
        }
    } else {
        w->len = len;
        if (len > w->cap) w->len = w->cap;
        if (w->len) memcpy(w->body, m + HDR, w->len);
        if (len > w->cap) w->status = EPROTO;
    }
    w->nfds = nfds;
    memcpy(w->fds, fds, sizeof(int) * (size_t)nfds);
    w->state = W_DONE;
    pthread_cond_signal(&w->cv);
}

/* promote passes the reader role to another waiting thread: one asleep
 * on its call (a thread with several calls in flight waits on one of them
 * at a time, and one not asleep takes the role when it comes to wait).
 * d->mu held. */
static void promote(dpu_t *d, const struct waiter *self) {
    for (unsigned i = 0; i < d->nw; i++) {
        if (&d->w[i] != self && d->w[i].state == W_WAITING && d->w[i].sleeping) {
            pthread_cond_signal(&d->w[i].cv);
            return;
        }
    }
    if (d->ev_waiting) pthread_cond_broadcast(&d->ev_cv);
}

static void break_conn(dpu_t *d, int err) {
    if (!d->broken) d->broken = err;
    for (unsigned i = 0; i < d->nw; i++)
        if (d->w[i].state == W_WAITING) pthread_cond_signal(&d->w[i].cv);
    pthread_cond_broadcast(&d->ev_cv);
    pthread_cond_broadcast(&d->slot_cv);
}

static long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000L + t.tv_nsec;
}

static void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* recv_ring reads the next message into d->rx from the completion ring or
 * the socket: it spins on the ring for a while when ring requests are in
 * flight, then sleeps on the socket and the bell at once (bounded like
 * recv_one). Same results as recv_one. */
static ssize_t recv_ring(dpu_t *d, int *fds, int *nfds) {
    *nfds = 0;
    ssize_t n = dpu_ring_reap(d->ring, d->rx, sizeof d->rx);
    if (n == 0 && atomic_load(&d->ring_inflight) > 0) {
        long end = now_ns() + d->ring_spin_ns;
        for (unsigned i = 1; n == 0; i++) {
            /* After a short busy spin, yield: on a machine with fewer
             * cores than busy threads the agent may need this core. */
            if (i < 256) cpu_relax();
            else sched_yield();
            n = dpu_ring_reap(d->ring, d->rx, sizeof d->rx);
            if (i % 64 == 0 && now_ns() > end) break;
        }
    }
    if (n == 0) {
        int ready = dpu_ring_wait_begin(d->ring);
        struct pollfd p[2] = {{.fd = d->fd, .events = POLLIN}, {.fd = dpu_ring_bell(d->ring), .events = POLLIN}};
        if (ready == 0) poll(p, 2, 50);
        dpu_ring_wait_end(d->ring);
        if (ready < 0) return ready;
        if (p[0].revents) return recv_one(d, fds, nfds);
        n = dpu_ring_reap(d->ring, d->rx, sizeof d->rx);
    }
    if (n > 0) atomic_fetch_sub(&d->ring_inflight, 1);
    return n;
}

/* send_msg sends one request: on the ring when there is one and the reply
 * carries no descriptor, else (or when the ring is full) on the socket.
 * Like send(2): the length or -1 with errno. */
static ssize_t send_msg(dpu_t *d, uint16_t op, const uint8_t *msg, size_t n) {
    if (d->ring && op != OP_HELLO && op != OP_MAP && op != OP_RINGS && op != OP_BULK) {
        pthread_mutex_lock(&d->ring_mu);
        atomic_fetch_add(&d->ring_inflight, 1);
        int rc = dpu_ring_submit(d->ring, msg, n);
        if (rc < 0) atomic_fetch_sub(&d->ring_inflight, 1);
        pthread_mutex_unlock(&d->ring_mu);
        if (rc == 0) return (ssize_t)n;
        if (rc == -EPROTO) {
            errno = EPROTO;
            return -1;
        }
    }
    return send(d->fd, msg, n, MSG_NOSIGNAL);
}

/* read_once: with d->mu held and no reader, read one message (releasing
 * d->mu meanwhile) and dispatch it. */
static void read_once(dpu_t *d) {
    int fds[MAX_MAP_PAGES], nfds = 0;
    d->reading = 1;
    pthread_mutex_unlock(&d->mu);
    ssize_t n = d->ring ? recv_ring(d, fds, &nfds) : recv_one(d, fds, &nfds);
    pthread_mutex_lock(&d->mu);
    d->reading = 0;
    if (n > 0) dispatch(d, (size_t)n, fds, nfds);
    else if (n < 0) break_conn(d, (int)-n);
}

/* ---- requests ---- */

struct call {
    uint16_t op;
    dpu_gva_t gva;
    const uint8_t *body;   /* request body */
    size_t blen;
    uint8_t *out;          /* reply body buffer */
    size_t cap;
    uint64_t lva, bytes;   /* for undo */
    int timeout_ms;        /* 0: the connection's */
    /* results */
    dpu_gva_t rgva;
    size_t len;
    int fds[MAX_MAP_PAGES];
    int nfds;
};

static const char *op_name(uint16_t op) {
    static const char *names[] = {"?", "hello", "alloc", "free", "map", "unmap", "translate", "load",
                                  "store", "cas", "fetch-add", "acquire", "release", "lock", "unlock",
                                  "where", "subscribe", "rings", "maps", "clock", "bulk", "store-bulk",
                                  "load-bulk"};
    return op < sizeof names / sizeof names[0] ? names[op] : "?";
}

/* call_send takes a request slot for c and sends c; call_wait waits for
 * its reply (by dl). A thread may send several calls before it waits for
 * them: whichever it waits for first reads the replies of all. With dl
 * NULL call_send takes a slot only if one is free now, and answers -EAGAIN
 * (no error text) otherwise: a thread with calls in flight must not sleep
 * for a slot, since it may be the one that reads their replies. */
static int call_send(dpu_t *d, struct call *c, const struct timespec *dl, struct waiter **wp) {
    pthread_mutex_lock(&d->mu);
    struct waiter *w = NULL;
    while (!w) {
        if (d->broken) {
            int e = d->broken;
            pthread_mutex_unlock(&d->mu);
            return fail(e, "dpu %s: connection lost", op_name(c->op));
        }
        for (unsigned k = 0; k < d->nw; k++) {
            unsigned i = (d->hint + k) % d->nw;
            if (d->w[i].state == W_FREE) {
                w = &d->w[i];
                d->hint = i + 1;
                break;
            }
        }
        if (!w && !dl) {
            pthread_mutex_unlock(&d->mu);
            return -EAGAIN;
        }
        if (!w && pthread_cond_timedwait(&d->slot_cv, &d->mu, dl) == ETIMEDOUT) {
            pthread_mutex_unlock(&d->mu);
            return fail(ETIMEDOUT, "dpu %s: no request slot free in time", op_name(c->op));
        }
    }
    unsigned idx = (unsigned)(w - d->w);
    w->id = (++d->seq << 8) | idx;
    w->state = W_WAITING;
    w->op = c->op;
    w->gva = c->gva;
    w->lva = c->lva;
    w->bytes = c->bytes;
    w->body = c->out;
    w->cap = c->cap;
    w->len = 0;
    w->nfds = 0;
    uint64_t id = w->id;
    pthread_mutex_unlock(&d->mu);

    uint8_t msg[MAX_MSG];
    put_header(msg, c->op, id, c->gva);
    if (c->blen) memcpy(msg + HDR, c->body, c->blen);
    ssize_t sent = send_msg(d, c->op, msg, HDR + c->blen);
    int serr = errno;

    pthread_mutex_lock(&d->mu);
    if (sent < 0) {
        w->state = W_FREE;
        w->id = 0;
        pthread_cond_signal(&d->slot_cv);
        pthread_mutex_unlock(&d->mu);
        return fail(serr, "dpu %s: send failed", op_name(c->op));
    }
    pthread_mutex_unlock(&d->mu);
    *wp = w;
    return 0;
}

static int call_wait(dpu_t *d, struct call *c, struct waiter *w, const struct timespec *dl) {
    pthread_mutex_lock(&d->mu);
    int rc = 0;
    while (w->state == W_WAITING) {
        if (d->broken) {
            rc = -d->broken;
            break;
        }
        if (past(dl)) {
            rc = -ETIMEDOUT;
            break;
        }
        if (!d->reading) {
            read_once(d);
            continue;
        }
        w->sleeping = 1;
        pthread_cond_timedwait(&w->cv, &d->mu, dl);
        w->sleeping = 0;
    }
    if (w->state == W_WAITING) {
        /* Gave up: the slot stays taken until the reply comes, and a
         * successful late reply is undone. */
        w->state = d->broken ? W_FREE : W_ABANDONED;
        w->body = NULL;
        w->cap = 0;
        if (w->state == W_FREE) w->id = 0;
        promote(d, w);
        pthread_mutex_unlock(&d->mu);
        return fail(-rc, "dpu %s: no reply in time or connection lost", op_name(c->op));
    }
    /* Done: copy results out and pass the reader role on. */
    uint32_t status = w->status;
    c->rgva = w->rgva;
    c->len = w->len;
    c->nfds = w->nfds;
    memcpy(c->fds, w->fds, sizeof(int) * (size_t)w->nfds);
    w->state = W_FREE;
    w->id = 0;
    w->body = NULL;
    pthread_cond_signal(&d->slot_cv);
    promote(d, w);
    pthread_mutex_unlock(&d->mu);
    if (status != 0) {
        close_fds(c->fds, c->nfds);
        c->nfds = 0;
        if (c->out && c->cap > 0 && c->len > 0)
            snprintf(last_err, sizeof last_err, "dpu %s: %s", op_name(c->op), (const char *)c->out);
        else
            snprintf(last_err, sizeof last_err, "dpu %s: %s", op_name(c->op), dpu_strerror((int)status));
        return -(int)status;
    }
    return 0;
}

/* do_call sends one request and waits for its reply. */
static int do_call(dpu_t *d, struct call *c) {
    int ms = c->timeout_ms > 0 ? c->timeout_ms : d->timeout_ms;
    struct timespec dl = deadline_in(ms);
    struct waiter *w;
    int rc = call_send(d, c, &dl, &w);
    return rc < 0 ? rc : call_wait(d, c, w, &dl);
}

/* send_undo reverses a successful request whose caller gave up, without
 * waiting (id with the undo slot: its reply is dropped). d->mu held. */
static void send_undo(dpu_t *d, const struct waiter *w) {
    uint8_t msg[HDR + 16];
    size_t len = HDR;
    uint16_t op;
    dpu_gva_t g = w->gva;
    switch (w->op) {
    case OP_MAP: op = OP_UNMAP; put64(msg + HDR, w->lva); put64(msg + HDR + 8, w->bytes); len += 16; break;
    case OP_LOCK: op = OP_UNLOCK; break;
    case OP_ACQUIRE: op = OP_RELEASE; break;
    case OP_ALLOC: op = OP_FREE; g = w->rgva; break;
    default: return;
    }
    put_header(msg, op, (++d->seq << 8) | UNDO_SLOT, g);
    (void)send(d->fd, msg, len, MSG_NOSIGNAL | MSG_DONTWAIT);
}

/* ---- open / close ---- */

static const char *default_socket(char *buf, size_t len) {
    const char *p = getenv("DPU_SOCKET");
    if (p && *p) return p;
    const char *dir = getenv("DPU_RUN_DIR");
    if (dir && *dir) {
        snprintf(buf, len, "%s/dpu0.sock", dir);
        return buf;
    }
    return "/run/dpu/dpu0.sock";
}

static int hello(dpu_t *d) {
    uint8_t msg[HDR + 40] = {0};
    dpu_gva_t zero = {0, 0};
    put_header(msg, OP_HELLO, 1, zero);
    put16(msg + HDR, PROTO_MIN);
    put16(msg + HDR + 2, PROTO_MAX);
    memcpy(msg + HDR + 8, "libdpu", 6);
    if (send(d->fd, msg, sizeof msg, MSG_NOSIGNAL) < 0) return fail(errno, "dpu hello: send failed%s", NULL);
    struct timespec dl = deadline_in(d->timeout_ms);
    int fds[MAX_MAP_PAGES], nfds = 0;
    ssize_t n;
    while ((n = recv_one(d, fds, &nfds)) == 0)
        if (past(&dl)) return fail(ETIMEDOUT, "dpu hello: no reply%s", NULL);
    if (n < 0) return fail((int)-n, "dpu hello: connection closed%s", NULL);
    const uint8_t *m = d->rx;
    int rc = 0;
    if ((size_t)n < HDR + HELLO_LEN || m[2] != KIND_REPLY || get16(m) != OP_HELLO) {
        rc = fail(EPROTO, "dpu hello: malformed reply%s", NULL);
    } else if (get32(m + 4) != 0) {
        char text[128] = {0};
        size_t t = (size_t)n - HDR - HELLO_LEN;
        memcpy(text, m + HDR + HELLO_LEN, t < sizeof text - 1 ? t : sizeof text - 1);
        rc = fail((int)get32(m + 4), "dpu hello: %s", text);
    } else {
        const uint8_t *b = m + HDR;
        uint16_t version = get16(b);
        uint32_t outstanding = get32(b + 8);
        d->machine = get32(b + 16);
        d->nslots = get32(b + 20);
        d->max_map_pages = get32(b + 24);
        if (version < PROTO_MIN || version > PROTO_MAX || nfds != 1 || outstanding == 0 || d->nslots < 2 ||
            d->max_map_pages == 0 || d->max_map_pages > MAX_MAP_PAGES) {
            rc = fail(EPROTO, "dpu hello: unusable reply%s", NULL);
        } else {
            d->nw = outstanding < MAX_WAITERS ? outstanding : MAX_WAITERS;
            d->status_len = (size_t)d->nslots * SLOT_SIZE;
            void *st = mmap(NULL, d->status_len, PROT_READ, MAP_SHARED, fds[0], 0);
            if (st == MAP_FAILED) rc = fail(errno, "dpu hello: mapping the status table%s", NULL);
            else d->status = st;
        }
    }
    close_fds(fds, nfds);
    return rc;
}

/* ask_rings asks the agent for a ring pair (unless DPU_RINGS=0). An agent
 * without rings leaves the connection on the socket; a broken offer fails
 * the open. */
static int ask_rings(dpu_t *d) {
    const char *env = getenv("DPU_RINGS");
    if (env && strcmp(env, "0") == 0) return 0;
    env = getenv("DPU_RING_SPIN_US");
    d->ring_spin_ns = (env && *env ? atol(env) : 50) * 1000L;
    uint8_t msg[HDR + 16] = {0};
    dpu_gva_t zero = {0, 0};
    put_header(msg, OP_RINGS, 2, zero);
    put32(msg + HDR, d->nw > 64 ? d->nw : 64);
    if (send(d->fd, msg, sizeof msg, MSG_NOSIGNAL) < 0) return fail(errno, "dpu rings: send failed%s", NULL);
    struct timespec dl = deadline_in(d->timeout_ms);
    int fds[MAX_MAP_PAGES], nfds = 0;
    ssize_t n;
    for (;;) {
        while ((n = recv_one(d, fds, &nfds)) == 0)
            if (past(&dl)) return fail(ETIMEDOUT, "dpu rings: no reply%s", NULL);
        if (n < 0) return fail((int)-n, "dpu rings: connection closed%s", NULL);
        if (n < HDR || d->rx[2] != KIND_EVENT) break;
        close_fds(fds, nfds);
    }
    const uint8_t *m = d->rx;
    if (n < HDR || m[2] != KIND_REPLY || get16(m) != OP_RINGS || get64(m + 8) != 2) {
        close_fds(fds, nfds);
        return fail(EPROTO, "dpu rings: malformed reply%s", NULL);
    }
    uint32_t status = get32(m + 4);
    if (status != 0) {
        close_fds(fds, nfds);
        if (status == ENOSYS || status == EOPNOTSUPP || status == EINVAL) return 0;
        return fail((int)status, "dpu rings: %s", dpu_strerror((int)status));
    }
    if (n != HDR + 16 || nfds != 2) {
        close_fds(fds, nfds);
        return fail(EPROTO, "dpu rings: unusable reply%s", NULL);
    }
    int rc = dpu_ring_attach(fds[0], fds[1], get32(m + HDR), get32(m + HDR + 4), get64(m + HDR + 8), &d->ring);
    if (rc < 0) return fail(-rc, "dpu rings: unusable ring pair%s", NULL);
    return 0;
}

int dpu_open(const char *sock_path, dpu_t **out) {
    char buf[sizeof(((struct sockaddr_un *)0)->sun_path) + 16];
    if (!out) return -EINVAL;
    *out = NULL;
    if (!sock_path) sock_path = default_socket(buf, sizeof buf);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(sock_path) >= sizeof sa.sun_path) return fail(ENAMETOOLONG, "dpu open: %s", sock_path);
    strcpy(sa.sun_path, sock_path);

    dpu_t *d = calloc(1, sizeof *d);
    if (!d) return -ENOMEM;
    memcpy(d->path, sa.sun_path, sizeof d->path); /* NUL-terminated: checked above */
    d->timeout_ms = 30000;
    d->pid = getpid();
    d->fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (d->fd < 0) {
        int e = errno;
        free(d);
        return fail(e, "dpu open: socket%s", NULL);
    }
    /* The reader wakes this often to re-check deadlines. */
    struct timeval tv = {.tv_sec = 0, .tv_usec = 50000};
    setsockopt(d->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    struct timeval stv = {.tv_sec = d->timeout_ms / 1000, .tv_usec = 0};
    setsockopt(d->fd, SOL_SOCKET, SO_SNDTIMEO, &stv, sizeof stv);
    if (connect(d->fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
        int e = errno;
        close(d->fd);
        free(d);
        return fail(e, "dpu open: connect %s", sock_path);
    }
    int rc = hello(d);
    if (rc < 0) {
        close(d->fd);
        free(d);
        return rc;
    }
    d->w = calloc(d->nw, sizeof *d->w);
    if (!d->w) {
        dpu_close(d);
        return -ENOMEM;
    }
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    for (unsigned i = 0; i < d->nw; i++) pthread_cond_init(&d->w[i].cv, &ca);
    pthread_cond_init(&d->slot_cv, &ca);
    pthread_cond_init(&d->ev_cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&d->mu, NULL);
    pthread_mutex_init(&d->ring_mu, NULL);
    pthread_mutex_init(&d->bulk_mu, NULL);
    if ((rc = ask_rings(d)) < 0) {
        dpu_close(d);
        return rc;
    }
    *out = d;
    return 0;
}

void dpu_close(dpu_t *d) {
    if (!d) return;
    dpu__mmap_closing(d); /* mmap.c: write back and drop dpu_mmap areas of d */
    if (d->fd >= 0) {
        /* shutdown ends the connection for every process that holds it:
         * only its opener's close may (a forked child's closes its own
         * descriptor and leaves the parent's connection alone). */
        if (getpid() == d->pid) shutdown(d->fd, SHUT_RDWR);
        close(d->fd);
    }
    if (d->status) munmap((void *)d->status, d->status_len);
    dpu_ring_close(d->ring);
    if (d->region) munmap(d->region, d->region_pages * PAGE);
    if (d->bulk) munmap(d->bulk, d->bulk_len);
    if (d->slot_of) munmap((void *)d->slot_of, d->region_pages * sizeof(uint32_t));
    for (struct mapping *m = d->maps, *n; m; m = n) {
        n = m->next;
        free(m);
    }
    for (struct extent *e = d->free_ext, *n; e; e = n) {
        n = e->next;
        free(e);
    }
    if (d->w) {
        for (unsigned i = 0; i < d->nw; i++) pthread_cond_destroy(&d->w[i].cv);
        pthread_cond_destroy(&d->slot_cv);
        pthread_cond_destroy(&d->ev_cv);
        pthread_mutex_destroy(&d->mu);
        pthread_mutex_destroy(&d->ring_mu);
        pthread_mutex_destroy(&d->bulk_mu);
        free(d->w);
    }
    free(d);
}

void dpu_set_timeout(dpu_t *d, int timeout_ms) {
    if (timeout_ms <= 0) timeout_ms = 30000;
    pthread_mutex_lock(&d->mu);
    d->timeout_ms = timeout_ms;
    pthread_mutex_unlock(&d->mu);
    struct timeval stv = {.tv_sec = timeout_ms / 1000, .tv_usec = (timeout_ms % 1000) * 1000};
    setsockopt(d->fd, SOL_SOCKET, SO_SNDTIMEO, &stv, sizeof stv);
}

uint32_t dpu_machine(const dpu_t *d) { return d->machine; }

/* ---- pages ---- */

int dpu_alloc_mode(dpu_t *d, size_t bytes, unsigned mode, dpu_gva_t *out) {
    uint8_t body[16], rep[256];
    put64(body, bytes);
    put32(body + 8, mode);
    put32(body + 12, 0);
    struct call c = {.op = OP_ALLOC, .body = body, .blen = 16, .out = rep, .cap = sizeof rep};
    int rc = do_call(d, &c);
    if (rc == 0 && out) *out = c.rgva;
    return rc;
}

int dpu_alloc(dpu_t *d, size_t bytes, dpu_gva_t *out) { return dpu_alloc_mode(d, bytes, 0, out); }

int dpu_free(dpu_t *d, dpu_gva_t gva) {
    uint8_t rep[256];
    struct call c = {.op = OP_FREE, .gva = gva, .out = rep, .cap = sizeof rep};
    return do_call(d, &c);
}

/* ---- accesses through the node ---- */

/* load_call is the LOAD of n bytes at addr (within one page), its body
 * in body, its reply (version, then the bytes) into rep. */
static struct call load_call(uint8_t body[8], dpu_gva_t addr, size_t n, uint8_t *rep, size_t cap) {
    put32(body, (uint32_t)n);
    put32(body + 4, 0);
    return (struct call){.op = OP_LOAD, .gva = addr, .body = body, .blen = 8, .out = rep, .cap = cap};
}

/* load_result copies the n bytes a LOAD answered into buf. */
static int load_result(const struct call *c, void *buf, size_t n) {
    if (c->len != 8 + n) return fail(EPROTO, "dpu load: reply of the wrong size%s", NULL);
    memcpy(buf, c->out + 8, n);
    return 0;
}

/* load_in_page loads n bytes at addr (within one page) into buf, and the
 * page version the node answered with into *version (when not NULL). */
static int load_in_page(dpu_t *d, dpu_gva_t addr, void *buf, size_t n, uint64_t *version) {
    uint8_t body[8], rep[8 + PAGE];
    struct call c = load_call(body, addr, n, rep, sizeof rep);
    int rc = do_call(d, &c);
    if (rc < 0) return rc;
    if ((rc = load_result(&c, buf, n)) < 0) return rc;
    if (version) *version = get64(rep);
    return 0;
}

/* dpu__load_fenced loads the page at page into buf (PAGE bytes). With
 * fence it also sends, before the load and without waiting for it, a
 * compare-and-swap of the page's first word that leaves the word as it is
 * (expected = desired = fence_word): it runs at the page's owner and its
 * reply carries the owner's version. A load answered below that version
 * (the node served it before the fence's answer raised its floor) is made
 * again. *fence_rc is the fence's own result (0 when not asked for). */
int dpu__load_fenced(dpu_t *d, dpu_gva_t page, void *buf, int fence, uint64_t fence_word, int *fence_rc) {
    struct timespec dl = deadline_in(d->timeout_ms);
    uint8_t fbody[16], frep[256];
    put64(fbody, fence_word);
    put64(fbody + 8, fence_word);
    struct call fc = {.op = OP_CAS, .gva = page, .body = fbody, .blen = 16, .out = frep, .cap = sizeof frep};
    struct waiter *fw = NULL;
    *fence_rc = fence ? call_send(d, &fc, &dl, &fw) : 0;

    uint64_t version = 0;
    int rc = load_in_page(d, page, buf, PAGE, &version);
    if (fw) {
        *fence_rc = call_wait(d, &fc, fw, &dl);
        if (*fence_rc == 0 && fc.len != 16) *fence_rc = fail(EPROTO, "dpu cas: reply of the wrong size%s", NULL);
    }
    if (rc < 0) return rc;
    if (fw && *fence_rc == 0 && version < get64(frep + 8)) /* served below the owner's version */
        return load_in_page(d, page, buf, PAGE, NULL);
    return 0;
}

/* A load or store longer than a page keeps up to BULK_WINDOW page
 * requests in flight on the connection (never more than its request
 * slots), so that a transfer costs about one round trip per window rather
 * than one per page. Each page's request has the connection's timeout from
 * when it was sent. */
enum { BULK_WINDOW = 16 };

/* struct bulk is a multi-page transfer in progress: page requests (or
 * bulk-area transfers) sent and not yet waited for, oldest first, and the
 * first failure. */
struct bulk {
    dpu_t *d;
    unsigned win, head, count;
    size_t okpages; /* requests that succeeded, oldest first, before any failure */
    int rc;
    char err[sizeof last_err];
    struct call c[BULK_WINDOW];
    struct waiter *w[BULK_WINDOW];
    struct timespec dl[BULK_WINDOW];
    uint8_t *dst[BULK_WINDOW]; /* loads: where the bytes go, and how many */
    size_t want[BULK_WINDOW];
    uint8_t *rep[BULK_WINDOW];
    int slot[BULK_WINDOW];     /* the bulk-area slot a transfer holds, or -1 */
};

/* A transfer through the bulk area moves up to BULK_SLOT bytes; the area
 * has BULK_SLOTS of them, so that many are in flight on a connection. */
enum { BULK_SLOT = 262144, BULK_SLOTS = 4 }; /* 256 KiB */

/* bulk_area asks the agent for the connection's bulk area once; 1 when it
 * is mapped, 0 when the agent offers none (transfers go page by page). */
static int bulk_area(dpu_t *d) {
    pthread_mutex_lock(&d->bulk_mu);
    if (d->bulk_state == 0) {
        d->bulk_state = -1;
        uint8_t body[16], rep[256];
        put64(body, (uint64_t)BULK_SLOT * BULK_SLOTS);
        put64(body + 8, 0);
        struct call c = {.op = OP_BULK, .body = body, .blen = sizeof body, .out = rep, .cap = sizeof rep};
        int saved = errno;
        char err[sizeof last_err];
        memcpy(err, last_err, sizeof err);
        if (do_call(d, &c) == 0) {
            size_t len = c.len == 8 ? (size_t)get64(rep) : 0;
            if (c.nfds == 1 && len >= (size_t)BULK_SLOT && len % BULK_SLOT == 0) {
                void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, c.fds[0], 0);
                if (m != MAP_FAILED) {
                    unsigned n = len / BULK_SLOT > BULK_SLOTS ? BULK_SLOTS : (unsigned)(len / BULK_SLOT);
                    d->bulk = m;
                    d->bulk_len = len;
                    atomic_store(&d->bulk_free, (1u << n) - 1);
                    d->bulk_state = 1;
                }
            }
            close_fds(c.fds, c.nfds);
        }
        /* an agent without bulk areas, or one too small: page by page */
        memcpy(last_err, err, sizeof err);
        errno = saved;
    }
    int ok = d->bulk_state == 1;
    pthread_mutex_unlock(&d->bulk_mu);
    return ok;
}

/* bulk_slot takes a free slot of the area, or -1. */
static int bulk_slot(dpu_t *d) {
    uint32_t f = atomic_load(&d->bulk_free);
    while (f) {
        int i = __builtin_ctz(f);
        if (atomic_compare_exchange_weak(&d->bulk_free, &f, f & ~(1u << i))) return i;
    }
    return -1;
}

static void bulk_unslot(dpu_t *d, int i) {
    if (i >= 0) atomic_fetch_or(&d->bulk_free, 1u << i);
}

/* area_result checks a STORE_BULK or LOAD_BULK reply: done and
 * the first failed piece's errno; a load's bytes are copied to dst. */
static int area_result(struct bulk *b, unsigned i) {
    struct call *c = &b->c[i];
    const char *what_op = c->op == OP_LOAD_BULK ? "load" : "store";
    if (c->len != 16) return fail(EPROTO, "dpu %s: transfer reply of the wrong size", what_op);
    uint64_t done = get64(b->rep[i]);
    uint32_t e = get32(b->rep[i] + 8);
    if (done > b->want[i]) return fail(EPROTO, "dpu %s: transfer reply says more done than asked", what_op);
    if (c->op == OP_LOAD_BULK) memcpy(b->dst[i], b->d->bulk + (size_t)b->slot[i] * BULK_SLOT, done);
    if (e || done < b->want[i]) {
        char what[96];
        snprintf(what, sizeof what, "%llu of %zu bytes", (unsigned long long)done, b->want[i]);
        return fail(e ? (int)e : EIO, c->op == OP_LOAD_BULK ? "dpu load: %s done" : "dpu store: %s done", what);
    }
    return 0;
}

static void bulk_init(struct bulk *b, dpu_t *d, uint8_t *reps, size_t rep_cap) {
    b->d = d;
    b->win = d->nw < BULK_WINDOW ? d->nw : BULK_WINDOW;
    b->head = b->count = 0;
    b->okpages = 0;
    b->rc = 0;
    b->err[0] = 0;
    for (unsigned i = 0; i < BULK_WINDOW; i++) {
        b->rep[i] = reps + (size_t)i * rep_cap;
        b->slot[i] = -1;
    }
}

static void bulk_failed(struct bulk *b, int rc) {
    if (b->rc == 0) {
        b->rc = rc;
        memcpy(b->err, last_err, sizeof b->err);
    }
}

/* bulk_wait waits for the oldest request in flight and takes its result. */
static void bulk_wait(struct bulk *b) {
    unsigned i = b->head;
    struct call *c = &b->c[i];
    int rc = call_wait(b->d, c, b->w[i], &b->dl[i]);
    if (rc == 0 && c->op == OP_LOAD) rc = load_result(c, b->dst[i], b->want[i]);
    if (rc == 0 && (c->op == OP_STORE_BULK || c->op == OP_LOAD_BULK)) rc = area_result(b, i);
    bulk_unslot(b->d, b->slot[i]);
    b->slot[i] = -1;
    if (rc < 0) bulk_failed(b, rc);
    else if (b->rc == 0) b->okpages++;
    b->head = (b->head + 1) % BULK_WINDOW;
    b->count--;
}

/* bulk_send sends *c as the newest request in flight, first waiting for
 * the oldest while the window is full or no request slot is free. After a
 * failure it sends nothing. slot is the bulk-area slot the request holds
 * until it is waited for (-1: none); one not sent is given back. */
static void bulk_send(struct bulk *b, const struct call *c, uint8_t *dst, size_t want, int slot) {
    while (b->rc == 0) {
        if (b->count < b->win) {
            unsigned i = (b->head + b->count) % BULK_WINDOW;
            b->c[i] = *c;
            b->c[i].out = b->rep[i];
            b->dst[i] = dst;
            b->want[i] = want;
            b->slot[i] = slot;
            b->dl[i] = deadline_in(b->d->timeout_ms);
            /* With nothing in flight it may wait for a slot. */
            int rc = call_send(b->d, &b->c[i], b->count ? NULL : &b->dl[i], &b->w[i]);
            if (rc == 0) {
                b->count++;
                return;
            }
            b->slot[i] = -1;
            if (rc != -EAGAIN) {
                bulk_failed(b, rc);
                break;
            }
        }
        bulk_wait(b);
    }
    bulk_unslot(b->d, slot);
}

/* bulk_area_send sends the next transfer of up to BULK_SLOT bytes at
 * addr through a slot of the bulk area (a store's bytes copied into it
 * first), waiting for the oldest transfer in flight while no slot is
 * free. */
static void bulk_area_send(struct bulk *b, uint16_t op, dpu_gva_t addr, uint8_t *p, size_t k) {
    int s = -1;
    while (b->rc == 0 && (s = bulk_slot(b->d)) < 0) {
        if (b->count > 0) {
            bulk_wait(b);
        } else {
            /* other threads' transfers hold every slot: wait for one */
            struct timespec ts = {0, 20000};
            nanosleep(&ts, NULL);
        }
    }
    if (s < 0) return; /* a transfer of this call failed meanwhile */
    if (op == OP_STORE_BULK) memcpy(b->d->bulk + (size_t)s * BULK_SLOT, p, k);
    uint8_t body[8]; /* copied out as the request is sent */
    put32(body, (uint32_t)k);
    put32(body + 4, (uint32_t)((size_t)s * BULK_SLOT));
    struct call c = {.op = op, .gva = addr, .body = body, .blen = 8, .cap = 256};
    bulk_send(b, &c, p, k, s);
}

static int bulk_end(struct bulk *b);

/* area_transfer moves n bytes at addr through the bulk area; < 0 with
 * the first failure. */
static int area_transfer(dpu_t *d, uint16_t op, dpu_gva_t addr, uint8_t *p, size_t n) {
    struct bulk *b = malloc(sizeof *b);
    uint8_t *reps = malloc((size_t)BULK_WINDOW * 256);
    if (!b || !reps) {
        free(b);
        free(reps);
        return fail(ENOMEM, "dpu transfer: no memory for it%s", NULL);
    }
    bulk_init(b, d, reps, 256);
    if (b->win > BULK_SLOTS) b->win = BULK_SLOTS;
    while (n > 0 && b->rc == 0) {
        size_t k = n < BULK_SLOT ? n : BULK_SLOT;
        bulk_area_send(b, op, addr, p, k);
        addr.lo += k;
        p += k;
        n -= k;
    }
    int rc = bulk_end(b);
    free(reps);
    free(b);
    return rc;
}

/* bulk_end waits for every request still in flight and returns the first
 * failure (with its error text), or 0. */
static int bulk_end(struct bulk *b) {
    while (b->count > 0) bulk_wait(b);
    if (b->rc < 0) memcpy(last_err, b->err, sizeof last_err);
    return b->rc;
}

int dpu_load(dpu_t *d, dpu_gva_t addr, void *buf, size_t n) {
    uint8_t *p = buf;
    if (n <= PAGE - addr.lo % PAGE) return n ? load_in_page(d, addr, p, n, NULL) : 0;
    if (bulk_area(d)) return area_transfer(d, OP_LOAD_BULK, addr, p, n);
    enum { REP = 8 + PAGE };
    uint8_t *reps = malloc((size_t)BULK_WINDOW * REP);
    struct bulk *b = malloc(sizeof *b);
    if (!reps || !b) {
        free(reps);
        free(b);
        return fail(ENOMEM, "dpu load: no memory for the transfer%s", NULL);
    }
    bulk_init(b, d, reps, REP);
    uint8_t body[8]; /* copied out as each request is sent */
    while (n > 0 && b->rc == 0) {
        size_t in = addr.lo % PAGE, k = PAGE - in < n ? PAGE - in : n;
        struct call c = load_call(body, addr, k, NULL, REP);
        bulk_send(b, &c, p, k, -1);
        addr.lo += k;
        p += k;
        n -= k;
    }
    int rc = bulk_end(b);
    free(reps);
    free(b);
    return rc;
}

int dpu_store(dpu_t *d, dpu_gva_t addr, const void *buf, size_t n) {
    const uint8_t *p = buf;
    if (n == 0) return 0;
    if (n <= PAGE - addr.lo % PAGE) {
        uint8_t rep[256];
        struct call c = {.op = OP_STORE, .gva = addr, .body = p, .blen = n, .out = rep, .cap = sizeof rep};
        return do_call(d, &c);
    }
    if (bulk_area(d)) return area_transfer(d, OP_STORE_BULK, addr, (uint8_t *)p, n);
    enum { REP = 256 };
    uint8_t reps[BULK_WINDOW * REP];
    struct bulk b;
    bulk_init(&b, d, reps, REP);
    while (n > 0 && b.rc == 0) {
        size_t in = addr.lo % PAGE, k = PAGE - in < n ? PAGE - in : n;
        struct call c = {.op = OP_STORE, .gva = addr, .body = p, .blen = k, .cap = REP};
        bulk_send(&b, &c, NULL, 0, -1);
        addr.lo += k;
        p += k;
        n -= k;
    }
    return bulk_end(&b);
}

/* pages: how many page requests a buffer of len bytes at addr takes. */
static size_t pages_of(dpu_gva_t addr, size_t len) {
    return len ? (addr.lo % PAGE + len + PAGE - 1) / PAGE : 0;
}

int dpu_storev(dpu_t *d, const dpu_iov_t *v, size_t n, size_t *done) {
    enum { REP = 256 };
    uint8_t reps[BULK_WINDOW * REP];
    struct bulk b;
    bulk_init(&b, d, reps, REP);
    for (size_t i = 0; i < n && b.rc == 0; i++) {
        dpu_gva_t addr = v[i].addr;
        const uint8_t *p = v[i].buf;
        size_t left = v[i].len;
        while (left > 0 && b.rc == 0) {
            size_t in = addr.lo % PAGE, k = PAGE - in < left ? PAGE - in : left;
            struct call c = {.op = OP_STORE, .gva = addr, .body = p, .blen = k, .cap = REP};
            bulk_send(&b, &c, NULL, 0, -1);
            addr.lo += k;
            p += k;
            left -= k;
        }
    }
    int rc = bulk_end(&b);
    if (done) {
        /* Requests are waited for oldest first: the buffers whose pages all
         * lie in the run that succeeded before the first failure are whole. */
        size_t i = 0, pages = 0;
        for (; i < n; i++) {
            size_t np = pages_of(v[i].addr, v[i].len);
            if (rc != 0 && pages + np > b.okpages) break;
            pages += np;
        }
        *done = i;
    }
    return rc;
}

int dpu_load64(dpu_t *d, dpu_gva_t addr, uint64_t *out) {
    uint8_t b[8];
    int rc = load_in_page(d, addr, b, 8, NULL);
    if (rc == 0 && out) *out = get64(b);
    return rc;
}

int dpu_store64(dpu_t *d, dpu_gva_t addr, uint64_t val) {
    uint8_t b[8];
    put64(b, val);
    return dpu_store(d, addr, b, 8);
}

static int atomic_op(dpu_t *d, uint16_t op, dpu_gva_t addr, const uint8_t *body, size_t blen, uint64_t *old_out) {
    uint8_t rep[256];
    struct call c = {.op = op, .gva = addr, .body = body, .blen = blen, .out = rep, .cap = sizeof rep};
    int rc = do_call(d, &c);
    if (rc < 0) return rc;
    if (c.len != 16) return fail(EPROTO, "dpu atomic: reply of the wrong size%s", NULL);
    if (old_out) *old_out = get64(rep);
    return 0;
}

int dpu_cas64(dpu_t *d, dpu_gva_t addr, uint64_t expected, uint64_t desired, uint64_t *old_out) {
    uint8_t body[16];
    put64(body, expected);
    put64(body + 8, desired);
    return atomic_op(d, OP_CAS, addr, body, 16, old_out);
}

int dpu_fetch_add64(dpu_t *d, dpu_gva_t addr, uint64_t delta, uint64_t *old_out) {
    uint8_t body[8];
    put64(body, delta);
    return atomic_op(d, OP_FETCH_ADD, addr, body, 8, old_out);
}

/* ---- ownership ---- */

static int page_op(dpu_t *d, uint16_t op, dpu_gva_t page, uint32_t timeout_ms, uint32_t flags, int wait_ms) {
    uint8_t body[8], rep[256];
    put32(body, timeout_ms);
    put32(body + 4, flags);
    struct call c = {.op = op, .gva = page, .body = body, .blen = (op == OP_LOCK || op == OP_ACQUIRE) ? 8 : 0,
                     .out = rep, .cap = sizeof rep, .timeout_ms = wait_ms};
    return do_call(d, &c);
}

/* A call that waits on the server for timeout_ms gets that long plus a
 * margin before the library gives up on it. */
static int wait_for(dpu_t *d, int timeout_ms) {
    int base = timeout_ms > 0 ? timeout_ms : d->timeout_ms;
    return base + 5000;
}

/* Ownership calls are the release and acquire points of dpu_mmap areas
 * (mmap.c): writes made in them are written back before a release or
 * unlock, and cached pages are dropped after an acquire or lock. */
static int acquired(int rc) {
    if (rc == 0) dpu__mmap_acquired();
    return rc;
}

int dpu_acquire(dpu_t *d, dpu_gva_t page, int timeout_ms) {
    return acquired(page_op(d, OP_ACQUIRE, page, timeout_ms > 0 ? (uint32_t)timeout_ms : 0, 0, wait_for(d, timeout_ms)));
}
int dpu_release(dpu_t *d, dpu_gva_t page) {
    dpu__mmap_releasing();
    return page_op(d, OP_RELEASE, page, 0, 0, 0);
}
/* A lock this process holds makes its node the page's owner, pinned:
 * dpu_mmap writes to that page need no acquisition of their own. */
static int locked(int rc, dpu_gva_t page) {
    if (rc == 0) dpu__mmap_locked(page, 1);
    return acquired(rc);
}

int dpu_lock_timeout(dpu_t *d, dpu_gva_t page, int timeout_ms) {
    return locked(page_op(d, OP_LOCK, page, timeout_ms > 0 ? (uint32_t)timeout_ms : 0, 0, wait_for(d, timeout_ms)), page);
}
int dpu_lock(dpu_t *d, dpu_gva_t page) { return dpu_lock_timeout(d, page, 0); }
int dpu_trylock(dpu_t *d, dpu_gva_t page) { return locked(page_op(d, OP_LOCK, page, 0, LOCK_TRY, 0), page); }
int dpu_unlock(dpu_t *d, dpu_gva_t page) {
    dpu__mmap_releasing();
    dpu__mmap_locked(page, 0);
    return page_op(d, OP_UNLOCK, page, 0, 0, 0);
}

/* ---- hooks for the library's other files (internal.h) ---- */

int dpu__reopen(const dpu_t *d, dpu_t **out) {
    int rc = dpu_open(d->path, out);
    if (rc == 0) dpu_set_timeout(*out, d->timeout_ms);
    return rc;
}

int dpu__refs(dpu_t *d, dpu_gva_t gva, size_t pages, int drop) {
    uint8_t body[24], rep[8 + 16 * MAX_MAP_PAGES + 64];
    put64(body, 0);
    put64(body + 8, (uint64_t)pages * PAGE);
    put32(body + 16, 1); /* NOFD: refs only */
    put32(body + 20, 0);
    struct call c = {.op = drop ? OP_UNMAP : OP_MAP, .gva = gva, .body = body, .blen = drop ? 16 : 24,
                     .out = rep, .cap = sizeof rep, .bytes = (uint64_t)pages * PAGE};
    int rc = do_call(d, &c);
    close_fds(c.fds, c.nfds);
    return rc;
}

uint32_t dpu__max_map_pages(const dpu_t *d) { return d->max_map_pages; }

/* Acquire and release without the dpu_mmap hooks: mmap.c takes ownership
 * of a page it is about to make writable, under its own lock. */
int dpu__acquire(dpu_t *d, dpu_gva_t page) {
    return page_op(d, OP_ACQUIRE, page, (uint32_t)d->timeout_ms, 0, wait_for(d, d->timeout_ms));
}
int dpu__release(dpu_t *d, dpu_gva_t page) { return page_op(d, OP_RELEASE, page, 0, 0, 0); }

int dpu__request(dpu_t *d, uint16_t op, const void *body, size_t len) {
    uint8_t rep[256];
    if (len > MAX_BODY) return -EINVAL;
    struct call c = {.op = op, .body = body, .blen = len, .out = rep, .cap = sizeof rep};
    int rc = do_call(d, &c);
    close_fds(c.fds, c.nfds);
    return rc;
}

/* ---- where, translate, events ---- */

int dpu_locate(dpu_t *d, dpu_gva_t addr, dpu_location_t *out) {
    uint8_t rep[256];
    struct call c = {.op = OP_WHERE, .gva = addr, .out = rep, .cap = sizeof rep};
    int rc = do_call(d, &c);
    if (rc < 0) return rc;
    if (c.len != 16) return fail(EPROTO, "dpu where: reply of the wrong size%s", NULL);
    if (out) {
        out->tier = rep[0];
        out->speed = rep[1];
        out->hops = get16(rep + 2);
        out->owner = get32(rep + 4);
        out->version = get64(rep + 8);
    }
    return 0;
}

int dpu_where(dpu_t *d, dpu_gva_t addr, int *tier_out, int *hops_out) {
    dpu_location_t l;
    int rc = dpu_locate(d, addr, &l);
    if (rc < 0) return rc;
    if (tier_out) *tier_out = l.tier;
    if (hops_out) *hops_out = l.hops;
    return 0;
}

dpu_clock_t dpu_clock(dpu_t *d) {
    uint8_t rep[256];
    struct call c = {.op = OP_CLOCK, .out = rep, .cap = sizeof rep};
    dpu_clock_t t = {0, 0, 0};
    int rc = do_call(d, &c);
    if (rc < 0) {
        t.error = rc;
        return t;
    }
    if (c.len != 24 || (int64_t)get64(rep + 8) < 0) {
        t.error = fail(EPROTO, "dpu clock: reply of the wrong size%s", NULL);
        return t;
    }
    t.time = (int64_t)get64(rep);
    t.error = (int64_t)get64(rep + 8);
    t.ref = get32(rep + 16);
    return t;
}

int dpu_translate_lva(dpu_t *d, const void *lva, dpu_gva_t *out) {
    uint8_t body[16], rep[256];
    put32(body, 0);
    put32(body + 4, 0);
    put64(body + 8, (uint64_t)(uintptr_t)lva);
    struct call c = {.op = OP_TRANSLATE, .body = body, .blen = 16, .out = rep, .cap = sizeof rep};
    int rc = do_call(d, &c);
    if (rc == 0 && out) *out = c.rgva;
    return rc;
}

int dpu_translate_gva(dpu_t *d, dpu_gva_t gva, const void **lva_out) {
    uint8_t body[16] = {0}, rep[256];
    put32(body, 1);
    struct call c = {.op = OP_TRANSLATE, .gva = gva, .body = body, .blen = 16, .out = rep, .cap = sizeof rep};
    int rc = do_call(d, &c);
    if (rc < 0) return rc;
    if (c.len != 8) return fail(EPROTO, "dpu translate: reply of the wrong size%s", NULL);
    if (lva_out) *lva_out = (const void *)(uintptr_t)get64(rep);
    return 0;
}

int dpu_subscribe(dpu_t *d, uint32_t mask) {
    uint8_t body[8], rep[256];
    put32(body, mask);
    put32(body + 4, 0);
    struct call c = {.op = OP_SUBSCRIBE, .body = body, .blen = 8, .out = rep, .cap = sizeof rep};
    return do_call(d, &c);
}

int dpu_next_event(dpu_t *d, dpu_event_t *ev, int timeout_ms) {
    struct timespec dl = deadline_in(timeout_ms > 0 ? timeout_ms : 0);
    int rc = 0;
    pthread_mutex_lock(&d->mu);
    d->ev_waiting++;
    while (d->ev_len == 0 && !d->ev_lost) {
        if (d->broken) {
            rc = -d->broken;
            break;
        }
        if (past(&dl)) {
            rc = -ETIMEDOUT;
            break;
        }
        if (!d->reading) {
            read_once(d);
            continue;
        }
        pthread_cond_timedwait(&d->ev_cv, &d->mu, &dl);
    }
    d->ev_waiting--;
    if (rc == 0) {
        if (d->ev_lost && d->ev_len < EVQ) {
            memset(ev, 0, sizeof *ev);
            ev->type = DPU_EVENT_LOST;
            d->ev_lost = 0;
        } else {
            *ev = d->ev[d->ev_head];
            d->ev_head = (d->ev_head + 1) % EVQ;
            d->ev_len--;
        }
    }
    promote(d, NULL);
    pthread_mutex_unlock(&d->mu);
    if (rc < 0) snprintf(last_err, sizeof last_err, "dpu next event: %s", dpu_strerror(rc));
    return rc;
}

/* ---- local mappings ---- */

#define REGION_PAGES ((size_t)1 << 20) /* 4 GiB of address space, reserved on first map */

static int reserve_region(dpu_t *d) {
    if (d->region) return 0;
    void *r = mmap(NULL, REGION_PAGES * PAGE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (r == MAP_FAILED) return -errno;
    void *s = mmap(NULL, REGION_PAGES * sizeof(uint32_t), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (s == MAP_FAILED) {
        int e = errno;
        munmap(r, REGION_PAGES * PAGE);
        return -e;
    }
    struct extent *e = malloc(sizeof *e);
    if (!e) {
        munmap(r, REGION_PAGES * PAGE);
        munmap(s, REGION_PAGES * sizeof(uint32_t));
        return -ENOMEM;
    }
    *e = (struct extent){NULL, 0, REGION_PAGES};
    d->free_ext = e;
    d->region = r;
    d->slot_of = s;
    d->region_pages = REGION_PAGES;
    return 0;
}

/* dpu__extent_take takes pages free page indices from list (first fit). */
long dpu__extent_take(struct extent **list, size_t pages) {
    for (struct extent **p = list; *p; p = &(*p)->next) {
        struct extent *e = *p;
        if (e->len < pages) continue;
        size_t start = e->start;
        e->start += pages;
        e->len -= pages;
        if (e->len == 0) {
            *p = e->next;
            free(e);
        }
        return (long)start;
    }
    return -1;
}

/* dpu__extent_give returns page indices to list, merging neighbours. */
void dpu__extent_give(struct extent **list, size_t start, size_t pages) {
    struct extent **p = list;
    while (*p && (*p)->start < start) p = &(*p)->next;
    struct extent *prev = NULL;
    for (struct extent *e = *list; e && e->start < start; e = e->next) prev = e;
    if (prev && prev->start + prev->len == start) {
        prev->len += pages;
        if (*p && prev->start + prev->len == (*p)->start) {
            struct extent *n = *p;
            prev->len += n->len;
            prev->next = n->next;
            free(n);
        }
        return;
    }
    if (*p && start + pages == (*p)->start) {
        (*p)->start = start;
        (*p)->len += pages;
        return;
    }
    struct extent *e = malloc(sizeof *e);
    if (!e) return; /* the pages stay reserved, unused */
    *e = (struct extent){*p, start, pages};
    *p = e;
}

static void *region_at(dpu_t *d, size_t idx) { return d->region + idx * PAGE; }

/* unmap_range sends UNMAP for pages [first, first+pages) mapped from gva and
 * puts the address range back to reserved-only. */
static int unmap_range(dpu_t *d, dpu_gva_t gva, size_t first, size_t pages) {
    int rc = 0;
    for (size_t i = 0; i < pages; i++) atomic_store_explicit(&d->slot_of[first + i], 0, memory_order_release);
    for (size_t done = 0; done < pages; done += d->max_map_pages) {
        size_t n = pages - done < d->max_map_pages ? pages - done : d->max_map_pages;
        uint8_t body[16], rep[256];
        put64(body, (uint64_t)(uintptr_t)region_at(d, first + done));
        put64(body + 8, (uint64_t)n * PAGE);
        struct call c = {.op = OP_UNMAP, .gva = dpu_gva_add(gva, done * PAGE), .body = body, .blen = 16,
                         .out = rep, .cap = sizeof rep};
        int r = do_call(d, &c);
        if (r < 0 && rc == 0) rc = r;
    }
    mmap(region_at(d, first), pages * PAGE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
    return rc;
}

int dpu_map(dpu_t *d, dpu_gva_t gva, size_t bytes, const void **lva_out) {
    if (bytes == 0 || gva.lo % PAGE != 0) return fail(EINVAL, "dpu map: need a page start and a size%s", NULL);
    size_t pages = (bytes + PAGE - 1) / PAGE;
    struct mapping *m = malloc(sizeof *m);
    if (!m) return -ENOMEM;
    pthread_mutex_lock(&d->mu);
    int rc = reserve_region(d);
    long first = rc < 0 ? -1 : dpu__extent_take(&d->free_ext, pages);
    pthread_mutex_unlock(&d->mu);
    if (rc < 0 || first < 0) {
        free(m);
        return fail(rc < 0 ? -rc : ENOMEM, "dpu map: no room for the mapping in this connection's region%s", NULL);
    }
    size_t mapped = 0;
    while (mapped < pages) {
        size_t n = pages - mapped < d->max_map_pages ? pages - mapped : d->max_map_pages;
        uint8_t body[24], rep[8 + 16 * MAX_MAP_PAGES + 64];
        put64(body, (uint64_t)(uintptr_t)region_at(d, (size_t)first + mapped));
        put64(body + 8, (uint64_t)n * PAGE);
        put32(body + 16, 0);
        put32(body + 20, 0);
        struct call c = {.op = OP_MAP, .gva = dpu_gva_add(gva, mapped * PAGE), .body = body, .blen = 24,
                         .out = rep, .cap = sizeof rep, .lva = (uint64_t)(uintptr_t)region_at(d, (size_t)first + mapped),
                         .bytes = (uint64_t)n * PAGE};
        rc = do_call(d, &c);
        if (rc < 0) break;
        if (c.len != 8 + 16 * n || get32(rep) != n || (size_t)c.nfds != n) {
            close_fds(c.fds, c.nfds);
            mapped += n; /* the server holds the refs: undo them below */
            rc = fail(EPROTO, "dpu map: malformed reply%s", NULL);
            break;
        }
        for (size_t i = 0; i < n && rc == 0; i++) {
            uint32_t slot = get32(rep + 8 + 16 * i);
            void *at = region_at(d, (size_t)first + mapped + i);
            if (slot == 0 || slot >= d->nslots ||
                mmap(at, PAGE, PROT_READ, MAP_SHARED | MAP_FIXED, c.fds[i], 0) == MAP_FAILED) {
                rc = fail(slot == 0 || slot >= d->nslots ? EPROTO : errno, "dpu map: mapping a replica%s", NULL);
                break;
            }
            atomic_store_explicit(&d->slot_of[(size_t)first + mapped + i], slot, memory_order_release);
        }
        close_fds(c.fds, c.nfds);
        mapped += n;
        if (rc < 0) break;
    }
    if (rc < 0) {
        if (mapped) unmap_range(d, gva, (size_t)first, mapped);
        pthread_mutex_lock(&d->mu);
        dpu__extent_give(&d->free_ext, (size_t)first, pages);
        pthread_mutex_unlock(&d->mu);
        free(m);
        return rc;
    }
    m->gva = gva;
    m->first = (size_t)first;
    m->pages = pages;
    pthread_mutex_lock(&d->mu);
    m->next = d->maps;
    d->maps = m;
    pthread_mutex_unlock(&d->mu);
    if (lva_out) *lva_out = region_at(d, (size_t)first);
    return 0;
}

int dpu_unmap(dpu_t *d, dpu_gva_t gva) {
    pthread_mutex_lock(&d->mu);
    struct mapping *m = NULL;
    for (struct mapping **p = &d->maps; *p; p = &(*p)->next) {
        if ((*p)->gva.hi == gva.hi && (*p)->gva.lo == gva.lo) {
            m = *p;
            *p = m->next;
            break;
        }
    }
    pthread_mutex_unlock(&d->mu);
    if (!m) return fail(EINVAL, "dpu unmap: no mapping starts at that gva%s", NULL);
    int rc = unmap_range(d, m->gva, m->first, m->pages);
    pthread_mutex_lock(&d->mu);
    dpu__extent_give(&d->free_ext, m->first, m->pages);
    pthread_mutex_unlock(&d->mu);
    free(m);
    return rc;
}

/* gva_of finds the GVA mapped at region page idx. */
static int gva_of(dpu_t *d, size_t idx, dpu_gva_t *out) {
    int rc = -EFAULT;
    pthread_mutex_lock(&d->mu);
    for (struct mapping *m = d->maps; m; m = m->next) {
        if (idx >= m->first && idx < m->first + m->pages) {
            *out = dpu_gva_add(m->gva, (idx - m->first) * PAGE);
            rc = 0;
            break;
        }
    }
    pthread_mutex_unlock(&d->mu);
    return rc;
}

struct slot_view {
    _Atomic uint64_t seq;
    _Atomic uint64_t version;
    _Atomic uint32_t state;
};

static const struct slot_view *slot_at(const dpu_t *d, uint32_t slot) {
    return (const struct slot_view *)(const void *)(d->status + (size_t)slot * SLOT_SIZE);
}

/* copy_relaxed copies n bytes that another process may be rewriting, with
 * relaxed atomic loads (a seqlock reader validates the result). */
static void copy_relaxed(uint8_t *dst, const uint8_t *src, size_t n) {
    while (n > 0 && ((uintptr_t)src & 7)) {
        *dst++ = __atomic_load_n(src++, __ATOMIC_RELAXED);
        n--;
    }
    for (; n >= 8; n -= 8, src += 8, dst += 8) {
        uint64_t v = __atomic_load_n((const uint64_t *)(const void *)src, __ATOMIC_RELAXED);
        memcpy(dst, &v, 8);
    }
    while (n > 0) {
        *dst++ = __atomic_load_n(src++, __ATOMIC_RELAXED);
        n--;
    }
}

/* snapshot copies n bytes of one page's replica at src if the replica is
 * valid and was not rewritten meanwhile. */
static bool snapshot(const struct slot_view *s, const uint8_t *src, void *dst, size_t n) {
    for (int tries = 0; tries < 4; tries++) {
        uint64_t s1 = atomic_load_explicit(&s->seq, memory_order_acquire);
        if (s1 & 1) continue;
        if (atomic_load_explicit(&s->state, memory_order_relaxed) != SLOT_VALID) return false;
        copy_relaxed(dst, src, n);
        atomic_thread_fence(memory_order_acquire);
        if (atomic_load_explicit(&s->seq, memory_order_relaxed) == s1) return true;
    }
    return false;
}

int dpu_read(dpu_t *d, const void *lva, void *buf, size_t n) {
    uintptr_t a = (uintptr_t)lva, base = (uintptr_t)d->region;
    if (!d->region || a < base || a - base + n > d->region_pages * PAGE || a - base + n < a - base)
        return fail(EFAULT, "dpu read: not a mapped address%s", NULL);
    uint8_t *out = buf;
    while (n > 0) {
        size_t idx = (a - base) / PAGE, in = (a - base) % PAGE, k = PAGE - in < n ? PAGE - in : n;
        uint32_t slot = atomic_load_explicit(&d->slot_of[idx], memory_order_acquire);
        if (slot == 0) return fail(EFAULT, "dpu read: not a mapped address%s", NULL);
        if (!snapshot(slot_at(d, slot), (const uint8_t *)a, out, k)) {
            dpu_gva_t g;
            int rc = gva_of(d, idx, &g);
            if (rc < 0) return fail(EFAULT, "dpu read: not a mapped address%s", NULL);
            g.lo += in;
            if ((rc = load_in_page(d, g, out, k, NULL)) < 0) return rc;
        }
        a += k;
        out += k;
        n -= k;
    }
    return 0;
}

int dpu_read64(dpu_t *d, const void *lva, uint64_t *out) {
    uintptr_t a = (uintptr_t)lva, base = (uintptr_t)d->region;
    if (!d->region || a < base || a - base >= d->region_pages * PAGE || (a & 7))
        return fail(EFAULT, "dpu read64: not an aligned mapped address%s", NULL);
    size_t idx = (a - base) / PAGE;
    uint32_t slot = atomic_load_explicit(&d->slot_of[idx], memory_order_acquire);
    if (slot == 0) return fail(EFAULT, "dpu read64: not a mapped address%s", NULL);
    const struct slot_view *s = slot_at(d, slot);
    for (int tries = 0; tries < 4; tries++) {
        uint64_t s1 = atomic_load_explicit(&s->seq, memory_order_acquire);
        if (s1 & 1) continue;
        if (atomic_load_explicit(&s->state, memory_order_relaxed) != SLOT_VALID) break;
        uint64_t v = __atomic_load_n((const uint64_t *)lva, __ATOMIC_RELAXED);
        atomic_thread_fence(memory_order_acquire);
        if (atomic_load_explicit(&s->seq, memory_order_relaxed) == s1) {
            *out = v;
            return 0;
        }
    }
    return dpu_read(d, lva, out, 8);
}

/* ---- GVA text ---- */

int dpu_gva_parse(const char *text, dpu_gva_t *out) {
    if (!text || strncmp(text, "gva:", 4) != 0) return -EINVAL;
    const char *h = text + 4;
    uint64_t w[2] = {0, 0};
    for (int i = 0; i < 32; i++) {
        char c = h[i];
        int v;
        if (c >= '0' && c <= '9') v = c - '0';
        else if (c >= 'a' && c <= 'f') v = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') v = c - 'A' + 10;
        else return -EINVAL;
        w[i / 16] = w[i / 16] << 4 | (uint64_t)v;
    }
    if (h[32] != 0) return -EINVAL;
    if (out) {
        out->hi = w[0];
        out->lo = w[1];
    }
    return 0;
}

int dpu_gva_format(dpu_gva_t gva, char *buf, size_t len) {
    static const char digits[] = "0123456789abcdef";
    if (!buf || len < DPU_GVA_TEXT_LEN + 1) return -ERANGE;
    memcpy(buf, "gva:", 4);
    for (int i = 0; i < 16; i++) {
        buf[4 + i] = digits[(gva.hi >> (60 - 4 * i)) & 0xf];
        buf[20 + i] = digits[(gva.lo >> (60 - 4 * i)) & 0xf];
    }
    buf[36] = 0;
    return 0;
}

/* ---- extension ops ---- */

int dpu_call(dpu_t *d, uint16_t op, const void *body, size_t len, void *reply, size_t cap, size_t *len_out) {
    if (len_out) *len_out = 0;
    if (!d || op < 64 || op > 79 || len > MAX_BODY || (len && !body) || (cap && !reply))
        return fail(EINVAL, "dpu call: op or buffers out of range%s", NULL);
    struct call c = {.op = op, .body = body, .blen = len, .out = reply, .cap = cap};
    int rc = do_call(d, &c);
    close_fds(c.fds, c.nfds);
    if (rc == 0 && len_out) *len_out = c.len;
    return rc;
}

/* ---- errors ---- */

const char *dpu_strerror(int err) {
    if (err < 0) err = -err;
    switch (err) {
    case 0: return "success";
    case EPERM: return "operation not permitted";
    case ENOENT: return "no such page";
    case EINTR: return "interrupted";
    case EIO: return "input/output error";
    case EBADF: return "bad descriptor";
    case EAGAIN: return "try again";
    case ENOMEM: return "out of memory (capacity)";
    case EACCES: return "permission denied";
    case EFAULT: return "bad address";
    case EBUSY: return "busy";
    case EEXIST: return "already exists";
    case EINVAL: return "invalid argument";
    case ENOSPC: return "no space left";
    case ERANGE: return "result out of range";
    case EDEADLK: return "already held by this connection";
    case ENAMETOOLONG: return "name too long";
    case ENOLCK: return "no locks available";
    case ENOSYS: return "operation not supported by this server";
    case EPROTO: return "protocol error";
    case EMSGSIZE: return "message too long";
    case EPROTONOSUPPORT: return "no common protocol version";
    case EOPNOTSUPP: return "operation not supported";
    case ECONNRESET: return "connection reset";
    case ENOTCONN: return "not connected";
    case ETIMEDOUT: return "timed out";
    case ESTALE: return "stale address (a page of an earlier run of its node)";
    case EDQUOT: return "quota exceeded";
    case ECONNREFUSED: return "connection refused";
    case ECANCELED: return "canceled";
    case EPIPE: return "broken pipe";
    case ENOTSOCK: return "not a socket";
    case EHOSTDOWN: return "host is down (the page's owner is unreachable)";
    case EHOSTUNREACH: return "no route to the page's owner";
    }
    return "unknown error";
}

/* ---- the seed's form: per-thread default connection ---- */

static pthread_key_t tls_key;
static pthread_once_t tls_once = PTHREAD_ONCE_INIT;

static void tls_close(void *p) { dpu_close(p); }
static void tls_init(void) { pthread_key_create(&tls_key, tls_close); }

static dpu_t *thread_conn(int *err) {
    pthread_once(&tls_once, tls_init);
    dpu_t *d = pthread_getspecific(tls_key);
    if (d) return d;
    int rc = dpu_open(NULL, &d);
    if (rc < 0) {
        *err = -rc;
        return NULL;
    }
    pthread_setspecific(tls_key, d);
    return d;
}

uint64_t atomic_cas_remote(dpu_gva_t addr, uint64_t expected, uint64_t desired) {
    /* errno is set only on failure: internal timed waits (EAGAIN from the
     * socket's receive timeout) must not leak into a successful call. */
    int saved = errno;
    int err = 0;
    dpu_t *d = thread_conn(&err);
    if (!d) {
        errno = err;
        return 0;
    }
    uint64_t old = 0;
    int rc = dpu_cas64(d, addr, expected, desired, &old);
    if (rc < 0) {
        errno = -rc;
        return 0;
    }
    errno = saved;
    return old;
}
