/* Weighted histograms of bounded user sets: the first step of weighted Gaussian / Laplace
 * partition selection (Gopi, Gulhane, Kulkarni, Shen, Shokouhi, Yekhanin, "Differentially
 * private set union", ICML 2020, Theorem 5.1) and of every round of DP-SIPS (Swanberg,
 * Desfontaines, Haney 2023); docs/privacy/weighted.md.
 *
 * Each user's partitions (grouped, as dps_counter_group leaves them), minus those marked
 * excluded, are bounded to kappa chosen uniformly among all subsets (partial Fisher–Yates on
 * exact uniform integers from the CSPRNG); each kept partition's histogram entry gains
 * weights[m], m the number the user kept. Integer weights (fixed point) keep every sum exact.
 * Plain C11, no Python headers. */
#ifndef DPS_WEIGHTED_H
#define DPS_WEIGHTED_H

#include <stddef.h>
#include <stdint.h>

#include "csprng.h"

/* histogram has n_partitions entries (added to, not cleared); weights has kappa + 1 entries
 * (weights[0] unused); excluded may be NULL. grouped is reordered in place within each user's
 * run. Returns DPS_OK, an RNG status, or DPS_ERR_BAD_TABLE for a code >= n_partitions or a sum
 * that would overflow int64. */
int dps_weighted_round(dps_rng *s, const size_t *ends, uint32_t *grouped, uint64_t n_users,
                       const uint8_t *excluded, uint64_t kappa, const int64_t *weights,
                       int64_t *histogram, size_t n_partitions);

/* Each user's first min(kappa, left) partitions of their run, in its order, skipping those
 * marked excluded: each gains weights[m], m the number taken (cumulative DP-SIPS: every user's
 * keys in one fixed order, the first kappa not yet released). No randomness. Returns DPS_OK, or
 * DPS_ERR_BAD_TABLE for decreasing ends, a code >= n_partitions or an int64 overflow. */
int dps_weighted_prefix(const size_t *ends, const uint32_t *grouped, uint64_t n_users, const uint8_t *excluded,
                        uint64_t kappa, const int64_t *weights, int64_t *histogram, size_t n_partitions);

/* Put each user's run of grouped (ends as for dps_weighted_round) in a uniformly random order
 * (cumulative DP-SIPS orders every user's keys once). Returns DPS_OK, an RNG status, or
 * DPS_ERR_BAD_TABLE for decreasing ends. */
int dps_weighted_shuffle(dps_rng *s, const size_t *ends, uint32_t *grouped, uint64_t n_users);

/* out[i] = P[Z > z[i]] for Z ~ N(0, 1), in double precision (the C library's erfc). */
void dps_normal_upper_tail(const double *z, double *out, size_t n);

#endif
