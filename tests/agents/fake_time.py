"""A deterministic clock for the policy tests: time moves only when the engine sleeps."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from typing import Any

from engine import Engine, EngineConfig


class FakeTime:
    """A clock that only moves when the engine sleeps; records every sleep, then runs the
    test's ``then`` hook (say, to interrupt the run or bring a service up)."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []
        self.then: Callable[[], None] | None = None

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds
        if self.then is not None:
            self.then()


def timed_config(fake: FakeTime, seed: int, **settings: Any) -> EngineConfig:
    """Settings whose clock and sleep are ``fake`` and whose random source is seeded."""
    return EngineConfig(clock=fake, sleep=fake.sleep, rng=random.Random(seed), **settings)


def timed_engine(store_url: str, fake: FakeTime, seed: int, **settings: Any) -> Iterator[Engine]:
    """An engine on ``store_url`` built with :func:`timed_config` (for a fixture:
    ``yield from timed_engine(...)``)."""
    e = Engine(store_url, config=timed_config(fake, seed, **settings))
    yield e
    e.close()


def timed_engines(store_url: str, fake: FakeTime, seed: int) -> Iterator[Callable[..., Engine]]:
    """A maker of timed engines with more settings (``make(run_retry_budget=3)``), each
    closed at the end (for a fixture: ``yield from timed_engines(...)``)."""
    made: list[Engine] = []

    def make(**settings: Any) -> Engine:
        made.append(Engine(store_url, config=timed_config(fake, seed, **settings)))
        return made[-1]

    yield make
    for e in made:
        e.close()
