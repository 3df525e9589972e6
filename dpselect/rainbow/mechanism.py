"""The rainbow mechanism that runs: a quantised, exactly certified probability table sampled with
the package CSPRNG.

From a float probability table (closed form, pull-back or LP output) we build integer weights,
every row summing to TOTAL = 2**63, and sample row r's answer with probability W[r, v] / TOTAL
exactly (``rng.sample_cumulative``). The privacy claim is made for these integers: the exact
rational check of :func:`dpselect.rainbow.check.exact_dp_violation` runs at construction and
must return <= 0, or construction fails.

Why naive rounding is not enough. Rounding two neighbouring rows independently moves each entry
by up to one unit; where a row has an entry of only a few units (a colour decaying like
e^{-i eps}) the ratio to its neighbour can then exceed e^eps, or become 1/0. So before rounding we
mix every row with one fixed distribution u (uniform on the colours that occur anywhere in the
table):

    P' = (1 - lam) P + lam u.

Mixing with a fixed distribution keeps (eps, delta)-DP (P'_d(S) <= e^eps P'_d'(S) + delta follows
from the same inequality for P, as e^eps >= 1) and opens a slack of (e^eps - 1) lam u_v in every
singleton inequality (plus lam * delta in the delta case), which absorbs the rounding error of a few
units and the float rounding of the input table. ``lam`` is computed from the measured float
violation of the table (about 1e-15 for closed forms; 1e-10 for LP output) and is tiny (e.g.
~1e-15 for eps = 1, ~1e-9 for eps = 1e-6). If the exact check still fails (it should not) ``lam``
is raised 16-fold and the table rebuilt. The cost in utility is at most lam in total variation,
plus 2**-63 per entry; both are reported (``mixing_weight``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ._validate import check_delta, check_distribution_rows, check_epsilon, check_index_array
from .check import dp_violation, exact_dp_violation

__all__ = ["TOTAL", "RainbowMechanism", "SampledAnswers", "quantize_rows"]

#: Common total of every quantised row (<= 2**64 - 1 as rng.sample_cumulative requires).
TOTAL = 1 << 63

#: A float table whose DP violation exceeds this is refused: it is not a DP mechanism.
_REFUSE_VIOLATION = 1e-6

#: Mixing weights above this are refused rather than silently destroying utility.
_MAX_MIXING = 1e-3

#: Float rounding allowance added to the measured violation (entries are <= 1).
_FLOAT_MARGIN = 1e-15


@dataclass(frozen=True)
class SampledAnswers:
    """Answers drawn by :meth:`RainbowMechanism.sample`.

    ``privacy_guaranteed`` is False when the answers came from the insecure deterministic test RNG.
    """

    answers: NDArray[np.int64]
    privacy_guaranteed: bool

    def __repr__(self) -> str:
        shown = np.array2string(np.asarray(self.answers), threshold=12, edgeitems=4, separator=", ")
        return (
            f"SampledAnswers(answers={shown}, shape={np.shape(self.answers)}, "
            f"privacy_guaranteed={self.privacy_guaranteed})"
        )


def quantize_rows(rows: NDArray[np.float64], mixing_weight: float, support: NDArray[np.bool_]) -> NDArray[np.uint64]:
    """Integer weights summing to TOTAL for P' = (1 - lam) P + lam u (u uniform on ``support``).

    Each entry is floor(P'_v * 2**63) (exact: scaling a float by a power of two is exact), and the
    shortfall to 2**63 (a few units from flooring and float summation) goes to the row's largest
    entry. The function of a row is deterministic, so identical float rows get identical weights.
    """
    uniform = np.where(support, 1.0 / max(int(support.sum()), 1), 0.0)
    mixed = (1.0 - mixing_weight) * rows + mixing_weight * uniform
    mixed /= mixed.sum(axis=1, keepdims=True)
    weights = np.minimum(np.floor(np.ldexp(mixed, 63)), float(TOTAL)).astype(np.uint64)
    # Row sums are 2**63 up to ~m * 2**11 units, so they fit in uint64 and the wrapped difference,
    # read as int64, is the exact signed shortfall.
    shortfall = (np.uint64(TOTAL) - weights.sum(axis=1, dtype=np.uint64)).view(np.int64)
    largest = np.argmax(mixed, axis=1)
    index = np.arange(rows.shape[0])
    weights[index, largest] = (weights[index, largest].view(np.int64) + shortfall).view(np.uint64)
    return weights


def _initial_mixing_weight(float_violation: float, epsilon: float, delta: float, support_size: int) -> float:
    """lam large enough that the mixing slack covers the measured float violation plus the
    rounding of a few thousand units of 2**-63 (see the module docstring)."""
    growth = math.exp(min(epsilon, 64.0))
    rounding = (1.0 + growth) * 4096.0 / TOTAL
    need = max(float_violation, 0.0) + _FLOAT_MARGIN + rounding
    # slack per unit lam: (e^eps - 1) u_v for each colour, plus delta when delta > 0.
    per_unit = math.expm1(min(epsilon, 64.0)) / support_size + delta
    if per_unit <= 0.0:
        return 0.0
    return min(4.0 * need / per_unit, 1.0)


class RainbowMechanism:
    """A finite-output mechanism over the datasets (nodes) of a graph, ready to sample.

    Guarantee (docs/privacy/rainbow.md, "What is certified at run time"): for every edge
    d ~ d' of the graph given at construction and every set S of answers,
    P_d(S) <= e^epsilon P_d'(S) + delta, for the exact integer table that :meth:`sample` draws
    from. This is proven at construction by an exact rational check (``certificate`` holds the
    worst violation; it is <= 0). With the package CSPRNG the guarantee is computational DP (the
    generator is indistinguishable from random); with the insecure test RNG there is none
    (``SampledAnswers.privacy_guaranteed`` is False).

    Optimality: the table is the float optimum (line closed form, graph pull-back or LP)
    mixed with weight ``mixing_weight`` with a uniform distribution and rounded to multiples of
    2**-63; so it is within ``mixing_weight + m * 2**-62`` of the optimum in total variation.

    Build it with :func:`dpselect.rainbow.line_mechanism`, :func:`dpselect.rainbow.graph_mechanism`
    or :meth:`from_table`.
    """

    def __init__(
        self,
        *,
        weights: NDArray[np.uint64],
        row_of_node: NDArray[np.int64],
        row_pairs: NDArray[np.int64],
        epsilon: float,
        delta: float,
        certificate: Fraction,
        mixing_weight: float,
        float_rows: NDArray[np.float64],
        description: str,
    ) -> None:
        self._weights = weights
        self._weights.setflags(write=False)
        self._row_of_node = row_of_node
        self._row_of_node.setflags(write=False)
        self._row_pairs = row_pairs
        self._row_pairs.setflags(write=False)
        self._float_rows = float_rows
        self._float_rows.setflags(write=False)
        self.epsilon = epsilon
        self.delta = delta
        self.certificate = certificate
        self.mixing_weight = mixing_weight
        self.description = description
        self._cumulative: dict[int, tuple[NDArray[np.uint64], NDArray[np.int64]]] = {}

    # ----------------------------------------------------------------------------- construction
    @classmethod
    def from_table(
        cls,
        rows: ArrayLike,
        row_pairs: ArrayLike,
        epsilon: float,
        delta: float = 0.0,
        *,
        row_of_node: ArrayLike | None = None,
        description: str = "rainbow mechanism",
    ) -> RainbowMechanism:
        """Quantise and certify a float table.

        ``rows`` (K, m) are the distinct distributions (by colour); ``row_of_node`` (N,) maps each
        dataset to its row (default: one row per dataset); ``row_pairs`` (E, 2) are the pairs of
        rows that are neighbours somewhere in the graph (pairs of equal rows may be omitted).
        Raises ValueError if the float table is not (epsilon, delta)-DP up to 1e-6.
        """
        epsilon = check_epsilon(epsilon)
        delta = check_delta(delta)
        table = check_distribution_rows(rows, "rows")
        n_rows = table.shape[0]
        if row_of_node is None:
            nodes = np.arange(n_rows, dtype=np.int64)
        else:
            nodes = check_index_array(row_of_node, "row_of_node", n_rows, "one row per dataset")
            if nodes.ndim != 1:
                raise ValueError(f"row_of_node must be 1-D (one row index per dataset), got shape {nodes.shape}")
        pairs = check_index_array(row_pairs, "row_pairs", n_rows, "shape (E, 2)")
        if pairs.size == 0:
            pairs = np.zeros((0, 2), dtype=np.int64)
        if pairs.ndim != 2 or pairs.shape[1] != 2:
            raise ValueError(f"row_pairs must have shape (E, 2) (pairs of neighbouring rows), got {pairs.shape}")
        pairs = pairs[pairs[:, 0] != pairs[:, 1]]
        float_violation = dp_violation(table, pairs, epsilon, delta) if pairs.size else 0.0
        if float_violation > _REFUSE_VIOLATION:
            raise ValueError(
                f"the table is not ({epsilon}, {delta})-DP on the given edges: worst violation {float_violation:.3g}"
            )
        support = np.any(table > 0.0, axis=0)
        mixing = _initial_mixing_weight(float_violation, epsilon, delta, int(support.sum()))
        while True:
            weights = quantize_rows(table, mixing, support)
            certificate = exact_dp_violation(weights, TOTAL, pairs, epsilon, delta)
            if certificate <= 0:
                break
            if mixing >= _MAX_MIXING:
                raise ValueError(
                    f"could not certify the quantised table (worst exact violation {float(certificate):.3g}); "
                    "the float table is too far from DP"
                )
            mixing = min(max(mixing * 16.0, 1e-18), _MAX_MIXING)
        return cls(
            weights=weights,
            row_of_node=nodes,
            row_pairs=pairs,
            epsilon=epsilon,
            delta=delta,
            certificate=certificate,
            mixing_weight=mixing,
            float_rows=table,
            description=description,
        )

    # ----------------------------------------------------------------------------- the table
    @property
    def n_datasets(self) -> int:
        return int(self._row_of_node.size)

    @property
    def n_answers(self) -> int:
        return int(self._weights.shape[1])

    @property
    def total(self) -> int:
        """Every row of :attr:`weights` sums to this (2**63)."""
        return TOTAL

    @property
    def weights(self) -> NDArray[np.uint64]:
        """(K, m) read-only integer weights of the distinct rows; P = weights / total exactly."""
        return self._weights

    @property
    def row_of_node(self) -> NDArray[np.int64]:
        """(N,) read-only: the row of :attr:`weights` used by each dataset."""
        return self._row_of_node

    @property
    def probabilities(self) -> NDArray[np.float64]:
        """(N, m) float view of the sampled table (weights / 2**63, rounded to float64)."""
        return np.ldexp(self._weights.astype(np.float64), -63)[self._row_of_node]

    @property
    def optimal_probabilities(self) -> NDArray[np.float64]:
        """(N, m) the float optimum before mixing and quantisation."""
        return self._float_rows[self._row_of_node]

    def exact_probability(self, dataset: int, answer: int) -> Fraction:
        """The exact probability that :meth:`sample` answers ``answer`` for ``dataset``."""
        node = self._check_datasets(dataset)
        if not 0 <= int(answer) < self.n_answers:
            raise ValueError(f"answer must be in [0, {self.n_answers}), got {answer!r}")
        return Fraction(int(self._weights[self._row_of_node[int(node[0])], int(answer)]), TOTAL)

    @property
    def guarantee(self) -> str:
        """The privacy statement of this mechanism, in words."""
        return (
            f"({self.epsilon}, {self.delta})-DP for every pair of neighbouring datasets of the graph given at "
            f"construction, proven by an exact rational check of the quantised table that is "
            f"sampled (worst violation {float(self.certificate):.3g} <= 0); computational DP with the package CSPRNG. "
            f"Optimal up to {self.mixing_weight:.3g} + 2^-62 per answer in total variation ({self.description}). "
            "Statement, proof and caveats: docs/privacy/rainbow.md."
        )

    def __repr__(self) -> str:
        return (
            f"RainbowMechanism(datasets={self.n_datasets}, answers={self.n_answers}, epsilon={self.epsilon}, "
            f"delta={self.delta}, certified={self.certificate <= 0}, mixing_weight={self.mixing_weight:.3g}, "
            f"description={self.description!r})"
        )

    # ----------------------------------------------------------------------------- sampling
    def _check_datasets(self, datasets: Any) -> NDArray[np.int64]:
        raw = np.asarray(datasets)
        if raw.dtype == bool or not np.issubdtype(raw.dtype, np.integer):
            raise TypeError(f"datasets must be integer dataset indices, got dtype {raw.dtype}")
        flat = raw.astype(np.int64).reshape(-1)
        if flat.size and (flat.min() < 0 or flat.max() >= self.n_datasets):
            raise ValueError(f"datasets must be indices in [0, {self.n_datasets})")
        return flat

    def _row_sampler(self, row: int) -> tuple[NDArray[np.uint64], NDArray[np.int64]]:
        # sample_cumulative needs a strictly increasing cumulative: drop zero-weight answers.
        cached = self._cumulative.get(row)
        if cached is None:
            weights = self._weights[row]
            answers = np.flatnonzero(weights).astype(np.int64)
            cached = (np.cumsum(weights[answers], dtype=np.uint64), answers)
            self._cumulative[row] = cached
        return cached

    def sample(self, datasets: int | ArrayLike, rng: Any = None) -> SampledAnswers:
        """Draw one answer for each dataset index in ``datasets`` (an int or an array).

        Randomness comes only from the package CSPRNG (``rng=None``) or an explicit test RNG
        (:func:`dpselect.rng.resolve_rng`). The answer for dataset d is v with probability
        exactly ``weights[row_of_node[d], v] / 2**63``; draws are independent.
        """
        from dpselect.rng import resolve_rng

        generator = resolve_rng(rng)
        shape = np.shape(datasets)
        nodes = self._check_datasets(datasets)
        rows = self._row_of_node[nodes]
        answers = np.empty(nodes.size, dtype=np.int64)
        unique_rows, inverse = np.unique(rows, return_inverse=True)
        order = np.argsort(inverse, kind="stable")
        bounds = np.searchsorted(inverse[order], np.arange(unique_rows.size + 1))
        for position, row in enumerate(unique_rows):
            members = order[bounds[position] : bounds[position + 1]]
            cumulative, labels = self._row_sampler(int(row))
            drawn = np.asarray(generator.sample_cumulative(cumulative, int(members.size)), dtype=np.int64)
            answers[members] = labels[drawn]
        return SampledAnswers(answers=answers.reshape(shape), privacy_guaranteed=bool(generator.privacy_guaranteed))
