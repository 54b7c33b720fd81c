/*
 * device.c — the device list, contexts, ports and GIDs, protection domains,
 * completion channels, async events, the verbs' strings, and every public
 * libibverbs call the device does not serve (a clear errno, nothing else).
 */
#define _GNU_SOURCE
#include "internal.h"

#undef ibv_get_device_list
#undef ibv_query_port
#undef ibv_reg_mr
#undef ibv_reg_mr_iova

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define DEV_NAME "dpu0"
#define VENDOR_ID 0x1af4 /* no vendor: an id perftest and others treat as unknown */
#define VENDOR_PART 0xd9u

static struct ibv_device the_device = {
    .node_type = IBV_NODE_CA,
    .transport_type = IBV_TRANSPORT_IB,
    .name = DEV_NAME,
    .dev_name = "dpuverbs0",
    .dev_path = "",
    .ibdev_path = "",
};

uint64_t vb_now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

/* vb_fail prints why a set-up call failed on stderr (where a program's user
 * looks; DPU_VERBS_QUIET=1 silences it), sets errno and returns err. */
static int quiet(void) {
    const char *q = getenv("DPU_VERBS_QUIET");
    return q && strcmp(q, "1") == 0;
}

void vb_log(const char *fmt, ...) {
    if (quiet()) return;
    va_list ap;
    va_start(ap, fmt);
    fputs("libdpuverbs: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

int vb_fail(int err, const char *fmt, ...) {
    if (!quiet()) {
        va_list ap;
        va_start(ap, fmt);
        fputs("libdpuverbs: ", stderr);
        vfprintf(stderr, fmt, ap);
        fprintf(stderr, " (%s)\n", strerror(err));
        va_end(ap);
    }
    errno = err;
    return err;
}

/* vb_errno maps a libdpu result (0 or -errno) to a positive errno. */
int vb_errno(int rc) { return rc < 0 ? -rc : rc; }

struct vb_context *vb_ctx(struct ibv_context *c) {
    return (struct vb_context *)((char *)c - offsetof(struct vb_context, vctx.context));
}

/* ---- devices ---- */

VB_API struct ibv_device **ibv_get_device_list(int *num_devices) {
    struct ibv_device **l = calloc(2, sizeof *l);
    if (!l) {
        errno = ENOMEM;
        return NULL;
    }
    l[0] = &the_device;
    if (num_devices) *num_devices = 1;
    return l;
}

VB_API void ibv_free_device_list(struct ibv_device **list) { free(list); }
VB_API const char *ibv_get_device_name(struct ibv_device *device) { return device ? device->name : NULL; }
VB_API __be64 ibv_get_device_guid(struct ibv_device *device) {
    (void)device;
    return htobe64(0x0064707500000001ull);
}
VB_API int ibv_get_device_index(struct ibv_device *device) { return device == &the_device ? 0 : -1; }

static int query_device_ex(struct ibv_context *c, const struct ibv_query_device_ex_input *in,
                           struct ibv_device_attr_ex *attr, size_t sz);
static int query_port(struct ibv_context *c, uint8_t port, struct ibv_port_attr *attr, size_t sz);

static unsigned page_mode(void) {
    const char *m = getenv("DPU_VERBS_MODE");
    if (!m || !*m) return 0600;
    char *end;
    unsigned long v = strtoul(m, &end, 8);
    if (*end || v == 0 || v > 0777) return 0600;
    return (unsigned)v;
}

VB_API struct ibv_context *ibv_open_device(struct ibv_device *device) {
    if (device != &the_device) {
        vb_fail(ENODEV, "open_device: not a dpu verbs device");
        return NULL;
    }
    struct vb_context *ctx = calloc(1, sizeof *ctx);
    if (!ctx) {
        errno = ENOMEM;
        return NULL;
    }
    ctx->async_pipe[0] = ctx->async_pipe[1] = -1;
    int rc = dpu_open(NULL, &ctx->d);
    if (rc == 0) rc = dpu_open(NULL, &ctx->dp);
    if (rc < 0) {
        vb_fail(vb_errno(rc), "open_device: cannot reach the node's agent at $DPU_SOCKET: %s", dpu_last_error());
        goto fail;
    }
    ctx->machine = dpu_machine(ctx->d);
    ctx->mode = page_mode();
    rc = dpu_alloc_mode(ctx->d, DIR_PAGES * PAGE, ctx->mode, &ctx->dir);
    if (rc < 0) {
        vb_fail(vb_errno(rc), "open_device: allocating the directory: %s", dpu_last_error());
        goto fail;
    }
    uint8_t hdr[DIR_HDR];
    vb_dir_hdr_put(hdr, &(struct vb_dir_hdr){DIR_MAGIC, DIR_VERSION, DIR_PAGES, MAX_QP, MAX_MR});
    rc = dpu_store(ctx->d, ctx->dir, hdr, sizeof hdr);
    if (rc < 0) {
        vb_fail(vb_errno(rc), "open_device: writing the directory: %s", dpu_last_error());
        goto fail;
    }
    uint8_t *g = ctx->gid.raw;
    g[0] = GID_TAG0, g[1] = GID_TAG1, g[2] = GID_TAG2, g[3] = GID_TAG3;
    for (int i = 0; i < 4; i++) g[4 + i] = (uint8_t)(ctx->machine >> (24 - 8 * i));
    for (int i = 0; i < 8; i++) g[8 + i] = (uint8_t)(ctx->dir.lo >> (56 - 8 * i));
    if (pipe2(ctx->async_pipe, O_CLOEXEC) < 0) {
        vb_fail(errno, "open_device: async event pipe");
        goto fail;
    }
    fcntl(ctx->async_pipe[1], F_SETFL, O_NONBLOCK);
    pthread_mutex_init(&ctx->mu, NULL);
    pthread_mutex_init(&ctx->prog_mu, NULL);
    pthread_mutex_init(&ctx->wake_mu, NULL);
    pthread_cond_init(&ctx->wake_cv, NULL);
    pthread_mutex_init(&ctx->poll_mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&ctx->poll_cv, &ca);
    pthread_condattr_destroy(&ca);

    struct verbs_context *v = &ctx->vctx;
    struct ibv_context *c = &v->context;
    c->device = device;
    c->cmd_fd = -1;
    c->async_fd = ctx->async_pipe[0];
    c->num_comp_vectors = 1;
    pthread_mutex_init(&c->mutex, NULL);
    c->abi_compat = __VERBS_ABI_IS_EXTENDED;
    v->sz = sizeof *v;
    v->query_port = query_port;
    v->query_device_ex = query_device_ex;
    c->ops.poll_cq = vb_poll_cq;
    c->ops.req_notify_cq = vb_req_notify_cq;
    c->ops.post_send = vb_post_send;
    c->ops.post_recv = vb_post_recv;

    if (pthread_create(&ctx->thread, NULL, vb_progress_thread, ctx) != 0) {
        vb_fail(EAGAIN, "open_device: starting the progress thread");
        goto fail;
    }
    ctx->thread_started = 1;
    /* The events of the mailboxes' pages (mapped on a connection of their
     * own) wake the passes: a slot is taken when it lands, not at the next
     * paced pass. Without them the passes are paced only. */
    if (dpu_open(NULL, &ctx->de) < 0 || dpu_subscribe(ctx->de, DPU_EVENTS_ALL) < 0) {
        vb_log("open_device: no events from the node (%s): mailboxes are polled", dpu_last_error());
        if (ctx->de) dpu_close(ctx->de);
        ctx->de = NULL;
    } else if ((atomic_store(&ctx->events_on, 1), pthread_create(&ctx->ev_thread, NULL, vb_event_thread, ctx)) != 0) {
        atomic_store(&ctx->events_on, 0);
        dpu_close(ctx->de);
        ctx->de = NULL;
    } else {
        ctx->ev_started = 1;
    }
    return c;
fail:
    if (ctx->dir.lo) dpu_free(ctx->d, ctx->dir);
    if (ctx->d) dpu_close(ctx->d);
    if (ctx->dp) dpu_close(ctx->dp);
    if (ctx->async_pipe[0] >= 0) close(ctx->async_pipe[0]), close(ctx->async_pipe[1]);
    int e = errno;
    free(ctx);
    errno = e;
    return NULL;
}

VB_API int ibv_close_device(struct ibv_context *c) {
    struct vb_context *ctx = vb_ctx(c);
    pthread_mutex_lock(&ctx->mu);
    int busy = ctx->qps || ctx->mrs || ctx->npds || ctx->ncqs || ctx->nchannels;
    pthread_mutex_unlock(&ctx->mu);
    if (busy) {
        /* libibverbs frees a context whatever it holds; the device must give
         * back the fabric pages of what the program left behind. */
        while (ctx->qps) ibv_destroy_qp(&ctx->qps->qp);
        while (ctx->mrs) {
            struct vb_mr *m = ctx->mrs;
            ibv_dereg_mr(&m->mr);
        }
    }
    pthread_mutex_lock(&ctx->wake_mu);
    ctx->stop = 1;
    pthread_cond_signal(&ctx->wake_cv);
    pthread_mutex_unlock(&ctx->wake_mu);
    if (ctx->thread_started) pthread_join(ctx->thread, NULL);
    if (ctx->ev_started) pthread_join(ctx->ev_thread, NULL);
    if (ctx->de) dpu_close(ctx->de);
    vb_print_stats(ctx);
    dpu_free(ctx->d, ctx->dir);
    dpu_close(ctx->d);
    dpu_close(ctx->dp);
    close(ctx->async_pipe[0]);
    close(ctx->async_pipe[1]);
    pthread_cond_destroy(&ctx->poll_cv);
    pthread_mutex_destroy(&ctx->poll_mu);
    free(ctx);
    return 0;
}

/* ---- device and port attributes ---- */

static void fill_device_attr(struct ibv_device_attr *a) {
    memset(a, 0, sizeof *a);
    snprintf(a->fw_ver, sizeof a->fw_ver, "dpu-verbs 1");
    a->node_guid = ibv_get_device_guid(&the_device);
    a->sys_image_guid = a->node_guid;
    a->max_mr_size = 1ull << 40;
    a->page_size_cap = PAGE;
    a->vendor_id = VENDOR_ID;
    a->vendor_part_id = VENDOR_PART;
    a->hw_ver = 1;
    a->max_qp = MAX_QP;
    a->max_qp_wr = 4096;
    a->device_cap_flags = IBV_DEVICE_RC_RNR_NAK_GEN;
    a->max_sge = MAX_SGE;
    a->max_sge_rd = MAX_SGE;
    a->max_cq = 1024;
    a->max_cqe = 1 << 16;
    a->max_mr = MAX_MR;
    a->max_pd = 1024;
    a->max_qp_rd_atom = 16;
    a->max_qp_init_rd_atom = 16;
    a->max_res_rd_atom = 16 * MAX_QP;
    a->atomic_cap = IBV_ATOMIC_HCA;
    a->max_pkeys = 1;
    a->local_ca_ack_delay = 15;
    a->phys_port_cnt = 1;
}

VB_API int ibv_query_device(struct ibv_context *c, struct ibv_device_attr *attr) {
    (void)c;
    fill_device_attr(attr);
    return 0;
}

static int query_device_ex(struct ibv_context *c, const struct ibv_query_device_ex_input *in,
                           struct ibv_device_attr_ex *attr, size_t sz) {
    (void)c;
    if (in && in->comp_mask) return EINVAL;
    if (sz < sizeof attr->orig_attr) return EINVAL;
    memset(attr, 0, sz < sizeof *attr ? sz : sizeof *attr);
    fill_device_attr(&attr->orig_attr);
    return 0;
}

static int query_port(struct ibv_context *c, uint8_t port, struct ibv_port_attr *attr, size_t sz) {
    (void)c;
    if (port != 1) return EINVAL;
    struct ibv_port_attr a = {0};
    a.state = IBV_PORT_ACTIVE;
    a.max_mtu = IBV_MTU_4096;
    a.active_mtu = IBV_MTU_4096;
    a.gid_tbl_len = 1;
    a.port_cap_flags = 0;
    a.max_msg_sz = MAX_MSG;
    a.pkey_tbl_len = 1;
    a.lid = 0;
    a.sm_lid = 0;
    a.lmc = 0;
    a.max_vl_num = 1;
    a.active_width = 2;  /* 4x */
    a.active_speed = 32; /* EDR */
    a.phys_state = 5;    /* LinkUp */
    a.link_layer = IBV_LINK_LAYER_ETHERNET;
    memcpy(attr, &a, sz < sizeof a ? sz : sizeof a);
    return 0;
}

/* The symbol programs built against older headers call. */
VB_API int ibv_query_port(struct ibv_context *c, uint8_t port, struct _compat_ibv_port_attr *attr) {
    struct ibv_port_attr a;
    int rc = query_port(c, port, &a, sizeof a);
    if (rc) return rc;
    /* the old layout ends before the flags field */
    memcpy(attr, &a, offsetof(struct ibv_port_attr, flags));
    return 0;
}

VB_API int ibv_query_gid(struct ibv_context *c, uint8_t port, int index, union ibv_gid *gid) {
    if (port != 1 || index != 0) return -1;
    *gid = vb_ctx(c)->gid;
    return 0;
}

VB_API int _ibv_query_gid_ex(struct ibv_context *c, uint32_t port, uint32_t index, struct ibv_gid_entry *entry,
                             uint32_t flags, size_t entry_size) {
    if (flags) return EINVAL;
    if (port != 1 || index != 0) return ENODATA;
    struct ibv_gid_entry e = {.gid = vb_ctx(c)->gid, .gid_index = 0, .port_num = 1,
                              .gid_type = IBV_GID_TYPE_ROCE_V2, .ndev_ifindex = 0};
    memcpy(entry, &e, entry_size < sizeof e ? entry_size : sizeof e);
    return 0;
}

/* ibv_query_gid_type is libibverbs' private call (driver.h, which Debian does
 * not install) that ibv_devinfo -v makes for each GID: the type as sysfs
 * names it. Left to libibverbs it would read the kernel's device behind the
 * context, which this one has not. */
enum vb_gid_type_sysfs { VB_GID_TYPE_SYSFS_IB_ROCE_V1, VB_GID_TYPE_SYSFS_ROCE_V2 };
VB_API int ibv_query_gid_type(struct ibv_context *c, uint8_t port, unsigned int index, enum vb_gid_type_sysfs *type);

VB_API int ibv_query_gid_type(struct ibv_context *c, uint8_t port, unsigned int index, enum vb_gid_type_sysfs *type) {
    (void)c;
    if (port != 1) {
        errno = EINVAL;
        return -1;
    }
    /* An empty entry reads as RoCE v1, as libibverbs answers for one. */
    *type = index == 0 ? VB_GID_TYPE_SYSFS_ROCE_V2 : VB_GID_TYPE_SYSFS_IB_ROCE_V1;
    return 0;
}

VB_API ssize_t _ibv_query_gid_table(struct ibv_context *c, struct ibv_gid_entry *entries, size_t max_entries,
                                    uint32_t flags, size_t entry_size) {
    if (flags) return -EINVAL;
    if (max_entries < 1) return -EINVAL;
    int rc = _ibv_query_gid_ex(c, 1, 0, entries, 0, entry_size);
    return rc ? -rc : 1;
}

VB_API int ibv_query_pkey(struct ibv_context *c, uint8_t port, int index, __be16 *pkey) {
    (void)c;
    if (port != 1 || index != 0) return -1;
    *pkey = htobe16(0xffff);
    return 0;
}

VB_API int ibv_get_pkey_index(struct ibv_context *c, uint8_t port, __be16 pkey) {
    (void)c;
    return port == 1 && be16toh(pkey) == 0xffff ? 0 : -1;
}

/* ---- protection domains ---- */

VB_API struct ibv_pd *ibv_alloc_pd(struct ibv_context *c) {
    struct vb_pd *p = calloc(1, sizeof *p);
    if (!p) {
        errno = ENOMEM;
        return NULL;
    }
    struct vb_context *ctx = vb_ctx(c);
    p->pd.context = c;
    p->ctx = ctx;
    pthread_mutex_lock(&ctx->mu);
    ctx->npds++;
    pthread_mutex_unlock(&ctx->mu);
    return &p->pd;
}

VB_API int ibv_dealloc_pd(struct ibv_pd *pd) {
    struct vb_pd *p = (struct vb_pd *)pd;
    struct vb_context *ctx = p->ctx;
    pthread_mutex_lock(&ctx->mu);
    if (p->nobjs > 0) {
        pthread_mutex_unlock(&ctx->mu);
        return EBUSY;
    }
    ctx->npds--;
    pthread_mutex_unlock(&ctx->mu);
    free(p);
    return 0;
}

/* ---- completion channels and async events ---- */

VB_API struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *c) {
    struct vb_channel *ch = calloc(1, sizeof *ch);
    int fds[2];
    if (!ch || pipe2(fds, O_CLOEXEC) < 0) {
        free(ch);
        errno = ENOMEM;
        return NULL;
    }
    /* The device writes a CQ pointer to wfd per event (never blocking: a
     * full pipe means the program has events enough to read); the program
     * polls and reads ch.fd. */
    fcntl(fds[1], F_SETFL, O_NONBLOCK);
    ch->ch.context = c;
    ch->ch.fd = fds[0];
    ch->wfd = fds[1];
    struct vb_context *ctx = vb_ctx(c);
    pthread_mutex_lock(&ctx->mu);
    ctx->nchannels++;
    pthread_mutex_unlock(&ctx->mu);
    return &ch->ch;
}

VB_API int ibv_destroy_comp_channel(struct ibv_comp_channel *c) {
    struct vb_channel *ch = (struct vb_channel *)c;
    struct vb_context *ctx = vb_ctx(c->context);
    if (ch->ch.refcnt > 0) return EBUSY;
    close(ch->ch.fd);
    close(ch->wfd);
    pthread_mutex_lock(&ctx->mu);
    ctx->nchannels--;
    pthread_mutex_unlock(&ctx->mu);
    free(ch);
    return 0;
}

VB_API int ibv_get_cq_event(struct ibv_comp_channel *ch, struct ibv_cq **cq, void **cq_context) {
    struct ibv_cq *got;
    ssize_t n = read(ch->fd, &got, sizeof got);
    if (n != (ssize_t)sizeof got) return -1;
    *cq = got;
    *cq_context = got->cq_context;
    return 0;
}

VB_API void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int nevents) {
    struct vb_cq *q = (struct vb_cq *)cq;
    pthread_mutex_lock(&q->mu);
    q->acked += nevents;
    pthread_mutex_unlock(&q->mu);
}

struct async_msg {
    int type;
    void *obj;
};

void vb_async(struct vb_context *ctx, enum ibv_event_type type, void *obj) {
    struct async_msg m = {type, obj};
    ssize_t n = write(ctx->async_pipe[1], &m, sizeof m);
    (void)n; /* a full pipe drops the event: the program is not reading them */
}

VB_API int ibv_get_async_event(struct ibv_context *c, struct ibv_async_event *event) {
    struct async_msg m;
    if (read(c->async_fd, &m, sizeof m) != (ssize_t)sizeof m) return -1;
    memset(event, 0, sizeof *event);
    event->event_type = (enum ibv_event_type)m.type;
    switch (m.type) {
    case IBV_EVENT_CQ_ERR: event->element.cq = m.obj; break;
    case IBV_EVENT_DEVICE_FATAL: break;
    default: event->element.qp = m.obj; break;
    }
    return 0;
}

VB_API void ibv_ack_async_event(struct ibv_async_event *event) { (void)event; }

/* ---- fork ---- */

VB_API int ibv_fork_init(void) { return 0; }
VB_API enum ibv_fork_status ibv_is_fork_initialized(void) { return IBV_FORK_UNNEEDED; }

/* ---- strings and rates ---- */

VB_API const char *ibv_wc_status_str(enum ibv_wc_status status) {
    static const char *const s[] = {
        [IBV_WC_SUCCESS] = "success", [IBV_WC_LOC_LEN_ERR] = "local length error",
        [IBV_WC_LOC_QP_OP_ERR] = "local QP operation error", [IBV_WC_LOC_EEC_OP_ERR] = "local EE context operation error",
        [IBV_WC_LOC_PROT_ERR] = "local protection error", [IBV_WC_WR_FLUSH_ERR] = "Work Request Flushed Error",
        [IBV_WC_MW_BIND_ERR] = "memory management operation error", [IBV_WC_BAD_RESP_ERR] = "bad response error",
        [IBV_WC_LOC_ACCESS_ERR] = "local access error", [IBV_WC_REM_INV_REQ_ERR] = "remote invalid request error",
        [IBV_WC_REM_ACCESS_ERR] = "remote access error", [IBV_WC_REM_OP_ERR] = "remote operation error",
        [IBV_WC_RETRY_EXC_ERR] = "transport retry counter exceeded", [IBV_WC_RNR_RETRY_EXC_ERR] = "RNR retry counter exceeded",
        [IBV_WC_LOC_RDD_VIOL_ERR] = "local RDD violation error", [IBV_WC_REM_INV_RD_REQ_ERR] = "remote invalid RD request",
        [IBV_WC_REM_ABORT_ERR] = "aborted error", [IBV_WC_INV_EECN_ERR] = "invalid EE context number",
        [IBV_WC_INV_EEC_STATE_ERR] = "invalid EE context state", [IBV_WC_FATAL_ERR] = "fatal error",
        [IBV_WC_RESP_TIMEOUT_ERR] = "response timeout error", [IBV_WC_GENERAL_ERR] = "general error",
        [IBV_WC_TM_ERR] = "TM error", [IBV_WC_TM_RNDV_INCOMPLETE] = "TM software rendezvous",
    };
    if ((unsigned)status < sizeof s / sizeof s[0] && s[status]) return s[status];
    return "unknown";
}

VB_API const char *ibv_node_type_str(enum ibv_node_type t) {
    switch (t) {
    case IBV_NODE_CA: return "InfiniBand channel adapter";
    case IBV_NODE_SWITCH: return "InfiniBand switch";
    case IBV_NODE_ROUTER: return "InfiniBand router";
    case IBV_NODE_RNIC: return "iWARP NIC";
    case IBV_NODE_USNIC: return "usNIC";
    case IBV_NODE_USNIC_UDP: return "usNIC UDP";
    case IBV_NODE_UNSPECIFIED: return "unspecified";
    default: return "unknown";
    }
}

VB_API const char *ibv_port_state_str(enum ibv_port_state s) {
    static const char *const n[] = {"PORT_NOP", "PORT_DOWN", "PORT_INIT", "PORT_ARMED", "PORT_ACTIVE", "PORT_ACTIVE_DEFER"};
    return (unsigned)s < 6 ? n[s] : "unknown";
}

VB_API const char *ibv_event_type_str(enum ibv_event_type e) {
    static const char *const n[] = {
        [IBV_EVENT_CQ_ERR] = "CQ error", [IBV_EVENT_QP_FATAL] = "local work queue catastrophic error",
        [IBV_EVENT_QP_REQ_ERR] = "invalid request local work queue error", [IBV_EVENT_QP_ACCESS_ERR] = "local access violation work queue error",
        [IBV_EVENT_COMM_EST] = "communication established", [IBV_EVENT_SQ_DRAINED] = "send queue drained",
        [IBV_EVENT_PATH_MIG] = "path migrated", [IBV_EVENT_PATH_MIG_ERR] = "path migration request error",
        [IBV_EVENT_DEVICE_FATAL] = "local catastrophic error", [IBV_EVENT_PORT_ACTIVE] = "port active",
        [IBV_EVENT_PORT_ERR] = "port error", [IBV_EVENT_LID_CHANGE] = "LID change",
        [IBV_EVENT_PKEY_CHANGE] = "P_Key change", [IBV_EVENT_SM_CHANGE] = "SM change",
        [IBV_EVENT_SRQ_ERR] = "SRQ catastrophic error", [IBV_EVENT_SRQ_LIMIT_REACHED] = "SRQ limit reached",
        [IBV_EVENT_QP_LAST_WQE_REACHED] = "last WQE reached", [IBV_EVENT_CLIENT_REREGISTER] = "client reregistration",
        [IBV_EVENT_GID_CHANGE] = "GID table change", [IBV_EVENT_WQ_FATAL] = "WQ fatal",
    };
    if ((unsigned)e < sizeof n / sizeof n[0] && n[e]) return n[e];
    return "unknown";
}

static const struct { enum ibv_rate r; int mult, mbps; } rates[] = {
    {IBV_RATE_2_5_GBPS, 1, 2500}, {IBV_RATE_5_GBPS, 2, 5000}, {IBV_RATE_10_GBPS, 4, 10000},
    {IBV_RATE_20_GBPS, 8, 20000}, {IBV_RATE_30_GBPS, 12, 30000}, {IBV_RATE_40_GBPS, 16, 40000},
    {IBV_RATE_60_GBPS, 24, 60000}, {IBV_RATE_80_GBPS, 32, 80000}, {IBV_RATE_120_GBPS, 48, 120000},
    {IBV_RATE_14_GBPS, 0, 14062}, {IBV_RATE_56_GBPS, 0, 56250}, {IBV_RATE_112_GBPS, 0, 112500},
    {IBV_RATE_168_GBPS, 0, 168750}, {IBV_RATE_25_GBPS, 0, 25781}, {IBV_RATE_100_GBPS, 0, 103125},
    {IBV_RATE_200_GBPS, 0, 206250}, {IBV_RATE_300_GBPS, 0, 309375}, {IBV_RATE_28_GBPS, 0, 28125},
    {IBV_RATE_50_GBPS, 0, 53125}, {IBV_RATE_400_GBPS, 0, 425000}, {IBV_RATE_600_GBPS, 0, 637500},
};

VB_API int ibv_rate_to_mult(enum ibv_rate rate) {
    for (size_t i = 0; i < sizeof rates / sizeof rates[0]; i++)
        if (rates[i].r == rate && rates[i].mult) return rates[i].mult;
    return -1;
}
VB_API enum ibv_rate mult_to_ibv_rate(int mult) {
    for (size_t i = 0; i < sizeof rates / sizeof rates[0]; i++)
        if (rates[i].mult == mult && mult) return rates[i].r;
    return IBV_RATE_MAX;
}
VB_API int ibv_rate_to_mbps(enum ibv_rate rate) {
    for (size_t i = 0; i < sizeof rates / sizeof rates[0]; i++)
        if (rates[i].r == rate) return rates[i].mbps;
    return -1;
}
VB_API enum ibv_rate mbps_to_ibv_rate(int mbps) {
    for (size_t i = 0; i < sizeof rates / sizeof rates[0]; i++)
        if (rates[i].mbps == mbps) return rates[i].r;
    return IBV_RATE_MAX;
}

/* ---- what the device does not serve ---- */

#define UNSUPPORTED_PTR(what) \
    do { vb_fail(EOPNOTSUPP, "%s is not supported by the dpu verbs device", what); return NULL; } while (0)

VB_API struct ibv_srq *ibv_create_srq(struct ibv_pd *pd, struct ibv_srq_init_attr *a) {
    (void)pd, (void)a;
    UNSUPPORTED_PTR("a shared receive queue (ibv_create_srq)");
}
VB_API int ibv_modify_srq(struct ibv_srq *s, struct ibv_srq_attr *a, int m) { (void)s, (void)a, (void)m; return EOPNOTSUPP; }
VB_API int ibv_query_srq(struct ibv_srq *s, struct ibv_srq_attr *a) { (void)s, (void)a; return EOPNOTSUPP; }
VB_API int ibv_destroy_srq(struct ibv_srq *s) { (void)s; return EINVAL; }
VB_API struct ibv_ah *ibv_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *a) {
    (void)pd, (void)a;
    UNSUPPORTED_PTR("an address handle (UD; ibv_create_ah)");
}
VB_API int ibv_destroy_ah(struct ibv_ah *ah) { (void)ah; return EINVAL; }
VB_API struct ibv_ah *ibv_create_ah_from_wc(struct ibv_pd *pd, struct ibv_wc *wc, struct ibv_grh *grh, uint8_t port) {
    (void)pd, (void)wc, (void)grh, (void)port;
    UNSUPPORTED_PTR("an address handle (UD; ibv_create_ah_from_wc)");
}
VB_API int ibv_init_ah_from_wc(struct ibv_context *c, uint8_t port, struct ibv_wc *wc, struct ibv_grh *grh,
                               struct ibv_ah_attr *a) {
    (void)c, (void)port, (void)wc, (void)grh, (void)a;
    return vb_fail(EOPNOTSUPP, "ibv_init_ah_from_wc (UD) is not supported by the dpu verbs device"), -1;
}
VB_API int ibv_attach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid) {
    (void)qp, (void)gid, (void)lid;
    return EOPNOTSUPP;
}
VB_API int ibv_detach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid) {
    (void)qp, (void)gid, (void)lid;
    return EOPNOTSUPP;
}
VB_API int ibv_resize_cq(struct ibv_cq *cq, int cqe) { (void)cq, (void)cqe; return EOPNOTSUPP; }
VB_API int ibv_rereg_mr(struct ibv_mr *mr, int flags, struct ibv_pd *pd, void *addr, size_t length, int access) {
    (void)mr, (void)flags, (void)pd, (void)addr, (void)length, (void)access;
    errno = EOPNOTSUPP;
    return IBV_REREG_MR_ERR_INPUT;
}
VB_API struct ibv_mr *ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t length, uint64_t iova, int fd,
                                        int access) {
    (void)pd, (void)offset, (void)length, (void)iova, (void)fd, (void)access;
    UNSUPPORTED_PTR("dma-buf memory (ibv_reg_dmabuf_mr)");
}
VB_API struct ibv_qp_ex *ibv_qp_to_qp_ex(struct ibv_qp *qp) {
    (void)qp;
    UNSUPPORTED_PTR("the extended post API (ibv_qp_to_qp_ex; use ibv_post_send)");
}
VB_API int ibv_query_ece(struct ibv_qp *qp, struct ibv_ece *ece) { (void)qp, (void)ece; return EOPNOTSUPP; }
VB_API int ibv_set_ece(struct ibv_qp *qp, struct ibv_ece *ece) { (void)qp, (void)ece; return EOPNOTSUPP; }
VB_API int ibv_query_qp_data_in_order(struct ibv_qp *qp, enum ibv_wr_opcode op, uint32_t flags) {
    (void)qp, (void)op, (void)flags;
    return 0;
}
VB_API struct ibv_context *ibv_import_device(int cmd_fd) { (void)cmd_fd; UNSUPPORTED_PTR("ibv_import_device"); }
VB_API struct ibv_pd *ibv_import_pd(struct ibv_context *c, uint32_t h) { (void)c, (void)h; UNSUPPORTED_PTR("ibv_import_pd"); }
VB_API void ibv_unimport_pd(struct ibv_pd *pd) { (void)pd; }
VB_API struct ibv_mr *ibv_import_mr(struct ibv_pd *pd, uint32_t h) { (void)pd, (void)h; UNSUPPORTED_PTR("ibv_import_mr"); }
VB_API void ibv_unimport_mr(struct ibv_mr *mr) { (void)mr; }
VB_API struct ibv_dm *ibv_import_dm(struct ibv_context *c, uint32_t h) { (void)c, (void)h; UNSUPPORTED_PTR("ibv_import_dm"); }
VB_API void ibv_unimport_dm(struct ibv_dm *dm) { (void)dm; }
VB_API int ibv_resolve_eth_l2_from_gid(struct ibv_context *c, struct ibv_ah_attr *a, uint8_t eth_mac[6], uint16_t *vid) {
    (void)c, (void)a, (void)eth_mac, (void)vid;
    return EOPNOTSUPP;
}
