"""Rainbow differential privacy: optimal mechanisms for multi-valued queries whose datasets each
prefer an order of the answers (their *rainbow*), on line graphs and general dataset graphs.

References: [ZGD+22] Z. Zhou, O. Günlü, R. G. L. D'Oliveira, M. Médard, P. Sadeghi,
R. F. Schaefer, *Rainbow Differential Privacy*, arXiv:2202.03974 (2022); [DMS21] R. G. L.
D'Oliveira, M. Médard, P. Sadeghi, *Differential privacy for binary functions via randomized graph
colorings*, IEEE ISIT 2021; [GZG+24] Y. Gu et al., *Generalized Rainbow Differential Privacy*,
J. Privacy and Confidentiality 14(2), 2024. Privacy statements, proofs and what is certified at
run time: ``docs/privacy/rainbow.md``. Closed forms need only numpy; graphs and the LP need
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
