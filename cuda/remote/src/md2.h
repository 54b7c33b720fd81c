#ifndef DPUCUDA_REMOTE_MD2_H
#define DPUCUDA_REMOTE_MD2_H
#include <stddef.h>
#include <stdint.h>
struct md2 {
    uint8_t x[48], c[16], buf[16];
    unsigned n;
};
void md2_init(struct md2 *c);
void md2_update(struct md2 *c, const void *data, size_t n);
void md2_final(struct md2 *c, uint8_t out[16]);
void hmac_md2(const uint8_t key[16], const void *msg, size_t n, uint8_t out[16]);
#endif
