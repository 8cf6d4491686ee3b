"""``engine.schedule`` checks every field before anything is stored (one clear error), on
every backend: the name (no ``@``), the cadence, the queue, the input as ``engine.run``
checks it (it fits the agent; secret fields only in an encrypted store; JSON data); a
forged row reads as ``CorruptData``."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import all_backends, backends, raw_sql
from eventsourcing.cipher import AESCipher

from engine import Engine
from engine.errors import CorruptData, UsageError
from engine.runtime.schedules.cadence import Cadence
from engine.store.cipher import CIPHER_ENV
from tests.agents.schedule_agents import keyed, report


@all_backends
def test_a_schedule_is_defined_listed_and_removed(eng: Engine) -> None:
    s = eng.schedule("nightly", report, cron="0 2 * * *", team="data")
    assert (s.name, s.agent, s.cadence, s.input) == (
        "nightly",
        "tests.agents.schedule_agents:report",
        Cadence(cron="0 2 * * *"),
        {"team": "data"},
    )
    assert (s.queue, s.catch_up, s.last_run) == ("default", False, None)
    eng.schedule("often", report, every=2, queue="reports", catch_up=True)
    assert [x.name for x in eng.schedules()] == ["nightly", "often"]
    eng.unschedule("nightly")
    assert [x.name for x in eng.schedules()] == ["often"]
    with pytest.raises(UsageError, match="no schedule named 'nightly'"):
        eng.unschedule("nightly")


@pytest.mark.parametrize("name", ["a@b", "", " x", "x y", "-x", "x" * 101, "x/y", "é", "x\n", 7])
def test_a_bad_name_is_refused(eng: Engine, name: Any) -> None:
    with pytest.raises(UsageError, match="not a schedule name"):
        eng.schedule(name, report, every=5)
    assert eng.schedules() == []


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"every": 0}, "1 to 31622400 seconds"),
        ({"cron": "*/5 * * *"}, "not five fields"),
        ({"cron": "0 25 * * *"}, "Bad hour"),
        ({}, "give one"),
        ({"every": 5, "queue": "a\nb"}, "a queue name is"),
        ({"every": 5, "catch_up": "yes"}, "catch_up is True or False"),
        ({"every": 5, "teem": "x"}, "input does not fit agent"),
        ({"every": 5, "team": b"ops"}, "JSON data"),
        ({"every": 5, "team": {1: "x"}}, "cannot be recorded|JSON data"),
    ],
)
def test_a_bad_field_is_one_clear_error_and_nothing_is_stored(
    eng: Engine, options: dict[str, Any], message: str
) -> None:
    with pytest.raises(UsageError, match=message):
        eng.schedule("nightly", report, **options)
    assert eng.schedules() == []


def test_secret_input_is_refused_in_clear_and_kept_in_an_encrypted_store(
    eng: Engine, tmp_path: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As ``engine.run`` takes a secret field only when the store seals what it stores."""
    with pytest.raises(UsageError, match="secret fields"):
        eng.schedule("keyed", keyed, every=60, api_key="sk-1")
    assert eng.schedules() == []
    monkeypatch.setenv(CIPHER_ENV, AESCipher.create_key(32))
    e = Engine(f"sqlite:///{tmp_path}/sealed.db")
    try:
        assert e.schedule("keyed", keyed, every=60, api_key="sk-1").input == {"api_key": "sk-1"}
    finally:
        e.close()


@all_backends
def test_redefining_a_schedule_replaces_it(eng: Engine) -> None:
    eng.schedule("nightly", report, cron="0 2 * * *")
    again = eng.schedule("nightly", report, every=30, team="x")
    assert (again.cadence, again.input) == (Cadence(every=30), {"team": "x"})
    assert len(eng.schedules()) == 1


@backends("sqlite", "postgres")
def test_a_forged_row_is_corrupt_data(eng: Engine, store_url: str) -> None:
    eng.schedule("nightly", report, cron="0 2 * * *")
    raw_sql(store_url, "UPDATE {s}agentlog_schedules SET cron = '61 * * * *'")
    with pytest.raises(CorruptData, match=r"schedule 'nightly' is damaged: .*Bad minute"):
        eng.schedules()
