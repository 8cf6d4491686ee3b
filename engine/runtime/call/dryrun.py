"""A dry-run fork's side-effecting call: nothing is sent; ``would_send`` records what
would have been (tool, arguments as stored, key).

The tool's declared result cannot be made up: the call returns the parent's recorded
result of the same call after the fork point (same tool and arguments, as ``reuse`` would
take it over), else None when the tool declares it may (``-> Receipt | None``); otherwise
the fork stops there, status ``dry_run`` (``DryRunStop``). A replay of a recorded
``would_send`` returns what it recorded. A dry run's ``run.send`` posts nothing either:
its ``would_send`` names the tool ``run.send``.
"""

from __future__ import annotations

import types
import typing
from typing import Any

from ... import events as ev
from ...errors import DryRunStop
from ...log.effects import SEND, Outcome
from ..defs.definitions import ToolDef
from ..journal.callstate import CallState
from ..run.context import RunContext
from . import forks
from .record import Call


def admits_none(tp: Any) -> bool:
    """Whether the declared type ``tp`` lets a call return None (``X | None``,
    ``Optional[X]``); an undeclared result does not (a side effect returns a receipt)."""
    origin = typing.get_origin(tp)
    if origin is typing.Union or origin is types.UnionType:
        return type(None) in typing.get_args(tp)
    return False


def dry(dry_run: bool, tool: ToolDef, entry: CallState | None) -> bool:
    """Whether this call is a dry run's would-be effect: a side-effecting call with nothing
    recorded for it in a dry-run fork, or one whose ``would_send`` is recorded."""
    if entry is not None:
        return isinstance(entry.outcome, ev.WouldSend)
    return dry_run and tool.side_effect


def would_send(call: Call, state: CallState, entry: CallState | None) -> Any:
    """Record the call's ``would_send`` (unless ``entry`` holds it: a replay) and return
    what stands in for its result, or stop the fork there."""
    ctx, tool = call.ctx, call.tool
    if entry is not None and isinstance(entry.outcome, ev.WouldSend):
        sent = entry.outcome
    else:
        ctx.live(call.number, f"tool {tool.name}")  # verifying: the log ends here
        sent = _sent(call, state)
        ctx.record(sent)
        ctx.log.info("would_send", call=call.number, tool=tool.name, key=state.key)
    if sent.stopped:
        raise DryRunStop(
            f"dry run stopped at call {call.number}: {tool.name} would be sent, and its "
            "declared result cannot be made up",
            call.number,
        )
    return sent.result


def _sent(call: Call, state: CallState) -> ev.WouldSend:
    """What stands in for the result of a call a dry run does not send: the parent's
    recorded result of the same call (same tool, same arguments) after the fork point, as
    a fork rewound with ``effects="reuse"`` would take it over; else None if the tool
    declares it may return None; else nothing (the fork stops here)."""
    taken = forks.inheritance(call.ctx).take(call.tool.name, call.ahash)
    fx = None if taken is None or taken[1].outcome != Outcome.COMMITTED else taken[1]
    return ev.WouldSend(
        at=call.ctx.config.wall(),
        call=call.number,
        tool=call.tool.name,
        args=call.shown,
        args_hash=call.ahash,
        key=state.key,
        stopped=fx is None and not admits_none(call.tool.returns),
        result=None if fx is None else fx.result,
        parent_call=None if fx is None else fx.call,
    )


def would_post(ctx: RunContext, call: int, message: dict[str, Any], ahash: str) -> None:
    """A dry run's ``run.send``: nothing is posted; ``would_send`` (tool ``run.send``)
    records the recipient, topic and value (redacted) it would have posted."""
    mid = f"{ctx.run_id}:{call}"
    sent = ev.WouldSend(
        at=ctx.config.wall(), call=call, tool=SEND, args=message, args_hash=ahash, key=mid
    )
    ctx.record(sent)
    ctx.log.info("would_send", call=call, tool=SEND, to=message["to"])
