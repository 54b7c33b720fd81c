/*
 * The host side of a ring pair (hostif/PROTOCOL.md §12), used by dpu.c's
 * transport. Internal to libdpu: not part of dpu.h, hidden in libdpu.so.
 *
 * One thread at a time submits and one thread at a time reaps (the caller
 * serialises each); submit and reap may run at once.
 */
#ifndef DPU_RING_H
#define DPU_RING_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct dpu_ring;

/* dpu_ring_attach checks the memfd (seals, size, control page, and that it
 * matches the RINGS reply's sizes) and maps it. It takes ownership of both
 * descriptors, also on failure. 0 or -errno (EPROTO: not a valid ring). */
int dpu_ring_attach(int memfd, int bell, uint32_t entries, uint32_t slot_size, uint64_t map_size,
                    struct dpu_ring **out);
void dpu_ring_close(struct dpu_ring *r);

/* dpu_ring_submit publishes one message and rings the bell if the agent
 * asked. 0, -EAGAIN (full), -EMSGSIZE (larger than a slot), -EPROTO. */
int dpu_ring_submit(struct dpu_ring *r, const uint8_t *msg, size_t n);

/* dpu_ring_reap copies the next completion into dst and hands its slot
 * back: its length, 0 when none is ready, -EPROTO on corruption. */
ssize_t dpu_ring_reap(struct dpu_ring *r, uint8_t *dst, size_t cap);

/* Sleeping: dpu_ring_wait_begin raises HOST_WAITING and reports whether a
 * completion is ready (1: do not sleep; <0: corrupt). The caller then
 * polls dpu_ring_bell (with a bound) and calls dpu_ring_wait_end, which
 * lowers the flag and drains the bell. */
int dpu_ring_wait_begin(struct dpu_ring *r);
void dpu_ring_wait_end(struct dpu_ring *r);
int dpu_ring_bell(const struct dpu_ring *r);

#endif
