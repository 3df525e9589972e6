"""Type stubs for the row-level bounding kernel bindings (dpselect/_bound.pyx)."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from dpselect._rng import TestState

def bound_rows(
    users: npt.NDArray[np.uint32],
    partitions: npt.NDArray[np.uint32],
    n_users: int,
    n_partitions: int,
    kappa: int,
    linf: int,
    values: list[npt.NDArray[np.int64]],
    test_state: TestState | None,
    shard_mask: int = 0,
    shard: int = 0,
    users_before: bool = False,
    kept: npt.NDArray[np.uint8] | None = None,
) -> tuple[
    npt.NDArray[np.int64],
    npt.NDArray[np.int64],
    npt.NDArray[np.uint64],
    npt.NDArray[np.int64] | None,
    dict[str, int],
]: ...

def bound_rows_range(
    users: npt.NDArray[np.uint32],
    partitions: npt.NDArray[np.uint32],
    n_partitions: int,
    kappa: int,
    linf: int,
    values: list[npt.NDArray[np.int64]],
    test_state: TestState | None,
    rows: npt.NDArray[np.uint32],
    first_user: int,
    last_user: int,
    out: tuple[object, ...] | None = None,
    users_before: bool = False,
    kept: npt.NDArray[np.uint8] | None = None,
    squares: Sequence[tuple[int, int, int]] = (),
) -> tuple[object, ...]: ...
def shard_rows_count(codes: npt.NDArray[np.uint32], lo: int, hi: int, n_codes: int, counts: npt.NDArray[np.uintp],
                     marks: npt.NDArray[np.uint8] | None = None) -> None: ...
def shard_rows_place(codes: npt.NDArray[np.uint32], lo: int, hi: int, n_codes: int, cursors: npt.NDArray[np.uintp],
                     limits: npt.NDArray[np.uintp], rows: npt.NDArray[np.uint32],
                     marks: npt.NDArray[np.uint8] | None = None,
                     copies: tuple[npt.NDArray[np.uint32], npt.NDArray[np.uint32], npt.NDArray[np.uint32]] | None = None
                     ) -> None: ...

MARK_KEPT: int
MARK_USER: int
MARK_BEFORE: int

def bound_rows_mark(users: npt.NDArray[np.uint32], partitions: npt.NDArray[np.uint32], rows: npt.NDArray[np.uint32],
                    n_partitions: int, kappa: int, linf: int, test_state: TestState | None, first_user: int,
                    last_user: int, marks: npt.NDArray[np.uint8]) -> dict[str, int]: ...
def partition_sums(partitions: npt.NDArray[np.uint32], marks: npt.NDArray[np.uint8], rows: npt.NDArray[np.uint32],
                   first: int, last: int, n_partitions: int, values: list[npt.NDArray[np.int64]],
                   out: tuple[object, ...], squares: Sequence[tuple[int, int, int]] = ()) -> None: ...
