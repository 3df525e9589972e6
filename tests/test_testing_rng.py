"""dpselect.testing.InsecureDeterministicRNG (docs/privacy/randomness.md, "The test generator").

Explicit, per object, loud and impossible by default: refused without the environment variable,
warns on every use, reproducible per (seed, stream), and tags every result as NOT DP. The C
initialiser refuses to start a deterministic state without its acknowledgement constant.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import dpselect
from dpselect import _rng
from dpselect.rng import SecureRNG
from dpselect.testing import ALLOW_ENV, InsecureDeterministicRNG, InsecureRNGWarning

# Tests that count warnings override this filter locally (pytest.warns / catch_warnings).
pytestmark = pytest.mark.filterwarnings("ignore::dpselect.testing.InsecureRNGWarning")

COUNTS = np.array([0, 1, 5, 11, 12, 15, 30, 1000], dtype=np.int64)


def _quiet(seed: int | bytes = 1, stream: int = 0) -> InsecureDeterministicRNG:
    return InsecureDeterministicRNG(seed, stream=stream)


# ------------------------------------------------------------------ impossible by default

def test_refused_without_the_environment_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ALLOW_ENV, raising=False)
    assert ALLOW_ENV == "DPSELECT_ALLOW_INSECURE_RNG"
    with pytest.raises(RuntimeError, match=ALLOW_ENV):
        InsecureDeterministicRNG(1)


@pytest.mark.parametrize("value", ["0", "", "true", "yes", " 1"])
def test_refused_unless_the_variable_is_exactly_one(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv(ALLOW_ENV, value)
    with pytest.raises(RuntimeError, match=ALLOW_ENV):
        InsecureDeterministicRNG(1)


def test_allowed_with_the_environment_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ALLOW_ENV, "1")
    assert isinstance(InsecureDeterministicRNG(1), InsecureDeterministicRNG)


def test_c_init_refuses_a_wrong_acknowledgement() -> None:
    with pytest.raises(ValueError, match="acknowledgement"):
        _rng.TestState(bytes(32), 0, 123)
    with pytest.raises(ValueError, match="acknowledgement"):
        _rng.TestState(bytes(32), 0, _rng.ACK_INSECURE ^ 1)
    state = _rng.TestState(bytes(32), 0, _rng.ACK_INSECURE)  # the right constant works
    assert len(_rng.random_bytes(8, state)) == 8


def test_c_init_rejects_a_short_seed() -> None:
    with pytest.raises(ValueError, match="32 bytes"):
        _rng.TestState(bytes(16), 0, _rng.ACK_INSECURE)


# ------------------------------------------------------------------ loud

def test_warns_on_every_use() -> None:
    rng = _quiet()
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        for _ in range(2):
            rng.random_bytes(4)
    assert sum(issubclass(w.category, InsecureRNGWarning) for w in record) == 2


def test_each_object_and_each_call_warns_from_the_same_line() -> None:
    """No once-per-object or once-per-process latch: two objects used from one line both warn."""
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        for seed in (1, 2):
            _quiet(seed).random_bytes(1)
    assert sum(issubclass(w.category, InsecureRNGWarning) for w in record) == 2
    assert all("NOT DP" in str(w.message) for w in record if issubclass(w.category, InsecureRNGWarning))


@pytest.mark.parametrize(
    "use",
    [
        lambda r: r.random_bytes(3),
        lambda r: r.uniform_below(10),
        lambda r: r.uniform_below(2**80),
        lambda r: r.uniform_below_array(10, 3),
        lambda r: r.bernoulli(1, 3),
        lambda r: r.sample_cumulative(np.array([1, 2, 3], dtype=np.uint64), 4),
        lambda r: dpselect.select(COUNTS, 1.0, 1e-5, rng=r),
        lambda r: dpselect.release(COUNTS, 1.0, 1e-5, rng=r),
        lambda r: dpselect.make_strategy("pi_opt", epsilon=1, delta=1e-5).apply(COUNTS, rng=r),
    ],
    ids=["random_bytes", "uniform_below", "uniform_below_big", "uniform_below_array", "bernoulli",
         "sample_cumulative", "select", "release", "strategy_apply"],
)
def test_every_entry_point_warns(use) -> None:  # type: ignore[no-untyped-def]
    rng = _quiet()
    with pytest.warns(InsecureRNGWarning, match="NOT DP"):
        use(rng)


def test_secure_rng_does_not_warn() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", InsecureRNGWarning)
        SecureRNG().random_bytes(8)
        dpselect.select(COUNTS, 1.0, 1e-5)


# ------------------------------------------------------------------ reproducible per (seed, stream)


@pytest.mark.parametrize("seed", [0, 1, 2**100, bytes(range(32))])
def test_same_seed_and_stream_give_the_same_bytes(seed: int | bytes) -> None:
    a, b = _quiet(seed, 4), _quiet(seed, 4)
    assert a.random_bytes(5000) == b.random_bytes(5000)
    assert a.uniform_below_array(1000, 50).tolist() == b.uniform_below_array(1000, 50).tolist()
    assert np.array_equal(dpselect.select(COUNTS, 1.0, 1e-5, rng=a), dpselect.select(COUNTS, 1.0, 1e-5, rng=b))


def test_different_stream_or_seed_gives_different_bytes() -> None:
    base = _quiet(1, 0).random_bytes(64)
    assert _quiet(1, 1).random_bytes(64) != base
    assert _quiet(1, 2**32).random_bytes(64) != base  # the high word of the stream counts too
    assert _quiet(2, 0).random_bytes(64) != base
    assert _quiet(bytes(32), 0).random_bytes(64) != _quiet(0, 0).random_bytes(64)


def test_stream_continues_across_calls() -> None:
    a, b = _quiet(9), _quiet(9)
    joined = a.random_bytes(10) + a.random_bytes(5000) + a.random_bytes(1)
    assert joined == b.random_bytes(5011)


def test_a_test_stream_is_not_a_secure_one() -> None:
    """Seed 32 zero bytes: the test nonce ("TEST") keeps it apart from a zero-nonce keystream."""
    rng = _quiet(bytes(32), 0)
    assert rng.random_bytes(64) != _rng.chacha20_blocks(bytes(32), 0, bytes(12), 2, 0)[32:96]


@pytest.mark.parametrize(
    "seed,stream,error",
    [
        (-1, 0, ValueError),
        (b"short", 0, ValueError),
        (1.5, 0, TypeError),
        (True, 0, TypeError),
        ("seed", 0, TypeError),
        (1, -1, ValueError),
        (1, 2**64, ValueError),
        (1, 1.0, ValueError),
    ],
)
def test_bad_seed_or_stream(seed: object, stream: object, error: type) -> None:
    with pytest.raises(error, match="seed" if error is TypeError or stream == 0 else "stream"):
        InsecureDeterministicRNG(seed, stream=stream)  # type: ignore[arg-type]


# ------------------------------------------------------------------ tagged NOT DP

def test_privacy_flag_and_repr() -> None:
    rng = _quiet()
    assert rng.privacy_guaranteed is False
    assert "NOT DP" in repr(rng)
    assert SecureRNG().privacy_guaranteed is True
    assert "NOT DP" not in repr(SecureRNG())


@pytest.mark.parametrize("strategy", ["pi_opt", "release"])
def test_results_computed_with_the_test_rng_are_tagged(strategy: str) -> None:
    built = dpselect.make_strategy(strategy, epsilon=1, delta=1e-5)
    tagged = built.apply(COUNTS, rng=_quiet())
    assert tagged.privacy_guaranteed is False
    assert "NOT DP" in repr(tagged)
    secure = built.apply(COUNTS)
    assert secure.privacy_guaranteed is True
    assert "NOT DP" not in repr(secure)


def test_pi_opt_strategy_with_test_rng_is_not_private() -> None:
    counts = np.arange(40)
    result = dpselect.make_strategy("pi_opt", epsilon=1, delta=1e-5).apply(counts, rng=_quiet(5))
    assert result.privacy_guaranteed is False
