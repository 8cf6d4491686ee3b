"""A property of import on mutated exports: lines dropped, repeated or swapped, bytes
flipped, fields set to random JSON values, whole lines replaced (with the hash chain left
broken or recomputed, as a forger would). Import either refuses the file with the
engine's error (the CLI's exit 2) and writes nothing, or imports exactly the run the file
describes into the run's own stream; it never fails another way."""

from __future__ import annotations

import base64
import json
from typing import Any

import msgspec
import pytest
from hostile_kit import Doc, docs_of, forge, payer, renumber, source
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import Engine
from engine import events as ev
from engine.errors import AgentlogError
from engine.log.history import run_stream
from engine.store.codec import encode_event
from replay import export_lines, import_run
from replay.cli.entry import run_cli

HONEST = b"".join(export_lines(source, source.run(payer, order="p0").run_id))
FIELDS = ["v", "index", "total", "run_id", "position", "type", "schema", "event", "msgpack"]
TAGS = sorted(ev.EVENT_TYPES)
NUMBERS = [2**63, 2**63 - 1, -(2**63) - 1, 2**70, -(10**9), 0, -1, 1e300, -1e300]
SPECIAL = st.sampled_from([*NUMBERS, "a" * 200, "no_such_event", "", "x\n", *TAGS])
JSON = st.recursive(
    st.one_of(
        SPECIAL,  # first: shrinking and early examples favour it
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(max_size=8),
    ),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=6,
)


def _mutate_docs(data: st.DataObject, docs: list[Doc]) -> list[Doc]:
    """One forger's edit of the line documents."""
    # Edits of fields and event values are the forger's main tools: weighted up.
    op = data.draw(st.sampled_from(["field"] * 3 + ["event"] * 3 + ["drop", "dup", "swap", "line"]))
    i = data.draw(st.integers(0, len(docs) - 1))
    j = data.draw(st.integers(0, len(docs) - 1))
    if op == "drop" and len(docs) > 1:
        del docs[i]
    elif op == "dup":
        docs.insert(j, json.loads(json.dumps(docs[i])))
    elif op == "swap":
        docs[i], docs[j] = docs[j], docs[i]
    elif op == "field":
        docs[i][data.draw(st.sampled_from(FIELDS))] = data.draw(st.one_of(SPECIAL, JSON))
    elif op == "event" and isinstance(docs[i].get("event"), dict):
        keys = [*docs[i]["event"], "call", "at", "type", "run_id", "key", "value", "output"]
        docs[i]["event"][data.draw(st.sampled_from(keys))] = data.draw(st.one_of(SPECIAL, JSON))
    elif op == "line":
        docs[i] = data.draw(st.dictionaries(st.sampled_from(FIELDS), JSON))
    return docs


def _mutate_bytes(data: st.DataObject, lines: list[bytes]) -> list[bytes]:
    """One edit of the raw file that leaves the hash chain as it was."""
    op = data.draw(st.sampled_from(["drop", "dup", "swap", "flip", "cut"]))
    i = data.draw(st.integers(0, len(lines) - 1))
    j = data.draw(st.integers(0, len(lines) - 1))
    if op == "drop":
        del lines[i]
    elif op == "dup":
        lines.insert(j, lines[i])
    elif op == "swap":
        lines[i], lines[j] = lines[j], lines[i]
    elif op == "flip" and lines[i]:
        at = data.draw(st.integers(0, len(lines[i]) - 1))
        bit = data.draw(st.integers(1, 255))
        lines[i] = lines[i][:at] + bytes([lines[i][at] ^ bit]) + lines[i][at + 1 :]
    else:
        lines[i] = lines[i][: data.draw(st.integers(0, len(lines[i])))]
    return lines


def _mutated(data: st.DataObject) -> bytes:
    if data.draw(st.integers(0, 3), label="rechain") > 0:  # most forgers recompute it
        docs = docs_of(HONEST)
        for _ in range(data.draw(st.integers(1, 2))):
            docs = _mutate_docs(data, docs)
        if data.draw(st.booleans(), label="renumber") and all(isinstance(d, dict) for d in docs):
            docs = renumber(docs)
        return forge(docs)
    lines = HONEST.splitlines(keepends=True)
    for _ in range(data.draw(st.integers(1, 3))):
        lines = _mutate_bytes(data, lines)
    return b"".join(lines)


def _described(raw: bytes) -> ev.Event:
    """The event an accepted line describes, decoded here on its own."""
    line: dict[str, Any] = json.loads(raw)
    if line.get("msgpack") is not None:
        return msgspec.msgpack.decode(base64.b64decode(line["msgpack"]), type=ev.AnyEvent)
    return msgspec.json.decode(json.dumps(line["event"]), type=ev.AnyEvent)


@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.data())
def test_import_of_a_mutated_export_refuses_it_or_imports_exactly_its_run(
    data: st.DataObject,
) -> None:
    blob = _mutated(data)
    eng = Engine("memory://")
    try:
        rid, written = import_run(eng, blob, "mutated.jsonl")
    except AgentlogError:
        assert eng.store.max_global_position() == 0 and eng.runs() == []
        return
    recorded = eng.store.read_all(limit=10_000)
    assert written and all(r.stream == run_stream(rid) for r in recorded)
    lines = blob.splitlines()
    assert len(recorded) == len(lines) + 1 and isinstance(recorded[-1].event, ev.RunImported)
    for rec, raw in zip(recorded, lines, strict=False):
        assert encode_event(rec.event) == encode_event(_described(raw))
        assert not str(rec.event.__struct_config__.tag).startswith(("effect_", "circuit_"))
    assert [r.run_id for r in eng.runs()] == [rid]


@pytest.mark.parametrize("cut", [1, 200, -3])
def test_the_cli_refuses_a_damaged_file_with_exit_2(
    cut: int, tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """In-process through the CLI: a file cut anywhere exits 2 with one line."""
    path = tmp_path / "cut.jsonl"
    path.write_bytes(HONEST[:cut])
    assert run_cli(["import", str(path), "--url", f"sqlite:///{tmp_path}/x.db"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("agentlog: error:") and "Traceback" not in err
