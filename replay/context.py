"""The recovery context: what an LLM needs to pick up an interrupted run, as prompt text.

Built from the log alone: the goal (agent and input), plan and progress, completed
steps with their key results, pending work (uncertain side effects, a waiting
question, remaining plan steps, the failure that stopped the run) and the last
observation. Bounded: results are summarised and only the latest steps are listed.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Any

from engine import EventView, RunState
from engine.secrets import redact

from .output import brief, clock, plural

MAX_ITEMS = 40
RESULT_CHARS = 160
MAX_CHARS = 12_000


def recovery_context(state: RunState, events: Iterable[EventView]) -> str:
    """The prompt-ready text for resuming ``state``'s run, built from its ``events``."""
    done: deque[str] = deque(maxlen=MAX_ITEMS)
    count = 0
    intents: dict[int, dict[str, Any]] = {}
    failures: dict[int, list[str]] = {}
    questions: dict[int, str] = {}
    last_type = ""
    given: dict[str, Any] = {}  # the input, stored once in agent_started
    for e in events:
        d = e.data
        last_type = e.type
        item = None
        if e.type == "agent_started":
            given = d.get("input") or {}
        elif e.type == "tool_invoked":
            intents[d["call"]] = d
        elif e.type == "tool_failed":
            failures.setdefault(d["call"], []).append(d.get("kind", "?"))
        elif e.type == "tool_succeeded":
            item = _tool_line(d, intents.get(d["call"], {}), failures.pop(d["call"], []))
        elif e.type == "llm_decided":
            item = f"decided {d['name']!r} -> {brief(d.get('value'), RESULT_CHARS)}"
        elif e.type == "step_completed":
            error = f" with error {d['error']}" if d.get("error") else ""
            item = f"step {d['name']!r} completed{error}"
        elif e.type == "checkpoint":
            item = f"checkpoint {d['name']!r} reached"
        elif e.type == "human_input_requested":
            questions[d["call"]] = d.get("question", "")
        elif e.type == "human_input_provided":
            asked = questions.get(d["call"], "a question")
            item = f"a person answered {brief(asked, 80)} with {brief(d.get('value'), 80)}"
        elif e.type == "compensated":
            item = f"compensated {d.get('tool')} (call {d.get('call')})"
        if item is not None:
            count += 1
            done.append(item)

    out = [
        "You are resuming an interrupted task. Everything below comes from the run's",
        "recorded log. Do not repeat completed work; side effects already done must not",
        "be sent again.",
        "",
        "## Goal",
        f"Agent {state.agent} was started with this input:",
        *(f"  {k}: {brief(v, 400)}" for k, v in redact(given).items()),
        "",
        "## Status",
        f"Run {state.run_id} is {state.status} after {state.position} recorded events "
        f"(last: {last_type or 'none'} at {clock(state.updated_at, date=True)} UTC).",
        f"Resumed {plural(state.resumes, 'time')}; {plural(state.retries, 'retry', 'retries')}, "
        f"{plural(state.failures, 'failed attempt')}.",
    ]
    if state.parent_run_id:
        out.append(f"Forked from run {state.parent_run_id} at position {state.fork_position}.")
    out += ["", *_plan(state)]
    out += ["", "## Completed steps and key results"]
    if count > len(done):
        out.append(f"  ({count - len(done)} earlier items omitted)")
    first = count - len(done) + 1
    out += [f"  {first + i}. {item}" for i, item in enumerate(done)] or ["  (none yet)"]
    out += ["", "## Pending work", *_pending(state, intents)]
    out += ["", "## Last observation", f"  {state.last_observation or '(none)'}"]
    text = "\n".join(out) + "\n"
    if len(text) > MAX_CHARS:
        text = text[: MAX_CHARS - 40] + "\n  ... (context cut to its size limit)\n"
    return text


def _tool_line(d: dict[str, Any], intent: dict[str, Any], failed: list[str]) -> str:
    args = ", ".join(f"{k}={brief(v, 40)}" for k, v in (intent.get("args") or {}).items())
    line = f"{d['tool']}({args}) -> {brief(d.get('result'), RESULT_CHARS)}"
    if failed:
        line += f" (after {plural(len(failed), 'failed attempt')}: {', '.join(failed)})"
    source = d.get("source", "executed")
    if source != "executed":
        line += f" [outcome {source}]"
    return line


def _plan(state: RunState) -> list[str]:
    if not state.plan:
        return ["## Plan", "  (no plan recorded)"]
    done = set(state.steps_done)
    n = sum(1 for s in state.plan if s in done)
    lines = [f"## Plan and progress ({n} of {len(state.plan)} done)"]
    marked_next = False
    for step in state.plan:
        if step in done:
            lines.append(f"  [x] {step}")
        else:
            lines.append(f"  [ ] {step}" + ("  <- next" if not marked_next else ""))
            marked_next = True
    return lines


def _pending(state: RunState, intents: dict[int, dict[str, Any]]) -> list[str]:
    lines = []
    for p in state.pending:
        if p.side_effect:
            lines.append(
                f"  - {p.tool} (call {p.call}, key {p.key}): the request was recorded as "
                "intended but its outcome is unknown. Resolve it by verifying or re-sending "
                "with the same key; never with a new key."
            )
        else:
            lines.append(f"  - {p.tool} (call {p.call}) was running; it will run again.")
    if state.waiting:
        lines.append(f"  - waiting for a person to answer: {state.waiting}")
    if state.status == "failed" and state.error:
        lines.append(f"  - the run stopped on a failure: {state.error}")
    remaining = [s for s in state.plan if s not in set(state.steps_done)]
    if remaining and state.status != "completed":
        lines.append(f"  - remaining plan steps: {', '.join(remaining)}")
    if state.status == "completed":
        lines.append(f"  (none: the run completed with {brief(state.output, RESULT_CHARS)})")
    elif state.status == "abandoned":
        lines.append("  (none: the run was abandoned and its effects compensated)")
    return lines or ["  (nothing recorded as pending; continue from the plan)"]
