# Declarations of the plain-C kernel in csrc/ (one block per header). Shared by every .pyx.
from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t, int32_t, int64_t

cdef extern from "chacha20.h" nogil:
    void dps_chacha20_quarter_round(uint32_t *a, uint32_t *b, uint32_t *c, uint32_t *d)
    void dps_chacha20_block(const uint32_t *key, uint32_t counter, const uint32_t *nonce, uint8_t *out)
    int dps_chacha20_blocks_engine(int engine, const uint32_t *key, uint32_t counter,
                                   const uint32_t *nonce, uint8_t *out, size_t nblocks)
    const char *dps_chacha20_engine_name()

cdef extern from "csprng.h" nogil:
    enum: DPS_RNG_BUF
    enum: DPS_RNG_SECURE
    enum: DPS_RNG_INSECURE
    enum: DPS_OK
    enum: DPS_ERR_OS_RNG
    enum: DPS_ERR_FORK_INSECURE
    enum: DPS_ERR_NOMEM
    enum: DPS_ERR_BAD_STATE
    enum: DPS_ERR_ACK
    enum: DPS_ERR_DISABLED
    enum: DPS_ERR_BAD_TABLE
    enum: DPS_ERR_NEGATIVE
    uint64_t DPS_ACK_INSECURE
    ctypedef struct dps_rng:
        uint32_t pos
        uint32_t mode
    int dps_rng_fill(dps_rng *s, uint8_t *out, size_t n)
    int dps_rng_uniform_below(dps_rng *s, uint64_t bound, uint64_t *out)
    int dps_rng_reserve(dps_rng *s, uint32_t n)

cdef extern from "rng_thread.h" nogil:
    dps_rng *dps_rng_alloc()
    void dps_rng_free(dps_rng *s)
    dps_rng *dps_rng_thread_state(int *err)
    int dps_rng_begin_batch(dps_rng *s, int expected_mode)
    void dps_rng_end_batch(dps_rng *s)
    void dps_rng_note_fork()
    uint64_t dps_rng_fork_generation()
    int dps_rng_init_test_state(dps_rng *s, const uint8_t *seed, uint64_t stream, uint64_t ack)

cdef extern from "bernoulli.h" nogil:
    int dps_bernoulli_lazy(const uint8_t *r, uint64_t q, uint32_t *used)
    unsigned dps_limb_byte(const uint64_t *q, uint32_t j)
    int dps_bernoulli_rest_wide(const uint8_t *r, const uint64_t *q, uint32_t limbs, uint32_t *used)

cdef extern from "tsgd.h" nogil:
    ctypedef struct dps_weight_table:
        uint32_t m
        uint32_t padded
    uint32_t dps_weight_table_padded(uint32_t m)
    uint32_t dps_weight_table_storage(uint32_t m)
    int dps_weight_table_is_lazy(const dps_weight_table *t)
    int dps_weight_table_attach_direct(dps_weight_table *t, uint8_t *direct)
    int dps_weight_table_init(dps_weight_table *t, const uint64_t *cum, uint32_t m, int32_t *hi)
    int dps_weight_table_sample(const dps_weight_table *t, dps_rng *s, int64_t *out, size_t n)

cdef extern from "select.h" nogil:
    enum: DPS_I8
    enum: DPS_I16
    enum: DPS_I32
    enum: DPS_I64
    enum: DPS_U8
    enum: DPS_U16
    enum: DPS_U32
    enum: DPS_U64
    enum: DPS_KEEP_MAX_LIMBS
    ctypedef struct dps_keep_table:
        uint64_t n_entries
        uint64_t certain_from
        uint32_t limbs
    ctypedef struct dps_release_rule:
        uint64_t k
        uint64_t cut
        uint64_t keep_all
    int dps_find_negative(int dtype, const void *counts, Py_ssize_t count_stride, size_t n, size_t *index)
    int dps_keep_table_init(dps_keep_table *t, const uint64_t *q, uint64_t n, uint32_t limbs,
                            int tail_certain, uint8_t *top)
    void dps_keep_table_attach_top32(dps_keep_table *t, uint32_t *top32)
    int dps_select(dps_rng *s, const dps_keep_table *t, int dtype, const void *counts,
                   Py_ssize_t count_stride, size_t n, uint8_t *keep, Py_ssize_t keep_stride,
                   size_t *bad_index)
    int dps_release(dps_rng *s, const dps_weight_table *noise, const dps_release_rule *rule, int dtype,
                    const void *counts, Py_ssize_t count_stride, size_t n, uint8_t *keep,
                    Py_ssize_t keep_stride, int64_t *noisy, Py_ssize_t noisy_stride,
                    size_t *bad_index)
