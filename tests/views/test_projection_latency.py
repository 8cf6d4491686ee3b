"""The latency summary of the tools view: buckets 10% wide from 1 µs to 10 min, each
edge in its own bucket; merged summaries equal one summary of all their durations, and
quantiles fall within 5% of the nearest-rank values."""

from __future__ import annotations

import math
import random

import pytest

from projections.latency import BUCKETS, HIGH, LOW, Latency, bucket, lower


def test_buckets_are_ten_percent_wide_and_cover_a_microsecond_to_ten_minutes() -> None:
    """Every bucket edge maps to its own bucket, the one below it to the bucket before;
    faster than 1 µs is bucket 0, ten minutes and more the last."""
    assert bucket(LOW / 2) == 0 and bucket(HIGH) == bucket(1e6) == BUCKETS + 1
    assert lower(BUCKETS) < HIGH <= lower(BUCKETS + 1)
    for i in range(1, BUCKETS + 1):
        assert bucket(lower(i)) == i
        assert bucket(math.nextafter(lower(i), 0.0)) == i - 1  # one float below the edge
        assert lower(i + 1) / lower(i) == pytest.approx(1.1)


def test_merged_summaries_equal_one_summary_of_all() -> None:
    """Adding durations to two summaries and merging them gives the summary of all."""
    rng = random.Random(7)
    sample = [rng.lognormvariate(-3, 1.5) for _ in range(500)]
    one, a, b = Latency(), Latency(), Latency()
    for n, d in enumerate(sample):
        one = one.add(d)
        if n % 3:
            a = a.add(d)
        else:
            b = b.add(d)
    assert a.merge(Latency()) == Latency().merge(a) == a
    for both in (a.merge(b), b.merge(a)):
        assert (both.n, both.buckets) == (one.n, one.buckets)
        assert (both.low, both.high) == (one.low, one.high)
        assert both.total == pytest.approx(one.total)
        assert both.squares == pytest.approx(one.squares)
    both = a.merge(b)
    ranked = sorted(sample)
    for q in (0.5, 0.9, 0.95, 0.99, 1.0):
        assert both.quantile(q) == pytest.approx(ranked[math.ceil(q * 500) - 1], rel=0.05)


def test_microsecond_calls_get_percentiles_of_their_own() -> None:
    """Durations of tens of microseconds (a cached read) are spread over buckets, so the
    median is near the true one, not the fastest seen (as when all fell below the floor)."""
    s = Latency()
    for us in range(10, 31):  # 10..30 µs, median 20 µs
        s = s.add(us * 1e-6)
    p50 = s.quantile(0.5)
    assert p50 is not None and abs(p50 - 20e-6) <= 0.1 * 20e-6, p50
