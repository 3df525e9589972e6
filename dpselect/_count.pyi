"""Type stubs for the C counting kernel bindings (dpselect/_count.pyx)."""
from __future__ import annotations

import numpy as np
import numpy.typing as npt

from dpselect._rng import TestState

CODE_LIMIT: int

class PairCounter:
    def __init__(self, expected_pairs: int = 0) -> None: ...
    def __repr__(self) -> str: ...
    def feed(self, users: npt.NDArray[np.uint32], partitions: npt.NDArray[np.uint32]) -> None: ...
    @property
    def n_pairs(self) -> int: ...
    @property
    def nbytes(self) -> int: ...
    def finish(
        self, n_partitions: int, kappa: int, cap: int | None, test_state: TestState | None
    ) -> npt.NDArray[np.int64]: ...
