"""Known-answer tests of the C kernels against a pure-Python model, byte for byte
(docs/privacy/randomness.md: the generator, the exact Bernoulli, the TSGD sampler).

How the model sees the kernel's randomness: a deterministic test RNG and a *twin* with the same
seed and stream run the same ChaCha20 generator. A fresh state starts with an empty buffer and
every refill serves 4064 bytes, so the twin's successive ``random_bytes(4064)`` calls are exactly
the generator's successive refill buffers. The model below consumes them the way csrc/ does:

* ``reserve(n)``: fewer than n unread bytes left -> the rest is discarded, the next buffer starts;
* select (pi_opt): blocks of 64, ``reserve(len)``, one byte per element, compared with the top
  byte of q[min(n, N-1)] (a count >= N takes N - 1's path whatever its value); ties are then
  finished in index order: ``reserve(w - 1)`` for a w-byte table, fresh bytes against bytes
  1..w-1 of q[min(n, N-1)], stopping at the first difference (all equal: drop), consuming only
  the bytes compared; finally "n >= N" is OR-ed into the decision;
* release (TSGD): blocks of 64, ``reserve(4 len)``, 4 bytes big-endian per element as u_hi,
  index = #{j : cum[j] >> 32 <= u_hi}, flagged on a tie with an entry's top half (or index >= m),
  flagged draws finished in index order as dps_weight_table_finish does;
* every batch call on a test RNG continues the same stream (the buffer persists).

Custom tables (loaded straight into the kernel) and streams planned in advance force the rare
branches: ties at every depth, reserve(7)/reserve(8) at the buffer edge, 64-bit tie-breaking.
"""
from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import pairwise

import numpy as np
import pytest

import dpselect
from dpselect import _kernel, _rng
from dpselect.core.params import validate_params
from dpselect.core.tables import keep_table, tsgd_table
from dpselect.testing import InsecureDeterministicRNG

pytestmark = pytest.mark.filterwarnings("ignore::dpselect.testing.InsecureRNGWarning")

SERVED = 4064  # bytes served per refill
BLOCK = 64
U64 = 2**64
INT64_MAX = 2**63 - 1
LAZY_MIN_TOTAL = U64 - 2**32

INT_DTYPES = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]


# =============================================================================== the model

class ModelStream:
    """The bytes a C state serves, rebuilt from a twin test RNG (see the module docstring)."""

    def __init__(self, twin: InsecureDeterministicRNG) -> None:
        self.twin = twin
        self.buf = b""
        self.pos = SERVED  # a fresh state has an empty buffer
        self.refills = 0
        self.discarded_at_edge = 0  # refills that threw away unread bytes (reserve at the edge)

    def _refill(self) -> None:
        self.buf = self.twin.random_bytes(SERVED)
        assert len(self.buf) == SERVED
        self.pos = 0
        self.refills += 1

    def reserve(self, n: int) -> None:
        if SERVED - self.pos < n:
            if self.pos < SERVED:
                self.discarded_at_edge += 1
            self._refill()

    def peek(self, n: int) -> bytes:
        assert self.pos + n <= SERVED
        return self.buf[self.pos : self.pos + n]

    def take(self, n: int) -> bytes:
        out = self.peek(n)
        self.pos += n
        return out

    def fill(self, n: int) -> bytes:
        """dps_rng_fill: partial buffers are used up, no reserve."""
        out = bytearray()
        while n > 0:
            if self.pos >= SERVED:
                self._refill()
            chunk = min(SERVED - self.pos, n)
            out += self.take(chunk)
            n -= chunk
        return bytes(out)

    # -------- the samplers of csprng.c / bernoulli.h / tsgd.c

    def uniform_below(self, bound: int) -> int:
        """dps_rng_uniform_below, bound in [1, 2^64]."""
        if bound == 1:
            return 0
        bits = (bound - 1).bit_length()
        nbytes = (bits + 7) // 8
        mask = (1 << bits) - 1
        while True:
            self.reserve(nbytes)
            value = int.from_bytes(self.take(nbytes), "big") & mask
            if value < bound:
                return value

    def bernoulli_lazy(self, q: int) -> tuple[bool, int]:
        """reserve(8) then dps_bernoulli_lazy: (keep, bytes used)."""
        self.reserve(8)
        for j in range(8):
            qb = (q >> (56 - 8 * j)) & 0xFF
            b = self.take(1)[0]
            if b != qb:
                return b < qb, j + 1
        return False, 8

    def bernoulli_rest(self, q: int, width: int = 8) -> tuple[bool, int]:
        """reserve(width - 1) then dps_bernoulli_rest_wide: bytes 1..width-1 of the width-byte q
        against fresh bytes."""
        self.reserve(width - 1)
        for j in range(1, width):
            qb = (q >> (8 * (width - 1 - j))) & 0xFF
            b = self.take(1)[0]
            if b != qb:
                return b < qb, j
        return False, width - 1


@dataclass
class WeightModel:
    """The weight table as dps_weight_table sees it."""

    cum: list[int]
    hi: list[int] = field(init=False)

    def __post_init__(self) -> None:
        self.hi = [c >> 32 for c in self.cum]

    @property
    def m(self) -> int:
        return len(self.cum)

    def fast(self, u_hi: int) -> tuple[int, bool]:
        cnt = bisect.bisect_right(self.hi, u_hi)
        flagged = (cnt > 0 and self.hi[cnt - 1] == u_hi) or cnt >= self.m
        return cnt, flagged

    def finish(self, stream: ModelStream, u_hi: int, log: list[str] | None = None) -> int:
        while True:
            cnt, flagged = self.fast(u_hi)
            if not flagged:
                return cnt
            stream.reserve(8)
            if cnt != 0 and self.hi[cnt - 1] == u_hi:
                u = (u_hi << 32) | int.from_bytes(stream.take(4), "big")
                cnt = bisect.bisect_right(self.cum, u)
                if log is not None:
                    log.append("tie")
                if cnt < self.m:
                    return cnt
            if log is not None:
                log.append("reject")
            u_hi = int.from_bytes(stream.take(4), "big")

    def sample(self, stream: ModelStream) -> int:
        """dps_weight_table_sample for one draw."""
        if self.cum[-1] < LAZY_MIN_TOTAL:
            return bisect.bisect_right(self.cum, stream.uniform_below(self.cum[-1]))
        stream.reserve(4)
        return self.finish(stream, int.from_bytes(stream.take(4), "big"))


def _as_u64_list(counts: np.ndarray) -> list[int]:
    values = [int(v) for v in counts]
    assert min(values, default=0) >= 0
    return values


class KeepQ(list):  # type: ignore[type-arg]
    """A keep table as the model sees it: full-width integers and their width in bytes."""

    def __init__(self, values: list[int], width: int) -> None:
        super().__init__(values)
        self.width = width


def model_select(stream: ModelStream, q: list[int], counts: np.ndarray, log: list[int] | None = None,
                 tail_certain: bool = True) -> np.ndarray:
    """The blocked lazy-Bernoulli select of csrc/select.c (log: bytes used by each tie). ``q`` is
    a list of 64-bit entries, or a :class:`KeepQ` of wider ones. Without ``tail_certain``, counts
    >= N keep q[N − 1]'s probability (saturating tables: Laplace, Gaussian)."""
    width = getattr(q, "width", 8)
    n_entries = len(q)
    top = np.array([v >> (8 * width - 8) for v in q], dtype=np.int64)
    values = _as_u64_list(counts)
    idx_top = np.array([min(v, n_entries - 1) for v in values], dtype=np.int64)
    certain = np.array([tail_certain and v >= n_entries for v in values], dtype=bool)
    keep = np.zeros(len(values), dtype=bool)
    for start in range(0, len(values), BLOCK):
        length = min(BLOCK, len(values) - start)
        stream.reserve(length)
        r = np.frombuffer(stream.take(length), dtype=np.uint8).astype(np.int64)
        tops = top[idx_top[start : start + length]]
        keep[start : start + length] = r < tops
        for j in np.nonzero(r == tops)[0]:
            decided, used = stream.bernoulli_rest(q[idx_top[start + j]], width)
            keep[start + j] = decided
            if log is not None:
                log.append(used)
    return keep | certain


def _emit(count: int, idx: int, k: int, cut: int | None = None, keep_all: bool = False) -> tuple[bool, int]:
    """One released value under the rule: kept iff n + X + k > cut (cut = 2k: n + X > k) or
    keep_all; the noisy count n + X, negative allowed, saturating at INT64_MAX."""
    total = min(count + idx, U64 - 1)  # n + X + k, saturating like the kernel
    kept = total > (2 * k if cut is None else cut) or keep_all
    return kept, (min(total - k, INT64_MAX) if kept else 0)


def model_release(
    stream: ModelStream, table: WeightModel, k: int, counts: np.ndarray, log: list[str] | None = None,
    threshold: int | None = None, keep_all: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """The blocked TSGD release of csrc/select.c."""
    size = len(counts)
    hi = np.array(table.hi, dtype=np.uint64)
    index = np.zeros(size, dtype=np.int64)
    for start in range(0, size, BLOCK):
        length = min(BLOCK, size - start)
        stream.reserve(4 * length)
        u_hi = np.frombuffer(stream.take(4 * length), dtype=">u4").astype(np.uint64)
        idx = np.searchsorted(hi, u_hi, side="right")
        prev = hi[np.maximum(idx - 1, 0)]
        flagged = ((idx > 0) & (prev == u_hi)) | (idx >= table.m)
        for j in np.nonzero(flagged)[0]:
            idx[j] = table.finish(stream, int(u_hi[j]), log)
        index[start : start + length] = idx
    values = np.asarray(counts)
    if threshold is not None or keep_all:
        cut = k + (k if threshold is None else threshold)
        out = [_emit(v, int(i), k, cut, keep_all) for v, i in zip(_as_u64_list(values), index)]
        return np.array([o[0] for o in out], dtype=bool), np.array([o[1] for o in out], dtype=np.int64)
    if size and values.min() >= 0 and int(values.max()) < 2**62:  # no saturation: vectorised
        total = values.astype(np.int64) + index  # n + X + k
        keep = total > 2 * k
        return keep, np.where(keep, total - k, 0).astype(np.int64)
    out = [_emit(v, int(i), k) for v, i in zip(_as_u64_list(values), index)]
    return np.array([o[0] for o in out], dtype=bool), np.array([o[1] for o in out], dtype=np.int64)


# =============================================================================== helpers

def _twins(seed: int, stream: int = 0) -> tuple[InsecureDeterministicRNG, ModelStream]:
    return InsecureDeterministicRNG(seed, stream), ModelStream(InsecureDeterministicRNG(seed, stream))


def _params(kappa: int = 1):  # type: ignore[no-untyped-def]
    return validate_params(1.0, 1e-5, kappa)


def _keep_q(kappa: int = 1) -> KeepQ:
    table = keep_table(_params(kappa))
    return KeepQ([table.numerator(n) for n in range(table.length)], 8 * table.limbs)


def _tsgd(kappa: int = 1) -> tuple[WeightModel, int]:
    table = tsgd_table(_params(kappa))
    return WeightModel([int(v) for v in table.cumulative]), table.k


def _counts(seed: int, size: int, dtype: type, high: int) -> np.ndarray:
    """Input data (not noise): counts spread over the interesting range plus the dtype's extremes."""
    gen = np.random.Generator(np.random.PCG64(seed))
    info = np.iinfo(dtype)
    top = min(high, int(info.max))
    counts = gen.integers(0, top + 1, size=size, dtype=np.int64).astype(dtype)
    if size >= 4:
        counts[gen.integers(0, size, 4)] = [0, info.max, info.max - 1, top]
    return counts


# =============================================================================== select

SELECT_SIZES = [1, 63, 64, 65, 130, 4063, 4064, 4065, 9000]


@pytest.mark.parametrize("size", SELECT_SIZES)
@pytest.mark.parametrize("seed", [1, 2])
def test_select_matches_model(size: int, seed: int) -> None:
    rng, model = _twins(seed)
    counts = _counts(seed * 1000 + size, size, np.int64, 30)
    expected = model_select(model, _keep_q(), counts)
    got = dpselect.select(counts, 1.0, 1e-5, rng=rng)
    assert got.dtype == np.bool_
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("dtype", INT_DTYPES + [np.longlong, np.ulonglong, np.intc, np.uintc])
def test_select_matches_model_for_every_integer_dtype(dtype: type) -> None:
    rng, model = _twins(77)
    counts = _counts(5, 5000, dtype, 100)
    expected = model_select(model, _keep_q(), counts)
    np.testing.assert_array_equal(dpselect.select(counts, 1.0, 1e-5, rng=rng), expected)


@pytest.mark.parametrize("kappa", [1, 3])
def test_select_with_max_partitions_contributed(kappa: int) -> None:
    for dtype in (np.int32, np.int64):
        rng, model = _twins(31 + kappa)
        counts = _counts(kappa, 6000, dtype, 80)
        expected = model_select(model, _keep_q(kappa), counts)
        got = dpselect.select(counts, 1.0, 1e-5, max_partitions_contributed=kappa, rng=rng)
        np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("step", [3, -2])
def test_select_strided_counts_and_outputs(step: int) -> None:
    rng, model = _twins(8)
    base = _counts(8, 3 * 3000, np.uint16, 40)
    counts = base[::step]
    assert not counts.flags.c_contiguous
    expected = model_select(model, _keep_q(), np.ascontiguousarray(counts))
    storage = np.zeros(5 * counts.size, dtype=np.bool_)
    slots = slice(None, None, 5) if step > 0 else slice(None, None, -5)
    out = storage[slots]
    result = dpselect.select(counts, 1.0, 1e-5, out=out, rng=rng)
    assert result is out
    np.testing.assert_array_equal(out, expected)
    mask = np.ones(storage.size, bool)
    mask[slots] = False
    assert not storage[mask].any()  # nothing written between the strided slots
    assert np.array_equal(base[::step], counts)  # the caller's counts are not modified


def test_select_two_dimensional_layouts() -> None:
    """Every layout is one batch in C (row-major) order: a C-order grid, the same grid in F order
    (with a C- or F-order ``out``) and a sliced grid give the model's decisions for their
    row-major counts. The stream continues from call to call, each call starting its blocks of 64."""
    q = _keep_q()
    rng, model = _twins(12)
    grid = _counts(12, 120 * 70, np.int64, 30).reshape(120, 70)
    f_grid = np.asfortranarray(grid)
    sliced = grid[:, ::2]
    expected = [model_select(model, q, grid.reshape(-1)).reshape(grid.shape) for _ in range(3)]
    expected_s = model_select(model, q, sliced.reshape(-1)).reshape(sliced.shape)
    np.testing.assert_array_equal(dpselect.select(grid, 1.0, 1e-5, rng=rng), expected[0])
    f_out = np.empty(grid.shape, dtype=np.bool_, order="F")
    np.testing.assert_array_equal(dpselect.select(f_grid, 1.0, 1e-5, out=f_out, rng=rng), expected[1])
    np.testing.assert_array_equal(dpselect.select(f_grid, 1.0, 1e-5, rng=rng), expected[2])
    np.testing.assert_array_equal(dpselect.select(sliced, 1.0, 1e-5, rng=rng), expected_s)


def test_c_and_f_order_give_the_same_decisions_for_one_seed() -> None:
    grid = _counts(13, 64 * 50, np.int64, 30).reshape(64, 50)
    for layout in (np.asfortranarray(grid), grid[:, :], np.repeat(grid, 2, axis=1)[:, ::2]):
        np.testing.assert_array_equal(dpselect.select(layout, 1.0, 1e-5, rng=InsecureDeterministicRNG(13)),
                                      dpselect.select(grid, 1.0, 1e-5, rng=InsecureDeterministicRNG(13)))
        for got, want in zip(dpselect.release(layout, 1.0, 1e-5, rng=InsecureDeterministicRNG(13)),
                             dpselect.release(grid, 1.0, 1e-5, rng=InsecureDeterministicRNG(13))):
            np.testing.assert_array_equal(got, want)


def test_counts_at_and_above_the_table_consume_the_same_bytes_as_n_minus_one() -> None:
    """A count >= N is looked up at N - 1 with "n >= N" OR-ed in afterwards, so batches of counts
    N - 1, N and 10^18 draw exactly the same bytes (the tie path, probability 1/256, included):
    what follows in the stream is identical, and the work done does not reveal certain keeps."""
    n_entries = keep_table(_params()).length
    follow = []
    for value in (n_entries - 1, n_entries, 10**18):
        rng = InsecureDeterministicRNG(4)
        keep = dpselect.select(np.full(5000, value, dtype=np.int64), 1.0, 1e-5, rng=rng)
        if value >= n_entries:
            assert keep.all()
        follow.append(rng.random_bytes(64))
    assert follow[0] == follow[1] == follow[2]
    # ... and the model, with its ties, agrees with the kernel on the shared stream
    rng, model = _twins(4)
    np.testing.assert_array_equal(dpselect.select(np.full(777, 10**6), 1.0, 1e-5, rng=rng),
                                  model_select(model, _keep_q(), np.full(777, 10**6)))
    assert rng.random_bytes(SERVED) == model.fill(SERVED)


@dataclass(frozen=True)
class KeepLayout:
    """A custom keep table q[n] = prefix(n) | L(n): the first ``fixed`` bytes of q[n] are set by
    n (so q is non-decreasing whatever the free low bytes L(n) are), L(n) is chosen by the
    planner. "wide": 65536 entries, q[n] = n·2^48 + L(n) (top byte n >> 8, second byte n & 255);
    "narrow": 127 entries, q[n] = 2(n-1)·2^56 + L(n) (small enough for the kernel's
    vectorised path, which needs N <= 127 and contiguous 64-bit counts)."""

    name: str
    entries: int
    fixed: int  # bytes of q[n] fixed by n

    def prefix(self, n: int) -> int:
        if n == 0:
            return 0
        return n << 48 if self.name == "wide" else (2 * (n - 1)) << 56

    def count_for(self, first_byte: int, second_byte: int) -> int | None:
        """A count whose q has these top bytes (the second only matters for "wide")."""
        if self.name == "wide":
            return max((first_byte << 8) | second_byte, 1)  # q[0] stays 0; n = 1 has top 0 too
        n = first_byte // 2 + 1
        return n if first_byte % 2 == 0 and n < self.entries else None  # even bytes 0..250


WIDE = KeepLayout("wide", 65536, 2)
NARROW = KeepLayout("narrow", 127, 1)


def _planned_select(seed: int, size: int, layout: KeepLayout) -> tuple[list[int], np.ndarray, dict[str, int]]:
    """A custom keep table and counts chosen from a preview of the stream so that about half the
    decisions tie on the first byte, many also on later bytes, some on every byte (the strict
    U < Q then drops), and tie resolutions meet the buffer edge."""
    gen = np.random.Generator(np.random.PCG64(seed))
    preview = ModelStream(InsecureDeterministicRNG(seed))
    low: dict[int, int] = {0: 0}  # L(n), assigned when first needed; q[0] = 0
    free_bytes = 8 - layout.fixed
    counts = np.zeros(size, dtype=np.int64)
    stats = {"ties": 0, "edge": 0, "full_tie": 0}
    depth_seen: set[tuple[int, bool]] = set()

    for start in range(0, size, BLOCK):
        length = min(BLOCK, size - start)
        preview.reserve(length)
        r = preview.take(length)
        forced = []
        for j in range(length):
            choice = gen.random()
            if choice < 0.5 and layout.count_for(r[j], 0) is not None:
                forced.append(True)  # the count is chosen when its tie is resolved
                continue
            forced.append(False)
            if choice < 0.55:
                counts[start + j] = int(gen.integers(layout.entries, 2**40))  # always kept
            else:
                counts[start + j] = int(gen.integers(0, layout.entries))
        # ties are resolved in index order, exactly like the kernel
        for j in range(length):
            n = min(int(counts[start + j]), layout.entries - 1)  # counts >= N take N - 1's path
            if not forced[j] and (layout.prefix(n) >> 56) != r[j]:
                continue
            if SERVED - preview.pos < 7:
                stats["edge"] += 1
            preview.reserve(7)
            fresh = preview.peek(7)
            if forced[j]:
                wanted = fresh[0] if gen.random() < 0.4 else int(gen.integers(0, 256))
                n = layout.count_for(r[j], wanted)
                counts[start + j] = n
            if n not in low:
                # q bytes fixed..7 (the free ones) copy the fresh bytes up to a random depth
                tail = bytearray(gen.integers(0, 256, free_bytes, dtype=np.uint8).tobytes())
                fixed_match = layout.fixed == 1 or (n & 0xFF) == fresh[0]
                if fixed_match:
                    depth = int(gen.integers(0, free_bytes + 1))
                    offset = layout.fixed - 1  # fresh[i] meets q byte i + 1
                    tail[:depth] = fresh[offset : offset + depth]
                low[n] = int.from_bytes(tail, "big")
            decided, used = preview.bernoulli_rest(layout.prefix(n) | low[n])
            depth_seen.add((used, decided))
            stats["ties"] += 1
            stats["full_tie"] += used == 7 and not decided
    q = [layout.prefix(n) | low.get(n, int(gen.integers(0, 2 ** (8 * free_bytes)))) for n in range(layout.entries)]
    q[0] = 0
    stats["depths"] = len(depth_seen)
    return q, counts, stats


@pytest.mark.parametrize(
    "seed,layout",
    [pytest.param(21, WIDE, marks=pytest.mark.slow), pytest.param(22, WIDE, marks=pytest.mark.slow), (26, NARROW),
     (29, NARROW)],
    ids=["wide", "wide2", "narrow", "narrow2"],
)
def test_select_forced_ties_at_every_depth_and_buffer_edge(seed: int, layout: KeepLayout) -> None:
    q, counts, stats = _planned_select(seed, 16000, layout)
    assert all(a <= b for a, b in pairwise(q)) and q[0] == 0
    # the plan really exercises the rare branches
    assert stats["ties"] > 3000 and stats["edge"] >= 1 and stats["full_tie"] >= 1
    assert stats["depths"] >= 10  # (bytes used, outcome) pairs over depths 1..7
    model = ModelStream(InsecureDeterministicRNG(seed))
    tie_log: list[int] = []
    expected = model_select(model, q, counts, tie_log)
    assert len(tie_log) == stats["ties"] and model.discarded_at_edge >= 1
    handle = _kernel.KeepTableHandle(np.array(q, dtype=np.uint64))
    for dtype in (np.int64, np.uint64):  # both 64-bit kinds (the vectorised path takes them)
        rng = InsecureDeterministicRNG(seed)
        model = ModelStream(InsecureDeterministicRNG(seed))
        expected = model_select(model, q, counts)
        out = np.zeros(counts.size, dtype=np.bool_)
        _kernel.select_into(counts.astype(dtype), handle, out, rng._test_state)
        np.testing.assert_array_equal(out, expected)
        # and the stream goes on where the model says it does
        assert rng.random_bytes(100) == model.fill(100)


def test_select_forced_ties_through_the_public_api_and_strided() -> None:
    """The same planned stream through dpselect-level plumbing is not possible (custom table), so
    run the narrow table on strided int64 counts: the portable loop must agree as well."""
    q, counts, _ = _planned_select(25, 6000, NARROW)
    handle = _kernel.KeepTableHandle(np.array(q, dtype=np.uint64))
    storage = np.zeros(2 * counts.size, dtype=np.int64)
    storage[::2] = counts
    model = ModelStream(InsecureDeterministicRNG(25))
    expected = model_select(model, q, counts)
    rng = InsecureDeterministicRNG(25)
    out = np.zeros(counts.size, dtype=np.bool_)
    _kernel.select_into(storage[::2], handle, out, rng._test_state)
    np.testing.assert_array_equal(out, expected)


# =============================================================================== release

RELEASE_SIZES = [1, 63, 64, 65, 1015, 1016, 1017, 5000]


@pytest.mark.parametrize("size", RELEASE_SIZES)
@pytest.mark.parametrize("kappa", [1, 3])
def test_release_matches_model(size: int, kappa: int) -> None:
    table, k = _tsgd(kappa)
    rng, model = _twins(100 + size, stream=kappa)
    counts = _counts(size + kappa, size, np.int64, 4 * k)
    keep_expected, noisy_expected = model_release(model, table, k, counts)
    keep, noisy = dpselect.release(counts, 1.0, 1e-5, max_partitions_contributed=kappa, rng=rng)
    np.testing.assert_array_equal(keep, keep_expected)
    np.testing.assert_array_equal(noisy, noisy_expected)
    assert 0 < keep_expected.sum() < size or size < 100


@pytest.mark.slow
@pytest.mark.parametrize("kappa", [1, 3])
def test_release_matches_model_on_a_million_draws(kappa: int) -> None:
    """10^6 draws reach every one of the 65536 16-bit cells of U (the kernel's one-load lookup
    for small tables) with overwhelming probability, so each cell's index is checked."""
    table, k = _tsgd(kappa)
    rng, model = _twins(300 + kappa)
    counts = np.full(1_000_000, 2 * k + 1, dtype=np.int64)  # always published: noisy - n = X
    keep_expected, noisy_expected = model_release(model, table, k, counts)
    keep, noisy = dpselect.release(counts, 1.0, 1e-5, max_partitions_contributed=kappa, rng=rng)
    assert keep.all() and keep_expected.all()
    np.testing.assert_array_equal(noisy, noisy_expected)
    assert rng.random_bytes(32) == model.fill(32)


@pytest.mark.slow
def test_select_matches_model_on_a_million_draws() -> None:
    rng, model = _twins(310)
    counts = _counts(310, 1_000_000, np.int64, 30)
    expected = model_select(model, _keep_q(), counts)
    np.testing.assert_array_equal(dpselect.select(counts, 1.0, 1e-5, rng=rng), expected)
    assert rng.random_bytes(32) == model.fill(32)


@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_release_matches_model_for_every_integer_dtype(dtype: type) -> None:
    """Including each dtype's maximum: noisy counts saturate at INT64_MAX (uint64 near 2^64)."""
    table, k = _tsgd()
    rng, model = _twins(55)
    counts = _counts(9, 3000, dtype, 60)
    keep_expected, noisy_expected = model_release(model, table, k, counts)
    keep, noisy = dpselect.release(counts, 1.0, 1e-5, rng=rng)
    np.testing.assert_array_equal(keep, keep_expected)
    np.testing.assert_array_equal(noisy, noisy_expected)


def test_release_saturates_noisy_counts_at_int64_max() -> None:
    table, k = _tsgd()
    rng, model = _twins(56)
    counts = np.array([2**64 - 1, 2**64 - 2, 2**63 + 5, 2**63 - 1, 2**63 - 2, 2**62], dtype=np.uint64)
    keep_expected, noisy_expected = model_release(model, table, k, counts)
    keep, noisy = dpselect.release(counts, 1.0, 1e-5, rng=rng)
    assert keep.all() and keep_expected.all()
    np.testing.assert_array_equal(noisy, noisy_expected)
    assert (noisy[:3] == INT64_MAX).all()


def test_release_strided_counts_and_outputs() -> None:
    table, k = _tsgd()
    rng, model = _twins(57)
    base = _counts(57, 3 * 2500, np.int16, 50)
    counts = base[::3]
    keep_expected, noisy_expected = model_release(model, table, k, np.ascontiguousarray(counts))
    keep_store = np.zeros(2 * counts.size, dtype=np.bool_)
    noisy_store = np.full(3 * counts.size, -7, dtype=np.int64)
    keep_out, noisy_out = keep_store[::2], noisy_store[::-3]
    keep, noisy = dpselect.release(counts, 1.0, 1e-5, out=(keep_out, noisy_out), rng=rng)
    assert keep is keep_out and noisy is noisy_out
    np.testing.assert_array_equal(keep_out, keep_expected)
    np.testing.assert_array_equal(noisy_out, noisy_expected)
    untouched = np.ones(noisy_store.size, bool)
    untouched[::-3] = False
    assert (noisy_store[untouched] == -7).all() and not keep_store[1::2].any()


def _planned_weight_table(seed: int, words_from: int, fraction: float, max_entries: int, crowd: int) -> WeightModel:
    """A lazy weight table (total 2^64 - 1) whose top halves are words of the coming stream, so
    that draws tie with entries often; some top halves appear twice (with different low halves),
    and the first draw's top-byte cell is filled up to ``crowd`` entries (the kernel's search
    strategy depends on how many boundaries share a top byte)."""
    gen = np.random.Generator(np.random.PCG64(seed))
    preview = ModelStream(InsecureDeterministicRNG(seed))
    words: list[int] = []
    for _ in range(words_from):
        preview.reserve(SERVED)
        words.extend(int(w) for w in np.frombuffer(preview.take(SERVED), dtype=">u4"))
    first = words[0]  # the very first draw's u_hi: at least one tie is certain
    chosen = sorted({w for w in words if gen.random() < fraction} - {first, 0xFFFFFFFF})
    picked = [first] + [int(w) for w in gen.permutation(chosen)[: max_entries // 2]]
    entries: set[int] = set()
    for w in picked:
        entries.add((w << 32) | int(gen.integers(1, 2**32)))
        if gen.random() < 0.3:
            entries.add((w << 32) | int(gen.integers(1, 2**32)))
    cell = first >> 24
    while sum(1 for e in entries if e >> 56 == cell) < crowd:
        entries.add((cell << 56) | int(gen.integers(1, 2**44)))  # low in the cell: most draws
        # that land in it lie above every crowded boundary, so a miscount shows
    entries.discard(0)
    cum = sorted(entries)
    cum.append(U64 - 1)
    if len(cum) % 2 == 0:  # the release needs m = 2k + 1
        cum.insert(-1, U64 - 2)
    return WeightModel(cum)


@pytest.mark.parametrize(
    "seed,words_from,fraction,max_entries,crowd,min_ties",
    [
        (61, 3, 0.3, 4000, 0, 100),  # a thousand entries
        (62, 4, 0.2, 4000, 44, 100),
        (66, 2, 0.3, 700, 0, 50),  # a few per top byte
        (63, 1, 0.03, 40, 0, 1),  # small tables, spread or with one crowded cell
        (64, 1, 0.03, 40, 8, 1),
        (68, 1, 0.03, 40, 9, 1),
        (69, 1, 0.03, 40, 16, 1),
        (70, 1, 0.03, 40, 17, 1),
        (65, 1, 0.03, 40, 25, 1),
    ],
    ids=["large", "large-crowd44", "medium", "small", "small-crowd8", "small-crowd9", "small-crowd16",
         "small-crowd17", "small-crowd25"],
)
def test_release_forced_ties_with_planned_table(
    seed: int, words_from: int, fraction: float, max_entries: int, crowd: int, min_ties: int
) -> None:
    table = _planned_weight_table(seed, words_from, fraction, max_entries, crowd)
    k = (table.m - 1) // 2
    counts = _counts(seed, 2500, np.int64, 4 * k)
    model = ModelStream(InsecureDeterministicRNG(seed))
    log: list[str] = []
    keep_expected, noisy_expected = model_release(model, table, k, counts, log)
    assert log.count("tie") >= min_ties
    handle = _kernel.WeightTableHandle(np.array(table.cum, dtype=np.uint64))
    keep = np.zeros(counts.size, dtype=np.bool_)
    noisy = np.zeros(counts.size, dtype=np.int64)
    rng = InsecureDeterministicRNG(seed)
    _kernel.release_into(counts, handle, k, keep, noisy, rng._test_state)
    np.testing.assert_array_equal(keep, keep_expected)
    np.testing.assert_array_equal(noisy, noisy_expected)
    assert rng.random_bytes(64) == model.fill(64)


def test_sample_cumulative_forced_ties_with_planned_table() -> None:
    """The single-draw sampler (dps_weight_table_sample) on a table built to tie often."""
    table = _planned_weight_table(67, 2, 0.3, 2000, 20)
    model = ModelStream(InsecureDeterministicRNG(67))
    log: list[str] = []
    expected = []
    for _ in range(3000):
        model.reserve(4)
        expected.append(table.finish(model, int.from_bytes(model.take(4), "big"), log))
    assert log.count("tie") >= 50
    rng = InsecureDeterministicRNG(67)
    got = rng.sample_cumulative(np.array(table.cum, dtype=np.uint64), 3000)
    assert got.tolist() == expected
    assert rng.random_bytes(64) == model.fill(64)


# =============================================================================== other samplers

def test_bernoulli_fixed_forced_prefix_equals_full_compare() -> None:
    """q agrees with the coming U on its first d bytes (d = 0..8) and then differs either way:
    the lazy result must equal the full 64-bit ``U < q`` and use exactly d + 1 bytes (8 if equal)."""
    gen = np.random.Generator(np.random.PCG64(3))
    preview = ModelStream(InsecureDeterministicRNG(71))
    qs, expected = [], []
    depths: set[tuple[int, bool]] = set()
    full_ties = 0
    for i in range(6000):
        preview.reserve(8)
        u_bytes = bytearray(preview.peek(8))
        depth = i % 9
        q_bytes = bytearray(u_bytes)
        if depth < 8:
            b = u_bytes[depth]
            up = b < 255 and (b == 0 or gen.random() < 0.5)
            q_bytes[depth] = int(gen.integers(b + 1, 256)) if up else int(gen.integers(0, b))
            q_bytes[depth + 1 :] = gen.integers(0, 256, 7 - depth, dtype=np.uint8).tobytes()
        q = int.from_bytes(q_bytes, "big")
        keep, used = preview.bernoulli_lazy(q)
        assert keep == (int.from_bytes(u_bytes, "big") < q) and used == min(depth + 1, 8)
        depths.add((used, keep))
        full_ties += q == int.from_bytes(u_bytes, "big")
        qs.append(q)
        expected.append(keep)
    assert len(depths) == 16 and full_ties == 6000 // 9  # bytes used 1..8, both outcomes
    rng = InsecureDeterministicRNG(71)
    got = _rng.bernoulli_fixed(np.array(qs, dtype=np.uint64), rng._test_state)
    np.testing.assert_array_equal(got, np.array(expected))
    assert rng.random_bytes(40) == preview.fill(40)


def _exhaustive_plan(seed: int, a: int, b: int) -> tuple[np.ndarray, np.ndarray, list[tuple[int, int]]]:
    """A q array for bernoulli_fixed in which Q = (a, b, 0, ..., 0) meets every first byte x != a
    and, after x = a, every second byte y; other slots hold filler q's that use one byte.
    Returns (q array, expected keeps, for each slot: (-1, x) / (a, y) / (-2, 0) for filler)."""
    q_main = (a << 56) | (b << 48)
    q_fill = ((a ^ 0x80) << 56)
    stream = ModelStream(InsecureDeterministicRNG(seed))
    qs: list[np.ndarray] = []
    keeps: list[np.ndarray] = []
    slots: list[tuple[int, int]] = []
    first_seen: set[int] = set()
    second_seen: set[int] = set()
    last_start = SERVED - 8  # reserve(8): a decision may start at most here
    while len(first_seen) < 255 or len(second_seen) < 256:
        stream.reserve(SERVED)  # a new buffer; the model stream and the kernel agree on refills
        buf = np.frombuffer(stream.buf, dtype=np.uint8)
        pos = 0
        a_positions = [int(p) for p in np.nonzero(buf[: last_start + 1] == a)[0]]
        for p in a_positions + [last_start + 1]:
            if p < pos:
                continue
            run = buf[pos:p].astype(np.int64)  # one-byte decisions with Q, all first bytes != a
            qs.append(np.full(run.size, q_main, dtype=np.uint64))
            keeps.append(run < a)
            slots.extend((-1, int(x)) for x in run)
            first_seen.update(int(x) for x in run)
            if p > last_start:
                break
            y = int(buf[p + 1])
            if y in second_seen:
                qs.append(np.array([q_fill], dtype=np.uint64))
                keeps.append(np.array([a < (a ^ 0x80)]))
                slots.append((-2, 0))
                pos = p + 1
                continue
            second_seen.add(y)
            stream.pos = p
            keep, used = stream.bernoulli_lazy(q_main)
            qs.append(np.array([q_main], dtype=np.uint64))
            keeps.append(np.array([keep]))
            slots.append((a, y))
            pos = p + used
        stream.pos = SERVED  # the rest of this buffer is discarded by the next reserve(8)
    return np.concatenate(qs), np.concatenate(keeps), slots


@pytest.mark.slow
@pytest.mark.parametrize("a,b", [(0x12, 0x34), (0x00, 0x00), (0xFF, 0xFF), (0x80, 0x01)])
def test_bernoulli_fixed_exhaustive_16_bit(a: int, b: int) -> None:
    """Q = (a·256 + b)·2^48: over all 65536 two-byte prefixes of U the C decisions keep exactly
    a·256 + b of them, so P(keep) = Q / 2^64 exactly (exhaustive at a small width).
    A first byte x != a decides alone (it stands for its 256 prefixes); x = a is enumerated over
    every second byte y."""
    seed = 1000 + a * 256 + b
    qs, expected, slots = _exhaustive_plan(seed, a, b)
    rng = InsecureDeterministicRNG(seed)
    got = _rng.bernoulli_fixed(qs, rng._test_state)
    np.testing.assert_array_equal(got, expected)
    row: dict[int, bool] = {}
    cell: dict[int, bool] = {}
    for (kind, value), keep in zip(slots, got):
        if kind == -1:
            assert row.setdefault(value, bool(keep)) == bool(keep)  # same x, same decision
        elif kind >= 0:
            cell[value] = bool(keep)
    assert sorted(row) == [x for x in range(256) if x != a]
    assert sorted(cell) == list(range(256))
    kept_prefixes = 256 * sum(row.values()) + sum(cell.values())
    assert kept_prefixes == a * 256 + b


def _model_lazy_on(u_bytes: bytes, q: int) -> bool:
    """The model's lazy decision on crafted bytes U (8 bytes, most significant first)."""
    stream = ModelStream(None)  # type: ignore[arg-type]  # never refills: 8 bytes are there
    stream.buf, stream.pos = u_bytes + bytes(SERVED - 8), 0
    return stream.bernoulli_lazy(q)[0]


@pytest.mark.parametrize("prefix", [0, 1, 0x00FF, 0x0100, 0x8000, 0xABCD, 0xFFFF])
def test_model_lazy_compare_keeps_exactly_q_prefixes_at_16_bits(prefix: int) -> None:
    """The pure-Python model over all 65536 two-byte prefixes of U (each completed with random
    low bytes, which must not matter when Q's low 48 bits are zero) keeps exactly Q / 2^48."""
    gen = np.random.Generator(np.random.PCG64(prefix))
    q = prefix << 48
    rest = gen.integers(0, 256, (256, 6), dtype=np.uint8)
    kept = 0
    for x in range(256):
        if x != prefix >> 8:  # the first byte decides alone: it stands for 256 prefixes
            kept += 256 * _model_lazy_on(bytes([x, int(rest[x, 0])]) + bytes(rest[x]), q)
            continue
        for y in range(256):
            kept += _model_lazy_on(bytes([x, y]) + bytes(rest[y]), q)
    assert kept == prefix


def test_sampler_sequence_continues_one_stream() -> None:
    """Every batch call on one test RNG continues the same stream; the model follows each call."""
    rng, model = _twins(90)
    q = _keep_q()
    table, k = _tsgd()
    gen = np.random.Generator(np.random.PCG64(90))
    counts_a = gen.integers(0, 30, 700)
    counts_b = gen.integers(0, 40, 333)
    small_cum = [3, 10, 11, 40]
    lazy_cum = [2**62, 2**63, 2**63 + 5, U64 - 1]
    fixed_q = [int(v) for v in gen.integers(0, 2**63, 50, dtype=np.int64)] + [0, 2**64 - 1]

    steps: list[tuple[Callable[[], object], Callable[[], object]]] = [
        (lambda: dpselect.select(counts_a, 1.0, 1e-5, rng=rng).tolist(),
         lambda: model_select(model, q, counts_a).tolist()),
        (lambda: rng.random_bytes(123), lambda: model.fill(123)),
        (lambda: [a.tolist() for a in dpselect.release(counts_b, 1.0, 1e-5, rng=rng)],
         lambda: [a.tolist() for a in model_release(model, table, k, counts_b)]),
        (lambda: rng.uniform_below_array(1000, 40).tolist(),
         lambda: [model.uniform_below(1000) for _ in range(40)]),
        (lambda: rng.uniform_below_array(2**64, 5).tolist(),
         lambda: [model.uniform_below(2**64) for _ in range(5)]),
        (lambda: rng.uniform_below_array(1, 5).tolist(), lambda: [0] * 5),
        (lambda: [rng.uniform_below(3 * 2**40 + 1) for _ in range(20)],
         lambda: [model.uniform_below(3 * 2**40 + 1) for _ in range(20)]),
        (lambda: rng.sample_cumulative(np.array(small_cum, dtype=np.uint64), 30).tolist(),
         lambda: [WeightModel(small_cum).sample(model) for _ in range(30)]),
        (lambda: rng.sample_cumulative(np.array(lazy_cum, dtype=np.uint64), 30).tolist(),
         lambda: [WeightModel(lazy_cum).sample(model) for _ in range(30)]),
        (lambda: _rng.bernoulli_fixed(np.array(fixed_q, dtype=np.uint64), rng._test_state).tolist(),
         lambda: [model.bernoulli_lazy(v)[0] for v in fixed_q]),
        (lambda: rng.random_bytes(9000), lambda: model.fill(9000)),
        (lambda: dpselect.select(counts_b, 1.0, 1e-5, rng=rng).tolist(),
         lambda: model_select(model, q, counts_b).tolist()),
    ]
    for number, (kernel_step, model_step) in enumerate(steps):
        assert kernel_step() == model_step(), f"step {number}"
    assert model.refills >= 3


def test_uniform_below_big_bound_model() -> None:
    """Bounds above 2^64: rejection on whole bytes of random_bytes, big-endian, masked."""
    rng, model = _twins(91)
    bound = 5 * 2**70 + 3
    bits = (bound - 1).bit_length()
    expected = []
    for _ in range(50):
        while True:
            value = int.from_bytes(model.fill((bits + 7) // 8), "big") & ((1 << bits) - 1)
            if value < bound:
                expected.append(value)
                break
    assert [rng.uniform_below(bound) for _ in range(50)] == expected


# =============================================================================== input validation

def test_negative_count_draws_no_randomness() -> None:
    """A negative count is rejected *before* any randomness is drawn, so a
    failed call leaves the stream where it was."""
    rng, model = _twins(92)
    with pytest.raises(ValueError, match="negative"):
        dpselect.select(np.array([5, 3, -1, 7], dtype=np.int64), 1.0, 1e-5, rng=rng)
    with pytest.raises(ValueError, match="negative"):
        dpselect.release(np.array([5, 3, 7, -9], dtype=np.int8), 1.0, 1e-5, rng=rng)
    assert rng.random_bytes(32) == model.fill(32)


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.int64])
def test_negative_count_names_the_index_and_writes_nothing(dtype: type) -> None:
    rng, model = _twins(93)
    counts = np.array([30] * 100 + [-2] + [30] * 50 + [-1], dtype=dtype)
    out = np.ones(counts.size, dtype=np.bool_)
    with pytest.raises(ValueError, match=r"counts\[100\] = -2"):
        dpselect.select(counts, 1.0, 1e-5, out=out, rng=rng)
    assert out.all()  # nothing was written
    keep = np.ones(counts.size, dtype=np.bool_)
    noisy = np.full(counts.size, 5, dtype=np.int64)
    with pytest.raises(ValueError, match=r"counts\[100\] = -2"):
        dpselect.release(counts, 1.0, 1e-5, out=(keep, noisy), rng=rng)
    assert keep.all() and (noisy == 5).all()
    grid = np.full((3, 4), 7, dtype=dtype)
    grid[2, 1] = -3
    with pytest.raises(ValueError, match=r"counts\[2, 1\] = -3"):
        dpselect.select(grid, 1.0, 1e-5, rng=rng)
    assert rng.random_bytes(16) == model.fill(16)


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64])
def test_kernel_negative_count_zeroes_its_outputs(dtype: type) -> None:
    """The C kernel's own guard (callers that skip the pre-scan): NegativeCountError with the
    first offending index, and every output zeroed so no decision escapes."""
    counts = np.array([100] * 130 + [-1] + [100] * 70 + [-5], dtype=dtype)  # 100 > N: always kept
    rng = InsecureDeterministicRNG(94)
    out = np.ones(counts.size, dtype=np.bool_)
    handle = _kernel.KeepTableHandle(keep_table(_params()).words)
    with pytest.raises(_kernel.NegativeCountError) as info:
        _kernel.select_into(counts, handle, out, rng._test_state)
    assert info.value.index == 130 and not out.any()
    table = tsgd_table(_params())
    weights = _kernel.WeightTableHandle(table.cumulative)
    keep = np.ones(counts.size, dtype=np.bool_)
    noisy = np.ones(counts.size, dtype=np.int64)
    with pytest.raises(_kernel.NegativeCountError) as info:
        _kernel.release_into(counts, weights, table.k, keep, noisy, rng._test_state)
    assert info.value.index == 130 and not keep.any() and not noisy.any()
    assert _kernel.first_negative(counts) == 130
    assert _kernel.first_negative(np.abs(counts)) == -1


def test_kernel_rejects_bad_tables() -> None:
    with pytest.raises(ValueError):
        _kernel.KeepTableHandle(np.array([1, 2, 3], dtype=np.uint64))  # q[0] != 0
    with pytest.raises(ValueError):
        _kernel.KeepTableHandle(np.array([0, 5, 4], dtype=np.uint64))  # not monotone
    with pytest.raises(ValueError):
        _kernel.WeightTableHandle(np.array([1, 1, U64 - 1], dtype=np.uint64))  # not increasing
    with pytest.raises(ValueError):
        _kernel.WeightTableHandle(np.array([1, 2, 3], dtype=np.uint64))  # total too small for lazy
    handle = _kernel.WeightTableHandle(np.array([1, 2, U64 - 1], dtype=np.uint64))
    with pytest.raises(ValueError, match="2k\\+1"):
        _kernel.release_into(np.zeros(3, np.int64), handle, 2, np.zeros(3, bool), np.zeros(3, np.int64))


# =============================================================================== saturating tables, rules

@pytest.mark.parametrize("name", ["laplace", "gaussian"])
def test_saturating_tables_match_the_model(name):
    """Laplace and Gaussian tables never reach 1: counts >= N keep the last entry's probability,
    with nothing OR-ed in. Byte for byte against the model, counts spanning the table's end."""
    strategy = dpselect.make_strategy(name, epsilon=1.0, delta=1e-5)
    table = strategy.table
    q = KeepQ([table.numerator(n) for n in range(table.length)], 8 * table.limbs)
    counts = _counts(31, 9000, np.int64, table.length + 40)
    rng, model = _twins(31)
    expected = model_select(model, q, counts, tail_certain=False)
    np.testing.assert_array_equal(dpselect.select(counts, 1.0, 1e-5, strategy=name, rng=rng), expected)
    assert rng.random_bytes(64) == model.fill(64)


@pytest.mark.parametrize("threshold,keep_all", [(-11, True), (-5, False), (0, False), (30, False)])
def test_release_rules_match_the_model(threshold, keep_all):
    """The public release (keep every value) and the mixed release's analyst threshold t."""
    table, k = _tsgd()
    handle = _kernel.WeightTableHandle(np.array(table.cum, dtype=np.uint64))
    counts = _counts(32, 3000, np.int64, 60)
    rng, model = _twins(32)
    expected = model_release(model, table, k, counts, threshold=threshold, keep_all=keep_all)
    keep = np.empty(counts.size, bool)
    noisy = np.empty(counts.size, np.int64)
    _kernel.release_into(counts, handle, k, keep, noisy, rng._test_state, threshold, keep_all)
    np.testing.assert_array_equal(keep, expected[0])
    np.testing.assert_array_equal(noisy, expected[1])
    if keep_all:
        assert keep.all() and (noisy[counts == 0] <= 0).any()  # an absent key's noisy count can be negative
