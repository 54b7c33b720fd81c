/*
 * wire.c — encoders and checking decoders of the directory and the mailbox
 * slots (wire.h).
 */
#include "wire.h"

#include <errno.h>
#include <string.h>

static int zero(const uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (p[i]) return 0;
    return 1;
}

void vb_slot_put(uint8_t *p, const struct vb_slot *s) {
    memset(p, 0, SLOT_HDR);
    put64le(p, s->seq);
    put16le(p + 8, s->op);
    put16le(p + 10, s->flags);
    put32le(p + 12, s->len);
    put32le(p + 16, s->imm);
    put32le(p + 20, s->rkey);
    put64le(p + 24, s->addr);
    put32le(p + 32, s->total);
    put32le(p + 36, s->src_qpn);
}

/* vb_slot_get decodes a slot header. Beyond the ranges, a slot must say
 * what the receiver can act on: a fragment fits its message, data in an
 * image carries no bytes inline, an atomic's notice covers one word. */
int vb_slot_get(const uint8_t *p, size_t n, struct vb_slot *s) {
    if (n < SLOT_HDR || !zero(p + 40, SLOT_HDR - 40)) return -EINVAL;
    struct vb_slot v = {
        .seq = get64le(p), .op = get16le(p + 8), .flags = get16le(p + 10), .len = get32le(p + 12),
        .imm = get32le(p + 16), .rkey = get32le(p + 20), .addr = get64le(p + 24), .total = get32le(p + 32),
        .src_qpn = get32le(p + 36),
    };
    if (v.op < SLOT_SEND || v.op > SLOT_ATOMIC || (v.flags & ~(SF_FIRST | SF_LAST | SF_GVA_DATA))) return -EINVAL;
    if (v.len > SLOT_DATA || v.total > MAX_MSG || v.len > v.total) return -EINVAL;
    if (v.src_qpn < 1 || v.src_qpn > MAX_QP) return -EINVAL;
    int gva = v.flags & SF_GVA_DATA;
    if (gva && (v.len != 0 || (v.flags & (SF_FIRST | SF_LAST)) != (SF_FIRST | SF_LAST))) return -EINVAL;
    if (gva && (v.op == SLOT_SEND || v.op == SLOT_SEND_IMM)) return -EINVAL;
    if (v.op == SLOT_ATOMIC && (!gva || v.total != 8 || (v.addr & 7))) return -EINVAL;
    if (!gva && v.addr + v.len < v.addr) return -EINVAL;
    if ((v.flags & SF_FIRST) && (v.flags & SF_LAST) && !gva && v.len != v.total) return -EINVAL;
    *s = v;
    return 0;
}

void vb_qp_entry_put(uint8_t *p, const struct vb_qp_entry *e) {
    memset(p, 0, QP_ENTRY);
    put64le(p, e->mbox_lo);
    put32le(p + 8, e->mbox_hi);
    put32le(p + 12, e->qpn);
    put32le(p + 16, e->slots);
    put32le(p + 20, e->live);
}

/* vb_qp_entry_get: a live entry of this layout (a dead one, all zero, is
 * -ENOENT). */
int vb_qp_entry_get(const uint8_t *p, size_t n, struct vb_qp_entry *e) {
    if (n < QP_ENTRY) return -EINVAL;
    if (zero(p, QP_ENTRY)) return -ENOENT;
    struct vb_qp_entry v = {.mbox_lo = get64le(p), .mbox_hi = get32le(p + 8), .qpn = get32le(p + 12),
                            .slots = get32le(p + 16), .live = get32le(p + 20)};
    if (!zero(p + 24, QP_ENTRY - 24) || v.live != 1 || v.slots != MBOX_SLOTS || v.qpn < 1 || v.qpn > MAX_QP ||
        v.mbox_lo == 0 || (v.mbox_lo & (PAGE - 1)) || v.mbox_lo + (uint64_t)MBOX_PAGES * PAGE < v.mbox_lo)
        return -EINVAL;
    *e = v;
    return 0;
}

void vb_mr_entry_put(uint8_t *p, const struct vb_mr_entry *e) {
    put64le(p, e->vaddr);
    put64le(p + 8, e->length);
    put64le(p + 16, e->gva_lo);
    put32le(p + 24, e->rkey);
    put32le(p + 28, e->access);
}

/* vb_mr_entry_get: a live entry (all zero: -ENOENT) whose range and image
 * are addressable. */
int vb_mr_entry_get(const uint8_t *p, size_t n, struct vb_mr_entry *e) {
    if (n < MR_ENTRY) return -EINVAL;
    if (zero(p, MR_ENTRY)) return -ENOENT;
    struct vb_mr_entry v = {.vaddr = get64le(p), .length = get64le(p + 8), .gva_lo = get64le(p + 16),
                            .rkey = get32le(p + 24), .access = get32le(p + 28)};
    if (v.rkey == 0 || v.length == 0 || v.length > (1ull << 40) || v.vaddr + v.length < v.vaddr ||
        (v.access & ~WIRE_ACCESS_BITS) || (v.gva_lo & (PAGE - 1)) || v.gva_lo + v.length < v.gva_lo)
        return -EINVAL;
    *e = v;
    return 0;
}

void vb_dir_hdr_put(uint8_t *p, const struct vb_dir_hdr *h) {
    memset(p, 0, DIR_HDR);
    put64le(p, h->magic);
    put32le(p + 8, h->version);
    put32le(p + 12, h->pages);
    put32le(p + 16, h->max_qp);
    put32le(p + 20, h->max_mr);
}

int vb_dir_hdr_get(const uint8_t *p, size_t n, struct vb_dir_hdr *h) {
    if (n < 24) return -EINVAL;
    struct vb_dir_hdr v = {.magic = get64le(p), .version = get32le(p + 8), .pages = get32le(p + 12),
                           .max_qp = get32le(p + 16), .max_mr = get32le(p + 20)};
    if (v.magic != DIR_MAGIC || v.version != DIR_VERSION || v.pages != DIR_PAGES || v.max_qp != MAX_QP ||
        v.max_mr != MAX_MR)
        return -EINVAL;
    *h = v;
    return 0;
}
