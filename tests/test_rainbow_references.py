"""Citations of dpselect.rainbow point at the papers and at shipped documentation only."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import dpselect.rainbow as rainbow
from dpselect.rainbow import graph_mechanism, line_mechanism

ROOT = Path(__file__).resolve().parents[1]
PRIVACY_DOC = ROOT / "docs" / "privacy" / "rainbow.md"

#: Pointers to material that does not ship with the package (design notes, issue numbers, ...).
UNSHIPPED = re.compile(r"\.\./shared|shared/sp[e]c|sp[e]c\s[a-z-]+\.md|[a-z-]+\.md\s§|seed\s00\d|issue\s\d|sp[e]c\s*=")


@pytest.mark.skipif(not PRIVACY_DOC.is_file(), reason="the docs ship with the source tree, not the wheel")
def test_privacy_page_ships_with_statements_proofs_certification_and_references() -> None:
    text = PRIVACY_DOC.read_text(encoding="utf-8")
    headings = ("## Setting", "**Statement.**", "**Argument", "## What is certified at run time", "## Caveats")
    for heading in (*headings, "## References"):
        assert heading in text, heading
    assert "Rainbow Differential Privacy" in text and "arXiv:2202.03974" in text
    assert "ISIT" in text
    assert "docs/privacy/rainbow.md" in rainbow.__doc__


def test_guarantees_cite_the_paper_and_the_privacy_page() -> None:
    pytest.importorskip("scipy")
    line = line_mechanism([0.3, 0.7], 1.0, 4)
    graph = graph_mechanism([[0, 1], [1, 2]], [0, 0, 1], [[0, 1], [1, 0]], [[0.45, 0.55], [0.45, 0.55]], 0.5)
    for mechanism in (line, graph):
        assert "docs/privacy/rainbow.md" in mechanism.guarantee
        assert "Zhou et al." in mechanism.guarantee
        assert not UNSHIPPED.findall(mechanism.guarantee)
