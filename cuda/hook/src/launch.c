/*
 * launch.c — kernel launches under a kernel-time quota.
 *
 * With no quota on any device the launch path is one relaxed load and a
 * branch on top of the driver call (after the process's first launch,
 * which registers its device with the agent). With a quota on the launching device,
 * a launch needs a token: a grant of kernel time from the agent, valid from
 * when it was granted. While the token's end is further away than the
 * estimated length of one launch and the work queued under it fits the
 * grant, launches go straight through (until a launch has been measured,
 * one launch per token). Otherwise the launching thread
 * renews it:
 *
 *   1. it waits (bounded) for the measurement of the previous token: a
 *      tracker thread recorded an event when the token started and records
 *      another when it expires (or at once, when a renewal interrupts it),
 *      waits for the GPU to reach it, and charges as overuse what ran past
 *      the token's end. Events are recorded twice per token, not per launch;
 *   2. it estimates the next burst as the seed does: the measured burst
 *      (an EMA of the busy span per token), doubled when the GPU was idle
 *      less than SCHED_OVERHEAD_NS between bursts (a burst that was cut by
 *      its token rather than finished), capped at a full window;
 *   3. it asks the agent (GPU_KERNEL_QUOTA with the estimate and the
 *      overuse not yet reported). No grant: it sleeps the wait the agent
 *      names and asks again, at most DPU_CUDA_TOKEN_WAIT_MS (10 s) in all,
 *      then launches anyway and the time is charged as overuse. No agent:
 *      it grants itself the estimate, and everything that runs is counted
 *      locally as overuse, re-reported once the agent is back.
 *
 * Launches into a stream under capture are not throttled: they run when
 * the graph is launched, and cuGraphLaunch takes tokens like a launch.
 *
 * Events are recorded on the launch's stream when it is an explicit one,
 * else on the legacy default stream, which waits for the blocking streams
 * of the context (per-thread default streams included).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <time.h>

#include "hook.h"

#define SCHED_OVERHEAD_NS 2000000ull /* the seed's SCHD_OVERHEAD: 2 ms */
#define CU_STREAM_LEGACY ((CUstream)0x1)
#define CU_STREAM_PER_THREAD ((CUstream)0x2)

/* launch_watch is what the launch fast path tests: the devices with a
 * quota, plus one until the first launch of the process has registered its
 * device with the agent (so a process that launches before it allocates
 * still learns its quota). */
_Atomic int launch_watch = 1;
static _Atomic int first_launch = 1;

struct throttle {
    struct device *dev;
    pthread_mutex_t mu;          /* renewals: one launching thread at a time */
    _Atomic uint64_t token_end;  /* CLOCK_MONOTONIC ns; 0: no token */
    _Atomic uint64_t kernel_est; /* estimated length of one launch (ns) */
    _Atomic uint64_t launches;   /* launches under the current token */
    _Atomic uint64_t token_grant;/* the current token's length (ns) */

    /* Shared with the tracker thread, under tmu. */
    pthread_mutex_t tmu;
    pthread_cond_t tcv;
    int armed;      /* a token is being tracked */
    int interrupt;  /* a renewal wants the measurement now */
    uint64_t token_start, grant, charged; /* charged: what the agent accounted (0 for local grants) */
    CUcontext ctx;
    CUstream stream;
    CUevent start, end;
    int timed;          /* the start event was recorded */
    uint64_t overuse;   /* measured and not yet reported */
    double burst_ema;   /* ns */
    uint64_t idle_since;/* when the last measured burst drained; 0: never */
    int tracker;        /* the tracker thread runs */
};

static uint64_t token_wait_ns(void) { return env_u64("DPU_CUDA_TOKEN_WAIT_MS", 10000) * 1000000ull; }
static uint64_t sync_timeout_ns(void) { return env_u64("DPU_CUDA_SYNC_TIMEOUT_MS", 10000) * 1000000ull; }

static void sleep_ns(uint64_t ns) {
    struct timespec ts = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
    }
}

static struct timespec abs_mono(uint64_t ns) {
    struct timespec ts = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
    return ts;
}

void device_set_quota(struct device *d, uint32_t quota, uint64_t window_ns) {
    if (window_ns)
        atomic_store(&d->window_ns, window_ns);
    uint32_t old = atomic_exchange(&d->quota, quota);
    if (old == quota)
        return;
    if (!old)
        atomic_fetch_add(&launch_watch, 1);
    else if (!quota)
        atomic_fetch_sub(&launch_watch, 1);
    LOGF(LOG_INFO, "device %d: kernel quota %u%% (0: unlimited)", d->ordinal, quota);
}

/* estimate_full_burst is the seed's estimate of a whole kernel burst from
 * the measured burst and the idle window before it (negative: unknown). */
static uint64_t estimate_full_burst(double burst_ns, double window_ns) {
    if (burst_ns < 1)
        return 0;
    double full = burst_ns;
    if (window_ns >= 0 && window_ns < (double)SCHED_OVERHEAD_NS)
        full *= 2; /* the GPU is in active use: the burst was cut, not finished */
    return (uint64_t)full;
}

/* ---- the tracker thread: one per device with a quota ---- */

static void *tracker_main(void *arg) {
    struct throttle *t = arg;
    pthread_mutex_lock(&t->tmu);
    for (;;) {
        while (!t->armed)
            pthread_cond_wait(&t->tcv, &t->tmu);
        uint64_t deadline = t->token_start + t->grant;
        struct timespec dl = abs_mono(deadline);
        while (!t->interrupt && mono_ns() < deadline)
            pthread_cond_timedwait(&t->tcv, &t->tmu, &dl);
        CUcontext ctx = t->ctx;
        CUstream s = t->stream;
        CUevent start = t->start, end = t->end;
        int timed = t->timed;
        uint64_t grant = t->grant, charged = t->charged;
        pthread_mutex_unlock(&t->tmu);

        uint64_t launched = atomic_load(&t->launches), elapsed = 0;
        int measured = 0, busy_at_record = 0;
        if (timed && drv.cuCtxSetCurrent(ctx) == CUDA_SUCCESS && drv.cuEventRecord(end, s) == CUDA_SUCCESS) {
            uint64_t limit = mono_ns() + sync_timeout_ns(), nap = 50000;
            CUresult q = drv.cuEventQuery(end);
            busy_at_record = q == CUDA_ERROR_NOT_READY;
            while (q == CUDA_ERROR_NOT_READY && mono_ns() < limit) {
                sleep_ns(nap);
                nap = nap * 2 > 1000000 ? 1000000 : nap * 2;
                q = drv.cuEventQuery(end);
            }
            float ms;
            if (q == CUDA_SUCCESS && drv.cuEventElapsedTime(&ms, start, end) == CUDA_SUCCESS && ms >= 0) {
                elapsed = (uint64_t)((double)ms * 1e6);
                measured = 1;
            } else {
                LOGF(LOG_WARN, "device %d: overuse not measured (%d)", t->dev->ordinal, q);
            }
        }
        uint64_t drained = mono_ns();

        pthread_mutex_lock(&t->tmu);
        if (measured) {
            /* Overuse is the work that ran past the token's end. If the
             * GPU had drained when the end event was recorded, the span
             * measured ends at the recording (the tracker may wake late)
             * and says nothing about overuse: none is charged. A local
             * grant (charged 0) is charged all it measured. */
            uint64_t over = 0;
            if (!charged)
                over = elapsed;
            else if (busy_at_record && elapsed > charged)
                over = elapsed - charged;
            t->overuse += over;
            atomic_fetch_add(&t->dev->kernel_ns, over);
            t->burst_ema = t->burst_ema > 0 ? 0.7 * t->burst_ema + 0.3 * (double)elapsed : (double)elapsed;
            if (launched) {
                uint64_t per = elapsed / launched, est = atomic_load(&t->kernel_est);
                per = per ? per : 1;
                atomic_store(&t->kernel_est, est ? (est * 7 + per * 3) / 10 : per);
            }
            LOGF(LOG_DEBUG, "device %d: token %llu ns, busy %llu ns, overuse %llu ns, %llu launches",
                 t->dev->ordinal, (unsigned long long)grant, (unsigned long long)elapsed,
                 (unsigned long long)over, (unsigned long long)launched);
        }
        t->idle_since = drained;
        t->armed = 0;
        t->interrupt = 0;
        pthread_cond_broadcast(&t->tcv);
    }
    return NULL;
}

static struct throttle *throttle_of(struct device *d) {
    struct throttle *t = atomic_load_explicit(&d->throttle, memory_order_acquire);
    if (t)
        return t;
    t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->dev = d;
    pthread_mutex_init(&t->mu, NULL);
    pthread_mutex_init(&t->tmu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&t->tcv, &ca);
    pthread_condattr_destroy(&ca);
    struct throttle *expected = NULL;
    if (!atomic_compare_exchange_strong(&d->throttle, &expected, t)) {
        free(t);
        return expected;
    }
    return t;
}

/* start_token starts tracking a new token of `grant` ns. tmu held. */
static void start_token(struct throttle *t, CUstream stream, uint64_t grant, uint64_t charged) {
    CUcontext ctx = NULL;
    if (drv.cuCtxGetCurrent)
        drv.cuCtxGetCurrent(&ctx);
    if (ctx != t->ctx || !t->start) {
        if (t->start)
            drv.cuEventDestroy(t->start);
        if (t->end)
            drv.cuEventDestroy(t->end);
        t->start = t->end = NULL;
        if (drv.cuEventCreate(&t->start, CU_EVENT_DEFAULT) != CUDA_SUCCESS ||
            drv.cuEventCreate(&t->end, CU_EVENT_DEFAULT) != CUDA_SUCCESS) {
            LOGF(LOG_WARN, "device %d: no events to measure overuse", t->dev->ordinal);
            t->start = t->end = NULL;
        }
        t->ctx = ctx;
    }
    t->stream = stream == CU_STREAM_LEGACY || stream == CU_STREAM_PER_THREAD ? NULL : stream;
    t->timed = t->start && drv.cuEventRecord(t->start, t->stream) == CUDA_SUCCESS;
    t->token_start = mono_ns();
    t->grant = grant;
    t->charged = charged;
    t->interrupt = 0;
    t->armed = 1;
    if (!t->tracker) {
        pthread_t th;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&th, &attr, tracker_main, t) == 0) {
            t->tracker = 1;
            pthread_setname_np(th, "dpucuda-quota");
        } else {
            t->armed = 0;
            LOGF(LOG_ERROR, "device %d: cannot start the quota tracker", t->dev->ordinal);
        }
        pthread_attr_destroy(&attr);
    }
    pthread_cond_broadcast(&t->tcv);
    atomic_store(&t->launches, 0);
    atomic_store(&t->token_grant, grant);
    atomic_store(&t->token_end, t->token_start + grant);
}

/* renew gets the launching thread a new token. t->mu held. */
static void renew(struct throttle *t, CUstream stream) {
    struct device *d = t->dev;
    pthread_mutex_lock(&t->tmu);
    if (t->armed) {
        t->interrupt = 1;
        pthread_cond_broadcast(&t->tcv);
        struct timespec dl = abs_mono(mono_ns() + sync_timeout_ns() + 1000000000ull);
        while (t->armed && pthread_cond_timedwait(&t->tcv, &t->tmu, &dl) != ETIMEDOUT) {
        }
        if (t->armed) {
            pthread_mutex_unlock(&t->tmu);
            LOGF(LOG_WARN, "device %d: the previous token is still being measured; launching", d->ordinal);
            return;
        }
    }
    uint64_t overuse = t->overuse;
    double burst = t->burst_ema;
    uint64_t idle = t->idle_since;
    pthread_mutex_unlock(&t->tmu);

    uint64_t now = mono_ns();
    uint64_t cap = atomic_load(&d->window_ns) * atomic_load(&d->quota) / 100;
    uint64_t want = estimate_full_burst(burst, idle ? (double)(now - idle) : -1.0);
    if (want > cap)
        want = cap;

    uint64_t grant = 0, charged = 0, waited = 0, max_wait = token_wait_ns();
    for (;;) {
        struct token tok;
        int rc = agent_token(d, want, overuse, &tok);
        if (rc < 0) { /* no agent: grant it locally, charge everything as overuse */
            grant = want ? want : cap;
            break;
        }
        if (overuse) {
            pthread_mutex_lock(&t->tmu);
            t->overuse -= overuse <= t->overuse ? overuse : t->overuse;
            pthread_mutex_unlock(&t->tmu);
            overuse = 0;
        }
        device_set_quota(d, tok.quota, tok.window_ns);
        if (tok.quota == 0)
            return; /* the quota was lifted */
        if (tok.grant_ns) {
            grant = charged = tok.grant_ns;
            break;
        }
        if (waited >= max_wait) {
            LOGF(LOG_WARN, "device %d: no kernel-time token within %llu ms; launching", d->ordinal,
                 (unsigned long long)(max_wait / 1000000));
            grant = want ? want : cap;
            break;
        }
        uint64_t w = tok.wait_ns < max_wait - waited ? tok.wait_ns : max_wait - waited;
        sleep_ns(w);
        waited += w;
    }
    if (charged)
        atomic_fetch_add(&d->kernel_ns, charged);
    pthread_mutex_lock(&t->tmu);
    start_token(t, stream, grant ? grant : 1000000, charged);
    pthread_mutex_unlock(&t->tmu);
}

/* within_token reports whether one more launch fits the current token: its
 * end is further away than one launch, and the work queued under it (the
 * launches so far, one more, at the estimated length each) fits the grant.
 * Launches are asynchronous: without the second test a program could queue
 * any amount of work in one token. */
static int within_token(struct throttle *t) {
    uint64_t est = atomic_load(&t->kernel_est), launched = atomic_load(&t->launches);
    if (!est && launched) /* nothing measured yet: one launch per token until it is */
        return 0;
    return mono_ns() + est < atomic_load(&t->token_end) && (launched + 1) * est <= atomic_load(&t->token_grant);
}

void throttle_launch(CUstream stream) {
    struct device *d = current_device();
    if (atomic_load_explicit(&first_launch, memory_order_relaxed) && atomic_exchange(&first_launch, 0)) {
        if (d) {
            atomic_store(&d->seen, 1);
            agent_refresh(d);
        }
        atomic_fetch_sub(&launch_watch, 1);
    }
    if (!d || !atomic_load_explicit(&d->quota, memory_order_relaxed))
        return;
    /* A launch into a stream being captured runs nothing now (it becomes a
     * graph node, paid for when the graph is launched); recording events
     * beside it could break the capture. */
    int capturing = 0;
    if (stream && drv.cuStreamIsCapturing && drv.cuStreamIsCapturing(stream, &capturing) == CUDA_SUCCESS && capturing)
        return;
    struct throttle *t = throttle_of(d);
    if (!t)
        return;
    if (within_token(t)) {
        atomic_fetch_add_explicit(&t->launches, 1, memory_order_relaxed);
        return;
    }
    pthread_mutex_lock(&t->mu);
    if (!within_token(t))
        renew(t, stream);
    atomic_fetch_add_explicit(&t->launches, 1, memory_order_relaxed);
    pthread_mutex_unlock(&t->mu);
}

/* throttle_synced forgets unreported overuse of d: the agent just took the
 * process's kernel-time total, which includes it. */
void throttle_synced(struct device *d) {
    struct throttle *t = atomic_load(&d->throttle);
    if (!t)
        return;
    pthread_mutex_lock(&t->tmu);
    t->overuse = 0;
    pthread_mutex_unlock(&t->tmu);
}

void throttle_after_fork(void) {
    atomic_store(&launch_watch, 1);
    atomic_store(&first_launch, 1);
}

/* ---- the launch entry points ---- */

#define THROTTLE(stream)                                                                           \
    do {                                                                                           \
        if (__builtin_expect(atomic_load_explicit(&launch_watch, memory_order_relaxed) != 0, 0))   \
            throttle_launch(stream);                                                               \
    } while (0)

DPUCUDA_EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                       unsigned int bx, unsigned int by, unsigned int bz, unsigned int shmem,
                                       CUstream stream, void **params, void **extra) {
    __typeof__(&cuLaunchKernel) real = REAL(cuLaunchKernel);
    if (__builtin_expect(!real, 0))
        return CUDA_ERROR_NOT_INITIALIZED;
    THROTTLE(stream);
    return real(f, gx, gy, gz, bx, by, bz, shmem, stream, params, extra);
}

DPUCUDA_EXPORT CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                            unsigned int bx, unsigned int by, unsigned int bz, unsigned int shmem,
                                            CUstream stream, void **params, void **extra) {
    __typeof__(&cuLaunchKernel_ptsz) real = REAL(cuLaunchKernel_ptsz);
    if (__builtin_expect(!real, 0))
        return CUDA_ERROR_NOT_INITIALIZED;
    THROTTLE(stream);
    return real(f, gx, gy, gz, bx, by, bz, shmem, stream, params, extra);
}

DPUCUDA_EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **params, void **extra) {
    __typeof__(&cuLaunchKernelEx) real = REAL(cuLaunchKernelEx);
    if (__builtin_expect(!real, 0))
        return CUDA_ERROR_NOT_INITIALIZED;
    THROTTLE(config ? config->hStream : NULL);
    return real(config, f, params, extra);
}

DPUCUDA_EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f, void **params,
                                              void **extra) {
    __typeof__(&cuLaunchKernelEx_ptsz) real = REAL(cuLaunchKernelEx_ptsz);
    if (__builtin_expect(!real, 0))
        return CUDA_ERROR_NOT_INITIALIZED;
    THROTTLE(config ? config->hStream : NULL);
    return real(config, f, params, extra);
}

DPUCUDA_EXPORT CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                                  unsigned int bx, unsigned int by, unsigned int bz,
                                                  unsigned int shmem, CUstream stream, void **params) {
    __typeof__(&cuLaunchCooperativeKernel) real = REAL(cuLaunchCooperativeKernel);
    if (__builtin_expect(!real, 0))
        return CUDA_ERROR_NOT_INITIALIZED;
    THROTTLE(stream);
    return real(f, gx, gy, gz, bx, by, bz, shmem, stream, params);
}

DPUCUDA_EXPORT CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy,
                                                       unsigned int gz, unsigned int bx, unsigned int by,
                                                       unsigned int bz, unsigned int shmem, CUstream stream,
                                                       void **params) {
    __typeof__(&cuLaunchCooperativeKernel_ptsz) real = REAL(cuLaunchCooperativeKernel_ptsz);
    if (__builtin_expect(!real, 0))
        return CUDA_ERROR_NOT_INITIALIZED;
    THROTTLE(stream);
    return real(f, gx, gy, gz, bx, by, bz, shmem, stream, params);
}

/* Graph launches run kernels as launches do: they take the same tokens. */
DPUCUDA_EXPORT CUresult cuGraphLaunch(CUgraphExec exec, CUstream stream) {
    __typeof__(&cuGraphLaunch) real = REAL(cuGraphLaunch);
    if (__builtin_expect(!real, 0))
        return CUDA_ERROR_NOT_INITIALIZED;
    THROTTLE(stream);
    return real(exec, stream);
}

DPUCUDA_EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec exec, CUstream stream) {
    __typeof__(&cuGraphLaunch_ptsz) real = REAL(cuGraphLaunch_ptsz);
    if (__builtin_expect(!real, 0))
        return CUDA_ERROR_NOT_INITIALIZED;
    THROTTLE(stream);
    return real(exec, stream);
}
