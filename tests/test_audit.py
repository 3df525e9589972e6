"""dpselect.audit: every shipped mechanism passes its certificate, empirical and side-channel
audits, and deliberately broken copies are caught (docs/privacy/audit.md).

False alarms. Every empirical and side-channel audit below runs with ``false_alarm=1e-6``: a
mechanism that keeps its promise is reported refuted or flagged with probability at most 1e-6
per audit (a union bound over its Clopper–Pearson or DKW bounds; the exact byte-for-byte
comparisons cannot false-alarm). This file runs fewer than 90 such audits, so a correct
package fails it with probability below 1e-4. The broken copies are built so that the audit's
expected lower bound on ε is far above the claim (each test states the margin), so they are
caught with overwhelming probability; the tests are not flaky either way.

The broken copies live here, never in shipped code: a TSGD release whose threshold is k − 1
(visible to the certificate, and hidden from it), a pi_opt table scaled up by 3 %, raw rows
whose null privacy units are merged into one user, a strategy that draws extra random bytes for
large counts, a release whose output schema follows the data, and contribution bounding that
lets a user keep one partition more than κ.
"""
from __future__ import annotations

import functools
import json
import math
import types
import warnings
from fractions import Fraction

import numpy as np
import pytest

import dpselect
from dpselect import audit
from dpselect.audit._stats import (
    binomial_lower_tail,
    binomial_upper_tail,
    clopper_pearson_lower,
    clopper_pearson_upper,
    epsilon_lower_bound,
)
from dpselect.audit.certify import composed_delta, threshold_release_delta
from dpselect.mechanisms import PiOptSelection, TSGDRelease
from dpselect.core.params import validate_params
from dpselect.rng import resolve_rng
from dpselect.core.tables import KeepTable, read_only, to_words
from dpselect.core.verify import keep_numerators, release_delta

pytestmark = pytest.mark.filterwarnings("ignore::dpselect.testing.InsecureRNGWarning")

FALSE_ALARM = 1e-6


# ------------------------------------------------------------------ statistics

def test_clopper_pearson_bounds_match_scipy_and_are_never_less_conservative():
    stats = pytest.importorskip("scipy.stats")
    for n in (7, 1000, 10**5, 5 * 10**6):
        for k in sorted({0, 1, 3, n // 1000, n // 10, n // 2, n - 1, n}):
            for alpha in (1e-3, 1e-7, 1e-10):
                lo, hi = clopper_pearson_lower(k, n, alpha), clopper_pearson_upper(k, n, alpha)
                if k > 0:
                    ref = stats.beta.ppf(alpha, k, n - k + 1)
                    assert ref * (1 - 2e-8) <= lo <= ref, (k, n, alpha)
                if k < n:
                    ref = stats.beta.isf(alpha, k + 1, n - k)
                    assert ref <= hi <= ref * (1 + 2e-8), (k, n, alpha)
    assert binomial_upper_tail(10, 3, 0.2) == pytest.approx(stats.binom.sf(2, 10, 0.2), rel=1e-12)
    assert binomial_lower_tail(10, 3, 0.2) == pytest.approx(stats.binom.cdf(3, 10, 0.2), rel=1e-12)


def test_epsilon_lower_bound_conventions():
    assert epsilon_lower_bound(0.5, 0.1, 0.0) == pytest.approx(math.log(5))
    assert epsilon_lower_bound(0.05, 0.1, 0.1) == 0.0  # p1 below delta: no evidence
    assert epsilon_lower_bound(0.2, 0.0, 0.1) == math.inf  # D' never has the event


def test_independent_composition_and_release_delta_agree_with_the_package():
    for kappa in (1, 2, 7, 5000):
        p = validate_params(1.0, 1e-5, kappa)
        mine, exact = composed_delta(p.partition_delta, kappa)
        assert mine <= p.compose(p.partition_delta) * (1 + Fraction(1, 2**200))
        assert exact == (kappa <= 4096)
    table = dpselect.make_strategy("release", epsilon=0.7, delta=1e-6).table
    weights = list(table.weights)
    assert threshold_release_delta(weights, table.total, table.k, table.partition_epsilon, table.k, False) == \
        release_delta(weights, table.total, table.k, table.partition_epsilon)


# ------------------------------------------------------------------ every shipped mechanism passes

@functools.cache
def quick_report(name: str) -> audit.AuditReport:
    """What CI's ``dpselect audit`` runs for one shipped mechanism: ``run_all(quick=True)``
    restricted to it (two (epsilon, delta, kappa) points). One mechanism takes seconds (the policy
    mechanisms, which loop over users in Python, the longest), so no test carries the whole
    quick audit; each report is computed once per process and shared by the tests below."""
    return audit.run_all(quick=True, mechanisms=[name], false_alarm=FALSE_ALARM)


def test_run_all_quick_plans_every_audit_for_every_shipped_mechanism(monkeypatch):
    """Without ``mechanisms``, run_all(quick=True) audits every shipped mechanism: a certificate
    and an empirical audit at each of two points, the side channels at the first, and the raw-row
    null-unit scenario for pi_opt at its first point. The audits are recorded, not run: each
    mechanism's real quick audit is the parametrized test below (run_all treats mechanisms one at
    a time, so that test runs exactly what this plan calls)."""
    from dpselect.audit import runner

    calls: list[tuple[str, str, tuple[float, float, int], dict]] = []

    def recorder(kind):  # type: ignore[no-untyped-def]
        def record(name, eps, delta, kappa, **kw):  # type: ignore[no-untyped-def]
            calls.append((kind, name, (eps, delta, kappa), kw))
            return types.SimpleNamespace(passed=True)
        return record

    for kind in ("certificate", "empirical", "side_channels"):
        monkeypatch.setattr(runner, kind, recorder(kind))
    report = audit.run_all(quick=True, false_alarm=FALSE_ALARM)
    assert report.passed and len(report.results) == len(calls) == 5 * len(audit.MECHANISMS)
    assert [name for kind, name, _, _ in calls if kind == "side_channels"] == list(audit.MECHANISMS)
    for name in audit.MECHANISMS:
        points = {kind: [p for k, n, p, _ in calls if k == kind and n == name]
                  for kind in ("certificate", "empirical", "side_channels")}
        assert len(set(points["certificate"])) == 2 and points["empirical"] == points["certificate"], name
        assert points["side_channels"] == points["certificate"][:1], name
    empirical_calls = [(name, p, kw) for kind, name, p, kw in calls if kind == "empirical"]
    assert all(kw["false_alarm"] == FALSE_ALARM for _, _, kw in empirical_calls)
    with_nulls = [(name, p) for name, p, kw in empirical_calls if kw["null_trials"] > 0]
    assert with_nulls == [("pi_opt", runner.QUICK_POINTS[0])]


@pytest.mark.slow
@pytest.mark.parametrize("name", audit.MECHANISMS)
def test_quick_audit_of_each_shipped_mechanism_passes(name):
    """Every audit passes; there are all three kinds, an empirical audit at each of two points;
    certificates report an exact, non-negative delta slack and (where there is one) a ratio
    within e^epsilon; every side-channel check ran and every schema pair is equal; the report is
    JSON-ready and its summary says so."""
    report = quick_report(name)
    failures = "\n\n".join(str(r) for r in report.failures)
    assert report.passed, failures
    assert {r.mechanism for r in report.results} == {name}
    assert {r.as_dict()["audit"] for r in report.results} == {"certificate", "empirical", "side_channels"}
    assert sum(1 for r in report.results if isinstance(r, audit.EmpiricalAudit)) == 2
    certificates = [r for r in report.results if isinstance(r, audit.Certificate)]
    if name == "policy_gaussian":  # a reference implementation: its floating-point updates are not certified
        assert certificates and all(r.kind == "not certified" for r in certificates)
    for r in certificates:
        if r.kind == "not certified":
            continue
        assert r.delta_slack is not None and r.delta_slack >= 0, r
        if r.ratio_to_exp_eps is not None:
            assert r.ratio_to_exp_eps <= 1 + 1e-12 and r.epsilon_effective <= r.epsilon * (1 + 1e-12), r
    for r in report.results:
        if isinstance(r, audit.SideChannelAudit):
            assert not r.skipped and all(s.equal for s in r.schemas), r
    json.dumps(report.as_dict())  # JSON-ready
    assert "all audits passed" in report.summary()


@pytest.mark.slow
@pytest.mark.parametrize("name", ["pi_opt", "release", "laplace"])
def test_empirical_audits_come_close_to_the_claim_where_it_is_tight(name):
    """pi_opt, Laplace thresholding and the TSGD release spend their whole epsilon on one count
    step: the audit's lower bound must get within 15 % of it (it reaches about 95 %; so the audit
    has power, not just no false alarms)."""
    tight = [r for r in quick_report(name).results
             if isinstance(r, audit.EmpiricalAudit) and r.max_partitions_contributed == 1]
    assert tight
    for r in tight:
        assert 0.85 * r.epsilon <= r.epsilon_lb <= r.epsilon, r


@pytest.mark.slow
def test_the_null_unit_scenario_ran_on_the_real_select_partitions():
    null = [e for r in quick_report("pi_opt").results if isinstance(r, audit.EmpiricalAudit)
            for e in r.estimates if e.scenario == "rows_null_unit"]
    assert null and not any(e.refutes for e in null)


@pytest.mark.slow
def test_byte_consumption_claims_are_checked_where_the_docs_make_them():
    def sides(name: str) -> audit.SideChannelAudit:
        (result,) = [r for r in quick_report(name).results if isinstance(r, audit.SideChannelAudit)]
        return result

    assert any(c.exact and c.claimed for c in sides("pi_opt").consumption)  # N - 1 vs 10^12: same bytes
    release = sides("release").consumption
    assert release and all(c.exact for c in release)  # the release's bytes: set by the stream alone
    assert not any(c.claimed for c in sides("weighted_gaussian").consumption)  # no claim: information only


@pytest.mark.parametrize("name,options", [
    ("pi_opt", {"pre_threshold": 5}),
    ("release", {"pre_threshold": 3}),
    pytest.param("gaussian", {"noise_share": "optimal"}, marks=pytest.mark.slow),
    ("mixed", {"public_threshold": -20}),
])
def test_options_change_what_runs_and_the_audits_follow(name, options):
    cert = audit.certificate(name, 1.0, 1e-4, 4 if name == "gaussian" else 2, **options)
    assert cert.passed, cert
    emp = audit.empirical(name, 1.0, 1e-4, 4 if name == "gaussian" else 2, trials=100_000, row_trials=2_000,
                          false_alarm=FALSE_ALARM, **options)
    assert emp.passed, emp


# ------------------------------------------------------------------ broken copies

class _ThresholdOneLow(TSGDRelease):
    """A TSGD release that publishes n + X > k − 1: the threshold it states *and* passes to the
    kernel is one user too low."""

    @property
    def release_threshold(self) -> int:
        return self.k + self.pre_threshold - 2


class _HiddenThresholdOneLow(TSGDRelease):
    """States the right threshold k but passes k − 1 to the kernel: only the empirical audit,
    which runs the object, can see it."""

    def release(self, counts, *, out=None, rng=None):  # type: ignore[no-untyped-def]
        return self._draw(counts, self.k - 1, False, out, rng)


class _ScaledPiOpt(PiOptSelection):
    """pi_opt with every table entry scaled up by 3 % (capped just below 1)."""

    def __init__(self, params, factor=Fraction(103, 100)):  # type: ignore[no-untyped-def]
        super().__init__(params)
        table = self.table
        values = [min(math.floor(q * factor), table.scale - 1) for q in keep_numerators(table.words)]
        self._load(KeepTable(read_only(to_words(values, table.limbs)), table.partition_epsilon,
                             table.partition_delta, table.tail_certain))


def test_an_off_by_one_release_threshold_is_refuted_by_both_audits():
    """At epsilon = 1, delta = 1e-3: one user is released with probability 1.57e-3 against a
    claimed 4.2e-4; 10^5 held-out trials bound it above 1.2e-3 (the miss probability is far
    below 1e-10), and the certificate computes the rule's exact delta, 3.7 times the claim."""
    broken = _ThresholdOneLow(validate_params(1.0, 1e-3))
    cert = audit.certificate(broken)
    assert not cert.passed
    assert any("published above" in c.name and not c.passed for c in cert.checks), cert
    emp = audit.empirical(broken, trials=200_000, scenarios=("absent_vs_one", "zero_vs_one"), false_alarm=FALSE_ALARM)
    assert emp.refuted and math.isinf(emp.epsilon_lb), emp
    assert any("zero users" in d for d in emp.defects)  # a zero count is published with noise k
    assert "REFUTED" in str(emp)


def test_a_threshold_hidden_from_the_certificate_is_refuted_by_the_empirical_audit():
    broken = _HiddenThresholdOneLow(validate_params(1.0, 1e-3))
    assert audit.certificate(broken).passed  # the certificate reads the stated threshold: it cannot see this
    emp = audit.empirical(broken, trials=200_000, scenarios=("absent_vs_one",), false_alarm=FALSE_ALARM)
    assert emp.refuted, emp


def test_a_pi_opt_table_scaled_up_by_three_percent_is_refuted_by_both_audits():
    """Scaled entries reach 1 two counts early: between n = 9 and 10 the drop probability falls
    from 2 % to 0, so the empirical bound on epsilon is infinite (or far above 1)."""
    broken = _ScaledPiOpt(validate_params(1.0, 1e-3))
    cert = audit.certificate(broken)
    assert not cert.passed and any("four" in c.name and not c.passed for c in cert.checks), cert
    emp = audit.empirical(broken, trials=200_000, scenarios=("n_vs_n+1",), false_alarm=FALSE_ALARM)
    assert emp.refuted and emp.epsilon_lb > 3, emp
    real = audit.empirical("pi_opt", 1.0, 1e-3, trials=200_000, scenarios=("n_vs_n+1",), false_alarm=FALSE_ALARM)
    assert real.passed, real


def _shared_null_unit(data, *, privacy_unit, null_privacy_units="error", **kwargs):  # type: ignore[no-untyped-def]
    """A wrapper around select_partitions that merges every row whose privacy unit is null into
    one user (id -1) instead of refusing or dropping them."""
    pc = pytest.importorskip("pyarrow.compute")
    column = data.schema.get_field_index(privacy_unit)
    data = data.set_column(column, privacy_unit, pc.fill_null(data.column(privacy_unit), -1))
    return dpselect.select_partitions(data, privacy_unit=privacy_unit, **kwargs)


@pytest.mark.slow
def test_merging_null_privacy_units_into_one_user_is_refuted_on_raw_rows():
    """pi_opt at epsilon = 3, delta = 1e-2: the scenario's key has 2 users, and the merged null
    person makes it 3, lifting its release probability from 0.21 to 0.96. With 100 held-out calls
    per side, the exact binomial sum gives a chance below 2e-8 that the Clopper–Pearson bounds
    (at 2.5e-7 each) still overlap, i.e. that the copy escapes."""
    pytest.importorskip("pyarrow")
    kw = dict(trials=1_000, row_trials=200, null_trials=200, scenarios=("rows_null_unit",), false_alarm=FALSE_ALARM)
    broken = audit.empirical("pi_opt", 3.0, 1e-2, rows_entry=_shared_null_unit, **kw)
    assert broken.refuted, broken
    assert broken.estimates[0].claimed_epsilon == 0  # the null rows' claim: they change nothing
    real = audit.empirical("pi_opt", 3.0, 1e-2, **kw)
    assert real.passed, real


class _TiePathOnLargeCounts:
    """A real strategy that, after each batch, draws one more random byte per count of 20 or
    more: byte consumption (hence time) depends on the data."""

    def __init__(self, real):  # type: ignore[no-untyped-def]
        self.real = real
        self.name = real.name
        self.params = real.params
        self.releases_counts = real.releases_counts
        self.count_cap = real.count_cap
        self.guarantee = real.guarantee
        self.max_partitions_contributed = real.max_partitions_contributed

    def keep_probability(self, counts):  # type: ignore[no-untyped-def]
        return self.real.keep_probability(counts)

    def apply(self, counts, *, rng=None):  # type: ignore[no-untyped-def]
        result = self.real.apply(counts, rng=rng)
        large = int(np.count_nonzero(np.asarray(counts) >= 20))
        if large:
            resolve_rng(rng).random_bytes(large)
        return result


@pytest.mark.slow
def test_a_count_dependent_random_byte_path_is_flagged_by_the_side_channel_audit():
    real = dpselect.make_strategy("pi_opt", epsilon=1.0, delta=1e-5)
    broken = audit.side_channels(_TiePathOnLargeCounts(real), trials=200, schemas=False, false_alarm=FALSE_ALARM)
    assert broken.flagged, broken
    flagged = [c for c in broken.consumption if c.flagged]
    assert any(c.input_b.endswith(str(real.count_cap + 5)) for c in flagged)  # 1 vs beyond the table
    assert "FLAGGED" in str(broken)


def test_bytes_consumed_measures_the_stream_position():
    assert audit.bytes_consumed(lambda rng: rng.random_bytes(100), seed=3) == 100
    assert audit.bytes_consumed(lambda rng: None, seed=3) == 0
    five_thousand = audit.bytes_consumed(lambda rng: rng.random_bytes(5000), seed=4)
    assert five_thousand >= 5000  # a refill boundary may skip a few bytes, never fewer


def _schema_follows_data(data, **kwargs):  # type: ignore[no-untyped-def]
    """select_partitions, but an empty release comes back with null-typed columns."""
    pa = pytest.importorskip("pyarrow")
    out = dpselect.select_partitions(data, **kwargs)
    if isinstance(out, pa.Table) and out.num_rows == 0:
        return pa.table({name: pa.nulls(0) for name in out.column_names})
    if not isinstance(out, pa.Table) and len(out) == 0:
        return out.astype(object)
    return out


def test_an_output_schema_that_follows_the_data_is_flagged():
    pytest.importorskip("pyarrow")
    broken = audit.side_channels("release", 1.0, 1e-5, rows_entry=_schema_follows_data, trials=20,
                                 false_alarm=FALSE_ALARM)
    assert any(not s.equal for s in broken.schemas) and broken.flagged, broken


def _bounds_one_too_many(data, *, max_partitions_contributed=1, **kwargs):  # type: ignore[no-untyped-def]
    """Contribution bounding that lets each user keep κ + 1 partitions while the claim says κ."""
    strategy = kwargs.pop("strategy")
    built = dpselect.make_strategy(strategy, epsilon=kwargs.pop("epsilon"), delta=kwargs.pop("delta"),
                                   max_partitions_contributed=max_partitions_contributed)

    class Looser(type(built)):  # type: ignore[misc, valid-type]
        @property
        def max_partitions_contributed(self) -> int:
            return built.params.max_partitions_contributed + 1

    looser = Looser.__new__(Looser)
    looser.__dict__.update(built.__dict__)
    return dpselect.select_partitions(data, strategy=looser, **kwargs)


def test_contribution_bounding_that_keeps_one_partition_too_many_is_refuted_on_raw_rows():
    """pi_opt at epsilon = 2, kappa = 1: the added user lifts two keys instead of one, a ratio
    of about e^4 on "both kept" against the claimed e^2."""
    pytest.importorskip("pyarrow")
    kw = dict(trials=1_000, row_trials=20_000, scenarios=("rows_user_added",), false_alarm=FALSE_ALARM)
    broken = audit.empirical("pi_opt", 2.0, 1e-3, rows_entry=_bounds_one_too_many, **kw)
    assert broken.refuted, broken
    assert audit.empirical("pi_opt", 2.0, 1e-3, **kw).passed


# ------------------------------------------------------------------ results and the command line

def test_results_print_and_serialise():
    cert = audit.certificate("release", 1.0, 1e-5, 2)
    text = str(cert)
    assert text.startswith("certificate [PASS] release") and "slack" in text and "not checked" in text
    data = cert.as_dict()
    assert data["passed"] and data["delta_slack"] >= 0 and json.dumps(data)
    emp = audit.empirical("laplace", 1.0, 1e-3, trials=20_000, row_trials=500, false_alarm=FALSE_ALARM)
    assert "epsilon_lb" in str(emp) and json.dumps(emp.as_dict())
    with pytest.raises(ValueError, match="mechanism must be one of"):
        audit.certificate("pi_optimal", 1.0, 1e-5)
    with pytest.raises(ValueError, match="carries its own parameters"):
        audit.certificate(dpselect.make_strategy("pi_opt", epsilon=1.0, delta=1e-5), 1.0, 1e-5)


def test_the_grouped_release_certificate_does_not_warn_about_its_own_synthetic_rows():
    """Its dry run bounds a synthetic table built to exceed L-infinity: the data holder's warning
    that bounding dropped most rows would describe the audit's table, not the user's data."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for kappa in (1, 2):
            assert audit.certificate("aggregate", 4.0, 1e-5, kappa).passed


def test_side_channels_skip_byte_counts_without_the_test_generator(monkeypatch):
    monkeypatch.delenv("DPSELECT_ALLOW_INSECURE_RNG", raising=False)
    result = audit.side_channels("pi_opt", 1.0, 1e-5, schemas=False)
    assert not result.consumption and any("DPSELECT_ALLOW_INSECURE_RNG" in s for s in result.skipped)


@pytest.mark.slow
def test_main_runs_one_configuration_and_writes_json(tmp_path, capsys):
    path = tmp_path / "audit.json"
    code = audit.main(["pi_opt", "release", "--epsilon", "1", "--delta", "1e-5", "-k", "2", "--trials", "20000",
                       "--row-trials", "500", "--null-trials", "20", "--side-trials", "30", "--json", str(path)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "certificate [PASS] pi_opt" in out and "all audits passed" in out
    data = json.loads(path.read_text())
    assert data["passed"] and len(data["results"]) == 6
    null = [e for r in data["results"] for e in r.get("estimates", []) if e["scenario"] == "rows_null_unit"]
    assert [e["trials"] for e in null] == [10, 10]  # --null-trials: 20 calls per side for each, half held out
    assert audit.main(["gaussian", "--epsilon", "1", "--delta", "1e-5", "--only", "certificate", "-q"]) == 0
    assert audit.main(["pi_opt", "--epsilon", "1", "--delta", "0", "--only", "certificate"]) == 2  # delta = 0 refused
    with pytest.raises(SystemExit):
        audit.main(["no_such_mechanism"])


def test_dpselect_audit_runs_from_the_command_line(capsys):
    from dpselect.cli import main

    assert main(["audit", "pi_opt", "--epsilon", "1", "--delta", "1e-5", "--only", "certificate"]) == 0
    assert "PASS" in capsys.readouterr().out
