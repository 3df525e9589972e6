/* Rows grouped by user: a stable counting sort of row indices by user code, in two passes that
 * stay in the caches (first into buckets of consecutive users, then each bucket by user), for
 * the row-level contribution bounding of a grouped release (bound_rows.h). */
#ifndef DPS_GROUP_ROWS_H
#define DPS_GROUP_ROWS_H

#include <stddef.h>
#include <stdint.h>

/* Group the rows of one shard of the users: those with (users[i] & shard_mask) == shard
 * (shard_mask = 2^b - 1; 0 for every row), user u being local user u >> b. On success *order
 * holds the shard's row indices, user by user in local-user order and in row order within a user,
 * and local user v's rows are (*order)[(*end)[v - 1] .. (*end)[v]) ((*end)[-1] read as 0);
 * *n_local is the number of local users (codes below n_users) and *n_rows the rows. Every user
 * code must be < n_users (callers check). Free both arrays with free(). DPS_ERR_NOMEM on failure. */
int dps_group_rows(const uint32_t *users, size_t n, uint32_t n_users, uint32_t shard_mask, uint32_t shard,
                   uint32_t **order, size_t **end, size_t *n_local, size_t *n_rows);

/* The same for the rows rows[0 .. m) only, every one of whose users is in [first_user, last_user)
 * (callers check), local user u - first_user; n_local = last_user - first_user. */
int dps_group_rows_range(const uint32_t *users, const uint32_t *rows, size_t m, uint32_t first_user,
                         uint32_t last_user, uint32_t **order, size_t **end, size_t *n_local);

/* The same for every row of users[0 .. m) (a shard's own copy of its users' codes, all in
 * [first_user, last_user): callers check): *order holds local row indices 0 .. m. */
int dps_group_rows_local(const uint32_t *users, size_t m, uint32_t first_user, uint32_t last_user,
                         uint32_t **order, size_t **end, size_t *n_local);

#endif
