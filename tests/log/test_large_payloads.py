"""Large payloads go out of line as content-addressed, chunked blobs and round-trip exactly."""

from __future__ import annotations

import hashlib
import os
import threading
import uuid

import msgspec
import pytest
from conftest import all_backends, backends, read_raw_rows, write_raw_row

from engine import events as ev
from engine.errors import CorruptData
from engine.log.history import RunWriter, rebuild, run_stream
from engine.log.snapshots import SNAPSHOT_TOPIC, snapshot_at_or_before
from engine.log.state import RunState, fold
from engine.store import Append, BlobRef, Store, open_store, stream_id
from engine.store.base import BLOB_CHUNK, BLOB_SUFFIX, MAX_INLINE_BATCH
from engine.store.codec import encode_event

MB = 1024 * 1024


def _blob_id(ref: BlobRef) -> uuid.UUID:
    return stream_id("blob:" + ref.sha256)


def _result(n: int) -> str:
    """``n`` characters that do not repeat in any short period."""
    return os.urandom(n // 2 + 1).hex()[:n]


@all_backends
def test_payload_at_or_below_the_threshold_stays_inline(store_url: str) -> None:
    """An event whose payload fits the threshold is stored in its own row, unchanged."""
    event = ev.ToolSucceeded(at=1.0, call=1, tool="t", result=_result(500))
    topic, payload = encode_event(event)
    store = open_store(store_url, blob_threshold=len(payload))
    try:
        stream = uuid.uuid4()
        store.append([Append(stream, 1, event)])
        (raw,) = read_raw_rows(store, "events", stream)
        assert (raw.topic, bytes(raw.state)) == (topic, payload)
        assert [r.event for r in store.read(stream)] == [event]
    finally:
        store.close()


@all_backends
def test_payload_above_the_threshold_goes_to_a_blob(store_url: str) -> None:
    """Above the threshold the row holds a small reference, its topic ends in @blob."""
    store = open_store(store_url, blob_threshold=1024)
    try:
        stream = uuid.uuid4()
        event = ev.ToolSucceeded(at=1.0, call=1, tool="t", result=_result(3 * 1024))
        _, payload = encode_event(event)
        store.append([Append(stream, 1, event)])
        (raw,) = read_raw_rows(store, "events", stream)
        assert raw.topic == "tool_succeeded:1" + BLOB_SUFFIX
        assert len(raw.state) < 100
        ref = msgspec.msgpack.decode(raw.state, type=BlobRef)
        assert ref == BlobRef(hashlib.sha256(payload).hexdigest(), len(payload))
        assert [r.event for r in store.read(stream)] == [event]
        assert [r.event for r in store.read_all()] == [event]
    finally:
        store.close()


@all_backends
def test_identical_content_is_stored_once(store_url: str) -> None:
    """The same payload appended twice (two streams) references one blob of one set of chunks."""
    store = open_store(store_url, blob_threshold=1024)
    try:
        a, b = uuid.uuid4(), uuid.uuid4()
        event = ev.ToolSucceeded(at=1.0, call=1, tool="t", result=_result(int(2.5 * MB)))
        store.append([Append(a, 1, event)])
        store.append([Append(b, 1, event)])
        ref_a = msgspec.msgpack.decode(read_raw_rows(store, "events", a)[0].state, type=BlobRef)
        ref_b = msgspec.msgpack.decode(read_raw_rows(store, "events", b)[0].state, type=BlobRef)
        assert ref_a == ref_b
        chunks = read_raw_rows(store, "blobs", _blob_id(ref_a))
        assert [c.originator_version for c in chunks] == [1, 2, 3]
        assert [len(c.state) for c in chunks] == [BLOB_CHUNK, BLOB_CHUNK, ref_a.size - 2 * MB]
        assert store.read(a)[0].event == store.read(b)[0].event == event
    finally:
        store.close()


@all_backends
def test_a_half_written_blob_is_completed_by_the_next_writer(store_url: str) -> None:
    """put_blob resumes after the chunks already present (a writer that crashed mid-blob)."""
    store = open_store(store_url, blob_threshold=1024)
    try:
        data = os.urandom(2 * MB + 17)
        ref = BlobRef(hashlib.sha256(data).hexdigest(), len(data))
        write_raw_row(store_url, store, "blobs", _blob_id(ref), 1, "blob", data[:BLOB_CHUNK])
        assert store.put_blob(data) == ref
        assert store.get_blob(ref) == data
        assert len(read_raw_rows(store, "blobs", _blob_id(ref))) == 3
    finally:
        store.close()


@all_backends
def test_a_tampered_blob_is_corrupt_data(store_url: str) -> None:
    """Reading an event whose blob chunk was altered raises CorruptData naming the store."""
    store = open_store(store_url, blob_threshold=1024)
    try:
        stream = uuid.uuid4()
        store.append([Append(stream, 1, ev.AgentFinished(at=1.0, output=_result(4096)))])
        ref = msgspec.msgpack.decode(read_raw_rows(store, "events", stream)[0].state, type=BlobRef)
        (chunk,) = read_raw_rows(store, "blobs", _blob_id(ref))
        tampered = b"X" + bytes(chunk.state)[1:]
        write_raw_row(store_url, store, "blobs", _blob_id(ref), 1, "blob", tampered)
        with pytest.raises(CorruptData, match=f"blob {ref.sha256[:12]} is missing or corrupt"):
            store.read(stream)
    finally:
        store.close()


# --- big batches ----------------------------------------------------------------------


def _append_within(store: Store, items: list[Append], seconds: float = 60) -> list[int]:
    """store.append in a thread, failing the test instead of hanging if it never returns."""
    out: list[list[int]] = []
    t = threading.Thread(target=lambda: out.append(store.append(items)), daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"append of {len(items)} events did not return in {seconds} s"
    return out[0]


@all_backends
def test_a_batch_of_many_payloads_under_the_threshold_commits(store_url: str, store: Store) -> None:
    """40 events of ~250 kB in one append (10 MB, each below the blob threshold) commit and
    read back exactly; inline bytes per commit stay within MAX_INLINE_BATCH (PostgreSQL's
    pipelined insert used to hang on such a batch)."""
    stream = uuid.uuid4()
    events = [
        ev.ToolSucceeded(at=1.0, call=i, tool="t", result=os.urandom(250_000)) for i in range(40)
    ]
    assert all(len(encode_event(e)[1]) <= store.blob_threshold for e in events)
    ids = _append_within(store, [Append(stream, i + 1, e) for i, e in enumerate(events)])
    assert len(ids) == 40
    assert [r.event for r in store.read(stream)] == events
    rows = read_raw_rows(store, "events", stream)
    assert sum(len(r.state) for r in rows) <= MAX_INLINE_BATCH
    assert rows[0].topic == "tool_succeeded:1" and rows[-1].topic.endswith(BLOB_SUFFIX)


@backends("sqlite", "postgres")
def test_a_payload_above_the_batch_budget_goes_out_of_line_whatever_the_threshold(
    store_url: str,
) -> None:
    """With a blob threshold above MAX_INLINE_BATCH, an 8 MB event still goes to a blob."""
    store = open_store(store_url, blob_threshold=32 * MB)
    try:
        stream = uuid.uuid4()
        event = ev.ToolSucceeded(at=1.0, call=1, tool="t", result=os.urandom(8 * MB))
        _append_within(store, [Append(stream, 1, event)])
        (row,) = read_raw_rows(store, "events", stream)
        assert row.topic.endswith(BLOB_SUFFIX) and len(row.state) < 100
        assert store.read(stream)[0].event == event
    finally:
        store.close()


# --- 20 MB ----------------------------------------------------------------------------


@backends("sqlite", "postgres")
@pytest.mark.parametrize("kind", ["str", "bytes"])
def test_a_20_mb_tool_result_round_trips(store: Store, kind: str) -> None:
    """A 20 MB str or bytes tool result is appended and read back exactly."""
    raw = os.urandom(20 * MB)
    result: str | bytes = raw if kind == "bytes" else raw.hex()[: 20 * MB]
    stream = uuid.uuid4()
    event = ev.ToolSucceeded(at=1.0, call=1, tool="fetch", result=result)
    store.append([Append(stream, 1, event)])
    (got,) = store.read(stream)
    assert type(got.event.result) is type(result)
    assert got.event == event
    (raw_row,) = read_raw_rows(store, "events", stream)
    assert raw_row.topic.endswith(BLOB_SUFFIX) and len(raw_row.state) < 100


@backends("sqlite", "postgres")
def test_a_20_mb_tool_result_round_trips_through_a_snapshot(store_url: str, store: Store) -> None:
    """A run returning a 20 MB tool result snapshots it out of line and rebuilds exactly."""
    run_id = uuid.uuid4().hex
    stream = run_stream(run_id)
    result = os.urandom(20 * MB)
    events: list[ev.Event] = [
        ev.AgentStarted(at=1.0, agent="a:b", import_path="a", input={"url": "x"}),
        ev.ToolInvoked(at=2.0, call=1, tool="fetch"),
        ev.ToolSucceeded(at=3.0, call=1, tool="fetch", result=result),
        ev.Checkpoint(at=4.0, call=2, name="fetched"),
        ev.AgentFinished(at=5.0, output=result),  # the result enters the state here
    ]
    w = RunWriter(store, RunState(run_id=run_id), snapshot_every=5)
    for e in events:
        # The checkpoint (position 4, CHECKPOINT_GAP events from the run's start) snapshots
        # the state where the result is only observed (inline); the cadence then takes 5.
        w.append(e)
    rows = read_raw_rows(store, "snapshots", stream)
    assert [(r.originator_version, r.topic) for r in rows] == [
        (4, SNAPSHOT_TOPIC),
        (5, SNAPSHOT_TOPIC + BLOB_SUFFIX),
    ]
    assert len(rows[1].state) < 100
    snap = snapshot_at_or_before(store, stream, None)
    assert snap is not None and snap.position == 5 and snap.output == result
    assert snap == w.state == fold(list(enumerate(events, 1)), RunState(run_id=run_id))
    assert rebuild(store, run_id) == w.state
    # A second handle on the same URL rebuilds the same state from the stored blobs.
    other = open_store(store_url)
    try:
        assert rebuild(other, run_id) == w.state
        assert rebuild(other, run_id, upto=4).last_observation == w.state.last_observation
    finally:
        other.close()
