"""An outcome is encoded once: the bytes its size check made are the bytes its append
writes, even when the append comes a call later (a deferred outcome)."""

from __future__ import annotations

from engine import events as ev
from engine.store import codec


def _done(result: dict[str, int]) -> ev.ToolSucceeded:
    return ev.ToolSucceeded(at=1.0, call=1, tool="t", result=result, attempt=1)


def test_a_kept_event_is_appended_with_the_bytes_encoded_for_its_size() -> None:
    done = _done({"i": 1})
    size = codec.kept(done)
    made = codec._kept[id(done)][1]  # what the size check encoded
    topic, payload = codec.encode_event(done)
    assert payload is made and len(payload) == size  # not encoded a second time
    assert codec.decode_event(topic, payload) == done
    _, again = codec.encode_event(done)  # taken once: a later append encodes afresh
    assert again == payload and again is not payload


def test_only_the_same_event_takes_kept_bytes_and_large_ones_are_not_kept() -> None:
    done, equal = _done({"i": 1}), _done({"i": 1})
    codec.kept(done)
    assert codec.encode_event(equal)[1] == codec.encode_event(done)[1]
    big = _done({str(i): i for i in range(20_000)})
    size = codec.kept(big)
    assert size > 64 * 1024 and id(big) not in codec._kept
