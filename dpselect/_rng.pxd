# The package CSPRNG as seen from other extension modules. This module owns every per-thread
# secure state and the fork counter, so all modules share one consistent view of them.
from dpselect._csrc cimport dps_rng

cdef class TestState:
    cdef dps_rng *state
    cdef bint busy  # a batch is running on this state (set and cleared with the GIL held)
    cdef readonly bytes seed
    cdef readonly unsigned long long stream

# Start a batch on the state that `test_state` names (None: this thread's secure state).
cdef dps_rng *begin_batch(object test_state) except NULL
# End the batch: consumed bytes are zeroed.
cdef void end_batch(dps_rng *s) noexcept nogil
# After the batch, with the GIL held again: a test state is free for the next batch.
cdef void finish_batch(object test_state) noexcept
# Raise the Python exception for a C status code (returns 0 when rc is DPS_OK).
cdef int check_status(int rc) except -1
