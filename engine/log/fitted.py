"""The recovery context fitted to a model's window (``engine.context(run_id, max_tokens=N)``):
the goal, the plan and progress, the pending work and the last observation are kept whole;
the last steps are listed in detail, a large value in them as a structured summary with the
id of a blob holding it whole (``agentlog blob ID``); older events keep only their type,
tool and key arguments, and the oldest of those go first when even that is too long.
Deterministic: the same log and budget give the same text."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from .. import events as ev
from ..secrets import redact
from ..tokens import count_tokens
from .state import RunState

SUMMARY_CHARS = 240  # a value longer than this (as JSON) becomes a summary with a blob id
KEY_ARG_CHARS = 40  # an older call keeps the arguments no longer than this
RECENT = (16, 8, 4, 2, 1, 0)  # detailed items tried, most first, until the text fits
Keep = Callable[[bytes], str | None]  # stores a value whole, returns its blob id (or None)


@dataclass(frozen=True)
class Item:
    """One event worth listing: in ``detail``, or as a ``brief`` line once it is old."""

    detail: str
    brief: str


def as_json(value: Any) -> str:
    return msgspec.json.encode(value).decode()


def summary(value: Any, keep: Keep) -> str:
    """``value`` whole when short, else its shape and the blob id holding it."""
    text = as_json(value)
    if len(text) <= SUMMARY_CHARS:
        return text
    match value:
        case dict():
            shape = f"object of {len(value)} keys: {', '.join(map(str, list(value)[:12]))}"
        case list():
            shape = f"list of {len(value)} items"
        case str():
            shape = f"text of {len(value)} chars starting {as_json(value[:80])}"
        case _:
            shape = f"{type(value).__name__} of {len(text)} chars"
    blob = keep(text.encode())
    where = f"blob {blob}" if blob else "in the log"
    return f"<{shape}; whole value: {where}>"


def _key_args(args: dict[str, Any]) -> str:
    short = {k: v for k, v in args.items() if len(as_json(v)) <= KEY_ARG_CHARS}
    return ", ".join(f"{k}={as_json(v)}" for k, v in short.items())


def items(events: Iterable[ev.Positioned], keep: Keep) -> list[Item]:
    """The listed events of a run, in order."""
    intents: dict[int, ev.ToolInvoked] = {}
    out: list[Item] = []
    for r in events:
        e, at = r.event, r.position
        match e:
            case ev.ToolInvoked():
                intents[e.call] = e
            case ev.ToolSucceeded() | ev.ToolFailed():
                intent = intents.get(e.call)
                args = intent.args if intent else {}
                key = f" key {intent.key}" if intent and intent.key else ""
                head = f"#{at} {e.__struct_config__.tag} {e.tool}"
                if isinstance(e, ev.ToolSucceeded):
                    tail = f" -> {summary(e.result, keep)}"
                else:
                    tail = f" {e.kind}: {e.message[:200]}"
                full = f"{head}({summary(args, keep)}){key}{tail}"
                out.append(Item(full, f"{head}({_key_args(args)}){key}"))
            case ev.LlmDecided():
                head = f"#{at} llm_decided {e.name}"
                out.append(Item(f"{head} -> {summary(e.value, keep)}", head))
            case ev.StepCompleted() | ev.Checkpoint():
                line = f"#{at} {e.__struct_config__.tag} {e.name}"
                out.append(Item(line, line))
            case ev.HumanInputProvided():
                line = f"#{at} human_input_provided -> {summary(e.value, keep)}"
                out.append(Item(line, f"#{at} human_input_provided"))
    return out


def header(state: RunState, given: dict[str, Any]) -> list[str]:
    """What is never cut: goal, plan and progress, pending work, last observation."""
    done = set(state.steps_done)
    left = [s for s in state.plan if s not in done]
    lines = [
        "You are resuming an interrupted task from its recorded log. Do not repeat "
        "completed work; side effects already done must not be sent again.",
        f"Run {state.run_id} of agent {state.agent}: {state.status}.",
        f"Goal: {state.agent} with input {as_json(redact(given))}",
        f"Plan: {', '.join(state.plan) or 'none recorded'}",
        f"Done: {', '.join(state.steps_done) or 'nothing yet'}",
        f"Next: {', '.join(left) or 'nothing planned'}",
    ]
    for p in state.pending:
        kind = "side effect, uncertain" if p.side_effect else "read"
        lines.append(f"Pending: call {p.call} {p.tool} (key {p.key}; {kind}) has no outcome")
    if state.waits_on is not None:
        lines.append(f"Waiting on: {as_json(state.waits_on)}")
    if state.error:
        lines.append(f"Stopped by: {state.error}")
    lines.append(f"Last observation: {state.last_observation or 'none'}")
    return lines


def fit(head: Sequence[str], listed: Sequence[Item], max_tokens: int | None) -> str:
    """The context within ``max_tokens`` (None: everything in detail); the header alone
    is returned whole even when it does not fit."""
    if max_tokens is None:
        return _render(head, [i.detail for i in listed], 0)
    for recent in RECENT:
        cut = max(0, len(listed) - recent)
        lines = [i.brief for i in listed[:cut]] + [i.detail for i in listed[cut:]]
        text = _render(head, lines, 0)
        if count_tokens(text) <= max_tokens:
            return text
    briefs = [i.brief for i in listed]
    lo, hi = 0, len(briefs)  # the fewest oldest lines to leave out so that it fits
    while lo < hi:
        mid = (lo + hi) // 2
        if count_tokens(_render(head, briefs[mid:], mid)) <= max_tokens:
            hi = mid
        else:
            lo = mid + 1
    return _render(head, briefs[lo:], lo)


def _render(head: Sequence[str], lines: Sequence[str], dropped: int) -> str:
    out = [*head, "", "History (oldest first):"]
    if dropped:
        out.append(f"({dropped} older events left out)")
    out.extend(lines or ["(none)"])
    return "\n".join(out) + "\n"
