/*
 * mmap.c — dpu_mmap: shared pages at an address of the process, driven by
 * page faults through userfaultfd.
 *
 * Layout. Every area lives in one range of address space reserved on the
 * first dpu_mmap (RANGE_PAGES pages, PROT_NONE, MAP_NORESERVE,
 * MADV_DONTFORK), so "is this address shared?" is one compare
 * (dpu_mmap_lo/dpu_mmap_span) and the state of every page is one byte of
 * dpu_mmap_pages, indexed by the page's place in the range. An area is an
 * anonymous private mapping inside it, registered with userfaultfd for
 * missing faults and (PROT_WRITE) write-protect faults.
 *
 * Page states:
 *   ABSENT  not here: the next touch faults (missing)
 *   CLEAN   fetched, write-protected: reads are native, a write faults (wp)
 *   DIRTY   writable, owned by this node, with a twin copy of the content
 *           it was made writable from; the bytes that differ from the twin
 *           are this process's writes not yet sent to the node
 *   DEAD    unusable (freed, node lost, write-back failed): touching it
 *           raises SIGBUS
 * and, apart from the state, whether this process holds an acquisition of
 * the page (owned[]): ownership protocol, on the refs connection.
 *
 * Order across pages. A release point writes back every dirty page and
 * waits for each STORE's acknowledgement by the owner before the release
 * itself (the atomic that follows) is sent; the owner applies the write
 * before it answers. But the owner's updates to other nodes' replicas are
 * not acknowledged: they travel down the page's tree, which need not be
 * the path the release (a store to another page, at that page's owner)
 * takes to the acquirer. So an acquire point alone cannot trust its node's
 * replica of another page. The rule: every acquire point starts a new
 * epoch (acquire_epoch), and the first read fault of a page in an epoch
 * fences it: a compare-and-swap at the page's owner that never changes
 * the word, sent just ahead of the page's LOAD. Its reply carries the
 * owner's version, which is at least that of every write acknowledged
 * before the release the acquire saw; the node never answers this host
 * below a version it was told of, and a LOAD answered below it (before the
 * fence's reply came) is made again, so the page waits for the update on
 * its way (or is fetched).
 * Write faults need no fence (they take ownership: the load reads the
 * primary), nor do pages locked here, nor a process's faults before its
 * first acquire point (nothing it synchronised with can be missed). The
 * cost is one request to the owner per page read after an acquire, in
 * parallel with the LOAD.
 *
 * Transitions: a read fault LOADs the page through the node and fills it
 * (UFFDIO_COPY, write-protected). A write fault first makes this node the
 * page's owner (ACQUIRE: the ownership protocol moves the page here, so
 * every later LOAD and STORE of it is served by this node without a hop),
 * then fills the page from the node writable, with a twin; a write to a
 * clean page that is not owned drops it and does the same, one to a clean
 * page still owned only takes a twin and lifts the protection. A release
 * point write-protects each dirty page, sends the bytes that differ from its
 * twin (STORE to this node, the owner: runs of changed bytes only, so what
 * atomics, which run at the owner, changed meanwhile is never overwritten)
 * and makes it clean; the page stays owned, so the next write costs a
 * write-protect fault and no request. OWNERSHIP_LOST (another node took
 * the page) writes back what is dirty, unmaps the page (absent: the next
 * touch fetches it from the new owner) and ends the acquisition. An acquire
 * point writes back dirty pages and drops clean ones (MADV_DONTNEED:
 * absent again). An UPDATED or INVALIDATED event for a clean page drops it
 * too.
 *
 * Why the twin stays when the page is owned: atomics on a shared page run
 * at its owner (the node), not in this mapping, and no pin holds the page
 * here while it is dirty (a pin would stall every other writer until this
 * process's next release point, and deadlock against its own dpu_lock of
 * the page). So the node's copy may hold bytes this process did not write
 * (atomics, and writes of a node that took the page meanwhile); only the
 * bytes this process changed are sent. Programs free of data races (every
 * conflicting access ordered by a lock or a release/acquire pair) see
 * sequentially consistent pages.
 *
 * Threads: one fault thread per process serves the userfaultfd (or, with
 * DPU_MMAP_FAULTS=signal on x86_64, each faulting thread serves its own
 * fault in a SIGBUS handler: on_sigbus); one event
 * thread per user connection reads the events of a private connection to
 * the same socket, which holds the areas' refs (MAP with NOFD); a second
 * private connection serves the fault LOADs and write-back STOREs. All
 * page state changes happen under mu; no callback runs under it.
 */
#define _GNU_SOURCE
#include "dpu.h"
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#ifndef UFFD_USER_MODE_ONLY
#define UFFD_USER_MODE_ONLY 1
#endif
#ifndef USERFAULTFD_IOC_NEW
#define USERFAULTFD_IOC_NEW _IO(0xAA, 0x00)
#endif

enum { PAGE = DPU_PAGE_SIZE };
enum { ST_ABSENT = 0, ST_CLEAN = 1, ST_DIRTY = 2, ST_DEAD = 3 };
enum { OWN_NONE = 0, OWN_ACQUIRED = 1, OWN_LOCKED = 2 };
#define RANGE_PAGES ((size_t)1 << 24) /* 64 GiB of address space */
#define EVENT_POLL_MS 100

uintptr_t dpu_mmap_lo, dpu_mmap_span;
unsigned char *dpu_mmap_pages;

struct conn { /* one per user connection with areas */
    struct conn *next;
    dpu_t *user;
    dpu_t *priv;  /* refs and events (its event thread reads it) */
    dpu_t *io;    /* fault loads and write-backs: no event reader on it, so
                   * replies reach their caller without a hand-off, and no
                   * user buffer in it can fault */
    pthread_t events;
    atomic_bool stop;
    int areas;
    bool no_reports;      /* the agent does not take MAPS reports */
    uint64_t reported;    /* sum of the counters last reported */
};

struct area {
    struct area *next;
    struct conn *c;
    dpu_gva_t gva;
    uint8_t *base;
    size_t first, pages; /* place in the range */
    int prot;
    uint8_t **twin;      /* per page, while dirty */
    int *why;            /* per page: errno that made it dead */
    uint8_t *owned;      /* per page: OWN_ACQUIRED (c->priv holds an acquisition) or
                          * OWN_LOCKED (the process holds its dpu_lock) */
    uint64_t *fenced;    /* per page: the acquire epoch its last fence was for */
    bool unfenced;       /* the owner refused the fence (no write permission): logged once */
    uint64_t read_faults, write_faults, writebacks, drops;
    uint64_t acquisitions, losses;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct area *areas;
static struct conn *conns;
static struct extent *free_ext;
static size_t dirty_pages, present_pages; /* short cuts for sync */
/* acquire_epoch counts this process's acquire points (0: none yet). A read
 * fault of a page in an epoch it was not fenced in first fences it (see
 * fence). Changed and read outside mu, seq_cst: see fill_read. */
static uint64_t acquire_epoch;
static int uffd = -1;
static int stop_fd = -1;
static pthread_t fault_thread;
static bool user_mode_only; /* the kernel refused full userfaultfd */
static bool in_signal;      /* faults are served in the faulting thread (see on_sigbus) */
static bool no_signal;      /* the kernel refused UFFD_FEATURE_SIGBUS */
static struct sigaction prev_sigbus;
static bool hooks_set;

static void logf_(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void logf_(const char *fmt, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf - 1, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n > sizeof buf - 2) n = sizeof buf - 2;
    buf[n++] = '\n';
    (void)!write(2, buf, (size_t)n);
}

static const char *gva_text(dpu_gva_t g, char *buf) {
    dpu_gva_format(g, buf, DPU_GVA_TEXT_LEN + 1);
    return buf;
}

/* ---- the reserved range ---- */

static int reserve_range(void) {
    if (dpu_mmap_span) return 0;
    void *r = mmap(NULL, RANGE_PAGES * PAGE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (r == MAP_FAILED) return -errno;
    void *s = mmap(NULL, RANGE_PAGES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    struct extent *e = malloc(sizeof *e);
    if (s == MAP_FAILED || !e) {
        munmap(r, RANGE_PAGES * PAGE);
        if (s != MAP_FAILED) munmap(s, RANGE_PAGES);
        free(e);
        return -ENOMEM;
    }
    madvise(r, RANGE_PAGES * PAGE, MADV_DONTFORK);
    madvise(s, RANGE_PAGES, MADV_DONTFORK);
    *e = (struct extent){NULL, 0, RANGE_PAGES};
    free_ext = e;
    dpu_mmap_pages = s;
    dpu_mmap_lo = (uintptr_t)r;
    atomic_thread_fence(memory_order_release);
    dpu_mmap_span = RANGE_PAGES * PAGE;
    return 0;
}

static uint8_t *range_at(size_t idx) { return (uint8_t *)dpu_mmap_lo + idx * PAGE; }

/* ---- userfaultfd ---- */

/* open_uffd tries a full userfaultfd, then a user-mode-only one (what
 * vm.unprivileged_userfaultfd=0 still allows a process without
 * CAP_SYS_PTRACE), then /dev/userfaultfd. DPU_UFFD=user asks for the
 * user-mode-only kind directly. */
static int open_uffd(void) {
    const char *want = getenv("DPU_UFFD");
    bool user_only = want && strcmp(want, "user") == 0;
    int fd = -1, err = 0;
    if (!user_only) {
        fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
        err = errno;
    }
    if (fd < 0 && (user_only || err == EPERM)) {
        fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY);
        if (fd >= 0) {
            user_mode_only = true;
            logf_("dpu_mmap: userfaultfd for user-mode faults only (vm.unprivileged_userfaultfd=0): system calls "
                  "that write into an area's absent pages fail with EFAULT");
        }
        else err = errno;
    }
    if (fd < 0) {
        int dev = open("/dev/userfaultfd", O_RDWR | O_CLOEXEC);
        if (dev >= 0) {
            fd = ioctl(dev, USERFAULTFD_IOC_NEW, O_CLOEXEC | O_NONBLOCK);
            if (fd < 0) err = errno;
            close(dev);
        }
    }
    if (fd < 0) {
        logf_("dpu_mmap: userfaultfd not available (%s): allow it with sysctl vm.unprivileged_userfaultfd=1 or "
              "access to /dev/userfaultfd",
              strerror(err));
        return -(err ? err : EPERM);
    }
    struct uffdio_api api = {.api = UFFD_API,
                             .features = UFFD_FEATURE_THREAD_ID | UFFD_FEATURE_PAGEFAULT_FLAG_WP};
#if defined(__x86_64__)
    const char *how = getenv("DPU_MMAP_FAULTS");
    if (how && strcmp(how, "signal") == 0 && !no_signal) {
        struct uffdio_api sig = {.api = UFFD_API, .features = UFFD_FEATURE_SIGBUS | UFFD_FEATURE_PAGEFAULT_FLAG_WP};
        if (ioctl(fd, UFFDIO_API, &sig) == 0) {
            in_signal = true;
            return fd;
        }
        logf_("dpu_mmap: DPU_MMAP_FAULTS=signal: the kernel refused UFFD_FEATURE_SIGBUS (%s): faults go to a thread",
              strerror(errno));
        close(fd); /* the handshake is once per descriptor: start again */
        no_signal = true;
        return open_uffd();
    }
#endif
    if (ioctl(fd, UFFDIO_API, &api) < 0) {
        int e = errno;
        close(fd);
        logf_("dpu_mmap: userfaultfd API handshake failed (%s): write-protect faults are needed", strerror(e));
        return -EOPNOTSUPP;
    }
    return fd;
}

static void *serve_faults(void *arg);
#if defined(__x86_64__)
static void on_sigbus(int sig, siginfo_t *si, void *ctx);
#endif
static void at_exit(void);
static void before_fork(void);
static void after_fork_parent(void);
static void after_fork_child(void);

/* start_uffd opens the userfaultfd and starts its thread. mu held. */
static int start_uffd(void) {
    if (uffd >= 0) return 0;
    int fd = open_uffd();
    if (fd < 0) return fd;
    int sfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (sfd < 0) {
        int e = errno;
        close(fd);
        return -e;
    }
    uffd = fd;
    stop_fd = sfd;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old); /* the thread takes no signals */
    int rc = pthread_create(&fault_thread, NULL, serve_faults, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        close(fd);
        close(sfd);
        uffd = stop_fd = -1;
        return -rc;
    }
    if (!hooks_set) {
        hooks_set = true;
        atexit(at_exit);
        pthread_atfork(before_fork, after_fork_parent, after_fork_child);
#if defined(__x86_64__)
        if (in_signal) {
            struct sigaction sa = {.sa_sigaction = on_sigbus, .sa_flags = SA_SIGINFO | SA_RESTART};
            sigemptyset(&sa.sa_mask);
            sigaction(SIGBUS, &sa, &prev_sigbus);
        }
#endif
    }
    return 0;
}

/* wp sets or lifts write protection without waking a faulting thread: the
 * page's state is updated first, then wake() lets it go on. */
static int wp(uint8_t *at, size_t len, bool on) {
    struct uffdio_writeprotect w = {.range = {(uintptr_t)at, len},
                                    .mode = on ? UFFDIO_WRITEPROTECT_MODE_WP : UFFDIO_WRITEPROTECT_MODE_DONTWAKE};
    return ioctl(uffd, UFFDIO_WRITEPROTECT, &w) < 0 ? -errno : 0;
}

static void wake(uint8_t *at) {
    struct uffdio_range r = {(uintptr_t)at, PAGE};
    ioctl(uffd, UFFDIO_WAKE, &r);
}

/* ---- pages (all under mu) ---- */

static struct area *area_of(uintptr_t a, size_t *page) {
    if (a - dpu_mmap_lo >= dpu_mmap_span) return NULL;
    size_t idx = (a - dpu_mmap_lo) / PAGE;
    for (struct area *ar = areas; ar; ar = ar->next) {
        if (idx >= ar->first && idx < ar->first + ar->pages) {
            if (page) *page = idx - ar->first;
            return ar;
        }
    }
    return NULL;
}

static unsigned char *state(struct area *ar, size_t i) { return &dpu_mmap_pages[ar->first + i]; }

static void kill_page(struct area *ar, size_t i, int why) {
    unsigned char *st = state(ar, i);
    if (*st == ST_DIRTY) __atomic_sub_fetch(&dirty_pages, 1, __ATOMIC_RELEASE);
    if (*st == ST_CLEAN || *st == ST_DIRTY) __atomic_sub_fetch(&present_pages, 1, __ATOMIC_RELEASE);
    if (*st != ST_ABSENT && *st != ST_DEAD) madvise(ar->base + i * PAGE, PAGE, MADV_DONTNEED);
    free(ar->twin[i]);
    ar->twin[i] = NULL;
    ar->why[i] = why;
    __atomic_store_n(st, ST_DEAD, __ATOMIC_RELEASE);
}

/* own makes this node the owner of page i (ownership protocol), unless
 * this process holds an acquisition of it already. */
static bool locked_here(dpu_gva_t page);

static int own(struct area *ar, size_t i) {
    if (ar->owned[i]) return 0;
    dpu_gva_t g = dpu_gva_add(ar->gva, i * PAGE);
    if (locked_here(g)) { /* the process's lock: owned and pinned here already */
        ar->owned[i] = OWN_LOCKED;
        return 0;
    }
    int rc = dpu__acquire(ar->c->priv, g);
    if (rc < 0) return rc;
    ar->owned[i] = OWN_ACQUIRED;
    ar->acquisitions++;
    return 0;
}

/* disown ends this process's acquisition of page i (after the node lost
 * it, or when the area goes). */
static void disown(struct area *ar, size_t i) {
    uint8_t how = ar->owned[i];
    ar->owned[i] = OWN_NONE;
    if (how != OWN_ACQUIRED) return;
    int rc = dpu__release(ar->c->priv, dpu_gva_add(ar->gva, i * PAGE));
    if (rc < 0 && rc != -EPERM) {
        char b[DPU_GVA_TEXT_LEN + 1];
        logf_("dpu_mmap: releasing page %s: %s (%s)", gva_text(dpu_gva_add(ar->gva, i * PAGE), b), dpu_strerror(rc),
              dpu_last_error());
    }
}

static void drop(struct area *ar, size_t i);

/* A fence makes a load of page i return at least the content its owner
 * holds now: a compare-and-swap at the owner that never changes the word
 * (expected = desired), whose reply carries the owner's page version; the
 * node never serves this host below the newest version it was told of,
 * and a load answered before that is made again (dpu__load_fenced), so the
 * page is never read from a replica whose updates are still on their way.
 * fenced takes the fence's result: a user who may not write the page gets
 * unfenced loads of the area from then on (logged once). */
#define FENCE_WORD 0x6a09e667f3bcc909ULL /* any value: equal or not, the word stays */
static int fenced(struct area *ar, int rc) {
    if (rc == -EACCES || rc == -EPERM) { /* a read-only user: loads stay unfenced */
        char b[DPU_GVA_TEXT_LEN + 1];
        ar->unfenced = true;
        logf_("dpu_mmap: the area at %p (%s) cannot be fenced (%s): after an acquire its reads may miss writes "
              "whose updates are still on their way to this node",
              (void *)ar->base, gva_text(ar->gva, b), dpu_strerror(rc));
        return 0;
    }
    return rc;
}

/* fill fetches page i and installs it: writable (with its twin) when
 * write, else write-protected. A write first makes this node the owner,
 * so its load reads the primary. A read after an acquire point fences the
 * page (once per epoch; not a page locked here, whose primary is here and
 * pinned): the node's replica may lag writes that happened before the
 * acquire, when their updates reach this node by another path than the
 * release did. The fence is sent ahead of the load, which is made again
 * if it was answered below the fence's version (dpu__load_fenced). */
static int fill(struct area *ar, size_t i, bool write, bool fence);

static int fill_read(struct area *ar, size_t i) {
    for (int tries = 0;; tries++) {
        uint64_t e = __atomic_load_n(&acquire_epoch, __ATOMIC_SEQ_CST);
        bool fence = e && ar->fenced[i] != e && ar->owned[i] != OWN_LOCKED && !ar->unfenced;
        int rc = fill(ar, i, false, fence);
        if (fence && rc == 0) ar->fenced[i] = e;
        if (rc < 0) return rc;
        /* An acquire point of another thread meanwhile may have found no
         * page present (its short cut) and dropped nothing: look again,
         * after counting this page present (both seq_cst), and fetch it
         * again fenced for the new epoch. Bounded: a thread acquiring
         * without pause gets the page of the last try. */
        if (__atomic_load_n(&acquire_epoch, __ATOMIC_SEQ_CST) == e || tries == 8) return 0;
        drop(ar, i);
        ar->drops--;
        ar->read_faults--;
    }
}

static int fill(struct area *ar, size_t i, bool write, bool fence) {
    dpu_gva_t g = dpu_gva_add(ar->gva, i * PAGE);
    int rc = write ? own(ar, i) : 0;
    if (rc < 0) return rc;
    uint8_t *buf = malloc(PAGE);
    if (!buf) return -ENOMEM;
    int frc = 0;
    rc = dpu__load_fenced(ar->c->io, g, buf, fence, FENCE_WORD, &frc);
    if (rc == 0) rc = fenced(ar, frc);
    if (rc < 0) {
        free(buf);
        return rc;
    }
    bool writable = ar->prot & PROT_WRITE;
    struct uffdio_copy cp = {.dst = (uintptr_t)(ar->base + i * PAGE), .src = (uintptr_t)buf, .len = PAGE,
                             .mode = ((writable && !write) ? UFFDIO_COPY_MODE_WP : 0) | UFFDIO_COPY_MODE_DONTWAKE};
    if (ioctl(uffd, UFFDIO_COPY, &cp) < 0 && errno != EEXIST) {
        rc = -errno;
        free(buf);
        return rc;
    }
    if (write) {
        ar->twin[i] = buf;
        __atomic_store_n(state(ar, i), ST_DIRTY, __ATOMIC_RELEASE);
        __atomic_add_fetch(&dirty_pages, 1, __ATOMIC_RELEASE);
        ar->write_faults++;
    } else {
        free(buf);
        __atomic_store_n(state(ar, i), ST_CLEAN, __ATOMIC_RELEASE);
        ar->read_faults++;
    }
    __atomic_add_fetch(&present_pages, 1, __ATOMIC_SEQ_CST);
    return 0;
}

/* unprotect makes clean page i writable, keeping a twin. */
static int unprotect(struct area *ar, size_t i) {
    uint8_t *t = malloc(PAGE);
    if (!t) return -ENOMEM;
    memcpy(t, ar->base + i * PAGE, PAGE);
    int rc = wp(ar->base + i * PAGE, PAGE, false);
    if (rc < 0) {
        free(t);
        return rc;
    }
    ar->twin[i] = t;
    __atomic_store_n(state(ar, i), ST_DIRTY, __ATOMIC_RELEASE);
    __atomic_add_fetch(&dirty_pages, 1, __ATOMIC_RELEASE);
    ar->write_faults++;
    return 0;
}

/* prepare brings page i to a state where the access can proceed. A write
 * to a clean page that is not owned here takes ownership and then the
 * owner's current content (the clean copy may be older). */
static int prepare(struct area *ar, size_t i, bool write) {
    write = write && (ar->prot & PROT_WRITE);
    switch (*state(ar, i)) {
    case ST_DEAD: return -ar->why[i];
    case ST_ABSENT: return write ? fill(ar, i, true, false) : fill_read(ar, i);
    case ST_CLEAN:
        if (!write) return 0;
        if (ar->owned[i]) return unprotect(ar, i);
        drop(ar, i);
        ar->drops--; /* not the node's doing */
        return fill(ar, i, true, false);
    default: return 0;
    }
}

/* writeback write-protects dirty page i and sends the bytes that differ
 * from its twin; the page is clean after. */
static int writeback(struct area *ar, size_t i) {
    uint8_t *p = ar->base + i * PAGE, *t = ar->twin[i];
    int rc = wp(p, PAGE, true);
    if (rc < 0) return rc;
    dpu_gva_t g = dpu_gva_add(ar->gva, i * PAGE);
    for (size_t off = 0; off < PAGE && rc == 0;) {
        if (p[off] == t[off]) {
            off++;
            continue;
        }
        size_t end = off + 1;
        while (end < PAGE && p[end] != t[end]) end++;
        rc = dpu_store(ar->c->io, dpu_gva_add(g, off), p + off, end - off);
        off = end;
    }
    if (rc < 0) return rc;
    free(t);
    ar->twin[i] = NULL;
    __atomic_store_n(state(ar, i), ST_CLEAN, __ATOMIC_RELEASE);
    __atomic_sub_fetch(&dirty_pages, 1, __ATOMIC_RELEASE);
    ar->writebacks++;
    return 0;
}

static void drop(struct area *ar, size_t i) {
    madvise(ar->base + i * PAGE, PAGE, MADV_DONTNEED);
    __atomic_store_n(state(ar, i), ST_ABSENT, __ATOMIC_RELEASE);
    __atomic_sub_fetch(&present_pages, 1, __ATOMIC_RELEASE);
    ar->drops++;
}

static void writeback_or_kill(struct area *ar, size_t i) {
    int rc = writeback(ar, i);
    if (rc < 0) {
        char b[DPU_GVA_TEXT_LEN + 1];
        logf_("dpu_mmap: write-back of page %s at %p failed (%s: %s): its writes are lost; touching it raises "
              "SIGBUS",
              gva_text(dpu_gva_add(ar->gva, i * PAGE), b), (void *)(ar->base + i * PAGE), dpu_strerror(rc),
              dpu_last_error());
        kill_page(ar, i, -rc);
    }
}

/* sync_locked: release writes back dirty pages; acquire also drops the
 * clean ones (after the write-back, so nothing of ours is lost). */
static void sync_locked(unsigned flags, struct conn *only) {
    if (!(flags & DPU_SYNC_ACQUIRE) ? dirty_pages == 0 : present_pages == 0) return;
    for (struct area *ar = areas; ar; ar = ar->next) {
        if (only && ar->c != only) continue;
        for (size_t i = 0; i < ar->pages; i++) {
            unsigned char st = *state(ar, i);
            if (st == ST_DIRTY) writeback_or_kill(ar, i);
            if ((flags & DPU_SYNC_ACQUIRE) && *state(ar, i) == ST_CLEAN) drop(ar, i);
        }
    }
}

void dpu_mmap_sync(unsigned flags) {
    if (!dpu_mmap_span) return;
    if (flags & DPU_SYNC_ACQUIRE) __atomic_add_fetch(&acquire_epoch, 1, __ATOMIC_SEQ_CST);
    /* Short cut without mu: this thread's own writes made their pages
     * dirty before it got here (the fault thread counted them before it
     * woke it). */
    size_t need = (flags & DPU_SYNC_ACQUIRE) ? __atomic_load_n(&present_pages, __ATOMIC_SEQ_CST)
                                             : __atomic_load_n(&dirty_pages, __ATOMIC_ACQUIRE);
    if (need == 0) return;
    pthread_mutex_lock(&mu);
    sync_locked(flags, NULL);
    pthread_mutex_unlock(&mu);
}

void dpu__mmap_acquired(void) { dpu_mmap_sync(DPU_SYNC_RELEASE | DPU_SYNC_ACQUIRE); }
void dpu__mmap_releasing(void) { dpu_mmap_sync(DPU_SYNC_RELEASE); }

/* ---- the process's page locks ---- */

/* The pages this process holds dpu_lock on (any connection): a write to
 * one of them needs no ACQUIRE (the lock made this node the owner and pins
 * it; an acquisition of another connection would only add a round trip
 * inside the critical section). Small: a process holds few locks. */
static dpu_gva_t *held_locks;
static size_t nheld, capheld;

static bool locked_here(dpu_gva_t page) {
    for (size_t k = 0; k < nheld; k++)
        if (held_locks[k].hi == page.hi && held_locks[k].lo == page.lo) return true;
    return false;
}

void dpu__mmap_locked(dpu_gva_t page, int held) {
    page.lo &= ~(uint64_t)(PAGE - 1);
    pthread_mutex_lock(&mu);
    if (held) {
        if (nheld == capheld) {
            size_t n = capheld ? 2 * capheld : 8;
            dpu_gva_t *m = realloc(held_locks, n * sizeof *m);
            if (!m) { /* writes to the page then take an acquisition of their own */
                pthread_mutex_unlock(&mu);
                return;
            }
            held_locks = m;
            capheld = n;
        }
        held_locks[nheld++] = page;
    } else {
        for (size_t k = 0; k < nheld; k++) {
            if (held_locks[k].hi == page.hi && held_locks[k].lo == page.lo) {
                held_locks[k] = held_locks[--nheld];
                break;
            }
        }
        /* Pages owned through the lock are not owned once it goes (their
         * writes went back at the release point just before). */
        for (struct area *ar = areas; ar; ar = ar->next)
            for (size_t i = 0; i < ar->pages; i++) {
                dpu_gva_t g = dpu_gva_add(ar->gva, i * PAGE);
                if (ar->owned[i] == OWN_LOCKED && g.hi == page.hi && g.lo == page.lo) ar->owned[i] = OWN_NONE;
            }
    }
    pthread_mutex_unlock(&mu);
}

/* ---- faults ---- */

static void sigbus(struct area *ar, size_t i, uintptr_t addr, pid_t tid, int err, const char *detail) {
    char b[DPU_GVA_TEXT_LEN + 1] = "?";
    if (ar) gva_text(dpu_gva_add(ar->gva, i * PAGE), b);
    logf_("dpu_mmap: SIGBUS to thread %d at %p (page %s): %s%s%s", (int)tid, (void *)addr, b, dpu_strerror(err),
          detail && *detail ? ": " : "", detail ? detail : "");
    if (tid > 0) syscall(SYS_tgkill, getpid(), tid, SIGBUS);
}

static void serve_fault(const struct uffd_msg *m) {
    uintptr_t addr = (uintptr_t)m->arg.pagefault.address;
    uint64_t fl = m->arg.pagefault.flags;
    pid_t tid = (pid_t)m->arg.pagefault.feat.ptid;
    uint8_t *page = (uint8_t *)(addr & ~(uintptr_t)(PAGE - 1));
    pthread_mutex_lock(&mu);
    size_t i;
    struct area *ar = area_of(addr, &i);
    if (!ar) {
        pthread_mutex_unlock(&mu);
        sigbus(NULL, 0, addr, tid, EFAULT, "not a dpu_mmap area (unmapped meanwhile)");
        return;
    }
    bool write = (fl & UFFD_PAGEFAULT_FLAG_WRITE) || (fl & UFFD_PAGEFAULT_FLAG_WP);
    int rc = prepare(ar, i, write);
    if (rc < 0) {
        if (*state(ar, i) != ST_DEAD) kill_page(ar, i, -rc);
        char detail[256];
        snprintf(detail, sizeof detail, "%s", dpu_last_error());
        pthread_mutex_unlock(&mu);
        sigbus(ar, i, addr, tid, -rc, detail);
        return;
    }
    pthread_mutex_unlock(&mu);
    wake(page); /* after the state and counters: the thread's next release sees them */
}

#if defined(__x86_64__)
/* on_sigbus serves a fault in the thread that took it (DPU_MMAP_FAULTS=
 * signal: UFFD_FEATURE_SIGBUS makes the kernel raise SIGBUS instead of
 * queueing the fault for the fault thread): no hand-off to that thread and
 * back. The page-fault error code tells a write (bit 1). When the access
 * returns, it is made again on the page now in place. A fault outside the
 * areas, a SIGBUS somebody sent, or a page that cannot be served gets what
 * SIGBUS did before (by default the access faults again and ends the
 * process with SIGBUS). The fault thread still starts, and gets nothing.
 * Faults in system calls fail with EFAULT, as with a user-mode-only
 * userfaultfd. The handler takes mu and allocates, like the fault thread:
 * the library never touches an absent page under mu, and a program's
 * accesses to shared pages do not happen inside malloc. A program that
 * sets its own SIGBUS handler after the first dpu_mmap must not use this
 * mode (its handler would get the faults). */
static void on_sigbus(int sig, siginfo_t *si, void *ctx) {
    int saved = errno;
    uintptr_t a = (uintptr_t)si->si_addr;
    if (si->si_code == BUS_ADRERR && a - dpu_mmap_lo < dpu_mmap_span) {
        bool write = ((ucontext_t *)ctx)->uc_mcontext.gregs[REG_ERR] & 2;
        pthread_mutex_lock(&mu);
        size_t i = 0;
        struct area *ar = area_of(a, &i);
        int rc = ar ? prepare(ar, i, write) : -EFAULT;
        if (rc < 0 && ar && *state(ar, i) != ST_DEAD) kill_page(ar, i, -rc);
        char b[DPU_GVA_TEXT_LEN + 1] = "?";
        if (ar) gva_text(dpu_gva_add(ar->gva, i * PAGE), b);
        pthread_mutex_unlock(&mu);
        if (rc == 0) {
            errno = saved;
            return;
        }
        logf_("dpu_mmap: SIGBUS to thread %d at %p (page %s): %s: %s", (int)syscall(SYS_gettid), (void *)a, b,
              dpu_strerror(rc), ar ? dpu_last_error() : "not a dpu_mmap area (unmapped meanwhile)");
    }
    if ((prev_sigbus.sa_flags & SA_SIGINFO) && prev_sigbus.sa_sigaction) {
        prev_sigbus.sa_sigaction(sig, si, ctx);
    } else if (!(prev_sigbus.sa_flags & SA_SIGINFO) && prev_sigbus.sa_handler != SIG_DFL &&
               prev_sigbus.sa_handler != SIG_IGN) {
        prev_sigbus.sa_handler(sig);
    } else {
        signal(SIGBUS, SIG_DFL);
        if (si->si_code <= 0) raise(SIGBUS); /* sent, not a fault: send it again */
    }
    errno = saved;
}
#endif

static void *serve_faults(void *arg) {
    (void)arg;
    struct uffd_msg msgs[16];
    for (;;) {
        struct pollfd p[2] = {{.fd = uffd, .events = POLLIN}, {.fd = stop_fd, .events = POLLIN}};
        if (poll(p, 2, -1) < 0) {
            if (errno == EINTR) continue;
            break;
        }
        if (p[1].revents) break;
        ssize_t n = read(uffd, msgs, sizeof msgs);
        if (n < 0) {
            if (errno == EAGAIN || errno == EINTR) continue;
            break;
        }
        for (size_t k = 0; k < (size_t)n / sizeof msgs[0]; k++)
            if (msgs[k].event == UFFD_EVENT_PAGEFAULT) serve_fault(&msgs[k]);
    }
    return NULL;
}

int dpu_mmap_touch(const void *lva, int write) {
    pthread_mutex_lock(&mu);
    size_t i;
    struct area *ar = area_of((uintptr_t)lva, &i);
    int rc = ar ? prepare(ar, i, write) : -EFAULT;
    if (rc < 0 && ar && *state(ar, i) != ST_DEAD) kill_page(ar, i, -rc);
    pthread_mutex_unlock(&mu);
    if (rc == 0) wake((uint8_t *)((uintptr_t)lva & ~(uintptr_t)(PAGE - 1))); /* threads that faulted meanwhile */
    return rc;
}

void dpu_mmap_wrote(const void *lva, const void *bytes, size_t n) {
    pthread_mutex_lock(&mu);
    size_t i;
    struct area *ar = area_of((uintptr_t)lva, &i);
    if (ar) {
        size_t off = ((uintptr_t)lva - dpu_mmap_lo) % PAGE;
        if (off + n > PAGE) n = PAGE - off;
        switch (*state(ar, i)) {
        case ST_CLEAN: drop(ar, i); break;
        case ST_DIRTY: /* the page is writable: keep it, and its twin, in line */
            memcpy(ar->base + i * PAGE + off, bytes, n);
            memcpy(ar->twin[i] + off, bytes, n);
            break;
        default: break;
        }
    }
    pthread_mutex_unlock(&mu);
}

int dpu_mmap_lookup(const void *lva, dpu_t **d_out, dpu_gva_t *gva_out) {
    pthread_mutex_lock(&mu);
    size_t i;
    struct area *ar = area_of((uintptr_t)lva, &i);
    if (ar) {
        if (d_out) *d_out = ar->c->user;
        if (gva_out) *gva_out = dpu_gva_add(ar->gva, ((uintptr_t)lva - (uintptr_t)ar->base));
    }
    pthread_mutex_unlock(&mu);
    return ar ? 0 : -EFAULT;
}

/* ---- events ---- */

static void conn_close_unlisted(struct conn *c) {
    if (!c) return;
    pthread_join(c->events, NULL);
    dpu_close(c->priv);
    dpu_close(c->io);
    free(c);
}
#define conn_close conn_close_unlisted

/* ---- reports to the agent (dpuctl mem maps) ---- */

enum { OP_MAPS = 18, MAPS_ENTRY = 72, MAPS_MAX = 56 };

static void put64le(uint8_t *b, uint64_t v) {
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(v >> (8 * i));
}

/* report sends the areas of c and their counters to the agent on c's refs
 * connection, when they changed since the last report (or force). */
static void report(struct conn *c, bool force) {
    uint8_t body[MAPS_MAX * MAPS_ENTRY];
    size_t n = 0;
    uint64_t sum = 0;
    pthread_mutex_lock(&mu);
    if (c->no_reports) {
        pthread_mutex_unlock(&mu);
        return;
    }
    for (struct area *ar = areas; ar && n < MAPS_MAX; ar = ar->next) {
        if (ar->c != c) continue;
        uint8_t *e = body + n++ * MAPS_ENTRY;
        memset(e, 0, MAPS_ENTRY);
        put64le(e, (uint64_t)(uintptr_t)ar->base);
        put64le(e + 8, (uint64_t)ar->pages * PAGE);
        put64le(e + 16, ar->gva.hi);
        put64le(e + 24, ar->gva.lo);
        e[32] = (uint8_t)(ar->prot & (PROT_READ | PROT_WRITE));
        put64le(e + 40, ar->read_faults);
        put64le(e + 48, ar->write_faults);
        put64le(e + 56, ar->writebacks);
        put64le(e + 64, ar->drops);
        sum += ar->read_faults + ar->write_faults + ar->writebacks + ar->drops + 1;
    }
    bool send = n > 0 && (force || sum != c->reported);
    c->reported = sum;
    pthread_mutex_unlock(&mu);
    if (!send) return;
    int rc = dpu__request(c->priv, OP_MAPS, body, n * MAPS_ENTRY);
    if (rc == -EINVAL || rc == -ENOSYS) { /* an agent without MAPS: do not pile up garbage */
        pthread_mutex_lock(&mu);
        c->no_reports = true;
        pthread_mutex_unlock(&mu);
    }
}

static void *serve_events(void *arg) {
    struct conn *c = arg;
    while (!atomic_load(&c->stop)) {
        dpu_event_t ev;
        int rc = dpu_next_event(c->priv, &ev, EVENT_POLL_MS);
        if (rc == -ETIMEDOUT) {
            report(c, false); /* counters, at most every EVENT_POLL_MS when idle */
            continue;
        }
        pthread_mutex_lock(&mu);
        if (rc < 0) {
            /* The node is gone: nothing here can be fetched or written back. */
            for (struct area *ar = areas; ar; ar = ar->next)
                if (ar->c == c)
                    for (size_t i = 0; i < ar->pages; i++)
                        if (*state(ar, i) != ST_DEAD) kill_page(ar, i, -rc);
            pthread_mutex_unlock(&mu);
            logf_("dpu_mmap: connection to the node lost (%s): the areas' pages raise SIGBUS", dpu_strerror(rc));
            break;
        }
        for (struct area *ar = areas; ar; ar = ar->next) {
            if (ar->c != c) continue;
            for (size_t i = 0; i < ar->pages; i++) {
                dpu_gva_t g = dpu_gva_add(ar->gva, i * PAGE);
                bool match = ev.type == DPU_EVENT_LOST || (g.hi == ev.page.hi && g.lo == ev.page.lo);
                if (!match) continue;
                unsigned char st = *state(ar, i);
                switch (ev.type) {
                case DPU_EVENT_LOST: /* any of the others may have been dropped */
                case DPU_EVENT_OWNERSHIP_LOST:
                    if (!ar->owned[i]) {
                        if (ev.type == DPU_EVENT_LOST && st == ST_CLEAN) drop(ar, i);
                        break;
                    }
                    /* Another node took the page: what this process wrote
                     * goes to it, and the next touch fetches from it. */
                    if (st == ST_DIRTY) writeback_or_kill(ar, i);
                    if (*state(ar, i) == ST_CLEAN) drop(ar, i);
                    ar->losses++;
                    disown(ar, i);
                    break;
                case DPU_EVENT_UPDATED:
                case DPU_EVENT_INVALIDATED:
                    if (st == ST_CLEAN) drop(ar, i);
                    break;
                case DPU_EVENT_FREED:
                    if (st != ST_DEAD) kill_page(ar, i, ENOENT);
                    break;
                default: break;
                }
            }
        }
        pthread_mutex_unlock(&mu);
    }
    return NULL;
}

/* conn_for finds or starts the private connection of d and counts an
 * area on it. Called without mu (opening and closing take it). */
static int conn_for(dpu_t *d, struct conn **out) {
    pthread_mutex_lock(&mu);
    for (struct conn *c = conns; c; c = c->next) {
        if (c->user == d) {
            c->areas++;
            *out = c;
            pthread_mutex_unlock(&mu);
            return 0;
        }
    }
    pthread_mutex_unlock(&mu);
    struct conn *c = calloc(1, sizeof *c);
    if (!c) return -ENOMEM;
    c->user = d;
    c->areas = 1;
    int rc = dpu__reopen(d, &c->priv);
    if (rc == 0) rc = dpu__reopen(d, &c->io);
    if (rc == 0)
        rc = dpu_subscribe(c->priv, DPU_EVENT_MASK(DPU_EVENT_INVALIDATED) | DPU_EVENT_MASK(DPU_EVENT_UPDATED) |
                                        DPU_EVENT_MASK(DPU_EVENT_FREED) |
                                        DPU_EVENT_MASK(DPU_EVENT_OWNERSHIP_LOST));
    if (rc == 0) {
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        rc = -pthread_create(&c->events, NULL, serve_events, c);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
    }
    if (rc < 0) {
        if (c->priv) dpu_close(c->priv);
        if (c->io) dpu_close(c->io);
        free(c);
        return rc;
    }
    pthread_mutex_lock(&mu);
    struct conn *other = NULL;
    for (struct conn *o = conns; o; o = o->next)
        if (o->user == d) other = o;
    if (other) { /* another thread was quicker: use its connection */
        other->areas++;
        atomic_store(&c->stop, true);
    } else {
        c->next = conns;
        conns = c;
    }
    pthread_mutex_unlock(&mu);
    if (other) {
        conn_close_unlisted(c);
        c = other;
    }
    *out = c;
    return 0;
}

/* conn_put drops an area's hold on c; the caller stops and closes it when
 * this returns it. mu held. */
static struct conn *conn_put(struct conn *c) {
    if (--c->areas > 0) return NULL;
    for (struct conn **p = &conns; *p; p = &(*p)->next) {
        if (*p == c) {
            *p = c->next;
            break;
        }
    }
    atomic_store(&c->stop, true);
    return c;
}


/* ---- mapping ---- */

static int take_refs(dpu_t *priv, dpu_gva_t gva, size_t pages, bool drop_them) {
    size_t step = dpu__max_map_pages(priv);
    int first = 0;
    for (size_t done = 0; done < pages; done += step) {
        size_t n = pages - done < step ? pages - done : step;
        int rc = dpu__refs(priv, dpu_gva_add(gva, done * PAGE), n, drop_them);
        if (rc < 0 && !drop_them) {
            if (done) take_refs(priv, gva, done, true);
            return rc;
        }
        if (rc < 0 && first == 0) first = rc;
    }
    return first;
}

static void free_area(struct area *ar) {
    if (!ar) return;
    if (ar->twin)
        for (size_t i = 0; i < ar->pages; i++) free(ar->twin[i]);
    free(ar->twin);
    free(ar->why);
    free(ar->owned);
    free(ar->fenced);
    free(ar);
}

int dpu_mmap(dpu_t *d, dpu_gva_t gva, size_t len, int prot, void **addr_out) {
    if (!d || !addr_out || len == 0 || gva.lo % PAGE != 0 || (prot != PROT_READ && prot != (PROT_READ | PROT_WRITE))) {
        logf_("dpu_mmap: need a connection, a page-start gva, a length and PROT_READ or PROT_READ|PROT_WRITE");
        return -EINVAL;
    }
    size_t pages = (len + PAGE - 1) / PAGE;
    struct area *ar = calloc(1, sizeof *ar);
    if (ar) {
        ar->twin = calloc(pages, sizeof *ar->twin);
        ar->why = calloc(pages, sizeof *ar->why);
        ar->owned = calloc(pages, 1);
        ar->fenced = calloc(pages, sizeof *ar->fenced);
    }
    if (!ar || !ar->twin || !ar->why || !ar->owned || !ar->fenced) {
        free_area(ar);
        return -ENOMEM;
    }
    ar->gva = gva;
    ar->pages = pages;
    ar->prot = prot;

    pthread_mutex_lock(&mu);
    int rc = reserve_range();
    if (rc == 0) rc = start_uffd();
    long first = rc == 0 ? dpu__extent_take(&free_ext, pages) : -1;
    if (rc == 0 && first < 0) rc = -ENOMEM;
    pthread_mutex_unlock(&mu);
    struct conn *c = NULL;
    if (rc == 0) rc = conn_for(d, &c);
    if (rc < 0) goto fail_extent;
    ar->c = c;
    ar->first = (size_t)first;
    ar->base = range_at(ar->first);

    /* Refs first: they check the permission (read; write for PROT_WRITE
     * is checked by the first write-back) and make the agent send events. */
    rc = take_refs(c->priv, gva, pages, false);
    if (rc < 0) goto fail_conn;
    if (mmap(ar->base, pages * PAGE, prot, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0) ==
        MAP_FAILED) {
        rc = -errno;
        goto fail_refs;
    }
    madvise(ar->base, pages * PAGE, MADV_DONTFORK);
    struct uffdio_register reg = {.range = {(uintptr_t)ar->base, pages * PAGE},
                                  .mode = UFFDIO_REGISTER_MODE_MISSING |
                                          ((prot & PROT_WRITE) ? UFFDIO_REGISTER_MODE_WP : 0)};
    if (ioctl(uffd, UFFDIO_REGISTER, &reg) < 0) {
        rc = -errno;
        logf_("dpu_mmap: registering %zu pages with userfaultfd: %s", pages, strerror(-rc));
        goto fail_map;
    }
    pthread_mutex_lock(&mu);
    memset(&dpu_mmap_pages[ar->first], ST_ABSENT, pages);
    ar->next = areas;
    areas = ar;
    pthread_mutex_unlock(&mu);
    report(c, true);
    *addr_out = ar->base;
    return 0;

fail_map:
    mmap(ar->base, pages * PAGE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
fail_refs:
    take_refs(c->priv, gva, pages, true);
fail_conn:
    pthread_mutex_lock(&mu);
    c = conn_put(c);
    pthread_mutex_unlock(&mu);
    conn_close(c);
fail_extent:
    if (first >= 0) {
        pthread_mutex_lock(&mu);
        dpu__extent_give(&free_ext, (size_t)first, pages);
        pthread_mutex_unlock(&mu);
    }
    free_area(ar);
    return rc;
}

/* unmap_area writes back, unregisters and forgets ar, which is already off
 * the list; it returns the connection to close, if this was its last. */
static struct conn *unmap_area(struct area *ar, int *rc) {
    for (size_t i = 0; i < ar->pages; i++) {
        if (*state(ar, i) == ST_DIRTY) writeback_or_kill(ar, i);
        disown(ar, i);
    }
    for (size_t i = 0; i < ar->pages; i++) {
        unsigned char st = *state(ar, i);
        if (st == ST_CLEAN || st == ST_DIRTY) __atomic_sub_fetch(&present_pages, 1, __ATOMIC_RELEASE);
        if (st == ST_DEAD && *rc == 0) *rc = -ar->why[i];
    }
    struct uffdio_range r = {(uintptr_t)ar->base, ar->pages * PAGE};
    ioctl(uffd, UFFDIO_UNREGISTER, &r);
    mmap(ar->base, ar->pages * PAGE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
    memset(&dpu_mmap_pages[ar->first], ST_ABSENT, ar->pages);
    dpu__extent_give(&free_ext, ar->first, ar->pages);
    int r2 = take_refs(ar->c->priv, ar->gva, ar->pages, true);
    if (r2 < 0 && *rc == 0) *rc = r2;
    return conn_put(ar->c);
}

int dpu_munmap(dpu_t *d, void *addr, size_t len) {
    pthread_mutex_lock(&mu);
    struct area *ar = NULL;
    for (struct area **p = &areas; *p; p = &(*p)->next) {
        if ((*p)->base == addr && (*p)->c->user == d && ((len + PAGE - 1) / PAGE) == (*p)->pages) {
            ar = *p;
            *p = ar->next;
            break;
        }
    }
    if (!ar) {
        pthread_mutex_unlock(&mu);
        return -EINVAL;
    }
    int rc = 0;
    struct conn *c = unmap_area(ar, &rc);
    pthread_mutex_unlock(&mu);
    conn_close(c);
    free_area(ar);
    return rc;
}

void dpu__mmap_closing(dpu_t *d) {
    if (!dpu_mmap_span) return;
    for (;;) {
        pthread_mutex_lock(&mu);
        struct area *ar = NULL;
        for (struct area **p = &areas; *p; p = &(*p)->next) {
            if ((*p)->c->user == d) {
                ar = *p;
                *p = ar->next;
                break;
            }
        }
        if (!ar) {
            pthread_mutex_unlock(&mu);
            return;
        }
        int rc = 0;
        struct conn *c = unmap_area(ar, &rc);
        pthread_mutex_unlock(&mu);
        conn_close(c);
        free_area(ar);
    }
}

int dpu_mmap_list(dpu_mmap_info_t *out, int cap) {
    int n = 0;
    pthread_mutex_lock(&mu);
    for (struct area *ar = areas; ar; ar = ar->next, n++) {
        if (n < cap)
            out[n] = (dpu_mmap_info_t){ar->base,        ar->gva,        ar->pages * PAGE,
                                       ar->prot,        ar->read_faults, ar->write_faults,
                                       ar->writebacks,  ar->drops,      ar->acquisitions,
                                       ar->losses};
    }
    pthread_mutex_unlock(&mu);
    return n;
}

/* ---- process life ---- */

/* at_exit writes back what is dirty (a process that exits without
 * dpu_munmap or dpu_close keeps its writes). */
static void at_exit(void) { dpu_mmap_sync(DPU_SYNC_RELEASE); }

static void before_fork(void) { pthread_mutex_lock(&mu); }
static void after_fork_parent(void) { pthread_mutex_unlock(&mu); }

/* after_fork_child: the areas are not inherited (MADV_DONTFORK) and
 * neither are the threads: forget them, so the child starts afresh. The
 * connections belong to the parent; the child never closes them. */
static void after_fork_child(void) {
    for (struct area *ar = areas, *n; ar; ar = n) {
        n = ar->next;
        free_area(ar);
    }
    for (struct conn *c = conns, *n; c; c = n) {
        n = c->next;
        free(c);
    }
    for (struct extent *e = free_ext, *n; e; e = n) {
        n = e->next;
        free(e);
    }
    areas = NULL;
    conns = NULL;
    free_ext = NULL;
    if (uffd >= 0) close(uffd);
    if (stop_fd >= 0) close(stop_fd);
    uffd = stop_fd = -1;
    dirty_pages = present_pages = 0;
    nheld = 0; /* the locks are the parent's connections' */
    dpu_mmap_span = 0;
    dpu_mmap_lo = 0;
    dpu_mmap_pages = NULL;
    pthread_mutex_unlock(&mu); /* taken by before_fork in this thread */
}
