"""An engine's guards around tool calls: circuit breakers, retry budgets, adaptive timeouts.

They are the engine's memory, not history: a breaker's transitions are recorded as events in
the tool's own stream, budgets and latency statistics live in memory. Clock, sleep and
random source come from the engine's config (tests pass fakes there), fixed once built.
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ...kinds import CircuitState
from ...policy.failure import CircuitBreaker

if TYPE_CHECKING:
    from .config import EngineConfig

Clock = Callable[[], float]


@dataclass
class Breaker:
    """closed -> open after ``failure_threshold`` failures in a row; open -> half-open after
    ``reset_timeout``; half-open lets one trial through: success closes, failure reopens.

    While the trial is out every other call fails fast. A trial that never reports (its
    run was stopped mid-call) stops blocking after another ``reset_timeout``."""

    settings: CircuitBreaker
    clock: Clock
    state: CircuitState = CircuitState.CLOSED
    failures: int = 0
    opened_at: float = 0.0
    trial_at: float | None = None  # when the half-open trial now out was let through
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def allow(self) -> tuple[bool, CircuitState | None]:
        """Whether a call may go through, and the transition this caused, if any."""
        with self._lock:
            now = self.clock()
            if self.state == CircuitState.OPEN:
                if now - self.opened_at < self.settings.reset_timeout:
                    return False, None
                self.state, self.trial_at = CircuitState.HALF_OPEN, now
                return True, CircuitState.HALF_OPEN
            if self.state == CircuitState.HALF_OPEN:
                if self.trial_at is not None and now - self.trial_at < self.settings.reset_timeout:
                    return False, None
                self.trial_at = now
            return True, None

    def success(self) -> CircuitState | None:
        with self._lock:
            was, self.state, self.failures, self.trial_at = self.state, CircuitState.CLOSED, 0, None
            return CircuitState.CLOSED if was != CircuitState.CLOSED else None

    def release(self) -> None:
        """The call ended in a way that says nothing of the tool's health (a permanent or
        logical failure): a half-open breaker may let its next trial through."""
        with self._lock:
            self.trial_at = None

    def failure(self) -> CircuitState | None:
        with self._lock:
            self.failures += 1
            self.trial_at = None
            if self.state == CircuitState.HALF_OPEN or (
                self.state == CircuitState.CLOSED
                and self.failures >= self.settings.failure_threshold
            ):
                self.state, self.opened_at = CircuitState.OPEN, self.clock()
                return CircuitState.OPEN
            return None


@dataclass
class TokenBucket:
    """A global retry budget per tool: ``capacity`` retries, refilled at ``rate`` per second."""

    capacity: float
    rate: float
    clock: Clock
    tokens: float = -1.0
    stamp: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def take(self) -> bool:
        with self._lock:
            now = self.clock()
            if self.tokens < 0:
                self.tokens, self.stamp = self.capacity, now
            self.tokens = min(self.capacity, self.tokens + (now - self.stamp) * self.rate)
            self.stamp = now
            if self.tokens < 1:
                return False
            self.tokens -= 1
            return True


@dataclass
class Latency:
    """Running mean and deviation of a tool's latency (Welford): timeout = mean + k * stdev."""

    k: float = 3.0
    floor: float = 0.05
    ceiling: float = 60.0
    default: float = 10.0
    min_samples: int = 5
    window: int = 200  # recent samples dominate: older ones decay away
    n: int = 0
    mean: float = 0.0
    m2: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, seconds: float) -> None:
        with self._lock:
            if self.n >= self.window:  # forget proportionally, so a shift shows quickly
                self.m2 *= (self.window - 1) / self.window
                self.n = self.window - 1
            self.n += 1
            delta = seconds - self.mean
            self.mean += delta / self.n
            self.m2 += delta * (seconds - self.mean)

    def timeout(self) -> float:
        with self._lock:
            if self.n < self.min_samples:
                return self.default
            sigma = math.sqrt(self.m2 / (self.n - 1)) if self.n > 1 else 0.0
            return min(self.ceiling, max(self.floor, self.mean + self.k * sigma))


@dataclass(frozen=True, eq=False)
class Guards:
    """The guards of one engine: settings (fixed at construction, from its config) plus
    per-tool state, created on first use."""

    run_retry_budget: int = 50
    tool_retry_capacity: float = 100.0
    tool_retry_rate: float = 10.0
    clock: Clock = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    rng: random.Random = field(default_factory=random.Random)
    breakers: dict[str, Breaker] = field(default_factory=dict)
    buckets: dict[str, TokenBucket] = field(default_factory=dict)
    latencies: dict[str, Latency] = field(default_factory=dict)
    tool_threads: int = 8
    threads: dict[str, threading.BoundedSemaphore] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def of(cls, config: EngineConfig) -> Guards:
        """The guards an engine built with ``config`` starts with."""
        return cls(
            run_retry_budget=config.run_retry_budget,
            tool_retry_capacity=config.tool_retry_capacity,
            tool_retry_rate=config.tool_retry_rate,
            clock=config.clock,
            sleep=config.sleep,
            rng=config.rng,
            tool_threads=config.tool_threads,
        )

    def breaker(self, tool: str, settings: CircuitBreaker) -> Breaker:
        with self._lock:
            if tool not in self.breakers:
                self.breakers[tool] = Breaker(settings, self.clock)
            return self.breakers[tool]

    def bucket(self, tool: str) -> TokenBucket:
        with self._lock:
            if tool not in self.buckets:
                self.buckets[tool] = TokenBucket(
                    self.tool_retry_capacity, self.tool_retry_rate, self.clock
                )
            return self.buckets[tool]

    def latency(self, tool: str) -> tuple[Latency, bool]:
        """The tool's latency statistics, and whether they were just created (to seed)."""
        with self._lock:
            fresh = tool not in self.latencies
            if fresh:
                self.latencies[tool] = Latency()
            return self.latencies[tool], fresh

    def slots(self, tool: str) -> threading.BoundedSemaphore:
        """The threads the tool's timed sync attempts may occupy (``tool_threads``)."""
        with self._lock:
            if tool not in self.threads:
                self.threads[tool] = threading.BoundedSemaphore(self.tool_threads)
            return self.threads[tool]
