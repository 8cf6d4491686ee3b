"""export and import: lossless JSON Lines round trips between stores, idempotent
re-import, refused conflicts, and corrupt, reordered or truncated files refused whole
with the line named."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_cli_kit import Workdir, agentlog, make_workdir, one_line_error, sqlite_url

from engine import Engine
from engine.errors import CorruptData
from replay import transfer


@pytest.fixture
def source(tmp_path: Path) -> Workdir:
    return make_workdir(tmp_path, sqlite_url(tmp_path, "source.db"))


def _export(work: Workdir, run_id: str, name: str) -> Path:
    path = work.path / name
    work.ok("export", run_id, "--output", str(path))
    return path


def test_round_trip_is_lossless_and_reimport_does_nothing(source: Workdir) -> None:
    """Exported, imported elsewhere and exported again, a run holds the same events, byte
    for byte (bytes, int keys, NaN and big integers included), followed by the record of
    its import; its timeline and state read the same, and importing again does nothing."""
    rid = source.run_id("agents:weird", code=0)
    path = _export(source, rid, "weird.jsonl")
    lines = path.read_bytes().splitlines()
    assert len(lines) == source.ok("state", rid, "--json").json()["position"]
    first = json.loads(lines[0])
    assert {"index", "total", "hash", "run_id", "event"} <= set(first)
    assert first["index"] == 1 and first["total"] == len(lines)
    assert any("msgpack" in json.loads(line) for line in lines)  # JSON alone is not exact

    target = Workdir(source.path, sqlite_url(source.path, "target.db"))
    assert target.ok("import", str(path), "--json").json() == {
        "run_id": rid,
        "imported": True,
        "events": len(lines),
    }
    again_lines = target.ok("export", rid).out.encode().splitlines()
    assert [_event_part(ln) for ln in again_lines[:-1]] == [_event_part(ln) for ln in lines]
    assert json.loads(again_lines[-1])["type"] == "run_imported"
    timelines = [w.ok("timeline", rid, "--json").json() for w in (target, source)]
    assert timelines[0][:-1] == timelines[1] and timelines[0][-1]["type"] == "run_imported"
    states = [w.ok("state", rid, "--json").json() for w in (target, source)]
    assert states[0].pop("imported") is True and states[1].pop("imported") is False
    assert states[0].pop("position") == states[1].pop("position") + 1
    assert states[0].pop("updated_at") >= states[1].pop("updated_at")  # the import's time
    assert states[0] == states[1]
    again = target.ok("import", str(path), "--json").json()
    assert again["imported"] is False


def _event_part(line: bytes) -> bytes:
    """A line's bytes from its event on, without its chain fields (which count lines)."""
    return line[line.index(b'"type":') : line.rindex(b',"hash":"')]


@pytest.mark.postgres
def test_round_trip_through_postgres(source: Workdir, pg_url: str) -> None:
    """SQLite -> PostgreSQL (from stdin) -> export again: the same events, then the
    import's record; the imported fork verifies once adopted."""
    rid = source.run_id("agents:hello", code=0)
    fork = source.ok("rewind", rid, "--to", "greeted", "--json").json()["run_id"]
    pg = Workdir(source.path, pg_url)
    for run_id in (rid, fork):
        data = _export(source, run_id, f"{run_id}.jsonl").read_bytes()
        r = agentlog("import", "-", "--url", pg_url, cwd=source.path, stdin=data)
        assert r.code == 0, r
        again = pg.ok("export", run_id).out.encode().splitlines()
        assert [_event_part(ln) for ln in again[:-1]] == [
            _event_part(ln) for ln in data.splitlines()
        ]
    runs = {r["run_id"]: r for r in pg.ok("runs", "--json").json()}
    assert runs[fork]["parent_run_id"] == rid and runs[rid]["status"] == "completed"
    one_line_error(pg.cli("verify", fork), "agentlog adopt")
    pg.ok("adopt", fork)
    assert pg.ok("verify", fork).code == 0


def test_conflicting_history_is_refused(source: Workdir) -> None:
    """A run already present with a different history: exit 2, the present run unchanged."""
    rid = source.run_id("agents:asker", code=3)
    paused = _export(source, rid, "paused.jsonl")
    source.ok("answer", rid, "yes")
    answered = _export(source, rid, "answered.jsonl")
    target = Workdir(source.path, sqlite_url(source.path, "target.db"))
    target.ok("import", str(paused))
    before = target.ok("export", rid).out
    one_line_error(target.cli("import", str(answered)), "different history")
    assert target.ok("export", rid).out == before


def _variants(lines: list[bytes]) -> dict[str, tuple[list[bytes], str]]:
    edited = lines[2].replace(b'"at":1', b'"at":2', 1)
    assert edited != lines[2]
    return {
        "edited": ([*lines[:2], edited, *lines[3:]], "line 3"),
        "reordered": ([lines[0], lines[2], lines[1], *lines[3:]], "line 2"),
        "truncated at a line boundary": (lines[:-1], f"ends after line {len(lines) - 1}"),
        "cut inside a line": ([*lines[:-1], lines[-1][:40]], f"line {len(lines)}"),
        "a line dropped": ([lines[0], *lines[2:]], "line 2"),
        "a line repeated": ([*lines[:2], lines[1], *lines[2:]], "line 3"),
    }


def test_corrupt_files_are_refused_whole(source: Workdir) -> None:
    """Edited, reordered or truncated (even at a line boundary): exit 2 naming the line;
    nothing is written. (Every variant is checked without a subprocess below.)"""
    rid = source.run_id("agents:hello", code=0)
    lines = _export(source, rid, "good.jsonl").read_bytes().splitlines(keepends=True)
    target = Workdir(source.path, sqlite_url(source.path, "target.db"))
    variants = _variants(lines)
    for name in ("edited", "reordered", "truncated at a line boundary"):
        variant, needle = variants[name]
        bad = source.path / "bad.jsonl"
        bad.write_bytes(b"".join(variant))
        one_line_error(target.cli("import", str(bad)), needle)
    assert not (source.path / "target.db").exists()  # refused before a store was opened
    target.ok("import", str(source.path / "good.jsonl"))
    assert [r["run_id"] for r in target.ok("runs", "--json").json()] == [rid]


def test_corruption_is_detected_without_a_store(tmp_path: Path) -> None:
    """The checks are pure: every variant, an empty file and foreign JSON fail to read."""
    engine = Engine.open(f"sqlite:///{tmp_path}/x.db")

    @engine.agent
    def tiny(run: Any) -> int:
        run.checkpoint("start")
        total = sum(run.decide(f"n{i}", lambda i=i: i) for i in range(4))
        run.checkpoint("end")
        return int(total)

    try:
        rid = engine.run(tiny).run_id
        good = b"".join(transfer.export_lines(engine, rid))
    finally:
        engine.close()
    assert transfer.read_lines(good)[0] == rid
    for variant, needle in _variants(good.splitlines(keepends=True)).values():
        with pytest.raises(CorruptData, match=needle):
            transfer.read_lines(b"".join(variant))
    for data in (b"", b"\n", b'{"some": "json"}\n', good.replace(b'"hash":"', b'"hush":"')):
        with pytest.raises(CorruptData):
            transfer.read_lines(data)


def _tiny_export(tmp_path: Path) -> tuple[Engine, str, list[bytes]]:
    """A fresh engine (its store empty) and the export lines of a six-event run."""
    source = Engine.open(f"sqlite:///{tmp_path}/source.db")

    @source.agent
    def tiny(run: Any) -> int:
        return int(run.decide("a", lambda: 1)) + int(run.decide("b", lambda: 2))

    try:
        rid = source.run(tiny).run_id
        lines = list(transfer.export_lines(source, rid))
    finally:
        source.close()
    return Engine.open(f"sqlite:///{tmp_path}/target.db"), rid, lines


@pytest.mark.parametrize("where", ["first", "middle", "last"])
def test_an_edit_on_any_line_is_refused_naming_it_and_nothing_is_imported(
    tmp_path: Path, where: str
) -> None:
    """The hash is checked on every line, the first and the last included: a changed
    value (the file still parses) or a changed hash is refused at that line, whole."""
    target, rid, lines = _tiny_export(tmp_path)
    n = {"first": 1, "middle": len(lines) // 2 + 1, "last": len(lines)}[where]
    line = lines[n - 1]
    value = line.replace(b'"at":1', b'"at":2', 1)
    cut = line.rindex(b'"hash":"') + len(b'"hash":"')
    digest = line[:cut] + (b"0" if line[cut : cut + 1] != b"0" else b"1") + line[cut + 1 :]
    try:
        for edited in (value, digest):
            assert edited != line and json.loads(edited)["index"] == n  # still a valid line
            data = b"".join([*lines[: n - 1], edited, *lines[n:]])
            with pytest.raises(CorruptData, match=f"line {n}: hash does not match"):
                transfer.import_run(target, data)
            assert target.runs() == []
        assert transfer.import_run(target, b"".join(lines)) == (rid, True)
    finally:
        target.close()


def test_a_file_cut_at_any_line_boundary_is_refused(tmp_path: Path) -> None:
    """Cut after the first line, in the middle, or before the last: refused, naming how
    far it goes, and nothing is imported."""
    target, _, lines = _tiny_export(tmp_path)
    try:
        for keep in (1, len(lines) // 2, len(lines) - 1):
            with pytest.raises(CorruptData, match=f"ends after line {keep} of {len(lines)}"):
                transfer.import_run(target, b"".join(lines[:keep]))
        assert target.runs() == []
    finally:
        target.close()
