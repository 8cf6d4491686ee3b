"""Old logs stay readable: schema evolution by defaults, upcasters, and a golden v1 history.

The upcasting scenario is played for real: ToolSucceeded's SCHEMA is bumped to 2 in the
test (v1 had a ``cached: bool`` that v2 replaces by ``source``), an upcaster is registered
with ``engine.events.upcaster``, raw v1 rows are planted in every store, and they are read
back upcast. The golden files under tests/golden/ were written once by agentlog 0.1
(``make_golden.py``) and today's code must decode and fold them to the same values.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from conftest import all_backends, read_raw_rows, write_raw_row
from structlog.testing import capture_logs

from engine import events as ev
from engine.errors import CorruptData
from engine.log.history import checkpoint_refs, rebuild, run_stream, state_at
from engine.log.snapshots import snapshot_at_or_before
from engine.log.state import RunState, fold
from engine.store import Append, Recorded, Store, codec

GOLDEN = Path(__file__).parent / "golden"
TAG = "tool_succeeded"


def _full(value: msgspec.Struct) -> Any:
    """Every field of a struct, defaults included, as builtins (as make_golden.py wrote them)."""
    data = {f: getattr(value, f) for f in value.__struct_fields__}
    tag = value.__struct_config__.tag
    if isinstance(tag, str):
        data = {"type": tag, **data}
    return msgspec.to_builtins(data)


def _as_recorded(value: msgspec.Struct, expected: dict[str, Any]) -> Any:
    """``_full(value)`` limited to the fields the golden file recorded, after checking that
    every field added since then decoded to its default (msgspec's evolution rule)."""
    data = _full(value)
    for name in set(data) - set(expected):
        field = next(f for f in msgspec.structs.fields(value) if f.name == name)
        default = field.default if field.default is not msgspec.NODEFAULT else None
        if field.default_factory is not msgspec.NODEFAULT:
            default = field.default_factory()
        assert data[name] == msgspec.to_builtins(default), (name, data[name])
    return {k: v for k, v in data.items() if k in expected}


def _v1(at: float, call: int, result: Any, cached: bool | None = None) -> bytes:
    """A ToolSucceeded row as schema version 1 wrote it: no ``source``, maybe ``cached``."""
    data: dict[str, Any] = {"type": TAG, "at": at, "call": call, "tool": "search"}
    data["result"] = result
    if cached is not None:
        data["cached"] = cached
    return msgspec.msgpack.encode(data)


@pytest.fixture
def schema_version(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Set ToolSucceeded.SCHEMA for one test; upcasters registered by the test are removed."""
    before = dict(ev.UPCASTERS)

    def bump(version: int) -> None:
        monkeypatch.setattr(ev.ToolSucceeded, "SCHEMA", version)
        codec._topic.cache_clear()  # topics are cached per class; SCHEMA is fixed in production
        codec._parse_topic.cache_clear()

    yield bump
    ev.UPCASTERS.clear()
    ev.UPCASTERS.update(before)
    monkeypatch.undo()
    codec._topic.cache_clear()
    codec._parse_topic.cache_clear()


def _register_v1_to_v2() -> None:
    @ev.upcaster(TAG, 1)
    def cached_becomes_source(data: dict[str, Any]) -> dict[str, Any]:
        data = dict(data)
        data["source"] = "ledger" if data.pop("cached", False) else "executed"
        return data


# --- the SCHEMA=2 scenario ------------------------------------------------------------


@all_backends
def test_v1_rows_are_read_upcast_after_a_schema_bump(
    store_url: str, store: Store, schema_version: Any
) -> None:
    """Raw v1 rows in the store are read through the upcaster; v2 rows are read as written."""
    schema_version(2)
    _register_v1_to_v2()
    run_id = uuid.uuid4().hex
    stream = run_stream(run_id)
    start = ev.AgentStarted(at=1.0, agent="a:b", import_path="a")
    invoked = ev.ToolInvoked(at=2.0, call=1, tool="search")
    store.append([Append(stream, 1, start), Append(stream, 2, invoked)])
    write_raw_row(store_url, store, "events", stream, 3, f"{TAG}:1", _v1(3.0, 1, [1, 2], True))
    write_raw_row(store_url, store, "events", stream, 4, f"{TAG}:1", _v1(4.0, 2, {"k": "v"}))
    new = ev.ToolSucceeded(at=5.0, call=3, tool="search", result="r", source="fallback")
    store.append([Append(stream, 5, new)])

    assert [r.topic for r in read_raw_rows(store, "events", stream)][2:] == [
        f"{TAG}:1",
        f"{TAG}:1",
        f"{TAG}:2",
    ]
    got = [r.event for r in store.read(stream)]
    assert got[2] == ev.ToolSucceeded(at=3.0, call=1, tool="search", result=[1, 2], source="ledger")
    assert got[3] == ev.ToolSucceeded(at=4.0, call=2, tool="search", result={"k": "v"})
    assert got[3].source == "executed"
    assert got[4] == new  # a current row is not passed through the v1 upcaster
    assert [r.event for r in store.read_all()][-3:] == got[2:]
    state = rebuild(store, run_id)
    assert state == fold(list(enumerate(got, 1)), RunState(run_id=run_id))
    assert state.pending == [] and state.last_observation == '"r"'


def test_a_bump_without_an_upcaster_fills_new_fields_with_defaults(schema_version: Any) -> None:
    """With no upcaster for a version, a v1 row decodes with the defaults of fields it lacks."""
    schema_version(2)
    event = codec.decode_event(f"{TAG}:1", _v1(1.0, 1, "ok", cached=True))
    assert event == ev.ToolSucceeded(at=1.0, call=1, tool="search", result="ok")
    assert event.source == "executed" and event.attempt == 1


def test_upcasters_chain_in_version_order(schema_version: Any) -> None:
    """At SCHEMA=3 a v1 row goes through 1->2 then 2->3; a v2 row only through 2->3."""
    schema_version(3)
    _register_v1_to_v2()

    @ev.upcaster(TAG, 2)
    def attempts_count_from_one(data: dict[str, Any]) -> dict[str, Any]:
        return {**data, "attempt": data.get("attempt", 0) + 1, "tool": data["tool"] + "+v3"}

    v1 = codec.decode_event(f"{TAG}:1", _v1(1.0, 1, None, cached=True))
    assert (v1.attempt, v1.source, v1.tool) == (1, "ledger", "search+v3")
    v2_payload = msgspec.msgpack.encode(
        {"type": TAG, "at": 1.0, "call": 1, "tool": "t", "attempt": 4, "source": "human"}
    )
    v2 = codec.decode_event(f"{TAG}:2", v2_payload)
    assert (v2.attempt, v2.source, v2.tool) == (5, "human", "t+v3")
    current = ev.ToolSucceeded(at=1.0, call=1, tool="t", attempt=4, source="human")
    topic, payload = codec.encode_event(current)
    assert topic == f"{TAG}:3"
    assert codec.decode_event(topic, payload) == current


def test_upcasters_are_keyed_by_tag_and_version(schema_version: Any) -> None:
    """upcaster() registers under (tag, from_version); other events are untouched by it."""
    schema_version(2)
    _register_v1_to_v2()
    assert (TAG, 1) in ev.UPCASTERS
    failed = ev.ToolFailed(at=1.0, call=1, tool="t", kind="permanent", message="m")
    assert codec.decode_event(*codec.encode_event(failed)) == failed
    assert codec.encode_event(failed)[0] == "tool_failed:1"


# --- evolution by defaults, and what is not evolution ---------------------------------


def test_a_row_missing_fields_with_defaults_decodes_with_those_defaults() -> None:
    """A current-version row written before a defaulted field existed gets the default."""
    payload = msgspec.msgpack.encode(
        {
            "type": "tool_failed",
            "at": 1.0,
            "call": 2,
            "tool": "t",
            "kind": "transient",
            "message": "m",
        },
    )
    event = codec.decode_event("tool_failed:1", payload)
    assert event == ev.ToolFailed(at=1.0, call=2, tool="t", kind="transient", message="m")
    assert (event.attempt, event.final, event.evidence) == (1, True, {})


def test_a_row_with_a_field_it_no_longer_has_still_decodes() -> None:
    """Unknown fields in a stored row (a field since removed) are ignored, not an error."""
    payload = msgspec.msgpack.encode({"type": "circuit_closed", "at": 1.0, "tool": "t", "old": 1})
    assert codec.decode_event("circuit_closed:1", payload) == ev.CircuitClosed(at=1.0, tool="t")


@pytest.mark.parametrize(
    ("topic", "payload"),
    [
        ("no_such_event:1", msgspec.msgpack.encode({"type": "no_such_event", "at": 1.0})),
        ("tool_succeeded:one", _v1(1.0, 1, None)),
        ("tool_succeeded", _v1(1.0, 1, None)),
        ("tool_succeeded:1", b"\xc1\xc1\xc1"),
        ("tool_succeeded:0", _v1(1.0, 1, None)),  # no upcaster chain starts below 1
        ("tool_succeeded:-1000000000", _v1(1.0, 1, None)),  # it looped ~1e9 times
        ("tool_succeeded:99", _v1(1.0, 1, None)),  # a newer agentlog's row: not guessed at
        ("tool_succeeded:1", msgspec.msgpack.encode({"type": TAG, "at": 1.0, "call": "one"})),
    ],
)
def test_an_undecodable_row_is_corrupt_data(topic: str, payload: bytes) -> None:
    """Unknown topics, bad versions, garbage and ill-typed payloads raise CorruptData."""
    with pytest.raises(CorruptData):
        codec.decode_event(topic, payload)


# --- the golden v1 history ------------------------------------------------------------


def _golden() -> list[dict[str, Any]]:
    lines = (GOLDEN / "events_v1.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def _golden_state() -> tuple[str, Any]:
    data = json.loads((GOLDEN / "run_v1_state.json").read_text(encoding="utf-8"))
    return data["run_id"], data["state"]


def test_golden_history_holds_the_first_vocabulary_at_version_1() -> None:
    """The golden file holds all 24 event types of the first release, each at schema 1,
    and every one of them still exists today (event types are never removed)."""
    rows = _golden()
    assert [r["position"] for r in rows] == list(range(1, len(rows) + 1))
    assert all(r["topic"].endswith(":1") for r in rows)
    tags = {r["topic"].split(":")[0] for r in rows}
    assert len(tags) == 24
    assert tags <= set(ev.EVENT_TYPES)


def test_todays_code_decodes_every_golden_v1_event_to_its_recorded_values() -> None:
    """Each golden payload decodes to an event whose every field equals the recorded value."""
    for row in _golden():
        event = codec.decode_event(row["topic"], base64.b64decode(row["payload"]))
        assert _as_recorded(event, row["expected"]) == row["expected"], row["position"]


# RunState v2 (snapshot topic run_state:2) keeps neither the checkpoint list nor the input:
# the log holds them (checkpoint events, agent_started). The golden state was recorded by v1.
MOVED_TO_THE_LOG = ("checkpoints", "input")
# RunState v3 (run_state:3) holds what a run waits on as the typed ``waits_on``; the text
# v1 recorded (``waiting``) is what ``RunState.waiting`` shows of it.
SHOWN_FROM_WAITS_ON = ("waiting",)


def _in_state(expected: dict[str, Any]) -> dict[str, Any]:
    gone = MOVED_TO_THE_LOG + SHOWN_FROM_WAITS_ON
    return {k: v for k, v in expected.items() if k not in gone}


def _shown(state: RunState) -> dict[str, Any]:
    return {k: getattr(state, k) for k in SHOWN_FROM_WAITS_ON}


def _from_the_log(recorded: list[Recorded]) -> dict[str, Any]:
    """The v1 state's checkpoint list and input, as the log gives them today."""
    started = recorded[0].event
    assert isinstance(started, ev.AgentStarted)
    marks = msgspec.to_builtins(checkpoint_refs(recorded))
    return {"checkpoints": marks, "input": msgspec.to_builtins(started.input)}


def test_todays_fold_of_the_golden_run_reaches_the_recorded_state() -> None:
    """Folding the decoded golden history gives exactly the state recorded with it; the
    fields v2 moved out of the state (checkpoints, input) read from the log the same."""
    run_id, expected = _golden_state()
    events = [
        (r["position"], codec.decode_event(r["topic"], base64.b64decode(r["payload"])))
        for r in _golden()
    ]
    in_state = _in_state(expected)
    folded = fold(events, RunState(run_id=run_id))
    assert _as_recorded(folded, in_state) == in_state
    assert _shown(folded) == {k: expected[k] for k in SHOWN_FROM_WAITS_ON}
    moved = {k: expected[k] for k in MOVED_TO_THE_LOG}
    assert _from_the_log([Recorded(uuid.UUID(int=0), p, e) for p, e in events]) == moved


@all_backends
def test_a_golden_run_planted_in_a_store_rebuilds_to_the_recorded_state(
    store_url: str, store: Store
) -> None:
    """The golden rows written raw into each store read back; rebuilt through the store,
    they reach the fold of the same events. The golden history packs every event type
    into one stream, ending with agent_finished after agent_abandoned, which no run
    writes: the checked reader refuses the whole log there (position 25)."""
    run_id, expected = _golden_state()
    stream = run_stream(run_id)
    rows = _golden()
    for r in rows:
        payload = base64.b64decode(r["payload"])
        write_raw_row(store_url, store, "events", stream, r["position"], r["topic"], payload)
    read = store.read(stream)
    assert [_as_recorded(e.event, r["expected"]) for e, r in zip(read, rows, strict=True)] == [
        r["expected"] for r in rows
    ]
    folded = fold([(e.position, e.event) for e in read], RunState(run_id=run_id))
    assert _as_recorded(folded, _in_state(expected)) == _in_state(expected)
    assert _shown(folded) == {k: expected[k] for k in SHOWN_FROM_WAITS_ON}
    assert _from_the_log(read) == {k: expected[k] for k in MOVED_TO_THE_LOG}
    with pytest.raises(CorruptData, match=f"run {run_id}.* position 25: agent_finished after"):
        state_at(store, run_id)
    abandoned = len(rows) - 1
    assert isinstance(read[abandoned - 1].event, ev.AgentAbandoned)
    until_abandoned = fold(
        [(e.position, e.event) for e in read[:abandoned]], RunState(run_id=run_id)
    )
    assert rebuild(store, run_id, abandoned) == until_abandoned
    last_mark = checkpoint_refs(read[:abandoned])[-1]
    assert last_mark.position == expected["checkpoints"][-1]["position"]


@all_backends
def test_a_v1_snapshot_upcasts_and_an_unknown_version_is_skipped(
    store_url: str, store: Store
) -> None:
    """The golden v1 state, stored as a ``run_state:1`` snapshot (checkpoint list and input
    inside), decodes to today's fold of the golden events: the two fields v2 moved to the
    log are dropped, the rest keep their meaning. A snapshot of a version this code does
    not know is skipped with a warning, as a corrupt one is (a snapshot is only a shortcut)."""
    run_id, expected = _golden_state()
    stream = run_stream(run_id)
    v1 = msgspec.msgpack.encode(expected)
    assert b"checkpoints" in v1 and b"input" in v1
    write_raw_row(store_url, store, "snapshots", stream, 25, "run_state:1", v1)
    write_raw_row(store_url, store, "snapshots", stream, 26, "run_state:9", v1)
    with capture_logs() as logs:
        snap = snapshot_at_or_before(store, stream, None)
    assert [e["event"] for e in logs] == ["snapshot_skipped"]
    assert "run_state:9" in logs[0]["error"] and logs[0]["position"] == 26
    events = [
        (r["position"], codec.decode_event(r["topic"], base64.b64decode(r["payload"])))
        for r in _golden()
    ]
    assert snap == fold(events, RunState(run_id=run_id))
    assert _as_recorded(snap, _in_state(expected)) == _in_state(expected)
    assert _shown(snap) == {k: expected[k] for k in SHOWN_FROM_WAITS_ON}
