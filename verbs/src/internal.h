/*
 * internal.h — the verbs device of the dpu fabric (libdpuverbs), shared
 * between its files. The design is in docs/verbs.md; in short:
 *
 *   context  = two connections to the node's agent, a progress thread and a
 *              directory (DIR_PAGES fabric pages owned by this node) that
 *              names the context's queue pairs and memory regions. The
 *              port's GID is the directory's GVA.
 *   MR       = the program's memory; when remote READ or ATOMIC access is
 *              asked, also fabric pages (its GVA image) and a shadow copy of
 *              what the image holds, so that local stores can be published.
 *   QP (RC)  = a mailbox (MBOX_SLOTS fabric pages + a header page) owned by
 *              this node that the connected peer fills; the progress thread
 *              drains it in order.
 */
#ifndef DPUVERBS_INTERNAL_H
#define DPUVERBS_INTERNAL_H

#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stddef.h>

#include "dpu.h"
#include "wire.h"

#define VB_API __attribute__((visibility("default")))

#define MAX_SGE 16
#define MAX_INLINE 4032
#define MAX_MSG (1u << 30)

/* Slots stored in one windowed transfer (dpu_storev), and loaded at once
 * from a QP's own mailbox once one is found. */
#define TX_BATCH (MBOX_SLOTS / 2)
#define RX_BATCH 16u

struct vb_context;

/* One memory region. */
struct vb_mr {
    struct ibv_mr mr;
    struct vb_context *ctx;
    int index;             /* slot in the directory's MR table */
    int access;
    uint64_t iova;         /* the address peers use for byte 0 */
    dpu_gva_t gva;         /* the image; zero when the MR has none */
    size_t pages;
    uint8_t *shadow;       /* what the image holds (published bytes); NULL without image */
    pthread_mutex_t mu;    /* shadow and image */
    struct vb_mr *next;
};

struct vb_pd {
    struct ibv_pd pd;
    struct vb_context *ctx;
    int nobjs; /* MRs and QPs on it */
};

struct vb_channel {
    struct ibv_comp_channel ch; /* refcnt: the CQs that use it */
    int wfd;                    /* the write end of the pipe behind ch.fd */
};

struct vb_cq {
    struct ibv_cq cq;
    pthread_mutex_t mu;
    struct ibv_wc *ring;
    unsigned cap, head, len;
    int armed, overflowed;
    uint32_t events, acked;
    int nqps;
    _Atomic uint64_t empty_since; /* ns: when polls began to find the CQ empty; 0 while not */
};

/* A send work request in the queue, with its own copy of the gather list
 * (or the inline bytes) and how far its execution got. */
struct vb_swr {
    uint64_t wr_id;
    int opcode;              /* IBV_WR_* */
    unsigned flags;          /* IBV_SEND_* */
    uint32_t imm;
    uint64_t raddr;
    uint32_t rkey;
    uint64_t compare_add, swap;
    int nsge;
    struct ibv_sge sge[MAX_SGE];
    uint8_t *inl;            /* inline bytes (IBV_SEND_INLINE) */
    uint32_t len;            /* total bytes */
    uint32_t done;           /* bytes sent so far (SEND, WRITE fragments) */
    int started;             /* data phase finished (WRITE to an image) */
    uint64_t blocked_since;  /* ns, 0 while it is not waiting for credit */
};

struct vb_rwr {
    uint64_t wr_id;
    int nsge;
    struct ibv_sge sge[MAX_SGE];
};

/* What a requester knows of one of the peer's MRs (cached). */
struct peer_mr {
    uint32_t rkey;
    int access;
    uint64_t vaddr, length;
    uint64_t gva_lo;   /* 0: no image */
};

#define PEER_MR_CACHE 16

struct vb_qp {
    struct ibv_qp qp;
    struct vb_context *ctx;
    struct ibv_qp_cap cap;
    struct ibv_qp_attr attr;   /* what modify_qp set, for query_qp */
    int sq_sig_all;
    dpu_gva_t mbox;            /* our mailbox */

    /* Send side. The queue (sq_head, sq_len and the entries past the
     * running ones) is under sq_mu, held only briefly so that posting
     * never waits for a transfer; the requests are run by one thread at a
     * time, the holder of run_mu (the poster, or the progress thread),
     * which owns what follows: the head requests' progress, the peer's
     * mailbox and credit, the staging pages. Lock order: the context's
     * progress lock, run_mu, sq_mu. */
    pthread_mutex_t sq_mu, run_mu;
    struct vb_swr *sq;         /* ring of cap.max_send_wr */
    unsigned sq_head, sq_len;
    uint8_t *tx;               /* TX_BATCH staged slot pages (allocated at first use) */
    int blocked;               /* the head request waits for mailbox credit */
    dpu_gva_t peer_dir, peer_mbox;
    uint32_t peer_qpn;
    uint64_t produced, consumed_seen;
    struct peer_mr mrcache[PEER_MR_CACHE];
    unsigned mrcache_next;

    /* Notices whose slots are reserved (produced counts them) and that the
     * progress thread stores: a WRITE into an image and an atomic complete
     * once the image has the bytes; the peer's memory follows. Under nq_mu. */
    pthread_mutex_t nq_mu;
    struct vb_notice {
        uint64_t n;      /* the reserved slot */
        int op;
        uint32_t imm, rkey, total;
        uint64_t addr;
    } nq[MBOX_SLOTS];
    unsigned nq_head, nq_len;

    /* Receive side, under mu (the queue) and the context's progress lock. */
    pthread_mutex_t mu;
    struct vb_rwr *rq;
    unsigned rq_head, rq_len;
    uint64_t next_in, consumed_told;
    uint8_t *rx;               /* RX_BATCH slot pages loaded at once (allocated at first use) */
    int in_recv;               /* a multi-slot SEND is being received */
    struct vb_rwr cur;
    uint32_t cur_off;
    int cur_trunc;

    const uint8_t *hdr_lva;    /* the mailbox's header page, mapped on the event connection; NULL: not */
    _Atomic int state;         /* enum ibv_qp_state */
    struct vb_qp *next;
};

/* Where the device's time goes; DPU_VERBS_STATS=1 prints them on stderr
 * when the context closes. */
struct vb_stats {
    _Atomic uint64_t slot_stores, slot_store_ns; /* slots stored into peers' mailboxes */
    _Atomic uint64_t slot_loads, slot_load_ns;   /* LOADs of this context's mailbox slots */
    _Atomic uint64_t slot_empty;                 /* ... that found no new slot */
    _Atomic uint64_t passes, passes_idle;        /* progress passes; those that found nothing */
    _Atomic uint64_t poll_passes, poll_yields;   /* passes made by ibv_poll_cq; empty polls that yielded */
    _Atomic uint64_t poll_waits;                 /* empty polls that waited for a completion */
    _Atomic uint64_t events, event_passes;       /* mailbox write events; passes they ran */
    _Atomic uint64_t copies;                     /* slots taken from the doorbell's copy */
};

struct vb_context {
    struct verbs_context vctx;   /* must be first: ibv_context is its last field */
    dpu_t *d;                    /* the program's calls */
    dpu_t *dp;                   /* the progress thread */
    dpu_t *de;                   /* the mailboxes' mappings and their events (NULL: passes are paced only) */
    pthread_t ev_thread;
    int ev_started;
    _Atomic int events_on;       /* the event thread takes the doorbells' events */
    _Atomic int polled_qps;      /* QPs whose mailbox header is not mapped: their slots are found by the paced passes */
    uint32_t machine;
    unsigned mode;               /* page mode of the fabric pages */
    dpu_gva_t dir;
    union ibv_gid gid;
    int async_pipe[2];

    pthread_mutex_t mu;          /* lists below, directory slots */
    struct vb_mr *mrs;
    struct vb_qp *qps;
    struct vb_qp *qp_by_num[MAX_QP + 1];
    struct vb_mr *mr_by_index[MAX_MR];
    uint32_t mr_gen;
    int npds, ncqs, nchannels;

    pthread_mutex_t prog_mu;     /* one progress pass at a time */
    pthread_mutex_t wake_mu;
    pthread_cond_t wake_cv;
    int wake, stop;
    int blocked;                 /* the last pass left a send queue waiting for credit */
    pthread_t thread;
    int thread_started;
    uint64_t last_publish_ns;
    _Atomic uint64_t next_pass_ns; /* pacing of the passes (qp.c) */
    uint64_t poll_gap_ns;
    /* Empty ibv_poll_cq calls wait here for a completion on any of the
     * context's CQs (a program may poll one CQ while the other gets it). */
    pthread_mutex_t poll_mu;
    pthread_cond_t poll_cv;      /* CLOCK_MONOTONIC */
    _Atomic uint64_t cq_pushes;  /* completions pushed, ever */
    _Atomic int poll_waiters;
    struct vb_stats stats;
};

/* device.c */
struct vb_context *vb_ctx(struct ibv_context *c);
uint64_t vb_now_ns(void);
int vb_fail(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void vb_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void vb_async(struct vb_context *ctx, enum ibv_event_type type, void *obj);
int vb_errno(int rc);

/* mr.c */
struct vb_mr *vb_mr_by_key(struct vb_context *ctx, uint32_t key);
int vb_dir_store_qp(struct vb_context *ctx, uint32_t qpn, dpu_gva_t mbox, int live);
int vb_publish_all(struct vb_context *ctx, dpu_t *d);
int vb_apply_bytes(struct vb_context *ctx, struct vb_mr *m, uint64_t addr, const void *bytes, uint32_t len);
int vb_apply_from_image(struct vb_context *ctx, dpu_t *d, struct vb_mr *m, uint64_t addr, uint32_t len);
int vb_sge_ok(struct vb_context *ctx, const struct ibv_sge *s, int need_write);

/* qp.c */
int vb_progress(struct vb_context *ctx, dpu_t *d);
int vb_pass(struct vb_context *ctx, dpu_t *d);
void *vb_progress_thread(void *arg);
void *vb_event_thread(void *arg);
int vb_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc);
int vb_req_notify_cq(struct ibv_cq *cq, int solicited_only);
void vb_print_stats(struct vb_context *ctx);
int vb_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
int vb_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
void vb_cq_push(struct vb_cq *cq, const struct ibv_wc *wc);

#endif
