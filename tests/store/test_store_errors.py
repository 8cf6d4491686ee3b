"""Store errors: one clear AgentlogError naming the store, password masked, nothing written.

Opening failures are :class:`StoreUnavailable` (retryable); oversized payloads are
:class:`PayloadTooLarge`; a broken store at run time is :class:`StoreError`. No sqlite3 or
psycopg exception type escapes the store adapter.
"""

from __future__ import annotations

import os
import sqlite3
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import psycopg
import pytest
from conftest import PG_URL, all_backends, drop_schema
from structlog.testing import capture_logs

from engine import Engine
from engine import events as ev
from engine.errors import (
    AgentlogError,
    ConcurrencyError,
    PayloadTooLarge,
    StoreError,
    StoreUnavailable,
    UsageError,
)
from engine.log.history import RunWriter, rebuild
from engine.log.snapshots import save_snapshot, snapshot_at_or_before
from engine.log.state import RunState
from engine.store import Append, Snapshot, Store, mask, open_store
from engine.store.codec import encode_event

PG_HOST = "127.0.0.1:5432"


def _unavailable(url: str) -> StoreUnavailable:
    with pytest.raises(StoreUnavailable) as info:
        open_store(url)
    err = info.value
    assert isinstance(err, StoreError) and isinstance(err, AgentlogError)
    assert err.retryable is True
    assert mask(url) in str(err)
    return err


def _no_foreign_types(err: BaseException) -> None:
    assert not isinstance(err, sqlite3.Error | psycopg.Error)


# --- URLs -------------------------------------------------------------------------------


def test_mask_hides_only_the_password() -> None:
    """mask() replaces the password with *** and leaves every other part of the URL alone."""
    assert mask("postgresql://bob:s3cret@db:5432/x?schema=a") == (
        "postgresql://bob:***@db:5432/x?schema=a"
    )
    assert mask("postgresql://bob@db/x") == "postgresql://bob@db/x"
    assert mask("sqlite:///./a.db") == "sqlite:///./a.db"


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://u:s3cret@[::1/x",  # urlsplit rejects the host
        "postgresql://u:s3cret@host:99999/x",  # port out of range
        "postgresql://u:s3cret@host:port/x",  # port not a number
        "mysql://u:s3cret@[bad/x",
    ],
)
def test_a_malformed_url_never_shows_its_password(url: str) -> None:
    """Even a URL the parser rejects is reported with its password masked."""
    with pytest.raises(StoreUnavailable) as info:
        open_store(url)
    assert "s3cret" not in str(info.value) and "u:***@" in str(info.value)
    assert "s3cret" not in mask(url)


def test_unknown_scheme_is_store_unavailable_with_the_password_masked() -> None:
    """An unknown scheme names the scheme and the store, never the password."""
    err = _unavailable("mysql://root:hunter2@db.example/app")
    assert "hunter2" not in str(err)
    assert "mysql://root:***@db.example/app" in str(err)
    assert "'mysql'" in str(err)


@pytest.mark.parametrize("url", ["agentlog.db", "", "sqlite:///", "sqlite://agentlog.db"])
def test_a_string_that_is_no_store_url_is_store_unavailable(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A string without a scheme, or an SQLite URL without a path, is refused clearly."""
    monkeypatch.setenv("AGENTLOG_URL", "nonsense")  # "" falls back to $AGENTLOG_URL
    with pytest.raises(StoreUnavailable, match="sqlite:///"):
        open_store(url)


def test_non_integer_size_option_is_store_unavailable() -> None:
    """A size option in the URL that is not an integer names the option."""
    with pytest.raises(StoreUnavailable, match="blob_threshold must be an integer"):
        open_store("memory://?blob_threshold=big")


# --- PostgreSQL -------------------------------------------------------------------------


def test_unreachable_server_is_store_unavailable_with_the_password_masked() -> None:
    """A refused connection names host and port, masks the password, and chains the cause."""
    err = _unavailable("postgresql://postgres:s3cret@127.0.0.1:1/x")
    text = str(err)
    assert "s3cret" not in text
    assert "postgresql://postgres:***@127.0.0.1:1/x" in text
    assert "refused" in text.lower()
    _no_foreign_types(err)
    assert isinstance(err.__cause__, psycopg.Error)


@pytest.mark.postgres
def test_unknown_role_is_store_unavailable_naming_the_role() -> None:
    """Connecting as a role that does not exist says so, with the password masked."""
    role = f"nobody_{uuid.uuid4().hex[:8]}"
    err = _unavailable(f"postgresql://{role}:pw-{role}@{PG_HOST}/agentlog_test")
    assert f'role "{role}" does not exist' in str(err)
    assert f"pw-{role}" not in str(err) and "***" in str(err)


@pytest.mark.postgres
def test_unknown_database_is_store_unavailable_naming_the_database() -> None:
    """Connecting to a database that does not exist says so, with the password masked."""
    db = f"nodb_{uuid.uuid4().hex[:8]}"
    err = _unavailable(f"postgresql://postgres:pw-{db}@{PG_HOST}/{db}")
    assert f'database "{db}" does not exist' in str(err)
    assert f"pw-{db}" not in str(err) and "***" in str(err)


def test_postgres_url_without_database_is_store_unavailable() -> None:
    """A PostgreSQL URL must name host and database."""
    with pytest.raises(StoreUnavailable, match="expected postgresql://"):
        open_store(f"postgresql://postgres:pw@{PG_HOST}/")


@pytest.mark.postgres
def test_conflict_on_postgres_names_the_store_with_the_password_masked() -> None:
    """Errors raised after opening name the store by its masked URL too."""
    schema = f"t_errors_{uuid.uuid4().hex[:8]}"
    base = PG_URL.split("?")[0].replace("postgresql://postgres@", "postgresql://postgres:zz9pz@")
    store = open_store(f"{base}?schema={schema}")  # trust auth ignores the password
    try:
        stream = uuid.uuid4()
        step = ev.StepStarted(at=1.0, call=1, name="s")
        store.append([Append(stream, 1, step)])
        with pytest.raises(ConcurrencyError) as info:
            store.append([Append(stream, 1, step)])
        assert "zz9pz" not in str(info.value)
        assert "postgresql://postgres:***@" in str(info.value)
        _no_foreign_types(info.value)
    finally:
        store.close()
        drop_schema(schema)


# --- SQLite -----------------------------------------------------------------------------


def test_sqlite_directory_that_does_not_exist_is_store_unavailable(tmp_path: Path) -> None:
    """A path under a missing directory names that directory and creates nothing."""
    missing = tmp_path / "no" / "such"
    err = _unavailable(f"sqlite:///{missing}/agentlog.db")
    assert f"directory {missing} does not exist" in str(err)
    assert not (tmp_path / "no").exists()


def test_sqlite_path_that_is_a_directory_is_store_unavailable(tmp_path: Path) -> None:
    """A path naming a directory says it is a directory."""
    err = _unavailable(f"sqlite:///{tmp_path}")
    assert "is a directory" in str(err)


def test_sqlite_file_that_is_not_a_database_is_store_unavailable(tmp_path: Path) -> None:
    """A file of random bytes is refused as not a database, and left byte-for-byte unchanged."""
    path = tmp_path / "junk.db"
    junk = os.urandom(8192)
    path.write_bytes(junk)
    err = _unavailable(f"sqlite:///{path}")
    assert "not a database" in str(err)
    _no_foreign_types(err)
    assert path.read_bytes() == junk


def test_bad_sqlite_synchronous_mode_is_store_unavailable(tmp_path: Path) -> None:
    """An unknown ?synchronous= value lists the accepted ones."""
    with pytest.raises(StoreUnavailable, match="FULL, NORMAL"):
        open_store(f"sqlite:///{tmp_path}/a.db?synchronous=SOMETIMES")


def test_sqlite_table_dropped_under_the_store_is_a_store_error(tmp_path: Path) -> None:
    """A failure after opening surfaces as StoreError naming the store, not as sqlite3.Error."""
    url = f"sqlite:///{tmp_path}/a.db"
    store = open_store(url)
    try:
        with sqlite3.connect(tmp_path / "a.db") as conn:
            conn.execute("DROP TABLE agentlog_events")
        with pytest.raises(StoreError) as info:
            store.read(uuid.uuid4())
        assert url in str(info.value)
        _no_foreign_types(info.value)
    finally:
        store.close()


# --- payload caps -----------------------------------------------------------------------


def _sized(store: Store) -> tuple[ev.ToolSucceeded, int]:
    """A ToolSucceeded event and its encoded size, well above the store's blob threshold."""
    event = ev.ToolSucceeded(at=1.0, call=1, tool="t", result="x" * (store.blob_threshold * 3))
    return event, len(encode_event(event)[1])


@all_backends
def test_payload_above_the_cap_raises_and_writes_nothing(store_url: str) -> None:
    """An event above max_payload raises PayloadTooLarge; its batch and no blob are written."""
    store = open_store(store_url, blob_threshold=100, max_payload=1000)
    try:
        a, b = uuid.uuid4(), uuid.uuid4()
        small = ev.StepStarted(at=1.0, call=1, name="s")
        big = ev.ToolSucceeded(at=1.0, call=2, tool="t", result="y" * 2000)
        with pytest.raises(PayloadTooLarge) as info:
            store.append([Append(a, 1, small), Append(b, 1, big)])
        assert isinstance(info.value, UsageError) and info.value.retryable is False
        assert "tool_succeeded" in str(info.value) and "1000-byte cap" in str(info.value)
        assert store.read(a) == [] and store.read(b) == []
        assert store.read_all() == [] and store.max_global_position() == 0
        assert _blob_rows(store_url, store) == 0
    finally:
        store.close()


@all_backends
def test_payload_exactly_at_the_cap_is_accepted(store_url: str) -> None:
    """The cap is inclusive: a payload of exactly max_payload bytes is stored and read back."""
    probe = open_store("memory://", blob_threshold=100)
    event, size = _sized(probe)
    store = open_store(store_url, blob_threshold=100, max_payload=size)
    try:
        stream = uuid.uuid4()
        store.append([Append(stream, 1, event)])
        assert [r.event for r in store.read(stream)] == [event]
        tighter = open_store(store_url, blob_threshold=100, max_payload=size - 1)
        try:
            with pytest.raises(PayloadTooLarge):
                tighter.append([Append(stream, 2, event)])
        finally:
            tighter.close()
        assert store.last_position(stream) == 1
    finally:
        store.close()


@all_backends
def test_snapshot_above_the_cap_raises_and_saves_nothing(store_url: str) -> None:
    """A snapshot larger than max_payload raises PayloadTooLarge and no snapshot is stored."""
    store = open_store(store_url, blob_threshold=100, max_payload=1000)
    try:
        stream = uuid.uuid4()
        state = RunState(run_id=stream.hex, position=3, output={"doc": "z" * 5000})
        with pytest.raises(PayloadTooLarge, match="snapshot payload"):
            save_snapshot(store, stream, state)
        assert snapshot_at_or_before(store, stream, None) is None
        assert _blob_rows(store_url, store) == 0
    finally:
        store.close()


@all_backends
def test_a_state_too_large_to_snapshot_does_not_fail_the_committed_append(store_url: str) -> None:
    """RunWriter skips (with a warning) a snapshot above the cap; its events stay committed."""
    store = open_store(store_url, blob_threshold=100, max_payload=1000)
    try:
        run_id = uuid.uuid4().hex
        w = RunWriter(store, RunState(run_id=run_id), snapshot_every=4)
        w.append(ev.AgentStarted(at=1.0, agent="a:b", import_path="a"))
        with capture_logs() as logs:  # 2..4 crosses 4: a snapshot of result and output
            state = w.append(
                ev.ToolInvoked(at=2.0, call=1, tool="t"),
                ev.ToolSucceeded(at=3.0, call=1, tool="t", result="x" * 600),
                ev.AgentFinished(at=4.0, output="y" * 600),
            )
        assert state.position == 4 == w.state.position
        assert [r.position for r in store.read(w.stream)] == [1, 2, 3, 4]
        assert snapshot_at_or_before(store, w.stream, None) is None
        assert [e["event"] for e in logs] == ["snapshot_too_large"]
        assert rebuild(store, run_id) == state
    finally:
        store.close()


def test_threshold_above_the_cap_is_a_usage_error() -> None:
    """A blob threshold larger than the hard cap is refused when the store is opened."""
    with pytest.raises(UsageError, match="blob_threshold"):
        open_store("memory://", blob_threshold=2000, max_payload=1000)


def _blob_rows(store_url: str, store: Store) -> int:
    """How many blob chunks the store holds, counted behind its back."""
    if store_url.startswith("memory"):
        return len(store._blobs._stored_events)  # type: ignore[attr-defined]
    if store_url.startswith("sqlite"):
        with sqlite3.connect(store_url[len("sqlite:///") :]) as conn:
            return int(conn.execute("SELECT count(*) FROM agentlog_blobs").fetchone()[0])
    schema = store_url.rsplit("schema=", 1)[1]
    with psycopg.connect(store_url.split("?")[0]) as conn:
        row = conn.execute(f'SELECT count(*) FROM "{schema}".agentlog_blobs').fetchone()
        return int(row[0]) if row else -1


@all_backends
def test_a_failed_snapshot_write_does_not_fail_the_committed_append(
    eng: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The events of a commit are durable before its snapshot is saved: a store error while
    saving the snapshot (a shortcut for rebuilds) neither fails the run nor makes the run
    write its deferred outcomes or its resume marker a second time."""
    sent: Counter[str] = Counter()

    @eng.tool(side_effect=True)
    def charge(order: str, *, idempotency_key: str) -> dict[str, str]:
        sent[order] += 1
        return {"receipt": order}

    @eng.agent(snapshot_every=2)  # the charge's commit reaches position 4: a snapshot
    def snapshotting(run: Any) -> str:
        charge("o1")  # outcome deferred into the checkpoint's commit
        run.checkpoint("after-charge")
        charge("o2")
        return "done"

    failed: list[int] = []

    def broken(_stream: Any, state: Snapshot) -> None:
        failed.append(state.position)
        raise StoreError("the store went away while saving a snapshot")

    monkeypatch.setattr(eng.store, "save_snapshot", broken)
    r = eng.run(snapshotting)
    assert r.status == "completed", r.error
    assert failed, "no snapshot was attempted: the test proves nothing"
    types = [e.type for e in eng.events(r.run_id)]
    assert types.count("tool_succeeded") == 2
    assert types.count("checkpoint") == 1
    assert sent == Counter(o1=1, o2=1)
