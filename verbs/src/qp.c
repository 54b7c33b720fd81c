/*
 * qp.c — completion queues, RC queue pairs, the work requests, and the
 * progress thread that drains the mailboxes.
 *
 * Sending: post_send queues the request and runs the send queue in the
 * caller's thread (the progress thread runs it too, when a request waits for
 * mailbox credit). SEND and WRITE to a region without image are mailbox slots
 * in the peer's mailbox (one STORE each); WRITE to an image is STOREs into
 * it, then a notice slot; READ is LOADs of the image; the atomics are one
 * CAS or FETCH_ADD on the image, then a notice slot.
 *
 * Receiving: the progress thread (and ibv_poll_cq, when its CQ is empty)
 * LOADs the next slot of each connected QP's mailbox; slots are taken in
 * order, a SEND only when a receive is posted (head of line, as RC's RNR).
 */
#define _GNU_SOURCE
#include "internal.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { RUN_DONE = 0, RUN_BLOCKED = 1 };

static uint64_t env_ms(const char *name, uint64_t def) {
    const char *v = getenv(name);
    if (!v || !*v) return def;
    char *end;
    unsigned long long x = strtoull(v, &end, 10);
    return *end ? def : x;
}

/* ---- completion queues ---- */

VB_API struct ibv_cq *ibv_create_cq(struct ibv_context *c, int cqe, void *cq_context, struct ibv_comp_channel *channel,
                                    int comp_vector) {
    (void)comp_vector;
    if (cqe < 1 || cqe > (1 << 16)) {
        vb_fail(EINVAL, "create_cq: %d entries (1..65536)", cqe);
        return NULL;
    }
    struct vb_cq *q = calloc(1, sizeof *q);
    if (q) q->ring = calloc((size_t)cqe, sizeof *q->ring);
    if (!q || !q->ring) {
        if (q) free(q);
        errno = ENOMEM;
        return NULL;
    }
    q->cap = (unsigned)cqe;
    pthread_mutex_init(&q->mu, NULL);
    q->cq.context = c;
    q->cq.channel = channel;
    q->cq.cq_context = cq_context;
    q->cq.cqe = cqe;
    pthread_mutex_init(&q->cq.mutex, NULL);
    pthread_cond_init(&q->cq.cond, NULL);
    struct vb_context *ctx = vb_ctx(c);
    pthread_mutex_lock(&ctx->mu);
    ctx->ncqs++;
    if (channel) channel->refcnt++;
    pthread_mutex_unlock(&ctx->mu);
    return &q->cq;
}

VB_API int ibv_destroy_cq(struct ibv_cq *cq) {
    struct vb_cq *q = (struct vb_cq *)cq;
    struct vb_context *ctx = vb_ctx(cq->context);
    pthread_mutex_lock(&ctx->mu);
    if (q->nqps > 0) {
        pthread_mutex_unlock(&ctx->mu);
        return EBUSY;
    }
    ctx->ncqs--;
    if (cq->channel) cq->channel->refcnt--;
    pthread_mutex_unlock(&ctx->mu);
    free(q->ring);
    free(q);
    return 0;
}

void vb_cq_push(struct vb_cq *q, const struct ibv_wc *wc) {
    int overflow = 0;
    pthread_mutex_lock(&q->mu);
    if (q->len == q->cap) {
        overflow = !q->overflowed;
        q->overflowed = 1;
    } else {
        q->ring[(q->head + q->len) % q->cap] = *wc;
        q->len++;
        if (q->armed && q->cq.channel) {
            q->armed = 0;
            q->events++;
            struct ibv_cq *p = &q->cq;
            ssize_t n = write(((struct vb_channel *)q->cq.channel)->wfd, &p, sizeof p);
            (void)n; /* a full pipe: the program has events enough to read */
        }
    }
    pthread_mutex_unlock(&q->mu);
    /* Wake the pollers waiting in the context (see vb_poll_cq: a waiter
     * counts itself before it looks at cq_pushes, a pusher counts the push
     * before it looks at the waiters, so one of them sees the other). */
    struct vb_context *ctx = vb_ctx(q->cq.context);
    atomic_fetch_add(&ctx->cq_pushes, 1);
    if (atomic_load(&ctx->poll_waiters) > 0) {
        pthread_mutex_lock(&ctx->poll_mu);
        pthread_cond_broadcast(&ctx->poll_cv);
        pthread_mutex_unlock(&ctx->poll_mu);
    }
    if (overflow) {
        vb_log("completion queue %p overflowed (%u entries): completions are lost", (void *)q, q->cap);
        vb_async(vb_ctx(q->cq.context), IBV_EVENT_CQ_ERR, &q->cq);
    }
}

static int cq_take(struct vb_cq *q, int n, struct ibv_wc *wc) {
    int got = 0;
    pthread_mutex_lock(&q->mu);
    while (got < n && q->len > 0) {
        wc[got++] = q->ring[q->head];
        q->head = (q->head + 1) % q->cap;
        q->len--;
    }
    pthread_mutex_unlock(&q->mu);
    return got;
}

/* How long an empty ibv_poll_cq keeps spinning (yielding the CPU each
 * time) before it waits for a completion (DPU_VERBS_SPIN_US, default 50). */
static uint64_t spin_ns = UINT64_MAX;

/* pollWait bounds one wait of an empty ibv_poll_cq: the program gets its
 * 0 back within it and polls again (or does other work). */
static const uint64_t pollWait = 200000;

int vb_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc) {
    struct vb_cq *q = (struct vb_cq *)cq;
    if (n < 0) return -1;
    struct vb_context *ctx = vb_ctx(cq->context);
    uint64_t pushes = atomic_load(&ctx->cq_pushes);
    int got = cq_take(q, n, wc);
    if (got > 0 || n == 0) {
        atomic_store(&q->empty_since, 0);
        return got;
    }
    /* Nothing yet: make a pass in the caller's thread when one is due and
     * the progress thread is not at it. */
    uint64_t now = vb_now_ns();
    if (now >= atomic_load(&ctx->next_pass_ns) && pthread_mutex_trylock(&ctx->prog_mu) == 0) {
        atomic_fetch_add(&ctx->stats.poll_passes, 1);
        vb_pass(ctx, ctx->d);
        pthread_mutex_unlock(&ctx->prog_mu);
        got = cq_take(q, n, wc);
        if (got > 0) {
            atomic_store(&q->empty_since, 0);
            return got;
        }
        now = vb_now_ns();
    }
    /* Programs poll an empty CQ in a tight loop, and the device's work runs
     * on the same CPUs (the progress thread, the node's agent, which
     * answers every fabric request): a program that spins takes the CPU
     * that would bring its completion. So an empty poll yields the CPU,
     * and once the CQ has been empty for the spin time it sleeps until a
     * completion comes to any CQ of the context (the program may be
     * waiting for another CQ than this one), the next pass is due, or
     * pollWait has passed. */
    if (spin_ns == UINT64_MAX) spin_ns = env_ms("DPU_VERBS_SPIN_US", 50) * 1000;
    uint64_t since = atomic_load(&q->empty_since);
    if (!since) atomic_store(&q->empty_since, since = now);
    if (now - since < spin_ns) {
        atomic_fetch_add(&ctx->stats.poll_yields, 1);
        sched_yield();
        return 0;
    }
    uint64_t until = now + pollWait, next = atomic_load(&ctx->next_pass_ns);
    if (next > now && next < until) until = next;
    struct timespec dl = {.tv_sec = (time_t)(until / 1000000000ull), .tv_nsec = (long)(until % 1000000000ull)};
    atomic_fetch_add(&ctx->stats.poll_waits, 1);
    pthread_mutex_lock(&ctx->poll_mu);
    atomic_fetch_add(&ctx->poll_waiters, 1);
    while (atomic_load(&ctx->cq_pushes) == pushes && pthread_cond_timedwait(&ctx->poll_cv, &ctx->poll_mu, &dl) == 0) {
    }
    atomic_fetch_sub(&ctx->poll_waiters, 1);
    pthread_mutex_unlock(&ctx->poll_mu);
    got = cq_take(q, n, wc);
    if (got > 0) atomic_store(&q->empty_since, 0);
    return got;
}

int vb_req_notify_cq(struct ibv_cq *cq, int solicited_only) {
    (void)solicited_only; /* every completion notifies: a superset of solicited-only */
    struct vb_cq *q = (struct vb_cq *)cq;
    if (!cq->channel) return EINVAL;
    pthread_mutex_lock(&q->mu);
    q->armed = 1;
    pthread_mutex_unlock(&q->mu);
    return 0;
}

/* ---- queue pairs ---- */

static void wake_progress(struct vb_context *ctx) {
    atomic_store(&ctx->next_pass_ns, 0);
    pthread_mutex_lock(&ctx->wake_mu);
    ctx->wake = 1;
    pthread_cond_signal(&ctx->wake_cv);
    pthread_mutex_unlock(&ctx->wake_mu);
}

/* The mailbox's header page is mapped on the context's event connection:
 * the node then reports every write to it, among them the doorbell its
 * peer stores after each batch of slots. */
static void unmap_header(struct vb_qp *q) {
    if (!q->hdr_lva) {
        atomic_fetch_sub(&q->ctx->polled_qps, 1);
        return;
    }
    dpu_unmap(q->ctx->de, q->mbox);
    q->hdr_lva = NULL;
}

static void map_header(struct vb_qp *q) {
    const void *lva;
    if (!q->ctx->de || dpu_map(q->ctx->de, q->mbox, PAGE, &lva) < 0) {
        if (q->ctx->de)
            vb_log("create_qp: QP %u: mapping its mailbox: %s: it is polled", q->qp.qp_num, dpu_last_error());
        atomic_fetch_add(&q->ctx->polled_qps, 1);
        return;
    }
    q->hdr_lva = lva;
}

/* bell: the higher of the peer's two doorbells in this QP's mailbox (the
 * slots' and the notices'); UINT64_MAX when the header is not mapped or
 * cannot be read (then look anyway). */
static uint64_t bell(struct vb_qp *q) {
    uint64_t v = 0, w = 0;
    if (!q->hdr_lva || dpu_read64(q->ctx->de, q->hdr_lva + MBOX_BELL, &v) < 0 ||
        dpu_read64(q->ctx->de, q->hdr_lva + MBOX_NBELL, &w) < 0)
        return UINT64_MAX;
    return v > w ? v : w;
}

VB_API struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *a) {
    struct vb_pd *p = (struct vb_pd *)pd;
    struct vb_context *ctx = p->ctx;
    if (a->qp_type != IBV_QPT_RC && a->qp_type != IBV_QPT_UC) {
        vb_fail(EOPNOTSUPP, "create_qp: only RC and UC queue pairs are supported (asked for type %d)", a->qp_type);
        return NULL;
    }
    if (a->srq) {
        vb_fail(EOPNOTSUPP, "create_qp: shared receive queues are not supported");
        return NULL;
    }
    if (!a->send_cq || !a->recv_cq || a->cap.max_send_wr > 4096 || a->cap.max_recv_wr > 4096 ||
        a->cap.max_send_sge > MAX_SGE || a->cap.max_recv_sge > MAX_SGE || a->cap.max_inline_data > MAX_INLINE) {
        vb_fail(EINVAL, "create_qp: need both CQs, at most 4096 work requests, %d SGEs and %d inline bytes", MAX_SGE,
                MAX_INLINE);
        return NULL;
    }
    struct vb_qp *q = calloc(1, sizeof *q);
    if (!q) {
        errno = ENOMEM;
        return NULL;
    }
    q->cap = a->cap;
    if (q->cap.max_send_wr == 0) q->cap.max_send_wr = 1;
    if (q->cap.max_recv_wr == 0) q->cap.max_recv_wr = 1;
    if (q->cap.max_send_sge == 0) q->cap.max_send_sge = 1;
    if (q->cap.max_recv_sge == 0) q->cap.max_recv_sge = 1;
    q->sq = calloc(q->cap.max_send_wr, sizeof *q->sq);
    q->rq = calloc(q->cap.max_recv_wr, sizeof *q->rq);
    if (!q->sq || !q->rq) {
        free(q->sq), free(q->rq), free(q);
        errno = ENOMEM;
        return NULL;
    }
    pthread_mutex_init(&q->sq_mu, NULL);
    pthread_mutex_init(&q->run_mu, NULL);
    pthread_mutex_init(&q->mu, NULL);
    pthread_mutex_init(&q->nq_mu, NULL);
    q->ctx = ctx;
    q->sq_sig_all = a->sq_sig_all;
    q->qp.context = pd->context;
    q->qp.qp_context = a->qp_context;
    q->qp.pd = pd;
    q->qp.send_cq = a->send_cq;
    q->qp.recv_cq = a->recv_cq;
    /* A UC QP is served as an RC one (nothing it sends is lost), less the
     * requests UC has not: READ and atomics. */
    q->qp.qp_type = a->qp_type;
    q->qp.state = IBV_QPS_RESET;
    pthread_mutex_init(&q->qp.mutex, NULL);
    pthread_cond_init(&q->qp.cond, NULL);
    atomic_store(&q->state, IBV_QPS_RESET);

    pthread_mutex_lock(&ctx->mu);
    uint32_t qpn = 0;
    for (uint32_t i = 1; i <= MAX_QP; i++)
        if (!ctx->qp_by_num[i]) {
            qpn = i;
            break;
        }
    if (qpn) ctx->qp_by_num[qpn] = q; /* reserved; in the list once ready */
    pthread_mutex_unlock(&ctx->mu);
    if (!qpn) {
        free(q->sq), free(q->rq), free(q);
        vb_fail(ENOMEM, "create_qp: the context has %u queue pairs already", MAX_QP);
        return NULL;
    }
    q->qp.qp_num = qpn;
    int rc = dpu_alloc_mode(ctx->d, MBOX_PAGES * PAGE, ctx->mode, &q->mbox);
    if (rc == 0) rc = vb_dir_store_qp(ctx, qpn, q->mbox, 1);
    if (rc == 0) map_header(q);
    if (rc < 0) {
        vb_fail(vb_errno(rc), "create_qp: the mailbox's fabric pages: %s", dpu_last_error());
        if (q->mbox.lo) dpu_free(ctx->d, q->mbox);
        pthread_mutex_lock(&ctx->mu);
        ctx->qp_by_num[qpn] = NULL;
        pthread_mutex_unlock(&ctx->mu);
        free(q->sq), free(q->rq), free(q);
        errno = vb_errno(rc);
        return NULL;
    }
    a->cap = q->cap;
    a->cap.max_inline_data = MAX_INLINE;
    q->cap.max_inline_data = MAX_INLINE;
    pthread_mutex_lock(&ctx->mu);
    q->next = ctx->qps;
    ctx->qps = q;
    p->nobjs++;
    ((struct vb_cq *)a->send_cq)->nqps++;
    ((struct vb_cq *)a->recv_cq)->nqps++;
    pthread_mutex_unlock(&ctx->mu);
    return &q->qp;
}

static void set_state(struct vb_qp *q, enum ibv_qp_state s) {
    atomic_store(&q->state, s);
    q->qp.state = s;
    q->attr.qp_state = s;
}

static void push_flush(struct vb_qp *q, struct ibv_cq *cq, uint64_t wr_id, enum ibv_wc_opcode op) {
    struct ibv_wc wc = {.wr_id = wr_id, .status = IBV_WC_WR_FLUSH_ERR, .opcode = op, .qp_num = q->qp.qp_num};
    vb_cq_push((struct vb_cq *)cq, &wc);
}

static enum ibv_wc_opcode wc_opcode(int wr_op) {
    switch (wr_op) {
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM: return IBV_WC_RDMA_WRITE;
    case IBV_WR_RDMA_READ: return IBV_WC_RDMA_READ;
    case IBV_WR_ATOMIC_CMP_AND_SWP: return IBV_WC_COMP_SWAP;
    case IBV_WR_ATOMIC_FETCH_AND_ADD: return IBV_WC_FETCH_ADD;
    default: return IBV_WC_SEND;
    }
}

/* flush_sq completes every queued send request with a flush error; sq_mu held. */
static void flush_sq(struct vb_qp *q) {
    while (q->sq_len > 0) {
        struct vb_swr *w = &q->sq[q->sq_head];
        push_flush(q, q->qp.send_cq, w->wr_id, wc_opcode(w->opcode));
        free(w->inl);
        w->inl = NULL;
        q->sq_head = (q->sq_head + 1) % q->cap.max_send_wr;
        q->sq_len--;
    }
}

static void flush_rq(struct vb_qp *q) {
    pthread_mutex_lock(&q->mu);
    if (q->in_recv) {
        push_flush(q, q->qp.recv_cq, q->cur.wr_id, IBV_WC_RECV);
        q->in_recv = 0;
    }
    while (q->rq_len > 0) {
        push_flush(q, q->qp.recv_cq, q->rq[q->rq_head].wr_id, IBV_WC_RECV);
        q->rq_head = (q->rq_head + 1) % q->cap.max_recv_wr;
        q->rq_len--;
    }
    pthread_mutex_unlock(&q->mu);
}

/* qp_error moves the QP to the error state and tells the peer through the
 * mailbox header; the caller flushes the queue it holds. */
static void qp_error(struct vb_qp *q, dpu_t *d, const char *why) {
    if (atomic_exchange(&q->state, IBV_QPS_ERR) == IBV_QPS_ERR) return;
    q->qp.state = IBV_QPS_ERR;
    q->attr.qp_state = IBV_QPS_ERR;
    vb_log("QP %u: %s: the queue pair is in the error state", q->qp.qp_num, why);
    dpu_store64(d, dpu_gva_add(q->mbox, 8), 1);
}

static void reset_mailbox(struct vb_qp *q, dpu_t *d) {
    uint8_t z[MBOX_NBELL + 8] = {0}; /* consumed, error, the doorbells */
    dpu_store(d, q->mbox, z, sizeof z);
    if (q->next_in > 0)
        for (uint32_t i = 0; i < MBOX_SLOTS; i++) dpu_store64(d, dpu_gva_add(q->mbox, PAGE * (1 + (uint64_t)i)), 0);
}

/* connect resolves the peer's mailbox from its GID (the directory's GVA)
 * and QP number. */
static int connect_peer(struct vb_qp *q, struct ibv_qp_attr *a) {
    struct vb_context *ctx = q->ctx;
    if (!a->ah_attr.is_global) {
        vb_fail(EINVAL, "modify_qp to RTR: the peer is named by its GID on this device; the address vector has none "
                        "(give the programs a GID index, e.g. ibv_rc_pingpong -g 0)");
        return EINVAL;
    }
    const uint8_t *g = a->ah_attr.grh.dgid.raw;
    if (g[0] != GID_TAG0 || g[1] != GID_TAG1 || g[2] != GID_TAG2 || g[3] != GID_TAG3) {
        vb_fail(EINVAL, "modify_qp to RTR: the destination GID is not a dpu verbs GID");
        return EINVAL;
    }
    uint32_t machine = (uint32_t)g[4] << 24 | (uint32_t)g[5] << 16 | (uint32_t)g[6] << 8 | g[7];
    uint64_t lo = 0;
    for (int i = 0; i < 8; i++) lo = lo << 8 | g[8 + i];
    dpu_gva_t dir = {machine, lo};
    uint32_t qpn = a->dest_qp_num;
    if (qpn < 1 || qpn > MAX_QP) {
        vb_fail(EINVAL, "modify_qp to RTR: destination QP number %#x is not one of this device's", qpn);
        return EINVAL;
    }
    uint8_t hdr[24], e[QP_ENTRY];
    int rc = dpu_load(ctx->d, dir, hdr, sizeof hdr);
    if (rc == 0) rc = dpu_load(ctx->d, dpu_gva_add(dir, DIR_HDR + (uint64_t)(qpn - 1) * QP_ENTRY), e, sizeof e);
    if (rc < 0) {
        vb_fail(vb_errno(rc), "modify_qp to RTR: reading the peer's directory: %s", dpu_last_error());
        return vb_errno(rc);
    }
    struct vb_dir_hdr h;
    if (vb_dir_hdr_get(hdr, sizeof hdr, &h) < 0) {
        vb_fail(EINVAL, "modify_qp to RTR: the destination GID names no dpu verbs directory");
        return EINVAL;
    }
    struct vb_qp_entry qe;
    rc = vb_qp_entry_get(e, sizeof e, &qe);
    if (rc < 0 || qe.qpn != qpn) {
        vb_fail(rc == -ENOENT ? ENOENT : EINVAL, "modify_qp to RTR: the peer has no QP %#x", qpn);
        return rc == -ENOENT ? ENOENT : EINVAL;
    }
    q->peer_dir = dir;
    q->peer_mbox = (dpu_gva_t){qe.mbox_hi, qe.mbox_lo};
    q->peer_qpn = qpn;
    q->produced = q->consumed_seen = 0;
    q->nq_len = 0;
    memset(q->mrcache, 0, sizeof q->mrcache);
    return 0;
}

VB_API int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask) {
    struct vb_qp *q = (struct vb_qp *)qp;
    struct vb_context *ctx = q->ctx;
    int cur = atomic_load(&q->state);
    int next = (mask & IBV_QP_STATE) ? (int)a->qp_state : cur;
    if ((mask & IBV_QP_CUR_STATE) && (int)a->cur_qp_state != cur) return EINVAL;
    int ok;
    switch (next) {
    case IBV_QPS_RESET:
    case IBV_QPS_ERR: ok = 1; break;
    case IBV_QPS_INIT: ok = cur == IBV_QPS_RESET || cur == IBV_QPS_INIT; break;
    case IBV_QPS_RTR: ok = cur == IBV_QPS_INIT || cur == IBV_QPS_RTR; break;
    case IBV_QPS_RTS: ok = cur == IBV_QPS_RTR || cur == IBV_QPS_RTS; break;
    default: ok = 0;
    }
    if (!ok) {
        vb_fail(EINVAL, "modify_qp: QP %u cannot go from state %d to %d", qp->qp_num, cur, next);
        return EINVAL;
    }
    if (next == IBV_QPS_RTR && cur == IBV_QPS_INIT) {
        if ((mask & (IBV_QP_AV | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN)) != (IBV_QP_AV | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN)) {
            vb_fail(EINVAL, "modify_qp to RTR: needs the address vector, the destination QP and the receive PSN");
            return EINVAL;
        }
        int rc = connect_peer(q, a);
        if (rc) return rc;
    }
    if (next == IBV_QPS_RTS && cur == IBV_QPS_RTR && !(mask & IBV_QP_SQ_PSN)) {
        vb_fail(EINVAL, "modify_qp to RTS: needs the send PSN");
        return EINVAL;
    }
    /* Keep what was set, for query_qp. */
    if (mask & IBV_QP_ACCESS_FLAGS) q->attr.qp_access_flags = a->qp_access_flags;
    if (mask & IBV_QP_PKEY_INDEX) q->attr.pkey_index = a->pkey_index;
    if (mask & IBV_QP_PORT) q->attr.port_num = a->port_num;
    if (mask & IBV_QP_AV) q->attr.ah_attr = a->ah_attr;
    if (mask & IBV_QP_PATH_MTU) q->attr.path_mtu = a->path_mtu;
    if (mask & IBV_QP_DEST_QPN) q->attr.dest_qp_num = a->dest_qp_num;
    if (mask & IBV_QP_RQ_PSN) q->attr.rq_psn = a->rq_psn & 0xffffff;
    if (mask & IBV_QP_SQ_PSN) q->attr.sq_psn = a->sq_psn & 0xffffff;
    if (mask & IBV_QP_MAX_DEST_RD_ATOMIC) q->attr.max_dest_rd_atomic = a->max_dest_rd_atomic;
    if (mask & IBV_QP_MAX_QP_RD_ATOMIC) q->attr.max_rd_atomic = a->max_rd_atomic;
    if (mask & IBV_QP_MIN_RNR_TIMER) q->attr.min_rnr_timer = a->min_rnr_timer;
    if (mask & IBV_QP_TIMEOUT) q->attr.timeout = a->timeout;
    if (mask & IBV_QP_RETRY_CNT) q->attr.retry_cnt = a->retry_cnt;
    if (mask & IBV_QP_RNR_RETRY) q->attr.rnr_retry = a->rnr_retry;

    if (next == IBV_QPS_ERR) {
        pthread_mutex_lock(&ctx->prog_mu);
        qp_error(q, ctx->d, "moved to the error state by the program");
        pthread_mutex_lock(&q->run_mu);
        pthread_mutex_lock(&q->sq_mu);
        flush_sq(q);
        pthread_mutex_unlock(&q->sq_mu);
        pthread_mutex_unlock(&q->run_mu);
        flush_rq(q);
        pthread_mutex_unlock(&ctx->prog_mu);
        return 0;
    }
    if (next == IBV_QPS_RESET) {
        pthread_mutex_lock(&ctx->prog_mu);
        pthread_mutex_lock(&q->run_mu);
        pthread_mutex_lock(&q->sq_mu);
        while (q->sq_len > 0) {
            free(q->sq[q->sq_head].inl);
            q->sq[q->sq_head].inl = NULL;
            q->sq_head = (q->sq_head + 1) % q->cap.max_send_wr;
            q->sq_len--;
        }
        pthread_mutex_unlock(&q->sq_mu);
        pthread_mutex_unlock(&q->run_mu);
        pthread_mutex_lock(&q->mu);
        q->rq_len = 0;
        q->in_recv = 0;
        pthread_mutex_unlock(&q->mu);
        reset_mailbox(q, ctx->d);
        q->next_in = q->consumed_told = 0;
        set_state(q, IBV_QPS_RESET);
        pthread_mutex_unlock(&ctx->prog_mu);
        return 0;
    }
    if (next == IBV_QPS_RTR && cur == IBV_QPS_INIT) {
        pthread_mutex_lock(&ctx->prog_mu);
        q->next_in = q->consumed_told = 0;
        set_state(q, IBV_QPS_RTR);
        pthread_mutex_unlock(&ctx->prog_mu);
        wake_progress(ctx);
        return 0;
    }
    set_state(q, (enum ibv_qp_state)next);
    return 0;
}

VB_API int ibv_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask, struct ibv_qp_init_attr *init) {
    (void)mask;
    struct vb_qp *q = (struct vb_qp *)qp;
    *a = q->attr;
    a->qp_state = a->cur_qp_state = (enum ibv_qp_state)atomic_load(&q->state);
    a->cap = q->cap;
    if (init) {
        memset(init, 0, sizeof *init);
        init->qp_context = qp->qp_context;
        init->send_cq = qp->send_cq;
        init->recv_cq = qp->recv_cq;
        init->cap = q->cap;
        init->qp_type = qp->qp_type;
        init->sq_sig_all = q->sq_sig_all;
    }
    return 0;
}

VB_API int ibv_destroy_qp(struct ibv_qp *qp) {
    struct vb_qp *q = (struct vb_qp *)qp;
    struct vb_context *ctx = q->ctx;
    pthread_mutex_lock(&ctx->prog_mu);
    pthread_mutex_lock(&q->run_mu); /* no request is running on it */
    pthread_mutex_lock(&q->sq_mu);
    pthread_mutex_lock(&ctx->mu);
    struct vb_qp **pp = &ctx->qps;
    while (*pp && *pp != q) pp = &(*pp)->next;
    if (*pp) *pp = q->next;
    ctx->qp_by_num[qp->qp_num] = NULL;
    ((struct vb_pd *)qp->pd)->nobjs--;
    ((struct vb_cq *)qp->send_cq)->nqps--;
    ((struct vb_cq *)qp->recv_cq)->nqps--;
    pthread_mutex_unlock(&ctx->mu);
    pthread_mutex_unlock(&q->sq_mu);
    pthread_mutex_unlock(&q->run_mu);
    pthread_mutex_unlock(&ctx->prog_mu);
    /* the peer learns from the mailbox header that nothing will be taken */
    dpu_store64(ctx->d, dpu_gva_add(q->mbox, 8), 1);
    vb_dir_store_qp(ctx, qp->qp_num, q->mbox, 0);
    unmap_header(q);
    int rc = dpu_free(ctx->d, q->mbox);
    for (unsigned i = 0; i < q->cap.max_send_wr; i++) free(q->sq[i].inl);
    free(q->tx);
    free(q->rx);
    free(q->sq);
    free(q->rq);
    free(q);
    return rc < 0 ? vb_errno(rc) : 0;
}

/* ---- posting ---- */

static int known_unsupported(int op) {
    switch (op) {
    case IBV_WR_SEND_WITH_INV:
    case IBV_WR_LOCAL_INV:
    case IBV_WR_BIND_MW:
    case IBV_WR_TSO:
    case IBV_WR_DRIVER1:
    case IBV_WR_ATOMIC_WRITE: return 1;
    default: return 0;
    }
}

static int run_sq(struct vb_qp *q, dpu_t *d, int max_batches);

int vb_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad) {
    struct vb_qp *q = (struct vb_qp *)qp;
    int rc = 0;
    pthread_mutex_lock(&q->sq_mu);
    int st = atomic_load(&q->state);
    unsigned before = q->sq_len;
    for (; wr; wr = wr->next) {
        int op = wr->opcode;
        if (known_unsupported(op)) {
            rc = EOPNOTSUPP;
            break;
        }
        if (op != IBV_WR_SEND && op != IBV_WR_SEND_WITH_IMM && op != IBV_WR_RDMA_WRITE &&
            op != IBV_WR_RDMA_WRITE_WITH_IMM && op != IBV_WR_RDMA_READ && op != IBV_WR_ATOMIC_CMP_AND_SWP &&
            op != IBV_WR_ATOMIC_FETCH_AND_ADD) {
            rc = EINVAL;
            break;
        }
        if (qp->qp_type == IBV_QPT_UC &&
            (op == IBV_WR_RDMA_READ || op == IBV_WR_ATOMIC_CMP_AND_SWP || op == IBV_WR_ATOMIC_FETCH_AND_ADD)) {
            rc = EINVAL; /* UC has no READ or atomics */
            break;
        }
        if (st != IBV_QPS_RTS && st != IBV_QPS_ERR) {
            rc = EINVAL;
            break;
        }
        if (wr->num_sge < 0 || wr->num_sge > (int)q->cap.max_send_sge || (wr->num_sge > 0 && !wr->sg_list)) {
            rc = EINVAL;
            break;
        }
        if (q->sq_len == q->cap.max_send_wr) {
            rc = ENOMEM;
            break;
        }
        uint64_t len = 0;
        for (int i = 0; i < wr->num_sge; i++) len += wr->sg_list[i].length;
        if (len > MAX_MSG) {
            rc = EINVAL;
            break;
        }
        int atomic = op == IBV_WR_ATOMIC_CMP_AND_SWP || op == IBV_WR_ATOMIC_FETCH_AND_ADD;
        int inl = (wr->send_flags & IBV_SEND_INLINE) && !atomic && op != IBV_WR_RDMA_READ;
        if (inl && len > MAX_INLINE) {
            rc = EINVAL;
            break;
        }
        struct vb_swr *w = &q->sq[(q->sq_head + q->sq_len) % q->cap.max_send_wr];
        free(w->inl);
        memset(w, 0, sizeof *w);
        w->wr_id = wr->wr_id;
        w->opcode = op;
        w->flags = wr->send_flags;
        if (q->sq_sig_all) w->flags |= IBV_SEND_SIGNALED;
        w->imm = wr->imm_data;
        w->len = (uint32_t)len;
        if (atomic) {
            w->raddr = wr->wr.atomic.remote_addr;
            w->rkey = wr->wr.atomic.rkey;
            w->compare_add = wr->wr.atomic.compare_add;
            w->swap = wr->wr.atomic.swap;
        } else {
            w->raddr = wr->wr.rdma.remote_addr;
            w->rkey = wr->wr.rdma.rkey;
        }
        if (inl) {
            /* The program may reuse inline bytes at once: copy them now. */
            w->inl = malloc(len ? len : 1);
            if (!w->inl) {
                rc = ENOMEM;
                break;
            }
            uint64_t off = 0;
            for (int i = 0; i < wr->num_sge; i++) {
                memcpy(w->inl + off, (const void *)(uintptr_t)wr->sg_list[i].addr, wr->sg_list[i].length);
                off += wr->sg_list[i].length;
            }
        } else {
            w->nsge = wr->num_sge;
            memcpy(w->sge, wr->sg_list, sizeof(struct ibv_sge) * (size_t)wr->num_sge);
        }
        q->sq_len++;
    }
    if (rc && bad) *bad = wr;
    /* One request on an idle queue runs here (the latency path: no
     * hand-over to another thread), unless it is a SEND or WRITE of more
     * than a slot: those, and requests behind others, go to the progress
     * thread, which stores the slots of many requests in one windowed
     * transfer while the program goes on posting. (A READ or an atomic is
     * one windowed transfer of its own wherever it runs.) */
    const struct vb_swr *h = &q->sq[q->sq_head];
    int slots = h->opcode == IBV_WR_SEND || h->opcode == IBV_WR_SEND_WITH_IMM || h->opcode == IBV_WR_RDMA_WRITE ||
                h->opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
    int now = (before == 0 && q->sq_len == 1 && (!slots || h->len <= SLOT_DATA)) || (q->sq_len > 0 && st == IBV_QPS_ERR);
    pthread_mutex_unlock(&q->sq_mu);
    if (now && pthread_mutex_trylock(&q->run_mu) == 0) {
        run_sq(q, q->ctx->d, 1);
        pthread_mutex_unlock(&q->run_mu);
    }
    pthread_mutex_lock(&q->sq_mu);
    int waiting = q->sq_len > 0;
    pthread_mutex_unlock(&q->sq_mu);
    if (waiting) wake_progress(q->ctx);
    return rc;
}

int vb_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad) {
    struct vb_qp *q = (struct vb_qp *)qp;
    int rc = 0;
    int st = atomic_load(&q->state);
    pthread_mutex_lock(&q->mu);
    for (; wr; wr = wr->next) {
        if (st == IBV_QPS_RESET) {
            rc = EINVAL;
            break;
        }
        if (wr->num_sge < 0 || wr->num_sge > (int)q->cap.max_recv_sge || (wr->num_sge > 0 && !wr->sg_list)) {
            rc = EINVAL;
            break;
        }
        if (q->rq_len == q->cap.max_recv_wr) {
            rc = ENOMEM;
            break;
        }
        struct vb_rwr *r = &q->rq[(q->rq_head + q->rq_len) % q->cap.max_recv_wr];
        r->wr_id = wr->wr_id;
        r->nsge = wr->num_sge;
        memcpy(r->sge, wr->sg_list, sizeof(struct ibv_sge) * (size_t)wr->num_sge);
        q->rq_len++;
    }
    pthread_mutex_unlock(&q->mu);
    if (rc && bad) *bad = wr;
    if (st == IBV_QPS_ERR) flush_rq(q);
    else wake_progress(q->ctx);
    return rc;
}

/* ---- running send work requests (sq_mu held) ---- */

static enum ibv_wc_status status_of(int rc) {
    switch (-rc) {
    case EACCES:
    case EPERM:
    case ENOENT:
    case EFAULT: return IBV_WC_REM_ACCESS_ERR;
    case EINVAL: return IBV_WC_REM_INV_REQ_ERR;
    case ETIMEDOUT:
    case EHOSTDOWN:
    case EHOSTUNREACH:
    case ECONNRESET:
    case EPIPE:
    case ECANCELED: return IBV_WC_RETRY_EXC_ERR;
    default: return IBV_WC_GENERAL_ERR;
    }
}

/* gather copies len bytes of the request's data from byte off. */
static int gather(struct vb_context *ctx, const struct vb_swr *w, uint32_t off, uint8_t *out, uint32_t len) {
    if (w->inl) {
        memcpy(out, w->inl + off, len);
        return 0;
    }
    for (int i = 0; i < w->nsge && len > 0; i++) {
        const struct ibv_sge *s = &w->sge[i];
        if (off >= s->length) {
            off -= s->length;
            continue;
        }
        int st = vb_sge_ok(ctx, s, 0);
        if (st) return st;
        uint32_t n = s->length - off < len ? s->length - off : len;
        memcpy(out, (const uint8_t *)(uintptr_t)s->addr + off, n);
        out += n, len -= n, off = 0;
    }
    return 0;
}

/* peer_mr finds what the peer's directory says of rkey (cached). */
static int peer_mr(struct vb_qp *q, dpu_t *d, uint32_t rkey, struct peer_mr *out) {
    for (unsigned i = 0; i < PEER_MR_CACHE; i++)
        if (q->mrcache[i].rkey == rkey && rkey != 0) {
            *out = q->mrcache[i];
            return 0;
        }
    int idx = (int)(rkey & 0x3ff) - 1;
    if (idx < 0 || idx >= (int)MAX_MR) return IBV_WC_REM_ACCESS_ERR;
    uint8_t e[MR_ENTRY];
    int rc = dpu_load(d, dpu_gva_add(q->peer_dir, PAGE + (uint64_t)idx * MR_ENTRY), e, sizeof e);
    if (rc < 0) return status_of(rc);
    struct vb_mr_entry me;
    if (vb_mr_entry_get(e, sizeof e, &me) < 0 || me.rkey != rkey) return IBV_WC_REM_ACCESS_ERR;
    struct peer_mr m = {.rkey = rkey, .access = (int)me.access, .vaddr = me.vaddr, .length = me.length,
                        .gva_lo = me.gva_lo};
    q->mrcache[q->mrcache_next++ % PEER_MR_CACHE] = m;
    *out = m;
    return 0;
}

static int in_range(const struct peer_mr *m, uint64_t addr, uint64_t len) {
    return addr >= m->vaddr && addr - m->vaddr <= m->length && m->length - (addr - m->vaddr) >= len;
}

/* credit: how many slots of the peer's mailbox are free (refreshed from
 * its header when fewer than half are), or a negative completion status. */
static int credit(struct vb_qp *q, dpu_t *d) {
    uint64_t used = q->produced - q->consumed_seen;
    if (used < MBOX_SLOTS / 2) return (int)(MBOX_SLOTS - used);
    uint8_t h[16];
    int rc = dpu_load(d, q->peer_mbox, h, sizeof h);
    if (rc < 0) return -(int)status_of(rc);
    if (get64le(h + 8)) return -(int)IBV_WC_REM_OP_ERR;
    uint64_t c = get64le(h);
    if (c > q->consumed_seen && c <= q->produced) q->consumed_seen = c;
    return (int)(MBOX_SLOTS - (q->produced - q->consumed_seen));
}

static uint64_t slot_seq(uint32_t psn, uint64_t n) { return (uint64_t)(psn & 0xffffff) << 40 | (n + 1); }

/* put_slot stores slot n (reserved) of the peer's mailbox. */
static int put_slot(struct vb_qp *q, dpu_t *d, uint64_t n, uint8_t *slot, int op, int flags, uint32_t len,
                    uint32_t total, uint64_t addr, uint32_t imm, uint32_t rkey) {
    vb_slot_put(slot, &(struct vb_slot){.seq = slot_seq(q->attr.sq_psn, n), .op = (uint16_t)op,
                                        .flags = (uint16_t)flags, .len = len, .imm = imm, .rkey = rkey, .addr = addr,
                                        .total = total, .src_qpn = q->qp.qp_num});
    dpu_gva_t at = dpu_gva_add(q->peer_mbox, PAGE * (1 + n % MBOX_SLOTS));
    uint64_t t0 = vb_now_ns();
    int rc = dpu_store(d, at, slot, SLOT_HDR + len);
    atomic_fetch_add(&q->ctx->stats.slot_stores, 1);
    atomic_fetch_add(&q->ctx->stats.slot_store_ns, vb_now_ns() - t0);
    return rc < 0 ? status_of(rc) : 0;
}

/* slot_op: the mailbox op of a request that goes as slots carrying its
 * bytes (a SEND, or a WRITE to a region without image; checked here, a
 * completion status in *st when the WRITE may not be done), else 0. */
static int slot_op(struct vb_qp *q, dpu_t *d, struct vb_swr *w, int *st) {
    struct peer_mr m;
    *st = 0;
    switch (w->opcode) {
    case IBV_WR_SEND: return SLOT_SEND;
    case IBV_WR_SEND_WITH_IMM: return SLOT_SEND_IMM;
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
        if ((*st = peer_mr(q, d, w->rkey, &m))) return 0;
        if (!(m.access & IBV_ACCESS_REMOTE_WRITE) || !in_range(&m, w->raddr, w->len)) {
            *st = IBV_WC_REM_ACCESS_ERR;
            return 0;
        }
        if (m.gva_lo && w->len > 0) return 0;
        return w->opcode == IBV_WR_RDMA_WRITE ? SLOT_WRITE : SLOT_WRITE_IMM;
    default: return 0;
    }
}

/* A batch of staged slots: slot i belongs to the request `wr[i]` queue
 * places after the head, and carries its bytes up to `end[i]`. */
struct batch {
    unsigned n;
    dpu_iov_t iov[TX_BATCH + 1]; /* and the doorbell */
    unsigned wr[TX_BATCH];
    uint32_t end[TX_BATCH];
};

/* stage fills b with the slots of the slot requests at the head of the
 * queue (nq of them queued), from the head's done bytes on, as many as room
 * and the batch allow; a request that is not one ends it. *st: the head's
 * failure found while checking it (nothing staged then). */
static int stage(struct vb_qp *q, dpu_t *d, struct batch *b, unsigned nq, unsigned room, int *st) {
    int first = 0;
    b->n = 0;
    for (unsigned i = 0; i < nq && b->n < room; i++) {
        struct vb_swr *w = &q->sq[(q->sq_head + i) % q->cap.max_send_wr];
        int wst, op = slot_op(q, d, w, &wst);
        if (!op) {
            if (i == 0) *st = wst;
            break;
        }
        uint32_t off = w->done;
        if (off == 0) first = 1;
        do {
            uint8_t *slot = q->tx + (size_t)b->n * PAGE;
            uint32_t n = w->len - off < SLOT_DATA ? w->len - off : SLOT_DATA;
            int gst = gather(q->ctx, w, off, slot + SLOT_HDR, n);
            if (gst) {
                if (i == 0 && b->n == 0) *st = gst;
                return first; /* the request fails once the slots before it are stored */
            }
            uint64_t seqn = q->produced + b->n;
            int flags = (off == 0 ? SF_FIRST : 0) | (off + n == w->len ? SF_LAST : 0);
            vb_slot_put(slot, &(struct vb_slot){.seq = slot_seq(q->attr.sq_psn, seqn), .op = (uint16_t)op,
                                                .flags = (uint16_t)flags, .len = n, .imm = w->imm, .rkey = w->rkey,
                                                .addr = w->raddr + off, .total = w->len, .src_qpn = q->qp.qp_num});
            b->iov[b->n] = (dpu_iov_t){dpu_gva_add(q->peer_mbox, PAGE * (1 + seqn % MBOX_SLOTS)), slot, SLOT_HDR + n};
            b->wr[b->n] = i;
            off += n;
            b->end[b->n] = off;
            b->n++;
        } while (off < w->len && b->n < room);
        if (off < w->len) break;
    }
    return first;
}

/* complete pops the head request with status st (its completion when
 * signaled or failed); run_mu held. */
static void complete_head(struct vb_qp *q, int st) {
    struct vb_swr *w = &q->sq[q->sq_head];
    int signal = st != 0 || (w->flags & IBV_SEND_SIGNALED);
    struct ibv_wc wc = {.wr_id = w->wr_id, .status = (enum ibv_wc_status)st, .opcode = wc_opcode(w->opcode),
                        .qp_num = q->qp.qp_num};
    if (st == 0)
        wc.byte_len = w->opcode == IBV_WR_ATOMIC_CMP_AND_SWP || w->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD ? 8 : w->len;
    free(w->inl);
    w->inl = NULL;
    /* The entry is free before the program can see the completion: it may
     * post again at once into a queue it filled. */
    pthread_mutex_lock(&q->sq_mu);
    q->sq_head = (q->sq_head + 1) % q->cap.max_send_wr;
    q->sq_len--;
    pthread_mutex_unlock(&q->sq_mu);
    if (signal) vb_cq_push((struct vb_cq *)q->qp.send_cq, &wc);
}

/* stream stores a batch of the head requests' slots in one windowed
 * transfer and completes each request whose every slot the peer's node
 * acknowledged, in queue order. The head's failure status, or 0 (*blocked
 * when the peer's mailbox has no room). */
static int stream(struct vb_qp *q, dpu_t *d, unsigned nq, int *blocked) {
    int room = credit(q, d);
    if (room < 0) return -room;
    if (room == 0) {
        *blocked = 1;
        return 0;
    }
    if (!q->tx && !(q->tx = malloc((size_t)TX_BATCH * PAGE))) return IBV_WC_GENERAL_ERR;
    struct batch *b = malloc(sizeof *b);
    if (!b) return IBV_WC_GENERAL_ERR;
    int st = 0;
    int first = stage(q, d, b, nq, (unsigned)room < TX_BATCH ? (unsigned)room : TX_BATCH, &st);
    if (b->n == 0) {
        free(b);
        return st ? st : IBV_WC_GENERAL_ERR;
    }
    /* The peer may look at this context's images once it has a message:
     * local stores reach them first. */
    if (first && vb_publish_all(q->ctx, d) < 0) {
        free(b);
        return IBV_WC_GENERAL_ERR;
    }
    /* The doorbell after the slots (the peer's node reports its write to
     * the peer's event connection). */
    uint8_t rung[8 + SLOT_HDR + MBOX_COPY_DATA];
    uint64_t ring_at = q->produced + b->n;
    put64le(rung, ring_at);
    size_t rlen = 8;
    if (b->n == 1 && b->iov[0].len <= SLOT_HDR + MBOX_COPY_DATA) {
        memcpy(rung + 8, b->iov[0].buf, b->iov[0].len);
        rlen += b->iov[0].len;
    }
    b->iov[b->n] = (dpu_iov_t){dpu_gva_add(q->peer_mbox, MBOX_BELL), rung, rlen};
    size_t done = 0;
    uint64_t t0 = vb_now_ns();
    int rc = dpu_storev(d, b->iov, b->n + 1, &done);
    if (done > b->n) done = b->n;
    atomic_fetch_add(&q->ctx->stats.slot_stores, b->n);
    atomic_fetch_add(&q->ctx->stats.slot_store_ns, vb_now_ns() - t0);
    q->produced += done;
    /* Requests whose slots are all stored complete; the one that holds the
     * first slot not stored gets the failure. */
    unsigned popped = 0;
    for (size_t i = 0; i < done; i++) {
        struct vb_swr *w = &q->sq[(q->sq_head + b->wr[i] - popped) % q->cap.max_send_wr];
        w->done = b->end[i];
        if (w->done == w->len) {
            complete_head(q, 0);
            popped++;
        }
    }
    st = rc < 0 ? (int)status_of(rc) : 0;
    if (!st && done < b->n) st = IBV_WC_GENERAL_ERR;
    free(b);
    return st;
}

/* notice reserves a slot for the notice of a request whose bytes are in
 * the peer's image and queues it for the progress thread. */
static int notice(struct vb_qp *q, dpu_t *d, struct vb_swr *w, int op, uint32_t total, int *blocked) {
    int c = credit(q, d);
    if (c < 0) return -c;
    if (c == 0) {
        *blocked = 1;
        return 0;
    }
    pthread_mutex_lock(&q->nq_mu);
    q->nq[(q->nq_head + q->nq_len) % MBOX_SLOTS] =
        (struct vb_notice){.n = q->produced, .op = op, .imm = w->imm, .rkey = w->rkey, .total = total, .addr = w->raddr};
    q->nq_len++;
    pthread_mutex_unlock(&q->nq_mu);
    q->produced++;
    wake_progress(q->ctx);
    return 0;
}

/* store_notices stores the queued notices (progress lock held). */
static int store_notices(struct vb_qp *q, dpu_t *d) {
    struct vb_notice batch[MBOX_SLOTS];
    unsigned n = 0;
    pthread_mutex_lock(&q->nq_mu);
    while (q->nq_len > 0) {
        batch[n++] = q->nq[q->nq_head];
        q->nq_head = (q->nq_head + 1) % MBOX_SLOTS;
        q->nq_len--;
    }
    pthread_mutex_unlock(&q->nq_mu);
    if (n == 0) return 0;
    uint8_t slot[SLOT_HDR];
    int st = vb_publish_all(q->ctx, d) < 0 ? IBV_WC_GENERAL_ERR : 0;
    for (unsigned i = 0; i < n && st == 0; i++)
        st = put_slot(q, d, batch[i].n, slot, batch[i].op, SF_FIRST | SF_LAST | SF_GVA_DATA, 0, batch[i].total,
                      batch[i].addr, batch[i].imm, batch[i].rkey);
    if (st == 0) {
        /* the notices' doorbell (notices are reserved and stored in slot
         * order, one pass at a time: it only rises) */
        int rc = dpu_store64(d, dpu_gva_add(q->peer_mbox, MBOX_NBELL), batch[n - 1].n + 1);
        if (rc < 0) st = status_of(rc);
    }
    if (st) {
        qp_error(q, d, "storing a notice in the peer's mailbox failed");
        vb_async(q->ctx, IBV_EVENT_QP_FATAL, &q->qp);
    }
    return 1;
}

/* exec runs one request as far as it can: a completion status, with
 * *blocked set when it waits for mailbox credit. */
static int exec(struct vb_qp *q, dpu_t *d, struct vb_swr *w, int *blocked) {
    struct vb_context *ctx = q->ctx;
    struct peer_mr m;
    int st;
    /* A READ or an atomic on this context's own regions must see the
     * program's stores before it: publish them. (A peer learns of this
     * context's stores only from a message it sends, and those publish
     * first.) */
    if ((w->opcode == IBV_WR_RDMA_READ || w->opcode == IBV_WR_ATOMIC_CMP_AND_SWP ||
         w->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) && !w->started &&
        q->peer_dir.hi == ctx->dir.hi && q->peer_dir.lo == ctx->dir.lo && vb_publish_all(ctx, d) < 0)
        return IBV_WC_GENERAL_ERR;
    switch (w->opcode) {
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM: {
        /* to a region with an image (the others go as slots: stream) */
        int op = w->opcode == IBV_WR_RDMA_WRITE ? SLOT_WRITE : SLOT_WRITE_IMM;
        if ((st = peer_mr(q, d, w->rkey, &m))) return st;
        if (!m.gva_lo) return IBV_WC_LOC_QP_OP_ERR;
        if (!w->started) {
            dpu_gva_t at = {q->peer_dir.hi, m.gva_lo + (w->raddr - m.vaddr)};
            const uint32_t chunk = 64 * 1024;
            uint8_t *buf = malloc(w->len < chunk ? w->len : chunk);
            if (!buf) return IBV_WC_GENERAL_ERR;
            for (uint32_t off = 0; off < w->len && st == 0;) {
                uint32_t n = w->len - off < chunk ? w->len - off : chunk;
                if ((st = gather(ctx, w, off, buf, n))) break;
                int rc = dpu_store(d, dpu_gva_add(at, off), buf, n);
                if (rc < 0) st = status_of(rc);
                off += n;
            }
            free(buf);
            if (st) return st;
            w->started = 1;
        }
        return notice(q, d, w, op, w->len, blocked);
    }
    case IBV_WR_RDMA_READ: {
        if ((st = peer_mr(q, d, w->rkey, &m))) return st;
        if (!(m.access & IBV_ACCESS_REMOTE_READ) || !m.gva_lo || !in_range(&m, w->raddr, w->len))
            return IBV_WC_REM_ACCESS_ERR;
        dpu_gva_t at = {q->peer_dir.hi, m.gva_lo + (w->raddr - m.vaddr)};
        uint32_t off = 0;
        for (int i = 0; i < w->nsge; i++) {
            const struct ibv_sge *s = &w->sge[i];
            if ((st = vb_sge_ok(ctx, s, 1))) return st;
            if (s->length == 0) continue;
            int rc = dpu_load(d, dpu_gva_add(at, off), (void *)(uintptr_t)s->addr, s->length);
            if (rc < 0) return status_of(rc);
            off += s->length;
        }
        return 0;
    }
    case IBV_WR_ATOMIC_CMP_AND_SWP:
    case IBV_WR_ATOMIC_FETCH_AND_ADD: {
        if (!w->started) {
            if (w->nsge != 1 || w->sge[0].length != 8) return IBV_WC_LOC_LEN_ERR;
            if ((st = vb_sge_ok(ctx, &w->sge[0], 1))) return st;
            if ((st = peer_mr(q, d, w->rkey, &m))) return st;
            if (!(m.access & IBV_ACCESS_REMOTE_ATOMIC) || !m.gva_lo || (w->raddr & 7) || !in_range(&m, w->raddr, 8))
                return IBV_WC_REM_ACCESS_ERR;
            dpu_gva_t at = {q->peer_dir.hi, m.gva_lo + (w->raddr - m.vaddr)};
            uint64_t old;
            int rc = w->opcode == IBV_WR_ATOMIC_CMP_AND_SWP ? dpu_cas64(d, at, w->compare_add, w->swap, &old)
                                                             : dpu_fetch_add64(d, at, w->compare_add, &old);
            if (rc < 0) return status_of(rc);
            memcpy((void *)(uintptr_t)w->sge[0].addr, &old, 8);
            w->started = 1;
        }
        return notice(q, d, w, SLOT_ATOMIC, 8, blocked);
    }
    }
    return IBV_WC_LOC_QP_OP_ERR;
}

/* run_sq runs the queued send requests in order until the queue is empty,
 * the head waits for mailbox credit, or max_batches transfers were made;
 * run_mu held. 1 when it did something. */
static int run_sq(struct vb_qp *q, dpu_t *d, int max_batches) {
    int did = 0;
    static uint64_t rnr_ms;
    if (!rnr_ms) rnr_ms = env_ms("DPU_VERBS_RNR_MS", 10000);
    q->blocked = 0;
    for (int batches = 0; batches < max_batches;) {
        pthread_mutex_lock(&q->sq_mu);
        unsigned nq = q->sq_len;
        if (nq > 0 && atomic_load(&q->state) == IBV_QPS_ERR) {
            flush_sq(q);
            nq = 0;
            did = 1;
        }
        pthread_mutex_unlock(&q->sq_mu);
        if (nq == 0) return did;
        struct vb_swr *w = &q->sq[q->sq_head];
        int blocked = 0, st;
        int op = slot_op(q, d, w, &st);
        if (!st && op) {
            /* completes the requests it stores whole */
            batches++;
            st = stream(q, d, nq, &blocked);
            if (!st && !blocked) {
                w->blocked_since = 0;
                did = 1;
                continue;
            }
        } else if (!st) {
            st = exec(q, d, w, &blocked);
        }
        if (st == 0 && blocked) {
            uint64_t now = vb_now_ns();
            if (!w->blocked_since) w->blocked_since = now;
            if (now - w->blocked_since < rnr_ms * 1000000ull) {
                q->blocked = 1;
                return did;
            }
            st = IBV_WC_RNR_RETRY_EXC_ERR;
        }
        did = 1;
        complete_head(q, st);
        if (st != 0) {
            qp_error(q, d, ibv_wc_status_str((enum ibv_wc_status)st));
            pthread_mutex_lock(&q->sq_mu);
            flush_sq(q);
            pthread_mutex_unlock(&q->sq_mu);
        }
    }
    return did;
}

/* ---- receiving (progress lock held) ---- */

static void recv_done(struct vb_qp *q, enum ibv_wc_status st, enum ibv_wc_opcode op, uint32_t len, int imm,
                      uint32_t imm_data, uint64_t wr_id) {
    struct ibv_wc wc = {.wr_id = wr_id, .status = st, .opcode = op, .byte_len = len, .qp_num = q->qp.qp_num,
                        .src_qp = q->peer_qpn};
    if (imm) {
        wc.wc_flags = IBV_WC_WITH_IMM;
        wc.imm_data = imm_data;
    }
    vb_cq_push((struct vb_cq *)q->qp.recv_cq, &wc);
}

static int take_recv(struct vb_qp *q, struct vb_rwr *out) {
    pthread_mutex_lock(&q->mu);
    int ok = q->rq_len > 0;
    if (ok) {
        *out = q->rq[q->rq_head];
        q->rq_head = (q->rq_head + 1) % q->cap.max_recv_wr;
        q->rq_len--;
    }
    pthread_mutex_unlock(&q->mu);
    return ok;
}

/* scatter copies a SEND's bytes into the receive at byte off; 0 when they
 * do not fit. */
static int scatter(struct vb_context *ctx, struct vb_rwr *r, uint32_t off, const uint8_t *p, uint32_t n) {
    for (int i = 0; i < r->nsge && n > 0; i++) {
        struct ibv_sge *s = &r->sge[i];
        if (off >= s->length) {
            off -= s->length;
            continue;
        }
        if (vb_sge_ok(ctx, s, 1)) return 0;
        uint32_t k = s->length - off < n ? s->length - off : n;
        memcpy((uint8_t *)(uintptr_t)s->addr + off, p, k);
        p += k, n -= k, off = 0;
    }
    return n == 0;
}

static void responder_error(struct vb_qp *q, dpu_t *d, const char *why, enum ibv_event_type ev) {
    qp_error(q, d, why);
    vb_async(q->ctx, ev, &q->qp);
    flush_rq(q);
    pthread_mutex_lock(&q->run_mu);
    pthread_mutex_lock(&q->sq_mu);
    flush_sq(q);
    pthread_mutex_unlock(&q->sq_mu);
    pthread_mutex_unlock(&q->run_mu);
}

/* tell_consumed stores how far the receiver got into its mailbox header
 * (the peer's credit), every quarter of the mailbox. */
static void tell_consumed(struct vb_qp *q, dpu_t *d) {
    if (q->next_in - q->consumed_told >= MBOX_SLOTS / 4) {
        if (dpu_store64(d, q->mbox, q->next_in) == 0) q->consumed_told = q->next_in;
    }
}

static int drain(struct vb_qp *q, dpu_t *d) {
    struct vb_context *ctx = q->ctx;
    int did = 0, missing = 0;
    if (!q->rx && !(q->rx = malloc((size_t)RX_BATCH * PAGE))) return 0;
    /* The peer rings after every transfer into the mailbox, each doorbell
     * by one thread, each ring issued once the one before it is done, so
     * doorbells no higher than the slots taken say nothing new landed: no
     * LOAD. */
    if (bell(q) <= q->next_in) return 0;
    /* The next slot alone is loaded first (an idle QP costs one page); once
     * one is found, those after it come RX_BATCH at a time (one windowed
     * LOAD), up to the end of the ring. */
    unsigned loaded = 0, at = 0;
    for (int k = 0; k < 4 * (int)MBOX_SLOTS; k++) {
        int st = atomic_load(&q->state);
        if (st != IBV_QPS_RTR && st != IBV_QPS_RTS) break;
        if (at == loaded) {
            if (did && bell(q) <= q->next_in) break; /* every slot the doorbell names is taken */
            uint32_t idx = (uint32_t)(q->next_in % MBOX_SLOTS);
            unsigned want = did ? (MBOX_SLOTS - idx < RX_BATCH ? MBOX_SLOTS - idx : RX_BATCH) : 1;
            uint64_t t0 = vb_now_ns();
            int rc = 1;
            if (want == 1 && q->hdr_lva) {
                /* the copy of a small slot the doorbell brought, when it is
                 * the one awaited (read in the mapping: no request) */
                uint8_t *c = q->rx;
                if (dpu_read(ctx->de, q->hdr_lva + MBOX_COPY, c, SLOT_HDR) == 0 &&
                    get64le(c) == slot_seq(q->attr.rq_psn, q->next_in) && get32le(c + 12) <= MBOX_COPY_DATA &&
                    dpu_read(ctx->de, q->hdr_lva + MBOX_COPY, c, SLOT_HDR + get32le(c + 12)) == 0 &&
                    get64le(c) == slot_seq(q->attr.rq_psn, q->next_in)) {
                    atomic_fetch_add(&ctx->stats.copies, 1);
                    rc = 0;
                }
            }
            if (rc) rc = dpu_load(d, dpu_gva_add(q->mbox, PAGE * (1 + (uint64_t)idx)), q->rx, (size_t)want * PAGE);
            atomic_fetch_add(&ctx->stats.slot_loads, 1);
            atomic_fetch_add(&ctx->stats.slot_load_ns, vb_now_ns() - t0);
            if (rc < 0) {
                responder_error(q, d, "reading the mailbox failed", IBV_EVENT_QP_FATAL);
                return 1;
            }
            loaded = want, at = 0;
            tell_consumed(q, d);
        }
        const uint8_t *slot = q->rx + (size_t)at++ * PAGE;
        if (get64le(slot) != slot_seq(q->attr.rq_psn, q->next_in)) {
            atomic_fetch_add(&ctx->stats.slot_empty, 1);
            missing = 1;
            break;
        }
        struct vb_slot sl;
        if (vb_slot_get(slot, SLOT_HDR, &sl) < 0) {
            responder_error(q, d, "the peer wrote a malformed mailbox slot", IBV_EVENT_QP_FATAL);
            return 1;
        }
        int op = sl.op, flags = sl.flags;
        uint32_t len = sl.len, imm = sl.imm, rkey = sl.rkey, total = sl.total;
        uint64_t addr = sl.addr;
        const uint8_t *data = slot + SLOT_HDR;
        int last = flags & SF_LAST;
        if (op == SLOT_SEND || op == SLOT_SEND_IMM) {
            if (flags & SF_FIRST) {
                if (q->in_recv || !take_recv(q, &q->cur)) {
                    if (q->in_recv) {
                        responder_error(q, d, "the peer started a message inside another", IBV_EVENT_QP_FATAL);
                        return 1;
                    }
                    break; /* no receive posted: the message waits (RNR) */
                }
                q->in_recv = 1;
                q->cur_off = 0;
                q->cur_trunc = 0;
            } else if (!q->in_recv) {
                responder_error(q, d, "the peer continued a message it did not start", IBV_EVENT_QP_FATAL);
                return 1;
            }
            if (!q->cur_trunc && !scatter(ctx, &q->cur, q->cur_off, data, len)) q->cur_trunc = 1;
            q->cur_off += len;
            if (last) {
                q->in_recv = 0;
                recv_done(q, q->cur_trunc ? IBV_WC_LOC_LEN_ERR : IBV_WC_SUCCESS, IBV_WC_RECV, q->cur_off,
                          op == SLOT_SEND_IMM, imm, q->cur.wr_id);
                if (q->cur_trunc) {
                    q->next_in++;
                    responder_error(q, d, "a message larger than its receive buffers", IBV_EVENT_QP_REQ_ERR);
                    return 1;
                }
            }
        } else {
            struct vb_rwr r;
            if (op == SLOT_WRITE_IMM && last) {
                pthread_mutex_lock(&q->mu);
                int have = q->rq_len > 0;
                pthread_mutex_unlock(&q->mu);
                if (!have) break; /* RNR */
            }
            struct vb_mr *m = vb_mr_by_key(ctx, rkey);
            uint32_t n = (flags & SF_GVA_DATA) ? total : len;
            int need = op == SLOT_ATOMIC ? IBV_ACCESS_REMOTE_ATOMIC : IBV_ACCESS_REMOTE_WRITE;
            if (!m || !(m->access & need) || addr < m->iova || addr - m->iova > m->mr.length ||
                m->mr.length - (addr - m->iova) < n || (op == SLOT_ATOMIC && !(flags & SF_GVA_DATA))) {
                q->next_in++;
                responder_error(q, d, "the peer wrote outside a region it may write", IBV_EVENT_QP_ACCESS_ERR);
                return 1;
            }
            int rc;
            if (flags & SF_GVA_DATA) rc = vb_apply_from_image(ctx, d, m, addr, n);
            else rc = vb_apply_bytes(ctx, m, addr, data, n);
            if (rc < 0) {
                q->next_in++;
                responder_error(q, d, "reading a region's image failed", IBV_EVENT_QP_FATAL);
                return 1;
            }
            if (op == SLOT_WRITE_IMM && last && take_recv(q, &r))
                recv_done(q, IBV_WC_SUCCESS, IBV_WC_RECV_RDMA_WITH_IMM, total, 1, imm, r.wr_id);
        }
        q->next_in++;
        did = 1;
    }
    tell_consumed(q, d);
    /* The doorbell names slots not found yet (it may land before them):
     * look again soon. */
    if (missing && q->hdr_lva && bell(q) > q->next_in) ctx->blocked = 1;
    return did;
}

int vb_progress(struct vb_context *ctx, dpu_t *d) {
    struct vb_qp *list[MAX_QP];
    int n = 0, did = 0;
    ctx->blocked = 0;
    pthread_mutex_lock(&ctx->mu);
    for (struct vb_qp *q = ctx->qps; q; q = q->next) list[n++] = q;
    pthread_mutex_unlock(&ctx->mu);
    /* QPs are not destroyed while the progress lock is held. */
    for (int i = 0; i < n; i++) {
        struct vb_qp *q = list[i];
        int st = atomic_load(&q->state);
        if (st == IBV_QPS_RTR || st == IBV_QPS_RTS) did |= drain(q, d);
        if (q->nq_len > 0 && atomic_load(&q->state) == IBV_QPS_RTS) did |= store_notices(q, d);
        if (q->sq_len > 0 && pthread_mutex_trylock(&q->run_mu) == 0) {
            did |= run_sq(q, d, 4);
            if (q->blocked) ctx->blocked = 1;
            pthread_mutex_unlock(&q->run_mu);
        }
    }
    uint64_t now = vb_now_ns();
    if (now - ctx->last_publish_ns > 5000000ull) {
        ctx->last_publish_ns = now;
        vb_publish_all(ctx, d);
    }
    return did;
}

/* Passes are paced: one that found nothing puts the next further away
 * (from DPU_VERBS_POLL_US, default 20 µs, growing by half up to
 * DPU_VERBS_IDLE_US, default 2000 µs); one that did something, or a post,
 * brings the next back to now. Every empty pass is a LOAD the node's agent
 * serves: pacing keeps an idle program from loading its agent. */
static uint64_t poll_min_ns, poll_max_ns;

static void pace_init(void) {
    if (!poll_min_ns) {
        poll_max_ns = env_ms("DPU_VERBS_IDLE_US", 2000) * 1000;
        poll_min_ns = env_ms("DPU_VERBS_POLL_US", 20) * 1000;
        if (poll_min_ns < 1000) poll_min_ns = 1000;
        if (poll_max_ns < poll_min_ns) poll_max_ns = poll_min_ns;
    }
}

/* vb_pass runs one pass if it is due (progress lock held). */
int vb_pass(struct vb_context *ctx, dpu_t *d) {
    uint64_t now = vb_now_ns();
    if (now < atomic_load(&ctx->next_pass_ns)) return 0;
    int did = vb_progress(ctx, d);
    atomic_fetch_add(&ctx->stats.passes, 1);
    if (!did) atomic_fetch_add(&ctx->stats.passes_idle, 1);
    now = vb_now_ns();
    if (did) {
        ctx->poll_gap_ns = poll_min_ns;
        atomic_store(&ctx->next_pass_ns, now);
    } else if (ctx->blocked) {
        /* a sender waits for the peer to make room: look again soon */
        ctx->poll_gap_ns = poll_min_ns;
        atomic_store(&ctx->next_pass_ns, now + poll_min_ns);
    } else if (atomic_load(&ctx->events_on) && atomic_load(&ctx->polled_qps) == 0) {
        /* the doorbells' events bring the passes that find slots: the
         * paced one is a fallback */
        ctx->poll_gap_ns = poll_max_ns;
        atomic_store(&ctx->next_pass_ns, now + poll_max_ns);
    } else {
        uint64_t g = ctx->poll_gap_ns ? ctx->poll_gap_ns + ctx->poll_gap_ns / 2 : poll_min_ns;
        ctx->poll_gap_ns = g > poll_max_ns ? poll_max_ns : g;
        atomic_store(&ctx->next_pass_ns, now + ctx->poll_gap_ns);
    }
    return did;
}

void *vb_progress_thread(void *arg) {
    struct vb_context *ctx = arg;
    pace_init();
    for (;;) {
        pthread_mutex_lock(&ctx->prog_mu);
        vb_pass(ctx, ctx->dp);
        pthread_mutex_unlock(&ctx->prog_mu);
        uint64_t now = vb_now_ns(), next = atomic_load(&ctx->next_pass_ns);
        if (!ctx->qps) next = now + 50000000ull;
        pthread_mutex_lock(&ctx->wake_mu);
        if (!ctx->wake && !ctx->stop && next > now) {
            struct timespec dl;
            clock_gettime(CLOCK_REALTIME, &dl);
            uint64_t ns = (uint64_t)dl.tv_nsec + (next - now);
            dl.tv_sec += (time_t)(ns / 1000000000ull);
            dl.tv_nsec = (long)(ns % 1000000000ull);
            pthread_cond_timedwait(&ctx->wake_cv, &ctx->wake_mu, &dl);
        }
        ctx->wake = 0;
        int stop = ctx->stop;
        pthread_mutex_unlock(&ctx->wake_mu);
        if (stop) break;
    }
    return NULL;
}

/* awaited: whether ev (progress lock held) reports a doorbell that names
 * slots its QP has not taken (not the QP's own stores of its header), or
 * anything but a page write. */
static int awaited(struct vb_context *ctx, const dpu_event_t *ev) {
    if (ev->type != DPU_EVENT_UPDATED && ev->type != DPU_EVENT_INVALIDATED) return 1;
    int hit = 1; /* a page of no QP's mailbox: look anyway */
    pthread_mutex_lock(&ctx->mu);
    for (struct vb_qp *q = ctx->qps; q; q = q->next) {
        if (ev->page.hi != q->mbox.hi || ev->page.lo < q->mbox.lo || ev->page.lo - q->mbox.lo >= (uint64_t)MBOX_PAGES * PAGE)
            continue;
        hit = ev->page.lo - q->mbox.lo < PAGE && bell(q) > q->next_in;
        break;
    }
    pthread_mutex_unlock(&ctx->mu);
    return hit;
}

/* vb_event_thread takes the events of the mailboxes' pages: each batch of
 * them (a peer stored slots) runs a pass at once, here, or, while a pass
 * is under way, one more after it. */
void *vb_event_thread(void *arg) {
    struct vb_context *ctx = arg;
    for (;;) {
        dpu_event_t ev;
        int rc = dpu_next_event(ctx->de, &ev, 100);
        pthread_mutex_lock(&ctx->wake_mu);
        int stop = ctx->stop;
        pthread_mutex_unlock(&ctx->wake_mu);
        if (stop) break;
        if (rc == -ETIMEDOUT) continue;
        if (rc < 0) {
            vb_log("the node's events stopped (%s): mailboxes are polled", dpu_strerror(rc));
            atomic_store(&ctx->events_on, 0);
            break;
        }
        enum { MAX_EV = 64 };
        dpu_event_t evs[MAX_EV];
        unsigned n = 0;
        int more = 0;
        do {
            if (n < MAX_EV) evs[n++] = ev;
            else more = 1;
        } while (dpu_next_event(ctx->de, &ev, 0) == 0);
        atomic_fetch_add(&ctx->stats.events, n);
        if (pthread_mutex_trylock(&ctx->prog_mu) != 0) {
            wake_progress(ctx); /* a pass is under way: one more after it */
            continue;
        }
        /* With passes stopped, a header's event matters only when its
         * doorbell names slots not taken yet. */
        int need = more;
        for (unsigned i = 0; i < n && !need; i++) need = awaited(ctx, &evs[i]);
        if (need) {
            atomic_fetch_add(&ctx->stats.event_passes, 1);
            atomic_store(&ctx->next_pass_ns, 0);
            vb_pass(ctx, ctx->de);
        }
        pthread_mutex_unlock(&ctx->prog_mu);
    }
    return NULL;
}

void vb_print_stats(struct vb_context *ctx) {
    const char *v = getenv("DPU_VERBS_STATS");
    if (!v || strcmp(v, "1") != 0) return;
    struct vb_stats *s = &ctx->stats;
    uint64_t st = atomic_load(&s->slot_stores), ld = atomic_load(&s->slot_loads);
    fprintf(stderr,
            "dpuverbs: slots stored %llu (mean %.1f us), mailbox loads %llu (mean %.1f us, %llu empty), "
            "passes %llu (%llu idle), ibv_poll_cq passes %llu, empty polls %llu yielded, %llu waited, "
            "mailbox events %llu (%llu passes), slots read from the doorbell's copy %llu\n",
            (unsigned long long)st, st ? (double)atomic_load(&s->slot_store_ns) / (double)st / 1e3 : 0.0,
            (unsigned long long)ld, ld ? (double)atomic_load(&s->slot_load_ns) / (double)ld / 1e3 : 0.0,
            (unsigned long long)atomic_load(&s->slot_empty), (unsigned long long)atomic_load(&s->passes),
            (unsigned long long)atomic_load(&s->passes_idle), (unsigned long long)atomic_load(&s->poll_passes),
            (unsigned long long)atomic_load(&s->poll_yields), (unsigned long long)atomic_load(&s->poll_waits),
            (unsigned long long)atomic_load(&s->events), (unsigned long long)atomic_load(&s->event_passes),
            (unsigned long long)atomic_load(&s->copies));
}
