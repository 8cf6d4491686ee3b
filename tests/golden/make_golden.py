"""Generate the golden v1 history once: ``python tests/golden/make_golden.py``.

The files it writes are committed and must never be regenerated to make a failing test
pass: they are what agentlog 0.1 wrote (schema version 1 of every event), and today's code
must still decode and fold them to the same values (see tests/test_upcasting.py).
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import msgspec

from engine import events as ev
from engine.log.state import RunState, fold
from engine.store.codec import encode_event

HERE = Path(__file__).parent
RUN_ID = "5eed0000c0de4a11b0a7d00dfeedface"
T = 1_760_000_000.0
KEY = "refund:order-7"


def full(value: msgspec.Struct) -> Any:
    """Every field of a struct (defaults included), as JSON-ready builtins."""
    data = {f: getattr(value, f) for f in value.__struct_fields__}
    tag = value.__struct_config__.tag
    if isinstance(tag, str):
        data = {"type": tag, **data}
    return msgspec.to_builtins(data)


def history() -> list[ev.Event]:
    return [
        ev.AgentStarted(
            at=T,
            agent="shop.agents:refund",
            import_path="shop.agents",
            input={
                "order": 7,
                "amount": 30.5,
                "note": "na\u00efve \u2013 \u00fcn\u00efcode",
                "tags": ["a", None],
            },
            code_version="0.1.0",
        ),
        ev.PlanCreated(at=T + 1, call=1, steps=["look up order", "refund", "mail customer"]),
        ev.StepStarted(at=T + 2, call=2, name="look up order"),
        ev.LlmDecided(
            at=T + 3, call=3, name="decide", value={"refund": True}, args_hash="a1", duration=0.8
        ),
        ev.ToolInvoked(
            at=T + 4,
            call=4,
            tool="payments.refund",
            args={"order": 7, "amount": 30.5},
            args_hash="b2",
            key=KEY,
            side_effect=True,
        ),
        ev.EffectClaimed(at=T + 4.5, key=KEY, run_id=RUN_ID, call=4, args_hash="b2"),
        ev.ToolFailed(
            at=T + 5,
            call=4,
            tool="payments.refund",
            kind="transient",
            message="HTTP 503",
            error_type="HTTPError",
            final=False,
            duration=2.0,
            evidence={"status": 503},
        ),
        ev.RetryScheduled(at=T + 5.1, call=4, tool="payments.refund", attempt=2, delay=0.37),
        ev.CircuitOpened(at=T + 5.2, tool="payments.refund", failures=3),
        ev.CircuitHalfOpened(at=T + 6, tool="payments.refund"),
        ev.ToolSucceeded(
            at=T + 6.5,
            call=4,
            tool="payments.refund",
            result={"id": "re_9", "receipt": b"\x00\xffPDF"},
            attempt=2,
            duration=0.4,
        ),
        ev.EffectCommitted(at=T + 6.6, key=KEY, run_id=RUN_ID, call=4, result={"id": "re_9"}),
        ev.CircuitClosed(at=T + 6.7, tool="payments.refund"),
        ev.StepCompleted(at=T + 7, call=2, name="look up order", duration=5.0),
        ev.Checkpoint(at=T + 8, call=5, name="refunded"),
        ev.HumanInputRequested(at=T + 9, call=6, question="Also send a voucher?"),
        ev.HumanInputProvided(at=T + 99, call=6, value="no"),
        ev.AgentFailed(at=T + 100, error="mail server down", kind="transient", call=7),
        ev.AgentResumed(at=T + 200, owner="worker-2", reason="retry"),
        ev.CompensationStarted(at=T + 201, call=4, tool="payments.refund", key=KEY),
        ev.Compensated(at=T + 202, call=4, tool="payments.refund", result={"undone": True}),
        ev.EffectReleased(at=T + 203, key=KEY, run_id=RUN_ID, call=4, reason="compensated"),
        ev.Checkpoint(at=T + 204, call=8, name="refunded"),
        ev.AgentAbandoned(at=T + 205, reason="operator gave up"),
        ev.AgentFinished(at=T + 206, output={"status": "abandoned", "refund": None}),
    ]


def main() -> None:
    events = history()
    assert {type(e).__struct_config__.tag for e in events} <= set(ev.EVENT_TYPES)
    lines = []
    for position, event in enumerate(events, 1):
        topic, payload = encode_event(event)
        assert topic.endswith(":1"), topic
        row = {
            "position": position,
            "topic": topic,
            "payload": base64.b64encode(payload).decode(),
            "expected": full(event),
        }
        lines.append(json.dumps(row, ensure_ascii=False, sort_keys=True))
    (HERE / "events_v1.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    state = fold(list(enumerate(events, 1)), RunState(run_id=RUN_ID))
    out = {"run_id": RUN_ID, "state": full(state)}
    (HERE / "run_v1_state.json").write_text(
        json.dumps(out, ensure_ascii=False, indent=1, sort_keys=True) + "\n", encoding="utf-8"
    )


if __name__ == "__main__":
    main()
