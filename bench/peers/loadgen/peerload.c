/*
 * peerload — the load generator of the peer benchmark (bench/peers/run.sh).
 *
 * One measuring loop for every system compared, so that the dpu and its
 * peers are timed the same way: N client threads, each with its own
 * connection, issue one compare-and-swap after another on a word of their
 * own (so every CAS succeeds; or, for the dpu's ownership transfers, one
 * transfer after another of a page of their own), for a fixed time after a
 * warm-up. Every
 * operation that starts and ends inside the measured window is timed; the
 * report is the p50 and p99 of those round trips over all clients and the
 * operations per second of all clients together.
 *
 *   peerload dpu SOCK OWNER_SOCK   dpu_cas64 through libdpu at the node whose
 *                                  host socket is SOCK, on a page allocated
 *                                  through OWNER_SOCK (so owned by that node)
 *   peerload transfer SOCK_A SOCK_B  4 KiB ownership transfers: each client owns
 *                                  a page of its own and moves it back and
 *                                  forth, one operation being dpu_acquire of
 *                                  the page at the node that does not own it
 *                                  (the page's 4 KiB travel to it), then
 *                                  dpu_release there
 *   peerload store SOCK OWNER_SOCK BYTES  bulk stores: each client allocates
 *                                  BYTES through OWNER_SOCK (owned by that node)
 *                                  and stores all of them (one dpu_store) again
 *                                  and again from the node of SOCK; the report
 *                                  adds bytes=BYTES and mb_s, the megabytes per
 *                                  second of all clients together
 *   peerload echo PATH             SOCK_SEQPACKET echo of a 48-byte message
 *   peerload echo-server PATH      the echo's other process (runs until killed)
 *   peerload redis HOST:PORT       Redis: EVALSHA of a compare-and-swap Lua script
 *   peerload memcached HOST:PORT   memcached text protocol: gets, then cas
 *   peerload transport SOCK        open one libdpu connection, do one call and
 *                                  say which transport it uses: "ring" or "socket"
 *   peerload freeport              print a free TCP port on 127.0.0.1
 *
 * Options (before the mode): -c CLIENTS (1), -t SECONDS (1.0), -w WARMUP (0.2),
 * -e EXTEND (5.0): a window in which fewer than 50 operations complete is
 * stretched until they do, by at most EXTEND seconds (up to 5 s while none
 * has completed).
 * Output, one line: "result kind=... clients=... ops=... secs=... ops_s=...
 * p50_us=... p99_us=... errors=... [transport=... hops=...]".
 *
 * Transport: libdpu uses shared-memory rings when the agent offers them
 * (DPU_RINGS=0 forces the socket). Whatever the library's API, a ring is a
 * shared memory area the host writes into: the probe looks for a memfd
 * mapped shared and writable in this process after the connection's first
 * call (the status table and replica pages of the socket transport are
 * mapped read-only).
 */
#define _GNU_SOURCE
#include "dpu.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define MAX_CLIENTS 256
#define OP_TIMEOUT_MS 5000

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void die(const char *fmt, const char *arg) {
    fprintf(stderr, "peerload: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n");
    exit(1);
}

/* ---- the measuring loop ---- */

struct client;
typedef int (*op_fn)(struct client *c); /* one operation; 0 ok, <0 failed */

struct client {
    int id;
    op_fn op;
    void *conn; /* per-mode connection state */
    double *lat; /* latencies (s) of operations inside the window */
    size_t n, cap;
    long errors;
    char err[160];
};

/* The measured window is [t_start, t_end). When fewer than MIN_OPS
 * operations fit in it (a slow configuration), it grows until they do, by at
 * most max_extend seconds, so that every figure stands on some samples; and
 * while none has completed, by up to the operation timeout. */
#define MIN_OPS 50

static double max_extend = 5.0; /* -e */

static struct {
    double t_start;
    _Atomic long long t_end_ns;
    atomic_long recorded;
    pthread_barrier_t ready;
    atomic_int stop;
} run;

static double t_end(void) { return (double)atomic_load_explicit(&run.t_end_ns, memory_order_relaxed) * 1e-9; }

static void record(struct client *c, double s) {
    if (c->n == c->cap) {
        c->cap = c->cap ? c->cap * 2 : 4096;
        c->lat = realloc(c->lat, c->cap * sizeof *c->lat);
        if (!c->lat) die("%s", "out of memory");
    }
    c->lat[c->n++] = s;
    atomic_fetch_add_explicit(&run.recorded, 1, memory_order_relaxed);
}

static void *client_main(void *arg) {
    struct client *c = arg;
    pthread_barrier_wait(&run.ready);
    while (!atomic_load_explicit(&run.stop, memory_order_relaxed)) {
        double s = now_s();
        if (s >= t_end()) break;
        int rc = c->op(c);
        double e = now_s();
        if (rc < 0) {
            c->errors++;
            if (c->errors > 100) break; /* a broken peer: stop, the report says so */
            continue;
        }
        if (s >= run.t_start && e <= t_end()) record(c, e - s);
    }
    return NULL;
}

static void sleep_s(double d) {
    if (d <= 0) return;
    struct timespec ts = {.tv_sec = (time_t)d, .tv_nsec = (long)((d - (double)(time_t)d) * 1e9)};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {
    }
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static const char *kind_name;

struct result {
    size_t ops;
    double window; /* seconds measured */
    double p50, p99; /* seconds */
    long errors;
};

/* measure runs the clients (connections already made) and returns what
 * they measured. */
static struct result measure(struct client *cs, int n, double secs, double warm) {
    pthread_t th[MAX_CLIENTS];
    pthread_barrier_init(&run.ready, NULL, (unsigned)n + 1);
    for (int i = 0; i < n; i++)
        if (pthread_create(&th[i], NULL, client_main, &cs[i]) != 0) die("%s", "pthread_create");
    double t0 = now_s();
    run.t_start = t0 + warm;
    atomic_store(&run.t_end_ns, (long long)((run.t_start + secs) * 1e9));
    atomic_store(&run.recorded, 0);
    atomic_store(&run.stop, 0);
    pthread_barrier_wait(&run.ready);
    sleep_s(t_end() - now_s());
    for (;;) {
        long done = atomic_load(&run.recorded);
        double over = now_s() - (run.t_start + secs);
        if (done >= MIN_OPS || (done > 0 && over >= max_extend) || over >= OP_TIMEOUT_MS / 1000.0) break;
        atomic_store(&run.t_end_ns, (long long)((now_s() + 0.1) * 1e9));
        sleep_s(0.1);
    }
    /* The clients stop themselves at t_end; a stuck operation is bounded by
     * the operation timeout. */
    atomic_store(&run.stop, 1);
    for (int i = 0; i < n; i++) pthread_join(th[i], NULL);
    size_t total = 0;
    long errors = 0;
    const char *firsterr = NULL;
    for (int i = 0; i < n; i++) {
        total += cs[i].n;
        errors += cs[i].errors;
        if (!firsterr && cs[i].err[0]) firsterr = cs[i].err;
    }
    double *all = malloc((total ? total : 1) * sizeof *all);
    if (!all) die("%s", "out of memory");
    size_t k = 0;
    for (int i = 0; i < n; i++) {
        if (cs[i].n) memcpy(all + k, cs[i].lat, cs[i].n * sizeof *all);
        k += cs[i].n;
    }
    qsort(all, total, sizeof *all, cmp_double);
    struct result r = {.ops = total, .errors = errors, .window = t_end() - run.t_start};
    if (total) {
        r.p50 = all[total / 2];
        r.p99 = all[(size_t)((double)(total - 1) * 0.99)];
    }
    if (firsterr) fprintf(stderr, "peerload %s: first error: %s\n", kind_name, firsterr);
    free(all);
    return r;
}

static void report(struct result r, int n, const char *extra) {
    printf("result kind=%s clients=%d ops=%zu secs=%.3f ops_s=%.0f p50_us=%.1f p99_us=%.1f errors=%ld%s%s\n",
           kind_name, n, r.ops, r.window, (double)r.ops / r.window, r.p50 * 1e6, r.p99 * 1e6, r.errors, extra ? " " : "",
           extra ? extra : "");
    fflush(stdout);
}

/* ---- dpu ---- */

struct dpu_conn {
    dpu_t *d;
    dpu_gva_t word;
    uint64_t expect;
};

static int dpu_op(struct client *c) {
    struct dpu_conn *x = c->conn;
    uint64_t old = 0;
    int rc = dpu_cas64(x->d, x->word, x->expect, x->expect + 1, &old);
    if (rc < 0) {
        snprintf(c->err, sizeof c->err, "dpu_cas64: %s (%s)", dpu_strerror(rc), dpu_last_error());
        return rc;
    }
    if (old != x->expect) { /* not ours alone after all: follow the value */
        snprintf(c->err, sizeof c->err, "dpu_cas64: word held %llu, expected %llu", (unsigned long long)old,
                 (unsigned long long)x->expect);
        x->expect = old;
        return -1;
    }
    x->expect++;
    return 0;
}

/* ring_in_use reports whether this process maps a memfd shared and
 * writable: the ring pair (the agent's "dpu-ring" memfd), into which the
 * host writes its submissions. The socket transport's memfds (the status
 * table, replica pages) are mapped read-only. */
static int ring_in_use(void) {
    int ring = 0;
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f) return 0;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        char perms[8] = {0};
        if (sscanf(line, "%*s %7s", perms) == 1 && perms[1] == 'w' && perms[3] == 's' && strstr(line, "/memfd:"))
            ring = 1;
    }
    fclose(f);
    return ring;
}

static dpu_t *dpu_connect(const char *sock) {
    dpu_t *d;
    int rc = dpu_open(sock, &d);
    if (rc < 0) {
        fprintf(stderr, "peerload: dpu_open %s: %s (%s)\n", sock, dpu_strerror(rc), dpu_last_error());
        exit(1);
    }
    dpu_set_timeout(d, OP_TIMEOUT_MS);
    return d;
}

static void run_dpu(const char *sock, const char *owner_sock, int n, double secs, double warm) {
    if (n > DPU_PAGE_SIZE / 8) die("%s", "too many clients for one page");
    dpu_t *owner = dpu_connect(owner_sock);
    dpu_gva_t page;
    int rc = dpu_alloc(owner, DPU_PAGE_SIZE, &page);
    if (rc < 0) die("dpu_alloc: %s", dpu_last_error());
    struct client cs[MAX_CLIENTS] = {0};
    struct dpu_conn xs[MAX_CLIENTS] = {0};
    int hops = -1, tier = -1;
    for (int i = 0; i < n; i++) {
        xs[i].d = dpu_connect(sock);
        xs[i].word = dpu_gva_add(page, (uint64_t)i * 8);
        cs[i] = (struct client){.id = i, .op = dpu_op, .conn = &xs[i]};
    }
    if ((rc = dpu_where(xs[0].d, page, &tier, &hops)) < 0) die("dpu_where: %s", dpu_last_error());
    int ring = ring_in_use();
    struct result r = measure(cs, n, secs, warm);
    /* Where is the page now: a CAS executes at the owner and must not
     * have moved it; the report carries both. */
    int hops_after = -1, tier_after = -1;
    (void)dpu_where(xs[0].d, page, &tier_after, &hops_after);
    char extra[96];
    snprintf(extra, sizeof extra, "transport=%s hops=%d hops_after=%d", ring ? "ring" : "socket", hops, hops_after);
    report(r, n, extra);
    for (int i = 0; i < n; i++) {
        dpu_close(xs[i].d);
        free(cs[i].lat);
    }
    (void)dpu_free(owner, page);
    dpu_close(owner);
}

/* ---- dpu bulk stores ---- */

struct store_conn {
    dpu_t *d;
    dpu_gva_t at;
    uint8_t *buf;
    uint8_t *got; /* loads: where the bytes land */
    size_t bytes;
    uint8_t round;
};

static int store_op(struct client *c) {
    struct store_conn *x = c->conn;
    x->buf[0] = ++x->round; /* each store writes something new */
    int rc = dpu_store(x->d, x->at, x->buf, x->bytes);
    if (rc < 0) snprintf(c->err, sizeof c->err, "dpu_store: %s (%s)", dpu_strerror(rc), dpu_last_error());
    return rc;
}

/* load_op loads the client's range back and checks its first bytes. */
static int load_op(struct client *c) {
    struct store_conn *x = c->conn;
    int rc = dpu_load(x->d, x->at, x->got, x->bytes);
    if (rc < 0) snprintf(c->err, sizeof c->err, "dpu_load: %s (%s)", dpu_strerror(rc), dpu_last_error());
    else if (memcmp(x->got, x->buf, x->bytes < 64 ? x->bytes : 64) != 0) {
        snprintf(c->err, sizeof c->err, "dpu_load: the range reads otherwise than it was stored");
        rc = -EIO;
    }
    return rc;
}

static void run_store(const char *sock, const char *owner_sock, const char *bytes_arg, int n, double secs,
                      double warm, int load) {
    long long want = atoll(bytes_arg);
    if (want < 1 || want > (1LL << 30)) die("store: BYTES %s outside [1, 1 GiB]", bytes_arg);
    size_t bytes = (size_t)want;
    dpu_t *owner = dpu_connect(owner_sock);
    struct client cs[MAX_CLIENTS] = {0};
    struct store_conn xs[MAX_CLIENTS] = {0};
    for (int i = 0; i < n; i++) {
        size_t alloc = (bytes + DPU_PAGE_SIZE - 1) / DPU_PAGE_SIZE * DPU_PAGE_SIZE;
        int rc = dpu_alloc(owner, alloc, &xs[i].at);
        if (rc < 0) die("dpu_alloc: %s", dpu_last_error());
        xs[i].d = dpu_connect(sock);
        xs[i].bytes = bytes;
        xs[i].buf = malloc(bytes);
        if (!xs[i].buf) die("%s", "out of memory");
        for (size_t k = 0; k < bytes; k++) xs[i].buf[k] = (uint8_t)(k * 131 + (size_t)i);
        cs[i] = (struct client){.id = i, .op = store_op, .conn = &xs[i]};
        if (load) { /* what the loads read: stored once before they start */
            xs[i].got = malloc(bytes);
            if (!xs[i].got) die("%s", "out of memory");
            if (dpu_store(xs[i].d, xs[i].at, xs[i].buf, bytes) < 0) die("dpu_store: %s", dpu_last_error());
            cs[i].op = load_op;
        }
    }
    int hops = -1, tier = -1;
    if (dpu_where(xs[0].d, xs[0].at, &tier, &hops) < 0) die("dpu_where: %s", dpu_last_error());
    int ring = ring_in_use();
    struct result r = measure(cs, n, secs, warm);
    /* What the owner holds is what the last store wrote. */
    uint8_t got[64];
    size_t k = bytes < sizeof got ? bytes : sizeof got;
    if (!load && r.ops > 0 && dpu_load(owner, xs[0].at, got, k) == 0) {
        xs[0].buf[0] = xs[0].round;
        if (memcmp(got, xs[0].buf, k) != 0) die("%s", "store: the owner's copy differs from the last store");
    }
    char extra[160];
    snprintf(extra, sizeof extra, "transport=%s hops=%d hops_after=%d bytes=%zu mb_s=%.1f", ring ? "ring" : "socket",
             hops, hops, bytes, (double)r.ops * (double)bytes / r.window / 1e6);
    report(r, n, extra);
    for (int i = 0; i < n; i++) {
        (void)dpu_free(owner, xs[i].at);
        dpu_close(xs[i].d);
        free(xs[i].buf);
        free(xs[i].got);
        free(cs[i].lat);
    }
    dpu_close(owner);
}

/* ---- dpu ownership transfers ---- */

struct xfer_conn {
    dpu_t *d[2]; /* a connection at each node */
    dpu_gva_t page;
    int at; /* the node (0 or 1) that owns the page */
};

static int xfer_op(struct client *c) {
    struct xfer_conn *x = c->conn;
    int to = 1 - x->at;
    int rc = dpu_acquire(x->d[to], x->page, OP_TIMEOUT_MS);
    if (rc < 0) {
        snprintf(c->err, sizeof c->err, "dpu_acquire: %s (%s)", dpu_strerror(rc), dpu_last_error());
        return rc;
    }
    x->at = to;
    if ((rc = dpu_release(x->d[to], x->page)) < 0) {
        snprintf(c->err, sizeof c->err, "dpu_release: %s (%s)", dpu_strerror(rc), dpu_last_error());
        return rc;
    }
    return 0;
}

static void run_transfer(const char *sock_a, const char *sock_b, int n, double secs, double warm) {
    struct client cs[MAX_CLIENTS] = {0};
    struct xfer_conn xs[MAX_CLIENTS] = {0};
    for (int i = 0; i < n; i++) {
        xs[i].d[0] = dpu_connect(sock_a);
        xs[i].d[1] = dpu_connect(sock_b);
        int rc = dpu_alloc(xs[i].d[1], DPU_PAGE_SIZE, &xs[i].page); /* owned at B */
        if (rc < 0) die("dpu_alloc: %s", dpu_last_error());
        xs[i].at = 1;
        cs[i] = (struct client){.id = i, .op = xfer_op, .conn = &xs[i]};
    }
    /* How far the page is from the node that takes it next, before and
     * after the run. */
    int hops = -1, hops_after = -1, tier = -1;
    if (dpu_where(xs[0].d[0], xs[0].page, &tier, &hops) < 0) die("dpu_where: %s", dpu_last_error());
    int ring = ring_in_use();
    struct result r = measure(cs, n, secs, warm);
    (void)dpu_where(xs[0].d[1 - xs[0].at], xs[0].page, &tier, &hops_after);
    char extra[96];
    snprintf(extra, sizeof extra, "transport=%s hops=%d hops_after=%d", ring ? "ring" : "socket", hops, hops_after);
    report(r, n, extra);
    for (int i = 0; i < n; i++) {
        (void)dpu_free(xs[i].d[xs[i].at], xs[i].page);
        dpu_close(xs[i].d[0]);
        dpu_close(xs[i].d[1]);
        free(cs[i].lat);
    }
}

static void run_transport(const char *sock) {
    dpu_t *d = dpu_connect(sock);
    dpu_gva_t g;
    int rc = dpu_alloc(d, DPU_PAGE_SIZE, &g);
    if (rc < 0) die("dpu_alloc: %s", dpu_last_error());
    uint64_t old;
    if ((rc = dpu_cas64(d, g, 0, 1, &old)) < 0) die("dpu_cas64: %s", dpu_last_error());
    printf("transport=%s\n", ring_in_use() ? "ring" : "socket");
    (void)dpu_free(d, g);
    dpu_close(d);
}

/* ---- SOCK_SEQPACKET echo ---- */

#define ECHO_LEN 48

struct fd_conn {
    int fd;
    char buf[4096];
    size_t have; /* bytes buffered for stream protocols */
    char key[64];
    uint64_t expect;
    char sha[48];
};

static int echo_op(struct client *c) {
    struct fd_conn *x = c->conn;
    char msg[ECHO_LEN] = {0}, in[256];
    memcpy(msg, &c->id, sizeof c->id);
    if (send(x->fd, msg, sizeof msg, MSG_NOSIGNAL) != (ssize_t)sizeof msg) {
        snprintf(c->err, sizeof c->err, "echo send: %s", strerror(errno));
        return -1;
    }
    ssize_t r = recv(x->fd, in, sizeof in, 0);
    if (r != (ssize_t)sizeof msg) {
        snprintf(c->err, sizeof c->err, "echo recv: %zd (%s)", r, strerror(errno));
        return -1;
    }
    return 0;
}

static int unix_connect(const char *path, int type) {
    int fd = socket(AF_UNIX, type | SOCK_CLOEXEC, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof sa.sun_path) die("path too long: %s", path);
    strcpy(sa.sun_path, path);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) die("connect %s", path);
    struct timeval tv = {.tv_sec = OP_TIMEOUT_MS / 1000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    return fd;
}

static void run_echo(const char *path, int n, double secs, double warm) {
    static struct client cs[MAX_CLIENTS];
    static struct fd_conn xs[MAX_CLIENTS];
    for (int i = 0; i < n; i++) {
        xs[i].fd = unix_connect(path, SOCK_SEQPACKET);
        cs[i] = (struct client){.id = i, .op = echo_op, .conn = &xs[i]};
    }
    report(measure(cs, n, secs, warm), n, NULL);
    for (int i = 0; i < n; i++) close(xs[i].fd);
}

/* echo-server: one process, one poll loop over every connection (as a
 * single-threaded server such as Redis serves its clients). */
static void run_echo_server(const char *path) {
    int l = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof sa.sun_path) die("path too long: %s", path);
    strcpy(sa.sun_path, path);
    unlink(path);
    if (l < 0 || bind(l, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(l, 64) < 0) die("listen %s", path);
    struct pollfd pf[MAX_CLIENTS + 1];
    int n = 1;
    pf[0] = (struct pollfd){.fd = l, .events = POLLIN};
    for (;;) {
        if (poll(pf, (nfds_t)n, -1) < 0) {
            if (errno == EINTR) continue;
            die("poll: %s", strerror(errno));
        }
        for (int i = n - 1; i >= 1; i--) {
            if (!pf[i].revents) continue;
            char buf[256];
            ssize_t r = recv(pf[i].fd, buf, sizeof buf, MSG_DONTWAIT);
            if (r > 0) {
                (void)send(pf[i].fd, buf, (size_t)r, MSG_NOSIGNAL);
            } else if (r == 0 || (errno != EAGAIN && errno != EINTR)) {
                close(pf[i].fd);
                pf[i] = pf[--n];
            }
        }
        if (pf[0].revents & POLLIN) {
            int c = accept4(l, NULL, NULL, SOCK_CLOEXEC);
            if (c >= 0 && n <= MAX_CLIENTS) pf[n++] = (struct pollfd){.fd = c, .events = POLLIN};
            else if (c >= 0) close(c);
        }
    }
}

/* ---- TCP helpers for Redis and memcached ---- */

static int tcp_connect(const char *addr) {
    char host[128];
    snprintf(host, sizeof host, "%s", addr);
    char *colon = strrchr(host, ':');
    if (!colon) die("want HOST:PORT, got %s", addr);
    *colon = 0;
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res;
    if (getaddrinfo(host, colon + 1, &hints, &res) != 0) die("resolve %s", addr);
    int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, res->ai_addr, res->ai_addrlen) < 0) die("connect %s", addr);
    freeaddrinfo(res);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct timeval tv = {.tv_sec = OP_TIMEOUT_MS / 1000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    return fd;
}

static int send_all(int fd, const char *b, size_t n) {
    while (n > 0) {
        ssize_t w = send(fd, b, n, MSG_NOSIGNAL);
        if (w <= 0) return -1;
        b += w;
        n -= (size_t)w;
    }
    return 0;
}

/* read_line returns a NUL-terminated line (without CRLF) from x's buffer,
 * reading more as needed; the line stays valid until the next consume. */
static char *read_line(struct fd_conn *x, size_t *len) {
    for (;;) {
        char *e = memmem(x->buf, x->have, "\r\n", 2);
        if (e) {
            *e = 0;
            *len = (size_t)(e - x->buf);
            return x->buf;
        }
        if (x->have == sizeof x->buf) return NULL;
        ssize_t r = recv(x->fd, x->buf + x->have, sizeof x->buf - x->have, 0);
        if (r <= 0) return NULL;
        x->have += (size_t)r;
    }
}

/* ensure has at least n bytes buffered. */
static int ensure(struct fd_conn *x, size_t n) {
    if (n > sizeof x->buf) return -1;
    while (x->have < n) {
        ssize_t r = recv(x->fd, x->buf + x->have, sizeof x->buf - x->have, 0);
        if (r <= 0) return -1;
        x->have += (size_t)r;
    }
    return 0;
}

static void consume(struct fd_conn *x, size_t n) {
    memmove(x->buf, x->buf + n, x->have - n);
    x->have -= n;
}

/* ---- Redis: EVALSHA of a compare-and-swap script ---- */

static const char cas_script[] = "local v = redis.call('GET', KEYS[1]) or '0' "
                                 "if v == ARGV[1] then redis.call('SET', KEYS[1], ARGV[2]) end "
                                 "return v";

static int resp_cmd(struct fd_conn *x, int argc, const char **argv) {
    char b[1024];
    int k = snprintf(b, sizeof b, "*%d\r\n", argc);
    for (int i = 0; i < argc; i++) {
        size_t l = strlen(argv[i]);
        if ((size_t)k + l + 32 > sizeof b) return -1;
        k += snprintf(b + k, sizeof b - (size_t)k, "$%zu\r\n%s\r\n", l, argv[i]);
    }
    return send_all(x->fd, b, (size_t)k);
}

/* resp_reply reads one reply that is a simple or bulk string into out. */
static int resp_reply(struct fd_conn *x, char *out, size_t cap) {
    size_t len;
    char *l = read_line(x, &len);
    if (!l) return -1;
    if (l[0] == '+') {
        snprintf(out, cap, "%s", l + 1);
        consume(x, len + 2);
        return 0;
    }
    if (l[0] == '$') {
        long n = atol(l + 1);
        size_t hdr = len + 2;
        if (n < 0 || (size_t)n + 1 > cap || ensure(x, hdr + (size_t)n + 2) < 0) return -1;
        memcpy(out, x->buf + hdr, (size_t)n);
        out[n] = 0;
        consume(x, hdr + (size_t)n + 2);
        return 0;
    }
    snprintf(out, cap, "%s", l); /* an error or another type */
    consume(x, len + 2);
    return -1;
}

static int redis_op(struct client *c) {
    struct fd_conn *x = c->conn;
    char e[24], d[24], got[64] = "";
    snprintf(e, sizeof e, "%llu", (unsigned long long)x->expect);
    snprintf(d, sizeof d, "%llu", (unsigned long long)x->expect + 1);
    const char *argv[] = {"EVALSHA", x->sha, "1", x->key, e, d};
    if (resp_cmd(x, 6, argv) < 0 || resp_reply(x, got, sizeof got) < 0) {
        snprintf(c->err, sizeof c->err, "redis EVALSHA: %s", got);
        return -1;
    }
    if (strcmp(got, e) != 0) {
        snprintf(c->err, sizeof c->err, "redis CAS: key held %s, expected %s", got, e);
        x->expect = strtoull(got, NULL, 10);
        return -1;
    }
    x->expect++;
    return 0;
}

static void run_redis(const char *addr, int n, double secs, double warm) {
    static struct client cs[MAX_CLIENTS];
    static struct fd_conn xs[MAX_CLIENTS];
    for (int i = 0; i < n; i++) {
        struct fd_conn *x = &xs[i];
        x->fd = tcp_connect(addr);
        snprintf(x->key, sizeof x->key, "peers:cas:%d:%d", (int)getpid(), i);
        const char *load[] = {"SCRIPT", "LOAD", cas_script};
        if (resp_cmd(x, 3, load) < 0 || resp_reply(x, x->sha, sizeof x->sha) < 0) die("redis SCRIPT LOAD: %s", x->sha);
        char ok[16];
        const char *set[] = {"SET", x->key, "0"};
        if (resp_cmd(x, 3, set) < 0 || resp_reply(x, ok, sizeof ok) < 0) die("redis SET: %s", ok);
        cs[i] = (struct client){.id = i, .op = redis_op, .conn = x};
    }
    report(measure(cs, n, secs, warm), n, NULL);
    for (int i = 0; i < n; i++) {
        size_t len;
        const char *del[] = {"DEL", xs[i].key};
        if (resp_cmd(&xs[i], 2, del) == 0) (void)read_line(&xs[i], &len);
        close(xs[i].fd);
    }
}

/* ---- memcached: gets, then cas with the unique it returned ---- */

static int mc_op(struct client *c) {
    struct fd_conn *x = c->conn;
    char b[256];
    int k = snprintf(b, sizeof b, "gets %s\r\n", x->key);
    if (send_all(x->fd, b, (size_t)k) < 0) {
        snprintf(c->err, sizeof c->err, "memcached gets: send: %s", strerror(errno));
        return -1;
    }
    size_t len;
    char *l = read_line(x, &len);
    unsigned flags;
    size_t bytes;
    unsigned long long uniq;
    if (!l || sscanf(l, "VALUE %*s %u %zu %llu", &flags, &bytes, &uniq) != 3 || bytes > 32) {
        snprintf(c->err, sizeof c->err, "memcached gets: %s", l ? l : "connection lost");
        return -1;
    }
    size_t hdr = len + 2;
    if (ensure(x, hdr + bytes + 2 + 5) < 0) { /* data CRLF "END\r\n" */
        snprintf(c->err, sizeof c->err, "memcached gets: short value");
        return -1;
    }
    char val[40];
    memcpy(val, x->buf + hdr, bytes);
    val[bytes] = 0;
    if (memcmp(x->buf + hdr + bytes + 2, "END\r\n", 5) != 0) {
        snprintf(c->err, sizeof c->err, "memcached gets: no END");
        return -1;
    }
    consume(x, hdr + bytes + 2 + 5);
    uint64_t v = strtoull(val, NULL, 10);
    if (v != x->expect) {
        snprintf(c->err, sizeof c->err, "memcached: key held %s, expected %llu", val, (unsigned long long)x->expect);
        x->expect = v;
        return -1;
    }
    char nv[24];
    int nl = snprintf(nv, sizeof nv, "%llu", (unsigned long long)v + 1);
    k = snprintf(b, sizeof b, "cas %s 0 0 %d %llu\r\n%s\r\n", x->key, nl, uniq, nv);
    if (send_all(x->fd, b, (size_t)k) < 0 || !(l = read_line(x, &len))) {
        snprintf(c->err, sizeof c->err, "memcached cas: connection lost");
        return -1;
    }
    int stored = strcmp(l, "STORED") == 0;
    if (!stored) snprintf(c->err, sizeof c->err, "memcached cas: %s", l);
    consume(x, len + 2);
    if (!stored) return -1;
    x->expect = v + 1;
    return 0;
}

static void run_memcached(const char *addr, int n, double secs, double warm) {
    static struct client cs[MAX_CLIENTS];
    static struct fd_conn xs[MAX_CLIENTS];
    for (int i = 0; i < n; i++) {
        struct fd_conn *x = &xs[i];
        x->fd = tcp_connect(addr);
        snprintf(x->key, sizeof x->key, "peers:cas:%d:%d", (int)getpid(), i);
        char b[128];
        int k = snprintf(b, sizeof b, "set %s 0 0 1\r\n0\r\n", x->key);
        size_t len;
        char *l;
        if (send_all(x->fd, b, (size_t)k) < 0 || !(l = read_line(x, &len)) || strcmp(l, "STORED") != 0)
            die("memcached set: %s", "not stored");
        consume(x, len + 2);
        cs[i] = (struct client){.id = i, .op = mc_op, .conn = x};
    }
    report(measure(cs, n, secs, warm), n, NULL);
    for (int i = 0; i < n; i++) {
        char b[128];
        int k = snprintf(b, sizeof b, "delete %s noreply\r\n", xs[i].key);
        (void)send_all(xs[i].fd, b, (size_t)k);
        close(xs[i].fd);
    }
}

static void run_freeport(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t l = sizeof sa;
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0 || getsockname(fd, (struct sockaddr *)&sa, &l) < 0)
        die("%s", "no free port");
    printf("%d\n", ntohs(sa.sin_port));
    close(fd);
}

static void usage(void) {
    fprintf(stderr, "usage: peerload [-c CLIENTS] [-t SECONDS] [-w WARMUP] [-e EXTEND] "
                    "dpu SOCK OWNER_SOCK | store SOCK OWNER_SOCK BYTES | load SOCK OWNER_SOCK BYTES | transfer SOCK_A SOCK_B | echo PATH | echo-server PATH | redis HOST:PORT | "
                    "memcached HOST:PORT | transport SOCK | freeport\n");
    exit(2);
}

int main(int argc, char **argv) {
    int clients = 1;
    double secs = 1.0, warm = 0.2;
    int o;
    while ((o = getopt(argc, argv, "+c:t:w:e:")) != -1) {
        switch (o) {
        case 'c': clients = atoi(optarg); break;
        case 't': secs = atof(optarg); break;
        case 'w': warm = atof(optarg); break;
        case 'e': max_extend = atof(optarg); break;
        default: usage();
        }
    }
    if (clients < 1 || clients > MAX_CLIENTS || secs <= 0 || warm < 0 || max_extend < 0) usage();
    argc -= optind;
    argv += optind;
    if (argc < 1) usage();
    signal(SIGPIPE, SIG_IGN);
    kind_name = argv[0];
    if (strcmp(argv[0], "dpu") == 0 && argc == 3) run_dpu(argv[1], argv[2], clients, secs, warm);
    else if (strcmp(argv[0], "store") == 0 && argc == 4) run_store(argv[1], argv[2], argv[3], clients, secs, warm, 0);
    else if (strcmp(argv[0], "load") == 0 && argc == 4) run_store(argv[1], argv[2], argv[3], clients, secs, warm, 1);
    else if (strcmp(argv[0], "transfer") == 0 && argc == 3) run_transfer(argv[1], argv[2], clients, secs, warm);
    else if (strcmp(argv[0], "echo") == 0 && argc == 2) run_echo(argv[1], clients, secs, warm);
    else if (strcmp(argv[0], "echo-server") == 0 && argc == 2) run_echo_server(argv[1]);
    else if (strcmp(argv[0], "redis") == 0 && argc == 2) run_redis(argv[1], clients, secs, warm);
    else if (strcmp(argv[0], "memcached") == 0 && argc == 2) run_memcached(argv[1], clients, secs, warm);
    else if (strcmp(argv[0], "transport") == 0 && argc == 2) run_transport(argv[1]);
    else if (strcmp(argv[0], "freeport") == 0 && argc == 1) run_freeport();
    else usage();
    return 0;
}
