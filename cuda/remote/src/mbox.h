/*
 * mbox.h — fabric mailboxes: one side of a session between a client and
 * the launcher (see wire.h). Both sides use the same code: a side owns its
 * inbox (message page + staging pages, on its node) and writes into the
 * peer's inbox. Bulk data is striped over a pool of threads, each moving
 * whole pages with STORE (into the peer's staging) or LOAD (out of its own),
 * each thread on its own connection.
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
 * carries that tag. len <= mbox_capacity. */
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
 * rw_stage_hdr and RW_STAGE_DATA bytes. */
int pages_store(struct pool *p, dpu_t *d, dpu_gva_t base, const void *buf, size_t len, struct rw_stage_hdr tag);
int pages_load(struct pool *p, dpu_t *d, dpu_gva_t base, void *buf, size_t len, struct rw_stage_hdr tag);

uint64_t mono_ms(void);
uint64_t fnv64(const void *p, size_t n);

#endif
