"""Regressions for the findings of the independent review: each test failed before its fix."""
from __future__ import annotations

import threading

import numpy as np
import pytest

import dpselect
from dpselect.testing import InsecureDeterministicRNG

pytestmark = pytest.mark.filterwarnings("ignore::dpselect.testing.InsecureRNGWarning")


@pytest.mark.parametrize("dtype", [">i4", ">i8", ">u2", ">u8"])
def test_big_endian_counts_are_read_as_their_values(dtype):
    """A big-endian 1 read natively is 2^24 or more: it would always be kept."""
    ones = np.ones(20000, dtype=dtype)
    assert dpselect.select(ones, 1.0, 1e-5).mean() < 0.01
    keep, noisy = dpselect.release(ones, 1.0, 1e-5)
    assert keep.mean() < 0.01  # P(1 + X > 11) = P(X = 11) ~ 8e-6; read natively it would be 1
    assert (noisy[~keep] == 0).all()
    big = np.full(100, 1000, dtype=dtype)
    keep, noisy = dpselect.release(big, 1.0, 1e-5)
    assert keep.all() and (np.abs(noisy - 1000) <= 11).all()


def test_kernel_refuses_foreign_byte_order_directly():
    from dpselect import _kernel
    from dpselect.core.params import validate_params
    from dpselect.core.tables import keep_table

    handle = _kernel.KeepTableHandle(keep_table(validate_params(1.0, 1e-5)).words)
    with pytest.raises(TypeError, match="byte order"):
        _kernel.select_into(np.ones(8, dtype=">i8"), handle, np.empty(8, bool))


def test_shared_test_rng_across_threads_raises_instead_of_crashing():
    rng = InsecureDeterministicRNG(5)
    counts = np.full(200_000, 12, dtype=np.int64)
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(20):
                dpselect.select(counts, 1.0, 1e-5, rng=rng)
        except RuntimeError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, daemon=True) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a thread did not finish (deadlock)"
    assert all("already in use" in str(e) for e in errors)
    # the generator is still usable afterwards, from one thread
    assert dpselect.select(counts[:100], 1.0, 1e-5, rng=rng).shape == (100,)


def test_huge_epsilon_builds_quickly_and_keeps_at_one_user_rarely():
    strategy = dpselect.make_strategy("pi_opt", epsilon=5000.0, delta=1e-5)
    # one user: probability delta; two: 1 - 2^-64 (pi_opt is 1 - e^-eps(1 - 2 delta)); three: certain
    assert strategy.count_cap == 3
    assert dpselect.keep_probability(1, 5000.0, 1e-5) == pytest.approx(1e-5, rel=1e-9)
    assert dpselect.crossovers(5000.0, 1e-5).k >= 1


def _frames():
    return pytest.importorskip("pandas"), pytest.importorskip("pyarrow")


def test_pandas_categorical_output_lists_only_released_keys():
    pd, _ = _frames()
    rows = [(f"u{i}", "popular") for i in range(500)] + [("lonely", "secret_rare_partition")]
    df = pd.DataFrame(rows, columns=["user", "key"])
    df["key"] = df["key"].astype(pd.CategoricalDtype(["popular", "secret_rare_partition"]))
    out = dpselect.select_partitions(df, privacy_unit="user", by="key", epsilon=1.0, delta=1e-5)
    assert list(out["key"]) == ["popular"]
    assert list(out["key"].cat.categories) == ["popular"]


def test_polars_enum_output_lists_only_released_keys():
    pl = pytest.importorskip("polars")
    pytest.importorskip("pyarrow")
    enum = pl.Enum(["popular", "secret_rare_partition"])
    df = pl.DataFrame(
        {"user": [f"u{i}" for i in range(500)] + ["lonely"],
         "key": ["popular"] * 500 + ["secret_rare_partition"]},
        schema={"user": pl.String, "key": enum},
    )
    out = dpselect.select_partitions(df, privacy_unit="user", by="key", epsilon=1.0, delta=1e-5)
    assert out["key"].to_list() == ["popular"]
    assert out.schema["key"].categories.to_list() == ["popular"]


def test_float_key_order_does_not_depend_on_row_order():
    pd, _ = _frames()
    users = [f"u{i}" for i in range(200)]
    a = pd.DataFrame({"user": users * 2, "key": [0.0] * 200 + [-0.0] * 200})
    b = pd.DataFrame({"user": users * 2, "key": [-0.0] * 200 + [0.0] * 200})
    out_a = dpselect.select_partitions(a, privacy_unit="user", by="key", epsilon=1.0, delta=1e-5)
    out_b = dpselect.select_partitions(b, privacy_unit="user", by="key", epsilon=1.0, delta=1e-5)
    assert len(out_a) == len(out_b) == 1  # one key: 0.0 and -0.0 are equal
    assert np.signbit(out_a["key"].to_numpy()).tolist() == np.signbit(out_b["key"].to_numpy()).tolist()
