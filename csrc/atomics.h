/* The few atomic operations the multi-threaded kernels need (radix_pairs.c, count.c): a saturating
 * increment of a shared count and an addition to a shared size, on GCC, Clang and MSVC (whose C11
 * <stdatomic.h> support is still experimental). Relaxed ordering: the threads only add to
 * counters, and the caller joins them (a happens-before edge) before any result is read. */
#ifndef DPS_ATOMICS_H
#define DPS_ATOMICS_H

#include <stddef.h>
#include <stdint.h>

#if defined(_MSC_VER) && !defined(__clang__)
#include <intrin.h>
static inline int64_t dps_atomic_load_i64(int64_t *p) { return *(volatile int64_t *)p; }
static inline int dps_atomic_cas_i64(int64_t *p, int64_t *expected, int64_t desired) {
    int64_t seen = _InterlockedCompareExchange64((volatile long long *)p, desired, *expected);
    if (seen == *expected) return 1;
    *expected = seen;
    return 0;
}
static inline void dps_atomic_add_size(size_t *p, size_t v) {
#if defined(_WIN64)
    _InterlockedExchangeAdd64((volatile long long *)p, (long long)v);
#else
    _InterlockedExchangeAdd((volatile long *)p, (long)v);
#endif
}
static inline void dps_atomic_set_int(int *p, int v) { _InterlockedExchange((volatile long *)p, (long)v); }
#else
static inline int64_t dps_atomic_load_i64(int64_t *p) { return __atomic_load_n(p, __ATOMIC_RELAXED); }
static inline int dps_atomic_cas_i64(int64_t *p, int64_t *expected, int64_t desired) {
    return __atomic_compare_exchange_n(p, expected, desired, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
}
static inline void dps_atomic_add_size(size_t *p, size_t v) { __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }
static inline void dps_atomic_set_int(int *p, int v) { __atomic_store_n(p, v, __ATOMIC_RELAXED); }
#endif

/* counts[p] += 1 unless it has reached cap (0: no cap), atomically. */
static inline void dps_atomic_add_one_capped(int64_t *count, uint64_t cap) {
    int64_t v = dps_atomic_load_i64(count);
    while (cap == 0 || (uint64_t)v < cap)
        if (dps_atomic_cas_i64(count, &v, v + 1)) return;
}

#endif
