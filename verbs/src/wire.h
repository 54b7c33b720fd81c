/*
 * wire.h — the bytes libdpuverbs keeps in fabric pages, which peers read:
 * the directory (header, QP and MR entries) and the mailbox slots. Every
 * decoder here treats its input as a hostile peer's and answers -EINVAL for
 * anything out of range; the Go fuzz tests (wire_fuzz_test.go) run them.
 * Plain C11, no rdma-core types: cgo builds this file for the tests.
 * Layouts: docs/verbs.md.
 */
#ifndef DPUVERBS_WIRE_H
#define DPUVERBS_WIRE_H

#include <stddef.h>
#include <stdint.h>

#define PAGE 4096u

/* Directory: page 0 = header + QP table, pages 1..DIR_PAGES-1 = MR table. */
#define DIR_PAGES 4u
#define DIR_MAGIC 0x5342524556555044ull /* "DPUVERBS" little-endian */
#define DIR_VERSION 2u
#define DIR_HDR 64u
#define QP_ENTRY 32u
#define MAX_QP ((PAGE - DIR_HDR) / QP_ENTRY) /* 126 */
#define MR_ENTRY 32u
#define MAX_MR ((DIR_PAGES - 1) * PAGE / MR_ENTRY) /* 384 */

/* Mailbox: page 0 = header (u64 consumed, u64 error, u64 doorbell: the
 * sender's count of slots stored, then maybe a copy of the last slot; at
 * MBOX_NBELL the notices' doorbell), pages 1..MBOX_SLOTS = slots. */
#define MBOX_BELL 16u
/* A batch of one slot of at most SLOT_HDR + MBOX_COPY_DATA bytes rings the
 * doorbell with a copy of the slot after it (at MBOX_COPY): one store of
 * at most 256 bytes, which the node writes into the receiver's mapping of
 * the header page before it reports it, so the receiver reads the slot
 * there without a request. */
#define MBOX_COPY 24u
#define MBOX_COPY_DATA 128u
/* The notices' doorbell: rung by the thread that stores the notices, as
 * MBOX_BELL is by the one that streams slots; each rises on its own. */
#define MBOX_NBELL 256u
#define MBOX_SLOTS 128u
#define MBOX_PAGES (1u + MBOX_SLOTS)
#define SLOT_HDR 64u
#define SLOT_DATA (PAGE - SLOT_HDR) /* 4032 */

enum { SLOT_SEND = 1, SLOT_SEND_IMM = 2, SLOT_WRITE = 3, SLOT_WRITE_IMM = 4, SLOT_ATOMIC = 5 };
enum { SF_FIRST = 1, SF_LAST = 2, SF_GVA_DATA = 4 };

/* The port's GID: 0xfd 'D' 'P' 'U' | machine (BE32) | directory lo (BE64). */
#define GID_TAG0 0xfd
#define GID_TAG1 'D'
#define GID_TAG2 'P'
#define GID_TAG3 'U'

#define MAX_MSG (1u << 30)

/* The access bits an MR entry may carry (IBV_ACCESS_* values): local
 * write, remote write, remote read, remote atomic. */
#define WIRE_ACCESS_BITS 0xfu

struct vb_slot {
    uint64_t seq;
    uint16_t op, flags;
    uint32_t len, imm, rkey;
    uint64_t addr;
    uint32_t total, src_qpn;
};

struct vb_qp_entry {
    uint64_t mbox_lo;
    uint32_t mbox_hi, qpn, slots, live;
};

struct vb_mr_entry {
    uint64_t vaddr, length, gva_lo;
    uint32_t rkey, access;
};

struct vb_dir_hdr {
    uint64_t magic;
    uint32_t version, pages, max_qp, max_mr;
};

void vb_slot_put(uint8_t *p, const struct vb_slot *s);                 /* SLOT_HDR bytes */
int vb_slot_get(const uint8_t *p, size_t n, struct vb_slot *s);        /* 0 or -EINVAL */
void vb_qp_entry_put(uint8_t *p, const struct vb_qp_entry *e);         /* QP_ENTRY bytes */
int vb_qp_entry_get(const uint8_t *p, size_t n, struct vb_qp_entry *e);
void vb_mr_entry_put(uint8_t *p, const struct vb_mr_entry *e);         /* MR_ENTRY bytes */
int vb_mr_entry_get(const uint8_t *p, size_t n, struct vb_mr_entry *e);
void vb_dir_hdr_put(uint8_t *p, const struct vb_dir_hdr *h);           /* DIR_HDR bytes */
int vb_dir_hdr_get(const uint8_t *p, size_t n, struct vb_dir_hdr *h);

static inline void put64le(uint8_t *p, uint64_t v) { for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static inline void put32le(uint8_t *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static inline void put16le(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }
static inline uint64_t get64le(const uint8_t *p) { uint64_t v = 0; for (int i = 7; i >= 0; i--) v = v << 8 | p[i]; return v; }
static inline uint32_t get32le(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }
static inline uint16_t get16le(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }

#endif
