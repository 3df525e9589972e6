"""The reference for every code map's tests: codes from the definition (a dict in row order)."""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def first_appearance(values: Iterable[Any]) -> tuple[list[int], list[int]]:
    """(codes, new_rows): 0, 1, 2, ... in order of first appearance (None, the null, one value),
    and the row where each value first appears."""
    seen: dict[Any, int] = {}
    codes, new_rows = [], []
    for row, value in enumerate(values):
        if value not in seen:
            seen[value] = len(seen)
            new_rows.append(row)
        codes.append(seen[value])
    return codes, new_rows
