"""A store whose rows are partly in clear and partly encrypted (an old store written
before the seal, then by a writer with the key; or clear rows planted in a sealed store)
is named as such by every reader, with the command that repairs it; ``agentlog reseal``
with the key encrypts the clear rows in place (none of their bytes left in the SQLite
file or a pg_dump), is idempotent and resumable, seals the store, and refuses without
the key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import backends, write_raw_row
from eventsourcing.cipher import AESCipher
from test_cli_kit import make_workdir, one_line_error

from engine import Engine
from engine.errors import CipherError, MixedRows
from engine.log.history import run_stream
from engine.store import open_store
from engine.store import reseal as resealing
from engine.store.cipher import CIPHER_ENV
from engine.store.codec import encode_event
from tests.secrets.test_secrets_scan import raw_store

HOLDER = "Josephine Quackenbush-Mixed"
KEY = AESCipher.create_key(32)


def _holds(url: str) -> bool:
    """Whether the holder's name is in the SQLite file or the pg_dump (bytea: as hex)."""
    dump = raw_store(url)
    return HOLDER.encode() in dump or HOLDER.encode().hex().encode() in dump


def _card(eng: Engine) -> Any:
    @eng.tool
    def charge(holder: str) -> str:
        return f"charged {holder}"

    @eng.agent(name="mixed:card", snapshot_every=2)
    def card(run: Any, holder: str) -> str:
        run.checkpoint("before")
        done: str = charge(holder)
        return done

    return card


def _mixed(url: str, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    """A store from before the seal: a run in clear, then one by a writer with the key
    (which may not create, so it neither seals nor refuses). The two run ids."""
    monkeypatch.delenv(CIPHER_ENV, raising=False)
    eng = Engine(url)
    clear = eng.run(_card(eng), holder=HOLDER).run_id
    eng.close()
    monkeypatch.setenv(CIPHER_ENV, KEY)
    eng = Engine(url, create=False)
    sealed = eng.run(_card(eng), holder=HOLDER).run_id
    eng.close()
    return clear, sealed


@backends("memory", "sqlite", "postgres")
def test_a_sealed_store_with_a_planted_clear_row_is_named_mixed(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A keyless writer of an older agentlog left one event in clear in a sealed store:
    reading that run says the store holds both kinds, which run, and the repair."""
    monkeypatch.setenv(CIPHER_ENV, KEY)
    eng = Engine(store_url)
    rid = eng.run(_card(eng), holder=HOLDER).run_id
    stream = run_stream(rid)
    position = eng.store.last_position(stream)
    event = eng.store.read(stream, after=position - 1)[0].event
    topic, payload = encode_event(event)
    write_raw_row(store_url, eng.store, "events", stream, position, topic, payload)
    with pytest.raises(MixedRows) as raised:
        eng.events(rid)
    text = str(raised.value)
    assert "both plaintext and encrypted rows" in text and "1 events in clear" in text
    assert rid in text and "agentlog reseal" in text and CIPHER_ENV in text
    eng.close()


@backends("sqlite", "postgres")
def test_every_reader_names_a_mixed_store_and_reseal_repairs_it(
    store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the key or without: engine.state, stats, projections status, show and
    timeline each fail with one line naming the mixed store and ``agentlog reseal``;
    reseal without the key refuses and changes nothing; with it, every row is encrypted
    (the holder's name gone from the file / pg_dump), the store is sealed, every reader
    answers, and a second reseal encrypts nothing."""
    clear, sealed = _mixed(store_url, monkeypatch)
    assert _holds(store_url)
    w = make_workdir(tmp_path, store_url)
    for key in (KEY, None):
        if key is None:
            monkeypatch.delenv(CIPHER_ENV)
        other = sealed if key is None else clear  # the run of the kind the setting trips on
        eng = Engine(store_url, create=False)
        with pytest.raises(MixedRows, match="both plaintext and encrypted"):
            eng.state(other)
        eng.close()
        readers = [["stats"], ["projections", "rebuild"], ["show", other], ["timeline", other]]
        for r in w.many(readers):  # one process, each command in turn
            one_line_error(r, "both plaintext and encrypted rows", "agentlog reseal")
    one_line_error(w.cli("reseal"), f"{CIPHER_ENV} is not set", "nothing was changed")
    assert _holds(store_url)
    monkeypatch.setenv(CIPHER_ENV, KEY)
    done = w.ok("reseal", "--json").json()
    assert done["encrypted"] > 0 and done["sealed"] is True
    assert not _holds(store_url)
    readers = [["stats"], ["show", clear], ["timeline", sealed], ["projections", "status"]]
    for args, r in zip(readers, w.many(readers), strict=True):
        assert r.code == 0, (args, r)
    assert w.ok("reseal", "--json").json()["encrypted"] == 0
    eng = Engine(store_url)  # a writer with the key: the store is sealed now
    assert eng.state(clear).status == eng.state(sealed).status == "completed"
    eng.close()
    monkeypatch.delenv(CIPHER_ENV)
    with pytest.raises(CipherError, match="this store is encrypted"):
        open_store(store_url, create=False)


@backends("sqlite")
def test_an_interrupted_reseal_goes_on_where_it_stopped(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reseal stopped after its first batch (one transaction each) left that batch
    encrypted and the rest as it was; run again it finishes, and the store reads whole."""
    clear, _sealed = _mixed(store_url, monkeypatch)
    monkeypatch.setattr(resealing, "BATCH", 2)
    real = resealing._reseal_batch
    calls: list[int] = []

    def once(*args: Any) -> int:
        calls.append(1)
        if len(calls) == 2:
            raise OSError("killed")
        return real(*args)

    store = open_store(store_url, create=False)
    monkeypatch.setattr(resealing, "_reseal_batch", once)
    with pytest.raises(OSError, match="killed"):
        resealing.reseal(store)
    monkeypatch.setattr(resealing, "_reseal_batch", real)
    assert resealing.reseal(store) > 0
    assert resealing.reseal(store) == 0
    store.close()
    eng = Engine(store_url)
    assert eng.state(clear).status == "completed"
    assert not _holds(store_url)
    eng.close()


@backends("sqlite", "postgres")
def test_reseal_refuses_a_key_the_encrypted_rows_do_not_open(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A mixed store written with one key, resealed with another: refused before anything
    is written; the rows in clear stay, and the right key still reads and repairs it."""
    clear, sealed = _mixed(store_url, monkeypatch)
    monkeypatch.setenv(CIPHER_ENV, AESCipher.create_key(32))
    store = open_store(store_url, create=False)
    with pytest.raises(CipherError, match=r"do not open with this.*nothing was changed"):
        resealing.reseal(store)
    store.close()
    assert _holds(store_url)  # the clear rows were left as they were
    monkeypatch.setenv(CIPHER_ENV, KEY)
    store = open_store(store_url, create=False)
    assert resealing.reseal(store) > 0
    store.close()
    eng = Engine(store_url)
    assert eng.state(sealed).status == eng.state(clear).status == "completed"
    eng.close()
