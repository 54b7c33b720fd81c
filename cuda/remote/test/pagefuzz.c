/*
 * pagefuzz — the staging page decoder (mbox.c's page_check) against pages
 * another node could have written: random bytes, and well-formed pages
 * with bytes flipped, truncated lengths, other tags and other indexes.
 * A well-formed page must check PAGE_OK; one changed in any byte the
 * check covers must not (CRC-32C detects every change of up to 3 bits in
 * a page, and the others but for a 2^-32 chance: the run counts them);
 * nothing may be read past the page (run under AddressSanitizer too).
 * Also checks crc32c against the standard check value.
 *
 *   pagefuzz ITERATIONS SEED
 *   pagefuzz -print SEQ TOKEN INDEX M SEED   a well-formed page on stdout (hex), for the Go side's drift test
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mbox.h"

static uint64_t rng;
static uint64_t next(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return rng;
}

int main(int argc, char **argv) {
    if (argc == 7 && !strcmp(argv[1], "-print")) {
        struct rw_stage_hdr tag = {strtoull(argv[2], NULL, 10), strtoull(argv[3], NULL, 10)};
        uint32_t index = (uint32_t)strtoul(argv[4], NULL, 10);
        size_t m = (size_t)strtoul(argv[5], NULL, 10);
        rng = strtoull(argv[6], NULL, 10) | 1;
        if (m > RW_STAGE_DATA)
            return 2;
        unsigned char data[RW_STAGE_DATA], page[RW_PAGE];
        for (size_t i = 0; i < m; i++)
            data[i] = (unsigned char)next();
        page_format(page, data, m, tag, index);
        for (size_t i = 0; i < sizeof tag + m + RW_STAGE_TRAILER; i++)
            printf("%02x", page[i]);
        printf("\n");
        return 0;
    }
    if (argc < 3) {
        fprintf(stderr, "usage: pagefuzz ITERATIONS SEED\n");
        return 2;
    }
    long iters = atol(argv[1]);
    rng = strtoull(argv[2], NULL, 10) | 1;
    if (crc32c(0, "123456789", 9) != 0xe3069283u) {
        fprintf(stderr, "pagefuzz: crc32c(\"123456789\") = %08x, want e3069283\n", crc32c(0, "123456789", 9));
        return 1;
    }
    long collisions = 0;
    for (long it = 0; it < iters; it++) {
        size_t m = next() % 3 == 0 ? RW_STAGE_DATA : (size_t)(next() % (RW_STAGE_DATA + 1));
        size_t whole = sizeof(struct rw_stage_hdr) + m + RW_STAGE_TRAILER;
        /* Exactly the bytes the check may read, on the heap: ASan sees an overrun. */
        unsigned char *page = malloc(whole), *data = malloc(m + 1);
        struct rw_stage_hdr tag = {next() % 4, next() % 4};
        uint32_t index = (uint32_t)(next() % 4);
        for (size_t i = 0; i < m; i++)
            data[i] = (unsigned char)next();
        int kind = (int)(next() % 5);
        if (kind == 0) { /* random bytes */
            for (size_t i = 0; i < whole; i++)
                page[i] = (unsigned char)next();
            (void)page_check(page, m, tag, index);
        } else {
            page_format(page, data, m, tag, index);
            if (page_check(page, m, tag, index) != PAGE_OK) {
                fprintf(stderr, "pagefuzz: a well-formed page does not check (m %zu)\n", m);
                return 1;
            }
            if (memcmp(page + sizeof tag, data, m) != 0)
                return 1;
            if (kind == 1) { /* bytes flipped */
                int flips = 1 + (int)(next() % 3);
                for (int f = 0; f < flips; f++)
                    page[next() % whole] ^= (unsigned char)(1u << (next() % 8));
                int c = page_check(page, m, tag, index);
                struct rw_stage_hdr h;
                memcpy(&h, page, sizeof h);
                int hdr_same = h.seq == tag.seq && h.token == tag.token;
                /* Flips may cancel out; otherwise a changed page never checks. */
                unsigned char *again = malloc(whole);
                page_format(again, page + sizeof tag, m, tag, index);
                int same = memcmp(again, page, whole) == 0;
                free(again);
                if (c == PAGE_OK && !same) {
                    collisions++;
                    if (flips == 1) {
                        fprintf(stderr, "pagefuzz: a one-bit change checks\n");
                        return 1;
                    }
                }
                if (!hdr_same && c != PAGE_STALE) {
                    fprintf(stderr, "pagefuzz: another message's header is not stale\n");
                    return 1;
                }
            } else if (kind == 2) { /* another message */
                struct rw_stage_hdr other = tag;
                other.seq++;
                if (page_check(page, m, other, index) != PAGE_STALE)
                    return 1;
            } else if (kind == 3) { /* another page */
                if (page_check(page, m, tag, index + 1) == PAGE_OK)
                    return 1;
            } else if (m > 0) { /* read as shorter */
                size_t shorter = (size_t)(next() % m);
                (void)page_check(page, shorter, tag, index);
            }
        }
        free(page);
        free(data);
    }
    printf("pagefuzz: %ld pages, %ld multi-bit changes passed the check\n", iters, collisions);
    return 0;
}
