/*
 * libdpucuda-remote.so — stands in for libcuda.so.1 on a host without a
 * GPU and forwards the CUDA driver API over the fabric to a launcher
 * (dpu-cuda-launcher) on the node that has one (wire.h, mbox.h).
 *
 * Environment:
 *   DPU_CUDA_REMOTE       the launcher's door GVA (gva:...), or a file holding it
 *   DPU_SOCKET / DPU_RUN_DIR   this node's host interface (libdpu's defaults)
 *   DPU_CUDA_REMOTE_TIMEOUT_S  bound of one call (default 600)
 *   DPU_CUDA_REMOTE_THREADS    threads moving bulk chunks (default 8)
 *   DPU_CUDA_REMOTE_XFER  bulk (default): staging pages move in chunks of
 *                         RW_CHUNK_PAGES, one bulk transfer each; paged: one
 *                         STORE or LOAD a page, on both sides (the version 3
 *                         path, for comparison)
 *   DPU_CUDA_REMOTE_FAULT corrupt-chunk=N: the N-th chunk stored arrives
 *                         corrupt (tests; mbox.h)
 *   DPU_CUDA_REMOTE_LOG   0 quiet, 1 (default) warnings and entry points
 *                         asked for but not served, 2 every call
 *
 * What runs where: device queries are answered from a per-device snapshot
 * (one call); contexts are the launcher's (the current one is tracked per
 * thread here and sent with every call); host allocations ("pinned") are
 * plain memory here; copies move through the inboxes' staging areas in
 * chunks; a launch sends its packed arguments (the layout comes from the
 * driver when the function is looked up). The CUDA runtime's private
 * export tables (cuGetExportTable) are served here: module loading from a
 * fat binary goes to the launcher, the rest is local bookkeeping.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "cu.h"
#include "dpu.h"
#include "mbox.h"
#include "md2.h"
#include "wire.h"

#define API __attribute__((visibility("default")))

static int loglevel = 1;
static void logf_(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void logf_(int level, const char *fmt, ...) {
    if (level > loglevel)
        return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "libdpucuda-remote: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* ---- objects ---- */
enum { O_CTX = 1, O_MODULE, O_FUNC, O_LIBRARY, O_KERNEL, O_STREAM, O_EVENT };
#define OBJ_MAGIC 0x6f626a52u

struct robj {
    uint32_t magic, kind, id;
    int dev;             /* O_CTX */
    int primary;         /* O_CTX: a device's primary context */
    unsigned flags;      /* O_STREAM, O_EVENT, O_CTX */
    int priority;        /* O_STREAM */
    struct robj *ctx;    /* O_STREAM: its context */
    uint32_t nparams, argbytes; /* O_FUNC, O_KERNEL */
    _Atomic uint64_t qno;       /* O_STREAM: its last queued record's number; O_EVENT: its last record's */
    struct rw_param *param;
    char *name;          /* O_FUNC, O_KERNEL: the name it was looked up by */
    struct robj *lib;    /* O_KERNEL: its library */
};

static struct robj *obj_new(uint32_t kind, uint32_t id) {
    struct robj *o = calloc(1, sizeof *o);
    if (o) {
        o->magic = OBJ_MAGIC;
        o->kind = kind;
        o->id = id;
    }
    return o;
}
static struct robj *obj_check(const void *p, uint32_t kind) {
    const struct robj *o = p;
    if (!o || o->magic != OBJ_MAGIC || o->kind != kind)
        return NULL;
    return (struct robj *)o;
}
static void obj_free(struct robj *o) {
    if (!o)
        return;
    o->magic = 0;
    free(o->param);
    free(o->name);
    free(o);
}

/* ---- the session ---- */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER; /* one call at a time */
static pthread_mutex_t amu = PTHREAD_MUTEX_INITIALIZER; /* the allocation table */
static pthread_once_t once = PTHREAD_ONCE_INIT;
static CUresult init_result = CUDA_ERROR_NOT_INITIALIZED;
static int initialized;
static dpu_t *D;
static struct mbox MB;
static dpu_gva_t DOOR;
static uint32_t SLOT;
static uint64_t TOKEN, SEQ;
static int timeout_ms = 600000;
static int driver_version = 13000, device_count;
static pthread_t hb_thread;
static atomic_int hb_stop;
static int hb_started;

static __thread struct robj *cur_ctx;
#define CTX_STACK 16
static __thread struct robj *ctx_stack[CTX_STACK];
static __thread int ctx_depth;

#define MAX_DEV 16
static struct rw_device_info *devinfo[MAX_DEV];
static struct robj *primary[MAX_DEV];
static int primary_refs[MAX_DEV];
static unsigned primary_flags[MAX_DEV];

/* The device allocations of this process, to tell device from host
 * pointers in cuMemcpy (unified addressing). */
struct alloc { uint64_t base, size; };
static struct alloc *allocs;
static size_t nallocs, capallocs;

static uint64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static dpu_gva_t door_field(size_t off) { return dpu_gva_add(DOOR, off); }
static dpu_gva_t slot_field(size_t off) {
    return door_field(offsetof(struct rw_door, slot) + SLOT * sizeof(struct rw_door_slot) + off);
}

static CUresult errno_to_cu(int e) {
    switch (e) {
    case -ETIMEDOUT: return CUDA_ERROR_LAUNCH_FAILED;
    case -ENOMEM: return CUDA_ERROR_OUT_OF_MEMORY;
    default: return CUDA_ERROR_UNKNOWN;
    }
}

/* rpc_send_locked sends one request and returns its seq (0: not sent,
 * *err says why); rpc_wait_locked waits for the reply to seq. One request
 * is outstanding at a time. The caller holds mu. */
static uint64_t rpc_send_locked(uint16_t op, uint16_t flags, const void *body, uint32_t len, CUresult *err) {
    struct rw_hdr h = {.seq = ++SEQ, .op = op, .flags = flags, .ctx = cur_ctx ? cur_ctx->id : 0, .token = TOKEN};
    int e = mbox_send(&MB, &h, body, len);
    if (e < 0) {
        logf_(1, "op %u: send: %s", op, dpu_strerror(e));
        *err = errno_to_cu(e);
        return 0;
    }
    return h.seq;
}
static CUresult rpc_wait_locked(uint64_t seq, uint16_t op, void *rep, uint32_t cap, uint32_t *rlen) {
    static __thread unsigned char buf[RW_PAGE];
    struct rw_hdr r;
    int e = mbox_recv(&MB, seq, &r, buf, sizeof buf, timeout_ms, NULL, NULL);
    if (e < 0) {
        logf_(1, "op %u: no reply: %s", op, dpu_strerror(e));
        return errno_to_cu(e);
    }
    if (r.len > cap)
        return CUDA_ERROR_UNKNOWN;
    if (rep && r.len)
        memcpy(rep, buf, r.len);
    if (rlen)
        *rlen = r.len;
    logf_(2, "op %u (context %u) -> %d", op, cur_ctx ? cur_ctx->id : 0, r.status);
    return (CUresult)r.status;
}

/* rpc_locked sends one request and waits for its reply. */
static CUresult rpc_locked(uint16_t op, uint16_t flags, const void *body, uint32_t len, void *rep, uint32_t cap,
                           uint32_t *rlen) {
    CUresult err = CUDA_SUCCESS;
    uint64_t seq = rpc_send_locked(op, flags, body, len, &err);
    return seq ? rpc_wait_locked(seq, op, rep, cap, rlen) : err;
}

/* ---- bulk copies through the staging areas ----
 * A copy larger than half the staging area goes in chunks of half of it,
 * alternating halves: the next chunk's pages are stored while the peer
 * reads this one's (push), or asked for before this one is read (pull). */
static uint32_t half_pages(void) { return MB.staging_pages / 2; }
static size_t chunk_for(size_t n, int *pipe) {
    uint32_t hp = half_pages();
    *pipe = hp > 0 && n > (size_t)hp * RW_STAGE_DATA;
    return *pipe ? (size_t)hp * RW_STAGE_DATA : mbox_capacity(&MB);
}

/* push_locked: n bytes of src to the device at dst (OP_HTOD). */
static CUresult push_locked(CUdeviceptr dst, const unsigned char *src, size_t n, uint32_t sid, int async) {
    int pipe;
    size_t chunk = chunk_for(n, &pipe);
    uint64_t outstanding = 0;
    CUresult r = CUDA_SUCCESS;
    for (size_t off = 0, k = 0; off < n; off += chunk, k++) {
        size_t m = n - off < chunk ? n - off : chunk;
        uint32_t stage = pipe ? (uint32_t)(k % 2) * half_pages() : 0;
        /* The other half is the one the launcher reads for the request outstanding. */
        int e = mbox_put_at(&MB, stage, src + off, m, SEQ + 1);
        if (outstanding) {
            r = rpc_wait_locked(outstanding, OP_HTOD, NULL, 0, NULL);
            outstanding = 0;
            if (r)
                break;
        }
        if (e < 0) {
            r = errno_to_cu(e);
            break;
        }
        struct rw_copy c = {.dst = dst + off, .bytes = m, .stream = sid, .async = (uint32_t)async, .stage = stage};
        if (!(outstanding = rpc_send_locked(OP_HTOD, 0, &c, sizeof c, &r)))
            break;
    }
    if (outstanding)
        r = rpc_wait_locked(outstanding, OP_HTOD, NULL, 0, NULL);
    return r;
}

/* pull_locked: n bytes into dst, each chunk asked for with op: OP_DTOH
 * (c: its source and stream) or OP_DTOH_FETCH (f: the pending copy; the
 * first part's wait as given, the rest waiting). */
struct pull { uint16_t op; struct rw_copy c; struct rw_fetch f; };
static uint64_t pull_ask(struct pull *p, size_t off, size_t m, uint32_t stage, CUresult *err) {
    if (p->op == OP_DTOH) {
        struct rw_copy c = p->c;
        c.src += off, c.bytes = m, c.stage = stage;
        return rpc_send_locked(p->op, 0, &c, sizeof c, err);
    }
    struct rw_fetch f = p->f;
    f.off = off, f.len = m, f.stage = stage, f.wait = off > 0 || p->f.wait;
    return rpc_send_locked(p->op, 0, &f, sizeof f, err);
}
static CUresult pull_locked(struct pull *p, unsigned char *dst, size_t n) {
    int pipe;
    size_t chunk = chunk_for(n, &pipe);
    CUresult r = CUDA_SUCCESS;
    uint64_t seq = pull_ask(p, 0, n < chunk ? n : chunk, 0, &r);
    for (size_t off = 0, k = 0; seq && off < n; off += chunk, k++) {
        size_t m = n - off < chunk ? n - off : chunk;
        uint32_t stage = pipe ? (uint32_t)(k % 2) * half_pages() : 0;
        if ((r = rpc_wait_locked(seq, p->op, NULL, 0, NULL)))
            return r;
        uint64_t this = seq, next = 0;
        if (off + m < n) { /* the launcher puts the next chunk in the other half meanwhile */
            size_t m2 = n - off - m < chunk ? n - off - m : chunk;
            if (!(next = pull_ask(p, off + m, m2, pipe ? (uint32_t)((k + 1) % 2) * half_pages() : 0, &r)))
                return r;
        }
        int e = mbox_get_at(&MB, stage, dst + off, m, this);
        if (e < 0) {
            if (next)
                rpc_wait_locked(next, p->op, NULL, 0, NULL);
            return errno_to_cu(e);
        }
        seq = next;
    }
    return r;
}

/* ---- the asynchronous queue ----
 * Launches, asynchronous memsets and copies, event records and stream
 * waits return at once: each is appended, as a record (wire.h's rw_rec),
 * to the queue, and a sender thread sends the queue in order as OP_BATCH
 * messages, one in flight at a time (what accumulates during a round trip
 * goes in the next one). Every other request first sends what is queued
 * (session_lock), so the launcher sees the calls in the order they were
 * made. An error an operation of a batch met on the launcher is kept and
 * returned by the next synchronising call (stream, event and context
 * synchronisation and queries, synchronous copies); the driver's sticky
 * errors are returned by every call after. */
#define Q_CAP (4u << 20) /* bytes queued before a submitter waits for the sender */
static pthread_mutex_t qmu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t qwork = PTHREAD_COND_INITIALIZER, qspace = PTHREAD_COND_INITIALIZER;
static unsigned char *qbuf;
static size_t qhead, qlen;
static int qstop, sender_started;
static pthread_t sender_thread;
static CUresult deferred_err;       /* the first asynchronous error not yet returned (under mu) */
static _Atomic CUresult sticky_err; /* a sticky error: every call returns it */
static uint64_t batches, batched_ops;
/* Records are numbered in queue order: q_enq_no the last queued, q_taken
 * the last taken from the queue (under qmu), q_done_no the last the
 * launcher ran (a query of a stream or event whose last record is later
 * answers not ready without asking). */
static uint64_t q_enq_no, q_taken;
static _Atomic uint64_t q_done_no, q_default_no; /* q_default_no: the default streams' last record */
static __thread uint64_t q_last_no;            /* this thread's last queued record */

/* A host function (cuLaunchHostFunc) or stream callback in the queue: a
 * record that is not sent. Whoever takes it from the queue's head (the
 * sender, or a call sending the queue) synchronises its stream, fetches
 * the copies that completed, and calls it without mu held; until it
 * returns nothing queued after it is sent (later work on any stream
 * waits for it, where the driver makes only its stream's wait). */
#define Q_LOCAL 0xff00u /* records from here on are run by the client */
#define Q_HOSTFN 0xffffu
#define Q_PUSH 0xfffeu
/* A copy to the device of more than a record holds, asynchronous: its
 * bytes were taken at the call (buf, freed once sent); it is pushed
 * through the staging areas in its turn. */
struct q_push {
    CUdeviceptr dst;
    unsigned char *buf;
    size_t bytes;
    struct robj *ctx;
    uint32_t sid, reserved;
};
#define PUSH_CAP (1ull << 30) /* bytes taken and not yet pushed, at most */
static _Atomic uint64_t push_held;
static void run_push_locked(const struct q_push *m);
struct q_hostfn {
    void (*fn)(void);
    void *data;
    CUstream stream;
    struct robj *ctx;
    uint32_t sid, kind; /* kind 0: CUhostFn, 1: CUstreamCallback */
};
static int hostfn_running;
static pthread_cond_t hostfn_done = PTHREAD_COND_INITIALIZER;
static void run_hostfn_locked(const struct q_hostfn *m);
static void pend_sent(const unsigned char *body, uint32_t n);

static int is_sticky(CUresult r) {
    switch ((int)r) {
    case 214: /* uncorrectable ECC */
    case 700: /* illegal address */
    case 702: /* launch timeout */
    case 710: /* assert */
    case 714: /* hardware stack error */
    case 715: /* illegal instruction */
    case 716: /* misaligned address */
    case 717: /* invalid address space */
    case 718: /* invalid pc */
    case 719: /* launch failed */
        return 1;
    default:
        return 0;
    }
}

static void note_async(CUresult r) {
    if (r == CUDA_SUCCESS)
        return;
    if (is_sticky(r) && atomic_load(&sticky_err) == CUDA_SUCCESS)
        atomic_store(&sticky_err, r);
    if (deferred_err == CUDA_SUCCESS)
        deferred_err = r;
}

/* sync_result: what a synchronising call returns, given its own result:
 * an earlier asynchronous error first (once), then its own. The caller
 * holds mu. */
static CUresult sync_result(CUresult r) {
    if (deferred_err != CUDA_SUCCESS) {
        CUresult d = deferred_err;
        deferred_err = CUDA_SUCCESS;
        return d;
    }
    if (is_sticky(r) && atomic_load(&sticky_err) == CUDA_SUCCESS)
        atomic_store(&sticky_err, r);
    CUresult st = atomic_load(&sticky_err);
    return r == CUDA_SUCCESS && st != CUDA_SUCCESS ? st : r;
}

/* send_batch_locked sends one batch of queued records (as many whole
 * records as fit a message) and waits for its reply. The caller holds
 * mu. Returns 0 when the queue was empty. */
static int send_batch_locked(void) {
    static unsigned char body[RW_BODY_MAX];
    uint32_t n = 0, ops = 0;
    while (hostfn_running)
        pthread_cond_wait(&hostfn_done, &mu);
    pthread_mutex_lock(&qmu);
    if (qhead < qlen) {
        struct rw_rec rc;
        memcpy(&rc, qbuf + qhead, sizeof rc);
        if (rc.op >= Q_LOCAL) { /* run here, not sent as a record */
            union { struct q_hostfn h; struct q_push p; } m;
            memcpy(&m, qbuf + qhead + sizeof rc, rc.len < sizeof m ? rc.len : sizeof m);
            qhead += RW_REC_SPAN(rc.len);
            if (qhead == qlen)
                qhead = qlen = 0;
            uint64_t no = ++q_taken;
            pthread_cond_broadcast(&qspace);
            pthread_mutex_unlock(&qmu);
            if (rc.op == Q_HOSTFN)
                run_hostfn_locked(&m.h);
            else
                run_push_locked(&m.p);
            atomic_store(&q_done_no, no);
            return 1;
        }
    }
    while (qhead < qlen) {
        struct rw_rec rc;
        memcpy(&rc, qbuf + qhead, sizeof rc);
        if (rc.op >= Q_LOCAL)
            break;
        size_t span = RW_REC_SPAN(rc.len);
        if (n + span > sizeof body)
            break;
        memcpy(body + n, qbuf + qhead, span);
        n += (uint32_t)span;
        qhead += span;
        ops++;
    }
    if (qhead == qlen)
        qhead = qlen = 0;
    q_taken += ops;
    uint64_t no = q_taken;
    pthread_cond_broadcast(&qspace);
    pthread_mutex_unlock(&qmu);
    if (ops == 0)
        return 0;
    uint32_t rep[2] = {0, 0}, got = 0;
    CUresult r = rpc_locked(OP_BATCH, 0, body, n, rep, sizeof rep, &got);
    pend_sent(body, n);
    atomic_store(&q_done_no, no);
    batches++;
    batched_ops += ops;
    if (r != CUDA_SUCCESS)
        logf_(2, "batch of %u: operation %u -> %d", ops, got == sizeof rep ? rep[0] : 0, r);
    note_async(r);
    return 1;
}

static void flush_locked(void) {
    while (send_batch_locked())
        ;
}

/* session_lock: mu held and the queue sent, so that a request follows the
 * asynchronous work submitted before it. */
static void session_lock(void) {
    pthread_mutex_lock(&mu);
    flush_locked();
}

static void *sender_main(void *arg) {
    (void)arg;
    pthread_mutex_lock(&qmu);
    for (;;) {
        while (qhead == qlen && !qstop)
            pthread_cond_wait(&qwork, &qmu);
        if (qhead == qlen && qstop)
            break;
        pthread_mutex_unlock(&qmu);
        pthread_mutex_lock(&mu);
        if (initialized)
            send_batch_locked();
        pthread_mutex_unlock(&mu);
        pthread_mutex_lock(&qmu);
    }
    pthread_mutex_unlock(&qmu);
    return NULL;
}

/* enqueue appends one asynchronous operation (its body as the launcher's
 * request) in the current context. A full queue waits (bounded) for the
 * sender. */
static CUresult enqueue(CUstream s, uint16_t op, const void *body, uint32_t len) {
    CUresult st = atomic_load(&sticky_err);
    if (st != CUDA_SUCCESS)
        return st;
    if (RW_REC_SPAN(len) > RW_BODY_MAX)
        return CUDA_ERROR_INVALID_VALUE;
    struct rw_rec rc = {.op = op, .len = (uint16_t)len, .ctx = cur_ctx ? cur_ctx->id : 0};
    size_t span = RW_REC_SPAN(len);
    pthread_mutex_lock(&qmu);
    if (!qbuf && !(qbuf = malloc(Q_CAP))) {
        pthread_mutex_unlock(&qmu);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    uint64_t start = mono_ms();
    while (qlen + span > Q_CAP) {
        if (qhead > 0) { /* compact */
            memmove(qbuf, qbuf + qhead, qlen - qhead);
            qlen -= qhead;
            qhead = 0;
            continue;
        }
        if (mono_ms() - start > (uint64_t)timeout_ms) {
            pthread_mutex_unlock(&qmu);
            logf_(1, "op %u: the queue did not drain", op);
            return CUDA_ERROR_LAUNCH_FAILED;
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 1;
        pthread_cond_timedwait(&qspace, &qmu, &ts);
    }
    memcpy(qbuf + qlen, &rc, sizeof rc);
    if (len)
        memcpy(qbuf + qlen + sizeof rc, body, len);
    memset(qbuf + qlen + sizeof rc + len, 0, span - sizeof rc - len);
    qlen += span;
    q_last_no = ++q_enq_no;
    struct robj *so = obj_check(s, O_STREAM);
    if (so)
        atomic_store(&so->qno, q_last_no);
    else
        atomic_store(&q_default_no, q_last_no);
    pthread_cond_signal(&qwork);
    pthread_mutex_unlock(&qmu);
    return CUDA_SUCCESS;
}

/* queued: record number no (of a stream's or an event's last record) has
 * not been run by the launcher yet: the driver would say not ready. */
static int queued(uint64_t no) { return sender_started && no > atomic_load(&q_done_no); }

static CUresult rpc(uint16_t op, const void *body, uint32_t len, void *rep, uint32_t cap, uint32_t *rlen) {
    session_lock();
    CUresult r = rpc_locked(op, 0, body, len, rep, cap, rlen);
    pthread_mutex_unlock(&mu);
    return r;
}

/* ---- asynchronous device-to-host copies ----
 * The launcher copies into a buffer of its own on the copy's stream and
 * keeps it; the client fetches it into the caller's memory at the first
 * synchronising call that finds it complete (or before the memory is read
 * for a copy to the device). */
struct pend { uint64_t id; unsigned char *dst; size_t bytes; int sent; /* its record reached the launcher */ };
static pthread_mutex_t pmu = PTHREAD_MUTEX_INITIALIZER; /* pends */
static struct pend *pends;
static size_t npends, cappends;
static uint64_t pend_next;

static int pend_add(uint64_t id, void *dst, size_t bytes) {
    pthread_mutex_lock(&pmu);
    if (npends == cappends) {
        size_t cap = cappends ? cappends * 2 : 16;
        struct pend *n = realloc(pends, cap * sizeof *n);
        if (!n) {
            pthread_mutex_unlock(&pmu);
            return -1;
        }
        pends = n;
        cappends = cap;
    }
    pends[npends++] = (struct pend){id, dst, bytes, 0};
    pthread_mutex_unlock(&pmu);
    return 0;
}

static void pend_forget(uint64_t id) {
    pthread_mutex_lock(&pmu);
    for (size_t k = 0; k < npends; k++)
        if (pends[k].id == id) {
            memmove(&pends[k], &pends[k + 1], (npends - k - 1) * sizeof *pends);
            npends--;
            break;
        }
    pthread_mutex_unlock(&pmu);
}

/* pend_sent marks the copies of a batch the launcher has run as fetchable. */
static void pend_sent(const unsigned char *body, uint32_t n) {
    for (uint32_t off = 0; off + sizeof(struct rw_rec) <= n;) {
        struct rw_rec rc;
        memcpy(&rc, body + off, sizeof rc);
        if (rc.op == OP_DTOH_ASYNC) {
            struct rw_copy c;
            memcpy(&c, body + off + sizeof rc, sizeof c);
            pthread_mutex_lock(&pmu);
            for (size_t k = 0; k < npends; k++)
                if (pends[k].id == c.dst)
                    pends[k].sent = 1;
            pthread_mutex_unlock(&pmu);
        }
        off += (uint32_t)RW_REC_SPAN(rc.len);
    }
}

/* fetch_one_locked fetches pending copy p (wait: even if not complete yet).
 * CUDA_ERROR_NOT_READY: not complete, still pending. The caller holds mu. */
static CUresult fetch_one_locked(struct pend p, int wait) {
    struct pull pl = {.op = OP_DTOH_FETCH, .f = {.id = p.id, .wait = (uint32_t)wait}};
    return pull_locked(&pl, p.dst, p.bytes);
}

/* fetch_locked fetches the pending copies that are complete (all: wait for
 * each; lo/n: only those whose memory overlaps [lo, lo+n), waiting). An
 * error a copy met is an asynchronous error. The caller holds mu. */
static void fetch_locked(int all, uintptr_t lo, size_t n) {
    for (size_t i = 0;;) {
        pthread_mutex_lock(&pmu);
        if (i >= npends) {
            pthread_mutex_unlock(&pmu);
            return;
        }
        struct pend p = pends[i];
        pthread_mutex_unlock(&pmu);
        int overlap = n && (uintptr_t)p.dst < lo + n && lo < (uintptr_t)p.dst + p.bytes;
        if ((n && !overlap) || !p.sent) { /* not sent: the queue was sent before, so it came after */
            i++;
            continue;
        }
        CUresult r = fetch_one_locked(p, all || overlap);
        if (r == CUDA_ERROR_NOT_READY) {
            i++;
            continue;
        }
        if (r != CUDA_ERROR_NOT_FOUND) /* not found: the copy failed, and its batch said so */
            note_async(r);
        pend_forget(p.id);
    }
}

static int pend_overlaps(const void *lo, size_t n) {
    uintptr_t a = (uintptr_t)lo;
    int yes = 0;
    pthread_mutex_lock(&pmu);
    for (size_t i = 0; i < npends && !yes; i++)
        yes = (uintptr_t)pends[i].dst < a + n && a < (uintptr_t)pends[i].dst + pends[i].bytes;
    pthread_mutex_unlock(&pmu);
    return yes;
}

static int pending_any(void) {
    pthread_mutex_lock(&pmu);
    int any = npends > 0;
    pthread_mutex_unlock(&pmu);
    return any;
}

/* synced_locked: the end of a synchronising call whose own result is r:
 * what completed is fetched, and the call returns an earlier asynchronous
 * error first. The caller holds mu. */
static CUresult synced_locked(CUresult r) {
    if (r == CUDA_SUCCESS && pending_any())
        fetch_locked(0, 0, 0);
    return sync_result(r);
}

/* run_push_locked: an asynchronous copy to the device's turn: pushed in
 * the context it was made in. The caller holds mu. */
static void run_push_locked(const struct q_push *m) {
    struct robj *was = cur_ctx;
    cur_ctx = m->ctx;
    CUresult r = push_locked(m->dst, m->buf, m->bytes, m->sid, 1);
    cur_ctx = was;
    free(m->buf);
    atomic_fetch_sub(&push_held, m->bytes);
    note_async(r);
}

/* run_hostfn_locked: a host function's turn (see Q_HOSTFN). The caller
 * holds mu; it is released while the function runs. */
static void run_hostfn_locked(const struct q_hostfn *m) {
    hostfn_running = 1;
    struct robj *was = cur_ctx;
    cur_ctx = m->ctx; /* the stream is synchronised in the context it was named in */
    CUresult r = rpc_locked(OP_STREAM_SYNC, 0, &m->sid, 4, NULL, 0, NULL);
    cur_ctx = was;
    if (r == CUDA_SUCCESS && pending_any())
        fetch_locked(0, 0, 0); /* the function may read what a copy before it brought back */
    if (is_sticky(r))
        note_async(r);
    pthread_mutex_unlock(&mu);
    if (m->kind == 0)
        ((CUhostFn)m->fn)(m->data);
    else
        ((CUstreamCallback)m->fn)(m->stream, r, m->data);
    pthread_mutex_lock(&mu);
    hostfn_running = 0;
    pthread_cond_broadcast(&hostfn_done);
}

/* sync_rpc: a synchronising request (stream, event and context
 * synchronisation and queries). */
static CUresult sync_rpc(uint16_t op, const void *body, uint32_t len) {
    session_lock();
    CUresult r = synced_locked(rpc_locked(op, 0, body, len, NULL, 0, NULL));
    pthread_mutex_unlock(&mu);
    return r;
}

/* rpc_u32 / rpc_id: the common shapes. */
static CUresult rpc_id(uint16_t op, const void *body, uint32_t len, uint32_t *id) {
    uint32_t n = 0;
    CUresult r = rpc(op, body, len, id, sizeof *id, &n);
    if (r == CUDA_SUCCESS && n != sizeof *id)
        return CUDA_ERROR_UNKNOWN;
    return r;
}

/* rpc_obj: a request that creates a remote object, and the client's handle
 * of it. */
static CUresult rpc_obj(uint16_t op, const void *body, uint32_t len, uint32_t kind, struct robj **out) {
    uint32_t id;
    CUresult r = rpc_id(op, body, len, &id);
    if (r)
        return r;
    if (!(*out = obj_new(kind, id)))
        return CUDA_ERROR_OUT_OF_MEMORY;
    return CUDA_SUCCESS;
}

static void *heartbeat_main(void *arg) {
    dpu_t *hd = arg; /* its own connection: a connection has one submitter at a time */
    uint64_t beat = 0;
    while (!atomic_load(&hb_stop)) {
        dpu_store64(hd, slot_field(offsetof(struct rw_door_slot, heartbeat)), ++beat);
        for (int i = 0; i < 10 && !atomic_load(&hb_stop); i++)
            usleep(HEARTBEAT_MS * 100);
    }
    dpu_close(hd);
    return NULL;
}

static int read_door(const char *v, dpu_gva_t *out) {
    if (!v || !*v)
        return -ENOENT;
    if (strncmp(v, "gva:", 4) == 0)
        return dpu_gva_parse(v, out);
    FILE *f = fopen(v, "r");
    if (!f)
        return -errno;
    char line[128] = {0};
    char *ok = fgets(line, sizeof line, f);
    fclose(f);
    if (!ok)
        return -EINVAL;
    line[strcspn(line, "\r\n")] = 0;
    return dpu_gva_parse(line, out);
}

static void finish(void);

static void connect_once(void) {
    const char *l = getenv("DPU_CUDA_REMOTE_LOG");
    if (l)
        loglevel = atoi(l);
    const char *t = getenv("DPU_CUDA_REMOTE_TIMEOUT_S");
    if (t && atoi(t) > 0)
        timeout_ms = atoi(t) * 1000;
    int threads = 8;
    const char *th = getenv("DPU_CUDA_REMOTE_THREADS");
    if (th && atoi(th) > 0)
        threads = atoi(th);
    const char *xf = getenv("DPU_CUDA_REMOTE_XFER");
    uint32_t xfer = xf && !strcmp(xf, "paged") ? RW_XFER_PAGED : 0;
    int e = read_door(getenv("DPU_CUDA_REMOTE"), &DOOR);
    if (e < 0) {
        logf_(1, "DPU_CUDA_REMOTE (the launcher's door GVA or a file holding it): %s", dpu_strerror(e));
        init_result = CUDA_ERROR_NO_DEVICE;
        return;
    }
    if ((e = dpu_open(NULL, &D)) < 0) {
        logf_(1, "host interface: %s", dpu_strerror(e));
        init_result = CUDA_ERROR_NO_DEVICE;
        return;
    }
    dpu_set_timeout(D, 30000);
    struct rw_door door;
    if ((e = dpu_load(D, DOOR, &door, sizeof door)) < 0 || door.magic != RW_MAGIC || door.version != RW_VERSION ||
        door.nslots == 0 || door.nslots > DOOR_SLOTS) {
        logf_(1, "door %s", e < 0 ? dpu_strerror(e) : "is not a launcher's (magic/version)");
        goto fail;
    }
    /* Claim a free slot. */
    uint64_t rnd = 0;
    rnd = mono_ns() ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)&rnd;
    TOKEN = rnd | 1;
    int claimed = 0;
    for (uint32_t i = 0; i < door.nslots && !claimed; i++) {
        uint64_t old = 1;
        SLOT = i;
        if (door.slot[i].token == 0 && dpu_cas64(D, slot_field(0), 0, TOKEN, &old) == 0 && old == 0)
            claimed = 1;
    }
    if (!claimed) {
        logf_(1, "the launcher has no free slot (%u)", door.nslots);
        goto fail;
    }
    uint32_t staging = door.slot[SLOT].staging_pages;
    dpu_gva_t own;
    if ((e = dpu_alloc_mode(D, (size_t)(1 + staging) * RW_PAGE, 0600, &own)) < 0) {
        logf_(1, "inbox: %s", dpu_strerror(e));
        uint64_t old;
        dpu_cas64(D, slot_field(0), TOKEN, 0, &old);
        goto fail;
    }
    MB = (struct mbox){.d = D, .own = own, .peer = {door.slot[SLOT].srv_hi, door.slot[SLOT].srv_lo},
                       .staging_pages = staging, .pool = pool_new(NULL, threads), .token = TOKEN, .xfer = xfer};
    /* Both words in one STORE: the launcher reads them in one LOAD. */
    uint64_t cli[2] = {own.hi, own.lo};
    dpu_store(D, slot_field(offsetof(struct rw_door_slot, cli_hi)), cli, sizeof cli);
    atomic_store(&hb_stop, 0);
    dpu_t *hd;
    if (dpu_open(NULL, &hd) == 0) {
        if (pthread_create(&hb_thread, NULL, heartbeat_main, hd) == 0)
            hb_started = 1;
        else
            dpu_close(hd);
    }
    struct rw_hello hi = {.version = RW_VERSION, .pid = (uint32_t)getpid(), .xfer = xfer};
    FILE *cf = fopen("/proc/self/comm", "r");
    if (cf) {
        if (fgets(hi.name, sizeof hi.name, cf))
            hi.name[strcspn(hi.name, "\n")] = 0;
        fclose(cf);
    }
    struct rw_hello_reply hr;
    uint32_t n = 0;
    CUresult r = rpc(OP_HELLO, &hi, sizeof hi, &hr, sizeof hr, &n);
    if (r != CUDA_SUCCESS || n != sizeof hr) {
        logf_(1, "HELLO: %d", r);
        init_result = r ? r : CUDA_ERROR_UNKNOWN;
        finish();
        return;
    }
    driver_version = hr.driver_version;
    device_count = hr.device_count;
    logf_(2, "slot %u, driver %d, %d device(s)", SLOT, driver_version, device_count);
    initialized = 1;
    init_result = CUDA_SUCCESS;
    if (pthread_create(&sender_thread, NULL, sender_main, NULL) == 0)
        sender_started = 1;
    else
        logf_(1, "no sender thread: asynchronous work is sent at the next call");
    atexit(finish);
    return;
fail:
    dpu_close(D);
    D = NULL;
    init_result = CUDA_ERROR_NO_DEVICE;
}

static void finish(void) {
    static atomic_int done;
    if (atomic_exchange(&done, 1))
        return;
    if (!D)
        return;
    if (sender_started) {
        pthread_mutex_lock(&qmu);
        qstop = 1;
        pthread_cond_broadcast(&qwork);
        pthread_mutex_unlock(&qmu);
        pthread_join(sender_thread, NULL);
        sender_started = 0;
    }
    pthread_mutex_lock(&mu);
    if (initialized) {
        flush_locked();
        rpc_locked(OP_BYE, 0, NULL, 0, NULL, 0, NULL);
        logf_(2, "%llu asynchronous operations in %llu batches", (unsigned long long)batched_ops,
              (unsigned long long)batches);
    }
    initialized = 0;
    pthread_mutex_unlock(&mu);
    atomic_store(&hb_stop, 1);
    if (hb_started)
        pthread_join(hb_thread, NULL);
    pool_free(MB.pool);
    MB.pool = NULL;
    dpu_free(D, MB.own);
    dpu_close(D);
    D = NULL;
}

#define NEED_INIT()                                                                                         \
    do {                                                                                                    \
        if (!initialized)                                                                                   \
            return init_result == CUDA_SUCCESS ? CUDA_ERROR_NOT_INITIALIZED : init_result;                  \
    } while (0)

/* ---- initialisation, devices ---- */
API CUresult cuInit(unsigned flags) {
    (void)flags;
    pthread_once(&once, connect_once);
    return init_result;
}

API CUresult cuDriverGetVersion(int *v) {
    if (!v)
        return CUDA_ERROR_INVALID_VALUE;
    *v = driver_version;
    return CUDA_SUCCESS;
}

API CUresult cuDeviceGetCount(int *n) {
    NEED_INIT();
    if (!n)
        return CUDA_ERROR_INVALID_VALUE;
    *n = device_count;
    return CUDA_SUCCESS;
}

API CUresult cuDeviceGet(CUdevice *d, int ordinal) {
    NEED_INIT();
    if (!d)
        return CUDA_ERROR_INVALID_VALUE;
    if (ordinal < 0 || ordinal >= device_count)
        return CUDA_ERROR_INVALID_DEVICE;
    *d = ordinal;
    return CUDA_SUCCESS;
}

static struct rw_device_info *info(CUdevice d) {
    if (!initialized || d < 0 || d >= device_count || d >= MAX_DEV)
        return NULL;
    struct rw_device_info *known = __atomic_load_n(&devinfo[d], __ATOMIC_ACQUIRE);
    if (known) /* set once, never changed */
        return known;
    session_lock();
    if (!devinfo[d]) {
        struct rw_device_info *di = malloc(sizeof *di);
        uint32_t dev = (uint32_t)d, n = 0;
        if (di && rpc_locked(OP_DEVICE_INFO, 0, &dev, 4, di, sizeof *di, &n) == CUDA_SUCCESS && n == sizeof *di)
            __atomic_store_n(&devinfo[d], di, __ATOMIC_RELEASE);
        else
            free(di);
    }
    pthread_mutex_unlock(&mu);
    return devinfo[d];
}

API CUresult cuDeviceGetName(char *name, int len, CUdevice d) {
    NEED_INIT();
    struct rw_device_info *di = info(d);
    if (!di)
        return CUDA_ERROR_INVALID_DEVICE;
    if (!name || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    snprintf(name, (size_t)len, "%s", di->name);
    return CUDA_SUCCESS;
}

API CUresult cuDeviceGetUuid(CUuuid *u, CUdevice d) {
    NEED_INIT();
    struct rw_device_info *di = info(d);
    if (!di)
        return CUDA_ERROR_INVALID_DEVICE;
    if (!u)
        return CUDA_ERROR_INVALID_VALUE;
    memcpy(u->bytes, di->uuid, 16);
    return CUDA_SUCCESS;
}
API CUresult cuDeviceGetUuid_v2(CUuuid *u, CUdevice d) { return cuDeviceGetUuid(u, d); }

API CUresult cuDeviceGetLuid(char *luid, unsigned *mask, CUdevice d) {
    (void)luid, (void)mask, (void)d;
    return CUDA_ERROR_NOT_SUPPORTED;
}

API CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice d) {
    NEED_INIT();
    struct rw_device_info *di = info(d);
    if (!di)
        return CUDA_ERROR_INVALID_DEVICE;
    if (!bytes)
        return CUDA_ERROR_INVALID_VALUE;
    *bytes = di->total_mem;
    return CUDA_SUCCESS;
}

API CUresult cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice d) {
    NEED_INIT();
    struct rw_device_info *di = info(d);
    if (!di)
        return CUDA_ERROR_INVALID_DEVICE;
    if (!v || a <= 0 || a >= RW_ATTRS || !(di->attr_ok[a / 8] & (1u << (a % 8)))) {
        logf_(2, "cuDeviceGetAttribute %d: not known", a);
        return CUDA_ERROR_INVALID_VALUE;
    }
    *v = di->attr[a];
    return CUDA_SUCCESS;
}

API CUresult cuDeviceComputeCapability(int *major, int *minor, CUdevice d) {
    CUresult r = cuDeviceGetAttribute(major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d);
    return r ? r : cuDeviceGetAttribute(minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d);
}

API CUresult cuDeviceGetPCIBusId(char *buf, int len, CUdevice d) {
    int dom = 0, bus = 0, dev = 0;
    CUresult r;
    if ((r = cuDeviceGetAttribute(&dom, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, d)) ||
        (r = cuDeviceGetAttribute(&bus, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, d)) ||
        (r = cuDeviceGetAttribute(&dev, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, d)))
        return r;
    if (!buf || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    snprintf(buf, (size_t)len, "%08x:%02x:%02x.0", dom, bus, dev);
    return CUDA_SUCCESS;
}

API CUresult cuDeviceCanAccessPeer(int *can, CUdevice a, CUdevice b) {
    (void)a, (void)b;
    if (!can)
        return CUDA_ERROR_INVALID_VALUE;
    *can = 0;
    return CUDA_SUCCESS;
}

/* ---- contexts ---- */
API CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d) {
    NEED_INIT();
    if (!c)
        return CUDA_ERROR_INVALID_VALUE;
    if (d < 0 || d >= device_count || d >= MAX_DEV)
        return CUDA_ERROR_INVALID_DEVICE;
    session_lock();
    CUresult r = CUDA_SUCCESS;
    if (!primary[d]) {
        uint32_t dev = (uint32_t)d, id = 0, n = 0;
        r = rpc_locked(OP_PRIMARY_RETAIN, 0, &dev, 4, &id, 4, &n);
        if (r == CUDA_SUCCESS && n == 4) {
            primary[d] = obj_new(O_CTX, id);
            if (primary[d]) {
                primary[d]->dev = d;
                primary[d]->primary = 1;
            } else {
                r = CUDA_ERROR_OUT_OF_MEMORY;
            }
        } else if (r == CUDA_SUCCESS) {
            r = CUDA_ERROR_UNKNOWN;
        }
    }
    if (r == CUDA_SUCCESS) {
        primary_refs[d]++;
        *c = (CUcontext)primary[d];
    }
    pthread_mutex_unlock(&mu);
    return r;
}

API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d) {
    NEED_INIT();
    if (d < 0 || d >= device_count || d >= MAX_DEV)
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&mu);
    if (primary_refs[d] > 0)
        primary_refs[d]--;
    pthread_mutex_unlock(&mu);
    return CUDA_SUCCESS; /* the launcher keeps the session's retain until the session ends */
}
API CUresult cuDevicePrimaryCtxRelease(CUdevice d) { return cuDevicePrimaryCtxRelease_v2(d); }
API CUresult cuDevicePrimaryCtxReset_v2(CUdevice d) {
    NEED_INIT();
    if (d < 0 || d >= device_count)
        return CUDA_ERROR_INVALID_DEVICE;
    return CUDA_SUCCESS;
}
API CUresult cuDevicePrimaryCtxReset(CUdevice d) { return cuDevicePrimaryCtxReset_v2(d); }

API CUresult cuDevicePrimaryCtxGetState(CUdevice d, unsigned *flags, int *active) {
    NEED_INIT();
    if (d < 0 || d >= device_count || d >= MAX_DEV)
        return CUDA_ERROR_INVALID_DEVICE;
    if (!flags || !active)
        return CUDA_ERROR_INVALID_VALUE;
    *flags = primary_flags[d];
    *active = primary_refs[d] > 0;
    return CUDA_SUCCESS;
}
API CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice d, unsigned flags) {
    NEED_INIT();
    if (d < 0 || d >= device_count || d >= MAX_DEV)
        return CUDA_ERROR_INVALID_DEVICE;
    primary_flags[d] = flags;
    return CUDA_SUCCESS;
}
API CUresult cuDevicePrimaryCtxSetFlags(CUdevice d, unsigned flags) { return cuDevicePrimaryCtxSetFlags_v2(d, flags); }

API CUresult cuCtxCreate_v2(CUcontext *c, unsigned flags, CUdevice d) {
    NEED_INIT();
    if (!c)
        return CUDA_ERROR_INVALID_VALUE;
    uint32_t b[2] = {flags, (uint32_t)d};
    struct robj *o;
    CUresult r = rpc_obj(OP_CTX_CREATE, b, sizeof b, O_CTX, &o);
    if (r)
        return r;
    o->dev = d;
    o->flags = flags;
    /* cuCtxCreate pushes the new context. */
    if (cur_ctx && ctx_depth < CTX_STACK)
        ctx_stack[ctx_depth++] = cur_ctx;
    cur_ctx = o;
    *c = (CUcontext)o;
    return CUDA_SUCCESS;
}

API CUresult cuCtxDestroy_v2(CUcontext c) {
    NEED_INIT();
    struct robj *o = obj_check(c, O_CTX);
    if (!o || o->primary)
        return CUDA_ERROR_INVALID_CONTEXT;
    CUresult r = rpc(OP_CTX_DESTROY, &o->id, 4, NULL, 0, NULL);
    if (cur_ctx == o)
        cur_ctx = ctx_depth > 0 ? ctx_stack[--ctx_depth] : NULL;
    obj_free(o);
    return r;
}

API CUresult cuCtxSetCurrent(CUcontext c) {
    NEED_INIT();
    if (c && !obj_check(c, O_CTX))
        return CUDA_ERROR_INVALID_CONTEXT;
    cur_ctx = (struct robj *)c;
    return CUDA_SUCCESS;
}
API CUresult cuCtxGetCurrent(CUcontext *c) {
    NEED_INIT();
    if (!c)
        return CUDA_ERROR_INVALID_VALUE;
    *c = (CUcontext)cur_ctx;
    return CUDA_SUCCESS;
}
API CUresult cuCtxPushCurrent_v2(CUcontext c) {
    NEED_INIT();
    if (!obj_check(c, O_CTX))
        return CUDA_ERROR_INVALID_CONTEXT;
    if (ctx_depth == CTX_STACK)
        return CUDA_ERROR_OUT_OF_MEMORY;
    ctx_stack[ctx_depth++] = cur_ctx;
    cur_ctx = (struct robj *)c;
    return CUDA_SUCCESS;
}
API CUresult cuCtxPopCurrent_v2(CUcontext *c) {
    NEED_INIT();
    if (!cur_ctx)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (c)
        *c = (CUcontext)cur_ctx;
    cur_ctx = ctx_depth > 0 ? ctx_stack[--ctx_depth] : NULL;
    return CUDA_SUCCESS;
}
API CUresult cuCtxGetDevice(CUdevice *d) {
    NEED_INIT();
    if (!d)
        return CUDA_ERROR_INVALID_VALUE;
    if (!cur_ctx)
        return CUDA_ERROR_INVALID_CONTEXT;
    *d = cur_ctx->dev;
    return CUDA_SUCCESS;
}
API CUresult cuCtxGetFlags(unsigned *flags) {
    NEED_INIT();
    if (!flags)
        return CUDA_ERROR_INVALID_VALUE;
    if (!cur_ctx)
        return CUDA_ERROR_INVALID_CONTEXT;
    *flags = cur_ctx->primary ? primary_flags[cur_ctx->dev] : cur_ctx->flags;
    return CUDA_SUCCESS;
}
API CUresult cuCtxGetApiVersion(CUcontext c, unsigned *v) {
    NEED_INIT();
    (void)c;
    if (!v)
        return CUDA_ERROR_INVALID_VALUE;
    *v = 3020;
    return CUDA_SUCCESS;
}
API CUresult cuCtxSynchronize(void) {
    NEED_INIT();
    if (!cur_ctx)
        return CUDA_ERROR_INVALID_CONTEXT;
    return sync_rpc(OP_CTX_SYNC, NULL, 0);
}
API CUresult cuCtxGetStreamPriorityRange(int *least, int *greatest) {
    NEED_INIT();
    if (least)
        *least = 0;
    if (greatest)
        *greatest = -5;
    return CUDA_SUCCESS;
}
/* Cache and shared-memory configuration are hints: accepted, not forwarded. */
API CUresult cuCtxSetCacheConfig(int cfg) { (void)cfg; return CUDA_SUCCESS; }
API CUresult cuCtxGetCacheConfig(int *cfg) {
    if (cfg)
        *cfg = 0;
    return CUDA_SUCCESS;
}
static CUresult ctx_limit(uint32_t set, int limit, size_t *v) {
    NEED_INIT();
    if (!cur_ctx)
        return CUDA_ERROR_INVALID_CONTEXT;
    unsigned char b[16];
    uint64_t w = *v;
    memcpy(b, &set, 4);
    memcpy(b + 4, &limit, 4);
    memcpy(b + 8, &w, 8);
    uint32_t n = 0;
    CUresult r = rpc(OP_CTX_LIMIT, b, sizeof b, set ? NULL : &w, set ? 0 : 8, &n);
    if (r == CUDA_SUCCESS && !set)
        *v = (size_t)w;
    return r;
}
API CUresult cuCtxSetLimit(int limit, size_t v) { return ctx_limit(1, limit, &v); }
API CUresult cuCtxGetLimit(size_t *v, int limit) {
    if (!v)
        return CUDA_ERROR_INVALID_VALUE;
    return ctx_limit(0, limit, v);
}

/* ---- memory (the memory service) ---- */
static void alloc_note(uint64_t p, uint64_t n) {
    pthread_mutex_lock(&amu);
    if (nallocs == capallocs) {
        size_t cap = capallocs ? capallocs * 2 : 64;
        struct alloc *a = realloc(allocs, cap * sizeof *a);
        if (!a) {
            pthread_mutex_unlock(&amu);
            return;
        }
        allocs = a;
        capallocs = cap;
    }
    allocs[nallocs++] = (struct alloc){p, n};
    pthread_mutex_unlock(&amu);
}
static void alloc_forget(uint64_t p) {
    pthread_mutex_lock(&amu);
    for (size_t i = 0; i < nallocs; i++)
        if (allocs[i].base == p) {
            allocs[i] = allocs[--nallocs];
            break;
        }
    pthread_mutex_unlock(&amu);
}
static int is_device(uint64_t p) {
    int yes = 0;
    pthread_mutex_lock(&amu);
    for (size_t i = 0; i < nallocs && !yes; i++)
        yes = p >= allocs[i].base && p - allocs[i].base < allocs[i].size;
    pthread_mutex_unlock(&amu);
    return yes;
}

API CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t bytes) {
    NEED_INIT();
    if (!p || bytes == 0)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t n = bytes, dp = 0;
    uint32_t got = 0;
    CUresult r = rpc(OP_MEM_ALLOC, &n, 8, &dp, 8, &got);
    if (r)
        return r;
    *p = dp;
    alloc_note(dp, n);
    return CUDA_SUCCESS;
}
API CUresult cuMemFree_v2(CUdeviceptr p) {
    NEED_INIT();
    if (p == 0)
        return CUDA_SUCCESS;
    uint64_t v = p;
    CUresult r = rpc(OP_MEM_FREE, &v, 8, NULL, 0, NULL);
    if (r == CUDA_SUCCESS)
        alloc_forget(p);
    return r;
}
API CUresult cuMemGetInfo_v2(size_t *fr, size_t *total) {
    NEED_INIT();
    uint64_t v[2];
    uint32_t n = 0;
    CUresult r = rpc(OP_MEM_INFO, NULL, 0, v, sizeof v, &n);
    if (r)
        return r;
    if (fr)
        *fr = v[0];
    if (total)
        *total = v[1];
    return CUDA_SUCCESS;
}
API CUresult cuMemGetAddressRange_v2(CUdeviceptr *base, size_t *size, CUdeviceptr p) {
    NEED_INIT();
    uint64_t v = p, out[2];
    uint32_t n = 0;
    CUresult r = rpc(OP_MEM_RANGE, &v, 8, out, sizeof out, &n);
    if (r)
        return r;
    if (base)
        *base = out[0];
    if (size)
        *size = out[1];
    return CUDA_SUCCESS;
}

/* Host memory: plain memory here; copies from it are staged anyway. */
/* Pinned ranges (allocated or registered here): an asynchronous copy back
 * into one completes later, as the driver's does; into other (pageable)
 * memory it completes before it returns, as the driver's does. */
static struct alloc *pinned;
static size_t npinned, cappinned;
static void pinned_note(void *p, size_t n) {
    pthread_mutex_lock(&amu);
    if (npinned == cappinned) {
        size_t cap = cappinned ? cappinned * 2 : 16;
        struct alloc *a = realloc(pinned, cap * sizeof *a);
        if (!a) {
            pthread_mutex_unlock(&amu);
            return; /* then copies into it are synchronous: still right */
        }
        pinned = a;
        cappinned = cap;
    }
    pinned[npinned++] = (struct alloc){(uint64_t)(uintptr_t)p, n};
    pthread_mutex_unlock(&amu);
}
static void pinned_forget(void *p) {
    pthread_mutex_lock(&amu);
    for (size_t i = 0; i < npinned; i++)
        if (pinned[i].base == (uint64_t)(uintptr_t)p) {
            pinned[i] = pinned[--npinned];
            break;
        }
    pthread_mutex_unlock(&amu);
}
static int is_pinned(const void *p, size_t n) {
    uint64_t a = (uint64_t)(uintptr_t)p;
    int yes = 0;
    pthread_mutex_lock(&amu);
    for (size_t i = 0; i < npinned && !yes; i++)
        yes = a >= pinned[i].base && a - pinned[i].base <= pinned[i].size && n <= pinned[i].size - (a - pinned[i].base);
    pthread_mutex_unlock(&amu);
    return yes;
}

/* settle_host: copies back still pending into the pinned range at p are
 * fetched before it is freed or unregistered. */
static void settle_host(void *p) {
    size_t n = 0;
    pthread_mutex_lock(&amu);
    for (size_t i = 0; i < npinned; i++)
        if (pinned[i].base == (uint64_t)(uintptr_t)p)
            n = pinned[i].size;
    pthread_mutex_unlock(&amu);
    if (n && initialized && pend_overlaps(p, n)) {
        session_lock();
        fetch_locked(0, (uintptr_t)p, n);
        pthread_mutex_unlock(&mu);
    }
}

API CUresult cuMemAllocHost_v2(void **p, size_t bytes) {
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    if (posix_memalign(p, 4096, bytes ? bytes : 1) != 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pinned_note(*p, bytes);
    return CUDA_SUCCESS;
}
API CUresult cuMemHostAlloc(void **p, size_t bytes, unsigned flags) {
    (void)flags;
    return cuMemAllocHost_v2(p, bytes);
}
API CUresult cuMemFreeHost(void *p) {
    settle_host(p);
    pinned_forget(p);
    free(p);
    return CUDA_SUCCESS;
}
API CUresult cuMemHostRegister_v2(void *p, size_t n, unsigned flags) {
    (void)flags;
    if (p && n)
        pinned_note(p, n);
    return CUDA_SUCCESS;
}
API CUresult cuMemHostUnregister(void *p) {
    settle_host(p);
    pinned_forget(p);
    return CUDA_SUCCESS;
}
API CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *d, void *p, unsigned flags) {
    (void)d, (void)p, (void)flags;
    return CUDA_ERROR_NOT_SUPPORTED;
}
API CUresult cuMemHostGetFlags(unsigned *flags, void *p) {
    (void)p;
    if (!flags)
        return CUDA_ERROR_INVALID_VALUE;
    *flags = 0;
    return CUDA_SUCCESS;
}

static uint32_t stream_id(CUstream s, CUresult *r) {
    *r = CUDA_SUCCESS;
    if (s == NULL || s == CU_STREAM_LEGACY)
        return RW_STREAM_LEGACY;
    if (s == CU_STREAM_PER_THREAD)
        return RW_STREAM_PER_THREAD;
    struct robj *o = obj_check(s, O_STREAM);
    if (!o) {
        *r = CUDA_ERROR_INVALID_HANDLE;
        return 0;
    }
    return o->id;
}

static CUresult memset_(CUdeviceptr p, uint32_t v, uint32_t elem, size_t count, CUstream s, int async) {
    NEED_INIT();
    CUresult r;
    struct rw_memset m = {.dptr = p, .count = count, .value = v, .elem = elem, .stream = stream_id(s, &r),
                          .async = (uint32_t)async};
    if (r)
        return r;
    if (async)
        return enqueue(s, OP_MEMSET, &m, sizeof m);
    return rpc(OP_MEMSET, &m, sizeof m, NULL, 0, NULL);
}
API CUresult cuMemsetD8_v2(CUdeviceptr p, unsigned char v, size_t n) { return memset_(p, v, 1, n, NULL, 0); }
API CUresult cuMemsetD16_v2(CUdeviceptr p, unsigned short v, size_t n) { return memset_(p, v, 2, n, NULL, 0); }
API CUresult cuMemsetD32_v2(CUdeviceptr p, unsigned v, size_t n) { return memset_(p, v, 4, n, NULL, 0); }
API CUresult cuMemsetD8Async(CUdeviceptr p, unsigned char v, size_t n, CUstream s) { return memset_(p, v, 1, n, s, 1); }
API CUresult cuMemsetD16Async(CUdeviceptr p, unsigned short v, size_t n, CUstream s) {
    return memset_(p, v, 2, n, s, 1);
}
API CUresult cuMemsetD32Async(CUdeviceptr p, unsigned v, size_t n, CUstream s) { return memset_(p, v, 4, n, s, 1); }

/* ---- copies (the transfer service) ---- */
#define HTOD_INLINE_MAX (RW_BODY_MAX - sizeof(struct rw_rec) - sizeof(struct rw_copy) - 8)
static CUresult htod(CUdeviceptr dst, const void *src, size_t n, CUstream s, int async) {
    NEED_INIT();
    CUresult r;
    uint32_t sid = stream_id(s, &r);
    if (r)
        return r;
    if (n && !src)
        return CUDA_ERROR_INVALID_VALUE;
    if (n == 0)
        return CUDA_SUCCESS;
    if (async && n <= HTOD_INLINE_MAX && !pend_overlaps(src, n)) {
        /* Small: the bytes go in the record (taken now, as the driver
         * takes pageable memory before it returns). */
        unsigned char body[RW_BODY_MAX];
        struct rw_copy c = {.dst = dst, .bytes = n, .stream = sid, .async = 1};
        memcpy(body, &c, sizeof c);
        memcpy(body + sizeof c, src, n);
        return enqueue(s, OP_HTOD_INLINE, body, (uint32_t)(sizeof c + n));
    }
    if (async && sender_started && atomic_load(&push_held) + n <= PUSH_CAP && !pend_overlaps(src, n)) {
        /* Larger: the bytes are taken now and pushed in the queue's turn. */
        unsigned char *copy = malloc(n);
        if (copy) {
            memcpy(copy, src, n);
            struct q_push m = {.dst = dst, .buf = copy, .bytes = n, .ctx = cur_ctx, .sid = sid};
            atomic_fetch_add(&push_held, n);
            if ((r = enqueue(s, Q_PUSH, &m, sizeof m))) {
                atomic_fetch_sub(&push_held, n);
                free(copy);
            }
            return r;
        }
    }
    session_lock();
    if (pending_any()) /* the memory read here may be the target of a copy still pending */
        fetch_locked(0, (uintptr_t)src, n);
    r = push_locked(dst, src, n, sid, async);
    if (!async)
        r = synced_locked(r);
    pthread_mutex_unlock(&mu);
    return r;
}
static CUresult dtoh(void *dst, CUdeviceptr src, size_t n, CUstream s, int async) {
    NEED_INIT();
    CUresult r;
    uint32_t sid = stream_id(s, &r);
    if (r)
        return r;
    if (n && !dst)
        return CUDA_ERROR_INVALID_VALUE;
    if (n == 0)
        return CUDA_SUCCESS;
    if (async && is_pinned(dst, n)) {
        /* The launcher copies on the stream and keeps the bytes; they are
         * fetched here at the synchronising call that finds them done. */
        pthread_mutex_lock(&pmu);
        uint64_t id = ++pend_next;
        pthread_mutex_unlock(&pmu);
        struct rw_copy c = {.dst = id, .src = src, .bytes = n, .stream = sid, .async = 1};
        if (pend_add(id, dst, n) < 0)
            return CUDA_ERROR_OUT_OF_MEMORY;
        if ((r = enqueue(s, OP_DTOH_ASYNC, &c, sizeof c)))
            pend_forget(id);
        return r;
    }
    session_lock();
    struct pull pl = {.op = OP_DTOH, .c = {.src = src, .stream = sid, .async = 0}};
    r = pull_locked(&pl, dst, n);
    if (!async) /* a copy into pageable memory on a stream returns once done, its errors its own */
        r = synced_locked(r);
    pthread_mutex_unlock(&mu);
    return r;
}
static CUresult dtod(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s, int async) {
    NEED_INIT();
    CUresult r;
    struct rw_copy c = {.dst = dst, .src = src, .bytes = n, .stream = stream_id(s, &r), .async = (uint32_t)async};
    if (r)
        return r;
    if (async)
        return enqueue(s, OP_DTOD, &c, sizeof c);
    session_lock();
    r = synced_locked(rpc_locked(OP_DTOD, 0, &c, sizeof c, NULL, 0, NULL));
    pthread_mutex_unlock(&mu);
    return r;
}
API CUresult cuMemcpyHtoD_v2(CUdeviceptr d, const void *s, size_t n) { return htod(d, s, n, NULL, 0); }
API CUresult cuMemcpyDtoH_v2(void *d, CUdeviceptr s, size_t n) { return dtoh(d, s, n, NULL, 0); }
API CUresult cuMemcpyDtoD_v2(CUdeviceptr d, CUdeviceptr s, size_t n) { return dtod(d, s, n, NULL, 0); }
API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr d, const void *s, size_t n, CUstream st) {
    return htod(d, s, n, st, 1);
}
API CUresult cuMemcpyDtoHAsync_v2(void *d, CUdeviceptr s, size_t n, CUstream st) { return dtoh(d, s, n, st, 1); }
API CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st) {
    return dtod(d, s, n, st, 1);
}
static CUresult memcpy_any(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s, int async) {
    int dd = is_device(dst), sd = is_device(src);
    if (dd && sd)
        return dtod(dst, src, n, s, async);
    if (dd)
        return htod(dst, (const void *)(uintptr_t)src, n, s, async);
    if (sd)
        return dtoh((void *)(uintptr_t)dst, src, n, s, async);
    if (n)
        memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n);
    return CUDA_SUCCESS;
}
API CUresult cuMemcpy(CUdeviceptr d, CUdeviceptr s, size_t n) { return memcpy_any(d, s, n, NULL, 0); }
API CUresult cuMemcpyAsync(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st) {
    return memcpy_any(d, s, n, st, 1);
}

/* ---- the advise service ---- */
API CUresult cuMemPrefetchAsync(CUdeviceptr p, size_t n, CUdevice d, CUstream s) {
    NEED_INIT();
    CUresult r;
    struct rw_advise a = {.dptr = p, .bytes = n, .kind = 0, .device = d, .stream = stream_id(s, &r)};
    if (r)
        return r;
    return rpc(OP_ADVISE, &a, sizeof a, NULL, 0, NULL);
}
API CUresult cuMemAdvise(CUdeviceptr p, size_t n, int advice, CUdevice d) {
    NEED_INIT();
    struct rw_advise a = {.dptr = p, .bytes = n, .kind = 1, .value = advice, .device = d};
    return rpc(OP_ADVISE, &a, sizeof a, NULL, 0, NULL);
}

/* ---- modules and libraries ---- */
#define FATBIN_MAGIC 0xBA55ED50u
#define FATBINC_MAGIC 0x466243b1u
struct fatbinc { uint32_t magic, version; const void *data; const void *filename; };

/* image_size: the bytes of a module image (fat binary, its wrapper, ELF
 * cubin or PTX text). With chain, fat binary containers that follow the
 * first one back to back are counted too (a library's kernels for some
 * architectures can sit in a later container); the driver is asked with
 * the chain only when the first container alone has no code for the GPU. */
static size_t image_size(const void **img, int chain) {
    const unsigned char *p = *img;
    uint32_t magic;
    memcpy(&magic, p, 4);
    if (magic == FATBINC_MAGIC) {
        const struct fatbinc *w = *img;
        *img = w->data;
        p = *img;
        memcpy(&magic, p, 4);
    }
    if (magic == FATBIN_MAGIC) {
        size_t total = 0;
        do {
            uint16_t hsize;
            uint64_t fsize;
            memcpy(&hsize, p + total + 6, 2);
            memcpy(&fsize, p + total + 8, 8);
            if (hsize < 16 || fsize > RW_IMAGE_MAX || total + hsize + fsize > RW_IMAGE_MAX)
                break;
            total += (size_t)hsize + (size_t)fsize;
            if (!chain)
                break;
            memcpy(&magic, p + total, 4);
        } while (magic == FATBIN_MAGIC);
        return total;
    }
    if (p[0] == 0x7f && p[1] == 'E' && p[2] == 'L' && p[3] == 'F') {
        uint64_t shoff, phoff;
        uint16_t shentsize, shnum, phentsize, phnum;
        memcpy(&phoff, p + 32, 8);
        memcpy(&shoff, p + 40, 8);
        memcpy(&phentsize, p + 54, 2);
        memcpy(&phnum, p + 56, 2);
        memcpy(&shentsize, p + 58, 2);
        memcpy(&shnum, p + 60, 2);
        uint64_t end = shoff + (uint64_t)shentsize * shnum, pend = phoff + (uint64_t)phentsize * phnum;
        return (size_t)(end > pend ? end : pend);
    }
    return strlen((const char *)p) + 1;
}

static CUresult load_image_n(uint16_t op, const void *img, size_t n, uint32_t *id) {
    size_t chunk = mbox_capacity(&MB);
    if (n == 0 || n > RW_IMAGE_MAX) {
        logf_(1, "module image of %zu bytes: too large", n);
        return CUDA_ERROR_INVALID_IMAGE;
    }
    uint64_t t0 = mono_ns();
    session_lock();
    CUresult r = CUDA_SUCCESS;
    uint16_t flags = RW_STAGED;
    if (n <= chunk) {
        int e = mbox_put(&MB, img, n, SEQ + 1);
        if (e < 0)
            r = errno_to_cu(e);
    } else {
        /* A large image goes in parts, then the load names it. */
        flags = RW_IMAGE;
        for (size_t off = 0; off < n && r == CUDA_SUCCESS; off += chunk) {
            size_t m = n - off < chunk ? n - off : chunk;
            int e = mbox_put(&MB, (const unsigned char *)img + off, m, SEQ + 1);
            uint64_t part[3] = {off, m, n};
            r = e < 0 ? errno_to_cu(e) : rpc_locked(OP_IMAGE_PUT, 0, part, sizeof part, NULL, 0, NULL);
        }
    }
    if (r == CUDA_SUCCESS) {
        uint64_t len = n;
        uint32_t got = 0;
        r = rpc_locked(op, flags, &len, 8, id, 4, &got);
        if (r == CUDA_SUCCESS && got != 4)
            r = CUDA_ERROR_UNKNOWN;
    }
    pthread_mutex_unlock(&mu);
    logf_(2, "module image of %zu bytes: %d in %.1f ms", n, r, (double)(mono_ns() - t0) / 1e6);
    return r;
}

static CUresult load_image(uint16_t op, const void *img, uint32_t *id) {
    NEED_INIT();
    if (!img)
        return CUDA_ERROR_INVALID_VALUE;
    const void *chained = img;
    size_t n = image_size(&img, 0);
    CUresult r = load_image_n(op, img, n, id);
    if (r == CUDA_ERROR_NO_BINARY_FOR_GPU || r == CUDA_ERROR_INVALID_IMAGE) {
        size_t all = image_size(&chained, 1);
        if (all > n) {
            logf_(1, "module image: %d with its first fat binary container (%zu bytes), again with the %zu bytes "
                     "of those that follow it", r, n, all);
            r = load_image_n(op, chained, all, id);
        }
    }
    return r;
}

API CUresult cuModuleLoadData(CUmodule *m, const void *img) {
    if (!m)
        return CUDA_ERROR_INVALID_VALUE;
    uint32_t id;
    CUresult r = load_image(OP_MODULE_LOAD, img, &id);
    if (r)
        return r;
    struct robj *o = obj_new(O_MODULE, id);
    if (!o)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *m = (CUmodule)o;
    return CUDA_SUCCESS;
}
API CUresult cuModuleLoadDataEx(CUmodule *m, const void *img, unsigned n, CUjit_option *o, void **v) {
    (void)n, (void)o, (void)v; /* JIT options are hints; the launcher's driver uses its defaults */
    return cuModuleLoadData(m, img);
}
API CUresult cuModuleLoadFatBinary(CUmodule *m, const void *img) { return cuModuleLoadData(m, img); }
API CUresult cuModuleUnload(CUmodule m) {
    NEED_INIT();
    struct robj *o = obj_check(m, O_MODULE);
    if (!o)
        return CUDA_ERROR_INVALID_HANDLE;
    CUresult r = rpc(OP_MODULE_UNLOAD, &o->id, 4, NULL, 0, NULL);
    obj_free(o);
    return r;
}

static CUresult func_from_reply(const unsigned char *rep, uint32_t kind, struct robj **out) {
    struct rw_func f;
    memcpy(&f, rep, sizeof f);
    if (f.nparams > RW_MAX_PARAMS)
        return CUDA_ERROR_UNKNOWN;
    struct robj *o = obj_new(kind, f.id);
    if (!o)
        return CUDA_ERROR_OUT_OF_MEMORY;
    o->nparams = f.nparams;
    o->argbytes = f.argbytes;
    o->param = calloc(f.nparams ? f.nparams : 1, sizeof *o->param);
    if (!o->param) {
        obj_free(o);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    memcpy(o->param, rep + sizeof f, f.nparams * sizeof *o->param);
    *out = o;
    return CUDA_SUCCESS;
}

static CUresult get_func(uint16_t op, uint32_t owner, const char *name, uint32_t kind, struct robj **out) {
    NEED_INIT();
    if (!name)
        return CUDA_ERROR_INVALID_VALUE;
    size_t nl = strlen(name) + 1;
    if (4 + nl > RW_BODY_MAX)
        return CUDA_ERROR_INVALID_VALUE;
    unsigned char body[RW_PAGE], rep[RW_PAGE];
    memcpy(body, &owner, 4);
    memcpy(body + 4, name, nl);
    uint32_t n = 0;
    CUresult r = rpc(op, body, (uint32_t)(4 + nl), rep, sizeof rep, &n);
    if (r)
        return r;
    if (n < sizeof(struct rw_func))
        return CUDA_ERROR_UNKNOWN;
    if ((r = func_from_reply(rep, kind, out)))
        return r;
    (*out)->name = strdup(name);
    return CUDA_SUCCESS;
}

API CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name) {
    struct robj *mo = obj_check(m, O_MODULE), *o;
    if (!f || !mo)
        return !f ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_INVALID_HANDLE;
    CUresult r = get_func(OP_MODULE_FUNCTION, mo->id, name, O_FUNC, &o);
    if (r)
        return r;
    *f = (CUfunction)o;
    return CUDA_SUCCESS;
}

static CUresult get_global(uint16_t op, uint32_t owner, const char *name, CUdeviceptr *p, size_t *bytes) {
    if (!name)
        return CUDA_ERROR_INVALID_VALUE;
    size_t nl = strlen(name) + 1;
    if (4 + nl > RW_BODY_MAX)
        return CUDA_ERROR_INVALID_VALUE;
    unsigned char body[RW_PAGE];
    memcpy(body, &owner, 4);
    memcpy(body + 4, name, nl);
    uint64_t v[2];
    uint32_t n = 0;
    CUresult r = rpc(op, body, (uint32_t)(4 + nl), v, sizeof v, &n);
    if (r)
        return r;
    if (n != sizeof v)
        return CUDA_ERROR_UNKNOWN;
    if (p)
        *p = v[0];
    if (bytes)
        *bytes = v[1];
    if (!is_device(v[0]))
        alloc_note(v[0], v[1]);
    return CUDA_SUCCESS;
}

API CUresult cuModuleGetGlobal_v2(CUdeviceptr *p, size_t *bytes, CUmodule m, const char *name) {
    NEED_INIT();
    struct robj *mo = obj_check(m, O_MODULE);
    if (!mo)
        return CUDA_ERROR_INVALID_HANDLE;
    return get_global(OP_MODULE_GLOBAL, mo->id, name, p, bytes);
}

API CUresult cuModuleGetLoadingMode(int *mode) {
    if (!mode)
        return CUDA_ERROR_INVALID_VALUE;
    *mode = 1; /* CU_MODULE_EAGER_LOADING */
    return CUDA_SUCCESS;
}

API CUresult cuLibraryLoadData(CUlibrary *l, const void *code, CUjit_option *jo, void **jv, unsigned nj,
                               CUlibraryOption *lo, void **lv, unsigned nl) {
    (void)jo, (void)jv, (void)nj, (void)lo, (void)lv, (void)nl;
    if (!l)
        return CUDA_ERROR_INVALID_VALUE;
    uint32_t id;
    CUresult r = load_image(OP_LIBRARY_LOAD, code, &id);
    if (r)
        return r;
    struct robj *o = obj_new(O_LIBRARY, id);
    if (!o)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *l = (CUlibrary)o;
    return CUDA_SUCCESS;
}
API CUresult cuLibraryUnload(CUlibrary l) {
    NEED_INIT();
    struct robj *o = obj_check(l, O_LIBRARY);
    if (!o)
        return CUDA_ERROR_INVALID_HANDLE;
    CUresult r = rpc(OP_LIBRARY_UNLOAD, &o->id, 4, NULL, 0, NULL);
    obj_free(o);
    return r;
}
API CUresult cuLibraryGetKernel(CUkernel *k, CUlibrary l, const char *name) {
    struct robj *lo = obj_check(l, O_LIBRARY), *o;
    if (!k || !lo)
        return !k ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_INVALID_HANDLE;
    CUresult r = get_func(OP_LIBRARY_KERNEL, lo->id, name, O_KERNEL, &o);
    if (r)
        return r;
    o->lib = lo;
    *k = (CUkernel)o;
    return CUDA_SUCCESS;
}
API CUresult cuKernelGetFunction(CUfunction *f, CUkernel k) {
    NEED_INIT();
    struct robj *ko = obj_check(k, O_KERNEL), *o;
    if (!f || !ko)
        return !f ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_INVALID_HANDLE;
    unsigned char rep[RW_PAGE];
    uint32_t n = 0;
    CUresult r = rpc(OP_KERNEL_FUNCTION, &ko->id, 4, rep, sizeof rep, &n);
    if (r)
        return r;
    if (n < sizeof(struct rw_func))
        return CUDA_ERROR_UNKNOWN;
    if ((r = func_from_reply(rep, O_FUNC, &o)))
        return r;
    if (ko->name)
        o->name = strdup(ko->name);
    *f = (CUfunction)o;
    return CUDA_SUCCESS;
}

static struct robj *func_or_kernel(const void *p) {
    struct robj *o = obj_check(p, O_FUNC);
    return o ? o : obj_check(p, O_KERNEL);
}

API CUresult cuFuncGetAttribute(int *v, CUfunction_attribute a, CUfunction f) {
    NEED_INIT();
    struct robj *o = func_or_kernel(f);
    if (!o || !v)
        return !v ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_INVALID_HANDLE;
    uint32_t b[2] = {o->id, (uint32_t)a};
    uint32_t n = 0;
    return rpc(OP_FUNC_ATTR, b, sizeof b, v, 4, &n);
}
API CUresult cuKernelGetAttribute(int *v, CUfunction_attribute a, CUkernel k, CUdevice d) {
    (void)d;
    return cuFuncGetAttribute(v, a, (CUfunction)k);
}
API CUresult cuFuncSetAttribute(CUfunction f, CUfunction_attribute a, int v) {
    NEED_INIT();
    struct robj *o = func_or_kernel(f);
    if (!o)
        return CUDA_ERROR_INVALID_HANDLE;
    uint32_t b[3] = {o->id, (uint32_t)a, (uint32_t)v};
    return rpc(OP_FUNC_SET_ATTR, b, sizeof b, NULL, 0, NULL);
}
API CUresult cuKernelSetAttribute(CUfunction_attribute a, int v, CUkernel k, CUdevice d) {
    (void)d;
    return cuFuncSetAttribute((CUfunction)k, a, v);
}
API CUresult cuFuncSetCacheConfig(CUfunction f, int cfg) {
    (void)cfg;
    return func_or_kernel(f) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}
API CUresult cuFuncGetParamInfo(CUfunction f, size_t i, size_t *off, size_t *size) {
    struct robj *o = func_or_kernel(f);
    if (!o)
        return CUDA_ERROR_INVALID_HANDLE;
    if (i >= o->nparams)
        return CUDA_ERROR_INVALID_VALUE;
    if (off)
        *off = o->param[i].offset;
    if (size)
        *size = o->param[i].size;
    return CUDA_SUCCESS;
}
API CUresult cuKernelGetParamInfo(CUkernel k, size_t i, size_t *off, size_t *size) {
    return cuFuncGetParamInfo((CUfunction)k, i, off, size);
}
API CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *n, CUfunction f, int block, size_t shmem) {
    NEED_INIT();
    struct robj *o = func_or_kernel(f);
    if (!o || !n)
        return !n ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_INVALID_HANDLE;
    uint32_t b[4] = {o->id, (uint32_t)block, 0, 0};
    uint64_t sm = shmem;
    memcpy(&b[2], &sm, 8);
    uint32_t got = 0;
    return rpc(OP_OCCUPANCY, b, sizeof b, n, 4, &got);
}
API CUresult cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *n, CUfunction f, int block, size_t shmem,
                                                                   unsigned flags) {
    (void)flags;
    return cuOccupancyMaxActiveBlocksPerMultiprocessor(n, f, block, shmem);
}

/* ---- launches ---- */
/* attrs_encode turns cuLaunchKernelEx's attributes into the wire's: events
 * become the session's event ids. */
static CUresult attrs_encode(const CUlaunchAttribute *in, unsigned n, struct rw_attr *out) {
    if (n > RW_MAX_ATTRS)
        return CUDA_ERROR_NOT_SUPPORTED;
    for (unsigned i = 0; i < n; i++) {
        memset(&out[i], 0, sizeof out[i]);
        out[i].id = (uint32_t)in[i].id;
        memcpy(out[i].value, in[i].value.raw, sizeof out[i].value);
        if (in[i].id == CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT || in[i].id == CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT) {
            void *ev;
            memcpy(&ev, in[i].value.raw, sizeof ev);
            struct robj *eo = obj_check(ev, O_EVENT);
            if (!eo)
                return CUDA_ERROR_INVALID_HANDLE;
            uint64_t id = eo->id;
            memcpy(out[i].value, &id, 8);
        }
    }
    return CUDA_SUCCESS;
}

static CUresult launch(struct robj *o, const unsigned g[3], const unsigned b[3], unsigned shmem, CUstream s,
                       void **params, void **extra, const CUlaunchAttribute *attrs, unsigned nattrs) {
    NEED_INIT();
    CUresult r;
    struct rw_launch l = {.func = o->id, .grid = {g[0], g[1], g[2]}, .block = {b[0], b[1], b[2]},
                          .shmem = shmem, .stream = stream_id(s, &r), .nattrs = nattrs};
    if (r)
        return r;
    struct rw_attr at[RW_MAX_ATTRS];
    if ((r = attrs_encode(attrs, nattrs, at))) {
        logf_(1, "cuLaunchKernelEx: %u launch attributes: %d", nattrs, r);
        return r;
    }
    size_t head = sizeof l + nattrs * sizeof at[0];
    static __thread unsigned char *args;
    static __thread size_t argcap;
    size_t nbytes = o->argbytes;
    const void *packed = NULL;
    if (!params && extra) {
        /* CU_LAUNCH_PARAM_BUFFER_POINTER / _SIZE: the packed buffer as is. */
        void *buf = NULL;
        size_t size = 0;
        for (int i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
            if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER)
                buf = extra[i + 1];
            else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE)
                size = *(size_t *)extra[i + 1];
            else
                return CUDA_ERROR_INVALID_VALUE;
        }
        if (!buf || size < nbytes)
            return CUDA_ERROR_INVALID_VALUE;
        packed = buf;
        nbytes = size;
    } else {
        if (o->nparams && !params)
            return CUDA_ERROR_INVALID_VALUE;
        if (argcap < nbytes) {
            unsigned char *n = realloc(args, nbytes);
            if (!n)
                return CUDA_ERROR_OUT_OF_MEMORY;
            args = n;
            argcap = nbytes;
        }
        if (nbytes)
            memset(args, 0, nbytes);
        for (uint32_t i = 0; i < o->nparams; i++)
            memcpy(args + o->param[i].offset, params[i], o->param[i].size);
        packed = args;
    }
    /* What the driver refuses at the call is refused here, at the call. */
    struct rw_device_info *di = info(cur_ctx ? cur_ctx->dev : 0);
    for (int i = 0; i < 3; i++) {
        if (g[i] == 0 || b[i] == 0)
            return CUDA_ERROR_INVALID_VALUE;
        if (di && ((di->attr_ok[(2 + i) / 8] & (1u << ((2 + i) % 8)) && b[i] > (unsigned)di->attr[2 + i]) ||
                   (di->attr_ok[(5 + i) / 8] & (1u << ((5 + i) % 8)) && g[i] > (unsigned)di->attr[5 + i])))
            return CUDA_ERROR_INVALID_VALUE;
    }
    if (di && (di->attr_ok[0] & 2u) && (uint64_t)b[0] * b[1] * b[2] > (uint64_t)di->attr[1])
        return CUDA_ERROR_INVALID_VALUE;
    l.argbytes = (uint32_t)nbytes;
    unsigned char body[RW_PAGE];
    memcpy(body, &l, sizeof l);
    if (nattrs)
        memcpy(body + sizeof l, at, nattrs * sizeof at[0]);
    if (RW_REC_SPAN(head + nbytes) <= RW_BODY_MAX) {
        if (nbytes)
            memcpy(body + head, packed, nbytes);
        return enqueue(s, OP_LAUNCH, body, (uint32_t)(head + nbytes));
    }
    session_lock();
    if (head + nbytes <= RW_BODY_MAX) {
        if (nbytes)
            memcpy(body + head, packed, nbytes);
        r = rpc_locked(OP_LAUNCH, 0, body, (uint32_t)(head + nbytes), NULL, 0, NULL);
    } else {
        int e = mbox_put(&MB, packed, nbytes, SEQ + 1);
        r = e < 0 ? errno_to_cu(e) : rpc_locked(OP_LAUNCH, RW_STAGED, body, (uint32_t)head, NULL, 0, NULL);
    }
    pthread_mutex_unlock(&mu);
    return r;
}

API CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                            unsigned bz, unsigned shmem, CUstream s, void **params, void **extra) {
    struct robj *o = func_or_kernel(f);
    if (!o)
        return CUDA_ERROR_INVALID_HANDLE;
    unsigned g[3] = {gx, gy, gz}, b[3] = {bx, by, bz};
    return launch(o, g, b, shmem, s, params, extra, NULL, 0);
}
API CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                       unsigned by, unsigned bz, unsigned shmem, CUstream s, void **params) {
    struct robj *o = func_or_kernel(f);
    if (!o)
        return CUDA_ERROR_INVALID_HANDLE;
    unsigned g[3] = {gx, gy, gz}, b[3] = {bx, by, bz};
    CUlaunchAttribute coop;
    memset(&coop, 0, sizeof coop);
    coop.id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
    coop.value.cooperative = 1;
    return launch(o, g, b, shmem, s, params, NULL, &coop, 1);
}
API CUresult cuLaunchKernelEx(const CUlaunchConfig *c, CUfunction f, void **params, void **extra) {
    struct robj *o = func_or_kernel(f);
    if (!o)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!c || (c->numAttrs && !c->attrs))
        return CUDA_ERROR_INVALID_VALUE;
    unsigned g[3] = {c->gridDimX, c->gridDimY, c->gridDimZ}, b[3] = {c->blockDimX, c->blockDimY, c->blockDimZ};
    return launch(o, g, b, c->sharedMemBytes, c->hStream, params, extra, c->attrs, c->numAttrs);
}

/* Cluster occupancy: the launch configuration goes as a launch does. */
static CUresult cluster_occ(int *out, CUfunction f, const CUlaunchConfig *c, uint32_t which) {
    NEED_INIT();
    struct robj *o = func_or_kernel(f);
    if (!o)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!out || !c || (c->numAttrs && !c->attrs))
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r;
    struct rw_launch l = {.func = o->id, .grid = {c->gridDimX, c->gridDimY, c->gridDimZ},
                          .block = {c->blockDimX, c->blockDimY, c->blockDimZ}, .shmem = c->sharedMemBytes,
                          .stream = stream_id(c->hStream, &r), .nattrs = c->numAttrs, .reserved = which};
    if (r)
        return r;
    unsigned char body[sizeof l + RW_MAX_ATTRS * sizeof(struct rw_attr)];
    if ((r = attrs_encode(c->attrs, c->numAttrs, (struct rw_attr *)(void *)(body + sizeof l))))
        return r;
    memcpy(body, &l, sizeof l);
    uint32_t n = 0;
    return rpc(OP_CLUSTER_OCC, body, (uint32_t)(sizeof l + c->numAttrs * sizeof(struct rw_attr)), out, 4, &n);
}
API CUresult cuOccupancyMaxActiveClusters(int *n, CUfunction f, const CUlaunchConfig *c) {
    return cluster_occ(n, f, c, 0);
}
API CUresult cuOccupancyMaxPotentialClusterSize(int *n, CUfunction f, const CUlaunchConfig *c) {
    return cluster_occ(n, f, c, 1);
}
API CUresult cuOccupancyAvailableDynamicSMemPerBlock(size_t *bytes, CUfunction f, int blocks, int block) {
    NEED_INIT();
    struct robj *o = func_or_kernel(f);
    if (!o || !bytes)
        return !bytes ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_INVALID_HANDLE;
    uint32_t b[3] = {o->id, (uint32_t)blocks, (uint32_t)block};
    uint64_t v = 0;
    uint32_t n = 0;
    CUresult r = rpc(OP_DYN_SMEM, b, sizeof b, &v, 8, &n);
    if (r == CUDA_SUCCESS)
        *bytes = (size_t)v;
    return r;
}

/* ---- streams and events ---- */
API CUresult cuStreamCreateWithPriority(CUstream *s, unsigned flags, int prio) {
    NEED_INIT();
    if (!s)
        return CUDA_ERROR_INVALID_VALUE;
    uint32_t b[2] = {flags, (uint32_t)prio};
    struct robj *o;
    CUresult r = rpc_obj(OP_STREAM_CREATE, b, sizeof b, O_STREAM, &o);
    if (r)
        return r;
    o->flags = flags;
    o->priority = prio;
    o->ctx = cur_ctx;
    *s = (CUstream)o;
    return CUDA_SUCCESS;
}
API CUresult cuStreamCreate(CUstream *s, unsigned flags) { return cuStreamCreateWithPriority(s, flags, 0); }
API CUresult cuStreamDestroy_v2(CUstream s) {
    NEED_INIT();
    struct robj *o = obj_check(s, O_STREAM);
    if (!o)
        return CUDA_ERROR_INVALID_HANDLE;
    CUresult r = rpc(OP_STREAM_DESTROY, &o->id, 4, NULL, 0, NULL);
    obj_free(o);
    return r;
}
static CUresult stream_op(uint16_t op, CUstream s) {
    NEED_INIT();
    CUresult r;
    uint32_t id = stream_id(s, &r);
    return r ? r : sync_rpc(op, &id, 4);
}
API CUresult cuStreamSynchronize(CUstream s) { return stream_op(OP_STREAM_SYNC, s); }
API CUresult cuStreamQuery(CUstream s) {
    NEED_INIT();
    struct robj *o = obj_check(s, O_STREAM);
    if (queued(o ? atomic_load(&o->qno) : atomic_load(&q_default_no)))
        return CUDA_ERROR_NOT_READY; /* its last work is still in the queue */
    return stream_op(OP_STREAM_QUERY, s);
}
API CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned flags) {
    NEED_INIT();
    CUresult r;
    struct robj *eo = obj_check(e, O_EVENT);
    uint32_t b[3] = {stream_id(s, &r), eo ? eo->id : 0, flags};
    if (r || !eo)
        return CUDA_ERROR_INVALID_HANDLE;
    return enqueue(s, OP_STREAM_WAIT_EVENT, b, sizeof b);
}
API CUresult cuStreamGetPriority(CUstream s, int *p) {
    struct robj *o = obj_check(s, O_STREAM);
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    *p = o ? o->priority : 0;
    return CUDA_SUCCESS;
}
API CUresult cuStreamGetFlags(CUstream s, unsigned *f) {
    struct robj *o = obj_check(s, O_STREAM);
    if (!f)
        return CUDA_ERROR_INVALID_VALUE;
    *f = o ? o->flags : 0;
    return CUDA_SUCCESS;
}
API CUresult cuStreamGetCtx(CUstream s, CUcontext *c) {
    struct robj *o = obj_check(s, O_STREAM);
    if (!c)
        return CUDA_ERROR_INVALID_VALUE;
    *c = (CUcontext)(o && o->ctx ? o->ctx : cur_ctx);
    return CUDA_SUCCESS;
}
/* Stream capture (graphs) is not forwarded: no stream is ever capturing.
 * cuStreamGetCaptureInfo says so in both of its signatures (CUDA 11.3's
 * _v2 and 12.3's _v3, which adds the edge data before the count). */
API CUresult cuStreamGetCaptureInfo_v2(CUstream s, int *status, cuuint64_t *id, void **graph, const void **deps,
                                       size_t *ndeps) {
    (void)s;
    if (!status)
        return CUDA_ERROR_INVALID_VALUE;
    *status = 0;
    if (id)
        *id = 0;
    if (graph)
        *graph = NULL;
    if (deps)
        *deps = NULL;
    if (ndeps)
        *ndeps = 0;
    return CUDA_SUCCESS;
}
API CUresult cuStreamGetCaptureInfo_v3(CUstream s, int *status, cuuint64_t *id, void **graph, const void **deps,
                                       const void **edges, size_t *ndeps) {
    if (edges)
        *edges = NULL;
    return cuStreamGetCaptureInfo_v2(s, status, id, graph, deps, ndeps);
}

/* Pointer attributes, from what this process allocated. */
enum {
    PA_CONTEXT = 1, PA_MEMORY_TYPE = 2, PA_DEVICE_POINTER = 3, PA_HOST_POINTER = 4, PA_SYNC_MEMOPS = 6,
    PA_BUFFER_ID = 7, PA_IS_MANAGED = 8, PA_DEVICE_ORDINAL = 9, PA_RANGE_START = 11, PA_RANGE_SIZE = 12,
    PA_MAPPED = 13
};
static int alloc_of(uint64_t p, struct alloc *out) {
    int yes = 0;
    pthread_mutex_lock(&amu);
    for (size_t i = 0; i < nallocs && !yes; i++)
        if (p >= allocs[i].base && p - allocs[i].base < allocs[i].size) {
            *out = allocs[i];
            yes = 1;
        }
    pthread_mutex_unlock(&amu);
    return yes;
}
static CUresult pointer_attr(void *data, int attr, CUdeviceptr p, int lenient) {
    struct alloc a;
    int dev = alloc_of(p, &a);
    if (!data)
        return CUDA_ERROR_INVALID_VALUE;
    if (!dev) {
        if (!lenient)
            return CUDA_ERROR_INVALID_VALUE; /* host memory unknown to the driver */
        switch (attr) {
        case PA_MEMORY_TYPE: case PA_DEVICE_ORDINAL: *(int *)data = attr == PA_DEVICE_ORDINAL ? -2 : 0; break;
        case PA_CONTEXT: case PA_HOST_POINTER: case PA_DEVICE_POINTER: *(void **)data = NULL; break;
        case PA_RANGE_START: case PA_RANGE_SIZE: case PA_BUFFER_ID: *(uint64_t *)data = 0; break;
        default: *(int *)data = 0; break;
        }
        return CUDA_SUCCESS;
    }
    switch (attr) {
    case PA_CONTEXT: *(CUcontext *)data = (CUcontext)(cur_ctx ? cur_ctx : primary[0]); return CUDA_SUCCESS;
    case PA_MEMORY_TYPE: *(unsigned *)data = 2; return CUDA_SUCCESS; /* CU_MEMORYTYPE_DEVICE */
    case PA_DEVICE_POINTER: *(CUdeviceptr *)data = p; return CUDA_SUCCESS;
    case PA_HOST_POINTER: return CUDA_ERROR_INVALID_VALUE;
    case PA_SYNC_MEMOPS: case PA_MAPPED: *(int *)data = attr == PA_MAPPED; return CUDA_SUCCESS;
    case PA_BUFFER_ID: *(uint64_t *)data = a.base; return CUDA_SUCCESS;
    case PA_IS_MANAGED: *(int *)data = 0; return CUDA_SUCCESS;
    case PA_DEVICE_ORDINAL: *(int *)data = cur_ctx ? cur_ctx->dev : 0; return CUDA_SUCCESS;
    case PA_RANGE_START: *(CUdeviceptr *)data = a.base; return CUDA_SUCCESS;
    case PA_RANGE_SIZE: *(size_t *)data = a.size; return CUDA_SUCCESS;
    default: return CUDA_ERROR_NOT_SUPPORTED;
    }
}
API CUresult cuPointerGetAttribute(void *data, int attr, CUdeviceptr p) {
    NEED_INIT();
    return pointer_attr(data, attr, p, 0);
}
API CUresult cuPointerGetAttributes(unsigned n, int *attrs, void **data, CUdeviceptr p) {
    NEED_INIT();
    if (!attrs || !data)
        return CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < n; i++) {
        CUresult r = pointer_attr(data[i], attrs[i], p, 1);
        if (r != CUDA_SUCCESS && r != CUDA_ERROR_NOT_SUPPORTED)
            return r;
    }
    return CUDA_SUCCESS;
}

API CUresult cuStreamIsCapturing(CUstream s, int *status) {
    (void)s;
    if (!status)
        return CUDA_ERROR_INVALID_VALUE;
    *status = 0;
    return CUDA_SUCCESS;
}
API CUresult cuThreadExchangeStreamCaptureMode(int *mode) {
    if (!mode)
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

API CUresult cuEventCreate(CUevent *e, unsigned flags) {
    NEED_INIT();
    if (!e)
        return CUDA_ERROR_INVALID_VALUE;
    struct robj *o;
    CUresult r = rpc_obj(OP_EVENT_CREATE, &flags, 4, O_EVENT, &o);
    if (r)
        return r;
    o->flags = flags;
    *e = (CUevent)o;
    return CUDA_SUCCESS;
}
API CUresult cuEventDestroy_v2(CUevent e) {
    NEED_INIT();
    struct robj *o = obj_check(e, O_EVENT);
    if (!o)
        return CUDA_ERROR_INVALID_HANDLE;
    CUresult r = rpc(OP_EVENT_DESTROY, &o->id, 4, NULL, 0, NULL);
    obj_free(o);
    return r;
}
API CUresult cuEventRecord(CUevent e, CUstream s) {
    NEED_INIT();
    CUresult r;
    struct robj *o = obj_check(e, O_EVENT);
    uint32_t b[2] = {o ? o->id : 0, stream_id(s, &r)};
    if (r || !o)
        return CUDA_ERROR_INVALID_HANDLE;
    if ((r = enqueue(s, OP_EVENT_RECORD, b, sizeof b)) == CUDA_SUCCESS)
        atomic_store(&o->qno, q_last_no);
    return r;
}
API CUresult cuEventRecordWithFlags(CUevent e, CUstream s, unsigned flags) {
    (void)flags;
    return cuEventRecord(e, s);
}
static CUresult event_op(uint16_t op, CUevent e) {
    NEED_INIT();
    struct robj *o = obj_check(e, O_EVENT);
    if (!o)
        return CUDA_ERROR_INVALID_HANDLE;
    return sync_rpc(op, &o->id, 4);
}
API CUresult cuEventSynchronize(CUevent e) { return event_op(OP_EVENT_SYNC, e); }
API CUresult cuEventQuery(CUevent e) {
    NEED_INIT();
    struct robj *o = obj_check(e, O_EVENT);
    if (o && queued(atomic_load(&o->qno)))
        return CUDA_ERROR_NOT_READY; /* its record is still in the queue */
    return event_op(OP_EVENT_QUERY, e);
}
API CUresult cuEventElapsedTime(float *ms, CUevent a, CUevent z) {
    NEED_INIT();
    struct robj *ao = obj_check(a, O_EVENT), *zo = obj_check(z, O_EVENT);
    if (!ms)
        return CUDA_ERROR_INVALID_VALUE;
    if (!ao || !zo)
        return CUDA_ERROR_INVALID_HANDLE;
    uint32_t b[2] = {ao->id, zo->id}, n = 0;
    return rpc(OP_EVENT_ELAPSED, b, sizeof b, ms, 4, &n);
}

/* ---- tensor maps (TMA descriptors), encoded by the launcher's driver ---- */
static CUresult tmap_rpc(struct rw_tmap *t, CUtensorMap *map) {
    NEED_INIT();
    uint32_t n = 0;
    _Alignas(64) unsigned char out[sizeof(CUtensorMap)];
    CUresult r = rpc(OP_TENSOR_MAP, t, sizeof *t, out, sizeof out, &n);
    if (r == CUDA_SUCCESS && n != sizeof out)
        r = CUDA_ERROR_UNKNOWN;
    if (r == CUDA_SUCCESS)
        memcpy(map, out, sizeof out);
    return r;
}
static CUresult tmap_common(struct rw_tmap *t, CUtensorMap *map, int dtype, uint32_t rank, void *addr,
                            const cuuint64_t *dim, const cuuint64_t *stride, const uint32_t *estride, int interleave,
                            int swizzle, int l2, int oob) {
    if (!map || !dim || !estride || rank < 1 || rank > 5 || (rank > 1 && !stride))
        return CUDA_ERROR_INVALID_VALUE;
    t->dtype = (uint32_t)dtype, t->rank = rank, t->addr = (uint64_t)(uintptr_t)addr;
    t->interleave = (uint32_t)interleave, t->swizzle = (uint32_t)swizzle, t->l2promo = (uint32_t)l2;
    t->oobfill = (uint32_t)oob;
    for (uint32_t i = 0; i < rank; i++) {
        t->dim[i] = dim[i];
        t->elem_stride[i] = estride[i];
        if (i + 1 < rank)
            t->stride[i] = stride[i];
    }
    return CUDA_SUCCESS;
}
API CUresult cuTensorMapEncodeTiled(CUtensorMap *map, int dtype, uint32_t rank, void *addr, const cuuint64_t *dim,
                                    const cuuint64_t *stride, const uint32_t *box, const uint32_t *estride,
                                    int interleave, int swizzle, int l2, int oob) {
    struct rw_tmap t;
    memset(&t, 0, sizeof t);
    CUresult r = tmap_common(&t, map, dtype, rank, addr, dim, stride, estride, interleave, swizzle, l2, oob);
    if (r || !box)
        return r ? r : CUDA_ERROR_INVALID_VALUE;
    for (uint32_t i = 0; i < rank; i++)
        t.box[i] = box[i];
    return tmap_rpc(&t, map);
}
API CUresult cuTensorMapEncodeIm2col(CUtensorMap *map, int dtype, uint32_t rank, void *addr, const cuuint64_t *dim,
                                     const cuuint64_t *stride, const int *lower, const int *upper, uint32_t cpp,
                                     uint32_t ppc, const uint32_t *estride, int interleave, int swizzle, int l2,
                                     int oob) {
    struct rw_tmap t;
    memset(&t, 0, sizeof t);
    t.kind = 1;
    CUresult r = tmap_common(&t, map, dtype, rank, addr, dim, stride, estride, interleave, swizzle, l2, oob);
    if (r || rank < 3 || !lower || !upper)
        return r ? r : CUDA_ERROR_INVALID_VALUE;
    for (uint32_t i = 0; i + 2 < rank; i++) {
        t.lower[i] = lower[i];
        t.upper[i] = upper[i];
    }
    t.channels_per_pixel = cpp;
    t.pixels_per_column = ppc;
    return tmap_rpc(&t, map);
}
API CUresult cuTensorMapReplaceAddress(CUtensorMap *map, void *addr) {
    if (!map)
        return CUDA_ERROR_INVALID_VALUE;
    struct rw_tmap t;
    memset(&t, 0, sizeof t);
    t.kind = 2;
    t.addr = (uint64_t)(uintptr_t)addr;
    memcpy(t.map, map, sizeof t.map);
    return tmap_rpc(&t, map);
}

/* ---- more of the driver API, on the services above ---- */
API CUresult cuCtxGetId(CUcontext c, unsigned long long *id) {
    NEED_INIT();
    struct robj *o = c ? obj_check(c, O_CTX) : cur_ctx;
    if (!id)
        return CUDA_ERROR_INVALID_VALUE;
    if (!o)
        return CUDA_ERROR_INVALID_CONTEXT;
    *id = o->id; /* the launcher's context ids are unique within the session */
    return CUDA_SUCCESS;
}
API CUresult cuCtxCreate_v3(CUcontext *c, void *affinity, int n, unsigned flags, CUdevice d) {
    if (affinity || n)
        return CUDA_ERROR_NOT_SUPPORTED; /* execution affinity (green contexts) is not forwarded */
    return cuCtxCreate_v2(c, flags, d);
}
API CUresult cuCtxCreate_v4(CUcontext *c, void *params, unsigned flags, CUdevice d) {
    if (params)
        return CUDA_ERROR_NOT_SUPPORTED; /* execution affinity and CIG are not forwarded */
    return cuCtxCreate_v2(c, flags, d);
}
/* Shared-memory bank configuration is a hint on every GPU CUDA 12 runs on. */
API CUresult cuCtxGetSharedMemConfig(int *cfg) {
    if (!cfg)
        return CUDA_ERROR_INVALID_VALUE;
    *cfg = 1; /* CU_SHARED_MEM_CONFIG_FOUR_BYTE_BANK_SIZE */
    return CUDA_SUCCESS;
}
API CUresult cuCtxSetSharedMemConfig(int cfg) { (void)cfg; return CUDA_SUCCESS; }
API CUresult cuFuncSetSharedMemConfig(CUfunction f, int cfg) {
    (void)cfg;
    return func_or_kernel(f) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}
API CUresult cuKernelSetCacheConfig(CUkernel k, int cfg, CUdevice d) {
    (void)cfg, (void)d;
    return func_or_kernel(k) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}
API CUresult cuFuncGetName(const char **name, CUfunction f) {
    struct robj *o = func_or_kernel(f);
    if (!name)
        return CUDA_ERROR_INVALID_VALUE;
    if (!o || !o->name)
        return CUDA_ERROR_INVALID_HANDLE;
    *name = o->name;
    return CUDA_SUCCESS;
}
API CUresult cuKernelGetName(const char **name, CUkernel k) { return cuFuncGetName(name, (CUfunction)k); }

API CUresult cuStreamGetId(CUstream s, unsigned long long *id) {
    CUresult r;
    uint32_t sid = stream_id(s, &r);
    if (r)
        return r;
    if (!id)
        return CUDA_ERROR_INVALID_VALUE;
    *id = sid;
    return CUDA_SUCCESS;
}
API CUresult cuStreamGetDevice(CUstream s, CUdevice *d) {
    NEED_INIT();
    struct robj *o = obj_check(s, O_STREAM);
    struct robj *c = o && o->ctx ? o->ctx : cur_ctx;
    if (!d)
        return CUDA_ERROR_INVALID_VALUE;
    if (!c)
        return CUDA_ERROR_INVALID_CONTEXT;
    *d = c->dev;
    return CUDA_SUCCESS;
}

/* Host functions and stream callbacks return at once and run here, in
 * the queue's order (see run_hostfn_locked). */
static CUresult hostfn(CUstream s, void (*fn)(void), void *data, uint32_t kind) {
    NEED_INIT();
    CUresult r;
    struct q_hostfn m = {.fn = fn, .data = data, .stream = s, .ctx = cur_ctx, .sid = stream_id(s, &r), .kind = kind};
    if (r)
        return r;
    return enqueue(s, Q_HOSTFN, &m, sizeof m);
}
API CUresult cuLaunchHostFunc(CUstream s, CUhostFn fn, void *data) {
    if (!fn)
        return CUDA_ERROR_INVALID_VALUE;
    return hostfn(s, (void (*)(void))fn, data, 0);
}
API CUresult cuStreamAddCallback(CUstream s, CUstreamCallback cb, void *data, unsigned flags) {
    if (!cb || flags)
        return CUDA_ERROR_INVALID_VALUE;
    return hostfn(s, (void (*)(void))cb, data, 1);
}

/* Stream-ordered allocation: an allocation is usable at once (earlier than
 * the stream needs it); a free waits for the stream's earlier work. */
API CUresult cuMemAllocAsync(CUdeviceptr *p, size_t bytes, CUstream s) {
    CUresult r;
    stream_id(s, &r);
    return r ? r : cuMemAlloc_v2(p, bytes);
}
API CUresult cuMemFreeAsync(CUdeviceptr p, CUstream s) {
    CUresult r = cuStreamSynchronize(s);
    return r ? r : cuMemFree_v2(p);
}

API CUresult cuMemAllocPitch_v2(CUdeviceptr *p, size_t *pitch, size_t width, size_t height, unsigned elem) {
    if (!p || !pitch || !width || !height || (elem != 4 && elem != 8 && elem != 16))
        return CUDA_ERROR_INVALID_VALUE;
    size_t pt = (width + 511) & ~(size_t)511;
    if (pt < width || height > SIZE_MAX / pt)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = cuMemAlloc_v2(p, pt * height);
    if (r == CUDA_SUCCESS)
        *pitch = pt;
    return r;
}

/* 2D copies: contiguous rows go as one copy, others row by row. */
static int mem_kind(int t, const void *host, CUdeviceptr dev) {
    if (t == CU_MEMORYTYPE_UNIFIED)
        return is_device(dev) ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
    if (t == CU_MEMORYTYPE_HOST)
        return host ? CU_MEMORYTYPE_HOST : 0;
    return t == CU_MEMORYTYPE_DEVICE ? t : 0;
}
static CUresult copy2d(const CUDA_MEMCPY2D *c, CUstream s, int async) {
    if (!c)
        return CUDA_ERROR_INVALID_VALUE;
    int sk = mem_kind(c->srcMemoryType, c->srcHost, c->srcDevice);
    int dk = mem_kind(c->dstMemoryType, c->dstHost, c->dstDevice);
    if (!sk || !dk)
        return c->srcMemoryType == CU_MEMORYTYPE_ARRAY || c->dstMemoryType == CU_MEMORYTYPE_ARRAY
                   ? CUDA_ERROR_NOT_SUPPORTED
                   : CUDA_ERROR_INVALID_VALUE;
    size_t w = c->WidthInBytes, h = c->Height;
    if ((h > 1 && (c->srcPitch < w || c->dstPitch < w)) || !w || !h)
        return w && h ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
    uint64_t sbase = (sk == CU_MEMORYTYPE_HOST ? (uint64_t)(uintptr_t)c->srcHost : c->srcDevice) + c->srcXInBytes +
                     c->srcY * c->srcPitch;
    uint64_t dbase = (dk == CU_MEMORYTYPE_HOST ? (uint64_t)(uintptr_t)c->dstHost : c->dstDevice) + c->dstXInBytes +
                     c->dstY * c->dstPitch;
    size_t sp = h > 1 ? c->srcPitch : w, dp = h > 1 ? c->dstPitch : w;
    /* Both packed: one copy. */
    if (sp == w && dp == w) {
        if (sk == CU_MEMORYTYPE_DEVICE && dk == CU_MEMORYTYPE_DEVICE)
            return dtod(dbase, sbase, w * h, s, async);
        if (dk == CU_MEMORYTYPE_DEVICE)
            return htod(dbase, (const void *)(uintptr_t)sbase, w * h, s, async);
        if (sk == CU_MEMORYTYPE_DEVICE)
            return dtoh((void *)(uintptr_t)dbase, sbase, w * h, s, async);
        memmove((void *)(uintptr_t)dbase, (const void *)(uintptr_t)sbase, w * h);
        return CUDA_SUCCESS;
    }
    /* Host rows packed into one buffer and sent or fetched in one copy when
     * the device side is packed. */
    if (dk == CU_MEMORYTYPE_DEVICE && sk == CU_MEMORYTYPE_HOST && dp == w && w * h / h == w) {
        unsigned char *buf = malloc(w * h);
        if (!buf)
            return CUDA_ERROR_OUT_OF_MEMORY;
        for (size_t y = 0; y < h; y++)
            memcpy(buf + y * w, (const void *)(uintptr_t)(sbase + y * sp), w);
        CUresult r = htod(dbase, buf, w * h, s, async);
        free(buf);
        return r;
    }
    if (sk == CU_MEMORYTYPE_DEVICE && dk == CU_MEMORYTYPE_HOST && sp == w && w * h / h == w) {
        unsigned char *buf = malloc(w * h);
        if (!buf)
            return CUDA_ERROR_OUT_OF_MEMORY;
        CUresult r = dtoh(buf, sbase, w * h, s, async);
        if (r == CUDA_SUCCESS)
            for (size_t y = 0; y < h; y++)
                memcpy((void *)(uintptr_t)(dbase + y * dp), buf + y * w, w);
        free(buf);
        return r;
    }
    for (size_t y = 0; y < h; y++) {
        CUresult r = memcpy_any(dbase + y * dp, sbase + y * sp, w, s, async);
        if (r)
            return r;
    }
    return CUDA_SUCCESS;
}
API CUresult cuMemcpy2D_v2(const CUDA_MEMCPY2D *c) { return copy2d(c, NULL, 0); }
API CUresult cuMemcpy2DUnaligned_v2(const CUDA_MEMCPY2D *c) { return copy2d(c, NULL, 0); }
API CUresult cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D *c, CUstream s) { return copy2d(c, s, 1); }

/* The CUDA 12.2 forms of prefetch and advice name a location. */
typedef struct { int type, id; } rloc;
static CUresult loc_device(rloc l, CUdevice *d) {
    switch (l.type) {
    case 1: *d = l.id; return CUDA_SUCCESS;  /* CU_MEM_LOCATION_TYPE_DEVICE */
    case 2: *d = -1; return CUDA_SUCCESS;    /* CU_MEM_LOCATION_TYPE_HOST: CU_DEVICE_CPU */
    default: return CUDA_ERROR_NOT_SUPPORTED;
    }
}
API CUresult cuMemPrefetchAsync_v2(CUdeviceptr p, size_t n, rloc l, unsigned flags, CUstream s) {
    CUdevice d;
    CUresult r = loc_device(l, &d);
    if (r || flags)
        return r ? r : CUDA_ERROR_INVALID_VALUE;
    return cuMemPrefetchAsync(p, n, d, s);
}
API CUresult cuMemAdvise_v2(CUdeviceptr p, size_t n, int advice, rloc l) {
    CUdevice d;
    CUresult r = loc_device(l, &d);
    return r ? r : cuMemAdvise(p, n, advice, d);
}

/* Modules and libraries from files: the image is read here and sent. */
static void *read_file(const char *path) {
    FILE *f = path ? fopen(path, "rb") : NULL;
    if (!f)
        return NULL;
    unsigned char *buf = NULL;
    size_t len = 0, cap = 0, got;
    do {
        if (len + 65536 + 1 > cap) {
            cap = (len + 65536 + 1) * 2;
            unsigned char *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                fclose(f);
                return NULL;
            }
            buf = nb;
        }
        got = fread(buf + len, 1, 65536, f);
        len += got;
    } while (got > 0);
    fclose(f);
    buf[len] = 0; /* PTX text ends with its NUL */
    return buf;
}
API CUresult cuModuleLoad(CUmodule *m, const char *path) {
    void *img = read_file(path);
    if (!img)
        return CUDA_ERROR_FILE_NOT_FOUND;
    CUresult r = cuModuleLoadData(m, img);
    free(img);
    return r;
}
API CUresult cuLibraryLoadFromFile(CUlibrary *l, const char *path, CUjit_option *jo, void **jv, unsigned nj,
                                   CUlibraryOption *lo, void **lv, unsigned nl) {
    void *img = read_file(path);
    if (!img)
        return CUDA_ERROR_FILE_NOT_FOUND;
    CUresult r = cuLibraryLoadData(l, img, jo, jv, nj, lo, lv, nl);
    free(img);
    return r;
}
API CUresult cuLibraryGetGlobal(CUdeviceptr *p, size_t *bytes, CUlibrary l, const char *name) {
    NEED_INIT();
    struct robj *lo = obj_check(l, O_LIBRARY);
    if (!lo)
        return CUDA_ERROR_INVALID_HANDLE;
    return get_global(OP_LIBRARY_GLOBAL, lo->id, name, p, bytes);
}

/* One device, no peers. */
API CUresult cuDeviceGetP2PAttribute(int *v, CUdevice_P2PAttribute a, CUdevice src, CUdevice dst) {
    (void)a;
    NEED_INIT();
    if (!v)
        return CUDA_ERROR_INVALID_VALUE;
    if (src < 0 || dst < 0 || src >= device_count || dst >= device_count || src == dst)
        return CUDA_ERROR_INVALID_DEVICE;
    *v = 0;
    return CUDA_SUCCESS;
}
API CUresult cuDeviceGetByPCIBusId(CUdevice *d, const char *id) {
    NEED_INIT();
    if (!d || !id)
        return CUDA_ERROR_INVALID_VALUE;
    unsigned dom = 0, bus = 0, dev = 0;
    if (sscanf(id, "%x:%x:%x", &dom, &bus, &dev) != 3 && (dom = 0, sscanf(id, "%x:%x", &bus, &dev) != 2))
        return CUDA_ERROR_INVALID_VALUE;
    for (int i = 0; i < device_count && i < MAX_DEV; i++) {
        struct rw_device_info *di = info(i);
        if (di && (unsigned)di->attr[CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID] == dom &&
            (unsigned)di->attr[CU_DEVICE_ATTRIBUTE_PCI_BUS_ID] == bus &&
            (unsigned)di->attr[CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID] == dev) {
            *d = i;
            return CUDA_SUCCESS;
        }
    }
    return CUDA_ERROR_INVALID_DEVICE;
}

/* ---- CUDA 13 forms, a kernel's library, device resources ---- */
API CUresult cuCtxGetDevice_v2(CUdevice *d, CUcontext c) {
    NEED_INIT();
    struct robj *o = c ? obj_check(c, O_CTX) : cur_ctx;
    if (!d)
        return CUDA_ERROR_INVALID_VALUE;
    if (!o)
        return CUDA_ERROR_INVALID_CONTEXT;
    *d = o->dev;
    return CUDA_SUCCESS;
}
API CUresult cuCtxSynchronize_v2(CUcontext c) {
    NEED_INIT();
    struct robj *o = c ? obj_check(c, O_CTX) : cur_ctx;
    if (!o)
        return CUDA_ERROR_INVALID_CONTEXT;
    struct robj *was = cur_ctx;
    cur_ctx = o; /* the call names its context in the request */
    CUresult r = sync_rpc(OP_CTX_SYNC, NULL, 0);
    cur_ctx = was;
    return r;
}
/* CUDA 10.1's form: status and id only. */
API CUresult cuStreamGetCaptureInfo(CUstream s, int *status, cuuint64_t *id) {
    return cuStreamGetCaptureInfo_v2(s, status, id, NULL, NULL, NULL);
}
API CUresult cuKernelGetLibrary(CUlibrary *l, CUkernel k) {
    struct robj *o = obj_check(k, O_KERNEL);
    if (!l)
        return CUDA_ERROR_INVALID_VALUE;
    if (!o || !o->lib)
        return CUDA_ERROR_INVALID_HANDLE;
    *l = (CUlibrary)o->lib;
    return CUDA_SUCCESS;
}
/* A device's or a context's resources (CUdevResource, 144 bytes), as the
 * launcher's driver describes them; splitting them into green contexts is
 * not forwarded. */
#define DEV_RESOURCE_BYTES 144
static CUresult dev_resource(uint32_t which, uint32_t id, void *res, int type) {
    NEED_INIT();
    if (!res)
        return CUDA_ERROR_INVALID_VALUE;
    uint32_t b[3] = {which, id, (uint32_t)type}, n = 0;
    unsigned char out[DEV_RESOURCE_BYTES];
    CUresult r = rpc(OP_DEV_RESOURCE, b, sizeof b, out, sizeof out, &n);
    if (r == CUDA_SUCCESS && n != sizeof out)
        r = CUDA_ERROR_UNKNOWN;
    if (r == CUDA_SUCCESS)
        memcpy(res, out, sizeof out);
    return r;
}
API CUresult cuDeviceGetDevResource(CUdevice d, void *res, int type) {
    if (d < 0 || d >= device_count)
        return CUDA_ERROR_INVALID_DEVICE;
    return dev_resource(0, (uint32_t)d, res, type);
}
API CUresult cuCtxGetDevResource(CUcontext c, void *res, int type) {
    struct robj *o = c ? obj_check(c, O_CTX) : cur_ctx;
    if (!o)
        return CUDA_ERROR_INVALID_CONTEXT;
    return dev_resource(1, o->id, res, type);
}

/* ---- errors, profiler ---- */
static const struct { int code; const char *name, *text; } errs[] = {
    {0, "CUDA_SUCCESS", "no error"},
    {1, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {3, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {100, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected (no launcher reachable)"},
    {101, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {200, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
    {201, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {209, "CUDA_ERROR_NO_BINARY_FOR_GPU", "no kernel image is available for execution on the device"},
    {218, "CUDA_ERROR_INVALID_PTX", "a PTX JIT compilation failed"},
    {400, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {500, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {600, "CUDA_ERROR_NOT_READY", "device not ready"},
    {700, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
    {719, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure (or the launcher did not answer)"},
    {801, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported (not forwarded by libdpucuda-remote)"},
    {999, "CUDA_ERROR_UNKNOWN", "unknown error"},
};
API CUresult cuGetErrorString(CUresult e, const char **s) {
    if (!s)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < sizeof errs / sizeof errs[0]; i++)
        if (errs[i].code == e) {
            *s = errs[i].text;
            return CUDA_SUCCESS;
        }
    *s = "unrecognized error code";
    return CUDA_SUCCESS;
}
API CUresult cuGetErrorName(CUresult e, const char **s) {
    if (!s)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < sizeof errs / sizeof errs[0]; i++)
        if (errs[i].code == e) {
            *s = errs[i].name;
            return CUDA_SUCCESS;
        }
    *s = "CUDA_ERROR_UNKNOWN";
    return CUDA_SUCCESS;
}
API CUresult cuProfilerStart(void) { return CUDA_SUCCESS; }
API CUresult cuProfilerStop(void) { return CUDA_SUCCESS; }

#include "export.c.inc"
#include "names.c.inc"
#include "procs.c.inc"
