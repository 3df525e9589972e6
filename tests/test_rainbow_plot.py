"""The Figure-2-like plot (matplotlib optional extra)."""

from __future__ import annotations

import numpy as np
import pytest

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")

from dpselect.rainbow import line_probabilities, plot_line  # noqa: E402


@pytest.mark.slow
def test_plot_draws_every_colour_and_the_thresholds() -> None:
    import matplotlib.pyplot as plt

    ax = plot_line([0.02, 0.10, 0.88], 0.3, 20)
    try:
        lines = ax.get_lines()
        curves = [line for line in lines if len(line.get_xdata()) == 21]
        assert len(curves) == 3
        assert np.allclose(np.array([c.get_ydata() for c in curves]).T, line_probabilities([0.02, 0.10, 0.88], 0.3, 20))
        thresholds = sorted(float(line.get_xdata()[0]) for line in lines if len(line.get_xdata()) == 2)
        assert thresholds == [5.0, 11.0]  # eta_R, eta_B of ternary_substitute_example1 (tests/data)
        texts = [t.get_text() for t in ax.texts]
        assert "η_R = 5" in texts and "η_B = 11" in texts
    finally:
        plt.close(ax.figure)


def test_plot_skips_thresholds_beyond_the_range_and_checks_names() -> None:
    import matplotlib.pyplot as plt

    ax = plot_line([0.01, 0.02, 0.07, 0.9], 0.4, 6, names=["a", "b", "c", "d"])
    try:
        assert [t.get_text() for t in ax.texts] == ["η_3 = 4"]
    finally:
        plt.close(ax.figure)
    with pytest.raises(ValueError, match="names"):
        plot_line([0.5, 0.5], 1.0, 3, names=["only one"])
