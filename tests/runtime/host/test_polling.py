"""``engine.polling.poll_until``, the one polling loop: it looks at once, pauses with a
doubling delay up to a cap, looks a last time at the deadline (read on the clock it is
given), returns the first value that is not None or False (0 counts), and ends early
when its stop event is set; a pause on ``news`` ends when the news moved on. Its async
twin pauses on the event loop."""

from __future__ import annotations

import asyncio
import threading

import pytest

from engine.polling import poll_until, poll_until_async


class FakeTime:
    """A clock that moves only by the sleeps it is asked for."""

    def __init__(self) -> None:
        self.now = 100.0
        self.pauses: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.pauses.append(seconds)
        self.now += seconds


def test_it_backs_off_doubling_to_the_cap_and_looks_last_at_the_deadline() -> None:
    t, looks = FakeTime(), []

    def never() -> None:
        looks.append(t.now)

    got = poll_until(never, 1.0, first=0.1, most=0.4, clock=t.clock, sleep=t.sleep)
    assert got is None
    assert t.pauses == pytest.approx([0.1, 0.2, 0.4, 0.3])  # the last pause ends at the deadline
    assert looks[0] == 100.0 and looks[-1] == pytest.approx(101.0) and len(looks) == 5


def test_it_returns_the_first_value_that_is_neither_none_nor_false() -> None:
    t, answers = FakeTime(), iter([None, False, 0, 7])
    assert poll_until(lambda: next(answers), 5.0, clock=t.clock, sleep=t.sleep) == 0
    assert len(t.pauses) == 2


def test_without_a_deadline_it_waits_until_ready() -> None:
    t, answers = FakeTime(), iter([None] * 50 + ["done"])
    got = poll_until(lambda: next(answers), None, first=1.0, most=60.0, sleep=t.sleep)
    assert got == "done" and max(t.pauses) == 60.0


def test_a_set_stop_event_ends_the_wait_after_one_look() -> None:
    stop, looks = threading.Event(), []
    stop.set()
    assert poll_until(lambda: looks.append(1), None, stop=stop) is None
    assert looks == [1]


def test_setting_the_stop_event_ends_a_pause_at_once() -> None:
    stop, looked = threading.Event(), threading.Event()
    setter = threading.Thread(target=lambda: looked.wait(30) and stop.set())
    setter.start()
    assert poll_until(looked.set, None, first=3600.0, stop=stop) is None  # type: ignore[func-returns-value]
    setter.join(30)


def test_a_pause_on_news_waits_from_the_version_seen_before_the_look() -> None:
    class News:
        version = 3
        waits: list[tuple[int, float]] = []

        def wait(self, seen: int, timeout: float) -> None:
            self.waits.append((seen, timeout))
            self.version += 1  # something changed during the pause

    news, answers = News(), iter([None, None, "x"])

    def ready() -> str | None:
        return next(answers)

    assert poll_until(ready, None, first=0.5, most=2.0, news=news) == "x"
    assert news.waits == [(3, 0.5), (4, 1.0)]


def test_the_async_wait_backs_off_on_the_loop_and_looks_last_at_the_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    t, looks = FakeTime(), []

    async def slept(seconds: float) -> None:
        t.sleep(seconds)

    monkeypatch.setattr(asyncio, "sleep", slept)

    def never() -> None:
        looks.append(t.now)

    got = asyncio.run(poll_until_async(never, 1.0, first=0.1, most=0.4, clock=t.clock))
    assert got is None
    assert t.pauses == pytest.approx([0.1, 0.2, 0.4, 0.3])
    assert looks[-1] == pytest.approx(101.0) and len(looks) == 5


def test_the_async_wait_returns_what_a_look_found_without_blocking_the_loop() -> None:
    answers = iter([None, None, "x"])

    async def both() -> tuple[str | None, int]:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0)

        task = asyncio.ensure_future(ticker())
        got = await poll_until_async(lambda: next(answers), 5.0, first=0.01)
        task.cancel()
        return got, ticks

    got, ticks = asyncio.run(both())
    assert got == "x" and ticks > 0  # the loop ran other work during the pauses
