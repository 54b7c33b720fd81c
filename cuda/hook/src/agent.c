/*
 * agent.c — the hook's connection to the dpu-agent over dpu0.sock.
 *
 * The connection is libdpu's (dpu_open, dpu_call): this file only builds
 * the GPU op bodies (gpu_wire.h). Calls are serialised on one mutex, so the
 * totals a report carries are read in the order the agent receives them.
 *
 * The program never waits for an absent agent: calls fail at once with
 * -ENOTCONN while disconnected and the hook works on what it last heard
 * (limits) and counts locally (usage, kernel time). A background thread
 * connects with exponential backoff (DPU_CUDA_BACKOFF_MS, 50 ms doubling up
 * to 2 s) and, once connected, first re-reports the totals of every device
 * the process used (GPU_MEM_UPDATE sync), so usage survives an agent
 * restart; then it refreshes limits every DPU_CUDA_REFRESH_MS (1 s), which
 * is how a limit set with dpuctl reaches a process that is not allocating,
 * and reconciles each used device's charge with the driver's figure
 * (mem.c's true usage), outside the connection's lock.
 * Every call is bounded by DPU_CUDA_TIMEOUT_MS (2 s); a call that fails on
 * the connection drops it and wakes the background thread.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dpu.h"
#include "gpu_wire.h"
#include "hook.h"

static pthread_mutex_t conn_mu = PTHREAD_MUTEX_INITIALIZER; /* serialises calls; guards the below */
static dpu_t *conn;
static int unsupported; /* the agent answers GPU ops with ENOSYS */
static int ever_connected;

static pthread_mutex_t bg_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t bg_cv;
static int bg_kick;
static int bg_attempted;
static _Atomic pid_t bg_pid; /* the process whose background thread runs */

static int timeout_ms, refresh_ms, backoff_max_ms, connect_wait_ms;

static int is_conn_error(int rc) {
    switch (-rc) {
    case ECONNRESET: case EPIPE: case ENOTCONN: case ETIMEDOUT: case EBADF: case ECONNREFUSED: case ENOTSOCK:
    case ESHUTDOWN:
        return 1;
    }
    return 0;
}

static void kick(void) {
    pthread_mutex_lock(&bg_mu);
    bg_kick = 1;
    pthread_cond_signal(&bg_cv);
    pthread_mutex_unlock(&bg_mu);
}

/* call_op sends one GPU op on the connection; an agent that does not know
 * an optional op (a later one than the accounting's) answers it ENOSYS
 * without the accounting being taken for absent. conn_mu held. */
static int call_op(uint16_t op, int optional, const uint8_t *body, size_t len, uint8_t *rep, size_t cap,
                   size_t *rlen) {
    if (!conn)
        return -ENOTCONN;
    if (unsupported)
        return -ENOSYS;
    int rc = dpu_call(conn, op, body, len, rep, cap, rlen);
    if (rc == -ENOSYS && optional) {
        LOGF(LOG_DEBUG, "the agent does not serve GPU op %u", op);
    } else if (rc == -ENOSYS) {
        LOGF(LOG_WARN, "the agent serves no GPU accounting; running without limits");
        unsupported = 1;
    } else if (is_conn_error(rc)) {
        LOGF(LOG_WARN, "lost the agent (%s); counting locally until it is back", dpu_strerror(rc));
        dpu_close(conn);
        conn = NULL;
        kick();
    } else if (rc < 0) {
        LOGF(LOG_WARN, "GPU op %u refused: %s", op, dpu_last_error());
    }
    return rc;
}

static int call(uint16_t op, const uint8_t *body, size_t len, uint8_t *rep, size_t cap, size_t *rlen) {
    return call_op(op, 0, body, len, rep, cap, rlen);
}

static void apply_limits(struct device *d, const struct gpu_limits *l) {
    atomic_store(&d->others, l->others);
    uint64_t old = atomic_exchange(&d->limit, l->memory);
    if (old != l->memory)
        LOGF(LOG_INFO, "device %d: memory limit %llu bytes (0: unlimited)", d->ordinal,
             (unsigned long long)l->memory);
    device_set_quota(d, l->quota, l->window_ns);
}

static void device_uuid(struct device *d, unsigned char uuid[16]) {
    pthread_mutex_lock(&d->mu);
    memcpy(uuid, d->uuid, 16);
    pthread_mutex_unlock(&d->mu);
}

static int refresh_locked(struct device *d) {
    uint8_t body[GPU_LIMIT_REQ_LEN], rep[256];
    unsigned char uuid[16];
    size_t n = 0;
    device_uuid(d, uuid);
    gw_device(body, (uint32_t)d->ordinal, uuid);
    int rc = call(GPU_OP_MEM_LIMIT, body, sizeof body, rep, sizeof rep, &n);
    struct gpu_limits l;
    if (rc == 0 && gw_limits(rep, n, &l) == 0)
        apply_limits(d, &l);
    return rc;
}

static int report_locked(struct device *d, uint32_t kind, uint64_t bytes) {
    uint8_t body[GPU_UPDATE_REQ_LEN], rep[256];
    unsigned char uuid[16];
    size_t n = 0;
    device_uuid(d, uuid);
    pthread_mutex_lock(&d->mu);
    uint64_t total = d->used;
    pthread_mutex_unlock(&d->mu);
    uint64_t kernel = kind == UPDATE_SYNC ? atomic_load(&d->kernel_ns) : 0;
    gw_update(body, (uint32_t)d->ordinal, uuid, kind, bytes, total, kernel);
    int rc = call(GPU_OP_MEM_UPDATE, body, sizeof body, rep, sizeof rep, &n);
    struct gpu_limits l;
    if (rc == 0 && gw_limits(rep, n, &l) == 0)
        apply_limits(d, &l);
    if (rc == 0 && kind == UPDATE_SYNC)
        throttle_synced(d);
    return rc;
}

/* connect_locked opens the connection and re-reports every used device. */
static int connect_locked(void) {
    dpu_t *d = NULL;
    int rc = dpu_open(NULL, &d);
    if (rc < 0) {
        LOGF(LOG_DEBUG, "agent not reachable: %s", dpu_last_error());
        return rc;
    }
    dpu_set_timeout(d, timeout_ms);
    conn = d;
    unsupported = 0;
    int synced = 0;
    for (int i = 0; i < DPUCUDA_ACCOUNTS && conn; i++) {
        struct device *dev = i == DPUCUDA_HOST_DEVICE ? host_memory() : device_peek(i);
        if (!atomic_load(&dev->seen))
            continue;
        if (report_locked(dev, UPDATE_SYNC, 0) == 0)
            synced++;
    }
    if (!conn)
        return -ECONNRESET;
    LOGF(LOG_DEBUG, "connect: synced %d, ever %d", synced, ever_connected);
    if (ever_connected || synced)
        LOGF(LOG_INFO, "connected to the agent; re-reported %d device(s)", synced);
    ever_connected = 1;
    return 0;
}

static void *bg_main(void *arg) {
    (void)arg;
    uint64_t backoff = 50;
    for (;;) {
        pthread_mutex_lock(&conn_mu);
        if (!conn) {
            connect_locked();
        } else {
            for (int i = 0; i < DPUCUDA_ACCOUNTS && conn; i++) {
                struct device *d = i == DPUCUDA_HOST_DEVICE ? host_memory() : device_peek(i);
                if (atomic_load(&d->seen))
                    refresh_locked(d);
            }
        }
        int connected = conn != NULL;
        pthread_mutex_unlock(&conn_mu);
        for (int i = 0; i < DPUCUDA_MAX_DEVICES; i++) {
            struct device *d = device_peek(i);
            if (atomic_load(&d->seen))
                usage_reconcile(d); /* the driver's own growth, between allocations too */
        }

        uint64_t wait = connected ? (uint64_t)refresh_ms : backoff;
        backoff = connected ? 50 : (backoff * 2 > (uint64_t)backoff_max_ms ? (uint64_t)backoff_max_ms : backoff * 2);
        struct timespec dl;
        clock_gettime(CLOCK_MONOTONIC, &dl);
        dl.tv_sec += (time_t)(wait / 1000);
        dl.tv_nsec += (long)(wait % 1000) * 1000000L;
        if (dl.tv_nsec >= 1000000000L) {
            dl.tv_sec++;
            dl.tv_nsec -= 1000000000L;
        }
        pthread_mutex_lock(&bg_mu);
        bg_attempted = 1;
        pthread_cond_broadcast(&bg_cv);
        while (!bg_kick && pthread_cond_timedwait(&bg_cv, &bg_mu, &dl) != ETIMEDOUT) {
        }
        bg_kick = 0;
        pthread_mutex_unlock(&bg_mu);
    }
    return NULL;
}

/* ensure_started starts the background thread of this process (again in a
 * child after fork) and waits a bounded time for its first attempt. */
static void ensure_started(void) {
    pid_t me = getpid();
    if (atomic_load_explicit(&bg_pid, memory_order_acquire) == me)
        return;
    static pthread_mutex_t start_mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&start_mu);
    if (atomic_load(&bg_pid) != me) {
        timeout_ms = (int)env_u64("DPU_CUDA_TIMEOUT_MS", 2000);
        refresh_ms = (int)env_u64("DPU_CUDA_REFRESH_MS", 1000);
        backoff_max_ms = (int)env_u64("DPU_CUDA_BACKOFF_MS", 2000);
        connect_wait_ms = (int)env_u64("DPU_CUDA_CONNECT_WAIT_MS", 2000);
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&bg_cv, &ca);
        pthread_condattr_destroy(&ca);
        bg_attempted = 0;
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        int rc = pthread_create(&t, &attr, bg_main, NULL);
        pthread_attr_destroy(&attr);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        if (rc != 0) {
            LOGF(LOG_ERROR, "cannot start the agent thread: %s", strerror(rc));
        } else {
            pthread_setname_np(t, "dpucuda-agent");
            struct timespec dl;
            clock_gettime(CLOCK_MONOTONIC, &dl);
            dl.tv_sec += connect_wait_ms / 1000;
            dl.tv_nsec += (long)(connect_wait_ms % 1000) * 1000000L;
            if (dl.tv_nsec >= 1000000000L) {
                dl.tv_sec++;
                dl.tv_nsec -= 1000000000L;
            }
            pthread_mutex_lock(&bg_mu);
            while (!bg_attempted && pthread_cond_timedwait(&bg_cv, &bg_mu, &dl) != ETIMEDOUT) {
            }
            pthread_mutex_unlock(&bg_mu);
        }
        atomic_store_explicit(&bg_pid, me, memory_order_release);
    }
    pthread_mutex_unlock(&start_mu);
}

void agent_start(void) { ensure_started(); }

int agent_refresh(struct device *d) {
    ensure_started();
    pthread_mutex_lock(&conn_mu);
    int rc = refresh_locked(d);
    pthread_mutex_unlock(&conn_mu);
    return rc;
}

int agent_report(struct device *d, uint32_t kind, uint64_t bytes) {
    ensure_started();
    pthread_mutex_lock(&conn_mu);
    int rc = report_locked(d, kind, bytes);
    pthread_mutex_unlock(&conn_mu);
    return rc;
}

int agent_token(struct device *d, uint64_t want_ns, uint64_t overuse_ns, struct token *t) {
    ensure_started();
    uint8_t body[GPU_QUOTA_REQ_LEN], rep[256];
    unsigned char uuid[16];
    size_t n = 0;
    device_uuid(d, uuid);
    gw_quota(body, (uint32_t)d->ordinal, uuid, want_ns, overuse_ns);
    pthread_mutex_lock(&conn_mu);
    int rc = call(GPU_OP_KERNEL_QUOTA, body, sizeof body, rep, sizeof rep, &n);
    pthread_mutex_unlock(&conn_mu);
    struct gpu_token g;
    if (rc == 0) {
        if (gw_token(rep, n, &g) != 0)
            return -EPROTO;
        t->grant_ns = g.grant_ns;
        t->wait_ns = g.wait_ns;
        t->quota = g.quota;
        t->window_ns = g.window_ns;
    }
    return rc;
}

int agent_procs(struct device *d, uint32_t *pids, uint64_t *bytes, int cap) {
    ensure_started();
    uint8_t body[GPU_PROCS_REQ_LEN], rep[GPU_PROCS_HEAD_LEN + GPU_MAX_PROCS * GPU_PROC_LEN];
    unsigned char uuid[16];
    size_t n = 0;
    device_uuid(d, uuid);
    gw_device(body, (uint32_t)d->ordinal, uuid);
    pthread_mutex_lock(&conn_mu);
    int rc = call_op(GPU_OP_MEM_PROCS, 1, body, sizeof body, rep, sizeof rep, &n);
    pthread_mutex_unlock(&conn_mu);
    if (rc < 0)
        return rc;
    int k = gw_procs(rep, n, pids, bytes, cap);
    return k < 0 ? -EPROTO : k;
}

/* agent_after_fork forgets the parent's connection in a child: the socket
 * is shared with the parent, so it is neither used nor shut down here. */
void agent_after_fork(void) {
    pthread_mutex_init(&conn_mu, NULL);
    pthread_mutex_init(&bg_mu, NULL);
    conn = NULL;
    unsupported = 0;
    bg_kick = 0;
    atomic_store(&bg_pid, 0);
}
