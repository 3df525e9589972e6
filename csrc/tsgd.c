#include "tsgd.h"

uint32_t dps_weight_table_padded(uint32_t m) {
    uint32_t p = 1;
    while (p < m) p <<= 1;
    return p;
}

int dps_weight_table_init(dps_weight_table *t, const uint64_t *cum, uint32_t m, uint32_t *hi) {
    if (m == 0) return DPS_ERR_BAD_TABLE;
    if (cum[0] == 0) return DPS_ERR_BAD_TABLE;  /* every outcome has weight >= 1 */
    for (uint32_t j = 1; j < m; j++)
        if (cum[j] <= cum[j - 1]) return DPS_ERR_BAD_TABLE;
    t->cum = cum;
    t->m = m;
    t->padded = dps_weight_table_padded(m);
    t->hi = hi;
    for (uint32_t j = 0; j < t->padded; j++) hi[j] = j < m ? (uint32_t)(cum[j] >> 32) : 0xFFFFFFFFu;
    return DPS_OK;
}

uint32_t dps_weight_table_count_le64(const dps_weight_table *t, uint64_t u) {
    uint32_t lo = 0, hi = t->m; /* invariant: cum[j] <= u for j < lo, cum[j] > u for j >= hi */
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (t->cum[mid] <= u) lo = mid + 1; else hi = mid;
    }
    return lo;
}

uint32_t dps_weight_table_draw_slow(const dps_weight_table *t, dps_rng *s, const uint8_t **r,
                                    uint32_t hi_count, uint32_t u_hi) {
    const uint8_t *p = *r;
    for (;;) {
        if (!(hi_count > 0 && t->hi[hi_count - 1] == u_hi) && hi_count < t->m) {
            *r = p + 4;
            return hi_count;
        }
        uint32_t used = 4;
        if (hi_count > 0 && t->hi[hi_count - 1] == u_hi) {
            /* tie on the top half: read the low half and compare exactly */
            uint64_t u = ((uint64_t)u_hi << 32) | dps_load_be(p + 4, 4);
            used = 8;
            uint32_t cnt = dps_weight_table_count_le64(t, u);
            if (cnt < t->m) {
                *r = p + used;
                return cnt;
            }
        }
        /* U >= S: reject and draw again (depends on the random bytes only) */
        p += used;
        if ((size_t)(s->buf + DPS_RNG_BUF - p) < 8) {
            s->pos = (uint32_t)(p - s->buf);
            if (dps_rng_reserve(s, 8) != DPS_OK) return UINT32_MAX;
            p = s->buf + s->pos;
        }
        u_hi = (uint32_t)dps_load_be(p, 4);
        hi_count = dps_count_le32(t->hi, t->padded, u_hi);
    }
}

int dps_weight_table_sample(const dps_weight_table *t, dps_rng *s, int64_t *out, size_t n) {
    if (!dps_weight_table_is_lazy(t)) {
        /* small total: lazy draws would mostly be rejected; draw U < S exactly instead */
        for (size_t i = 0; i < n; i++) {
            uint64_t u;
            int rc = dps_rng_uniform_below(s, t->cum[t->m - 1], &u);
            if (rc != DPS_OK) return rc;
            out[i] = dps_weight_table_count_le64(t, u);
        }
        return DPS_OK;
    }
    for (size_t i = 0; i < n; i++) {
        int rc = dps_rng_reserve(s, 8);
        if (rc != DPS_OK) return rc;
        const uint8_t *p = s->buf + s->pos;
        uint32_t idx = dps_weight_table_draw(t, s, &p);
        if (idx == UINT32_MAX) return DPS_ERR_OS_RNG;
        s->pos = (uint32_t)(p - s->buf);
        out[i] = idx;
    }
    return DPS_OK;
}
