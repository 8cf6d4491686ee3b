"""What the campaign counts, and a run's journal: what it did, call by call, as the agent
saw it (compared with the uncrashed run's)."""

from __future__ import annotations

import math
import statistics
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from .child import agent_module


@dataclass
class Report:
    store: str
    seed: int
    kills: int = 0
    kills_by: Counter[str] = field(default_factory=Counter)
    kills_by_step: Counter[str] = field(default_factory=Counter)  # run, resume, cli-rewind...
    launches: int = 0
    launches_by: Counter[str] = field(default_factory=Counter)
    answers: Counter[str] = field(default_factory=Counter)
    rounds: int = 0
    rounds_by_agent: Counter[str] = field(default_factory=Counter)
    completed: int = 0
    abandoned: int = 0
    duplicated_effects: int = 0
    lost_effects: int = 0
    final_state_mismatches: int = 0
    # The tree workload's: messages, locks, and where the kills landed.
    duplicated_messages: int = 0
    lost_messages: int = 0
    two_lock_holders: int = 0
    stale_writes_refused: int = 0  # fencing at work (not damage): see campaign/tree.py
    refused_writes: list[str] = field(default_factory=list)
    kills_interrupting: Counter[str] = field(default_factory=Counter)
    anomalies: list[str] = field(default_factory=list)
    # The model workload's: model calls made again for a recorded decision, values the
    # agent got of the wrong type or value, and the model server's books.
    duplicated_decisions: int = 0
    mismatched_values: int = 0
    model_books: dict[str, Any] = field(default_factory=dict)
    # The saga and forks workloads' (the ledger's books) and --store-loss's.
    refunded_effects: int = 0
    ledger_replays: int = 0  # requests under a key the ledger had booked: answered from it
    restarts: int = 0
    compensating_rewinds: int = 0
    reusing_rewinds: int = 0
    store_losses: int = 0  # steps armed to lose the store after an effect
    stopped_by_store_loss: int = 0  # runs those steps left running, resumable
    ended_by_store_loss: int = 0  # those steps that then exited with an error
    hung_steps: int = 0  # steps killed by the watchdog (reported as anomalies)
    # The workers workload's: worker processes stopped (SIGSTOP) past their lease, and
    # the seconds from a worker's death (or stop) to each of its runs continuing in
    # another worker (its lease taken); runs a stopped worker went on with itself.
    stops: int = 0
    takeover_after_kill: list[float] = field(default_factory=list)
    takeover_after_stop: list[float] = field(default_factory=list)
    continued_by_itself: int = 0
    send_errors: list[str] = field(default_factory=list)  # engine.send refused, sent again
    worker_exits: Counter[str] = field(default_factory=Counter)
    elapsed: float = 0.0
    tree: bool = False
    model: bool = False
    ledger: bool = False
    workers: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {
            "store": self.store,
            "seed": self.seed,
            "kills": self.kills,
            "kills_by": dict(sorted(self.kills_by.items())),
            "kills_by_step": dict(sorted(self.kills_by_step.items())),
            "launches": self.launches,
            "launches_by": dict(sorted(self.launches_by.items())),
            "truthful_answers": dict(self.answers),
            "rounds": self.rounds,
            "rounds_by_agent": dict(sorted(self.rounds_by_agent.items())),
            "completed": self.completed,
            "abandoned": self.abandoned,
            "duplicated_effects": self.duplicated_effects,
            "lost_effects": self.lost_effects,
            "final_state_mismatches": self.final_state_mismatches,
            **(self._tree() if self.tree else {}),
            **(self._model() if self.model else {}),
            **(self._ledger() if self.ledger else {}),
            **(self._workers() if self.workers else {}),
            "store_losses": self.store_losses,
            "stopped_by_store_loss": self.stopped_by_store_loss,
            "ended_by_store_loss": self.ended_by_store_loss,
            "hung_steps": self.hung_steps,
            "anomalies": self.anomalies,
            "elapsed_seconds": round(self.elapsed, 1),
        }

    def _tree(self) -> dict[str, Any]:
        return {
            "duplicated_messages": self.duplicated_messages,
            "lost_messages": self.lost_messages,
            "two_lock_holders": self.two_lock_holders,
            "stale_writes_refused": self.stale_writes_refused,
            "refused_writes": self.refused_writes,
            "kills_interrupting": dict(sorted(self.kills_interrupting.items())),
        }

    def _ledger(self) -> dict[str, Any]:
        return {
            "refunded_effects": self.refunded_effects,
            "ledger_replays": self.ledger_replays,
            "supervisor_restarts": self.restarts,
            "compensating_rewinds": self.compensating_rewinds,
            "reusing_rewinds": self.reusing_rewinds,
        }

    def _workers(self) -> dict[str, Any]:
        return {
            "duplicated_messages": self.duplicated_messages,
            "lost_messages": self.lost_messages,
            "worker_stops": self.stops,
            "takeover_after_kill_s": spread(self.takeover_after_kill),
            "takeover_after_stop_s": spread(self.takeover_after_stop),
            "continued_by_itself": self.continued_by_itself,
            "send_errors": self.send_errors,
            "worker_exits": dict(sorted(self.worker_exits.items())),
        }

    def _model(self) -> dict[str, Any]:
        return {
            "duplicated_decisions": self.duplicated_decisions,
            "mismatched_values": self.mismatched_values,
            **self.model_books,
        }

    @property
    def clean(self) -> bool:
        return not (
            self.duplicated_effects
            or self.lost_effects
            or self.final_state_mismatches
            or self.duplicated_messages
            or self.lost_messages
            or self.two_lock_holders
            or self.duplicated_decisions
            or self.mismatched_values
            or self.anomalies
        )


def spread(seconds: list[float]) -> dict[str, Any]:
    """How many, the median and the 95th percentile (nearest rank) of ``seconds``."""
    if not seconds:
        return {"n": 0, "median": None, "p95": None}
    ordered = sorted(seconds)
    p95 = ordered[min(len(ordered) - 1, math.ceil(0.95 * len(ordered)) - 1)]
    return {"n": len(ordered), "median": round(statistics.median(ordered), 3), "p95": round(p95, 3)}


def journal(engine: Any, rid: str) -> list[tuple[Any, ...]]:
    """What a run did, call by call, as the agent saw it: decisions and their values, tool
    calls and their results (a person's 'done' stands in for the result of a tool nobody
    could verify, so those are compared by tool only), checkpoints, then compensations in
    the order they ran. Calls are listed by call identity: concurrent calls (gather)
    finish, and so are recorded, in an order a crash may change, but each must keep its
    identity, tool and result."""
    out: list[tuple[Any, ...]] = []
    undo: list[tuple[Any, ...]] = []
    for e in engine.events(rid):
        d = e.data
        if e.type == "tool_succeeded":
            human = d["tool"] in _human_tools()
            out.append(("tool", d["call"], d["tool"], None if human else d["result"]))
        elif e.type == "llm_decided":
            out.append(("decide", d["call"], d["name"], d["value"]))
        elif e.type == "checkpoint":
            out.append(("checkpoint", d["call"], d["name"]))
        elif e.type == "compensated":
            undo.append(("compensated", d["call"], d["tool"], d.get("error")))
    return sorted(out, key=lambda x: (x[1], x[0])) + undo


def _human_tools() -> tuple[str, ...]:
    return (*agent_module("sync").HUMAN_TOOLS, *agent_module("async").HUMAN_TOOLS)
