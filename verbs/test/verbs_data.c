/*
 * verbs_data — every byte of large transfers checked at the far end, one
 * RC QP between two processes (a plain verbs program, run with the device
 * preloaded; verbs_test.go runs it between the two nodes of a fabric).
 *
 *   verbs_data server|client [BYTES]
 *
 * Each side prints one line, "DATA gid=… qpn=… wa=… wk=… sa=… sk=…", and
 * reads its peer's from stdin (the test hands them over). Then the client
 *   1. WRITEs BYTES of pattern 1 from two SGEs to offset 1 of the server's
 *      region W, then SENDs a fence (RC: once the server has the fence, it
 *      has the WRITE);
 *   2. SENDs BYTES of pattern 2 from three SGEs; the server receives them
 *      into offset 1 of its region S through three SGEs;
 * the server checks every byte of both, and that the bytes around them are
 * untouched, and SENDs its counts of wrong bytes back; then the client
 *   3. READs the server's S back and checks every byte of pattern 2.
 * Each check prints "ok NAME" or "FAIL NAME: …" with the wrong bytes'
 * count and the first and last offsets that differ; the exit status is 0
 * only when every check passed. BYTES defaults to 4 MiB + 5.
 */
#define _GNU_SOURCE
#include <infiniband/verbs.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define GUARD 0xa5

static struct ibv_context *ctx;
static struct ibv_cq *cq;
static int failed;

/* pattern is byte i of pattern seed: a hash of the offset, so that a byte
 * from the wrong place (another page, another SGE) does not match. */
static uint8_t pattern(uint64_t i, uint64_t seed) {
    uint64_t x = i + seed * 0x9e3779b97f4a7c15ull;
    x ^= x >> 29;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 32;
    return (uint8_t)x;
}

static void fill(uint8_t *p, size_t n, uint64_t seed) {
    for (size_t i = 0; i < n; i++) p[i] = pattern(i, seed);
}

/* check counts the bytes of p[0..n) that are not pattern seed, and that the
 * bytes before and after (guards) still hold GUARD (when guard is set). */
static uint32_t check(const char *name, const uint8_t *p, size_t n, uint64_t seed, int guard) {
    uint64_t bad = 0, first = 0, last = 0;
    for (size_t i = 0; i < n; i++)
        if (p[i] != pattern(i, seed)) {
            if (!bad) first = i;
            last = i;
            bad++;
        }
    int guards = !guard || (p[-1] == GUARD && p[n] == GUARD);
    if (!bad && guards) printf("ok %s: %zu bytes, every byte matches\n", name, n);
    else {
        printf("FAIL %s: %" PRIu64 " of %zu bytes differ (first at %" PRIu64 ", last at %" PRIu64 ")%s\n", name, bad, n,
               first, last, guards ? "" : "; a byte beside the range was written");
        failed = 1;
    }
    fflush(stdout);
    return (uint32_t)(bad > UINT32_MAX ? UINT32_MAX : bad) + !guards;
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* wait_wc waits (60 s at most) for the completion of wr_id; completions of
 * others that come first are kept for their own wait. */
static struct ibv_wc kept[16];
static int nkept;

static int wait_wc(uint64_t wr_id, struct ibv_wc *out) {
    for (int i = 0; i < nkept; i++)
        if (kept[i].wr_id == wr_id) {
            *out = kept[i];
            kept[i] = kept[--nkept];
            goto got;
        }
    double end = now_s() + 60;
    for (;;) {
        if (now_s() > end) {
            printf("FAIL completion %" PRIu64 ": none in 60 s\n", wr_id);
            return -1;
        }
        struct ibv_wc wc;
        int n = ibv_poll_cq(cq, 1, &wc);
        if (n < 0) {
            printf("FAIL completion %" PRIu64 ": ibv_poll_cq %d\n", wr_id, n);
            return -1;
        }
        if (n == 0) continue;
        if (wc.wr_id == wr_id) {
            *out = wc;
            break;
        }
        if (nkept == 16) return -1;
        kept[nkept++] = wc;
    }
got:
    if (out->status != IBV_WC_SUCCESS) {
        printf("FAIL completion %" PRIu64 ": %s\n", wr_id, ibv_wc_status_str(out->status));
        return -1;
    }
    return 0;
}

static int post_send(struct ibv_qp *qp, uint64_t id, enum ibv_wr_opcode op, struct ibv_sge *sg, int n, uint64_t raddr,
                     uint32_t rkey) {
    struct ibv_send_wr wr = {.wr_id = id, .sg_list = sg, .num_sge = n, .opcode = op, .send_flags = IBV_SEND_SIGNALED},
                       *bad;
    wr.wr.rdma.remote_addr = raddr;
    wr.wr.rdma.rkey = rkey;
    int rc = ibv_post_send(qp, &wr, &bad);
    if (rc) errno = rc;
    return rc;
}

static int post_recv(struct ibv_qp *qp, uint64_t id, struct ibv_sge *sg, int n) {
    struct ibv_recv_wr wr = {.wr_id = id, .sg_list = sg, .num_sge = n}, *bad;
    int rc = ibv_post_recv(qp, &wr, &bad);
    if (rc) errno = rc;
    return rc;
}

struct peer {
    union ibv_gid gid;
    uint32_t qpn;
    uint64_t wa, sa; /* addresses of W and S */
    uint32_t wk, sk; /* their rkeys */
};

static int to_init(struct ibv_qp *qp) {
    struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1,
                            .qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ};
    return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

static int to_rts(struct ibv_qp *qp, const struct peer *p) {
    struct ibv_qp_attr a = {0};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_4096;
    a.dest_qp_num = p->qpn;
    a.rq_psn = 0x123;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12;
    a.ah_attr.is_global = 1;
    a.ah_attr.grh.dgid = p->gid;
    a.ah_attr.grh.hop_limit = 1;
    a.ah_attr.port_num = 1;
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                  IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
        return -1;
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTS;
    a.sq_psn = 0x123;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.max_rd_atomic = 1;
    return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                     IBV_QP_MAX_QP_RD_ATOMIC);
}

static int read_peer(struct peer *p) {
    char line[512], gid[33];
    if (!fgets(line, sizeof line, stdin)) return -1;
    if (sscanf(line, "DATA gid=%32s qpn=%" SCNu32 " wa=%" SCNx64 " wk=%" SCNx32 " sa=%" SCNx64 " sk=%" SCNx32, gid,
               &p->qpn, &p->wa, &p->wk, &p->sa, &p->sk) != 6 ||
        strlen(gid) != 32)
        return -1;
    for (int i = 0; i < 16; i++) {
        unsigned v;
        if (sscanf(gid + 2 * i, "%2x", &v) != 1) return -1;
        p->gid.raw[i] = (uint8_t)v;
    }
    return 0;
}

static void die(const char *what) {
    printf("FAIL %s: %s\n", what, strerror(errno));
    exit(1);
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 2 || (strcmp(argv[1], "server") && strcmp(argv[1], "client"))) {
        fprintf(stderr, "usage: verbs_data server|client [BYTES]\n");
        return 2;
    }
    int server = strcmp(argv[1], "server") == 0;
    size_t n = argc > 2 ? strtoull(argv[2], NULL, 0) : (4u << 20) + 5;
    if (n < 16 || n > (256u << 20)) {
        fprintf(stderr, "verbs_data: BYTES must be 16 to 256 MiB\n");
        return 2;
    }

    struct ibv_device **devs = ibv_get_device_list(NULL);
    if (!devs || !devs[0]) die("device list");
    ctx = ibv_open_device(devs[0]);
    if (!ctx) die("open device");
    struct ibv_pd *pd = ibv_alloc_pd(ctx);
    cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
    if (!pd || !cq) die("pd and cq");
    struct ibv_qp_init_attr ia = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
                                  .cap = {.max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 4, .max_recv_sge = 4}};
    struct ibv_qp *qp = ibv_create_qp(pd, &ia);
    if (!qp) die("create qp");

    /* W and S: the range [1, 1+n) between guard bytes (the client uses
     * offset 3 of W as its source, an address unaligned to the server's). */
    uint8_t *w = aligned_alloc(4096, (n + 4 + 4095) / 4096 * 4096);
    uint8_t *s = aligned_alloc(4096, (n + 4 + 4095) / 4096 * 4096);
    uint8_t ctl[64] = {0};
    if (!w || !s) die("buffers");
    memset(w, GUARD, n + 4);
    memset(s, GUARD, n + 4);
    struct ibv_mr *wmr = ibv_reg_mr(pd, w, n + 4, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    struct ibv_mr *smr = ibv_reg_mr(pd, s, n + 4, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
    struct ibv_mr *cmr = ibv_reg_mr(pd, ctl, sizeof ctl, IBV_ACCESS_LOCAL_WRITE);
    if (!wmr || !smr || !cmr) die("register");

    /* Receives first (once INIT), in the order their SENDs come. */
    if (to_init(qp)) die("modify qp to INIT");
    struct ibv_sge r1 = {(uintptr_t)ctl, 8, cmr->lkey}, r3 = {(uintptr_t)(ctl + 16), 8, cmr->lkey};
    size_t a = 3 * 4096 + 7, b = 1;
    struct ibv_sge r2[3] = {{(uintptr_t)(s + 1), (uint32_t)a, smr->lkey},
                            {(uintptr_t)(s + 1 + a), (uint32_t)b, smr->lkey},
                            {(uintptr_t)(s + 1 + a + b), (uint32_t)(n - a - b), smr->lkey}};
    if (server) {
        if (post_recv(qp, 1, &r1, 1) || post_recv(qp, 2, r2, 3) || post_recv(qp, 3, &r3, 1)) die("post receives");
    } else if (post_recv(qp, 1, &r1, 1)) {
        die("post receive");
    }

    union ibv_gid gid;
    if (ibv_query_gid(ctx, 1, 0, &gid)) die("query gid");
    printf("DATA gid=");
    for (int i = 0; i < 16; i++) printf("%02x", gid.raw[i]);
    printf(" qpn=%" PRIu32 " wa=%" PRIx64 " wk=%" PRIx32 " sa=%" PRIx64 " sk=%" PRIx32 "\n", qp->qp_num,
           (uint64_t)(uintptr_t)w, wmr->rkey, (uint64_t)(uintptr_t)s, smr->rkey);
    struct peer p;
    if (read_peer(&p)) {
        printf("FAIL peer: no DATA line on stdin\n");
        return 1;
    }
    if (to_rts(qp, &p)) die("connect");
    double t0 = now_s();
    struct ibv_wc wc;

    if (server) {
        if (wait_wc(1, &wc)) return 1;
        uint32_t res[2];
        res[0] = check("write", w + 1, n, 1, 1);
        if (wait_wc(2, &wc)) return 1;
        if (wc.byte_len != n) {
            printf("FAIL send: received %" PRIu32 " bytes, want %zu\n", wc.byte_len, n);
            failed = 1;
        }
        res[1] = check("send", s + 1, n, 2, 1) + (wc.byte_len != n);
        memcpy(ctl + 32, res, sizeof res);
        struct ibv_sge sg = {(uintptr_t)(ctl + 32), sizeof res, cmr->lkey};
        if (post_send(qp, 10, IBV_WR_SEND, &sg, 1, 0, 0) || wait_wc(10, &wc)) return 1;
        /* The client READs S back; it says when it is done. */
        if (wait_wc(3, &wc)) return 1;
    } else {
        /* 1: WRITE from two SGEs, then the fence. */
        fill(w + 3, n, 1);
        size_t k = n / 2 + 1;
        struct ibv_sge ws[2] = {{(uintptr_t)(w + 3), (uint32_t)k, wmr->lkey},
                                {(uintptr_t)(w + 3 + k), (uint32_t)(n - k), wmr->lkey}};
        struct ibv_sge fs = {(uintptr_t)(ctl + 32), 8, cmr->lkey};
        if (post_send(qp, 10, IBV_WR_RDMA_WRITE, ws, 2, p.wa + 1, p.wk) || post_send(qp, 11, IBV_WR_SEND, &fs, 1, 0, 0))
            die("post write");
        if (wait_wc(10, &wc) || wait_wc(11, &wc)) return 1;
        double t1 = now_s();
        /* 2: SEND from three SGEs. */
        fill(s + 1, n, 2);
        size_t c = 5 * 4096 + 3, d = 4096;
        struct ibv_sge ss[3] = {{(uintptr_t)(s + 1), (uint32_t)c, smr->lkey},
                                {(uintptr_t)(s + 1 + c), (uint32_t)d, smr->lkey},
                                {(uintptr_t)(s + 1 + c + d), (uint32_t)(n - c - d), smr->lkey}};
        if (post_send(qp, 12, IBV_WR_SEND, ss, 3, 0, 0) || wait_wc(12, &wc)) return 1;
        double t2 = now_s();
        /* The server's counts. */
        if (wait_wc(1, &wc)) return 1;
        uint32_t res[2];
        memcpy(res, ctl, sizeof res);
        printf("%s server: write %" PRIu32 " wrong bytes, send %" PRIu32 "\n", res[0] || res[1] ? "FAIL" : "ok", res[0],
               res[1]);
        if (res[0] || res[1]) failed = 1;
        /* 3: READ the server's S back into W. */
        memset(w, GUARD, n + 4);
        struct ibv_sge rs = {(uintptr_t)(w + 1), (uint32_t)n, wmr->lkey};
        if (post_send(qp, 13, IBV_WR_RDMA_READ, &rs, 1, p.sa + 1, p.sk) || wait_wc(13, &wc)) return 1;
        double t3 = now_s();
        check("read", w + 1, n, 2, 1);
        struct ibv_sge ds = {(uintptr_t)(ctl + 40), 8, cmr->lkey};
        if (post_send(qp, 14, IBV_WR_SEND, &ds, 1, 0, 0) || wait_wc(14, &wc)) return 1;
        printf("# %zu bytes: write %.3f s, send %.3f s, read %.3f s\n", n, t1 - t0, t2 - t1, t3 - t2);
    }
    ibv_destroy_qp(qp);
    ibv_dereg_mr(wmr), ibv_dereg_mr(smr), ibv_dereg_mr(cmr);
    ibv_destroy_cq(cq);
    ibv_dealloc_pd(pd);
    ibv_close_device(ctx);
    ibv_free_device_list(devs);
    free(w), free(s);
    if (!failed) printf("verbs_data: all checks passed\n");
    return failed;
}
