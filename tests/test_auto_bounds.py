"""κ and L∞ chosen privately ("auto"): the histograms' sensitivity, the rule, the budget share,
that nothing but the DP step reads the data, the statements, and bad values refused."""
from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dpselect
from dpselect.aggregation import aggregate as aggregate_module
from dpselect.aggregation.plan import AUTO_BOUNDS_WEIGHT, CONTRIBUTION_BOUNDS, plan_aggregate
from dpselect.ingest import auto_bounds
from dpselect.ingest.auto_bounds import (
    MAX_AUTO_KAPPA,
    N_BINS,
    bin_of,
    choose,
    choose_bounds,
    histogram,
    one_pair_per_user,
    pair_counts,
)
from dpselect.testing import InsecureDeterministicRNG


def _rows(per_user: list[list[tuple[int, int]]]) -> tuple[np.ndarray, np.ndarray]:
    """Encoded rows from each user's list of (partition, rows)."""
    users, parts = [], []
    for u, pairs in enumerate(per_user):
        for p, r in pairs:
            users += [u] * r
            parts += [p] * r
    return np.asarray(users, dtype=np.uint32), np.asarray(parts, dtype=np.uint32)


def _kappa_histogram(users: np.ndarray, parts: np.ndarray, n_users: int) -> np.ndarray:
    per_user, _, _, _ = pair_counts(users, parts, n_users)
    return histogram(per_user[per_user > 0])


def _linf_histogram(users: np.ndarray, parts: np.ndarray, n_users: int) -> np.ndarray:
    """The L∞ histogram with each pair's tag a fixed function of the pair (what one draw of the
    CSPRNG's tags is, conditioned on): each user's choice reads only its own pairs."""
    _, pair_users, pair_parts, rows = pair_counts(users, parts, n_users)
    tags = (pair_users * 7919 + pair_parts * 104729 + (pair_users * pair_parts) % 13) % (1 << 62)
    return histogram(one_pair_per_user(pair_users, rows, tags))


def _broken_linf_histogram(users: np.ndarray, parts: np.ndarray, n_users: int) -> np.ndarray:
    """A deliberately broken copy: every pair of every user (up to κ of them), sensitivity 1 claimed."""
    _, _, _, rows = pair_counts(users, parts, n_users)
    return histogram(rows)


def _l1_sensitivity(histogram_of: Any, per_user: list[list[tuple[int, int]]]) -> int:
    """max over users u of || h(D) − h(D without u) ||_1, exactly."""
    users, parts = _rows(per_user)
    full = histogram_of(users, parts, len(per_user))
    worst = 0
    for u in range(len(per_user)):
        without = [pairs if v != u else [] for v, pairs in enumerate(per_user)]
        h = histogram_of(*_rows(without), len(per_user))
        worst = max(worst, int(np.abs(full - h).sum()))
    return worst


_users = st.lists(st.lists(st.tuples(st.integers(0, 40), st.integers(1, 9)), min_size=1, max_size=12,
                           unique_by=lambda t: t[0]), min_size=1, max_size=8)


@settings(max_examples=60, deadline=None)
@given(_users)
def test_a_user_changes_exactly_one_bin_by_one(per_user: list[list[tuple[int, int]]]) -> None:
    for histogram_of in (_kappa_histogram, _linf_histogram):
        users, parts = _rows(per_user)
        full = histogram_of(users, parts, len(per_user))
        assert full.shape == (N_BINS,) and int(full.sum()) == len(per_user)
        for u in range(len(per_user)):
            without = [pairs if v != u else [] for v, pairs in enumerate(per_user)]
            diff = full - histogram_of(*_rows(without), len(per_user))
            assert sorted(diff.tolist()) == [0] * (N_BINS - 1) + [1]


def test_the_exact_sensitivity_check_catches_a_broken_copy() -> None:
    per_user = [[(0, 3), (1, 1), (2, 5)], [(1, 2)], [(0, 1), (3, 7), (4, 2), (5, 9)]]
    assert _l1_sensitivity(_kappa_histogram, per_user) == 1
    assert _l1_sensitivity(_linf_histogram, per_user) == 1
    assert _l1_sensitivity(_broken_linf_histogram, per_user) > 1  # all κ pairs: sensitivity κ, not 1


def test_bins_are_powers_of_two() -> None:
    counts = np.array([1, 2, 3, 4, 5, 8, 9, 16, 17, 2**31, 2**31 + 1, 2**32])
    assert bin_of(counts).tolist() == [0, 1, 2, 2, 3, 3, 4, 4, 5, 31, 32, 32]
    with pytest.raises(ValueError):
        bin_of(np.array([0]))


def test_the_histogram_noise_is_discrete_laplace_of_scale_one_over_epsilon() -> None:
    noise = auto_bounds.noise_for(Fraction(1, 8))
    assert (noise.scale, noise.sensitivity, noise.max_partitions_contributed) == (8, 1, 1)
    assert noise.epsilon == Fraction(1, 8)
    draws = auto_bounds.noisy_histogram(np.zeros(N_BINS, dtype=np.int64), Fraction(1, 8),
                                        InsecureDeterministicRNG(3))
    assert draws.dtype == np.int64 and draws.shape == (N_BINS,) and np.any(draws != 0)


def test_the_rule_reads_the_noisy_histogram() -> None:
    h = np.zeros(N_BINS, dtype=np.int64)
    h[[0, 2, 4]] = [10, 30, 60]  # cumulative 10, 40, 100
    assert choose(h, quantile=Fraction(1, 10), cap=2**16) == 1
    assert choose(h, quantile=Fraction(2, 5), cap=2**16) == 4
    assert choose(h, quantile=Fraction(41, 100), cap=2**16) == 16
    assert choose(h, quantile=Fraction(41, 100), cap=8) == 8
    h[1] = -5  # a negative noisy bin is read as drawn: cumulative 10, 5, 35, 35, 95
    assert choose(h, quantile=Fraction(2, 5), cap=2**16) == 16
    assert choose(h, quantile=Fraction(1, 3), cap=2**16) == 4
    assert choose(np.full(N_BINS, -3, dtype=np.int64), quantile=Fraction(1, 2), cap=16) == 1
    # A noisy total within three standard deviations of the noise on it, 3·t·√(2·bins), gives 1.
    small = np.zeros(9, dtype=np.int64)
    small[5] = 127  # 3·10·√18 = 127.3
    assert choose(small, quantile=Fraction(1, 2), cap=256, scale=Fraction(10)) == 1
    small[5] = 128
    assert choose(small, quantile=Fraction(1, 2), cap=256, scale=Fraction(10)) == 32


def test_the_chosen_values_are_the_rule_on_the_noisy_histograms(monkeypatch: pytest.MonkeyPatch) -> None:
    injected = iter([np.eye(N_BINS, dtype=np.int64)[5] * 7000, np.eye(N_BINS, dtype=np.int64)[3] * 2000])
    monkeypatch.setattr(auto_bounds, "noisy_histogram", lambda exact, eps, rng: next(injected))
    users, parts = _rows([[(0, 1)], [(1, 2), (2, 1)]])
    found = choose_bounds(users, parts, 2, epsilon=Fraction(1), kappa_cap=256, linf_cap=2**16,
                          rng=InsecureDeterministicRNG(1))
    assert (found.kappa, found.linf) == (32, 8)  # bins 5 and 3, whatever the data


def test_every_user_with_three_keys_gives_kappa_four() -> None:
    n = 2000
    users = np.repeat(np.arange(n, dtype=np.uint32), 3)
    parts = (np.arange(3 * n, dtype=np.uint32) * 7) % 50
    picks = [choose_bounds(users, parts, n, epsilon=Fraction(1, 10), kappa_cap=256, linf_cap=None,
                           rng=None).kappa for _ in range(30)]
    # Noise of scale 10 against 2000 users in bin {3, 4}: another pick has probability < e^-50.
    assert picks == [4] * 30


def _frame(n_users: int, keys_per_user: int, rows: int = 1, seed: int = 0) -> pd.DataFrame:
    gen = np.random.default_rng(seed)  # the input data only
    users = np.repeat(np.arange(n_users), keys_per_user * rows)
    keys = np.concatenate([np.repeat(gen.choice(20, keys_per_user, replace=False), rows) for _ in range(n_users)])
    return pd.DataFrame({"user": users, "key": keys, "value": gen.uniform(0, 10, users.size)})


_METRICS = {"n": dpselect.count(), "users": dpselect.count_distinct_units(),
            "total": dpselect.sum("value", bounds=(0, 10))}


def _aggregate(data: pd.DataFrame, **kwargs: Any) -> Any:
    args: dict[str, Any] = dict(privacy_unit="user", by="key", metrics=_METRICS, epsilon=1, delta=1e-6,
                                max_partitions_contributed="auto", max_contributions_per_partition="auto",
                                rng=InsecureDeterministicRNG(7))
    args.update(kwargs)
    return dpselect.aggregate(data, **args)


def test_the_component_spends_exactly_the_share() -> None:
    result = _aggregate(_frame(400, 3))
    first = result.guarantee.components[0]
    plan = plan_aggregate(privacy_unit="user", by="key", metrics=_METRICS, epsilon=1, delta=1e-6,
                          max_partitions_contributed="auto", max_contributions_per_partition="auto", public=False)
    share = plan.shares[CONTRIBUTION_BOUNDS][0]
    # The selection weighs one per metric (3), each metric 1 (3).
    assert share == Fraction(1) * AUTO_BOUNDS_WEIGHT / (3 + 3 + AUTO_BOUNDS_WEIGHT)
    assert first.what.startswith("contribution bounds") and first.kind == "contribution bounds"
    assert first.epsilon_exact == share and first.delta_exact == 0
    assert result.guarantee.epsilon_exact <= 1


@pytest.mark.slow
def test_results_and_statements_show_the_chosen_values() -> None:
    result = _aggregate(_frame(600, 3, rows=2))
    g = result.guarantee
    assert (g.kappa, g.linf) == (4, 2)
    assert f"contribution bounds (κ = {g.kappa} and L∞ = {g.linf} chosen privately)" in str(g)
    assert f"each user to {g.kappa} partition(s) and {g.linf} row(s)" in str(g)
    assert g.as_dict()["max_partitions_contributed"] == 4
    assert "κ = 4" in repr(g) and "private κ/L∞" in repr(g)
    assert result.report().kappa == 4
    only_linf = _aggregate(_frame(600, 3, rows=2), max_partitions_contributed=3)
    assert only_linf.guarantee.kappa == 3
    assert "(L∞ = 2 chosen privately)" in str(only_linf.guarantee)


def test_auto_reads_no_data_for_the_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    plans = []
    real = aggregate_module.choose_for_plan

    def spy(plan: Any, *args: Any) -> Any:
        plans.append(plan)
        return real(plan, *args)

    monkeypatch.setattr(aggregate_module, "choose_for_plan", spy)
    _aggregate(_frame(300, 2))
    _aggregate(_frame(50, 5, rows=3, seed=1))
    assert len(plans) == 2
    a, b = plans
    # The caps: κ at its maximum; L∞ halved from its maximum until the sum's noise (Gaussian, the
    # choice at κ = 256) fits the exact sampler, from the parameters alone.
    assert (a.kappa, a.linf) == (b.kappa, b.linf)
    assert a.kappa == MAX_AUTO_KAPPA and 1 <= a.linf <= auto_bounds.MAX_AUTO_LINF
    assert a.shares == b.shares and a.auto_kappa and a.auto_linf
    assert a.strategy is not None and b.strategy is not None
    assert a.strategy.max_partitions_contributed == b.strategy.max_partitions_contributed == MAX_AUTO_KAPPA


def test_the_caps_are_lowered_until_every_noise_fits() -> None:
    # A sum whose grid units are huge: κ·L∞·units/ε must stay below 2^56.
    metrics = {"s": dpselect.sum("value", bounds=(0, 2**40))}
    plan = plan_aggregate(privacy_unit="user", by="key", metrics=metrics, epsilon=1e-6, delta=1e-6,
                          max_partitions_contributed="auto", max_contributions_per_partition="auto", public=True)
    assert plan.kappa * plan.linf < MAX_AUTO_KAPPA * auto_bounds.MAX_AUTO_LINF
    # Even κ = L∞ = 1 does not fit (neither law: the choice is Gaussian here, far less noisy at this
    # tiny epsilon, and its sigma is beyond the sampler): refused before any data.
    with pytest.raises(ValueError, match="noise scale|sigma above 2\\*\\*49"):
        plan_aggregate(privacy_unit="user", by="key", metrics=metrics, epsilon=1e-12, delta=1e-6,
                       max_partitions_contributed="auto", max_contributions_per_partition="auto", public=True,
                       precision_bits=52)


@pytest.mark.parametrize("bad", ["Auto", "AUTO", "x", 0.5, 1.5, 0])
@pytest.mark.parametrize("name", ["max_partitions_contributed", "max_contributions_per_partition"])
def test_bad_values_are_refused_naming_the_parameter(name: str, bad: object) -> None:
    with pytest.raises((ValueError, TypeError), match=name):
        _aggregate(_frame(10, 1), **{name: bad})


@pytest.mark.parametrize("bad", ["Auto", "x", 0.5])
def test_select_partitions_refuses_bad_values(bad: object) -> None:
    with pytest.raises((ValueError, TypeError), match="max_partitions_contributed"):
        dpselect.select_partitions(_frame(10, 1), privacy_unit="user", by="key", epsilon=1, delta=1e-6,
                                   max_partitions_contributed=bad)


def test_auto_needs_a_strategy_by_name() -> None:
    strategy = dpselect.make_strategy("pi_opt", epsilon=0.5, delta=1e-6, max_partitions_contributed=2)
    with pytest.raises(ValueError, match="strategy"):
        _aggregate(_frame(10, 1), strategy=strategy)
    with pytest.raises(ValueError, match="max_partitions_contributed='auto'"):
        dpselect.select_partitions(_frame(10, 1), privacy_unit="user", by="key", max_partitions_contributed="auto",
                                   strategy=strategy)
    with pytest.raises(ValueError, match="max_partitions_contributed='auto'"):
        dpselect.select_partitions(_frame(10, 1), privacy_unit="user", by="key", epsilon=1, delta=1e-6,
                                   max_partitions_contributed="auto", strategy="dp_sips")


@pytest.mark.parametrize("strategy", ["release", "pi_opt"])
@pytest.mark.parametrize("string_users", [False, True])
def test_select_partitions_chooses_kappa(strategy: str, string_users: bool) -> None:
    data = _frame(3000, 3)
    if string_users:
        data["user"] = data["user"].astype(str)
    out = dpselect.select_partitions(data, privacy_unit="user", by="key", epsilon=1, delta=1e-6, strategy=strategy,
                                     max_partitions_contributed="auto", counts=strategy == "release",
                                     rng=InsecureDeterministicRNG(5))
    statement = out.attrs["dpselect_guarantee"]
    assert "with κ = 4 chosen privately" in statement and "at most 4 partition(s)" in statement
    assert "(1, " in statement  # the two steps compose to the whole epsilon
    assert len(out) == 20


def test_select_partitions_auto_report_and_budget() -> None:
    budget = dpselect.Budget(epsilon=2, delta=1e-5)
    out, report = dpselect.select_partitions(_frame(3000, 3), privacy_unit="user", by="key", epsilon=1, delta=1e-6,
                                             max_partitions_contributed="auto", report=True, budget=budget,
                                             rng=InsecureDeterministicRNG(5))
    assert report.kappa == 4 and len(out) == 20
    assert budget.spent[0] == 1


def test_the_hindsight_figures_are_exact() -> None:
    # c_u = 1, 2, 4; rows per pair 1, (3, 1), (2, 2, 2, 2).
    per_pairs = [[(0, 1)], [(0, 3), (1, 1)], [(0, 2), (1, 2), (2, 2), (3, 2)]]
    users, parts = _rows(per_pairs)
    per_user, pair_users, pair_parts, rows = pair_counts(users, parts, 3)
    figures = auto_bounds.hindsight(per_user, pair_users, pair_parts, rows, 4, kappa=2)
    assert figures.pairs_kept[0] == pytest.approx(3 / 7)  # κ = 1: 1 + 2·1/2 + 4·1/4 of 7 pairs
    assert figures.pairs_kept[2] == 1.0  # κ = 4 keeps every pair
    assert figures.expected_users[0].tolist() == pytest.approx([1 + 1 / 2 + 1 / 4, 1 / 2 + 1 / 4, 1 / 4, 1 / 4])
    # L∞ = 1 at κ = 2: 1 + (1 + 1) + 4·(1·1/2) = 5 of 13 rows.
    assert figures.rows_kept[0] == pytest.approx(5 / 13)
    assert "NOT DP" in repr(figures)


@pytest.mark.slow
def test_the_report_names_the_best_kappa_in_hindsight() -> None:
    result = _aggregate(_frame(3000, 3), epsilon=2)
    report = result.report()
    assert [k for k, _, _ in report.hindsight_kappa] == [1, 2, 4, 8, 16]
    assert report.best_kappa is not None
    text = str(report)
    assert "In hindsight (exact, NOT DP" in text and f"κ = {report.best_kappa}" in text
    assert report.as_dict()["hindsight"]["best_kappa"] == report.best_kappa
    assert "In hindsight (exact, NOT DP)" in report._repr_html_()
    fixed = _aggregate(_frame(3000, 3), max_partitions_contributed=4, max_contributions_per_partition=1).report()
    assert fixed.hindsight_kappa == () and "In hindsight" not in str(fixed)


def _cli(*args: str) -> int:
    from dpselect import cli

    return cli.main(list(args))


@pytest.mark.slow
def test_the_cli_accepts_auto(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "in.csv"
    _frame(2000, 3).to_csv(data, index=False)
    out = tmp_path / "out.csv"
    assert _cli("aggregate", str(data), "-u", "user", "-b", "key", "--epsilon", "1", "--delta", "1e-6",
                "--max-partitions-contributed", "auto", "--max-contributions-per-partition", "auto", "-m", "users",
                "-o", str(out), "--quiet") == 0
    sidecar = (tmp_path / "out.csv.guarantee.json").read_text(encoding="utf-8")
    assert "chosen privately" in sidecar and '"max_partitions_contributed": 4' in sidecar
    selected = tmp_path / "sel.csv"
    assert _cli("select", str(data), "-u", "user", "-b", "key", "--epsilon", "1", "--delta", "1e-6",
                "--max-partitions-contributed", "auto", "-o", str(selected)) == 0
    assert "with κ = 4 chosen privately" in capsys.readouterr().err


@pytest.mark.parametrize("flag", ["--max-partitions-contributed", "--max-contributions-per-partition"])
@pytest.mark.parametrize("bad", ["Auto", "0.5", "x"])
def test_the_cli_refuses_bad_bounds_naming_the_flag(tmp_path: Any, capsys: pytest.CaptureFixture[str], flag: str,
                                                    bad: str) -> None:
    data = tmp_path / "in.csv"
    _frame(5, 1).to_csv(data, index=False)
    other = "--max-contributions-per-partition" if flag == "--max-partitions-contributed" else \
        "--max-partitions-contributed"
    with pytest.raises(SystemExit) as exc:
        _cli("aggregate", str(data), "-u", "user", "-b", "key", "--epsilon", "1", "--delta", "1e-6", flag, bad,
             other, "2", "-m", "users", "-o", str(tmp_path / "o.csv"))
    assert exc.value.code == 2
    assert f"argument {flag}: expected a positive integer or 'auto'" in capsys.readouterr().err


def test_spark_refuses_bad_auto_bounds_as_on_one_machine_before_reading_the_frame() -> None:
    # The frame is None: the refusal comes from the plan, before the frame (or Spark) is touched.
    pytest.importorskip("pyspark")
    from dpselect import spark

    with pytest.raises(TypeError, match="max_partitions_contributed.*the one string accepted is 'auto'"):
        spark.select_partitions(None, privacy_unit="user", by="key", epsilon=1, delta=1e-6,
                                max_partitions_contributed="Auto")
    with pytest.raises(ValueError, match="max_partitions_contributed='auto' needs a count-based strategy by name"):
        spark.select_partitions(None, privacy_unit="user", by="key", max_partitions_contributed="auto",
                                strategy=dpselect.make_strategy("pi_opt", epsilon=1, delta=1e-6))
    with pytest.raises(TypeError, match="max_contributions_per_partition.*the one string accepted is 'auto'"):
        spark.aggregate(None, privacy_unit="user", by="key", metrics=_METRICS, epsilon=1, delta=1e-6,
                        max_partitions_contributed=2, max_contributions_per_partition="AUTO")
    with pytest.raises(ValueError, match="max_partitions_contributed='auto' needs the strategy by name"):
        spark.aggregate(None, privacy_unit="user", by="key", metrics=_METRICS, epsilon=1, delta=1e-6,
                        max_partitions_contributed="auto", max_contributions_per_partition=1,
                        strategy=dpselect.make_strategy("pi_opt", epsilon=0.5, delta=1e-6))


def test_too_few_users_to_read_anything_gives_the_smallest_bounds() -> None:
    result = _aggregate(_frame(5, 3, rows=4))
    assert (result.guarantee.kappa, result.guarantee.linf) == (1, 1)


def test_kappa_is_read_lower_when_keys_are_selected(monkeypatch: pytest.MonkeyPatch) -> None:
    # With public partitions the bounds are those of least estimated error instead
    # (tests/test_auto_rule.py).
    h = np.zeros(9, dtype=np.int64)
    h[[1, 3]] = [3000, 7000]  # the 1/4-quantile is in bin 1 (κ = 2), the 3/4-quantile in bin 3 (κ = 8)
    monkeypatch.setattr(auto_bounds, "noisy_histogram", lambda exact, eps, rng: h.copy())
    result = _aggregate(_frame(300, 3), max_contributions_per_partition=1)
    assert result.guarantee.kappa == 2
    assert "0.25-quantile" in result.guarantee.components[0].statement
