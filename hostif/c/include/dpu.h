/*
 * dpu.h — host library of the dpu shared address space.
 *
 * A host program talks to its node's DPU agent through the host interface
 * socket (RUN_DIR/dpu0.sock, protocol in hostif/PROTOCOL.md). This library
 * is plain C11 with POSIX threads: no Go runtime, no other dependency.
 *
 * Conventions
 *   - Every int function returns 0 on success or a negative errno
 *     (-EACCES, -ETIMEDOUT, ...). dpu_strerror() names it; dpu_last_error()
 *     gives the server's text for the calling thread's last failure.
 *   - A dpu_t is one connection (one "open" of the device). It is safe to
 *     use from many threads at once: their requests are pipelined on the
 *     connection and replies are matched by request id. Every call is
 *     bounded by the connection's timeout (dpu_set_timeout, default 30 s).
 *   - dpu_close must not race with other calls on the same dpu_t.
 *   - GVAs are 128-bit: hi carries flags, ref index and machine index, lo
 *     the page number and byte offset (see package gva). Text form:
 *     "gva:" followed by 32 hex digits.
 *   - 64-bit values in shared pages are little-endian.
 */
#ifndef DPU_H
#define DPU_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define DPU_API __attribute__((visibility("default")))
#else
#define DPU_API
#endif

#define DPU_PAGE_SIZE 4096
#define DPU_GVA_TEXT_LEN 36 /* "gva:" + 32 hex digits, without the NUL */

typedef struct { uint64_t hi, lo; } dpu_gva_t;
typedef struct dpu dpu_t;

/* Location tiers (dpu_where's tier_out) and speed tiers. */
enum { DPU_TIER_LOCAL = 0, DPU_TIER_MACHINE = 1, DPU_TIER_NEIGHBOUR = 2, DPU_TIER_REMOTE = 3 };
enum { DPU_SPEED_MEMORY = 0, DPU_SPEED_FAST_DISK = 1, DPU_SPEED_SLOW_DISK = 2 };

typedef struct {
    int tier;          /* DPU_TIER_* */
    int speed;         /* DPU_SPEED_* */
    int hops;          /* DPU hops to the page's owner */
    uint32_t owner;    /* machine index of the owner */
    uint64_t version;  /* the owner's page version */
} dpu_location_t;

/* Events (dpu_subscribe, dpu_next_event). */
enum {
    DPU_EVENT_INVALIDATED = 1,     /* a mapped page has a newer version than its replica */
    DPU_EVENT_UPDATED = 2,         /* a mapped page's replica was updated in place */
    DPU_EVENT_HOST_FAULT = 3,      /* the pin of a page this connection locked was revoked */
    DPU_EVENT_OWNERSHIP_LOST = 4,  /* a page this connection locked/acquired changed owner */
    DPU_EVENT_FREED = 5,           /* a mapped page was freed */
    DPU_EVENT_LOST = 6             /* events were dropped: treat every mapping as stale */
};
#define DPU_EVENT_MASK(type) (1u << ((type) - 1))
#define DPU_EVENTS_ALL 0x3fu

typedef struct {
    int type;          /* DPU_EVENT_* */
    dpu_gva_t page;
    uint64_t version;
    int reason;        /* errno-style reason (host fault) */
    uint16_t offset, length; /* DPU_EVENT_UPDATED: the bytes that changed */
    uint64_t seq;      /* the connection's event sequence number */
} dpu_event_t;

/* Connections. sock_path NULL: $DPU_SOCKET, else $DPU_RUN_DIR/dpu0.sock,
 * else /run/dpu/dpu0.sock. dpu_open asks the agent for a shared-memory ring
 * pair and, when it offers one, sends requests through it (their replies
 * are awaited by spinning $DPU_RING_SPIN_US, default 50, then sleeping);
 * DPU_RINGS=0 keeps every request on the socket. */
DPU_API int  dpu_open(const char *sock_path, dpu_t **out);
DPU_API void dpu_close(dpu_t *d);
DPU_API void dpu_set_timeout(dpu_t *d, int timeout_ms);
DPU_API uint32_t dpu_machine(const dpu_t *d); /* this node's machine index */

/* Pages. alloc is page-granular and owned by this node (mode 0600);
 * dpu_alloc_mode sets the permission bits (0: 0600). free takes the first
 * page of an allocation. */
DPU_API int dpu_alloc(dpu_t *d, size_t bytes, dpu_gva_t *out);
DPU_API int dpu_alloc_mode(dpu_t *d, size_t bytes, unsigned mode, dpu_gva_t *out);
DPU_API int dpu_free(dpu_t *d, dpu_gva_t gva);

/* Local mapping: ref + read-only mapping of this host's replicas at *lva_out.
 * Raw loads from the mapping cost a memory load; dpu_read/dpu_read64 give a
 * consistent snapshot (re-fetched through the node when the replica is
 * stale). Touching a mapping after dpu_unmap faults. */
DPU_API int dpu_map(dpu_t *d, dpu_gva_t gva, size_t bytes, const void **lva_out);
DPU_API int dpu_unmap(dpu_t *d, dpu_gva_t gva);
DPU_API int dpu_read(dpu_t *d, const void *lva, void *buf, size_t n);
DPU_API int dpu_read64(dpu_t *d, const void *lva, uint64_t *out); /* lva 8-byte aligned */

/* Shared memory at an address of this process, driven by page faults.
 *
 * dpu_mmap maps len bytes of shared pages from gva (a page start) at an
 * address of the process (*addr_out). prot is PROT_READ or
 * PROT_READ|PROT_WRITE (<sys/mman.h>). Pages are filled on first touch: a
 * read of a page not here fetches it through the node (a replica); a write
 * to a page this process does not own makes this node the page's owner
 * (ownership protocol, bounded by the connection's timeout), fetches its
 * content and makes it writable here. Writes reach the node, which owns the
 * page, as the bytes that differ from the content the page was made
 * writable from, at release points: dpu_release, dpu_unlock, dpu_mmap_sync
 * with DPU_SYNC_RELEASE (the dpu-cc runtime calls it before every release
 * atomic), dpu_munmap, dpu_close and exit; after one, the next write to a
 * page still owned here costs a local write-protect fault. When another node
 * takes a page (it wrote or locked it), what this process wrote to it is
 * written back and the page is unmapped here; the next touch fetches it
 * from its new owner. Acquire points (dpu_acquire, dpu_lock,
 * DPU_SYNC_ACQUIRE) drop the cached pages, so the next touch fetches the
 * current content. Programs that write shared data under a dpu_lock (or a
 * C11 release/acquire pair, under dpu-cc) and read it after taking the lock
 * see sequentially consistent pages, across pages as well: the release
 * waits for the owner's acknowledgement of every write-back, and the first
 * read of a page after an acquire point first asks the page's owner for
 * its version (a compare-and-swap that leaves the word as it is, so a
 * PROT_WRITE-less user without write permission gets unfenced reads, with
 * a logged warning), so this node's replica, whose updates may come by
 * another path than the release, is not read below it. Between those points a cached page is dropped
 * when the node reports it changed (updated or invalidated). Faults are
 * served by a thread of the library through userfaultfd (on x86_64,
 * DPU_MMAP_FAULTS=signal serves them in the faulting thread, from a SIGBUS
 * handler, which saves two thread hand-offs per fault; system calls that
 * touch an absent page then fail with EFAULT); a fault that
 * cannot be served (page freed, node lost, ownership not granted in time,
 * a write-back failed) logs its reason on stderr and raises SIGBUS in the
 * faulting thread. The mapping is not inherited by fork (MADV_DONTFORK).
 * Needs the read (and for PROT_WRITE the write) permission of every page. */
enum { DPU_SYNC_RELEASE = 1, DPU_SYNC_ACQUIRE = 2 };
DPU_API int dpu_mmap(dpu_t *d, dpu_gva_t gva, size_t len, int prot, void **addr_out);
DPU_API int dpu_munmap(dpu_t *d, void *addr, size_t len);
DPU_API void dpu_mmap_sync(unsigned flags);

/* What the dpu-cc runtime needs (see cc/README.md). All dpu_mmap areas of
 * the process lie in one reserved range: an address a is shared iff
 * (uintptr_t)a - dpu_mmap_lo < dpu_mmap_span (one compare; both stay 0
 * until the first dpu_mmap). dpu_mmap_lookup gives the connection and GVA
 * of a shared address; dpu_mmap_touch makes its page present (write: and
 * writable) without waiting for a fault; dpu_mmap_wrote tells the mapping
 * that an atomic at the owner wrote n bytes at lva (the cached page is
 * updated or dropped). */
extern DPU_API uintptr_t dpu_mmap_lo, dpu_mmap_span;
extern DPU_API unsigned char *dpu_mmap_pages; /* state per page of the range: 0 absent, 1 clean, 2 dirty, 3 dead */
DPU_API int dpu_mmap_lookup(const void *lva, dpu_t **d_out, dpu_gva_t *gva_out);
DPU_API int dpu_mmap_touch(const void *lva, int write);
DPU_API void dpu_mmap_wrote(const void *lva, const void *bytes, size_t n);

/* Per-area counters (dpuctl mem maps shows them through the agent). */
typedef struct {
    void *addr;
    dpu_gva_t gva;
    size_t len;
    int prot;
    uint64_t read_faults, write_faults, writebacks, drops;
    uint64_t acquisitions, losses; /* ownership taken by writes; taken away by other nodes */
} dpu_mmap_info_t;
/* dpu_mmap_list fills up to cap entries and returns how many areas exist. */
DPU_API int dpu_mmap_list(dpu_mmap_info_t *out, int cap);

/* Accesses through the node (any alignment for load/store; atomics need an
 * 8-byte aligned address). dpu_load/dpu_store take any length; one longer
 * than a page keeps up to 16 page requests in flight on the connection and
 * returns when every page is done. On an error it returns the first failing
 * page's: every page before that one was loaded or stored, pages after it
 * may or may not have been. */
DPU_API int dpu_load(dpu_t *d, dpu_gva_t addr, void *buf, size_t n);
DPU_API int dpu_store(dpu_t *d, dpu_gva_t addr, const void *buf, size_t n);
/* dpu_storev stores n buffers, each at its own address, as one transfer:
 * their page requests share the window of up to 16 in flight, sent in the
 * order given. On an error it returns the first failing page's, and *done
 * (when not NULL) says how many of the leading buffers were stored whole
 * before it (n on success); later ones may or may not have been. */
typedef struct {
    dpu_gva_t addr;
    const void *buf;
    size_t len;
} dpu_iov_t;
DPU_API int dpu_storev(dpu_t *d, const dpu_iov_t *v, size_t n, size_t *done);
DPU_API int dpu_load64(dpu_t *d, dpu_gva_t addr, uint64_t *out);
DPU_API int dpu_store64(dpu_t *d, dpu_gva_t addr, uint64_t val);
DPU_API int dpu_cas64(dpu_t *d, dpu_gva_t addr, uint64_t expected, uint64_t desired, uint64_t *old_out);
DPU_API int dpu_fetch_add64(dpu_t *d, dpu_gva_t addr, uint64_t delta, uint64_t *old_out);

/* Ownership. lock = ownership + pin; it blocks with a bound (the server's
 * default, or timeout_ms) and fails with -ETIMEDOUT, or -EBUSY for trylock
 * when another process of this host holds it. */
DPU_API int dpu_acquire(dpu_t *d, dpu_gva_t page, int timeout_ms);
DPU_API int dpu_release(dpu_t *d, dpu_gva_t page);
DPU_API int dpu_lock(dpu_t *d, dpu_gva_t page);
DPU_API int dpu_lock_timeout(dpu_t *d, dpu_gva_t page, int timeout_ms);
DPU_API int dpu_trylock(dpu_t *d, dpu_gva_t page);
DPU_API int dpu_unlock(dpu_t *d, dpu_gva_t page);

/* Where a page lives. */
DPU_API int dpu_where(dpu_t *d, dpu_gva_t addr, int *tier_out, int *hops_out);
DPU_API int dpu_locate(dpu_t *d, dpu_gva_t addr, dpu_location_t *out);

/* The cluster clock: the fabric's common time in ns (the clock of its
 * reference node, ref) and the bound on its error, as this node's agent
 * knows them when it answers. Clocks of two nodes' readings compare:
 * a.time + a.error < b.time - b.error means a was read before b. On
 * failure error is the negative errno (time and ref are 0). */
typedef struct {
    int64_t time;
    int64_t error;
    uint32_t ref;
} dpu_clock_t;
DPU_API dpu_clock_t dpu_clock(dpu_t *d);

/* LVA <-> GVA of this process's mappings. */
DPU_API int dpu_translate_lva(dpu_t *d, const void *lva, dpu_gva_t *out);
DPU_API int dpu_translate_gva(dpu_t *d, dpu_gva_t gva, const void **lva_out);

/* Events: choose them with a mask of DPU_EVENT_MASK bits, then take them
 * one by one; dpu_next_event waits up to timeout_ms (-ETIMEDOUT). */
DPU_API int dpu_subscribe(dpu_t *d, uint32_t mask);
DPU_API int dpu_next_event(dpu_t *d, dpu_event_t *ev, int timeout_ms);

/* A request of an op this header does not wrap: the extension range
 * 64..79 (the CUDA hook's GPU accounting ops: cuda/hook, cuda/hookwire). body is sent
 * as is; the reply body (at most cap bytes, else -EPROTO) is copied to reply
 * and its length stored in *len_out. On a server error reply the server's
 * text is in dpu_last_error(). */
DPU_API int dpu_call(dpu_t *d, uint16_t op, const void *body, size_t len, void *reply, size_t cap,
                     size_t *len_out);

/* GVA text and arithmetic. */
DPU_API int dpu_gva_parse(const char *text, dpu_gva_t *out);
DPU_API int dpu_gva_format(dpu_gva_t gva, char *buf, size_t len); /* len >= 37 */
static inline dpu_gva_t dpu_gva_add(dpu_gva_t g, uint64_t bytes) { g.lo += bytes; return g; }

DPU_API const char *dpu_strerror(int err);  /* err may be negative or positive */
DPU_API const char *dpu_last_error(void);   /* this thread's last failure, in words */

/* The seed's form, on a per-thread default connection (dpu_open(NULL)):
 * returns the old value; on failure returns 0 and sets errno (so set errno
 * to 0 before the call to tell the two apart). */
DPU_API uint64_t atomic_cas_remote(dpu_gva_t addr, uint64_t expected, uint64_t desired);

#ifdef __cplusplus
}
#endif
#endif /* DPU_H */
