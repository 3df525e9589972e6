"""Rainbow differential privacy: optimal mechanisms for multi-valued queries whose datasets each
prefer an order of the answers (their *rainbow*), on line graphs and general dataset graphs.

Spec: ``shared/spec/rainbow.md`` ([ZGD+22] Zhou et al., *Rainbow Differential Privacy*;
[DMS21] D'Oliveira et al., ISIT 2021). Closed forms need only numpy; graphs and the LP need
scipy (``pip install dpselect[graphs]`` / ``[lp]``); the plot needs matplotlib (``[plot]``).
"""

from .build import graph_mechanism, line_mechanism
from .check import dp_violation, exact_dp_violation, exp_lower_bound
from .graph import InvalidBoundaryError, PullBack, boundary_distances, check_boundary, pullback
from .line import binary_line, index_threshold, line_probabilities, prefix_thresholds, switch_value, ternary_line
from .lp import lexicographic_lp
from .mechanism import RainbowMechanism, SampledAnswers
from .plot import plot_line

__all__ = [
    "InvalidBoundaryError",
    "PullBack",
    "RainbowMechanism",
    "SampledAnswers",
    "binary_line",
    "boundary_distances",
    "check_boundary",
    "dp_violation",
    "exact_dp_violation",
    "exp_lower_bound",
    "graph_mechanism",
    "index_threshold",
    "lexicographic_lp",
    "line_mechanism",
    "line_probabilities",
    "plot_line",
    "prefix_thresholds",
    "pullback",
    "switch_value",
    "ternary_line",
]
