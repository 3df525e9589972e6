"""The GROUP BY examples of the README and of docs/aggregate.md, run as written: an example that no
longer runs (a renamed parameter, a parameter that became required) fails here. Skipped where the
docs are not beside the tests (an installed wheel's test run)."""
from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest

pytest.importorskip("pandas")
pytest.importorskip("pyarrow")

ROOT = Path(__file__).resolve().parent.parent


def _python_blocks(path: Path) -> list[str]:
    if not path.is_file():
        pytest.skip(f"no {path.name} beside the tests (an installed wheel)")
    return re.findall(r"```python\n(.*?)\n```", path.read_text(encoding="utf-8"), flags=re.S)


def _run(blocks: list[str], where: Path) -> dict:
    namespace: dict = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the examples' data holder's warnings are expected
        for block in blocks:
            exec(compile(block, str(where), "exec"), namespace)
    return namespace


@pytest.mark.slow
def test_the_readme_aggregate_example_runs(capsys):
    readme = ROOT / "README.md"
    blocks = [b for b in _python_blocks(readme) if "dpselect.aggregate(" in b]
    assert blocks, "the README shows dpselect.aggregate"
    namespace = _run(blocks, readme)
    out = capsys.readouterr().out
    assert "differentially private" in out and "NOT differentially private" in out  # guarantee, report
    assert list(namespace["out"].frame.columns)[:3] == ["os", "users", "users_ci_low"]


@pytest.mark.slow
def test_the_aggregate_tutorial_runs_as_written():
    tutorial = ROOT / "docs" / "aggregate.md"
    namespace = _run(_python_blocks(tutorial), tutorial)
    out, sample = namespace["out"], namespace["sample"]
    assert {"users", "users_ci_low", "avg_spend"} <= set(out.frame.columns)
    # The tutorial's release never reads the held-out sample it chose its bounds on.
    assert not set(sample["user_id"]) & set(namespace["rest"]["user_id"])
    assert out.guarantee.kappa == 4 and str(namespace["budget"]).count("aggregate") >= 1
