"""The schedules table on memory, SQLite and PostgreSQL: a schedule is upserted (keeping
when it was made and the last tick handled), removed, listed by name; its last tick only
moves forward, whoever races; its input is sealed in an encrypted store; a damaged row is
one clear error and stops no other schedule."""

from __future__ import annotations

import threading

import msgspec
import pytest
from conftest import all_backends, backends, raw_sql
from eventsourcing.cipher import AESCipher

from engine.errors import CorruptData, UsageError
from engine.store import Store, open_store
from engine.store.cipher import CIPHER_ENV
from engine.store.schedules import ScheduleRow

T0 = 1_700_000_000.0
MARK = "PLAINTEXT-MARKER-51ab"


def row(name: str = "nightly", **changes: object) -> ScheduleRow:
    base = ScheduleRow(
        name=name,
        agent="tests.agents.x:report",
        import_path="tests.agents.x",
        cron="0 2 * * *",
        every=None,
        input=msgspec.json.encode({"team": "ops"}),
        queue="default",
        catch_up=False,
        created_at=T0,
    )
    return msgspec.structs.replace(base, **changes)


@all_backends
def test_a_schedule_is_stored_listed_by_name_and_removed(store: Store) -> None:
    store.schedules.put(row("zeta"))
    store.schedules.put(row("alpha", cron=None, every=2, catch_up=True, queue="q1"))
    assert [r.name for r in store.schedules.all()] == ["alpha", "zeta"]
    assert store.schedules.get("alpha") == row(
        "alpha", cron=None, every=2, catch_up=True, queue="q1"
    )
    assert store.schedules.delete("zeta") is True
    assert store.schedules.delete("zeta") is False
    assert [r.name for r in store.schedules.all()] == ["alpha"]


@all_backends
def test_redefining_keeps_its_creation_and_last_tick(store: Store) -> None:
    store.schedules.put(row())
    assert store.schedules.advance("nightly", T0 + 100) is True
    store.schedules.put(row(cron="0 3 * * *", created_at=T0 + 500, input=b'{"team":"dev"}'))
    got = store.schedules.get("nightly")
    assert got == row(cron="0 3 * * *", input=b'{"team":"dev"}', last_tick=T0 + 100)


@all_backends
def test_the_last_tick_only_moves_forward(store: Store) -> None:
    store.schedules.put(row())
    assert store.schedules.advance("nightly", T0 + 10) is True
    assert store.schedules.advance("nightly", T0 + 5) is False
    assert store.schedules.advance("nightly", T0 + 10) is False
    assert store.schedules.advance("missing", T0 + 10) is False
    got = store.schedules.get("nightly")
    assert got is not None and got.last_tick == T0 + 10


@backends("sqlite", "postgres")
def test_racing_workers_leave_the_latest_tick(store_url: str) -> None:
    """Eight threads, each on its own store, advance the tick in shuffled orders."""
    first = open_store(store_url)
    first.schedules.put(row())
    stores = [open_store(store_url) for _ in range(8)]
    start = threading.Barrier(len(stores))

    def advance(i: int) -> None:
        start.wait()
        for k in range(20):
            stores[i].schedules.advance("nightly", T0 + (k * 7 + i * 13) % 160)

    threads = [threading.Thread(target=advance, args=(i,)) for i in range(len(stores))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    got = first.schedules.get("nightly")
    assert got is not None and got.last_tick == T0 + 159
    for s in (first, *stores):
        s.close()


@backends("sqlite", "postgres")
def test_schedules_outlive_the_process_that_stored_them(store_url: str) -> None:
    s = open_store(store_url)
    s.schedules.put(row())
    s.close()
    again = open_store(store_url)
    assert again.schedules.get("nightly") == row()
    again.close()


@backends("sqlite", "postgres")
def test_an_encrypted_store_seals_a_schedules_input(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CIPHER_ENV, AESCipher.create_key(32))
    s = open_store(store_url)
    s.schedules.put(row(input=msgspec.json.encode({"note": MARK})))
    assert s.schedules.get("nightly") == row(input=msgspec.json.encode({"note": MARK}))
    s.close()
    raw = _raw_input(store_url)
    assert MARK.encode() not in raw and raw[:2] == b"\xc1\x01"


def _raw_input(url: str) -> bytes:
    """The stored bytes of the schedule's input, read behind the store's back."""
    if url.startswith("sqlite"):
        import sqlite3

        with sqlite3.connect(url.removeprefix("sqlite:///")) as db:
            return bytes(db.execute("SELECT input FROM agentlog_schedules").fetchone()[0])
    import psycopg
    from conftest import schema_of

    with psycopg.connect(url.split("?")[0]) as db:
        got = db.execute(f'SELECT input FROM "{schema_of(url)}".agentlog_schedules').fetchone()
        assert got is not None
        return bytes(got[0])


@backends("sqlite")
def test_a_damaged_row_is_one_clear_error(store_url: str) -> None:
    """SQLite keeps any value in any column: a forged one is refused as it is read (the
    runtime checks the values of well-typed rows: tests/runtime/schedules)."""
    s = open_store(store_url)
    s.schedules.put(row())
    raw_sql(store_url, "UPDATE {s}agentlog_schedules SET created_at = 'soon'")
    with pytest.raises(CorruptData, match="a row of agentlog_schedules is damaged"):
        s.schedules.all()
    s.close()


def test_a_read_only_store_refuses_a_schedule(tmp_path: object) -> None:
    """An empty database opened without creating a store reads as empty, writes nothing."""
    import sqlite3

    sqlite3.connect(f"{tmp_path}/empty.db").close()
    s = open_store(f"sqlite:///{tmp_path}/empty.db", create=False)
    with pytest.raises(UsageError, match="no store here yet"):
        s.schedules.put(row())


@backends("sqlite", "postgres")
def test_reseal_seals_the_inputs_stored_in_clear(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store written in clear, resealed with the key: the schedule's input is sealed in
    place (its definition and last tick kept) and reads back with the key."""
    from engine.store import reseal as resealing

    clear = open_store(store_url)
    clear.schedules.put(row(input=msgspec.json.encode({"note": MARK})))
    clear.schedules.advance("nightly", T0 + 60)
    clear.close()
    assert MARK.encode() in _raw_input(store_url)
    monkeypatch.setenv(CIPHER_ENV, AESCipher.create_key(32))
    s = open_store(store_url, create=False)
    assert resealing.reseal(s) == 1
    assert s.schedules.reseal() == 0  # once is enough
    assert s.schedules.get("nightly") == row(
        input=msgspec.json.encode({"note": MARK}), last_tick=T0 + 60
    )
    s.close()
    raw = _raw_input(store_url)
    assert MARK.encode() not in raw and raw[:2] == b"\xc1\x01"
