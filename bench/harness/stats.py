"""Percentiles, paired ratios, and how the tables write figures: one definition of each.

A missing figure is `nan` (no values, a zero denominator): it propagates through arithmetic and
is written `—`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import TypeVar

K = TypeVar("K")
T = TypeVar("T")
NAN = float("nan")


def percentile(values: Iterable[float], q: float) -> float:
    """The `q` quantile (0 to 1) by linear interpolation between the closest ranks; `nan` for no values.

    At whole percents, `statistics.quantiles(values, n=100, method="inclusive")`; at 0.5, the median.
    """
    ordered = sorted(values)
    if not ordered:
        return NAN
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def median(values: Iterable[float]) -> float:
    return percentile(values, 0.5)


def ratio(mine: float, theirs: float) -> float:
    """`mine / theirs`, or `nan` when `theirs` is zero."""
    return mine / theirs if theirs else NAN


def paired_ratio(mine: Mapping[K, float], theirs: Mapping[K, float]) -> float:
    """The median of `mine[k] / theirs[k]` over the keys both measured (`theirs[k] > 0`).

    Two sides' rounds of the same key ran back to back on the same core: pairing them cancels the
    machine's changes of speed between rounds, which a ratio of totals would not.
    """
    return median(
        mine[key] / theirs[key]
        for key in mine.keys() & theirs.keys()
        if theirs[key] > 0 and not math.isnan(mine[key])
    )


def ms(seconds: float, digits: int = 1) -> str:
    """Seconds as milliseconds with `digits` decimals, or `—`."""
    return "—" if math.isnan(seconds) else f"{seconds * 1000:.{digits}f}"


def ms_short(seconds: float) -> str:
    """Milliseconds for a wide table: whole ones (thousands separated) from 100 up, one decimal below."""
    if math.isnan(seconds):
        return "—"
    milliseconds = seconds * 1000
    return f"{milliseconds:,.0f}" if abs(milliseconds) >= 100 else f"{milliseconds:.1f}"


def times(value: float) -> str:
    """A ratio as `1.23x`, or `—`."""
    return "—" if math.isnan(value) else f"{value:.2f}x"


def rotated(items: Sequence[T], by: int) -> list[T]:
    """`items` starting from the `by`-th (modulo their number): round `n`'s order, for sides that take turns."""
    by %= max(len(items), 1)
    return [*items[by:], *items[:by]]
