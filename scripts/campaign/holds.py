"""Two holders of one lock at once, as the tree campaign tells them from the logs and the
fenced service's books.

- A token the store recorded (``lock_acquired``) for two runs.
- Two live holds that overlap in time: a hold is the span from a run's
  ``lock_acquired`` to its ``lock_released`` of the same call, counted only when no
  ``agent_resumed`` lies between (one execution held it throughout; the records fall
  inside the real hold, so overlapping records mean overlapping holds).
- A write the fenced service refused (a higher token seen) from a holder that was NOT
  resumed after taking its token: it held the lock throughout, yet another run had
  been given a higher token. (A holder resumed since took its token before a crash;
  its lease could expire while it was down: fencing at work, not damage.)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

Events = Callable[[str], Sequence[Any]]


def shared_tokens(events: Events, runs: Sequence[str]) -> list[str]:
    """Tokens the store gave to two runs."""
    holders: dict[tuple[str, int], set[str]] = {}
    for run_id in runs:
        for e in events(run_id):
            if e.type == "lock_acquired":
                holders.setdefault((e.data["name"], e.data["fence"]), set()).add(run_id)
    return [
        f"{name} token {fence}: {sorted(v)}" for (name, fence), v in holders.items() if len(v) > 1
    ]


def _live_holds(run_id: str, log: Sequence[Any]) -> list[tuple[str, Any, Any, str]]:
    """``(lock, from, to, run)`` of each hold one execution kept throughout."""
    out = []
    for i, e in enumerate(log):
        if e.type != "lock_acquired":
            continue
        for later in log[i + 1 :]:
            if later.type == "agent_resumed":
                break
            if later.type == "lock_released" and later.data["call"] == e.data["call"]:
                out.append((e.data["name"], e.at, later.at, run_id))
                break
    return out


def overlapping_holds(events: Events, runs: Sequence[str]) -> list[str]:
    """Pairs of live holds of one lock, by two runs, that overlap in time."""
    holds = [h for run_id in runs for h in _live_holds(run_id, events(run_id))]
    found = []
    for i, (name, start, end, run) in enumerate(holds):
        for other, o_start, o_end, o_run in holds[i + 1 :]:
            if other == name and o_run != run and start < o_end and o_start < end:
                found.append(f"{name}: {run} [{start}, {end}] and {o_run} [{o_start}, {o_end}]")
    return found


def held_throughout(events: Events, holder: str, fence: int) -> bool:
    """Whether ``holder`` took ``fence`` and was not resumed since (so it held the lock
    all along, as far as it knew)."""
    log = list(events(holder))
    taken = [i for i, e in enumerate(log) if e.type == "lock_acquired" and e.data["fence"] == fence]
    if not taken:
        return False  # a token it never recorded: the refusal is the lock's to explain
    return not any(e.type == "agent_resumed" for e in log[taken[-1] + 1 :])
