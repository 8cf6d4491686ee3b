"""A LangGraph node made an agentlog run, so the tools it calls are durable calls.

``durable_node(engine, fn)`` runs ``fn(state)`` as the run ``lg-node:<digest>``, keyed by
the thread, the checkpoint namespace and the LangGraph task: the same superstep run again
(after a crash, or a resume from an interrupt) is the same task, so it is the same run.
A ``side_effect=True`` tool the node calls gets its intent and key; a node run again
after a SIGKILL returns the recorded outcome (or resolves the uncertain intent by the
tool's verifier) instead of sending again, and a node that had finished returns its
recorded update without running. The update must be plain data (our codec records it).
A node that calls LangGraph's ``interrupt()`` is not a durable node: keep the question
in a node of its own and the effect in the next one.
"""

from __future__ import annotations

import functools
import hashlib
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..errors import OutcomeNotRecorded, RunFailed
from ..kinds import RunStatus

if TYPE_CHECKING:
    from ..runtime.engine import Engine

NODE_PREFIX = "lg-node:"

# The state each node run works on, by run id: the agent reads it (an input would have
# to be plain data, and the run's identity already pins the state).
_states: dict[str, Any] = {}
_lock = threading.Lock()
_MISSING = object()


def node_run_id(thread_id: str, checkpoint_ns: str, task_id: str) -> str:
    """The run id of LangGraph task ``task_id`` of ``thread_id`` in ``checkpoint_ns``."""
    digest = hashlib.sha256(f"{thread_id}\0{checkpoint_ns}\0{task_id}".encode()).hexdigest()
    return NODE_PREFIX + digest[:40]


def durable_node(
    engine: Engine, fn: Callable[[Any], Any], *, name: str | None = None
) -> Callable[[Any], Any]:
    """``fn`` as a node whose every execution is the run of its LangGraph task;
    ``RunFailed`` if that run does not complete."""
    from langgraph.config import get_config

    agent_name = f"langgraph-node:{name or fn.__qualname__}"

    def body(run: Any) -> Any:
        with _lock:
            state = _states.get(run.run_id, _MISSING)
        if state is _MISSING:  # resumed by recover, not by its graph: the graph re-runs it
            raise OutcomeNotRecorded(
                f"{agent_name} runs only inside its LangGraph graph, which holds the "
                "state it works on: it stays running until the graph runs the task again"
            )
        return fn(state)

    body.__qualname__ = body.__name__ = f"node_{fn.__name__}"
    agent = engine.agent(body, name=agent_name)

    @functools.wraps(fn)
    def node(state: Any) -> Any:
        conf = get_config()["configurable"]
        rid = node_run_id(
            conf["thread_id"], conf.get("checkpoint_ns", ""), conf["__pregel_task_id"]
        )
        with _lock:
            _states[rid] = state
        try:
            result = engine.run(agent, run_id=rid)
        finally:
            with _lock:
                _states.pop(rid, None)
        if result.status != RunStatus.COMPLETED:  # failed, or waits for a person: on what
            why = result.error or (f"waiting: {result.waiting}" if result.waiting else None)
            raise RunFailed(rid, result.status, why)
        return result.output

    return node


__all__ = ["durable_node", "node_run_id"]
