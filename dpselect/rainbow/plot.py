"""Figure of the line optimum: answer probabilities against the distance to the boundary, with the
index thresholds marked (like Figure 2 of [ZGD+22]). Needs matplotlib: ``pip install dpselect[plot]``."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from numpy.typing import ArrayLike

from ._validate import check_distances, check_distribution
from .line import line_probabilities, prefix_thresholds

__all__ = ["plot_line"]

#: Default names: the paper's blue, red, green for three answers.
_PAPER_NAMES = ("blue", "red", "green")


def plot_line(
    boundary: ArrayLike,
    epsilon: float,
    n: int,
    delta: float = 0.0,
    *,
    names: Sequence[str] | None = None,
    ax: Any = None,
) -> Any:
    """Plot P(c_k at distance i) for i = 0..n and every answer c_k, with the thresholds eta_k.

    ``boundary`` is in rainbow order. For three answers the thresholds are labelled eta_B and
    eta_R as in the paper (eqs. (2), (3)); otherwise eta_1 .. eta_{m-1}. Thresholds beyond ``n``
    or infinite are not drawn. Returns the matplotlib Axes.
    """
    try:
        import matplotlib.pyplot as plt
    except ImportError as error:  # pragma: no cover - depends on the environment
        raise ImportError("plot_line needs matplotlib: install the extra with `pip install dpselect[plot]`") from error
    p = check_distribution(boundary, "boundary")
    m = p.size
    distances = check_distances(n, "n")
    table = line_probabilities(p, epsilon, distances, delta)
    if names is None:
        names = list(_PAPER_NAMES) if m == 3 else [f"answer {k + 1}" for k in range(m)]
    if len(names) != m:
        raise ValueError(f"names must have one entry per answer (m = {m}), got {len(names)}")
    colours = ["tab:blue", "tab:red", "tab:green"] if m == 3 else [None] * m
    if ax is None:
        _, ax = plt.subplots(figsize=(6.4, 3.6))
    for k in range(m):
        ax.plot(distances, table[:, k], marker="o", markersize=3, color=colours[k], label=f"{names[k]} (rank {k + 1})")
    labels = ["η_B", "η_R"] if m == 3 else [f"η_{k + 1}" for k in range(m - 1)]
    for label, eta in zip(labels, prefix_thresholds(p, epsilon, delta), strict=True):
        if math.isfinite(eta) and eta <= distances[-1]:
            ax.axvline(eta, linestyle="--", color="grey", linewidth=1)
            ax.annotate(f"{label} = {int(eta)}", xy=(eta, 1.0), xytext=(3, -12), textcoords="offset points", fontsize=8)
    ax.set_xlabel("distance i to the boundary")
    ax.set_ylabel("probability")
    privacy = f"ε = {epsilon}" + (f", δ = {delta}" if delta else "")
    ax.set_title(f"Optimal rainbow mechanism on the line ({privacy})")
    ax.set_ylim(-0.02, 1.05)
    ax.set_xlim(-0.5, float(distances[-1]) + 0.5)
    ax.legend(loc="center right", fontsize=8)
    ax.grid(alpha=0.3)
    return ax
