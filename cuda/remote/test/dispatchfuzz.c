/*
 * dispatchfuzz — the launcher's request decoder against random requests.
 *
 *   dispatchfuzz DRIVER ITERATIONS SEED
 *
 * Feeds the launcher's dispatch (the code that decodes every request a
 * client sends) ITERATIONS requests built from a seeded generator: random
 * ops (known and unknown), lengths and bytes, with fields drawn from ids
 * the session holds, device pointers it owns (and neighbours of them) and
 * edge values, against DRIVER (the fake GPU). Sessions are released every
 * 200 requests. A request must never crash the launcher, touch memory
 * outside the session's allocations (AddressSanitizer build), or leave an
 * allocation behind after release (the fake driver's count). Prints the
 * status counts; exits non-zero on a failed invariant.
 */
#define LAUNCHER_NO_MAIN
#include "../src/launcher.c"

static uint64_t rng;
static uint64_t next(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: dispatchfuzz DRIVER ITERATIONS SEED\n");
        return 2;
    }
    if (load_driver(argv[1]) < 0 || drv.cuInit(0) != CUDA_SUCCESS)
        return 1;
    long iters = atol(argv[2]);
    rng = strtoull(argv[3], NULL, 10) * 2654435761u + 1;
    struct session s = {.slot = 0};
    s.bufsize = 64 * RW_STAGE_DATA;
    s.buf = malloc(s.bufsize);
    static unsigned char body[RW_PAGE], rep[RW_PAGE];
    long ok = 0, refused = 0;
    for (long i = 0; i < iters; i++) {
        struct rw_hdr h = {.seq = (uint64_t)i + 1, .op = (uint16_t)(next() % (OP_MAX + 3))};
        uint32_t len = (uint32_t)(next() % 64);
        if (next() % 4 == 0)
            len = (uint32_t)(next() % RW_BODY_MAX);
        for (uint32_t k = 0; k < len; k++)
            body[k] = (unsigned char)next();
        /* Plant meaningful fields: ids, owned pointers, edge values. */
        for (uint32_t k = 0; k + 8 <= len; k += 4) {
            uint64_t v;
            switch (next() % 6) {
            case 0: v = next() % 8; break;
            case 1: v = s.nranges ? s.ranges[next() % s.nranges].base + next() % 64 : 0; break;
            case 2: v = s.nranges ? s.ranges[next() % s.nranges].size : 1; break;
            case 3: v = UINT64_MAX - next() % 4; break;
            default: continue;
            }
            memcpy(body + k, &v, (next() & 1) ? 8 : 4);
        }
        if (next() % 3 == 0) { /* a well-formed allocation keeps pointers around */
            h.op = OP_MEM_ALLOC;
            len = 8;
            uint64_t n = 1 + next() % 4096;
            memcpy(body, &n, 8);
        }
        if (next() % 5 == 0)
            h.op = next() & 1 ? OP_PRIMARY_RETAIN : OP_STREAM_CREATE, len = h.op == OP_PRIMARY_RETAIN ? 4 : 8,
            memset(body, 0, 8);
        h.ctx = (uint32_t)(next() % 4);
        h.len = len;
        h.flags = (uint16_t)(next() % 3 == 0 ? RW_STAGED : 0);
        uint32_t rlen = 0;
        CUresult r = dispatch(&s, &h, body, len, rep, &rlen);
        if (rlen > RW_BODY_MAX) {
            printf("FAIL reply length %u\n", rlen);
            return 1;
        }
        if (r == CUDA_SUCCESS)
            ok++;
        else
            refused++;
        if (i % 200 == 199) {
            session_release(&s);
            if (s.nranges != 0 || s.nobjs != 0) {
                printf("FAIL release left %zu ranges, %u objects\n", s.nranges, s.nobjs);
                return 1;
            }
        }
    }
    session_release(&s);
    free(s.buf);
    free(s.objs);
    free(s.ranges);
    printf("requests=%ld ok=%ld refused=%ld\n", iters, ok, refused);
    return 0;
}
