/*
 * wire.h — the messages between libdpucuda-remote (the client, standing in
 * for libcuda.so.1) and dpu-cuda-launcher (the process that owns the GPU).
 *
 * Transport (mbox.c): each side of a session owns an inbox, an allocation
 * of fabric pages on its own node: page 0 is the message page, pages 1..N
 * the staging area for bulk data. A side sends by STOREing one message
 * (header + body, at most one page) into the peer's message page, after
 * STOREing any bulk data into the peer's staging area; the peer polls its
 * own message page (LOAD through its node) until the sequence number moves.
 * One request is outstanding per session: the reply carries its sequence.
 * A copy larger than half the staging area moves in chunks of half of it,
 * alternating halves (rw_copy.stage): the bulk pages of one chunk are
 * stored while the peer reads the other's, so the two sides' page moves
 * overlap while one request at a time is outstanding.
 * Asynchronous operations (launches, asynchronous memsets and copies,
 * event records, stream waits) travel as records of an OP_BATCH request:
 * the client returns to its caller at once and sends what it queued in
 * order, one batch in flight; the batch's reply carries the first error
 * an operation met, which the client returns at its next synchronising
 * call.
 *
 * Rendezvous: the launcher owns a door page (its GVA is given to clients in
 * DPU_CUDA_REMOTE) with DOOR_SLOTS slots. A client claims a free slot with
 * a CAS of its token, writes its inbox GVA into the slot and sends HELLO to
 * the launcher's inbox of that slot (whose GVA the slot holds). While a
 * session lives the client bumps the slot's heartbeat; the launcher ends a
 * session whose heartbeat stopped (HEARTBEAT_DEAD_MS) and releases what it
 * held.
 *
 * Every integer is little-endian (both ends are x86-64 or arm64 LP64; the
 * structs below have no implicit padding). Handles (contexts, modules,
 * functions, streams, events, libraries, kernels) are ids of the
 * launcher's per-session tables, never its pointers. Device pointers are
 * the GPU's virtual addresses: the launcher checks every copy and memset
 * against the session's own allocations and module globals.
 */
#ifndef DPUCUDA_REMOTE_WIRE_H
#define DPUCUDA_REMOTE_WIRE_H

#include <stdint.h>

#define RW_MAGIC 0x44505552454d4f54ull /* "TOMERUPD": door page magic */
#define RW_VERSION 4u /* 4: staging pages end with a CRC-32C and their index, and move in bulk chunks */
#define RW_PAGE 4096u
#define DOOR_SLOTS 16u
#define STAGING_PAGES_DEFAULT 1024u /* 4 MiB a direction */
#define HEARTBEAT_MS 1000u
#define HEARTBEAT_DEAD_MS 15000u

/* Door page (owned by the launcher's node). */
struct rw_door_slot {
    uint64_t token;      /* 0 free; a client's token while claimed (CAS) */
    uint64_t heartbeat;  /* bumped by the client */
    uint64_t srv_hi, srv_lo;       /* the launcher's inbox for this slot */
    uint64_t cli_hi, cli_lo;       /* the client's inbox (written after the claim) */
    uint32_t staging_pages;        /* each inbox's staging size */
    uint32_t reserved;
    uint64_t reserved2;
};
struct rw_door {
    uint64_t magic;
    uint32_t version;
    uint32_t nslots;
    uint64_t launcher_heartbeat; /* bumped by the launcher every HEARTBEAT_MS */
    uint64_t reserved[5];
    struct rw_door_slot slot[DOOR_SLOTS];
};
_Static_assert(sizeof(struct rw_door_slot) == 64, "door slot");
_Static_assert(sizeof(struct rw_door) <= RW_PAGE, "door page");

/* A staging page: a header naming the message the data belongs to, then
 * the data, then a trailer. The reader LOADs a page until its header names
 * the message it is serving (a page written from another node may reach
 * this one after the message does), so bulk data is never taken stale. */
struct rw_stage_hdr {
    uint64_t seq;   /* the seq of the message the data goes with */
    uint64_t token; /* the session's token */
};
/* Each staging page ends, right after its data (a short last page after
 * its bytes), with a trailer: the CRC-32C (Castagnoli) of the header, the
 * data and the index, then the page's index counted from the first page
 * of its transfer. A page whose header is current and whose CRC is wrong
 * is read again while it changes (its bytes may arrive in pieces); one
 * that stays the same and wrong for RW_CORRUPT_MS is corrupt, and the
 * transfer fails (the request: CUDA_ERROR_UNKNOWN) rather than delivering
 * its bytes. */
struct rw_stage_tail {
    uint32_t crc;
    uint32_t index;
};
_Static_assert(sizeof(struct rw_stage_tail) == 8, "stage tail");
#define RW_STAGE_TRAILER 8u
#define RW_STAGE_DATA (RW_PAGE - 16u - RW_STAGE_TRAILER) /* data bytes a staging page: 4072 */
_Static_assert(RW_STAGE_DATA == RW_PAGE - sizeof(struct rw_stage_hdr) - sizeof(struct rw_stage_tail), "stage data");
#define RW_CORRUPT_MS 2000u
/* Staging pages move in bulk chunks of RW_CHUNK_PAGES consecutive pages:
 * one dpu_store or dpu_load of the whole range (the fabric's STORE_BULK /
 * LOAD_BULK through the connection's bulk area, 256 KiB a request), the
 * chunks of a transfer striped over the pool's threads, each on its own
 * connection, so that as many chunks are in flight as there are threads. */
#define RW_CHUNK_PAGES 64u
/* rw_hello.xfer: how the client moves staging pages, and so should the
 * launcher for its session. 0: bulk chunks; RW_XFER_PAGED: one STORE or
 * LOAD a page (the version 3 path, kept for comparison). */
#define RW_XFER_PAGED 1u

/* The message page: header then body. */
struct rw_hdr {
    uint64_t seq;     /* 1, 2, ...: a request's; the reply repeats it */
    uint32_t len;     /* body bytes */
    uint16_t op;
    uint16_t flags;
    int32_t status;   /* replies: the CUresult */
    uint32_t ctx;     /* requests: the client's current context id (0: none) */
    uint64_t token;   /* the session's token */
};
_Static_assert(sizeof(struct rw_hdr) == 32, "hdr");
/* A message ends with a 64-bit FNV-1a of its header and body (the same
 * check as staging pages). */
#define RW_BODY_MAX (RW_PAGE - sizeof(struct rw_hdr) - 8)

enum rw_op {
    OP_HELLO = 1,          /* rw_hello -> rw_hello_reply */
    OP_BYE,                /* - */
    OP_DEVICE_INFO,        /* u32 dev -> rw_device_info */
    OP_PRIMARY_RETAIN,     /* u32 dev -> u32 ctx */
    OP_PRIMARY_RELEASE,    /* u32 dev */
    OP_PRIMARY_RESET,      /* u32 dev */
    OP_CTX_CREATE,         /* u32 flags, u32 dev -> u32 ctx */
    OP_CTX_DESTROY,        /* u32 ctx */
    OP_CTX_SYNC,           /* (header ctx) */
    OP_MEM_ALLOC,          /* u64 bytes -> u64 dptr */
    OP_MEM_FREE,           /* u64 dptr */
    OP_MEM_INFO,           /* -> u64 free, u64 total */
    OP_MEMSET,             /* rw_memset */
    OP_HTOD,               /* rw_copy; the data in the launcher's staging */
    OP_DTOH,               /* rw_copy; the data put in the client's staging */
    OP_DTOD,               /* rw_copy */
    OP_MODULE_LOAD,        /* u64 len (image in staging) -> u32 module */
    OP_MODULE_UNLOAD,      /* u32 module */
    OP_MODULE_FUNCTION,    /* u32 module, name -> rw_func */
    OP_MODULE_GLOBAL,      /* u32 module, name -> u64 dptr, u64 bytes */
    OP_LIBRARY_LOAD,       /* u64 len (image in staging) -> u32 library */
    OP_LIBRARY_UNLOAD,     /* u32 library */
    OP_LIBRARY_KERNEL,     /* u32 library, name -> rw_func (id names a kernel) */
    OP_KERNEL_FUNCTION,    /* u32 kernel -> rw_func (in the header's context) */
    OP_FUNC_ATTR,          /* u32 func, i32 attr -> i32 value */
    OP_FUNC_SET_ATTR,      /* u32 func, i32 attr, i32 value */
    OP_LAUNCH,             /* rw_launch + argument bytes (inline, or staging) */
    OP_STREAM_CREATE,      /* u32 flags, i32 priority -> u32 stream */
    OP_STREAM_DESTROY,     /* u32 stream */
    OP_STREAM_SYNC,        /* u32 stream */
    OP_STREAM_QUERY,       /* u32 stream */
    OP_STREAM_WAIT_EVENT,  /* u32 stream, u32 event, u32 flags */
    OP_EVENT_CREATE,       /* u32 flags -> u32 event */
    OP_EVENT_DESTROY,      /* u32 event */
    OP_EVENT_RECORD,       /* u32 event, u32 stream */
    OP_EVENT_SYNC,         /* u32 event */
    OP_EVENT_QUERY,        /* u32 event */
    OP_EVENT_ELAPSED,      /* u32 start, u32 end -> f32 ms */
    OP_OCCUPANCY,          /* u32 func, u32 block, u64 shmem -> i32 blocks */
    OP_MEM_RANGE,          /* u64 dptr -> u64 base, u64 size */
    OP_ADVISE,             /* rw_advise: the advise service (prefetch, advice) */
    OP_IMAGE_PUT,          /* u64 offset, u64 len, u64 total: a part of a large image, in staging */
    OP_TENSOR_MAP,         /* rw_tmap -> 128 bytes (the encoded CUtensorMap) */
    OP_CLUSTER_OCC,        /* rw_launch (reserved: 0 max active clusters, 1 max cluster size) + attrs -> i32 */
    OP_DYN_SMEM,           /* u32 func, i32 blocks, i32 block size -> u64 bytes */
    OP_LIBRARY_GLOBAL,     /* u32 library, name -> u64 dptr, u64 bytes */
    OP_CTX_LIMIT,          /* u32 set, i32 limit, u64 value -> u64 value (get) */
    OP_DEV_RESOURCE,       /* u32 which (0 device, 1 context), u32 device or context, i32 type -> 144 bytes */
    OP_BATCH,              /* rw_rec records, each followed by its body -> u32 index of the failed one, u32 run */
    OP_HTOD_INLINE,        /* (in a batch) rw_copy + the bytes */
    OP_DTOH_ASYNC,         /* (in a batch) rw_copy, dst = the client's id of the pending copy */
    OP_DTOH_FETCH,         /* rw_fetch: part of a pending copy, put in the client's staging (NOT_READY: not done) */
    OP_MAX
};

/* Stream ids: 0 the legacy default stream, 1 the per-thread one; created
 * streams from 2. */
enum { RW_STREAM_LEGACY = 0, RW_STREAM_PER_THREAD = 1 };

#define RW_STAGED 1u /* rw_hdr.flags: the body's bulk part is in staging */
#define RW_IMAGE 2u  /* rw_hdr.flags (MODULE_LOAD, LIBRARY_LOAD): the image was sent with IMAGE_PUT */
#define RW_IMAGE_MAX (1ull << 31) /* the largest module image */

/* A record of an OP_BATCH body: an operation as it would be sent on its
 * own (op, the context it was made in, its body), 8-byte aligned. */
struct rw_rec {
    uint16_t op;
    uint16_t len; /* body bytes that follow */
    uint32_t ctx;
};
#define RW_REC_SPAN(len) ((sizeof(struct rw_rec) + (size_t)(len) + 7) & ~(size_t)7)

/* OP_DTOH_FETCH: bytes [off, off+len) of the pending copy id; wait 0 answers
 * CUDA_ERROR_NOT_READY while the copy has not completed on its stream. The
 * last part frees it. */
struct rw_fetch {
    uint64_t id, off, len;
    uint32_t wait, stage; /* stage: the first staging page the part goes to */
};

struct rw_hello {
    uint32_t version;
    uint32_t pid;
    uint32_t flags;        /* cuInit's */
    uint32_t xfer;         /* RW_XFER_* */
    char name[32];
};
struct rw_hello_reply {
    uint32_t version;
    int32_t driver_version;
    int32_t device_count;
    uint32_t staging_pages;
};

#define RW_ATTRS 256 /* CUdevice_attribute values 0..255 cached at once */
struct rw_device_info {
    char name[256];
    uint8_t uuid[16];
    uint64_t total_mem;
    int32_t attr[RW_ATTRS];
    uint8_t attr_ok[RW_ATTRS / 8]; /* bit set: the driver answered the attribute */
};
_Static_assert(sizeof(struct rw_device_info) <= RW_BODY_MAX, "device info");

struct rw_memset {
    uint64_t dptr;
    uint64_t count;   /* elements */
    uint32_t value;
    uint32_t elem;    /* 1, 2 or 4 bytes */
    uint32_t stream;
    uint32_t async;
};

struct rw_copy {
    uint64_t dst, src; /* device pointers (HTOD: dst; DTOH: src; DTOD: both) */
    uint64_t bytes;    /* at most the staging size for HTOD/DTOH */
    uint32_t stream;
    uint32_t async;
    uint32_t stage;    /* HTOD, DTOH: the first staging page of the data (0-based) */
    uint32_t reserved;
};

#define RW_MAX_PARAMS 256
struct rw_param { uint32_t offset, size; };
struct rw_func {
    uint32_t id;
    uint32_t nparams;
    uint32_t argbytes;  /* offset + size of the last parameter */
    uint32_t reserved;
    struct rw_param param[]; /* nparams */
};

struct rw_launch {
    uint32_t func;
    uint32_t grid[3];
    uint32_t block[3];
    uint32_t shmem;
    uint32_t stream;
    uint32_t argbytes;  /* the packed argument buffer that follows the attributes (or is staged) */
    uint32_t nattrs;    /* launch attributes (rw_attr) that follow this struct, at most RW_MAX_ATTRS */
    uint32_t reserved;
};

/* A launch attribute (CUlaunchAttribute): its id and its 64-byte value as
 * the client passed it, except that an event (programmatic event, launch
 * completion event) is named by the session's event id in its first 8
 * bytes. The launcher forwards only the ids it knows to hold plain values. */
#define RW_MAX_ATTRS 8
struct rw_attr {
    uint32_t id;
    uint32_t reserved;
    uint8_t value[64];
};
_Static_assert(sizeof(struct rw_attr) == 72, "attr");

/* cuTensorMapEncodeTiled (kind 0), cuTensorMapEncodeIm2col (kind 1) and
 * cuTensorMapReplaceAddress (kind 2, map holds the map to change). */
struct rw_tmap {
    uint32_t kind, dtype, rank, interleave;
    uint32_t swizzle, l2promo, oobfill, channels_per_pixel;
    uint32_t pixels_per_column, reserved;
    uint64_t addr;
    uint64_t dim[5];
    uint64_t stride[5];   /* rank - 1 used */
    uint32_t box[5];
    uint32_t elem_stride[5];
    int32_t lower[5], upper[5]; /* im2col corners, rank - 2 used */
    uint8_t map[128];
};

struct rw_advise {
    uint64_t dptr, bytes;
    int32_t kind;       /* 0 prefetch, 1 advice */
    int32_t value;      /* advice */
    int32_t device;     /* the target device (prefetch, some advice) */
    uint32_t stream;
};

#endif /* DPUCUDA_REMOTE_WIRE_H */
