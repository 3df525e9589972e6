/* Per-thread secure generator states and fork safety (docs/privacy/randomness.md).
 *
 * A forked child must never replay its parent's bytes. Three independent checks, any one of
 * which suffices: the state page is MADV_WIPEONFORK (the child sees a zeroed, uninitialised
 * state), a pthread_atfork child handler bumps a fork generation, and the pid is compared at
 * every batch entry. A secure state that fails a check is re-keyed from the OS; a deterministic
 * test state fails loudly with DPS_ERR_FORK_INSECURE. */
#ifndef DPS_RNG_THREAD_H
#define DPS_RNG_THREAD_H

#include "csprng.h"

/* Page-aligned, wipe-on-fork storage for one state (zeroed). NULL when out of memory. */
dps_rng *dps_rng_alloc(void);
void dps_rng_free(dps_rng *s);

/* This thread's secure state, created and OS-keyed on first use; no lock is taken.
 * On failure returns NULL and sets *err. */
dps_rng *dps_rng_thread_state(int *err);

/* Call at the start of every batch: fork checks, then (secure) 32 fresh OS bytes are mixed in.
 * expected_mode says what the caller believes the state is, so that a wiped test state is
 * reported as a fork instead of being silently re-keyed. */
int dps_rng_begin_batch(dps_rng *s, int expected_mode);

/* Call at the end of every batch: consumed bytes are zeroed. */
void dps_rng_end_batch(dps_rng *s);

/* Deterministic test state in storage from dps_rng_alloc, stamped with this process so that
 * use after fork() is detected (see csprng.h for the acknowledgement constant). */
int dps_rng_init_test_state(dps_rng *s, const uint8_t seed[32], uint64_t stream, uint64_t ack);

/* Record that the process forked (called in the child; also wired to os.register_at_fork). */
void dps_rng_note_fork(void);

/* Current fork generation of this process image (for tests). */
uint64_t dps_rng_fork_generation(void);

#endif
