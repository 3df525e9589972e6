#include "tsgd.h"

uint32_t dps_weight_table_padded(uint32_t m) {
    uint32_t p = 8; /* the scan reads whole groups of 8 */
    while (p < m) p <<= 1;
    return p;
}

/* Room past the padded table for a guided window that starts near its end. */
#define WINDOW_SLACK 16

uint32_t dps_weight_table_storage(uint32_t m) { return dps_weight_table_padded(m) + WINDOW_SLACK; }

int dps_weight_table_init(dps_weight_table *t, const uint64_t *cum, uint32_t m, int32_t *hi) {
    if (m == 0) return DPS_ERR_BAD_TABLE;
    if (cum[0] == 0) return DPS_ERR_BAD_TABLE;  /* every outcome has weight >= 1 */
    for (uint32_t j = 1; j < m; j++)
        if (cum[j] <= cum[j - 1]) return DPS_ERR_BAD_TABLE;
    t->cum = cum;
    t->m = m;
    t->padded = dps_weight_table_padded(m);
    t->hi = hi;
    for (uint32_t j = 0; j < t->padded + WINDOW_SLACK; j++)
        hi[j] = j < m ? dps_bias32((uint32_t)(cum[j] >> 32)) : INT32_MAX;
    /* guide[b]: entries whose top half lies below byte-cell b; the window must cover every
     * boundary inside one cell, i.e. guide[b+1] - guide[b] entries. */
    uint32_t j = 0, widest = 0;
    for (uint32_t b = 0; b < 256; b++) {
        while (j < m && (uint32_t)(cum[j] >> 56) < b) j++;
        t->guide[b] = j;
    }
    for (uint32_t b = 0; b < 256; b++) {
        uint32_t next = b < 255 ? t->guide[b + 1] : m;
        if (next - t->guide[b] > widest) widest = next - t->guide[b];
    }
    t->window = widest <= 8 ? 8 : widest <= 16 ? 16 : 0;
    t->direct = NULL;
    return DPS_OK;
}

int dps_weight_table_attach_direct(dps_weight_table *t, uint8_t *direct) {
    if (t->m >= DPS_DIRECT_FLAG) return DPS_ERR_BAD_TABLE;
    /* cell c covers u_hi in [c * 2^16, (c+1) * 2^16): its index is #{j : hi[j] < c * 2^16}
     * unless some boundary falls inside the cell, or the whole cell is at or above S. */
    uint32_t below = 0; /* #{j : top16(cum[j]) < c} */
    for (uint32_t c = 0; c < DPS_DIRECT_CELLS; c++) {
        while (below < t->m && (uint32_t)(t->cum[below] >> 48) < c) below++;
        int boundary_inside = below < t->m && (uint32_t)(t->cum[below] >> 48) == c;
        direct[c] = (uint8_t)(boundary_inside || below >= t->m ? DPS_DIRECT_FLAG : below);
    }
    t->direct = direct;
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

int dps_weight_table_finish(const dps_weight_table *t, dps_rng *s, uint32_t u_hi, uint32_t *index) {
    for (;;) {
        uint32_t flagged;
        uint32_t cnt = dps_weight_table_fast_exact(t, u_hi, &flagged);
        if (!flagged) { *index = cnt; return DPS_OK; }
        int rc = dps_rng_reserve(s, 8);
        if (rc != DPS_OK) return rc;
        const uint8_t *p = s->buf + s->pos;
        if (cnt != 0 && t->hi[cnt - 1] == dps_bias32(u_hi)) {
            /* tie on the top half: the low half decides, exactly */
            uint64_t u = ((uint64_t)u_hi << 32) | dps_load_be(p, 4);
            s->pos += 4;
            cnt = dps_weight_table_count_le64(t, u);
            if (cnt < t->m) { *index = cnt; return DPS_OK; }
            p += 4;
        }
        /* U >= S: reject and draw a new U (depends on the random bytes only) */
        u_hi = (uint32_t)dps_load_be(p, 4);
        s->pos = (uint32_t)(p + 4 - s->buf);
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
        int rc = dps_rng_reserve(s, 4);
        if (rc != DPS_OK) return rc;
        uint32_t u_hi = (uint32_t)dps_load_be(s->buf + s->pos, 4);
        s->pos += 4;
        uint32_t idx;
        rc = dps_weight_table_finish(t, s, u_hi, &idx);
        if (rc != DPS_OK) return rc;
        out[i] = idx;
    }
    return DPS_OK;
}
