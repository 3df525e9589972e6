"""The shipped rainbow reference vectors (tests/data/rainbow_vectors.json): present, self-describing,
and reproduced by an independent high-precision iteration of the one-step map."""

from __future__ import annotations

import json
import math
from pathlib import Path

import mpmath
import pytest

DATA = Path(__file__).resolve().parent / "data" / "rainbow_vectors.json"


def load() -> dict:
    return json.loads(DATA.read_text(encoding="utf-8"))


def test_vector_file_ships_with_the_tests_and_states_its_provenance() -> None:
    document = load()
    provenance = document["provenance"]
    for key in ("model", "how_computed", "how_checked", "rounding"):
        assert provenance[key], key
    assert "Rainbow Differential Privacy" in provenance["model"]
    assert len(document["cases"]) == 12
    # nothing in the data points outside the repository
    text = DATA.read_text(encoding="utf-8")
    assert "../" not in text and "shared/" not in text


def one_step(x: mpmath.mpf, epsilon: mpmath.mpf, delta: mpmath.mpf) -> mpmath.mpf:
    growth = mpmath.exp(epsilon) * x + delta
    saturation = 1 - mpmath.exp(-epsilon) * (1 - x - delta)
    return min(growth, saturation, mpmath.mpf(1))


@pytest.mark.parametrize("case", load()["cases"], ids=lambda case: case["name"])
def test_vectors_match_an_independent_50_digit_iteration(case: dict) -> None:
    with mpmath.workdps(50):
        epsilon = mpmath.mpf(repr(case["eps"]))
        delta = mpmath.mpf(repr(case["delta"]))
        boundary = [mpmath.mpf(repr(x)) for x in case["boundary"]]
        m = len(boundary)
        prefixes = [sum(boundary[:k]) for k in range(1, m)]
        for row in case["probabilities"]:
            cumulative = [mpmath.mpf(0), *prefixes, mpmath.mpf(1)]
            for k in range(m):
                assert abs(float(cumulative[k + 1] - cumulative[k]) - row[k]) <= 5.1e-13
            prefixes = [one_step(x, epsilon, delta) for x in prefixes]
        if case["etas_of_prefix_sums"] is not None:
            # eta(x) = max(0, 1 + floor(ln(x*/x)/eps)), x* = 1/(1 + e^eps): the number of steps during
            # which e^{(i-1) eps} x <= x*. At an exact switch point (ln(x*/x)/eps an integer up to the
            # rounding of the printed boundary) both neighbouring values describe the same line.
            x_star = 1 / (1 + mpmath.exp(epsilon))
            for x, eta in zip((sum(boundary[:k]) for k in range(1, m)), case["etas_of_prefix_sums"], strict=True):
                if x == 0:
                    assert eta is None
                    continue
                steps = float(mpmath.log(x_star / x) / epsilon)
                expected = {max(0, 1 + math.floor(steps))}
                if abs(steps - round(steps)) < 1e-12:
                    expected |= {max(0, round(steps)), max(0, 1 + round(steps))}
                assert eta in expected
