"""Hostile import: forged export files with a recomputed hash chain (anyone can compute
one) that aim at ledger streams, other runs' streams, code paths, mismatched payloads and
extreme numbers are refused (exit 2, naming the line) and leave the store byte for byte
as it was; a run id can only ever reach its own run stream; a killed import leaves no run."""

from __future__ import annotations

import base64
import copy
import os
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest
from conftest import backends
from hostile_kit import (
    LEDGER_HEX,
    PAID,
    Doc,
    docs_of,
    fingerprint,
    forge,
    honest_export,
    payer,
    renumber,
    with_run_id,
)
from test_cli_kit import agentlog, clean_env, make_workdir, one_line_error, sqlite_url

from engine import Engine
from engine.errors import UsageError
from engine.log.history import run_stream
from engine.store import stream_id
from replay import export_lines, import_run
from replay.cli.entry import run_cli


@pytest.fixture
def honest() -> bytes:
    return honest_export()


@pytest.fixture
def target(store_url: str) -> str:
    """A store that already holds a real run (order o9), closed again."""
    eng = Engine(store_url)
    try:
        assert eng.run(payer, order="o9").status == "completed"
    finally:
        eng.close()
    return store_url


def _line_of(docs: list[Doc], kind: str) -> int:
    return next(i for i, d in enumerate(docs, 1) if d["type"] == kind)


def _insert(docs: list[Doc], at: int, kind: str, **fields: Any) -> list[Doc]:
    event = {"type": kind, "at": 1.0, **fields}
    line = {**docs[0], "type": kind, "schema": 1, "event": event}
    return renumber([*docs[: at - 1], line, *docs[at - 1 :]])


def _set(kind: str, field: str, value: Any) -> Callable[[list[Doc]], list[Doc]]:
    def mutate(docs: list[Doc]) -> list[Doc]:
        doc = docs[_line_of(docs, kind) - 1]
        doc.pop("msgpack", None)
        if field == "schema":
            doc["schema"] = value
        else:
            doc["event"][field] = value
        return docs

    return mutate


def _nan_at(docs: list[Doc]) -> list[Doc]:
    """JSON has no NaN: the forger sends it in ``msgpack`` and shows null in ``event``."""
    doc = docs[_line_of(docs, "checkpoint") - 1]
    doc["event"]["at"] = None
    doc["msgpack"] = base64.b64encode(
        msgspec.msgpack.encode({**doc["event"], "at": float("nan")})
    ).decode()
    return docs


def _msgpack_lies(docs: list[Doc]) -> list[Doc]:
    doc = next(d for d in docs if "msgpack" in d)
    doc["event"]["value"] = {"raw": "shown to a reviewer", "nan": None}
    return docs


def _type_lies(docs: list[Doc]) -> list[Doc]:
    doc = next(d for d in docs if "msgpack" in d)
    doc["event"]["type"] = "checkpoint"
    return docs


def _ledger_claims(docs: list[Doc]) -> list[Doc]:
    docs = with_run_id(docs, LEDGER_HEX)
    docs = _insert(docs, 2, "effect_claimed", key="pay:o1", run_id=LEDGER_HEX, call=1)
    return _insert(docs, 3, "effect_committed", key="pay:o1", run_id=LEDGER_HEX, call=1)


# name -> (mutation of the honest line documents, what the one-line error names)
FORGERIES: dict[str, tuple[Callable[[list[Doc]], list[Doc]], str]] = {
    "ledger events under the ledger stream's id": (_ledger_claims, "line 2: a effect_claimed"),
    "a circuit event": (lambda d: _insert(d, 2, "circuit_opened", tool="pay"), "line 2"),
    "a ledger release": (
        lambda d: _insert(d, 3, "effect_released", key="pay:o9", run_id="x", call=1),
        "line 3: a effect_released",
    ),
    "event and msgpack differ": (_msgpack_lies, "not the same event"),
    "event type differs from msgpack's": (_type_lies, "its event's type differs"),
    "an integer no store can hold": (
        _set("agent_finished", "output", 2**70),
        "agent_finished event cannot be stored",
    ),
    "call 0": (_set("checkpoint", "call", 0), "call 0 is out of range"),
    "call -5": (_set("checkpoint", "call", -5), "call -5 is out of range"),
    "call 2**63": (_set("checkpoint", "call", 2**63), "is out of range"),
    "call 2**70": (_set("checkpoint", "call", 2**70), "is out of range"),
    "schema -1e9": (_set("checkpoint", "schema", -(10**9)), "schema -1000000000"),
    "schema 0": (_set("checkpoint", "schema", 0), "schema 0 is not one"),
    "schema newer than the code": (_set("checkpoint", "schema", 2), "schema 2 is not one"),
    "schema 1e12": (_set("checkpoint", "schema", 10**12), "is not one this version knows"),
    "at 1e300": (_set("checkpoint", "at", 1e300), "at 1e+300 is out of range"),
    "at -1e300": (_set("checkpoint", "at", -1e300), "is out of range"),
    "at NaN": (_nan_at, "at nan is out of range"),
    "fork position 0": (_set("agent_started", "fork_position", 0), "line 1: fork_position"),
    "parent run id with a newline": (
        _set("agent_started", "parent_run_id", "a\nb"),
        "line 1: not a parent run id",
    ),
    "position 2**63": (
        lambda d: [d[0], {**d[1], "index": 2**63, "position": 2**63}, *d[2:]],
        "line 2",
    ),
    "total 2**63": (lambda d: [{**x, "total": 2**63} for x in d], "line 1: total"),
    "run id of 129 characters": (lambda d: with_run_id(d, "a" * 129), "line 1: not a run id"),
    "run id of 100k characters": (lambda d: with_run_id(d, "a" * 100_000), "line 1: not a run"),
    "run id with a control character": (lambda d: with_run_id(d, "ab\x00c"), "line 1: not a run"),
    "run id with a newline": (lambda d: with_run_id(d, "ab\nc"), "line 1: not a run id"),
    "run id with a path": (lambda d: with_run_id(d, "../../etc"), "line 1: not a run id"),
    "empty run id": (lambda d: with_run_id(d, ""), "line 1: not a run id"),
}


@backends("sqlite", "postgres")
@pytest.mark.parametrize("name", list(FORGERIES))
def test_a_forged_file_is_refused_naming_the_line_and_the_store_is_unchanged(
    target: str, honest: bytes, name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each forgery, its chain recomputed: exit 2, one line naming the line, and the
    store's bytes (SQLite file, or every PostgreSQL row) exactly as before."""
    mutate, needle = FORGERIES[name]
    path = tmp_path / "forged.jsonl"
    path.write_bytes(forge(mutate(docs_of(honest))))
    before = fingerprint(target)
    assert run_cli(["import", str(path), "--url", target]) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err and len(err.strip().splitlines()) <= 3
    assert fingerprint(target) == before


@backends("sqlite", "postgres")
def test_a_file_naming_another_runs_id_is_refused_and_that_run_is_untouched(
    target: str, honest: bytes, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A forged file under the id of a run the store holds: exit 2, the run unchanged."""
    eng = Engine(target)
    victim = eng.runs()[0].run_id
    eng.close()
    path = tmp_path / "forged.jsonl"
    path.write_bytes(forge(with_run_id(docs_of(honest), victim)))
    before = fingerprint(target)
    assert run_cli(["import", str(path), "--url", target]) == 2
    assert "different history" in capsys.readouterr().err
    assert fingerprint(target) == before


@backends("memory", "sqlite", "postgres")
def test_a_run_id_equal_to_a_ledger_streams_uuid_reaches_only_its_own_run_stream(
    store_url: str, honest: bytes
) -> None:
    """The run id ``stream_id("effect:pay:o1").hex`` is a valid run id: its events go to the
    run's own stream, the ledger of ``pay:o1`` stays empty and a real payment still pays."""
    eng = Engine(store_url)
    try:
        data = forge(with_run_id(docs_of(honest), LEDGER_HEX))
        assert import_run(eng, data) == (LEDGER_HEX, True)
        assert eng.store.read(stream_id("effect:pay:o1")) == []
        assert run_stream(LEDGER_HEX) != stream_id("effect:pay:o1")
        assert len(eng.store.read(run_stream(LEDGER_HEX))) == len(data.splitlines()) + 1
        PAID.clear()
        assert eng.run(payer, order="o1").status == "completed"
        assert PAID == ["o1"]
    finally:
        eng.close()


def test_engine_run_refuses_a_run_id_outside_the_grammar() -> None:
    """``engine.run(run_id=...)`` takes only run ids of the grammar: nothing is written."""
    eng = Engine("memory://")
    for bad in ("", "a b", "x" * 129, "tab\there", "-flag", "ü"):
        with pytest.raises(UsageError, match="not a run id"):
            eng.run(payer, run_id=bad, order="o1")
    assert eng.runs() == []
    assert eng.run(payer, run_id="Order-7:retry_2.a", order="o7").status == "completed"


EVIL = "open({marker!r}, 'a').write('imported\\n')\n\ndef asker(run):\n    return 'evil'\n"


def test_code_a_file_names_is_never_imported_before_adoption(tmp_path: Path) -> None:
    """A forged run names a module (or a .py script) that writes a marker when imported.
    Reading commands work; resume, answer, abandon, rewind and verify exit 2 naming
    ``agentlog adopt``; recover skips it: nothing imports that code. Adopted with
    ``--agent``, the run runs the adopter's agent; adopted without, the file's module."""
    work = make_workdir(tmp_path, sqlite_url(tmp_path))
    marker = tmp_path / "marker.txt"
    (tmp_path / "evil.py").write_text(EVIL.format(marker=str(marker)))
    (tmp_path / "evil_script.py").write_text(EVIL.format(marker=str(marker)))
    paused = work.run_id("agents:asker", code=3)
    docs = docs_of(work.ok("export", paused).out.encode())
    work.ok("abandon", paused, code=4)
    runs = {}
    for name, path in (("evil", "evil"), ("script", str(tmp_path / "evil_script.py"))):
        for status, keep in (("paused", len(docs)), ("running", len(docs) - 1)):
            forged = renumber(copy.deepcopy(docs[:keep]))
            forged[0]["event"].update(agent="evil:asker", import_path=path)
            rid = runs[name, status] = f"{name}-{status}"
            (tmp_path / f"{rid}.jsonl").write_bytes(forge(with_run_id(forged, rid)))
            work.ok("import", str(tmp_path / f"{rid}.jsonl"))
    reading = [["state"], ["context"], ["checkpoints"], ["export"], ["show"], ["timeline"]]
    acting = [["resume"], ["answer", "yes"], ["abandon"], ["rewind", "--to", "1"], ["verify"]]
    # One process for every command (the marker would show an import by any of them).
    argvs = [[c[0], rid, *c[1:]] for rid in runs.values() for c in reading + acting]
    *results, recovered = work.many([*argvs, ["recover", "--json"]])
    each = len(reading) + len(acting)
    for i, rid in enumerate(runs.values()):
        mine = results[i * each : (i + 1) * each]
        read, acted = mine[: len(reading)], mine[len(reading) :]
        for command, r in zip(reading, read, strict=True):
            assert r.code == 0, (command, rid, r)
            if command == ["show"]:
                assert f"until `agentlog adopt {rid}`" in r.out
            if command == ["timeline"]:
                assert "imported from" in r.out
        for r in acted:
            one_line_error(r, "agentlog adopt")
    assert recovered.code == 0 and recovered.json() == [], recovered
    assert not marker.exists()
    work.ok("adopt", runs["evil", "running"], "--agent", "agents:asker")
    assert work.ok("recover", "--json", code=3).json()[0]["status"] == "paused"
    assert not marker.exists()
    work.ok("adopt", runs["script", "paused"])  # the person trusts the file's script
    one_line_error(work.cli("resume", runs["script", "paused"]), "not an agent")
    assert marker.exists()  # the marker does work: adoption was the only barrier


def test_a_sigkilled_import_leaves_no_run_behind(tmp_path: Path) -> None:
    """An import killed while it writes (its payloads going out of line, one small commit
    each, before the events' commit) leaves no index row and no event; importing the same
    file again then imports the whole run."""
    url = sqlite_url(tmp_path) + "?blob_threshold=1024"
    eng = Engine(url)

    @eng.agent
    def bulky(run: Any) -> int:
        for i in range(150):
            run.decide(f"d{i}", lambda i=i: f"{i}:" + os.urandom(4000).hex())
        return 1

    rid = eng.run(bulky).run_id
    data = b"".join(export_lines(eng, rid))
    eng.close()
    target = tmp_path / "target.db"
    path = tmp_path / "bulky.jsonl"
    path.write_bytes(data)
    out_of_line = f"sqlite:///{target}?blob_threshold=1024"
    proc = subprocess.Popen(
        [sys.executable, "-m", "replay.cli", "import", str(path), "--url", out_of_line],
        cwd=tmp_path,
        env=clean_env(),
    )
    blobs = 0
    while blobs == 0 and proc.poll() is None:  # wait until the import is writing
        blobs = _count(target, "agentlog_blobs")
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert blobs > 0, "the import finished before it could be killed"
    assert _count(target, "agentlog_runs") == 0
    assert _count(target, "agentlog_events") == 0
    r = agentlog("import", str(path), "--url", out_of_line, cwd=tmp_path)
    assert r.code == 0, r
    again = Engine(f"sqlite:///{target}")
    try:
        assert [x.run_id for x in again.runs()] == [rid]
        assert len(again.events(rid)) == len(data.splitlines()) + 1
    finally:
        again.close()


def _count(db: Path, table: str) -> int:
    if not db.exists():
        return 0
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
            return int(conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])
    except sqlite3.Error:  # not created yet, or locked for a moment
        return 0
