"""Event fields whose values are a closed set are StrEnums (engine/kinds.py): a member
encodes to exactly the bytes its plain string did (logs need no migration), decodes back
as the member, and a value outside the set, in an old or forged log, is the store's one
clear error (CorruptData naming the run and the position), not a crash further on."""

from __future__ import annotations

import base64
import json
import typing
import uuid
from enum import StrEnum
from pathlib import Path
from typing import Any

import msgspec
import pytest
from conftest import all_backends, write_raw_row

from engine import events as ev
from engine.errors import CorruptData, ToolError, Transient
from engine.kinds import (
    Asked,
    Effects,
    FailureKind,
    Purpose,
    RecoveryAction,
    RunStatus,
    Source,
    WaitReason,
)
from engine.log.history import rebuild, run_stream
from engine.policy.failure import classify
from engine.store import Append, Store, codec

GOLDEN = Path(__file__).parent / "golden" / "events_v1.jsonl"

# Each closed field: its event, the field, its vocabulary, the event's other fields.
CLOSED: list[tuple[type[ev.Event], str, type[StrEnum], dict[str, Any]]] = [
    (ev.AgentStarted, "effects", Effects, {"agent": "a:b", "import_path": "a"}),
    (ev.AgentFailed, "kind", FailureKind, {"error": "boom"}),
    (ev.HumanInputRequested, "reason", Asked, {"call": 1, "question": "ok?"}),
    (ev.ToolSucceeded, "source", Source, {"call": 1, "tool": "t"}),
    (ev.ToolFailed, "kind", FailureKind, {"call": 1, "tool": "t", "message": "m"}),
    (ev.RetryScheduled, "kind", FailureKind, {"call": 1, "tool": "t", "attempt": 2, "delay": 0.5}),
    (ev.ChildFinished, "status", RunStatus, {"call": 1, "child_run_id": "c"}),
    (ev.TimerSet, "purpose", Purpose, {"call": 1, "until": 2.0}),
    (ev.RunWaiting, "reason", WaitReason, {"call": 1}),
    (ev.RecoveryDecided, "kind", FailureKind, {"action": "retry", "from_position": 1}),
    (ev.RecoveryDecided, "action", RecoveryAction, {"kind": "transient", "from_position": 1}),
]
CASES = [
    pytest.param(cls, field, member, base, id=f"{cls.__name__}.{field}={member}")
    for cls, field, vocabulary, base in CLOSED
    for member in vocabulary
]


def _enum_of(annotation: Any) -> type[StrEnum] | None:
    for tp in (annotation, *typing.get_args(annotation)):
        if isinstance(tp, type) and issubclass(tp, StrEnum):
            return tp
    return None


def test_every_strenum_field_of_the_vocabulary_is_in_the_table() -> None:
    """A new closed field joins these proofs (the table is checked against the events)."""
    found = set()
    for cls in ev.EVENT_TYPES.values():
        for name, annotation in typing.get_type_hints(cls).items():
            if (vocabulary := _enum_of(annotation)) is not None:
                found.add((cls, name, vocabulary))
    assert found == {(cls, field, vocabulary) for cls, field, vocabulary, _ in CLOSED}


def _default(cls: type[ev.Event], field: str) -> Any:
    return next(
        (f.default for f in msgspec.structs.fields(cls) if f.name == field), msgspec.NODEFAULT
    )


@pytest.mark.parametrize(("cls", "field", "member", "base"), CASES)
def test_a_member_encodes_as_its_plain_string_and_decodes_as_the_member(
    cls: type[ev.Event], field: str, member: StrEnum, base: dict[str, Any]
) -> None:
    """Its old plain-string payload decodes to the member; a value other than the field's
    default encodes to the very bytes its plain string did."""
    plain = codec.encode_event(cls(at=1.0, **base, **{field: str(member.value)}))
    decoded = codec.decode_event(*plain)
    assert getattr(decoded, field) is member
    assert decoded == cls(at=1.0, **base, **{field: member})
    if member is not _default(cls, field):
        assert codec.encode_event(decoded) == plain


@pytest.mark.parametrize(("cls", "field", "vocabulary", "base"), CLOSED)
def test_a_value_outside_the_vocabulary_is_corrupt_data(
    cls: type[ev.Event], field: str, vocabulary: type[StrEnum], base: dict[str, Any]
) -> None:
    member = next(m for m in vocabulary if m is not _default(cls, field))
    topic, payload = codec.encode_event(cls(at=1.0, **base, **{field: member}))
    forged = msgspec.msgpack.encode({**msgspec.msgpack.decode(payload), field: "sideways"})
    assert getattr(codec.decode_event(topic, payload), field) is member
    with pytest.raises(CorruptData, match="sideways"):
        codec.decode_event(topic, forged)


def _header_for(cls: type[ev.Event], payload: bytes) -> bytes:
    """``payload`` (a fixmap) with the header msgspec writes for ``cls`` today: a struct
    of more than 15 fields (its tag included) is written under a map16 header whatever
    the count of fields it leaves out, the same entries after it."""
    if len(cls.__struct_fields__) + 1 <= 15:
        return payload
    assert payload[0] & 0xF0 == 0x80
    return b"\xde" + (payload[0] & 0x0F).to_bytes(2, "big") + payload[1:]


def test_the_golden_history_reencodes_to_its_recorded_bytes() -> None:
    """Every golden v1 payload, decoded with today's StrEnum fields, encodes to the very
    bytes agentlog 0.1 wrote (the same entries in the same order; an event type grown past
    15 fields has the longer map header)."""
    rows = [json.loads(line) for line in GOLDEN.read_text(encoding="utf-8").splitlines()]
    for row in rows:
        payload = base64.b64decode(row["payload"])
        event = codec.decode_event(row["topic"], payload)
        assert codec.encode_event(event) == (
            row["topic"],
            _header_for(type(event), payload),
        ), row["position"]
    failed = next(r for r in rows if r["topic"].startswith("tool_failed"))
    event = codec.decode_event(failed["topic"], base64.b64decode(failed["payload"]))
    assert isinstance(event, ev.ToolFailed) and isinstance(event.kind, FailureKind)


@all_backends
def test_a_forged_kind_in_a_stored_log_is_corrupt_data_naming_its_position(
    store_url: str, store: Store
) -> None:
    run_id = uuid.uuid4().hex
    stream = run_stream(run_id)
    start = ev.AgentStarted(at=1.0, agent="a:b", import_path="a")
    store.append([Append(stream, 1, start), Append(stream, 2, ev.ToolInvoked(1.0, 1, "t"))])
    topic, payload = codec.encode_event(ev.ToolFailed(2.0, 1, "t", FailureKind.PERMANENT, "m"))
    forged = payload.replace(b"permanent", b"sideways!")
    write_raw_row(store_url, store, "events", stream, 3, topic, forged)
    with pytest.raises(CorruptData, match=f"run {run_id}.*position 3"):
        rebuild(store, run_id)


def test_a_classifier_s_kind_outside_the_vocabulary_is_recorded_permanent() -> None:
    """A hook may return a ToolError subclass of a kind of its own: the call fails for
    good (as it always did) and the log records "permanent", which every reader decodes."""

    class Sideways(ToolError):
        kind = "sideways"  # type: ignore[assignment]

    kind = classify(RuntimeError("x"), side_effect=True, hook=lambda e: Sideways)
    assert kind is FailureKind.PERMANENT
    assert classify(RuntimeError("x"), side_effect=True, hook=lambda e: Transient) is (
        FailureKind.TRANSIENT
    )
