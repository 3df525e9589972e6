import numpy as np
import numpy.typing as npt

from dpselect._rng import TestState
from dpselect.errors import DPSelectError

class NegativeCountError(DPSelectError, ValueError):
    index: int
    def __init__(self, index: int) -> None: ...

class KeepTableHandle:
    """Private copy of an (N,) or (N, limbs) uint64 keep table, checked on load."""
    length: int
    limbs: int
    tail_certain: bool
    def __init__(self, q: npt.NDArray[np.uint64], tail_certain: bool = True) -> None: ...

class WeightTableHandle:
    size: int
    def __init__(self, cumulative: npt.NDArray[np.uint64]) -> None: ...

def first_negative(counts: npt.NDArray[np.integer]) -> int: ...
def select_into(counts: npt.NDArray[np.integer], table: KeepTableHandle, out: npt.NDArray[np.bool_],
                test_state: TestState | None = None) -> None: ...
def release_into(counts: npt.NDArray[np.integer], noise: WeightTableHandle, k: int,
                 keep: npt.NDArray[np.bool_], noisy: npt.NDArray[np.int64],
                 test_state: TestState | None = None, threshold: int | None = None,
                 keep_all: bool = False) -> None: ...
