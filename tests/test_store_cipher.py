"""Encryption at rest: with ``AGENTLOG_CIPHER_KEY`` (or ``?cipher=env``) event payloads,
snapshots and blob chunks are stored AES-GCM-sealed on every backend, while topics,
positions, stream ids and the run index stay readable. A run round-trips (run, resume
after a crash or a SIGKILL, state, timeline, export); the raw rows hold no plaintext; a
wrong, missing or unexpected key is one clear error naming the variable, never garbage."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import sys
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from agents import service
from agents.kit import Crash, engine_call, python, stored_bytes
from conftest import all_backends, backends, read_raw_rows, schema_of, write_raw_row
from eventsourcing.cipher import AESCipher
from test_cli_kit import agentlog, one_line_error

from engine import Engine
from engine import events as ev
from engine.errors import CipherError, StoreUnavailable
from engine.log.snapshots import save_snapshot, snapshot_at_or_before
from engine.log.state import RunState
from engine.store import Append, BlobRef, Store, cipher_configured, open_store, stream_id
from engine.store.base import BLOB_SUFFIX
from engine.store.cipher import CIPHER_ENV, Row, sealed_rows
from replay.cli.entry import run_cli
from replay.transfer import export_lines, import_run

KEY = AESCipher.create_key(32)
OTHER_KEY = AESCipher.create_key(16)
MARK = "PLAINTEXT-MARKER-7c1f9e"
BIG = MARK * (300 * 1024 // len(MARK))  # above the 256 KiB blob threshold
TABLES = ("events", "snapshots", "blobs")


@pytest.fixture
def keyed(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv(CIPHER_ENV, KEY)
    return KEY


def table_bytes(url: str, store: Store, table: str) -> bytes:
    """Every stored payload of ``table`` exactly as the database holds it."""
    name = f"agentlog_{table}"
    if url.startswith("memory"):
        rows = getattr(store, "_" + table)._stored_events
        return b"".join(bytes(r.state) for r in rows)
    if url.startswith("sqlite"):
        with sqlite3.connect(url.split("?")[0][len("sqlite:///") :]) as conn:
            return b"".join(bytes(r[0]) for r in conn.execute(f"SELECT state FROM {name}"))
    with psycopg.connect(url.split("?")[0], autocommit=True) as conn:
        found = conn.execute(f'SELECT state FROM "{schema_of(url)}".{name}')
        return b"".join(bytes(r[0]) for r in found)


def _events(stream: uuid.UUID) -> list[Append]:
    return [
        Append(
            stream, 1, ev.AgentStarted(at=1.0, agent="m:a", import_path="m", input={"note": MARK})
        ),
        Append(stream, 2, ev.ToolSucceeded(at=2.0, call=1, tool="t", result=MARK)),
        Append(stream, 3, ev.ToolSucceeded(at=3.0, call=2, tool="t", result=BIG)),
    ]


# --- the store ----------------------------------------------------------------------------


@all_backends
@pytest.mark.parametrize("encrypted", [True, False], ids=["encrypted", "clear"])
def test_each_table_holds_plaintext_only_when_not_encrypted(
    store_url: str, encrypted: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Events (inline and out of line), snapshots and blob chunks read back the same either
    way; the marker is in every table's raw bytes in clear, and in none when encrypted.
    Topics stay readable."""
    if encrypted:
        monkeypatch.setenv(CIPHER_ENV, KEY)
    store = open_store(store_url)
    try:
        assert store.encrypted is encrypted
        stream = uuid.uuid4()
        appends = _events(stream)
        store.append(appends)
        small = RunState(run_id="r", position=2, plan=[MARK])
        big = RunState(run_id="r", position=3, output=BIG)  # out of line, in a blob
        save_snapshot(store, stream, small)
        save_snapshot(store, stream, big)
        assert [r.event for r in store.read(stream)] == [a.event for a in appends]
        assert [r.event for r in store.read_all()] == [a.event for a in appends]
        assert snapshot_at_or_before(store, stream, 2) == small
        assert snapshot_at_or_before(store, stream, None) == big
        for table in TABLES:
            raw = table_bytes(store_url, store, table)
            assert raw, table
            assert (MARK.encode() in raw) is not encrypted, table
        topics = [r.topic for r in read_raw_rows(store, "events", stream)]
        assert topics == ["agent_started:1", "tool_succeeded:1", "tool_succeeded:1" + BLOB_SUFFIX]
    finally:
        store.close()


@backends("sqlite", "postgres")
def test_a_wrong_missing_or_unexpected_key_is_one_clear_error(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sealed store reopened with another key or without one is refused when opened
    (for reading too), naming the variable and never the key; a sealed row read with
    another key says "cannot decrypt" (snapshots too: not skipped as corrupt)."""
    monkeypatch.setenv(CIPHER_ENV, KEY)
    store = open_store(store_url)
    stream = uuid.uuid4()
    store.append(_events(stream)[:2])
    save_snapshot(store, stream, RunState(run_id="r", position=2))
    store.close()
    other = sealed_rows("s", OTHER_KEY)
    row = Row("events", stream, 1, "x")
    with pytest.raises(CipherError, match=f"cannot decrypt the event .* key in {CIPHER_ENV}"):
        other.unseal("s", row, sealed_rows("s", KEY).seal(row, b"data"))
    monkeypatch.setenv(CIPHER_ENV, OTHER_KEY)
    for create in (True, False):
        with pytest.raises(CipherError, match="is not the key this store was sealed with") as e:
            open_store(store_url, create=create)
        assert KEY not in str(e.value) and OTHER_KEY not in str(e.value)
    monkeypatch.delenv(CIPHER_ENV)
    for create in (True, False):
        with pytest.raises(CipherError, match=f"is encrypted .* {CIPHER_ENV} is not set"):
            open_store(store_url, create=create)


@backends("sqlite", "postgres")
def test_a_key_on_a_store_written_in_clear_says_so(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store written without encryption, opened with a key: a writer is refused (it
    would mix sealed rows in), and a reader's row says the store was written in clear,
    rather than taking unauthenticated rows as genuine."""
    store = open_store(store_url)
    stream = uuid.uuid4()
    store.append(_events(stream)[:2])
    store.close()
    monkeypatch.setenv(CIPHER_ENV, KEY)
    with pytest.raises(CipherError, match="was written in clear and is not sealed"):
        open_store(store_url)
    store = open_store(store_url, create=False)
    try:
        with pytest.raises(CipherError, match=f"is not encrypted, but {CIPHER_ENV} is set"):
            store.read(stream)
    finally:
        store.close()


@all_backends
def test_a_sealed_row_moved_to_another_place_does_not_open(store_url: str, keyed: str) -> None:
    """Each row is bound to its table, stream, position and topic: a genuine ciphertext
    copied to another run's stream (or position) is refused, not replayed there."""
    store = open_store(store_url)
    try:
        victim, forged = uuid.uuid4(), uuid.uuid4()
        store.append(_events(victim)[:2])
        store.append([Append(forged, 1, ev.AgentStarted(at=1.0, agent="m:a", import_path="m"))])
        (_, row) = read_raw_rows(store, "events", victim)
        write_raw_row(store_url, store, "events", forged, 2, row.topic, bytes(row.state))
        with pytest.raises(
            CipherError, match=f"cannot decrypt the event at position 2 of stream {forged}"
        ):
            store.read(forged)
    finally:
        store.close()


@all_backends
def test_blob_addresses_are_keyed_so_equal_content_is_not_recognisable(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In clear a blob's address is the SHA-256 of its content; encrypted, it is a keyed
    hash that differs between keys, so no one can confirm a guessed payload by hashing it."""
    data = BIG.encode()
    plain = hashlib.sha256(data).hexdigest()
    addresses = []
    for key in (None, KEY, OTHER_KEY):
        if key is None:
            monkeypatch.delenv(CIPHER_ENV, raising=False)
        else:
            monkeypatch.setenv(CIPHER_ENV, key)
        store = open_store("memory://")
        try:
            ref = store.put_blob(data)
            assert store.get_blob(ref) == data
            addresses.append(ref.sha256)
        finally:
            store.close()
    assert addresses[0] == plain
    assert len({plain, *addresses[1:]}) == 3
    monkeypatch.setenv(CIPHER_ENV, KEY)
    store = open_store(store_url)
    try:
        ref = store.put_blob(data)
        assert ref == BlobRef(addresses[1], len(data))
        assert store.get_blob(ref) == data
        assert not read_raw_rows(store, "blobs", stream_id("blob:" + plain))
    finally:
        store.close()


# --- opening ------------------------------------------------------------------------------


def test_cipher_env_without_a_key_is_store_unavailable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``?cipher=env`` insists on the key; nothing is created without it."""
    monkeypatch.delenv(CIPHER_ENV, raising=False)
    with pytest.raises(StoreUnavailable, match=f"cipher=env, but {CIPHER_ENV} is not set"):
        open_store(f"sqlite:///{tmp_path}/a.db?cipher=env")
    assert not (tmp_path / "a.db").exists()


@pytest.mark.parametrize(
    "bad",
    ["not base64!", "c2hvcnQ=", "QUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUE=AAAA", "  "],
    ids=["not-base64", "5-bytes", "32-bytes-and-more", "blank"],
)
def test_a_key_that_is_not_an_aes_key_is_refused_without_showing_it(
    bad: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not base64, or not 16/24/32 bytes: StoreUnavailable naming the variable and how to
    make a key; the value itself is never shown. (Blank counts as unset.)"""
    monkeypatch.setenv(CIPHER_ENV, bad)
    if not bad.strip():
        with pytest.raises(StoreUnavailable, match=CIPHER_ENV):
            open_store("memory://?cipher=env")
        return
    with pytest.raises(StoreUnavailable) as info:
        open_store("memory://")
    assert CIPHER_ENV in str(info.value) and "create_key" in str(info.value)
    assert bad not in str(info.value)


def test_without_the_crypto_extra_a_key_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    """pycryptodome is optional: a key set without it is refused, saying what to install."""
    monkeypatch.setenv(CIPHER_ENV, KEY)
    monkeypatch.setitem(sys.modules, "eventsourcing.cipher", None)  # as if not installed
    with pytest.raises(StoreUnavailable, match=r"pip install 'agentlog\[crypto\]'"):
        open_store("memory://")
    assert not open_store("memory://?cipher=none").encrypted


def test_a_cipher_other_than_env_or_none_is_refused() -> None:
    with pytest.raises(StoreUnavailable, match="cipher must be env or none"):
        open_store("memory://?cipher=aes")


def test_cipher_configured_follows_the_variable_and_the_url(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """True with a key set or ``?cipher=env``; ``?cipher=none`` opts out; the URL defaults
    to $AGENTLOG_URL."""
    monkeypatch.delenv(CIPHER_ENV, raising=False)
    monkeypatch.delenv("AGENTLOG_URL", raising=False)
    assert not cipher_configured("memory://") and not cipher_configured(None)
    assert cipher_configured("sqlite:///a.db?cipher=env")
    monkeypatch.setenv("AGENTLOG_URL", "memory://?cipher=env")
    assert cipher_configured(None)
    monkeypatch.setenv(CIPHER_ENV, KEY)
    assert cipher_configured("memory://")
    assert not cipher_configured("memory://?cipher=none")
    assert open_store("memory://").encrypted and not open_store("memory://?cipher=none").encrypted


# --- a run --------------------------------------------------------------------------------


@all_backends
def test_an_encrypted_run_round_trips_and_stores_no_plaintext(
    store_url: str, keyed: str, tmp_path: Path
) -> None:
    """A run with input, results (one > 256 KiB, so a blob), a decision, a plan and a
    checkpoint crashes, resumes, and reads back (state, events, export, import into
    another encrypted store); no stored byte holds the marker, while the run index and
    the topics stay readable."""
    eng = Engine.open(store_url)
    crash = {"on": True}

    @eng.tool
    def fetch(n: int) -> str:
        return BIG if n > 1 else MARK

    @eng.tool(side_effect=True)
    def send(text: str, *, idempotency_key: str) -> str:
        if crash["on"]:
            raise Crash
        return "sent " + text

    @eng.agent(snapshot_every=2)
    def flow(run: Any, note: str) -> dict[str, Any]:
        run.plan([MARK + "-step"])
        small, big = fetch(1), fetch(2)
        run.checkpoint("fetched")
        plan = run.decide("plan", lambda: MARK + "-plan")
        return {"note": note, "sent": send(small + plan), "big": len(big)}

    try:
        with pytest.raises(Crash):
            eng.run(flow, run_id="enc-run", note=MARK + "-input")
        crash["on"] = False
        r = eng.resume("enc-run")
        expected = {"note": MARK + "-input", "sent": f"sent {MARK}{MARK}-plan", "big": len(BIG)}
        assert (r.status, r.output) == ("completed", expected)
        assert eng.state("enc-run").output == expected
        assert eng.state("enc-run", at="fetched").plan == [MARK + "-step"]
        events = eng.events("enc-run")
        assert [e.data.get("result") for e in events if e.type == "tool_succeeded"][:2] == [
            MARK,
            BIG,
        ]
        lines = b"".join(export_lines(eng, "enc-run"))
        assert MARK.encode() in lines

        data = stored_bytes(store_url, eng)
        assert MARK.encode() not in data
        assert b"tool_succeeded:1" + BLOB_SUFFIX.encode() in data
        assert store_url.startswith("memory") or b"enc-run" in data  # the run index

        copy = Engine.open(f"sqlite:///{tmp_path}/copy.db")
        try:
            assert import_run(copy, lines) == ("enc-run", True)
            imported = [(e.type, e.data) for e in copy.events("enc-run")]
            assert imported[-1][0] == "run_imported"  # import records itself after the run
            assert imported[:-1] == [(e.type, e.data) for e in events]
            assert MARK.encode() not in stored_bytes(f"sqlite:///{tmp_path}/copy.db", copy)
        finally:
            copy.close()
    finally:
        eng.close()


@backends("sqlite", "postgres")
def test_a_killed_encrypted_run_resumes_in_a_new_process_with_the_key_only(
    store_url: str, tmp_path: Path
) -> None:
    """SIGKILLed after a charge was sent; a new process with the same key resumes it to the
    uncrashed output with each effect once. With another key, or none, the CLI refuses in
    one line naming AGENTLOG_CIPHER_KEY and changes nothing."""
    svc = str(tmp_path / "service.db")
    service.reset(svc)
    env = {"AGENTLOG_TEST_SERVICE": svc, CIPHER_ENV: KEY}
    data = json.dumps({"order": MARK, "n": 2})
    p = python(
        "-m",
        "tests.agents.runtime_agents",
        store_url,
        "kill-run",
        "durable_flow",
        data,
        env={**env, "AGENTLOG_FAILPOINTS": "after_tool:2"},
    )
    assert p.returncode == -9, p.stderr[-2000:]

    for other, needle in ((OTHER_KEY, "cannot decrypt"), ("", "is encrypted")):
        r = agentlog(
            "resume",
            "kill-run",
            "--url",
            store_url,
            cwd=Path(__file__).parents[1],
            env={**env, CIPHER_ENV: other},
        )
        one_line_error(r, needle, CIPHER_ENV)
    assert sum(service.effects(svc).values()) == 1

    r = engine_call(store_url, "resume", "kill-run", env=env)
    assert (r["status"], r["output"]["quote"]) == ("completed", 100 * len(MARK))
    assert sum(service.effects(svc).values()) == 3
    eng = Engine.open(store_url)
    try:
        assert MARK.encode() not in stored_bytes(store_url, eng)
    finally:
        eng.close()


def test_reading_commands_with_the_wrong_key_exit_2_naming_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The store's seal does not open with another key: ``runs`` (which reads only the
    index), ``timeline``, ``state`` and ``export`` refuse in one line, exit 2."""
    url = f"sqlite:///{tmp_path}/a.db"
    monkeypatch.setenv(CIPHER_ENV, KEY)
    eng = Engine.open(url)

    @eng.agent
    def hello(run: Any, name: str) -> str:
        return f"hello {name}"

    rid = eng.run(hello, name=MARK).run_id
    eng.close()
    monkeypatch.setenv(CIPHER_ENV, OTHER_KEY)
    for command in ("runs", "timeline", "state", "export"):
        assert run_cli([command, *([] if command == "runs" else [rid]), "--url", url]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"with the key in {CIPHER_ENV}" in err, err
        assert MARK not in err
