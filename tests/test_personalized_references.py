"""Citations of dpselect.personalized point at the papers and at shipped documentation only, and
every result names its mechanism's source (``PrivacyStatement.reference``)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import dpselect.personalized as personalized
from dpselect.personalized import (
    naive_count,
    naive_sum,
    pdp_count,
    pdp_count_with_sampling,
    pdp_exponential_count,
    pdp_join_sum,
    pdp_sum,
    pdp_sum_signed,
    sampling_count,
    sampling_sum,
)
from dpselect.testing import InsecureDeterministicRNG

pytestmark = pytest.mark.filterwarnings("ignore::dpselect.testing.InsecureRNGWarning")

ROOT = Path(__file__).resolve().parents[1]
PRIVACY_DOC = ROOT / "docs" / "privacy" / "personalized.md"
UNSHIPPED = re.compile(r"\.\./shared|shared/sp[e]c|sp[e]c\s[a-z-]+\.md|[a-z-]+\.md\s§|seed\s00\d|issue\s\d|sp[e]c\s*=")


def _rng() -> InsecureDeterministicRNG:
    return InsecureDeterministicRNG(seed=3, stream=0)


@pytest.mark.skipif(not PRIVACY_DOC.is_file(), reason="the docs ship with the source tree, not the wheel")
def test_privacy_page_ships_with_statements_proofs_certification_and_references() -> None:
    text = PRIVACY_DOC.read_text(encoding="utf-8")
    headings = ("## Model", "**Statement.**", "**Argument.**", "## What is certified at run time", "## Caveats")
    for heading in (*headings, "## References"):
        assert heading in text, heading
    citations = ("Personalized Truncation for Personalized Privacy", "SIGMOD 2025", "ICDE 2015", "R2T")
    citations += ("Discrete Gaussian",)
    for citation in citations:
        assert citation in text, citation
    assert "SIGMOD 2025" in personalized.__doc__


def _all_results():
    phi = np.array([0.5, 1.0, 2.0])
    yield pdp_count([1, 0, 1], phi, rng=_rng()), "Sun, Dong, Qiu, Yi"
    yield pdp_sum([3, 0, 7], phi, 8, rng=_rng()), "Sun, Dong, Qiu, Yi"
    yield pdp_sum_signed([3, -1, 7], phi, 8, rng=_rng()), "Sun, Dong, Qiu, Yi"
    yield naive_count([1, 0, 1], phi, rng=_rng()), "Sun, Dong, Qiu, Yi"
    yield naive_sum([3, 0, 7], phi, 8, rng=_rng()), "Sun, Dong, Qiu, Yi"
    yield sampling_count([1, 0, 1], phi, rng=_rng()), "Jorgensen, Yu, Cormode"
    yield sampling_sum([3, 0, 7], phi, 8, rng=_rng()), "Jorgensen, Yu, Cormode"
    yield pdp_count_with_sampling([1, 0, 1], phi, rng=_rng()), "Sun, Dong, Qiu, Yi"
    yield pdp_exponential_count([1, 0, 1], phi, rng=_rng()), "Jorgensen, Yu, Cormode"
    try:
        import scipy  # noqa: F401
    except ImportError:
        return
    yield pdp_join_sum([3, 4], (np.array([0, 1]), np.array([0, 2])), phi, 8, rng=_rng()), "Sun, Dong, Qiu, Yi"


def test_every_result_names_its_source_and_the_privacy_page() -> None:
    seen = 0
    for result, authors in _all_results():
        privacy = result.privacy
        assert authors in privacy.reference and "docs/privacy/personalized.md" in privacy.reference
        assert not UNSHIPPED.findall(privacy.reference + privacy.description)
        assert not hasattr(privacy, "spec")
        assert privacy.verify()
        seen += 1
    assert seen >= 9


def test_readable_reprs() -> None:
    phi = np.array([0.5, 1.0, 2.0])
    result = pdp_sum([10, 3, 7], phi, 16, rng=_rng())
    text = repr(result)
    assert text.startswith("PersonalizedResult(estimate=") and "method='pdp_sum'" in text
    assert "chosen=" in text and "privacy_guaranteed=False" in text
    assert "Fraction(" not in text and "array(" not in text and len(text) < 250
    statement = repr(result.privacy)
    assert statement.startswith("PrivacyStatement(") and "3 users" in statement and "SIGMOD 2025" in statement
    signed = repr(pdp_sum_signed([3, -1, 2], phi, 4, rng=_rng()))
    assert "method='pdp_sum_signed'" in signed and "details" not in signed
    huge = repr(naive_sum([1, 2], [1e-300, 1.0], 4, rng=_rng()))  # an estimate of ~1e300: abbreviated
    assert len(huge) < 250
