/*
 * The host side of a ring pair: the submission ring's producer and the
 * completion ring's consumer (hostif/PROTOCOL.md §12; the Go twin is
 * hostif/ring). Indices are 32-bit atomics in the shared memfd; each side
 * keeps cached copies and checks every index it loads: the agent is
 * trusted, but a broken one must not make this library read outside the
 * mapping.
 */
#define _GNU_SOURCE
#include "ring.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

enum {
    MAGIC = 0x52555044, /* "DPUR" */
    LAYOUT_VERSION = 2,
    OFF_MAGIC = 0, OFF_VERSION = 4, OFF_ENTRIES = 8, OFF_SLOT_SIZE = 12, OFF_MAP_SIZE = 16,
    OFF_SQ_PRODUCER = 128, OFF_SQ_CONSUMER = 256, OFF_SQ_FLAGS = 384,
    OFF_CQ_PRODUCER = 512, OFF_CQ_CONSUMER = 640, OFF_CQ_FLAGS = 768,
    CONTROL_SIZE = 4096,
    SLOT_HEADER = 8, SLOT_SEQ = 4,
    MIN_ENTRIES = 2, MAX_ENTRIES = 256,
    MIN_SLOT = 4160, MAX_SLOT = 8192,
    NEED_WAKEUP = 1, HOST_WAITING = 1,
};

struct words {
    _Atomic uint32_t *producer, *consumer, *flags;
};

struct dpu_ring {
    uint8_t *mem;
    size_t len;
    int memfd, bell;
    uint32_t entries, mask, slot;
    uint8_t *sq_slots, *cq_slots;
    struct words sq, cq;
    /* submission producer: next index, and consumer + entries as last loaded */
    uint32_t sq_next, sq_limit;
    /* completion consumer: next index, and producer as last loaded */
    uint32_t cq_next, cq_ready;
};

static uint32_t rd32(const uint8_t *b) { uint32_t v; memcpy(&v, b, 4); return v; } /* little-endian hosts */
static uint64_t rd64(const uint8_t *b) { uint64_t v; memcpy(&v, b, 8); return v; }

static _Atomic uint32_t *word(uint8_t *mem, size_t off) { return (_Atomic uint32_t *)(void *)(mem + off); }

/* slot_seq is a slot's sequence word: its index + 1 once the message is
 * in it. */
static _Atomic uint32_t *slot_seq(uint8_t *slot) { return (_Atomic uint32_t *)(void *)(slot + SLOT_SEQ); }

int dpu_ring_attach(int memfd, int bell, uint32_t entries, uint32_t slot_size, uint64_t map_size,
                    struct dpu_ring **out) {
    *out = NULL;
    int rc = -EPROTO;
    struct stat st;
    int seals = fcntl(memfd, F_GET_SEALS);
    int want = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;
    if (seals < 0 || (seals & want) != want || (seals & (F_SEAL_WRITE | F_SEAL_FUTURE_WRITE)) != 0) goto fail;
    if (fstat(memfd, &st) < 0 || (uint64_t)st.st_size != map_size) goto fail;
    if (entries < MIN_ENTRIES || entries > MAX_ENTRIES || (entries & (entries - 1)) != 0) goto fail;
    if (slot_size < MIN_SLOT || slot_size > MAX_SLOT || slot_size % 64 != 0) goto fail;
    if (map_size != CONTROL_SIZE + 2 * (uint64_t)entries * slot_size) goto fail;
    uint8_t *mem = mmap(NULL, map_size, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
    if (mem == MAP_FAILED) {
        rc = -errno;
        goto fail;
    }
    if (rd32(mem + OFF_MAGIC) != MAGIC || (rd32(mem + OFF_VERSION) & 0xffff) != LAYOUT_VERSION ||
        rd32(mem + OFF_ENTRIES) != entries || rd32(mem + OFF_SLOT_SIZE) != slot_size ||
        rd64(mem + OFF_MAP_SIZE) != map_size) {
        munmap(mem, map_size);
        goto fail;
    }
    struct dpu_ring *r = calloc(1, sizeof *r);
    if (!r) {
        munmap(mem, map_size);
        rc = -ENOMEM;
        goto fail;
    }
    r->mem = mem;
    r->len = map_size;
    r->memfd = memfd;
    r->bell = bell;
    r->entries = entries;
    r->mask = entries - 1;
    r->slot = slot_size;
    r->sq_slots = mem + CONTROL_SIZE;
    r->cq_slots = mem + CONTROL_SIZE + (size_t)entries * slot_size;
    r->sq = (struct words){word(mem, OFF_SQ_PRODUCER), word(mem, OFF_SQ_CONSUMER), word(mem, OFF_SQ_FLAGS)};
    r->cq = (struct words){word(mem, OFF_CQ_PRODUCER), word(mem, OFF_CQ_CONSUMER), word(mem, OFF_CQ_FLAGS)};
    r->sq_next = atomic_load_explicit(r->sq.producer, memory_order_relaxed);
    r->sq_limit = r->sq_next;
    r->cq_next = atomic_load_explicit(r->cq.consumer, memory_order_relaxed);
    r->cq_ready = r->cq_next;
    *out = r;
    return 0;
fail:
    close(memfd);
    close(bell);
    return rc;
}

void dpu_ring_close(struct dpu_ring *r) {
    if (!r) return;
    munmap(r->mem, r->len);
    close(r->memfd);
    close(r->bell);
    free(r);
}

int dpu_ring_bell(const struct dpu_ring *r) { return r->bell; }

static void ring_bell(int fd) {
    static const uint8_t one = 1;
    (void)send(fd, &one, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
}

int dpu_ring_submit(struct dpu_ring *r, const uint8_t *msg, size_t n) {
    if (n == 0 || n > r->slot - SLOT_HEADER) return -EMSGSIZE;
    if (r->sq_limit == r->sq_next) {
        uint32_t cons = atomic_load_explicit(r->sq.consumer, memory_order_acquire);
        if (r->sq_next - cons > r->entries) return -EPROTO;
        r->sq_limit = cons + r->entries;
        if (r->sq_limit == r->sq_next) return -EAGAIN;
    }
    uint8_t *s = r->sq_slots + (size_t)(r->sq_next & r->mask) * r->slot;
    uint32_t len = (uint32_t)n;
    memcpy(s, &len, 4);
    memcpy(s + SLOT_HEADER, msg, n);
    /* The sequence word last (release): an agent polling the slot takes
     * the message with the same cache line. */
    atomic_store_explicit(slot_seq(s), r->sq_next + 1, memory_order_release);
    r->sq_next++;
    /* Publish, then look at the agent's flag: seq_cst on both, the
     * store-load pair of the wakeup protocol. */
    atomic_store_explicit(r->sq.producer, r->sq_next, memory_order_seq_cst);
    if (atomic_load_explicit(r->sq.flags, memory_order_seq_cst) & NEED_WAKEUP) ring_bell(r->bell);
    return 0;
}

/* refresh loads and checks the completion producer index: the number of
 * ready completions, or -EPROTO. The index may lag behind the slots taken
 * through their sequence words (the agent publishes it after the slots),
 * by at most the ring's size. */
static int64_t refresh(struct dpu_ring *r, memory_order mo) {
    uint32_t prod = atomic_load_explicit(r->cq.producer, mo);
    uint32_t n = prod - r->cq_next;
    if (n > r->entries) {
        if (r->cq_next - prod > r->entries) return -EPROTO;
        r->cq_ready = r->cq_next;
        return 0;
    }
    r->cq_ready = prod;
    return n;
}

ssize_t dpu_ring_reap(struct dpu_ring *r, uint8_t *dst, size_t cap) {
    uint8_t *s = r->cq_slots + (size_t)(r->cq_next & r->mask) * r->slot;
    /* Poll the next slot's sequence word, not the producer index: the
     * completion and the sign that it is there share a cache line. */
    uint32_t seq = atomic_load_explicit(slot_seq(s), memory_order_acquire);
    if (r->cq_ready == r->cq_next) {
        if (seq != r->cq_next + 1) return 0;
        r->cq_ready = r->cq_next + 1;
    } else if (seq != r->cq_next + 1) {
        return -EPROTO; /* the producer index ran ahead of the slots */
    }
    uint32_t len = rd32(s);
    if (len == 0 || len > r->slot - SLOT_HEADER || len > cap) return -EPROTO;
    memcpy(dst, s + SLOT_HEADER, len);
    r->cq_next++;
    atomic_store_explicit(r->cq.consumer, r->cq_next, memory_order_release);
    return (ssize_t)len;
}

int dpu_ring_wait_begin(struct dpu_ring *r) {
    if (r->cq_ready != r->cq_next) return 1;
    atomic_store_explicit(r->cq.flags, HOST_WAITING, memory_order_seq_cst);
    int64_t n = refresh(r, memory_order_seq_cst);
    if (n < 0) return (int)n;
    return n > 0;
}

void dpu_ring_wait_end(struct dpu_ring *r) {
    atomic_store_explicit(r->cq.flags, 0, memory_order_relaxed);
    uint8_t b[8];
    for (int i = 0; i < 64 && recv(r->bell, b, sizeof b, MSG_DONTWAIT) >= 0; i++) {
    }
}
