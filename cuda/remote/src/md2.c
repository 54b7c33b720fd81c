/*
 * md2.c — HMAC-MD2 (RFC 1319 MD2, RFC 2104 HMAC with MD2's 16-byte block),
 * which CUDA runtimes ask the driver to compute over the process's identity
 * through the integrity-check export table (client.c).
 */
#include "md2.h"

#include <string.h>

/* MD2's substitution table (digits of pi), RFC 1319 section 3.2. */
static const uint8_t S[256] = {
    41,  46,  67,  201, 162, 216, 124, 1,   61,  54,  84,  161, 236, 240, 6,   19,  98,  167, 5,   243, 192, 199,
    115, 140, 152, 147, 43,  217, 188, 76,  130, 202, 30,  155, 87,  60,  253, 212, 224, 22,  103, 66,  111, 24,
    138, 23,  229, 18,  190, 78,  196, 214, 218, 158, 222, 73,  160, 251, 245, 142, 187, 47,  238, 122, 169, 104,
    121, 145, 21,  178, 7,   63,  148, 194, 16,  137, 11,  34,  95,  33,  128, 127, 93,  154, 90,  144, 50,  39,
    53,  62,  204, 231, 191, 247, 151, 3,   255, 25,  48,  179, 72,  165, 181, 209, 215, 94,  146, 42,  172, 86,
    170, 198, 79,  184, 56,  210, 150, 164, 125, 182, 118, 252, 107, 226, 156, 116, 4,   241, 69,  157, 112, 89,
    100, 113, 135, 32,  134, 91,  207, 101, 230, 45,  168, 2,   27,  96,  37,  173, 174, 176, 185, 246, 28,  70,
    97,  105, 52,  64,  126, 15,  85,  71,  163, 35,  221, 81,  175, 58,  195, 92,  249, 206, 186, 197, 234, 38,
    44,  83,  13,  110, 133, 40,  132, 9,   211, 223, 205, 244, 65,  129, 77,  82,  106, 220, 55,  200, 108, 193,
    171, 250, 36,  225, 123, 8,   12,  189, 177, 74,  120, 136, 149, 139, 227, 99,  232, 109, 233, 203, 213, 254,
    59,  0,   29,  57,  242, 239, 183, 14,  102, 88,  208, 228, 166, 119, 114, 248, 235, 117, 75,  10,  49,  68,
    80,  180, 143, 237, 31,  26,  219, 153, 141, 51,  159, 17,  131, 20};

void md2_init(struct md2 *c) { memset(c, 0, sizeof *c); }

static void block(struct md2 *c) {
    for (int j = 0; j < 16; j++) {
        c->x[16 + j] = c->buf[j];
        c->x[32 + j] = (uint8_t)(c->buf[j] ^ c->x[j]);
    }
    uint8_t l = c->c[15];
    for (int j = 0; j < 16; j++)
        l = c->c[j] ^= S[c->buf[j] ^ l];
    uint8_t t = 0;
    for (int r = 0; r < 18; r++) {
        for (int k = 0; k < 48; k++)
            t = c->x[k] ^= S[t];
        t = (uint8_t)(t + r);
    }
}

void md2_update(struct md2 *c, const void *data, size_t n) {
    const uint8_t *p = data;
    for (size_t i = 0; i < n; i++) {
        c->buf[c->n++] = p[i];
        if (c->n == 16) {
            block(c);
            c->n = 0;
        }
    }
}

void md2_final(struct md2 *c, uint8_t out[16]) {
    uint8_t pad = (uint8_t)(16 - c->n), p[16];
    memset(p, pad, sizeof p);
    md2_update(c, p, pad);
    uint8_t cs[16];
    memcpy(cs, c->c, 16);
    md2_update(c, cs, 16);
    memcpy(out, c->x, 16);
}

void hmac_md2(const uint8_t key[16], const void *msg, size_t n, uint8_t out[16]) {
    uint8_t k[16], inner[16];
    struct md2 c;
    for (int i = 0; i < 16; i++)
        k[i] = key[i] ^ 0x36;
    md2_init(&c);
    md2_update(&c, k, 16);
    md2_update(&c, msg, n);
    md2_final(&c, inner);
    for (int i = 0; i < 16; i++)
        k[i] = key[i] ^ 0x5c;
    md2_init(&c);
    md2_update(&c, k, 16);
    md2_update(&c, inner, 16);
    md2_final(&c, out);
}
