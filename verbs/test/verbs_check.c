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
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dpu.h"

static int failed;

#define CHECK(name, cond, ...)                                \
    do {                                                      \
        if (cond) printf("ok %s\n", name);                    \
        else {                                                \
            printf("FAIL %s: ", name);                        \
            printf(__VA_ARGS__);                              \
            printf("\n");                                     \
            failed = 1;                                       \
        }                                                     \
        fflush(stdout);                                       \
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

/* wait_wc polls the CQ for the completion of wr_id (10 s bound). */
static int wait_wc(uint64_t wr_id, struct ibv_wc *out) {
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
            continue; /* another request's completion (flushes) */
        }
        usleep(100);
    }
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

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
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
    CHECK("reg mr", amr && bmr && wmr && rmr, "errno %d", errno);
    if (!amr || !bmr || !wmr || !rmr) return 1;

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
    int ok = rc == 0 && wait_wc(2, &wc) == 0 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_SEND;
    ok = ok && wait_wc(1, &wc) == 0 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV && wc.byte_len == 9000;
    CHECK("send/recv 9000 bytes", ok && memcmp(abuf, rbuf, 9000) == 0, "rc %d status %d len %u", rc, wc.status,
          wc.byte_len);

    /* RDMA WRITE into a region with an image and into one without. */
    memset(abuf, 0x5a, 5000);
    rc = post(good.a, IBV_WR_RDMA_WRITE, 3, amr, abuf, 5000, (uintptr_t)bbuf + 100, bmr->rkey, 0, 0);
    ok = rc == 0 && wait_wc(3, &wc) == 0 && wc.status == IBV_WC_SUCCESS;
    double end = now_s() + 10;
    while (ok && bbuf[5099] != 0x5a && now_s() < end) usleep(100);
    CHECK("write to an image", ok && bbuf[100] == 0x5a && bbuf[5099] == 0x5a && bbuf[5100] != 0x5a, "status %d", wc.status);
    rc = post(good.a, IBV_WR_RDMA_WRITE, 4, amr, abuf, 5000, (uintptr_t)wbuf + 7, wmr->rkey, 0, 0);
    ok = rc == 0 && wait_wc(4, &wc) == 0 && wc.status == IBV_WC_SUCCESS;
    end = now_s() + 10;
    while (ok && wbuf[5006] != 0x5a && now_s() < end) usleep(100);
    CHECK("write through the mailbox", ok && wbuf[7] == 0x5a && wbuf[5006] == 0x5a && wbuf[6] == 0, "status %d",
          wc.status);

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
    end = now_s() + 10;
    while (ok && *(volatile uint64_t *)word != 99 && now_s() < end) usleep(100);
    CHECK("compare and swap", ok && *word == 99, "status %d old %llu word %llu", wc.status, (unsigned long long)*old,
          (unsigned long long)*word);
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

    /* A peer that writes garbage into a QP's mailbox: the QP errs with an
     * async event, its receives flush, the other pair goes on. The garbage
     * is written straight through the node (libdpu), where the directory
     * the GID names says the mailbox is. */
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
    CHECK("dereg", ibv_dereg_mr(amr) == 0 && ibv_dereg_mr(bmr) == 0 && ibv_dereg_mr(wmr) == 0 && ibv_dereg_mr(rmr) == 0, "dereg failed");
    CHECK("teardown", ibv_destroy_cq(cq) == 0 && ibv_dealloc_pd(pd) == 0 && ibv_close_device(ctx) == 0, "teardown failed");
    ibv_free_device_list(devs);
    printf(failed ? "verbs_check: FAILED\n" : "verbs_check: all checks passed\n");
    return failed;
}
