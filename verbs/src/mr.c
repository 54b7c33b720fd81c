/*
 * mr.c — memory regions and the context's directory.
 *
 * A region stays the program's memory. When it allows remote READ or
 * ATOMIC access it also gets an image: fabric pages owned by this node that
 * peers read and update with LOAD, CAS and FETCH_ADD. The image follows the
 * memory both ways:
 *   - local stores reach the image when published (before every send work
 *     request the context runs, and every few milliseconds): the bytes that
 *     differ from the shadow (what the image holds) are stored, then the
 *     shadow takes them;
 *   - remote writes and atomics are announced in the QP's mailbox; the
 *     progress thread copies the bytes into the memory and the shadow.
 * A region without remote READ/ATOMIC access has no image: remote WRITEs
 * carry their bytes in the mailbox.
 */
#define _GNU_SOURCE
#include "internal.h"

#undef ibv_reg_mr
#undef ibv_reg_mr_iova

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define KNOWN_ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | \
                      IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_HUGETLB | IBV_ACCESS_RELAXED_ORDERING)
#define CHUNK (64u * 1024u)

static int mr_index(uint32_t key) { return (int)(key & 0x3ff) - 1; }

struct vb_mr *vb_mr_by_key(struct vb_context *ctx, uint32_t key) {
    int i = mr_index(key);
    if (i < 0 || i >= (int)MAX_MR) return NULL;
    pthread_mutex_lock(&ctx->mu);
    struct vb_mr *m = ctx->mr_by_index[i];
    if (m && m->mr.lkey != key) m = NULL;
    pthread_mutex_unlock(&ctx->mu);
    return m;
}

static int dir_store_mr(struct vb_context *ctx, struct vb_mr *m, int live) {
    uint8_t e[MR_ENTRY] = {0};
    if (live)
        vb_mr_entry_put(e, &(struct vb_mr_entry){.vaddr = m->iova, .length = m->mr.length, .gva_lo = m->gva.lo,
                                                 .rkey = m->mr.rkey, .access = (uint32_t)m->access & WIRE_ACCESS_BITS});
    return dpu_store(ctx->d, dpu_gva_add(ctx->dir, PAGE + (uint64_t)m->index * MR_ENTRY), e, sizeof e);
}

int vb_dir_store_qp(struct vb_context *ctx, uint32_t qpn, dpu_gva_t mbox, int live) {
    uint8_t e[QP_ENTRY] = {0};
    if (live)
        vb_qp_entry_put(e, &(struct vb_qp_entry){.mbox_lo = mbox.lo, .mbox_hi = (uint32_t)mbox.hi, .qpn = qpn,
                                                 .slots = MBOX_SLOTS, .live = 1});
    return dpu_store(ctx->d, dpu_gva_add(ctx->dir, DIR_HDR + (uint64_t)(qpn - 1) * QP_ENTRY), e, sizeof e);
}

/* store_runs stores the bytes of cur that differ from shadow into the
 * image and copies them to shadow; m->mu is held. */
static int store_runs(dpu_t *d, struct vb_mr *m, const uint8_t *cur, uint64_t base, size_t n) {
    uint8_t *sh = m->shadow + base;
    size_t i = 0;
    while (i < n) {
        /* find the next differing byte, a word at a time */
        while (i + 8 <= n && memcmp(cur + i, sh + i, 8) == 0) i += 8;
        while (i < n && cur[i] == sh[i]) i++;
        if (i >= n) break;
        size_t j = i + 1, same = 0;
        /* extend the run over gaps shorter than 64 bytes */
        while (j < n && same < 64) {
            if (cur[j] == sh[j]) same++;
            else same = 0;
            j++;
        }
        j -= same;
        int rc = dpu_store(d, dpu_gva_add(m->gva, base + i), cur + i, j - i);
        if (rc < 0) return rc;
        memcpy(sh + i, cur + i, j - i);
        i = j;
    }
    return 0;
}

static int publish(dpu_t *d, struct vb_mr *m) {
    if (!m->shadow) return 0;
    uint8_t *buf = NULL;
    int rc = 0;
    pthread_mutex_lock(&m->mu);
    for (size_t off = 0; off < m->mr.length && rc == 0; off += CHUNK) {
        size_t n = m->mr.length - off < CHUNK ? m->mr.length - off : CHUNK;
        const uint8_t *mem = (const uint8_t *)m->mr.addr + off;
        if (memcmp(mem, m->shadow + off, n) == 0) continue;
        if (!buf && !(buf = malloc(CHUNK))) {
            rc = -ENOMEM;
            break;
        }
        memcpy(buf, mem, n); /* one snapshot: what is stored is what the shadow takes */
        rc = store_runs(d, m, buf, off, n);
    }
    pthread_mutex_unlock(&m->mu);
    free(buf);
    return rc;
}

/* vb_publish_all publishes every region with an image. */
int vb_publish_all(struct vb_context *ctx, dpu_t *d) {
    int first = 0;
    pthread_mutex_lock(&ctx->mu);
    struct vb_mr *list[MAX_MR];
    int n = 0;
    for (struct vb_mr *m = ctx->mrs; m; m = m->next)
        if (m->shadow) list[n++] = m;
    pthread_mutex_unlock(&ctx->mu);
    /* MRs are not freed while a publish runs: dereg takes the progress lock
     * and the program does not dereg a region while it posts on it. */
    for (int i = 0; i < n; i++) {
        int rc = publish(d, list[i]);
        if (rc < 0 && !first) first = rc;
    }
    return first;
}

int vb_apply_bytes(struct vb_context *ctx, struct vb_mr *m, uint64_t addr, const void *bytes, uint32_t len) {
    (void)ctx;
    uint64_t off = addr - m->iova;
    pthread_mutex_lock(&m->mu);
    memcpy((uint8_t *)m->mr.addr + off, bytes, len);
    if (m->shadow) memcpy(m->shadow + off, bytes, len);
    pthread_mutex_unlock(&m->mu);
    return 0;
}

int vb_apply_from_image(struct vb_context *ctx, dpu_t *d, struct vb_mr *m, uint64_t addr, uint32_t len) {
    (void)ctx;
    if (!m->shadow) return -EINVAL;
    uint8_t *buf = malloc(len < CHUNK ? (len ? len : 1) : CHUNK);
    if (!buf) return -ENOMEM;
    uint64_t off = addr - m->iova;
    int rc = 0;
    pthread_mutex_lock(&m->mu);
    for (uint32_t done = 0; done < len && rc == 0;) {
        uint32_t n = len - done < CHUNK ? len - done : CHUNK;
        rc = dpu_load(d, dpu_gva_add(m->gva, off + done), buf, n);
        if (rc == 0) {
            memcpy((uint8_t *)m->mr.addr + off + done, buf, n);
            memcpy(m->shadow + off + done, buf, n);
        }
        done += n;
    }
    pthread_mutex_unlock(&m->mu);
    free(buf);
    return rc;
}

/* vb_sge_ok checks a local scatter/gather element against its region:
 * 0, or the completion status that reports the fault. */
int vb_sge_ok(struct vb_context *ctx, const struct ibv_sge *s, int need_write) {
    if (s->length == 0) return 0;
    struct vb_mr *m = vb_mr_by_key(ctx, s->lkey);
    if (!m) return IBV_WC_LOC_PROT_ERR;
    uintptr_t a = (uintptr_t)s->addr, lo = (uintptr_t)m->mr.addr;
    if (a < lo || a - lo > m->mr.length || m->mr.length - (a - lo) < s->length) return IBV_WC_LOC_PROT_ERR;
    if (need_write && !(m->access & IBV_ACCESS_LOCAL_WRITE)) return IBV_WC_LOC_PROT_ERR;
    return 0;
}

static struct ibv_mr *reg(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova, int access) {
    struct vb_pd *p = (struct vb_pd *)pd;
    if (!p || !addr || length == 0) {
        vb_fail(EINVAL, "reg_mr: need a protection domain, an address and a length");
        return NULL;
    }
    struct vb_context *ctx = p->ctx;
    if (access & ~KNOWN_ACCESS) {
        vb_fail(EOPNOTSUPP, "reg_mr: access flags %#x are not supported (on-demand paging, zero-based, memory windows)",
                access & ~KNOWN_ACCESS);
        return NULL;
    }
    if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) && !(access & IBV_ACCESS_LOCAL_WRITE)) {
        vb_fail(EINVAL, "reg_mr: remote write or atomic access needs local write access");
        return NULL;
    }
    if (length > (1ull << 40)) {
        vb_fail(EINVAL, "reg_mr: %zu bytes is above the device's largest region (2^40)", length);
        return NULL;
    }
    struct vb_mr *m = calloc(1, sizeof *m);
    if (!m) {
        errno = ENOMEM;
        return NULL;
    }
    pthread_mutex_init(&m->mu, NULL);
    m->ctx = ctx;
    m->access = access;
    m->iova = iova;
    m->mr.context = pd->context;
    m->mr.pd = pd;
    m->mr.addr = addr;
    m->mr.length = length;

    pthread_mutex_lock(&ctx->mu);
    int idx = -1;
    for (int i = 0; i < (int)MAX_MR; i++)
        if (!ctx->mr_by_index[i]) {
            idx = i;
            break;
        }
    if (idx < 0) {
        pthread_mutex_unlock(&ctx->mu);
        free(m);
        vb_fail(ENOMEM, "reg_mr: the context has %u regions already", MAX_MR);
        return NULL;
    }
    ctx->mr_gen = (ctx->mr_gen + 1) & 0x3fffff;
    m->index = idx;
    m->mr.lkey = m->mr.rkey = ctx->mr_gen << 10 | (uint32_t)(idx + 1);
    ctx->mr_by_index[idx] = m; /* reserved; not in the list until ready */
    pthread_mutex_unlock(&ctx->mu);

    int rc = 0;
    if (access & (IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC)) {
        m->pages = (length + PAGE - 1) / PAGE;
        m->shadow = calloc(1, length); /* a fresh image is zero-filled */
        if (!m->shadow) rc = -ENOMEM;
        if (rc == 0) rc = dpu_alloc_mode(ctx->d, m->pages * PAGE, ctx->mode, &m->gva);
        if (rc < 0) {
            vb_fail(vb_errno(rc), "reg_mr: fabric pages for %zu bytes: %s", length, dpu_last_error());
            m->gva = (dpu_gva_t){0, 0};
            goto fail;
        }
        rc = publish(ctx->d, m);
        if (rc < 0) {
            vb_fail(vb_errno(rc), "reg_mr: writing the region's image: %s", dpu_last_error());
            goto fail;
        }
    }
    rc = dir_store_mr(ctx, m, 1);
    if (rc < 0) {
        vb_fail(vb_errno(rc), "reg_mr: writing the directory: %s", dpu_last_error());
        goto fail;
    }
    pthread_mutex_lock(&ctx->mu);
    m->next = ctx->mrs;
    ctx->mrs = m;
    p->nobjs++;
    pthread_mutex_unlock(&ctx->mu);
    return &m->mr;
fail:
    if (m->gva.lo) dpu_free(ctx->d, m->gva);
    pthread_mutex_lock(&ctx->mu);
    ctx->mr_by_index[idx] = NULL;
    pthread_mutex_unlock(&ctx->mu);
    free(m->shadow);
    free(m);
    errno = vb_errno(rc);
    return NULL;
}

VB_API struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access) {
    return reg(pd, addr, length, (uintptr_t)addr, access);
}

VB_API struct ibv_mr *ibv_reg_mr_iova(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova, int access) {
    return reg(pd, addr, length, iova, access);
}

VB_API struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova,
                                       unsigned int access) {
    return reg(pd, addr, length, iova, (int)(access & ~IBV_ACCESS_OPTIONAL_RANGE));
}

VB_API int ibv_dereg_mr(struct ibv_mr *mr) {
    struct vb_mr *m = (struct vb_mr *)mr;
    struct vb_context *ctx = m->ctx;
    pthread_mutex_lock(&ctx->prog_mu); /* no progress pass holds the region */
    pthread_mutex_lock(&ctx->mu);
    struct vb_mr **pp = &ctx->mrs;
    while (*pp && *pp != m) pp = &(*pp)->next;
    if (*pp) *pp = m->next;
    ctx->mr_by_index[m->index] = NULL;
    ((struct vb_pd *)mr->pd)->nobjs--;
    pthread_mutex_unlock(&ctx->mu);
    pthread_mutex_unlock(&ctx->prog_mu);
    int rc = dir_store_mr(ctx, m, 0);
    if (m->gva.lo) {
        int r2 = dpu_free(ctx->d, m->gva);
        if (r2 < 0 && rc == 0) rc = r2;
    }
    free(m->shadow);
    free(m);
    return rc < 0 ? vb_errno(rc) : 0;
}
