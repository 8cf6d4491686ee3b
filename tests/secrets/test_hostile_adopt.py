"""Imported runs until and after adoption, signed exports, and list views that survive a
damaged index row."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import msgspec
import psycopg
import pytest
from conftest import backends, schema_of, write_raw_row
from hostile_kit import PAID, docs_of, forge, honest_export, payer, renumber

from engine import Engine
from engine.errors import CorruptData, UsageError
from engine.log.history import run_stream
from engine.store.codec import encode_event
from replay import export_lines, import_run
from replay.cli.entry import run_cli

KEY = "correct horse battery staple"


@pytest.fixture
def honest() -> bytes:
    return honest_export()


def _running(honest: bytes) -> bytes:
    """The honest payer export cut before its payment: a run left ``running``."""
    docs = docs_of(honest)
    return forge(
        renumber(docs[: next(i for i, d in enumerate(docs) if d["type"] == "tool_invoked")])
    )


@backends("memory", "sqlite", "postgres")
def test_an_imported_running_run_is_skipped_by_recover_until_adopted(
    store_url: str, honest: bytes
) -> None:
    """Imported and ``running`` (no owner): recover skips it and resume, answer, abandon,
    rewind and verify refuse it naming adopt; adopted (who, when, which agent recorded),
    recover resumes it and its payment is made once."""
    eng = Engine(store_url)
    try:
        rid, _ = import_run(eng, _running(honest), "cut.jsonl")
        assert eng.state(rid).imported and eng.state(rid).status == "running"
        assert eng.recover() == []
        for act in (eng.resume, eng.verify, eng.abandon, lambda r: eng.answer(r, "x")):
            with pytest.raises(UsageError, match=f"agentlog adopt {rid}"):
                act(rid)
        with pytest.raises(UsageError, match="agentlog adopt"):
            eng.rewind(rid, to="planned")
        assert eng.events(rid)[-1].type == "run_imported"
        adopted = eng.adopt(rid, agent=payer)
        assert adopted.status == "running"
        last = eng.events(rid)[-1]
        assert last.type == "run_adopted" and "@" in last.data["by"]
        assert last.data["owner"] == eng.owner and last.data["agent"] == payer.name
        with pytest.raises(UsageError, match="not an imported run"):
            eng.adopt(rid)
        PAID.clear()
        [result] = eng.recover()
        assert (result.run_id, result.status, PAID) == (rid, "completed", ["o0"])
    finally:
        eng.close()


@backends("memory", "sqlite")
def test_a_completed_imported_run_is_refused_by_resume_until_adopted(
    store_url: str, honest: bytes
) -> None:
    """An imported run that completed is history too: resume refuses it naming adopt
    (it printed the file's recorded result and exited 0); adopted, resume shows it."""
    eng = Engine(store_url)
    try:
        rid, _ = import_run(eng, honest, "paid.jsonl")
        assert eng.state(rid).status == "completed"
        with pytest.raises(UsageError, match=f"agentlog adopt {rid}"):
            eng.resume(rid)
        eng.adopt(rid, agent=payer)
        assert eng.resume(rid).status == "completed"
    finally:
        eng.close()


@backends("sqlite")
def test_adopt_with_an_agent_replaces_the_code_the_file_names(
    store_url: str, honest: bytes
) -> None:
    """A file naming a module nobody has: adopted with an agent, the run resumes as that
    agent; the state names it; the fork of a rewind names it too."""
    eng = Engine(store_url)
    try:
        docs = docs_of(_running(honest))
        docs[0]["event"].update(agent="nowhere:agent", import_path="nowhere")
        rid, _ = import_run(eng, forge(docs))
        for bad in ("no-colon", "script.py:agent", ":x"):
            with pytest.raises(UsageError, match="MODULE:AGENT"):
                eng.adopt(rid, agent=bad)
        eng.adopt(rid, agent=f"{payer.name}")
        assert eng.state(rid).agent == payer.name
        assert eng.resume(rid).status == "completed"
        fork = eng.rewind(rid, to="planned")
        assert eng.events(fork.run_id)[0].data["agent"] == payer.name
    finally:
        eng.close()


def test_reimporting_an_imported_run_does_nothing_and_export_round_trips(honest: bytes) -> None:
    """The same file again: nothing written. The imported run's own export (with its
    ``run_imported`` record) imports into a third store, again as an imported run."""
    a, b = Engine("memory://"), Engine("memory://")
    rid, written = import_run(a, honest)
    assert written and import_run(a, honest) == (rid, False)
    onward = b"".join(export_lines(a, rid))
    assert import_run(b, onward) == (rid, True)
    assert [e.type for e in b.events(rid)][-2:] == ["run_imported", "run_imported"]
    assert b.state(rid).imported


# --- signing -------------------------------------------------------------------------------


def test_signed_exports(
    honest: bytes, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """``export --sign`` needs the key; ``import --require-signature`` refuses unsigned
    and mis-signed files naming the line; a signed file imports without the flag, and
    with the key set an edit under a recomputed hash chain is caught by the signature."""
    url = f"sqlite:///{tmp_path}/a.db"
    src = Engine(url)
    rid = import_run(src, honest)[0]
    src.close()
    signed, unsigned = tmp_path / "signed.jsonl", tmp_path / "unsigned.jsonl"
    monkeypatch.delenv("AGENTLOG_EXPORT_KEY", raising=False)
    assert run_cli(["export", rid, "--sign", "--url", url]) == 2
    assert "AGENTLOG_EXPORT_KEY" in capsys.readouterr().err
    monkeypatch.setenv("AGENTLOG_EXPORT_KEY", KEY)
    assert run_cli(["export", rid, "--sign", "-o", str(signed), "--url", url]) == 0
    assert run_cli(["export", rid, "-o", str(unsigned), "--url", url]) == 0
    assert all(b'"sig":"' in line for line in signed.read_bytes().splitlines())
    target = f"sqlite:///{tmp_path}/b.db"

    def imports(path: Path, *flags: str) -> tuple[int, str]:
        code = run_cli(["import", str(path), *flags, "--url", target, "--json"])
        return code, capsys.readouterr().err

    assert imports(unsigned, "--require-signature")[0] == 2
    monkeypatch.setenv("AGENTLOG_EXPORT_KEY", "another key")
    code, err = imports(signed, "--require-signature")
    assert code == 2 and "line 1: signature does not match" in err
    monkeypatch.setenv("AGENTLOG_EXPORT_KEY", KEY)
    forged = signed.read_bytes().replace(b'"order":"o0"', b'"order":"o6"')
    assert forged != signed.read_bytes()
    edited = tmp_path / "edited.jsonl"
    edited.write_bytes(_rechain(forged))
    code, err = imports(edited)
    assert code == 2 and "signature does not match" in err
    monkeypatch.delenv("AGENTLOG_EXPORT_KEY")
    assert imports(edited)[0] == 0  # without the key, only integrity: the documented limit
    monkeypatch.setenv("AGENTLOG_EXPORT_KEY", KEY)
    target = f"sqlite:///{tmp_path}/c.db"
    assert imports(signed, "--require-signature")[0] == 0
    last = Engine(target)
    assert last.events(rid)[-1].data["signed"] is True
    last.close()


def _rechain(data: bytes) -> bytes:
    """``data`` with its hash chain recomputed and its signatures kept as they were."""
    import hashlib

    out, previous = [], ""
    for raw in data.splitlines():
        cut = raw.rindex(b',"hash":"')
        sig = raw.rindex(b',"sig":"')
        body = raw[:sig] + b"}"
        previous = hashlib.sha256(previous.encode() + body).hexdigest()
        out.append(raw[:cut] + b',"hash":"' + previous.encode() + b'"}\n')
    return b"".join(out)


def test_a_file_mixing_signed_and_unsigned_lines_is_refused(
    honest: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTLOG_EXPORT_KEY", KEY)
    eng = Engine("memory://")
    rid = import_run(eng, honest)[0]
    signed = b"".join(export_lines(eng, rid, sign=True)).splitlines(keepends=True)
    plain = b"".join(export_lines(eng, rid)).splitlines(keepends=True)
    with pytest.raises(CorruptData, match="line 2: signed and unsigned lines are mixed"):
        import_run(Engine("memory://"), b"".join([signed[0], *plain[1:]]))


# --- list views on a damaged index ---------------------------------------------------------


def _plant(url: str, run_id: str, value: str) -> None:
    """Set a run's ``started_at`` in the index behind the store's back."""
    if url.startswith("sqlite"):
        with sqlite3.connect(url[len("sqlite:///") :]) as conn:
            conn.execute(f"UPDATE agentlog_runs SET started_at={value} WHERE run_id=?", (run_id,))
        return
    with psycopg.connect(url.split("?")[0], autocommit=True) as conn:
        conn.execute(
            f'UPDATE "{schema_of(url)}".agentlog_runs SET started_at=%s::float8 WHERE run_id=%s',
            (value, run_id),
        )


@backends("sqlite", "postgres")
def test_runs_lists_a_damaged_index_row_as_unreadable_and_the_rest(
    store_url: str, capsys: Any
) -> None:
    """Timestamps of 1e300, NaN, infinity or text planted in the run index: ``runs`` and
    ``runs --json`` exit 0, show those rows as unreadable and list every other run."""
    eng = Engine(store_url)
    ids = [eng.run(payer, order=f"v{i}").run_id for i in range(4)]
    eng.close()
    values = ["1e300", "NaN", "Infinity"]
    if store_url.startswith("sqlite"):
        values = ["1e300", "-1e300", "'text'", "9e18"]
    for rid, value in zip(ids[1:], values, strict=False):
        _plant(store_url, rid, value)
    assert run_cli(["runs", "--url", store_url]) == 0
    text = capsys.readouterr().out
    assert all(rid in text for rid in ids) and text.count("unreadable index row") == 3
    assert run_cli(["runs", "--json", "--url", store_url]) == 0
    rows = {r["run_id"]: r for r in json.loads(capsys.readouterr().out)}
    assert set(rows) == set(ids) and "unreadable" not in rows[ids[0]]
    assert all(rows[rid]["started_at"] is None and rows[rid]["unreadable"] for rid in ids[1:])


@backends("sqlite", "postgres")
def test_show_of_a_run_with_an_unshowable_timestamp_works(store_url: str, capsys: Any) -> None:
    """An event whose time is 1e300, planted in the log: ``show`` and ``state --json``
    still answer (the time shown as unknown)."""
    eng = Engine(store_url)
    rid = eng.run(payer, order="w1").run_id
    last = eng.store.read(run_stream(rid))[-1]
    topic, data = encode_event(msgspec.structs.replace(last.event, at=1e300))
    write_raw_row(store_url, eng.store, "events", run_stream(rid), last.position, topic, data)
    eng.close()
    assert run_cli(["show", rid, "--url", store_url]) == 0
    assert "UTC -> ? UTC" in capsys.readouterr().out
    assert run_cli(["state", rid, "--json", "--url", store_url]) == 0
    assert json.loads(capsys.readouterr().out)["updated_at"] is None


def test_runs_of_the_engine_survive_a_damaged_row() -> None:
    """``engine.runs()`` itself: a NaN row is a summary marked unreadable, not an error."""
    eng = Engine("memory://")
    rid = eng.run(payer, order="m1").run_id
    row = eng.store.runs()[0]
    bad = msgspec.structs.replace(row, started_at=float("nan"))
    eng.store.append([], runs=[bad])
    [summary] = eng.runs()
    assert summary.run_id == rid and summary.unreadable and summary.started_at is None
