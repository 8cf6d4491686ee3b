"""A store records the fingerprint of its replay key: an engine with another key (or none,
minting its own elsewhere) refuses to execute on it with one line naming
AGENTLOG_SECRET_KEY, and writes nothing; reading never refuses. An old store without the
record takes the first executing engine's key, unless its runs were recorded under
another; processes racing on a fresh store agree on one key."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from agents.kit import ROOT
from conftest import all_backends, backends
from eventsourcing.persistence import StoredEvent
from test_cli_kit import clean_env, make_workdir, one_line_error, sqlite_url

from engine import Engine
from engine import events as ev
from engine.errors import CorruptData, ReplayKeyDiffers
from engine.log.history import RunWriter
from engine.log.state import RunState
from engine.secrets import key_check
from engine.store import Store, open_store
from engine.store.keyprint import KEY_STREAM, record_key, recorded_key

KEY_A = "machine-a-key-7f3e91"
KEY_B = "machine-b-key-2c44d0"


def _hello(eng: Engine) -> Any:
    @eng.agent
    def hello(run: Any) -> str:
        return run.decide("greet", lambda: "hi")

    return hello


def _asker(eng: Engine) -> Any:
    @eng.agent
    def asker(run: Any) -> str:
        run.decide("plan", lambda: "a")
        run.checkpoint("planned")
        return str(run.ask("approve?"))

    return asker


def _refused_cleanly(e: ReplayKeyDiffers, *secrets: str) -> None:
    """One line naming the variable, with neither key nor any fingerprint in it."""
    text = str(e)
    assert "\n" not in text and "AGENTLOG_SECRET_KEY" in text, text
    for secret in secrets:
        assert secret not in text and key_check(secret.encode()) not in text, text


def _engine_on(store_url: str, store: Store | None) -> Engine:
    """Another engine on the same store: through its URL, or (memory) the same object."""
    return Engine(store=store) if store is not None else Engine.open(store_url)


@all_backends
def test_an_engine_with_another_key_refuses_to_execute_and_writes_nothing(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Engine A records the store's key by running; engine B (another key) reads the
    store freely, but run, resume, answer, rewind and recover each raise ReplayKeyDiffers
    and nothing is written; B with A's key executes."""
    monkeypatch.setenv("AGENTLOG_SECRET_KEY", KEY_A)
    a = Engine.open(store_url)
    paused = a.run(_asker(a))
    assert paused.status == "paused"
    assert recorded_key(a.store) == key_check(KEY_A.encode())
    shared = a.store if store_url == "memory://" else None
    b = _engine_on(store_url, shared)
    _asker(b)  # B knows the agent: only its key stops it
    monkeypatch.setenv("AGENTLOG_SECRET_KEY", KEY_B)
    before = b.store.max_global_position()
    assert [r.run_id for r in b.runs()] == [paused.run_id]  # reading never refuses
    assert b.state(paused.run_id).status == "paused" and b.events(paused.run_id)
    rid = paused.run_id
    for act in (
        lambda: b.run(_hello(b)),
        lambda: b.resume(rid),
        lambda: b.verify(rid),
        lambda: b.answer(rid, "yes"),
        lambda: b.rewind(rid, to="planned"),
        lambda: b.recover(),
    ):
        with pytest.raises(ReplayKeyDiffers) as e:
            act()
        _refused_cleanly(e.value, KEY_A, KEY_B)
    assert b.store.max_global_position() == before and len(b.runs()) == 1
    monkeypatch.setenv("AGENTLOG_SECRET_KEY", KEY_A)
    assert b.answer(rid, "yes").status == "completed"
    b.close()
    a.close()


@backends("sqlite", "postgres")
def test_a_new_machine_without_the_key_refuses_until_the_key_is_copied(
    store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No AGENTLOG_SECRET_KEY anywhere: machine A mints its key file and records runs;
    machine B (a new container) mints another and is refused, the line naming the
    variable and B's own key file; AGENTLOG_SECRET_KEY set to A's key file lets it run."""
    monkeypatch.delenv("AGENTLOG_SECRET_KEY", raising=False)
    machine_a, machine_b = tmp_path / "a", tmp_path / "b"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(machine_a))
    a = Engine.open(store_url)
    assert a.run(_hello(a)).status == "completed"
    a.close()
    key_a = (machine_a / "agentlog" / "secret.key").read_text().strip()
    monkeypatch.setenv("XDG_CONFIG_HOME", str(machine_b))
    b = Engine.open(store_url)
    with pytest.raises(ReplayKeyDiffers) as e:
        b.run(_hello(b))
    key_b = (machine_b / "agentlog" / "secret.key").read_text().strip()
    _refused_cleanly(e.value, key_a, key_b)
    assert "is not set" in str(e.value) and str(machine_b / "agentlog" / "secret.key") in str(
        e.value
    )
    assert len(b.runs()) == 1
    b.close()
    monkeypatch.setenv("AGENTLOG_SECRET_KEY", key_a)  # as the line says: the copied key
    b = Engine.open(store_url)
    assert b.run(_hello(b)).status == "completed"
    b.close()


def _old_run(store: Store, run_id: str, check: str | None) -> None:
    """A run as an engine from before the record wrote it (key check ``check``)."""
    started = ev.AgentStarted(at=ev.now(), agent="m:a", import_path="m", key_check=check)
    RunWriter(store, RunState(run_id=run_id)).append(started)


@backends("sqlite", "postgres")
def test_an_old_store_takes_the_key_of_its_runs_and_refuses_another(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store without the record whose runs were hashed under key A: an engine with key
    B refuses and records nothing; then one with key A records it and runs. Runs from
    before key checks (no key check) bind the store to no key."""
    store = open_store(store_url)
    _old_run(store, "legacy", None)
    _old_run(store, "old-a", key_check(KEY_A.encode()))
    store.close()
    monkeypatch.setenv("AGENTLOG_SECRET_KEY", KEY_B)
    b = Engine.open(store_url)
    with pytest.raises(ReplayKeyDiffers) as e:
        b.run(_hello(b))
    _refused_cleanly(e.value, KEY_A, KEY_B)
    assert "some of this store's runs" in str(e.value)
    assert recorded_key(b.store) is None and len(b.runs()) == 2
    b.close()
    monkeypatch.setenv("AGENTLOG_SECRET_KEY", KEY_A)
    a = Engine.open(store_url)
    assert a.run(_hello(a)).status == "completed"
    assert recorded_key(a.store) == key_check(KEY_A.encode())
    a.close()


@all_backends
def test_an_old_run_with_a_key_check_that_is_no_fingerprint_is_another_key(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run's key check is stored text (an import may hold anything): one that is not
    even ASCII counts as another key, refused as such (never a TypeError)."""
    _old_run(store, "odd", "ключ-" * 4)
    monkeypatch.setenv("AGENTLOG_SECRET_KEY", KEY_A)
    eng = Engine(store=store)
    with pytest.raises(ReplayKeyDiffers):
        eng.run(_hello(eng))
    assert recorded_key(store) is None


@backends("sqlite", "postgres")
def test_an_old_store_of_legacy_runs_only_takes_the_first_engines_key(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Runs hashed under the legacy public key belong to no key: the first engine records
    its own, and the next engine with another key is refused by that record."""
    store = open_store(store_url)
    _old_run(store, "legacy", None)
    store.close()
    monkeypatch.setenv("AGENTLOG_SECRET_KEY", KEY_B)
    b = Engine.open(store_url)
    assert b.run(_hello(b)).status == "completed"
    b.close()
    monkeypatch.setenv("AGENTLOG_SECRET_KEY", KEY_A)
    a = Engine.open(store_url)
    with pytest.raises(ReplayKeyDiffers):
        a.run(_hello(a))
    a.close()


@all_backends
def test_the_record_is_written_once(store: Store) -> None:
    """``record_key`` keeps the first fingerprint (a second is not written over it), and
    records fingerprints only."""
    first, second = key_check(KEY_A.encode()), key_check(KEY_B.encode())
    assert record_key(store, first) == first
    assert record_key(store, second) == first
    with pytest.raises(ValueError):
        record_key(store, KEY_A)  # a key is never recorded, only a fingerprint


@all_backends
def test_a_damaged_record_is_refused_not_trusted(store: Store) -> None:
    """A record row that is not a fingerprint (a key written in clear, bytes) is refused
    with CorruptData, and nothing executes on the store."""
    row = StoredEvent(KEY_STREAM, 1, "replay-key", KEY_A.encode())
    store._blobs.insert_events([row])
    with pytest.raises(CorruptData, match="replay key record is damaged") as e:
        recorded_key(store)
    assert KEY_A not in str(e.value)
    eng = Engine(store=store)
    with pytest.raises(CorruptData):
        eng.run(_hello(eng))
    assert store.runs() == []


RACER = """
import sys
from pathlib import Path

from engine import Engine
from engine.errors import CorruptData, ReplayKeyDiffers
from engine.polling import poll_until
from engine.runtime.host import keygate

url, me, n, meet = sys.argv[1], sys.argv[2], int(sys.argv[3]), Path(sys.argv[4])
record = keygate.record_key


def met(store, check):
    # every racer found the store without a record (nor runs) before any records one
    (meet / me).touch()
    assert poll_until(lambda: len(list(meet.iterdir())) >= n, 60)
    return record(store, check)


keygate.record_key = met
eng = Engine.open(url)


@eng.agent
def hello(run):
    return "hi"


try:
    print(eng.run(hello).status)
except ReplayKeyDiffers as e:
    print("refused", e)
    sys.exit(2)
"""


@backends("sqlite", "postgres")
@pytest.mark.parametrize("keys", [(KEY_A, KEY_B), (KEY_A, KEY_A)], ids=["two-keys", "one-key"])
def test_processes_racing_on_a_fresh_store_agree_on_one_key(
    store_url: str, tmp_path: Path, keys: tuple[str, str]
) -> None:
    """Two processes that both found a fresh store without a record record at once: one
    fingerprint wins, the other process reads it back and is refused if its key differs
    (two keys: exactly one runs), or runs (one key: both do)."""
    url = store_url if store_url.startswith("postgres") else sqlite_url(tmp_path)
    script, meet = tmp_path / "racer.py", tmp_path / "meet"
    script.write_text(textwrap.dedent(RACER))
    meet.mkdir()
    racers = [
        subprocess.Popen(
            [sys.executable, str(script), url, str(i), str(len(keys)), str(meet)],
            cwd=ROOT,
            env=clean_env({"AGENTLOG_SECRET_KEY": key}),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for i, key in enumerate(keys)
    ]
    outcomes = [(p.wait(timeout=120), p.communicate()) for p in racers]
    codes = sorted(code for code, _ in outcomes)
    assert codes == ([0, 2] if keys[0] != keys[1] else [0, 0]), outcomes
    for code, (out, _err) in outcomes:
        if code == 2:
            assert b"AGENTLOG_SECRET_KEY" in out and KEY_A.encode() not in out
    store = open_store(url)
    assert recorded_key(store) in {key_check(k.encode()) for k in keys}
    assert len(store.runs()) == codes.count(0)
    store.close()


@backends("sqlite", "postgres")
def test_the_cli_refuses_with_exit_2_and_one_line_and_still_reads(
    store_url: str, tmp_path: Path
) -> None:
    """``agentlog run`` and ``recover`` under another key exit 2 with one line naming
    AGENTLOG_SECRET_KEY (no traceback, no key); ``runs`` and ``show`` still read."""
    url = store_url if store_url.startswith("postgres") else sqlite_url(tmp_path)
    work = make_workdir(tmp_path, url)
    paused = work.cli("run", "agents:asker", "--json", env={"AGENTLOG_SECRET_KEY": KEY_A})
    assert paused.code == 3, paused
    rid = paused.json()["run_id"]
    other = {"AGENTLOG_SECRET_KEY": KEY_B}
    for args in (("run", "agents:hello"), ("answer", rid, "yes"), ("recover",)):
        refused = work.cli(*args, env=other)
        one_line_error(refused, "AGENTLOG_SECRET_KEY", "replay key differs")
        assert KEY_A not in refused.err and KEY_B not in refused.err, refused
    assert work.cli("runs", env=other).code == 0
    assert work.cli("show", rid, env=other).code == 0
    done = work.cli("answer", rid, "yes", "--json", env={"AGENTLOG_SECRET_KEY": KEY_A})
    assert done.code == 0 and done.json()["status"] == "completed", done
