/*
 * gpu_wire.h — bodies of the host interface's GPU accounting ops, the C
 * side of package cuda/hookwire (wire.go has the byte layout). The message
 * header and the connection are libdpu's (dpu_call); these are only the
 * op bodies. All fields little-endian.
 */
#ifndef DPUCUDA_GPU_WIRE_H
#define DPUCUDA_GPU_WIRE_H

#include <stdint.h>
#include <string.h>

enum {
    GPU_OP_MEM_LIMIT = 64,
    GPU_OP_MEM_UPDATE = 65,
    GPU_OP_KERNEL_QUOTA = 66,
    GPU_OP_MEM_PROCS = 67,

    GPU_DEVICE_LEN = 24,
    GPU_LIMIT_REQ_LEN = GPU_DEVICE_LEN,
    GPU_UPDATE_REQ_LEN = GPU_DEVICE_LEN + 32,
    GPU_QUOTA_REQ_LEN = GPU_DEVICE_LEN + 16,
    GPU_LIMITS_LEN = 40,
    GPU_TOKEN_LEN = 24,
    GPU_PROCS_REQ_LEN = GPU_DEVICE_LEN,
    GPU_PROCS_HEAD_LEN = 8,
    GPU_PROC_LEN = 16,
    GPU_MAX_PROCS = 64,
};

struct gpu_limits {
    uint64_t memory;      /* bytes; 0 unlimited */
    uint64_t memory_used; /* as the agent accounts it */
    uint32_t quota;       /* percent; 0 unlimited */
    uint64_t window_ns;
    uint64_t kernel_ns;
    uint64_t others;      /* in use by the others under the same limit */
};

struct gpu_token {
    uint64_t grant_ns;
    uint64_t wait_ns;
    uint32_t quota;
    uint64_t window_ns;
};

static inline void gw_put32(uint8_t *b, uint32_t v) {
    for (int i = 0; i < 4; i++) b[i] = (uint8_t)(v >> (8 * i));
}
static inline void gw_put64(uint8_t *b, uint64_t v) {
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(v >> (8 * i));
}
static inline uint32_t gw_get32(const uint8_t *b) {
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--) v = v << 8 | b[i];
    return v;
}
static inline uint64_t gw_get64(const uint8_t *b) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | b[i];
    return v;
}

/* gw_device writes the 24-byte device prefix. */
static inline void gw_device(uint8_t *b, uint32_t ordinal, const unsigned char uuid[16]) {
    gw_put32(b, ordinal);
    gw_put32(b + 4, 0);
    memcpy(b + 8, uuid, 16);
}

static inline void gw_update(uint8_t *b, uint32_t ordinal, const unsigned char uuid[16], uint32_t kind,
                             uint64_t bytes, uint64_t total, uint64_t kernel_ns) {
    gw_device(b, ordinal, uuid);
    gw_put32(b + 24, kind);
    gw_put32(b + 28, 0);
    gw_put64(b + 32, bytes);
    gw_put64(b + 40, total);
    gw_put64(b + 48, kernel_ns);
}

static inline void gw_quota(uint8_t *b, uint32_t ordinal, const unsigned char uuid[16], uint64_t want_ns,
                            uint64_t overuse_ns) {
    gw_device(b, ordinal, uuid);
    gw_put64(b + 24, want_ns);
    gw_put64(b + 32, overuse_ns);
}

static inline int gw_limits(const uint8_t *b, size_t n, struct gpu_limits *l) {
    if (n != GPU_LIMITS_LEN) return -1;
    l->memory = gw_get64(b);
    l->memory_used = gw_get64(b + 8);
    l->quota = gw_get32(b + 16);
    l->window_ns = (uint64_t)gw_get32(b + 20) * 1000u;
    l->kernel_ns = gw_get64(b + 24);
    l->others = gw_get64(b + 32);
    return 0;
}

static inline int gw_token(const uint8_t *b, size_t n, struct gpu_token *t) {
    if (n != GPU_TOKEN_LEN) return -1;
    t->grant_ns = gw_get64(b);
    t->wait_ns = gw_get64(b + 8);
    t->quota = gw_get32(b + 16);
    t->window_ns = (uint64_t)gw_get32(b + 20) * 1000u;
    return 0;
}

/* gw_procs decodes a GPU_MEM_PROCS reply into at most cap entries: the
 * count, or -1 when malformed. */
static inline int gw_procs(const uint8_t *b, size_t n, uint32_t *pids, uint64_t *bytes, int cap) {
    if (n < GPU_PROCS_HEAD_LEN || gw_get32(b + 4) != 0) return -1;
    uint32_t count = gw_get32(b);
    if (count > GPU_MAX_PROCS || n != GPU_PROCS_HEAD_LEN + (size_t)count * GPU_PROC_LEN) return -1;
    int k = 0;
    for (uint32_t i = 0; i < count && k < cap; i++) {
        const uint8_t *e = b + GPU_PROCS_HEAD_LEN + (size_t)i * GPU_PROC_LEN;
        pids[k] = gw_get32(e);
        bytes[k++] = gw_get64(e + 8);
    }
    return k;
}

#endif /* DPUCUDA_GPU_WIRE_H */
