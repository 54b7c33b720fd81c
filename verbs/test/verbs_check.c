/*
 * verbs_check — a plain verbs program (linked against libibverbs) that
 * checks the device's answers to good and bad requests. Run it with the
 * device preloaded:
 *
 *   LD_PRELOAD=bin/libdpuverbs.so DPU_SOCKET=RUN_DIR/dpu0.sock verbs_check
 *
 * It connects queue pairs of one context to each other (the fabric path is
 * the same as between processes) and prints "ok NAME" per check, or
 * "FAIL NAME: why" and exits 1.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <infiniband/verbs.h>
#include <arpa/inet.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dpu.h"

static int failed;

static double now_s(void);
static double since; /* when the previous check ended */

/* CHECK prints "ok NAME (seconds)" or "FAIL NAME (seconds): why"; the
 * seconds are the time since the previous check, so a wait that ran to
 * its bound shows. */
#define CHECK(name, cond, ...)                                \
    do {                                                      \
        double t_ = now_s();                                  \
        if (cond) printf("ok %s (%.3f s)\n", name, t_ - since); \
        else {                                                \
            printf("FAIL %s (%.3f s): ", name, t_ - since);   \
            printf(__VA_ARGS__);                              \
            printf("\n");                                     \
            failed = 1;                                       \
        }                                                     \
        fflush(stdout);                                       \
        since = now_s();                                      \
    } while (0)

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_cq *cq;

struct pair {
    struct ibv_qp *a, *b;
};

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static int to_rts(struct ibv_qp *qp, struct ibv_qp *peer, union ibv_gid *gid, uint32_t my_psn, uint32_t peer_psn) {
    struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1,
                            .qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC};
    int rc = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
    if (rc) return rc;
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_1024;
    a.dest_qp_num = peer->qp_num;
    a.rq_psn = peer_psn;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12;
    a.ah_attr.port_num = 1;
    if (gid) {
        a.ah_attr.is_global = 1;
        a.ah_attr.grh.dgid = *gid;
        a.ah_attr.grh.hop_limit = 1;
    }
    rc = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                   IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
    if (rc) return rc;
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTS;
    a.sq_psn = my_psn;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.max_rd_atomic = 1;
    return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                     IBV_QP_MAX_QP_RD_ATOMIC);
}

static struct ibv_qp *new_qp(void) {
    struct ibv_qp_init_attr ia = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
                                  .cap = {.max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 2, .max_recv_sge = 2}};
    return ibv_create_qp(pd, &ia);
}

static int connect_pair(struct pair *p) {
    union ibv_gid gid;
    if (ibv_query_gid(ctx, 1, 0, &gid)) return -1;
    p->a = new_qp();
    p->b = new_qp();
    if (!p->a || !p->b) return -1;
    if (to_rts(p->a, p->b, &gid, 0x111111, 0x222222)) return -1;
    return to_rts(p->b, p->a, &gid, 0x222222, 0x111111);
}

/* Completions polled while waiting for another request's are kept here
 * and handed out by a later wait_wc: a receive may complete before the send
 * that caused it (the CQ is shared), and RC gives no order between them. */
static struct ibv_wc stash[64];
static int nstash;

/* wait_wc polls the CQ for the completion of wr_id (10 s bound). */
static int wait_wc(uint64_t wr_id, struct ibv_wc *out) {
    for (int i = 0; i < nstash; i++)
        if (stash[i].wr_id == wr_id) {
            *out = stash[i];
            memmove(&stash[i], &stash[i + 1], sizeof *stash * (size_t)(nstash - i - 1));
            nstash--;
            return 0;
        }
    double end = now_s() + 10;
    while (now_s() < end) {
        struct ibv_wc wc;
        int n = ibv_poll_cq(cq, 1, &wc);
        if (n < 0) return -1;
        if (n == 1) {
            if (wc.wr_id == wr_id) {
                *out = wc;
                return 0;
            }
            printf("# stray completion wr_id %llu status %d opcode %d len %u while waiting for %llu\n",
                   (unsigned long long)wc.wr_id, wc.status, wc.opcode, wc.byte_len, (unsigned long long)wr_id);
            if (nstash < (int)(sizeof stash / sizeof *stash)) stash[nstash++] = wc;
            continue;
        }
        usleep(100);
    }
    return -1;
}

/* first_diff: the first offset where a and b differ, or -1. */
static long first_diff(const uint8_t *a, const uint8_t *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (a[i] != b[i]) return (long)i;
    return -1;
}

/* first_not: the first offset below n where buf is not in at [off, off+len)
 * and out elsewhere, or -1. */
static long first_not(const uint8_t *buf, size_t off, size_t len, uint8_t in, uint8_t out, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (buf[i] != (i >= off && i < off + len ? in : out)) return (long)i;
    return -1;
}

static int post(struct ibv_qp *qp, enum ibv_wr_opcode op, uint64_t wr_id, struct ibv_mr *mr, void *buf, uint32_t len,
                uint64_t raddr, uint32_t rkey, uint64_t cmp, uint64_t swap) {
    struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = len, .lkey = mr ? mr->lkey : 0};
    struct ibv_send_wr wr = {.wr_id = wr_id, .sg_list = &sge, .num_sge = 1, .opcode = op, .send_flags = IBV_SEND_SIGNALED};
    if (op == IBV_WR_ATOMIC_CMP_AND_SWP || op == IBV_WR_ATOMIC_FETCH_AND_ADD) {
        wr.wr.atomic.remote_addr = raddr;
        wr.wr.atomic.rkey = rkey;
        wr.wr.atomic.compare_add = cmp;
        wr.wr.atomic.swap = swap;
    } else {
        wr.wr.rdma.remote_addr = raddr;
        wr.wr.rdma.rkey = rkey;
    }
    struct ibv_send_wr *bad = NULL;
    return ibv_post_send(qp, &wr, &bad);
}

static int post_recv(struct ibv_qp *qp, uint64_t wr_id, struct ibv_mr *mr, void *buf, uint32_t len) {
    struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = len, .lkey = mr->lkey};
    struct ibv_recv_wr wr = {.wr_id = wr_id, .sg_list = &sge, .num_sge = 1}, *bad;
    return ibv_post_recv(qp, &wr, &bad);
}

static struct ibv_mr *fmr;
static uint8_t fbuf[16];

/* fence SENDs 8 bytes on p->a into a receive posted on p->b (ids id and
 * id+1) and waits for both completions: once the receive has completed,
 * what p->a's earlier requests put in p->b's memory is there (RC). */
static int fence(struct pair *p, uint64_t id) {
    struct ibv_sge rs = {.addr = (uintptr_t)(fbuf + 8), .length = 8, .lkey = fmr->lkey};
    struct ibv_recv_wr rw = {.wr_id = id, .sg_list = &rs, .num_sge = 1}, *rbad;
    struct ibv_sge ss = {.addr = (uintptr_t)fbuf, .length = 8, .lkey = fmr->lkey};
    struct ibv_send_wr sw = {.wr_id = id + 1, .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND,
                             .send_flags = IBV_SEND_SIGNALED}, *sbad;
    struct ibv_wc w1, w2;
    if (ibv_post_recv(p->b, &rw, &rbad) || ibv_post_send(p->a, &sw, &sbad)) return -1;
    if (wait_wc(id + 1, &w1) || wait_wc(id, &w2)) {
        printf("# fence %llu: no completion\n", (unsigned long long)id);
        return -1;
    }
    if (w1.status != IBV_WC_SUCCESS || w2.status != IBV_WC_SUCCESS) {
        printf("# fence %llu: send status %d, receive status %d\n", (unsigned long long)id, w1.status, w2.status);
        return -1;
    }
    return 0;
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    since = now_s();
    int n = 0;
    struct ibv_device **devs = ibv_get_device_list(&n);
    CHECK("device list", devs && n == 1 && strcmp(ibv_get_device_name(devs[0]), "dpu0") == 0, "n=%d", n);
    if (!devs || n < 1) return 1;
    ctx = ibv_open_device(devs[0]);
    CHECK("open device", ctx != NULL, "errno %d", errno);
    if (!ctx) return 1;
    pd = ibv_alloc_pd(ctx);
    cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
    CHECK("pd and cq", pd && cq, "errno %d", errno);
    if (!pd || !cq) return 1;

    struct ibv_port_attr pa;
    CHECK("query port", ibv_query_port(ctx, 1, &pa) == 0 && pa.state == IBV_PORT_ACTIVE &&
                            pa.link_layer == IBV_LINK_LAYER_ETHERNET, "state %d", pa.state);

    /* Unsupported verbs: a clear errno, nothing created. */
    struct ibv_srq_init_attr sa = {.attr = {.max_wr = 4, .max_sge = 1}};
    errno = 0;
    CHECK("srq unsupported", ibv_create_srq(pd, &sa) == NULL && errno == EOPNOTSUPP, "errno %d", errno);
    struct ibv_qp_init_attr ud = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_UD,
                                  .cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1}};
    errno = 0;
    CHECK("ud unsupported", ibv_create_qp(pd, &ud) == NULL && errno == EOPNOTSUPP, "errno %d", errno);
    struct ibv_ah_attr aa = {.port_num = 1};
    errno = 0;
    CHECK("ah unsupported", ibv_create_ah(pd, &aa) == NULL && errno == EOPNOTSUPP, "errno %d", errno);

    /* UC QPs connect and send like RC ones; READ and atomics, which UC has
     * not, are refused at posting. */
    {
        struct ibv_qp_init_attr uia = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_UC,
                                       .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
        struct ibv_qp *ua = ibv_create_qp(pd, &uia), *ub = ibv_create_qp(pd, &uia);
        union ibv_gid ug;
        struct ibv_qp_attr qa;
        struct ibv_qp_init_attr qi;
        int ok = ua && ub && ibv_query_gid(ctx, 1, 0, &ug) == 0 && to_rts(ua, ub, &ug, 0x10, 0x20) == 0 &&
                 to_rts(ub, ua, &ug, 0x20, 0x10) == 0 && ibv_query_qp(ua, &qa, IBV_QP_STATE, &qi) == 0;
        CHECK("uc qp to rts", ok && ua->qp_type == IBV_QPT_UC && qi.qp_type == IBV_QPT_UC && qa.qp_state == IBV_QPS_RTS,
              "errno %d", errno);
        uint64_t w = 0;
        struct ibv_mr *umr = ibv_reg_mr(pd, &w, sizeof w, IBV_ACCESS_LOCAL_WRITE);
        CHECK("uc read refused", ok && umr && post(ua, IBV_WR_RDMA_READ, 1, umr, &w, 8, (uintptr_t)&w, umr->lkey, 0, 0) == EINVAL,
              "ok %d", ok);
        CHECK("uc atomic refused",
              ok && umr && post(ua, IBV_WR_ATOMIC_FETCH_AND_ADD, 2, umr, &w, 8, (uintptr_t)&w, umr->lkey, 1, 0) == EINVAL,
              "ok %d", ok);
        if (ua) ibv_destroy_qp(ua);
        if (ub) ibv_destroy_qp(ub);
        if (umr) ibv_dereg_mr(umr);
    }

    /* Failing registrations. */
    static char small[64];
    errno = 0;
    CHECK("reg odp refused", ibv_reg_mr(pd, small, sizeof small, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND) == NULL &&
                                 errno == EOPNOTSUPP, "errno %d", errno);
    errno = 0;
    CHECK("reg remote write needs local write", ibv_reg_mr(pd, small, sizeof small, IBV_ACCESS_REMOTE_WRITE) == NULL &&
                                                     errno == EINVAL, "errno %d", errno);
    errno = 0;
    CHECK("reg empty refused", ibv_reg_mr(pd, small, 0, IBV_ACCESS_LOCAL_WRITE) == NULL && errno == EINVAL, "errno %d",
          errno);

    /* A QP without the peer's GID cannot connect. */
    struct ibv_qp *lone = new_qp(), *other = new_qp();
    CHECK("connect needs a gid", lone && other && to_rts(lone, other, NULL, 1, 2) == EINVAL, "not EINVAL");
    if (lone) ibv_destroy_qp(lone);
    if (other) ibv_destroy_qp(other);

    int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
    size_t sz = 3 * 4096;
    uint8_t *abuf = aligned_alloc(4096, sz), *bbuf = aligned_alloc(4096, sz);
    memset(abuf, 0, sz);
    memset(bbuf, 0, sz);
    struct ibv_mr *amr = ibv_reg_mr(pd, abuf, sz, acc), *bmr = ibv_reg_mr(pd, bbuf, sz, acc);
    uint8_t *rbuf = aligned_alloc(4096, sz);
    struct ibv_mr *rmr = ibv_reg_mr(pd, rbuf, sz, IBV_ACCESS_LOCAL_WRITE);
    uint8_t *wbuf = aligned_alloc(4096, 8192);
    memset(wbuf, 0, 8192);
    struct ibv_mr *wmr = ibv_reg_mr(pd, wbuf, 8192, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    uint8_t *xbuf = aligned_alloc(4096, sz);
    memset(xbuf, 0, sz);
    struct ibv_mr *xmr = ibv_reg_mr(pd, xbuf, sz, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    fmr = ibv_reg_mr(pd, fbuf, sizeof fbuf, IBV_ACCESS_LOCAL_WRITE);
    CHECK("reg mr", amr && bmr && wmr && rmr && xmr && fmr, "errno %d", errno);
    if (!amr || !bmr || !wmr || !rmr || !xmr || !fmr) return 1;

    struct pair bad_pair, good;
    CHECK("connect", connect_pair(&bad_pair) == 0 && connect_pair(&good) == 0, "errno %d", errno);
    struct ibv_wc wc;

    /* An unsupported opcode is refused at post time; the QP goes on. */
    struct ibv_sge sge = {.addr = (uintptr_t)abuf, .length = 8, .lkey = amr->lkey};
    struct ibv_send_wr mw = {.wr_id = 90, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_BIND_MW}, *badwr = NULL;
    CHECK("unsupported opcode", ibv_post_send(good.a, &mw, &badwr) == EOPNOTSUPP && badwr == &mw, "not EOPNOTSUPP");

    /* SEND/RECV across slots, checked byte by byte. */
    for (size_t i = 0; i < 9000; i++) abuf[i] = (uint8_t)(i * 7 + 3);
    post_recv(good.b, 1, rmr, rbuf, (uint32_t)sz);
    int rc = post(good.a, IBV_WR_SEND, 2, amr, abuf, 9000, 0, 0, 0, 0);
    struct ibv_wc swc = {0}, rwc = {0};
    int sgot = rc == 0 ? wait_wc(2, &swc) : -1;
    int rgot = rc == 0 ? wait_wc(1, &rwc) : -1;
    long diff = first_diff(abuf, rbuf, 9000);
    CHECK("send/recv 9000 bytes",
          sgot == 0 && swc.status == IBV_WC_SUCCESS && swc.opcode == IBV_WC_SEND && rgot == 0 &&
              rwc.status == IBV_WC_SUCCESS && rwc.opcode == IBV_WC_RECV && rwc.byte_len == 9000 && diff < 0,
          "post rc %d; send: %s status %d opcode %d; recv: %s status %d opcode %d len %u; first differing byte %ld",
          rc, sgot ? "no completion" : "completed", swc.status, swc.opcode, rgot ? "no completion" : "completed",
          rwc.status, rwc.opcode, rwc.byte_len, diff);
    if (diff >= 0)
        printf("# at %ld: sent %02x received %02x (slot %ld, byte %ld of its data)\n", diff, abuf[diff], rbuf[diff],
               diff / 4032, diff % 4032);

    /* RDMA WRITE into a region with an image and into one without. A
     * WRITE's completion at the requester says nothing of when the bytes
     * are in the responder's memory; RC's ordering does: a SEND after it
     * completes at the responder only once they are. So each WRITE is
     * followed by a SEND (fence), and the memory is checked when its
     * receive has completed, every byte, with nothing polled. */
    memset(abuf, 0x5a, 5000);
    rc = post(good.a, IBV_WR_RDMA_WRITE, 3, amr, abuf, 5000, (uintptr_t)bbuf + 100, bmr->rkey, 0, 0);
    int ok = rc == 0 && wait_wc(3, &wc) == 0 && wc.status == IBV_WC_SUCCESS;
    int fenced = ok && fence(&good, 100) == 0;
    diff = first_not(bbuf, 100, 5000, 0x5a, 0, sz);
    CHECK("write to an image", ok && fenced && diff < 0,
          "post rc %d status %d; fence %s; byte %ld is %02x (want %02x)", rc, wc.status, fenced ? "done" : "failed",
          diff, diff >= 0 ? bbuf[diff] : 0, diff >= 100 && diff < 5100 ? 0x5a : 0);
    rc = post(good.a, IBV_WR_RDMA_WRITE, 4, amr, abuf, 5000, (uintptr_t)wbuf + 7, wmr->rkey, 0, 0);
    ok = rc == 0 && wait_wc(4, &wc) == 0 && wc.status == IBV_WC_SUCCESS;
    fenced = ok && fence(&good, 110) == 0;
    diff = first_not(wbuf, 7, 5000, 0x5a, 0, 8192);
    CHECK("write through the mailbox", ok && fenced && diff < 0,
          "post rc %d status %d; fence %s; byte %ld is %02x (want %02x)", rc, wc.status, fenced ? "done" : "failed",
          diff, diff >= 0 ? wbuf[diff] : 0, diff >= 7 && diff < 5007 ? 0x5a : 0);

    /* WRITE_WITH_IMM through the mailbox over three slots: the receive
     * completes with the immediate once every byte is in place. */
    for (size_t i = 0; i < 9000; i++) abuf[i] = (uint8_t)(i * 13 + 1);
    post_recv(good.b, 40, rmr, rbuf, 8);
    struct ibv_sge isge = {.addr = (uintptr_t)abuf, .length = 9000, .lkey = amr->lkey};
    struct ibv_send_wr iwr = {.wr_id = 41, .sg_list = &isge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
                              .send_flags = IBV_SEND_SIGNALED, .imm_data = htonl(0x12345678)};
    iwr.wr.rdma.remote_addr = (uintptr_t)xbuf + 3;
    iwr.wr.rdma.rkey = xmr->rkey;
    rc = ibv_post_send(good.a, &iwr, &badwr);
    sgot = rc == 0 ? wait_wc(41, &swc) : -1;
    rgot = rc == 0 ? wait_wc(40, &rwc) : -1;
    diff = first_diff(abuf, xbuf + 3, 9000);
    CHECK("write with immediate, 9000 bytes",
          sgot == 0 && swc.status == IBV_WC_SUCCESS && swc.opcode == IBV_WC_RDMA_WRITE && rgot == 0 &&
              rwc.status == IBV_WC_SUCCESS && rwc.opcode == IBV_WC_RECV_RDMA_WITH_IMM &&
              (rwc.wc_flags & IBV_WC_WITH_IMM) && ntohl(rwc.imm_data) == 0x12345678 && xbuf[2] == 0 &&
              xbuf[9003] == 0 && diff < 0,
          "post rc %d; write: %s status %d opcode %d; recv: %s status %d opcode %d flags %#x imm %#x; first "
          "differing byte %ld (edges %02x %02x)",
          rc, sgot ? "no completion" : "completed", swc.status, swc.opcode, rgot ? "no completion" : "completed",
          rwc.status, rwc.opcode, rwc.wc_flags, ntohl(rwc.imm_data), diff, xbuf[2], xbuf[9003]);

    /* READ of three pages of the target's image, stored locally before the
     * post (published then). */
    for (size_t i = 0; i < 9000; i++) bbuf[1000 + i] = (uint8_t)(i * 11 + 5);
    memset(rbuf, 0, 9000);
    rc = post(good.a, IBV_WR_RDMA_READ, 42, rmr, rbuf, 9000, (uintptr_t)bbuf + 1000, bmr->rkey, 0, 0);
    ok = rc == 0 && wait_wc(42, &wc) == 0 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RDMA_READ;
    diff = first_diff(bbuf + 1000, rbuf, 9000);
    CHECK("read 9000 bytes", ok && diff < 0, "post rc %d status %d opcode %d; first differing byte %ld", rc,
          wc.status, wc.opcode, diff);
    memset(bbuf, 0, sz);

    /* READ sees what the target stored locally (published before the post). */
    memcpy(bbuf + 8192, "fabric!", 8);
    memset(abuf, 0, 16);
    rc = post(good.a, IBV_WR_RDMA_READ, 5, amr, abuf, 8, (uintptr_t)bbuf + 8192, bmr->rkey, 0, 0);
    ok = rc == 0 && wait_wc(5, &wc) == 0 && wc.status == IBV_WC_SUCCESS;
    CHECK("read", ok && memcmp(abuf, "fabric!", 8) == 0, "status %d got %.8s", wc.status, abuf);

    /* Atomics on the target's word; the target's memory follows. */
    uint64_t *word = (uint64_t *)(bbuf + 4096), *old = (uint64_t *)(abuf + 64);
    *word = 40;
    rc = post(good.a, IBV_WR_ATOMIC_FETCH_AND_ADD, 6, amr, old, 8, (uintptr_t)word, bmr->rkey, 2, 0);
    ok = rc == 0 && wait_wc(6, &wc) == 0 && wc.status == IBV_WC_SUCCESS && *old == 40;
    CHECK("fetch and add", ok, "status %d old %llu", wc.status, (unsigned long long)*old);
    rc = post(good.a, IBV_WR_ATOMIC_CMP_AND_SWP, 7, amr, old, 8, (uintptr_t)word, bmr->rkey, 42, 99);
    ok = rc == 0 && wait_wc(7, &wc) == 0 && wc.status == IBV_WC_SUCCESS && *old == 42;
    fenced = ok && fence(&good, 120) == 0; /* the target's memory follows before a later SEND */
    CHECK("compare and swap", ok && fenced && *word == 99, "status %d old %llu word %llu fence %s", wc.status,
          (unsigned long long)*old, (unsigned long long)*word, fenced ? "done" : "failed");
    rc = post(good.a, IBV_WR_ATOMIC_CMP_AND_SWP, 8, amr, old, 8, (uintptr_t)word, bmr->rkey, 42, 7);
    ok = rc == 0 && wait_wc(8, &wc) == 0 && wc.status == IBV_WC_SUCCESS && *old == 99;
    CHECK("compare and swap misses", ok && *word == 99, "status %d old %llu", wc.status, (unsigned long long)*old);
    struct pair atomic_pair;
    connect_pair(&atomic_pair);
    rc = post(atomic_pair.a, IBV_WR_ATOMIC_FETCH_AND_ADD, 9, amr, old, 8, (uintptr_t)bbuf + 4, bmr->rkey, 1, 0);
    ok = rc == 0 && wait_wc(9, &wc) == 0 && wc.status == IBV_WC_REM_ACCESS_ERR;
    CHECK("unaligned atomic", ok, "status %d", wc.status);

    /* A receive too small: the receiver's completion says so. */
    struct pair small_pair;
    connect_pair(&small_pair);
    post_recv(small_pair.b, 20, bmr, bbuf, 100);
    rc = post(small_pair.a, IBV_WR_SEND, 21, amr, abuf, 1000, 0, 0, 0, 0);
    ok = rc == 0 && wait_wc(20, &wc) == 0 && wc.status == IBV_WC_LOC_LEN_ERR;
    CHECK("receive too small", ok, "status %d", wc.status);

    /* A bad rkey: remote access error, the QP errs, later requests flush,
     * and the other pair goes on. */
    rc = post(bad_pair.a, IBV_WR_RDMA_WRITE, 10, amr, abuf, 8, (uintptr_t)bbuf, bmr->rkey ^ 0x400, 0, 0);
    ok = rc == 0 && wait_wc(10, &wc) == 0 && wc.status == IBV_WC_REM_ACCESS_ERR;
    CHECK("bad rkey", ok, "status %d", wc.status);
    struct ibv_qp_attr qa;
    struct ibv_qp_init_attr qi;
    ibv_query_qp(bad_pair.a, &qa, IBV_QP_STATE, &qi);
    CHECK("qp in error", qa.qp_state == IBV_QPS_ERR, "state %d", qa.qp_state);
    rc = post(bad_pair.a, IBV_WR_SEND, 11, amr, abuf, 8, 0, 0, 0, 0);
    ok = rc == 0 && wait_wc(11, &wc) == 0 && wc.status == IBV_WC_WR_FLUSH_ERR;
    CHECK("flushed after error", ok, "status %d", wc.status);
    rc = post(bad_pair.a, IBV_WR_RDMA_READ, 12, amr, abuf, 4096 * 4, (uintptr_t)bbuf, bmr->rkey, 0, 0);
    rc = post(good.a, IBV_WR_RDMA_READ, 13, amr, abuf, 8, (uintptr_t)bbuf + 8192, bmr->rkey, 0, 0);
    ok = rc == 0 && wait_wc(13, &wc) == 0 && wc.status == IBV_WC_SUCCESS && memcmp(abuf, "fabric!", 8) == 0;
    CHECK("other qp unaffected", ok, "status %d", wc.status);
    rc = post(good.a, IBV_WR_RDMA_READ, 14, amr, abuf, 4096, (uintptr_t)bbuf + sz - 100, bmr->rkey, 0, 0);
    ok = rc == 0 && wait_wc(14, &wc) == 0 && wc.status == IBV_WC_REM_ACCESS_ERR;
    CHECK("read past the region", ok, "status %d", wc.status);
    rc = post(good.a, IBV_WR_RDMA_WRITE, 15, amr, abuf, 8, (uintptr_t)bbuf, bmr->rkey, 0, 0);
    ok = rc == 0 && wait_wc(15, &wc) == 0 && wc.status == IBV_WC_WR_FLUSH_ERR;
    CHECK("qp errs after a remote error", ok, "status %d", wc.status);

    /* A peer that writes garbage into a QP's mailbox and rings its
     * doorbell: the QP errs with an async event, its receives flush, the
     * other pair goes on. The garbage is written straight through the node
     * (libdpu), where the directory the GID names says the mailbox is. */
    struct pair junk;
    connect_pair(&junk);
    post_recv(junk.b, 30, rmr, rbuf, 64);
    union ibv_gid gid;
    ibv_query_gid(ctx, 1, 0, &gid);
    dpu_gva_t dir = {0, 0};
    for (int i = 0; i < 4; i++) dir.hi = dir.hi << 8 | gid.raw[4 + i];
    for (int i = 0; i < 8; i++) dir.lo = dir.lo << 8 | gid.raw[8 + i];
    dpu_t *raw = NULL;
    uint8_t entry[32], slot[64] = {0};
    rc = dpu_open(NULL, &raw);
    if (rc == 0) rc = dpu_load(raw, dpu_gva_add(dir, 64 + 32 * (uint64_t)(junk.b->qp_num - 1)), entry, sizeof entry);
    dpu_gva_t mbox = {0, 0};
    for (int i = 7; i >= 0; i--) mbox.lo = mbox.lo << 8 | entry[i];
    for (int i = 3; i >= 0; i--) mbox.hi = mbox.hi << 8 | entry[8 + i];
    uint64_t seq = (uint64_t)0x111111 << 40 | 1; /* junk.b's receive PSN, slot 0 */
    for (int i = 0; i < 8; i++) slot[i] = (uint8_t)(seq >> (8 * i));
    slot[8] = 99; /* no such op */
    if (rc == 0) rc = dpu_store(raw, dpu_gva_add(mbox, 4096), slot, sizeof slot);
    /* and rings the mailbox's doorbell for it (header word 2: one slot) */
    if (rc == 0) rc = dpu_store64(raw, dpu_gva_add(mbox, 16), 1);
    CHECK("garbage written", rc == 0, "%s", dpu_strerror(rc));
    ok = rc == 0 && wait_wc(30, &wc) == 0 && wc.status == IBV_WC_WR_FLUSH_ERR;
    CHECK("garbage errs the qp", ok, "status %d", wc.status);
    struct pollfd pfd = {.fd = ctx->async_fd, .events = POLLIN};
    struct ibv_async_event ev;
    int got_event = 0;
    while (poll(&pfd, 1, 5000) == 1 && ibv_get_async_event(ctx, &ev) == 0) {
        int mine = ev.event_type == IBV_EVENT_QP_FATAL && ev.element.qp == junk.b;
        ibv_ack_async_event(&ev);
        if (mine) {
            got_event = 1;
            break;
        }
    }
    CHECK("garbage raises an async event", got_event, "no IBV_EVENT_QP_FATAL for the QP");
    memcpy(bbuf + 8192, "fabric?", 8);
    struct pair after;
    connect_pair(&after);
    rc = post(after.a, IBV_WR_RDMA_READ, 31, amr, abuf, 8, (uintptr_t)bbuf + 8192, bmr->rkey, 0, 0);
    ok = rc == 0 && wait_wc(31, &wc) == 0 && wc.status == IBV_WC_SUCCESS && memcmp(abuf, "fabric?", 8) == 0;
    CHECK("others unaffected by garbage", ok, "status %d", wc.status);
    if (raw) dpu_close(raw);
    ibv_destroy_qp(junk.a), ibv_destroy_qp(junk.b);
    ibv_destroy_qp(after.a), ibv_destroy_qp(after.b);

    ibv_destroy_qp(bad_pair.a), ibv_destroy_qp(bad_pair.b);
    ibv_destroy_qp(good.a), ibv_destroy_qp(good.b);
    ibv_destroy_qp(small_pair.a), ibv_destroy_qp(small_pair.b);
    ibv_destroy_qp(atomic_pair.a), ibv_destroy_qp(atomic_pair.b);
    CHECK("dereg", ibv_dereg_mr(amr) == 0 && ibv_dereg_mr(bmr) == 0 && ibv_dereg_mr(wmr) == 0 && ibv_dereg_mr(rmr) == 0 &&
                     ibv_dereg_mr(xmr) == 0 && ibv_dereg_mr(fmr) == 0, "dereg failed");
    CHECK("teardown", ibv_destroy_cq(cq) == 0 && ibv_dealloc_pd(pd) == 0 && ibv_close_device(ctx) == 0, "teardown failed");
    ibv_free_device_list(devs);
    printf(failed ? "verbs_check: FAILED\n" : "verbs_check: all checks passed\n");
    return failed;
}
