/*
 * internal.h — what the library's source files share beyond dpu.h. Nothing
 * here is exported (the library is built with -fvisibility=hidden).
 */
#ifndef DPU_INTERNAL_H
#define DPU_INTERNAL_H

#include "dpu.h"

#include <stddef.h>

/* extent: a run of free page indices in a free list kept sorted by start
 * (the pages of a mapping region). The caller serialises use of a list. */
struct extent {
    struct extent *next;
    size_t start, len;
};
long dpu__extent_take(struct extent **list, size_t pages);            /* first fit; -1: none */
void dpu__extent_give(struct extent **list, size_t start, size_t pages); /* merges neighbours */

/* dpu.c */
int dpu__reopen(const dpu_t *d, dpu_t **out);          /* a second connection to d's socket */
int dpu__refs(dpu_t *d, dpu_gva_t gva, size_t pages, int drop); /* MAP/UNMAP with NOFD: refs only */
uint32_t dpu__max_map_pages(const dpu_t *d);
int dpu__acquire(dpu_t *d, dpu_gva_t page);           /* ACQUIRE with d's timeout, no mmap hooks */
int dpu__release(dpu_t *d, dpu_gva_t page);           /* RELEASE, no mmap hooks */
int dpu__request(dpu_t *d, uint16_t op, const void *body, size_t len); /* a request with no reply body */
/* LOAD of a whole page, with (fence) a CAS that leaves its first word as it is sent ahead of it
 * without waiting: the load is made again if answered below the CAS's version (the owner's). */
int dpu__load_fenced(dpu_t *d, dpu_gva_t page, void *buf, int fence, uint64_t fence_word, int *fence_rc);

/* mmap.c: called by dpu.c */
void dpu__mmap_closing(dpu_t *d); /* dpu_close: write back and drop d's areas */
void dpu__mmap_acquired(void);    /* after a successful acquire or lock */
void dpu__mmap_releasing(void);   /* before a release or unlock */
void dpu__mmap_locked(dpu_gva_t page, int held); /* this process took (1) or is giving up (0) a page's lock */

#endif /* DPU_INTERNAL_H */
