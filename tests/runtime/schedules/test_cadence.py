"""The tick math of schedules, pure: which ticks a span holds, which are due, and the
run id of each (UTC; month ends; ``every`` on gaps; catch-up; one clear error per bad
cadence)."""

from __future__ import annotations

import datetime as dt

import pytest

from engine.errors import UsageError
from engine.log.history import check_run_id
from engine.runtime.schedules.cadence import (
    MAX_TICKS,
    Cadence,
    cadence,
    due,
    latest_ticks,
    next_tick,
    parse_tick,
    tick_id,
    tick_text,
)


def at(text: str) -> float:
    """Epoch seconds of an ISO time, UTC."""
    return dt.datetime.fromisoformat(text).replace(tzinfo=dt.UTC).timestamp()


EVERY2 = Cadence(every=2)
HOURLY = Cadence(cron="0 * * * *")


def test_every_fires_at_multiples_of_its_seconds_since_the_epoch() -> None:
    """Ticks of every=2 are the even seconds, whatever time a worker looks from."""
    assert next_tick(EVERY2, 100.0) == 102.0
    assert next_tick(EVERY2, 101.3) == 102.0
    assert latest_ticks(EVERY2, 100.0, 107.9, 10) == [102.0, 104.0, 106.0]
    assert latest_ticks(EVERY2, 100.0, 108.0, 2) == [106.0, 108.0]  # the latest, oldest first


def test_a_span_holds_ticks_after_its_start_and_up_to_its_end() -> None:
    assert latest_ticks(EVERY2, 102.0, 104.0, 10) == [104.0]
    assert latest_ticks(EVERY2, 104.0, 104.0, 10) == []
    t = at("2026-03-01T05:00:00")
    assert latest_ticks(HOURLY, t, t + 3600, 10) == [t + 3600]


def test_cron_at_month_ends_goes_from_january_31_to_february_28() -> None:
    """ "0 0 31 * *" skips the months without a 31st; "0 0 L * *" is each month's last day."""
    assert tick_text(next_tick(cadence("0 0 31 * *"), at("2026-01-31T00:00:00")) or 0) == (
        "2026-03-31T00:00:00Z"
    )
    last = cadence("0 0 L * *")
    ends = latest_ticks(last, at("2026-01-15T00:00:00"), at("2028-03-01T00:00:00"), 100)
    texts = [tick_text(t) for t in ends]
    assert texts[:2] == ["2026-01-31T00:00:00Z", "2026-02-28T00:00:00Z"]
    assert "2028-02-29T00:00:00Z" in texts  # a leap year's February
    assert len(texts) == 26  # January 2026 to February 2028


def test_cron_evaluates_in_utc_with_no_daylight_saving_gap() -> None:
    """02:30 every day exists every day (no zone, so no spring-forward hole)."""
    c = cadence("30 2 * * *")
    got = latest_ticks(c, at("2026-03-28T00:00:00"), at("2026-04-01T00:00:00"), 10)
    assert [tick_text(t) for t in got] == [f"2026-03-{d}T02:30:00Z" for d in (28, 29, 30, 31)]


def test_a_worker_watching_all_along_gets_every_tick_even_when_its_loop_is_late() -> None:
    """every=2, a gap of 7 s between two looks of one worker: the three ticks in it are due."""
    assert due(EVERY2, last=100.0, now=107.5, watched_since=100.5, catch_up=False) == [
        102.0,
        104.0,
        106.0,
    ]


def test_a_tick_this_worker_watched_is_due_even_if_another_recorded_a_later_one() -> None:
    """Worker B came back at 106 and started only 106; worker A, watching since 101 but
    late, still owes 102 and 104."""
    assert due(EVERY2, last=106.0, now=107.0, watched_since=101.0, catch_up=False) == [
        102.0,
        104.0,
        106.0,
    ]


def test_ticks_missed_while_no_worker_ran_are_skipped_but_the_latest() -> None:
    """A worker starting at 120 after an outage since 100 starts only the tick at 120."""
    assert due(EVERY2, last=100.0, now=120.0, watched_since=None, catch_up=False) == [120.0]
    # A worker that has watched since 110 owes the ticks after 110, and the latest before.
    assert due(EVERY2, last=100.0, now=115.0, watched_since=110.0, catch_up=False) == [
        110.0,
        112.0,
        114.0,
    ]


def test_catch_up_starts_every_missed_tick_bounded() -> None:
    assert due(EVERY2, last=100.0, now=108.0, watched_since=None, catch_up=True) == [
        102.0,
        104.0,
        106.0,
        108.0,
    ]
    long = due(EVERY2, last=0.0, now=1_000_000.0, watched_since=None, catch_up=True)
    assert len(long) == MAX_TICKS and long[-1] == 1_000_000.0  # the latest, not the oldest


def test_nothing_is_due_before_the_next_tick() -> None:
    assert due(EVERY2, last=102.0, now=103.9, watched_since=102.5, catch_up=True) == []
    assert (
        due(
            HOURLY,
            last=at("2026-01-01T00:00:00"),
            now=at("2026-01-01T00:59:59"),
            watched_since=None,
            catch_up=False,
        )
        == []
    )


def test_a_tick_is_a_run_id_the_engine_accepts_and_reads_back() -> None:
    t = at("2026-12-03T02:00:00")
    assert tick_id("nightly", t) == "nightly@2026-12-03T02:00:00Z"
    assert check_run_id(tick_id("n" * 100, t)) == "n" * 100 + "@2026-12-03T02:00:00Z"
    assert parse_tick(tick_text(t)) == t
    assert parse_tick("plan") is None


@pytest.mark.parametrize(
    ("cron", "every", "message"),
    [
        (None, None, "give one"),
        ("* * * * *", 5, "give one"),
        ("*/5 * * *", None, "not five fields .*: it has 4"),
        ("0 0 * * * *", None, "not five fields .*: it has 6"),
        ("61 * * * *", None, "Bad minute"),
        ("0 0 30 2 *", None, "does not read"),
        ("a b c d e", None, "does not read"),
        ("*\n * * * *", None, "not a cron expression"),
        (5, None, "a string, not int"),
        (None, 0, "1 to 31622400 seconds"),
        (None, -2, "1 to 31622400 seconds"),
        (None, 1.5, "whole number of seconds"),
        (None, True, "whole number of seconds"),
        (None, float("nan"), "whole number of seconds"),
        (None, 10**9, "1 to 31622400 seconds"),
    ],
)
def test_a_bad_cadence_is_one_clear_error(cron: object, every: object, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        cadence(cron, every)


def test_a_cron_expression_is_kept_with_its_spaces_normalised() -> None:
    assert cadence("*/5  *  * * *") == Cadence(cron="*/5 * * * *")
    assert cadence(None, 2.0) == Cadence(every=2)


def test_diff_takes_a_tick_run_id_whole_and_splits_a_position_after_it() -> None:
    """``agentlog diff RUN[@AT]``: the ``@`` of a tick belongs to the run id."""
    from replay.diff import parse_spec

    assert parse_spec("nightly@2026-12-03T02:00:00Z") == ("nightly@2026-12-03T02:00:00Z", None)
    assert parse_spec("nightly@2026-12-03T02:00:00Z@5") == ("nightly@2026-12-03T02:00:00Z", "5")
    assert parse_spec("abc@plan") == ("abc", "plan")
    assert parse_spec("abc") == ("abc", None)
