/*
 * mbox.h — fabric mailboxes: one side of a session between a client and
 * the launcher (see wire.h). Both sides use the same code: a side owns its
 * inbox (message page + staging pages, on its node) and writes into the
 * peer's inbox. Bulk data moves in chunks of RW_CHUNK_PAGES staging pages,
 * each chunk one dpu_store into the peer's staging or dpu_load out of its
 * own (libdpu sends a range longer than a page as STORE_BULK/LOAD_BULK
 * through the connection's bulk area), the chunks striped over a pool of
 * threads, each on its own connection, so several are in flight at once.
 * Each page carries a CRC-32C that the reader checks.
 */
#ifndef DPUCUDA_REMOTE_MBOX_H
#define DPUCUDA_REMOTE_MBOX_H

#include <stddef.h>
#include <stdint.h>

#include "dpu.h"
#include "wire.h"

struct pool;

struct mbox {
    dpu_t *d;
    dpu_gva_t own;        /* my inbox (page 0: messages, 1..: staging) */
    dpu_gva_t peer;       /* the peer's inbox */
    uint32_t staging_pages;
    uint64_t last_seen;   /* the seq of the last message taken from my inbox */
    uint64_t token;       /* non-zero: messages with another token are not mine (a slot's earlier session) */
    struct pool *pool;
    uint32_t xfer;        /* RW_XFER_*: bulk chunks (0) or a STORE/LOAD a page */
    /* alive, when not NULL, is called about every 100 ms while mbox_get
     * waits for pages that have not arrived; its non-zero return ends the
     * wait (the peer is gone). Called on the waiting thread only. */
    int (*alive)(void *);
    void *alive_arg;
};

/* pool_new starts n threads (1..64) moving pages, each on its own
 * connection to sock (NULL: libdpu's default): a connection's requests are
 * submitted by one thread at a time. */
struct pool *pool_new(const char *sock, int n);
void pool_free(struct pool *p);

/* mbox_send STOREs one message (hdr + len bytes of body) into the peer's
 * message page. len <= RW_BODY_MAX. */
int mbox_send(struct mbox *m, const struct rw_hdr *h, const void *body, uint32_t len);

/* mbox_recv waits until the message page holds a message whose seq is
 * want (want 0: any seq other than the last one seen), then copies its
 * header and body (at most cap bytes; a longer body is -EPROTO). Waits at
 * most timeout_ms (-ETIMEDOUT); alive, when not NULL, is called about every
 * 100 ms of waiting and ends the wait with its non-zero return. */
int mbox_recv(struct mbox *m, uint64_t want, struct rw_hdr *h, void *body, uint32_t cap, int timeout_ms,
              int (*alive)(void *), void *arg);

/* mbox_put STOREs len bytes into the peer's staging area, tagged with the
 * seq of the message they go with (and the session's token); mbox_get
 * LOADs len bytes of my staging area, waiting (bounded) until every page
 * carries that tag and its checksum holds. A page that stays corrupt
 * fails the get with -EBADMSG (its bytes are not delivered). len <=
 * mbox_capacity. */
int mbox_put(struct mbox *m, const void *buf, size_t len, uint64_t seq);
int mbox_get(struct mbox *m, void *buf, size_t len, uint64_t seq);
/* The same from staging page stage on (0-based): stage + the pages of len
 * <= the staging size. */
int mbox_put_at(struct mbox *m, uint32_t stage, const void *buf, size_t len, uint64_t seq);
int mbox_get_at(struct mbox *m, uint32_t stage, void *buf, size_t len, uint64_t seq);
/* mbox_fits: len bytes from staging page stage on fit the staging area. */
int mbox_fits(const struct mbox *m, uint32_t stage, size_t len);
size_t mbox_capacity(const struct mbox *m);

/* Staging pages at any GVA (the pool's work): each page holds a
 * rw_stage_hdr, RW_STAGE_DATA bytes and a rw_stage_tail. x (NULL: bulk
 * chunks, no liveness check) says how they move. */
struct xfer {
    uint32_t mode; /* RW_XFER_* */
    int (*alive)(void *);
    void *arg;
};
int pages_store(struct pool *p, dpu_t *d, dpu_gva_t base, const void *buf, size_t len, struct rw_stage_hdr tag,
                const struct xfer *x);
int pages_load(struct pool *p, dpu_t *d, dpu_gva_t base, void *buf, size_t len, struct rw_stage_hdr tag,
               const struct xfer *x);

/* One staging page (the decoder of bytes another node wrote): page_format
 * writes header, m data bytes (m <= RW_STAGE_DATA) and trailer; page_check
 * says whether the sizeof hdr + m + RW_STAGE_TRAILER bytes at page are page
 * index of the message tag names: PAGE_OK, PAGE_STALE (another message's,
 * or another page's) or PAGE_BAD (this message's header, wrong checksum). */
enum { PAGE_OK = 0, PAGE_STALE = 1, PAGE_BAD = 2 };
void page_format(unsigned char *page, const void *data, size_t m, struct rw_stage_hdr tag, uint32_t index);
int page_check(const unsigned char *page, size_t m, struct rw_stage_hdr tag, uint32_t index);

/* crc32c: CRC-32C (Castagnoli, reflected, as iSCSI and ext4 use it) of n
 * bytes, continuing crc (0 to start). */
uint32_t crc32c(uint32_t crc, const void *p, size_t n);

/* Fault injection for tests: DPU_CUDA_REMOTE_FAULT=corrupt-chunk=N makes
 * the N-th chunk of staging pages this process stores (1-based) arrive
 * corrupt: a data byte flipped after its checksum was made. */

uint64_t mono_ms(void);
uint64_t fnv64(const void *p, size_t n);

#endif
