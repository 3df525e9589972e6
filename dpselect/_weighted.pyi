import numpy as np
import numpy.typing as npt

from dpselect._rng import TestState

def weighted_round(ends: npt.NDArray[np.uintp], grouped: npt.NDArray[np.uint32],
                   excluded: npt.NDArray[np.bool_] | None, kappa: int, weights: npt.NDArray[np.int64],
                   histogram: npt.NDArray[np.int64], test_state: TestState | None = None) -> None: ...
def weighted_prefix(ends: npt.NDArray[np.uintp], grouped: npt.NDArray[np.uint32],
                    excluded: npt.NDArray[np.bool_] | None, kappa: int, weights: npt.NDArray[np.int64],
                    histogram: npt.NDArray[np.int64]) -> None: ...
def shuffle_sets(ends: npt.NDArray[np.uintp], grouped: npt.NDArray[np.uint32],
                 test_state: TestState | None = None) -> None: ...
def normal_upper_tail(z: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]: ...
