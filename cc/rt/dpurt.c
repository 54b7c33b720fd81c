/*
 * libdpurt — the runtime of programs built with dpu-cc.
 *
 * dpu-cc compiles with ThreadSanitizer's instrumentation (-fsanitize=thread)
 * and links this library instead of the TSan runtime. The instrumentation
 * calls us before plain loads and stores (__tsan_readN/__tsan_writeN, ...)
 * and hands us every C11/C++ atomic operation with its operands
 * (__tsan_atomicN_*). Each entry point first asks whether the address lies
 * in the process's dpu_mmap range — one compare, (a - dpu_mmap_lo) <
 * dpu_mmap_span — and if not does the plain thing at native speed (nothing
 * for a plain access, the __atomic builtin for an atomic).
 *
 * For a shared address:
 *   - plain accesses make the page present (a read) or present and
 *     writable (a write) through dpu_mmap_touch, without waiting for the
 *     page fault that would otherwise do the same; the access itself then
 *     runs on the local page;
 *   - atomics run at the page's owner through the node: 64-bit fetch-add
 *     and fetch-sub as FETCH_ADD, 64-bit loads and stores as LOAD and
 *     STORE, everything else (other sizes, exchange, and/or/xor/nand,
 *     compare-exchange) as CAS on the aligned 64-bit word that holds the
 *     value, retried from the word the owner returned. No page moves;
 *   - memory order: an atomic with release semantics (release, acq_rel,
 *     seq_cst) first writes back this process's writes to its dpu_mmap
 *     pages (dpu_mmap_sync release); one with acquire semantics drops the
 *     cached pages after it, so later plain reads fetch current content.
 *     That makes C11's release/acquire pairs hold across nodes.
 *
 * The list of entry points, for both compilers, is in cc/README.md; dpu-cc
 * refuses to link an object that needs one this file does not define.
 * This file must never be built with -fsanitize=thread itself.
 */
#define _GNU_SOURCE
#include "dpu.h"

#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define RT_API __attribute__((visibility("default")))

typedef unsigned char a8;
typedef unsigned short a16;
typedef unsigned int a32;
typedef unsigned long long a64;
typedef unsigned __int128 a128;

enum { MO_RELAXED, MO_CONSUME, MO_ACQUIRE, MO_RELEASE, MO_ACQ_REL, MO_SEQ_CST };
enum { OP_LOAD, OP_STORE, OP_XCHG, OP_ADD, OP_SUB, OP_AND, OP_OR, OP_XOR, OP_NAND, OP_CAS };

static inline int shared(const volatile void *p) {
    return (uintptr_t)p - __atomic_load_n(&dpu_mmap_lo, __ATOMIC_RELAXED) <
           __atomic_load_n(&dpu_mmap_span, __ATOMIC_RELAXED);
}

static int releases(int mo) { return mo == MO_RELEASE || mo == MO_ACQ_REL || mo == MO_SEQ_CST; }
static int acquires(int mo) { return mo == MO_CONSUME || mo == MO_ACQUIRE || mo == MO_ACQ_REL || mo == MO_SEQ_CST; }

static const char *op_names[] = {"load", "store", "exchange", "fetch_add", "fetch_sub",
                                 "fetch_and", "fetch_or", "fetch_xor", "fetch_nand", "compare_exchange"};

/* die reports why a shared access cannot go on and raises sig in this
 * thread (SIGBUS: the page or the node failed; SIGSEGV: not mapped). */
__attribute__((noreturn, cold)) static void die(int sig, const volatile void *p, const char *what, int rc) {
    char buf[400];
    int n = snprintf(buf, sizeof buf, "dpurt: %s at %p: %s (%s)\n", what, (const void *)p, dpu_strerror(rc),
                     dpu_last_error());
    if (n > 0) (void)!write(2, buf, (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1);
    raise(sig);
    abort();
}

/* ---- plain accesses ---- */

__attribute__((noinline)) static void touch_slow(const volatile void *p, int write) {
    size_t idx = ((uintptr_t)p - dpu_mmap_lo) / DPU_PAGE_SIZE;
    unsigned char st = __atomic_load_n(&dpu_mmap_pages[idx], __ATOMIC_ACQUIRE);
    if (st == 2 || (st == 1 && !write)) return; /* dirty, or clean for a read */
    int rc = dpu_mmap_touch((const void *)p, write);
    if (rc == -EFAULT) return; /* not an area: the access itself faults (SIGSEGV) */
    if (rc < 0) die(SIGBUS, p, write ? "write to a dpu_mmap page" : "read of a dpu_mmap page", rc);
}

static inline void touch(const volatile void *p, int write) {
    if (__builtin_expect(shared(p), 0)) touch_slow(p, write);
}

static void touch_range(const volatile void *p, size_t n, int write) {
    if (n == 0) return;
    uintptr_t a = (uintptr_t)p, end = a + n - 1;
    if (!shared((void *)a) && !shared((void *)end)) return;
    for (uintptr_t q = a & ~(uintptr_t)(DPU_PAGE_SIZE - 1); q <= end; q += DPU_PAGE_SIZE) {
        const void *at = (const void *)(q < a ? a : q);
        if (shared(at)) touch_slow(at, write);
        if (q + DPU_PAGE_SIZE < q) break;
    }
}

#define ACCESS(N)                                                                              \
    RT_API void __tsan_read##N(void *p) { touch(p, 0); }                                       \
    RT_API void __tsan_write##N(void *p) { touch(p, 1); }                                      \
    RT_API void __tsan_read##N##_pc(void *p, void *pc) { (void)pc; touch(p, 0); }              \
    RT_API void __tsan_write##N##_pc(void *p, void *pc) { (void)pc; touch(p, 1); }             \
    RT_API void __tsan_volatile_read##N(void *p) { touch(p, 0); }                              \
    RT_API void __tsan_volatile_write##N(void *p) { touch(p, 1); }

#define UNALIGNED(N)                                                                           \
    RT_API void __tsan_unaligned_read##N(const void *p) { touch_range(p, N, 0); }              \
    RT_API void __tsan_unaligned_write##N(void *p) { touch_range(p, N, 1); }                   \
    RT_API void __tsan_unaligned_volatile_read##N(const void *p) { touch_range(p, N, 0); }     \
    RT_API void __tsan_unaligned_volatile_write##N(void *p) { touch_range(p, N, 1); }

ACCESS(1)
ACCESS(2)
ACCESS(4)
ACCESS(8)
ACCESS(16)
UNALIGNED(2)
UNALIGNED(4)
UNALIGNED(8)
UNALIGNED(16)

RT_API void __tsan_read_range(void *p, unsigned long n) { touch_range(p, n, 0); }
RT_API void __tsan_write_range(void *p, unsigned long n) { touch_range(p, n, 1); }
RT_API void __tsan_read_range_pc(void *p, unsigned long n, void *pc) { (void)pc; touch_range(p, n, 0); }
RT_API void __tsan_write_range_pc(void *p, unsigned long n, void *pc) { (void)pc; touch_range(p, n, 1); }
RT_API void __tsan_vptr_read(void **p) { touch(p, 0); }
RT_API void __tsan_vptr_update(void **p, void *v) { (void)v; touch(p, 1); }

RT_API void *__tsan_memcpy(void *dst, const void *src, unsigned long n) {
    touch_range(src, n, 0);
    touch_range(dst, n, 1);
    return memcpy(dst, src, n);
}
RT_API void *__tsan_memmove(void *dst, const void *src, unsigned long n) {
    touch_range(src, n, 0);
    touch_range(dst, n, 1);
    return memmove(dst, src, n);
}
RT_API void *__tsan_memset(void *dst, int c, unsigned long n) {
    touch_range(dst, n, 1);
    return memset(dst, c, n);
}

/* Bookkeeping the race detector needs and we do not. */
RT_API void __tsan_init(void) {}
RT_API void __tsan_func_entry(void *pc) { (void)pc; }
RT_API void __tsan_func_exit(void) {}
RT_API void __tsan_ignore_thread_begin(void) {}
RT_API void __tsan_ignore_thread_end(void) {}

/* ---- atomics on shared addresses ---- */

/* The last word this thread saw at a GVA: the first CAS of a retry loop
 * expects it, so an uncontended read-modify-write costs one round trip. */
enum { GUESSES = 16 };
static _Thread_local struct {
    dpu_gva_t g;
    uint64_t v;
} guess[GUESSES];

static uint64_t *guess_at(dpu_gva_t w, int *hit) {
    unsigned k = (unsigned)((w.lo >> 3) ^ (w.hi * 31)) % GUESSES;
    *hit = guess[k].g.hi == w.hi && guess[k].g.lo == w.lo;
    guess[k].g = w;
    return &guess[k].v;
}

/* Contention: an atomic on a shared word that changed nothing (a failed
 * compare-exchange, an exchange or fetch-or that found the value already
 * there: a spinning lock) backs off before returning, 1 us doubling to
 * 256 us, so spinners leave the owner's arbiter to the holder; any atomic
 * that changes its word resets it. */
static _Thread_local unsigned backoff_us;

static void contended(int idle) {
    if (!idle) {
        backoff_us = 0;
        return;
    }
    backoff_us = backoff_us ? (backoff_us < 256 ? backoff_us * 2 : 256) : 1;
    struct timespec t = {0, (long)backoff_us * 1000};
    nanosleep(&t, NULL);
}

static uint64_t apply(int op, uint64_t cur, uint64_t v) {
    switch (op) {
    case OP_STORE:
    case OP_XCHG: return v;
    case OP_ADD: return cur + v;
    case OP_SUB: return cur - v;
    case OP_AND: return cur & v;
    case OP_OR: return cur | v;
    case OP_XOR: return cur ^ v;
    case OP_NAND: return ~(cur & v);
    }
    return cur;
}

/* shared_atomic runs op on the size-byte value at p at the page's owner and
 * returns the value it found; for OP_CAS *ok says whether it swapped. */
__attribute__((noinline)) static uint64_t shared_atomic(const volatile void *p, unsigned size, int op, uint64_t v,
                                                        uint64_t cmp, int mo, int fmo, int *ok) {
    dpu_t *d;
    dpu_gva_t g;
    if ((uintptr_t)p % size != 0) die(SIGBUS, p, "unaligned atomic on a dpu_mmap page", -EINVAL);
    if (size > 8) die(SIGBUS, p, "128-bit atomic on a dpu_mmap page (not supported)", -EOPNOTSUPP);
    int rc = dpu_mmap_lookup((const void *)p, &d, &g);
    if (rc < 0) die(SIGSEGV, p, "atomic in the dpu_mmap range outside any area", rc);
    if (releases(mo)) dpu_mmap_sync(DPU_SYNC_RELEASE);

    dpu_gva_t w = g;
    w.lo &= ~(uint64_t)7;
    unsigned sh = (unsigned)(g.lo & 7) * 8;
    uint64_t mask = size == 8 ? ~(uint64_t)0 : (((uint64_t)1 << (size * 8)) - 1) << sh;
    uint64_t old = 0, neu = 0;
    int swapped = 1;
    if (size == 8 && (op == OP_ADD || op == OP_SUB)) {
        rc = dpu_fetch_add64(d, w, op == OP_ADD ? v : (uint64_t)0 - v, &old);
        neu = apply(op, old, v);
    } else if (op == OP_LOAD) {
        uint64_t word = 0;
        rc = dpu_load64(d, w, &word);
        old = (word & mask) >> sh;
    } else if (size == 8 && op == OP_STORE) {
        rc = dpu_store64(d, w, v);
        neu = v;
    } else {
        int hit;
        uint64_t *gp = guess_at(w, &hit);
        uint64_t word = hit ? *gp : 0;
        for (int tries = 0;; tries++) {
            uint64_t cur = (word & mask) >> sh, expect = word, seen;
            if (op == OP_CAS) {
                expect = (word & ~mask) | ((cmp << sh) & mask);
                neu = v;
            } else {
                neu = apply(op, cur, v);
            }
            uint64_t desired = (expect & ~mask) | ((neu << sh) & mask);
            rc = dpu_cas64(d, w, expect, desired, &seen);
            if (rc < 0) break;
            *gp = seen;
            if (seen == expect) {
                old = op == OP_CAS ? cmp : cur;
                *gp = desired;
                break;
            }
            uint64_t seen_cur = (seen & mask) >> sh;
            if (op == OP_CAS && seen_cur != (cmp & (mask >> sh))) {
                old = seen_cur; /* the owner's value differs: the CAS fails there */
                swapped = 0;
                break;
            }
            if (op != OP_CAS && ((apply(op, seen_cur, v) << sh) & mask) == (seen & mask)) {
                old = seen_cur; /* the operation would change nothing: the failed CAS saw it */
                neu = seen_cur;
                break;
            }
            word = seen;
            if (tries > 1000000) die(SIGBUS, p, "atomic retried a million times", -EAGAIN);
        }
    }
    if (rc < 0) {
        char what[80];
        snprintf(what, sizeof what, "atomic %s of %u bytes on a dpu_mmap page", op_names[op], size);
        die(SIGBUS, p, what, rc);
    }
    if (op != OP_LOAD && swapped) dpu_mmap_wrote((const void *)p, &neu, size); /* little-endian */
    if (op != OP_LOAD) contended(!swapped || neu == old);
    if (ok) *ok = swapped;
    if (acquires(swapped ? mo : fmo)) dpu_mmap_sync(DPU_SYNC_RELEASE | DPU_SYNC_ACQUIRE);
    return old & (size == 8 ? ~(uint64_t)0 : (((uint64_t)1 << (size * 8)) - 1));
}

/* ---- the atomic entry points ---- */

#define ATOMICS(N, T)                                                                                     \
    RT_API T __tsan_atomic##N##_load(const volatile T *a, int mo) {                                       \
        if (!shared(a)) return __atomic_load_n(a, mo);                                                    \
        return (T)shared_atomic(a, sizeof(T), OP_LOAD, 0, 0, mo, mo, NULL);                               \
    }                                                                                                     \
    RT_API void __tsan_atomic##N##_store(volatile T *a, T v, int mo) {                                    \
        if (!shared(a)) {                                                                                 \
            __atomic_store_n(a, v, mo);                                                                   \
            return;                                                                                       \
        }                                                                                                 \
        shared_atomic(a, sizeof(T), OP_STORE, v, 0, mo, mo, NULL);                                        \
    }                                                                                                     \
    RT_API T __tsan_atomic##N##_exchange(volatile T *a, T v, int mo) {                                    \
        if (!shared(a)) return __atomic_exchange_n(a, v, mo);                                            \
        return (T)shared_atomic(a, sizeof(T), OP_XCHG, v, 0, mo, mo, NULL);                               \
    }                                                                                                     \
    RT_API T __tsan_atomic##N##_fetch_add(volatile T *a, T v, int mo) {                                   \
        if (!shared(a)) return __atomic_fetch_add(a, v, mo);                                              \
        return (T)shared_atomic(a, sizeof(T), OP_ADD, v, 0, mo, mo, NULL);                                \
    }                                                                                                     \
    RT_API T __tsan_atomic##N##_fetch_sub(volatile T *a, T v, int mo) {                                   \
        if (!shared(a)) return __atomic_fetch_sub(a, v, mo);                                              \
        return (T)shared_atomic(a, sizeof(T), OP_SUB, v, 0, mo, mo, NULL);                                \
    }                                                                                                     \
    RT_API T __tsan_atomic##N##_fetch_and(volatile T *a, T v, int mo) {                                   \
        if (!shared(a)) return __atomic_fetch_and(a, v, mo);                                              \
        return (T)shared_atomic(a, sizeof(T), OP_AND, v, 0, mo, mo, NULL);                                \
    }                                                                                                     \
    RT_API T __tsan_atomic##N##_fetch_or(volatile T *a, T v, int mo) {                                    \
        if (!shared(a)) return __atomic_fetch_or(a, v, mo);                                               \
        return (T)shared_atomic(a, sizeof(T), OP_OR, v, 0, mo, mo, NULL);                                 \
    }                                                                                                     \
    RT_API T __tsan_atomic##N##_fetch_xor(volatile T *a, T v, int mo) {                                   \
        if (!shared(a)) return __atomic_fetch_xor(a, v, mo);                                              \
        return (T)shared_atomic(a, sizeof(T), OP_XOR, v, 0, mo, mo, NULL);                                \
    }                                                                                                     \
    RT_API T __tsan_atomic##N##_fetch_nand(volatile T *a, T v, int mo) {                                  \
        if (!shared(a)) return __atomic_fetch_nand(a, v, mo);                                             \
        return (T)shared_atomic(a, sizeof(T), OP_NAND, v, 0, mo, mo, NULL);                               \
    }                                                                                                     \
    RT_API int __tsan_atomic##N##_compare_exchange_strong(volatile T *a, T *c, T v, int mo, int fmo) {    \
        if (!shared(a)) return __atomic_compare_exchange_n(a, c, v, 0, mo, fmo);                          \
        int ok;                                                                                           \
        T old = (T)shared_atomic(a, sizeof(T), OP_CAS, v, *c, mo, fmo, &ok);                              \
        if (!ok) *c = old;                                                                                \
        return ok;                                                                                        \
    }                                                                                                     \
    RT_API int __tsan_atomic##N##_compare_exchange_weak(volatile T *a, T *c, T v, int mo, int fmo) {      \
        return __tsan_atomic##N##_compare_exchange_strong(a, c, v, mo, fmo);                              \
    }                                                                                                     \
    RT_API T __tsan_atomic##N##_compare_exchange_val(volatile T *a, T c, T v, int mo, int fmo) {          \
        __tsan_atomic##N##_compare_exchange_strong(a, &c, v, mo, fmo);                                    \
        return c;                                                                                         \
    }

ATOMICS(8, a8)
ATOMICS(16, a16)
ATOMICS(32, a32)
ATOMICS(64, a64)

/* 128-bit atomics: native on private memory (cmpxchg16b), refused on
 * shared pages (the node's atomics are 64-bit). */
static a128 cas128(volatile a128 *a, a128 c, a128 v) { return __sync_val_compare_and_swap(a, c, v); }

#define RMW128(NAME, EXPR)                                                                                \
    RT_API a128 __tsan_atomic128_##NAME(volatile a128 *a, a128 v, int mo) {                               \
        (void)mo;                                                                                         \
        if (shared(a)) shared_atomic(a, 16, OP_XCHG, 0, 0, mo, mo, NULL);                                 \
        a128 cur = *a;                                                                                    \
        for (;;) {                                                                                        \
            a128 seen = cas128(a, cur, (EXPR));                                                           \
            if (seen == cur) return cur;                                                                  \
            cur = seen;                                                                                   \
        }                                                                                                 \
    }

RMW128(exchange, v)
RMW128(fetch_add, cur + v)
RMW128(fetch_sub, cur - v)
RMW128(fetch_and, cur &v)
RMW128(fetch_or, cur | v)
RMW128(fetch_xor, cur ^ v)
RMW128(fetch_nand, ~(cur & v))

RT_API a128 __tsan_atomic128_load(const volatile a128 *a, int mo) {
    (void)mo;
    if (shared(a)) shared_atomic(a, 16, OP_LOAD, 0, 0, mo, mo, NULL);
    return cas128((volatile a128 *)a, 0, 0);
}
RT_API void __tsan_atomic128_store(volatile a128 *a, a128 v, int mo) { __tsan_atomic128_exchange(a, v, mo); }
RT_API int __tsan_atomic128_compare_exchange_strong(volatile a128 *a, a128 *c, a128 v, int mo, int fmo) {
    (void)fmo;
    if (shared(a)) shared_atomic(a, 16, OP_CAS, 0, 0, mo, fmo, NULL);
    a128 seen = cas128(a, *c, v);
    if (seen == *c) return 1;
    *c = seen;
    return 0;
}
RT_API int __tsan_atomic128_compare_exchange_weak(volatile a128 *a, a128 *c, a128 v, int mo, int fmo) {
    return __tsan_atomic128_compare_exchange_strong(a, c, v, mo, fmo);
}
RT_API a128 __tsan_atomic128_compare_exchange_val(volatile a128 *a, a128 c, a128 v, int mo, int fmo) {
    __tsan_atomic128_compare_exchange_strong(a, &c, v, mo, fmo);
    return c;
}

/* ---- fences ---- */

RT_API void __tsan_atomic_thread_fence(int mo) {
    __atomic_thread_fence(mo);
    if (!__atomic_load_n(&dpu_mmap_span, __ATOMIC_RELAXED)) return;
    if (acquires(mo)) dpu_mmap_sync(DPU_SYNC_RELEASE | DPU_SYNC_ACQUIRE);
    else if (releases(mo)) dpu_mmap_sync(DPU_SYNC_RELEASE);
}

RT_API void __tsan_atomic_signal_fence(int mo) { __atomic_signal_fence(mo); }
