"""A deterministic clock for the policy tests: time moves only when the engine sleeps."""

from __future__ import annotations

import random
from collections.abc import Iterator

from engine import Engine


class FakeTime:
    """A clock that only moves when the engine sleeps; records every sleep."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def timed_engine(store_url: str, fake: FakeTime, seed: int) -> Iterator[Engine]:
    """An engine on ``store_url`` whose guards use ``fake`` time and a seeded random source
    (for a fixture: ``yield from timed_engine(...)``)."""
    e = Engine.open(store_url)
    e.guards.clock, e.guards.sleep, e.guards.rng = fake, fake.sleep, random.Random(seed)
    yield e
    e.close()
