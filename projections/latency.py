"""A mergeable summary of durations: count, sum, sum of squares, extremes and a fixed
log-bucket histogram (buckets 10% wide from 1 µs to 10 min). Summaries of any set of
windows add up to the summary of their union, so p50/p95/p99, mean and stdev come out
for any period, and a row stays bounded (at most ``BUCKETS + 2`` counts)."""

from __future__ import annotations

import math
from collections.abc import Iterable

import msgspec

LOW = 1e-6  # 1 µs: bucket 1 starts here (bucket 0 holds everything faster)
HIGH = 600.0  # 10 min: the last bucket holds everything slower
RATIO = 1.1  # each bucket 10% wider than the one before
BUCKETS = math.ceil(math.log(HIGH / LOW) / math.log(RATIO))  # 213 between LOW and HIGH
_LOG_RATIO = math.log(RATIO)


def bucket(seconds: float) -> int:
    """The bucket of a duration: 0 below LOW, ``BUCKETS + 1`` at or above HIGH."""
    if not seconds >= LOW:  # also NaN
        return 0
    if seconds >= HIGH:
        return BUCKETS + 1
    # The float log can land a hair off at an exact edge; the edges themselves decide.
    i = int(math.log(seconds / LOW) / _LOG_RATIO) + 1
    if seconds < lower(i):
        return i - 1
    if i < BUCKETS and seconds >= lower(i + 1):
        return i + 1
    return i


def lower(i: int) -> float:
    """The lower edge of bucket ``i`` (``i`` from 1)."""
    return LOW * RATIO ** (i - 1)


class Latency(msgspec.Struct, frozen=True, omit_defaults=True):
    """Durations in seconds, summed up (``buckets``: bucket index -> count, sparse)."""

    n: int = 0
    total: float = 0.0
    squares: float = 0.0
    low: float = 0.0  # the shortest seen (when n > 0)
    high: float = 0.0  # the longest seen
    buckets: dict[int, int] = {}

    def add(self, seconds: float) -> Latency:
        seconds = max(0.0, seconds)
        b = dict(self.buckets)
        i = bucket(seconds)
        b[i] = b.get(i, 0) + 1
        first = self.n == 0
        return Latency(
            self.n + 1,
            self.total + seconds,
            self.squares + seconds * seconds,
            seconds if first else min(self.low, seconds),
            seconds if first else max(self.high, seconds),
            b,
        )

    def merge(self, other: Latency) -> Latency:
        if other.n == 0:
            return self
        if self.n == 0:
            return other
        b = dict(self.buckets)
        for i, c in other.buckets.items():
            b[i] = b.get(i, 0) + c
        return Latency(
            self.n + other.n,
            self.total + other.total,
            self.squares + other.squares,
            min(self.low, other.low),
            max(self.high, other.high),
            b,
        )

    @property
    def mean(self) -> float | None:
        return self.total / self.n if self.n else None

    @property
    def stdev(self) -> float | None:
        """The population standard deviation."""
        if not self.n:
            return None
        mean = self.total / self.n
        return math.sqrt(max(0.0, self.squares / self.n - mean * mean))

    def quantile(self, q: float) -> float | None:
        """The nearest-rank ``q`` quantile, as its bucket's geometric middle (within 5%
        of the true value), kept inside the shortest and longest durations seen."""
        if not self.n:
            return None
        rank = max(1, math.ceil(q * self.n))
        seen = 0
        for i in sorted(self.buckets):
            seen += self.buckets[i]
            if seen >= rank:
                return min(self.high, max(self.low, _middle(i)))
        return self.high  # unreachable while the counts add up to n


def _middle(i: int) -> float:
    if i <= 0:
        return 0.0  # kept at the shortest seen
    if i > BUCKETS:
        return HIGH
    return lower(i) * math.sqrt(RATIO)


def merged(summaries: Iterable[Latency]) -> Latency:
    out = Latency()
    for s in summaries:
        out = out.merge(s)
    return out
