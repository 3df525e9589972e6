"""``dpselect explain``: the mechanisms side by side for (ε, δ, κ), and the paper's figures.

Everything here depends on the public parameters only. The numbers are those of the certified
tables the kernel samples from (:mod:`dpselect.mechanisms.recommend`); the figures are those of
Desfontaines, Voss, Gipson, Mandayam, PoPETs 2022: keep probability against users (Figure 1),
midpoints against ε (Figure 2), against δ (Figure 3) and against κ (Figure 4).

Internal: not part of the public API (the README's "What semver covers"); import what you need from ``dpselect``. It may change in any release.
"""
from __future__ import annotations

from typing import Any

from dpselect.mechanisms.recommend import Recommendation, recommend

__all__ = ["explain", "explain_text", "plot_mechanisms"]


def explain(epsilon: float, delta: float, max_partitions_contributed: int = 1, *,
            neighbours: str = "add_remove") -> Recommendation:
    """The recommendation with every candidate's numbers (see :func:`dpselect.recommend`). A
    pre-threshold τ shifts every curve by τ − 1, so it does not change the ranking."""
    return recommend(epsilon, delta, max_partitions_contributed, neighbours=neighbours)


def explain_text(epsilon: float, delta: float, max_partitions_contributed: int = 1, *, pre_threshold: int = 1,
                 neighbours: str = "add_remove") -> str:
    """A table a person can read: thresholds and the 5/50/95 % points of every mechanism."""
    rec = explain(epsilon, delta, max_partitions_contributed, neighbours=neighbours)
    shift = pre_threshold - 1
    lines = [f"Partition selection at epsilon={epsilon:g}, delta={delta:g}, "
             f"max_partitions_contributed={max_partitions_contributed}"
             + (f", pre_threshold={pre_threshold}" if shift else "")
             + (", bounded DP (replace one user)" if neighbours == "replace" else "") + ":",
             "users a partition needs to be released with probability 5 %, 50 % (midpoint), 95 %:", ""]
    lines.append(f"{'mechanism':<26} {'5 %':>9} {'50 %':>9} {'95 %':>9}   threshold")
    for c in rec.candidates:
        threshold = ", ".join(f"{k} {v + (shift if k in ('threshold', 'release_threshold', 'kept_surely_from') else 0):.6g}"
                              for k, v in c.thresholds.items() if k != "noise_share")
        lines.append(f"{c.label:<26} {c.q05 + shift:>9.2f} {c.midpoint + shift:>9.2f} {c.q95 + shift:>9.2f}   {threshold}")
    lines += ["", rec.reason,
              f"Use it with strategy={rec.strategy!r}" + (f" and {rec.options}" if rec.options else "")
              + " (or strategy='auto'). Keys and noisy counts together: 'release'."]
    return "\n".join(lines)


def _midpoints(values: list[Any], key: str, base: dict[str, Any]) -> dict[str, list[float]]:
    series: dict[str, list[float]] = {}
    for value in values:
        params = {**base, key: value}
        rec = recommend(params["epsilon"], params["delta"], params["max_partitions_contributed"])
        for c in rec.candidates:
            series.setdefault(c.label, []).append(c.midpoint)
    return series


def plot_mechanisms(epsilon: float, delta: float, max_partitions_contributed: int, path: str, *,
                    pre_threshold: int = 1, neighbours: str = "add_remove") -> None:
    """Draw the paper's Figures 1–4 for these parameters into one image at ``path``."""
    from dpselect._optional import require

    require("matplotlib", feature="dpselect explain --plot", extra="plot")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from dpselect.mechanisms.protocols import IndependentSelection
    from dpselect.mechanisms.registry import make_strategy

    fig, axes = plt.subplots(2, 2, figsize=(11, 8))
    ax = axes[0][0]
    rec = recommend(epsilon, delta, max_partitions_contributed, neighbours=neighbours)
    top = int(max(c.q95 for c in rec.candidates) * 1.3) + 2
    users = np.arange(0, top + 1)
    for c in rec.candidates:
        strategy = make_strategy(c.strategy, epsilon=epsilon, delta=delta,
                                 max_partitions_contributed=max_partitions_contributed, neighbours=neighbours,
                                 **c.options)
        if not isinstance(strategy, IndependentSelection):  # every candidate is one; the check is for mypy
            continue
        ax.plot(users + pre_threshold - 1, strategy.keep_probability(users), label=c.label)
    ax.set(title=f"Keep probability (ε={epsilon:g}, δ={delta:g}, κ={max_partitions_contributed})",
           xlabel="distinct users in the partition", ylabel="probability of release")
    ax.legend(fontsize=8)
    base = {"epsilon": epsilon, "delta": delta, "max_partitions_contributed": max_partitions_contributed}
    panels = (
        (axes[0][1], "epsilon", [0.1, 0.25, 0.5, 1.0, 2.0, 4.0], "ε", True),
        (axes[1][0], "delta", [1e-10, 1e-8, 1e-6, 1e-5, 1e-4, 1e-3], "δ", True),
        (axes[1][1], "max_partitions_contributed", [1, 2, 3, 4, 6, 8, 10], "κ (max partitions contributed)", False),
    )
    for ax, key, values, label, logx in panels:
        for name, mids in _midpoints(values, key, base).items():
            if len(mids) == len(values):
                ax.plot(values, mids, marker="o", label=name)
        ax.set(title=f"Midpoint against {label}", xlabel=label, ylabel="users for a 50 % release")
        if logx:
            ax.set_xscale("log")
        ax.legend(fontsize=8)
    fig.suptitle("Partition selection mechanisms (Desfontaines et al., PoPETs 2022, Figures 1-4)")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
