"""How results read in a terminal and a notebook: short reprs with rounded numbers, the full
statement in str() (unchanged: it ships in the frame's metadata), escaped and well-formed HTML,
and never a report figure in a release's view."""
from __future__ import annotations

import re
from fractions import Fraction
from html.parser import HTMLParser

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import dpselect
from dpselect.aggregation.guarantee import Component
from dpselect.core.guarantee import PrivacyGuarantee
from dpselect.testing import InsecureDeterministicRNG

pd = pytest.importorskip("pandas")
pa = pytest.importorskip("pyarrow")

pytestmark = pytest.mark.filterwarnings("ignore::dpselect.testing.InsecureRNGWarning")

METRICS = {"users": dpselect.count_distinct_units(), "rows": dpselect.count(),
           "total": dpselect.sum("spend"), "avg": dpselect.mean("spend", bounds=(0, 100))}
# What str() of the guarantee of shop_release() says, word for word: it is the statement that ships
# in the frame's metadata (Laplace noise pinned; avg is the released total over rows, no share).
STATEMENT = (
    "NOT DP: made with the deterministic test RNG. Were it drawn with the secure generator, this grouped release "
    "(keys and every metric) is (1, 1e-06)-differentially private (computational, ChaCha20 CSPRNG) for neighbouring "
    "datasets that add or remove all rows of one privacy unit (user): dpselect bounded each user to 4 partition(s) "
    "and 2 row(s) per partition (uniform choices), and the steps compose by basic sequential composition: "
    "(1) selection of keys (pi_opt): (0.25, 1e-06); (2) users = count_distinct_units(): (0.25, 0); "
    "(3) rows = count(): (0.25, 0); (4) total = sum('spend', bounds=(0, 100), given with metric 'avg'): (0.25, 0); "
    "(5) avg = mean('spend', bounds=(0, 100)): (0, 0). noise='laplace' asked (Laplace: users, rows, total). "
    "See docs/privacy/aggregate.md.")
VOID = {"br", "hr", "img", "input", "meta", "link", "col", "wbr", "source", "area", "base", "embed", "param", "track"}


def shop(n: int = 4_321, users: int = 800, seed: int = 0, key: str = "city", value: str = "spend") -> pd.DataFrame:
    gen = np.random.Generator(np.random.PCG64(seed))  # test data only
    return pd.DataFrame({"user": gen.integers(0, users, n), key: np.array(list("abcdefgh"))[gen.integers(0, 8, n)],
                         value: np.round(gen.uniform(0, 100, n), 2)})


def shop_release(data: object = None, **kwargs: object) -> object:
    args: dict[str, object] = dict(privacy_unit="user", by="city", metrics=METRICS, epsilon=1, delta=1e-6,
                                   max_partitions_contributed=4, max_contributions_per_partition=2,
                                   rng=InsecureDeterministicRNG(seed=1), noise="laplace", strategy="pi_opt")
    args.update(kwargs)
    return dpselect.aggregate(shop() if data is None else data, **args)


def long_numbers(text: str) -> list[str]:
    """Numbers (a fraction counted whole) of more than 20 digits."""
    return [m for m in re.findall(r"\d+(?:/\d+)?", text) if len(m.replace("/", "")) > 20]


class Balance(HTMLParser):
    """Every opened tag closed, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.errors: list[str] = []

    def handle_starttag(self, tag: str, attrs: object) -> None:
        if tag not in VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1:] or 'nothing'}")
        else:
            self.stack.pop()


def assert_well_formed(text: str) -> None:
    parser = Balance()
    parser.feed(text)
    parser.close()
    assert not parser.errors and not parser.stack, (parser.errors, parser.stack)


# ------------------------------------------------------------------ repr: short, rounded

def test_result_repr_is_a_few_lines_with_the_frame_the_columns_and_the_guarantee() -> None:
    out = shop_release()
    text = repr(out)
    assert len(text) < 600 and len(text.splitlines()) <= 6, text
    assert text.startswith("AggregateResult: pandas DataFrame, 8 rows × 5 columns"), text
    assert "columns: city, users, rows, total, avg" in text and "bounds: spend [0, 100]" in text
    assert ("guarantee: (ε = 1, δ = 1e-06)-DP GROUP BY: key selection + 4 metrics, κ = 4, L∞ = 2 "
            "[NOT DP: deterministic test RNG]") in text
    assert "str(.guarantee)" in text and ".report()" in text  # where to see more
    assert not long_numbers(text)


@pytest.mark.parametrize("kind", ["polars", "polars-lazy", "arrow"])
def test_result_repr_of_every_frame_type_is_short_and_computes_nothing(kind: str) -> None:
    data = shop()
    if kind.startswith("polars"):
        pl = pytest.importorskip("polars")
        data = pl.from_pandas(data).lazy() if kind == "polars-lazy" else pl.from_pandas(data)
    else:
        data = pa.Table.from_pandas(data, preserve_index=False)
    text = repr(shop_release(data))
    assert len(text) < 600 and "columns: city, users, rows, total, avg" in text, text
    shape = {"polars": "polars DataFrame, 8 rows", "polars-lazy": "polars LazyFrame, 5 columns (rows not counted)",
             "arrow": "pyarrow Table, 8 rows"}[kind]
    assert shape in text, text


def test_result_repr_clips_many_or_long_column_names() -> None:
    metrics = {f"metric_{i}_{'x' * 60}": dpselect.count() for i in range(30)}
    text = repr(shop_release(metrics=metrics, epsilon=100))
    assert len(text) < 600 and "(+" in text and "more)" in text, text


def test_guarantee_repr_is_one_rounded_line_with_the_exact_values_kept() -> None:
    g = shop_release(weights={"selection": 1}).guarantee  # the format is pinned, not the default split
    text = repr(g)
    assert "\n" not in text and len(text) < 200, text
    assert text == ("AggregateGuarantee: (ε = 1, δ = 1e-06)-DP GROUP BY: key selection + 4 metrics, κ = 4, L∞ = 2 "
                    "[NOT DP: deterministic test RNG] — str() for the statement, .components for each step")
    # The exact values stay where they were: the selection's δ is a long exact fraction.
    assert g.delta_exact == g.components[0].delta_exact and len(str(g.delta_exact)) > 100
    assert g.epsilon_exact == 1
    for component in g.components:
        line = repr(component)
        assert "\n" not in line and len(line) < 300 and not long_numbers(line), line
    assert repr(g.components[0]) == ("Component('selection of keys (pi_opt)': ε = 0.25, δ = 1e-06, "
                                     "pi_opt partition selection)")
    assert repr(g.components[1]).endswith("discrete Laplace noise of scale 16)")


def test_guarantee_repr_counts_private_bounds_and_public_keys_have_no_selection() -> None:
    out = shop_release(metrics={"n": dpselect.count(), "s": dpselect.sum("spend")}, epsilon=3)
    assert "GROUP BY: key selection + 1 private bound + 2 metrics," in repr(out.guarantee)
    public = shop_release(public_partitions=pd.DataFrame({"city": ["a", "b", "z"]}))
    assert "GROUP BY: 4 metrics, κ = 4" in repr(public.guarantee)


def test_privacy_guarantee_repr_is_one_line_even_for_a_long_mechanism_name() -> None:
    long = PrivacyGuarantee("a home-made mechanism " + "with many words " * 30, 0.1, Fraction(1, 3 * 10**7), 2,
                            "my notes").user_supplied().under_test_rng()
    text = repr(long)
    assert "\n" not in text and len(text) < 200, text
    assert text.startswith("PrivacyGuarantee: (ε = 0.1, δ = 3.334e-08)-DP a home-made mechanism")
    assert "NOT DP" in text and "not certified" in text and "str() for the statement" in text
    built = dpselect.make_strategy("pi_opt", epsilon=1, delta=1e-5).guarantee
    assert repr(built) == ("PrivacyGuarantee: (ε = 1, δ = 1e-05)-DP pi_opt partition selection, κ = 1 (assumed) "
                           "— str() for the statement")


def test_no_repr_shows_a_number_of_more_than_20_digits() -> None:
    out = shop_release()
    selection = out.guarantee.components[0]
    assert long_numbers(selection.statement) == [] and len(str(selection.delta_exact)) > 100
    texts = [repr(out), repr(out.guarantee), repr(out.guarantee.components), repr(out.report()),
             repr(dpselect.make_strategy("release", epsilon=0.1, delta=1e-7).guarantee)]
    for text in texts:
        assert not long_numbers(text), (long_numbers(text), text)
    # A statement naming a long exact scale reads rounded in the mechanism, exact in str().
    long_scale = PrivacyGuarantee("noise of scale 540431955284459520/3602879701896397", 0.1, 0, 1, "notes")
    assert not long_numbers(repr(long_scale)) and "≈150" in repr(long_scale)


# ------------------------------------------------------------------ str(): unchanged

def test_str_is_still_the_full_statement_of_the_metadata() -> None:
    out = shop_release(weights={"selection": 1})  # the format is pinned, not the default split
    assert str(out.guarantee) == STATEMENT
    assert out.frame.attrs["dpselect_guarantee"] == STATEMENT
    assert str(dpselect.make_strategy("pi_opt", epsilon=1, delta=1e-5).guarantee) == (
        "pi_opt partition selection is (1, 1e-05)-differentially private (computational, ChaCha20 CSPRNG) for "
        "neighbouring datasets that add or remove all rows of one privacy unit (user); each user is assumed to "
        "contribute to at most 1 partition(s) of the counts (bound contributions before counting; "
        "dpselect.select_partitions does). Delta is certified in exact rational arithmetic on the quantized table "
        "that runs. See Desfontaines, Voss, Gipson, Mandayam, \"Differentially private partition selection\", "
        "PoPETs 2022, Theorem 1 and Lemma 1; docs/privacy/pi-opt.md.")


# ------------------------------------------------------------------ the report

def test_report_repr_is_its_text_never_a_dataclass_dump() -> None:
    report = shop_release().report()
    assert "BucketLoss(" not in repr(report) and "ColumnClamping(" not in repr(report)
    assert repr(report) == str(report)
    assert repr(report).startswith("dpselect data holder's report: exact, NOT differentially private")
    _, selection = dpselect.select_partitions(shop(), privacy_unit="user", by="city", epsilon=1, delta=1e-6,
                                              report=True, rng=InsecureDeterministicRNG(seed=1))
    assert "BucketLoss(" not in repr(selection) and repr(selection) == str(selection)


@pytest.mark.filterwarnings("ignore:contribution bounding kept")
def test_report_html_has_its_tables_the_not_dp_header_first_and_highlighted_warnings() -> None:
    # κ = L∞ = 1 over users in every city: bounding drops most rows, and the report warns.
    out = shop_release(shop(key="city", value="<i>v</i>"), metrics={"s": dpselect.sum("<i>v</i>", bounds=(0, 50))},
                       max_partitions_contributed=1, max_contributions_per_partition=1)
    report = out.report()
    assert report.warnings
    text = report._repr_html_()
    assert_well_formed(text)
    assert text.index("exact, NOT differentially private") < text.index("WARNING") < text.index("<table>")
    assert text.count("<table>") == 3  # bounding, clamping, partitions by size
    assert "<i>v</i>" not in text and "&lt;i&gt;v&lt;/i&gt;" in text
    assert "100-999" in text and "[0, 50]" in text
    _, selection = dpselect.select_partitions(shop(), privacy_unit="user", by="city", epsilon=1, delta=1e-6,
                                              report=True, rng=InsecureDeterministicRNG(seed=1))
    html = selection._repr_html_()
    assert_well_formed(html)
    assert html.index("exact, NOT differentially private") < html.index("<table>")


def test_the_result_never_shows_a_report_figure() -> None:
    out = shop_release()
    before, before_html = repr(out), out._repr_html_()
    report = out.report()
    assert (repr(out), out._repr_html_()) == (before, before_html)  # building the report changes nothing
    for text in (before, before_html):
        assert "NOT differentially private" not in text and "Bounding" not in text
        for figure in (report.rows, report.rows_kept, report.pairs, report.pairs_kept, report.users):
            assert f"{figure:,}" not in text and f">{figure}<" not in text, figure


# ------------------------------------------------------------------ HTML: escaped, well-formed

@pytest.mark.parametrize("kind", ["pandas", "polars", "polars-lazy", "arrow"])
def test_result_html_is_well_formed_and_escapes_names(kind: str) -> None:
    data = shop(key="<b>k</b>")
    if kind.startswith("polars"):
        pl = pytest.importorskip("polars")
        data = pl.from_pandas(data).lazy() if kind == "polars-lazy" else pl.from_pandas(data)
    elif kind == "arrow":
        data = pa.Table.from_pandas(data, preserve_index=False)
    out = shop_release(data, by="<b>k</b>", metrics={"<b>x</b>": dpselect.count()})
    text = out._repr_html_()
    assert_well_formed(text)
    assert "<b>x</b>" not in text and "<b>k</b>" not in text and "&lt;b&gt;x&lt;/b&gt;" in text
    assert "(ε = 1, δ = 1e-06)-DP GROUP BY" in text
    if kind in ("pandas", "polars"):
        assert "<table" in text  # the frame's own HTML
    g = out.guarantee._repr_html_()
    assert_well_formed(g)
    assert "<b>x</b>" not in g and "&lt;b&gt;x&lt;/b&gt;" in g
    assert g.count("<tr>") == 1 + len(out.guarantee.components) + 1  # header, the steps, the total
    assert "discrete Laplace noise of scale 16" in g  # κ·L∞/ε = 4·2/(1/2)


def test_spark_result_repr_counts_no_rows() -> None:
    spark = pytest.importorskip("dpselect.spark")

    class Frame:  # a Spark DataFrame's cheap side; counting it would run a job
        columns = ["city", "users"]

        def count(self) -> int:
            raise AssertionError("repr ran a Spark job")

        def __repr__(self) -> str:
            return "DataFrame[city: string, users: bigint]"

    result = spark.SparkAggregateResult(frame=Frame(), guarantee=shop_release().guarantee, bounds={})
    text = repr(result)
    assert len(text) < 600 and text.startswith("SparkAggregateResult: ") and "2 columns (rows not counted)" in text
    html = result._repr_html_()
    assert_well_formed(html)
    assert "DataFrame[city: string, users: bigint]" in html


# ------------------------------------------------------------------ the numbers

@pytest.mark.slow
@given(st.fractions(min_value=Fraction(1, 10**30), max_value=Fraction(10**30)), st.integers(1, 8))
def test_a_rounded_number_never_reads_below_its_value(value: Fraction, digits: int) -> None:
    from dpselect.core.guarantee import format_upper

    text = format_upper(value, digits)
    assert Fraction(text) >= value
    assert len(text.replace(".", "").lstrip("0")) <= digits + 6  # rounded, not the exact expansion


def test_floats_read_as_the_parameter_they_denote() -> None:
    from dpselect.core.guarantee import format_upper

    assert [format_upper(x) for x in (0.1, 1e-6, 0.3, 1, 2.5, Fraction(2, 3), 1234.5, 1e7)] == [
        "0.1", "1e-06", "0.3", "1", "2.5", "0.6667", "1235", "1e+07"]


def test_each_step_names_its_mechanism() -> None:
    out = shop_release(metrics={"s": dpselect.sum("spend"), "m": dpselect.mean("spend")}, epsilon=3)
    mechanisms = [c.mechanism for c in out.guarantee.components]
    assert mechanisms[0] == "pi_opt partition selection"
    assert mechanisms[1].startswith("APPROX_BOUNDS (whole dataset; noisy log histogram, discrete Laplace of scale")
    assert mechanisms[2].startswith("discrete Laplace noise of scale ")
    assert re.fullmatch(r"a noisy sum of offsets from the midpoint \(discrete Laplace noise of scale [\d/]+\) over a "
                        r"noisy row count \(discrete Laplace noise of scale [\d/]+\)", mechanisms[3]), mechanisms[3]
    uncertified = PrivacyGuarantee("policy Laplace (alpha 5)", 1.0, Fraction(1, 10**6), 3, "notes", certified=False,
                                   uncertified_reason="floats (in the updates), not checked")
    assert Component("selection of keys (x)", Fraction(1), Fraction(0), str(uncertified)).mechanism == (
        "policy Laplace (alpha 5)")
