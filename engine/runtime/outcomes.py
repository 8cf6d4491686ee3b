"""A tool call in flight and how its intent and outcome are written to the log."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from .. import events as ev
from .. import failpoints
from ..store import Append
from . import ledger
from .context import RunContext
from .defs import ToolDef, normalize


@dataclass
class Call:
    """One tool call in flight: who, what, under which key, how far it got."""

    ctx: RunContext
    tool: ToolDef
    number: int
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    named: dict[str, Any]
    ahash: str
    key: str | None = None
    business: bool = False
    attempts: int = 0
    intent_written: bool = False
    claim_version: int = 0  # the ledger version of our claim (business keys)
    maybe_landed: bool = False  # an attempt's outcome was unknown: the effect may exist
    parent_call: int | None = None  # a fork taking over its parent's effect at this call
    loop: asyncio.AbstractEventLoop | None = None
    shown: dict[str, Any] = field(default_factory=dict)  # the arguments as recorded (redacted)

    @property
    def run_id(self) -> str:
        return self.ctx.run_id


def intent(c: Call) -> ev.ToolInvoked:
    return ev.ToolInvoked(
        at=ev.now(),
        call=c.number,
        tool=c.tool.name,
        args=c.shown,
        args_hash=c.ahash,
        key=c.key,
        side_effect=c.tool.side_effect,
        parent_call=c.parent_call,
    )


def succeed(
    c: Call, result: Any, *, source: str, intent: bool = False, duration: float = 0.0
) -> Any:
    # Secret-named entries are redacted live too: the agent sees what a replay will give it.
    value = c.tool.redacted(normalize(result, f"result of tool {c.tool.name}"), c.ctx.seen)
    done = ev.ToolSucceeded(
        at=ev.now(),
        call=c.number,
        tool=c.tool.name,
        result=value,
        attempt=max(c.attempts, 1),
        duration=duration,
        source=source,
    )
    extra: list[Append] = []
    if c.business and c.claim_version and source != "ledger":
        assert c.key is not None
        state = ledger.KeyState(c.claim_version, None, None)
        if source == "fallback":  # the degraded path is not the effect: free the key,
            if not c.maybe_landed:  # unless an earlier attempt may have landed it
                extra.append(ledger.release_event(state, c.key, c.run_id, c.number, "fallback"))
        else:
            extra.append(ledger.commit_event(state, c.key, c.run_id, c.number, value))
    tool = c.tool
    if (
        source == "executed"
        and c.intent_written
        and not extra
        and tool.side_effect
        and (tool.verify is not None or tool.takes_key)
        and c.ctx.config.defer_outcomes
    ):
        c.ctx.defer(done)  # a crash before the next commit leaves it uncertain: self-resolving
    else:
        record(c, done, extra=extra, with_intent=intent or not c.intent_written)
    failpoints.hit("after_outcome")
    c.ctx.log.info("tool_succeeded", call=c.number, tool=c.tool.name, key=c.key, source=source)
    return value


def record(
    c: Call, *events: ev.Event, extra: list[Append] | None = None, with_intent: bool | None = None
) -> None:
    """Append ``events``, preceded by the intent if it was not written yet (read-only tools)."""
    if with_intent is None:
        with_intent = not c.intent_written
    if with_intent:
        events = (intent(c), *events)
        c.intent_written = True
    c.ctx.record(*events, extra=extra or ())
