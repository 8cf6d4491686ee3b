"""Forks and durable messages (SQLite and PostgreSQL): a sender's fork that sends what
its parent sent after the fork position takes the parent's message over (recorded, posted
once), and until it does the message is among the parent's effects that still stand; a
receiver's fork rewound before its receives receives again, in order and each once, the
messages its parent consumed after the fork position, then its own inbox. Real processes
SIGKILLed right after the fork's take-over or first receive, then recovered, post and
receive each message once."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agents.kit import python, wait_until
from conftest import backends

from engine import Engine
from engine.log.subtree import standing
from engine.runtime.host.config import EngineConfig
from engine.runtime.waits.mailbox import posted
from tests.agents import mailbox_agents as agents

STORES = backends("sqlite", "postgres")


@pytest.fixture
def eng(store_url: str) -> Iterator[Engine]:
    """An engine whose receives suspend after a short inline wait."""
    e = Engine(store_url, config=EngineConfig(inline_wait=0.2))
    yield e
    e.close()


def _inbox(eng: Engine, run_id: str) -> list[Any]:
    return [m.value for _, m in posted(eng.store, run_id)]


def _data(eng: Engine, run_id: str, type_: str) -> list[dict[str, Any]]:
    return [e.data for e in eng.events(run_id) if e.type == type_]


def _counting_receiver(eng: Engine, path: Path) -> Any:
    """A receiver that stores every value it gets in a JSON file (the count of effects)."""
    path.write_text("[]")

    @eng.tool(side_effect=True)
    def store_value(value: Any, *, idempotency_key: str) -> int:
        seen = json.loads(path.read_text())
        path.write_text(json.dumps([*seen, value]))
        return len(seen) + 1

    @eng.agent
    def receiver(run: Any, n: int) -> list[Any]:
        run.checkpoint("start")
        got = []
        for _ in range(n):
            got.append(run.recv("go"))
            store_value(got[-1])
        return got

    return receiver


@STORES
def test_a_senders_fork_reuses_the_parents_message(eng: Engine, tmp_path: Path) -> None:
    """The fork pauses before its send: the parent's message stands. Answered, the fork
    sends the same message: it records the parent's message id and posts nothing, so the
    receiver's inbox holds one message (it still waits for a second) and nothing stands."""

    @eng.agent
    def inbox_owner(run: Any) -> Any:
        return [run.recv("go"), run.recv("go")]

    @eng.agent
    def notifier(run: Any, to: str) -> str:
        run.checkpoint("start")
        if run.ask("send?") == "yes":
            run.send(to, "go", {"n": 1})
        return "done"

    box = eng.run(inbox_owner)
    parent = eng.run(notifier, to=box.run_id)
    assert eng.answer(parent.run_id, "yes").status == "completed"
    sent = _data(eng, parent.run_id, "message_sent")
    fork = eng.rewind(parent.run_id, to="start")
    assert fork.status == "paused"
    assert [(e.tool, e.key) for e in fork.standing] == [("run.send", sent[0]["message_id"])]
    assert eng.answer(fork.run_id, "yes").status == "completed"
    assert _inbox(eng, box.run_id) == [{"n": 1}]  # posted once
    wait_until(lambda: len(_data(eng, box.run_id, "message_received")) == 1, "one receive")
    wait_until(lambda: eng.state(box.run_id).status == "waiting", "the receiver to wait again")
    taken = _data(eng, fork.run_id, "message_sent")
    assert [(d["message_id"], d["parent_call"]) for d in taken] == [
        (sent[0]["message_id"], sent[0]["call"])
    ]
    assert standing(eng.store, fork.run_id) == []


@STORES
@pytest.mark.parametrize("effects", ["reuse", "resend"])
def test_a_receivers_fork_receives_what_its_parent_consumed(
    eng: Engine, tmp_path: Path, effects: str
) -> None:
    """Rewound before its receives, the fork does not wait on its own empty inbox: it
    receives the two messages its parent consumed, in order, each recorded once in its own
    log; with reuse, the effect each one led to is the parent's (stored once)."""

    @eng.agent
    def sender(run: Any, to: str, value: Any) -> None:
        run.send(to, "go", value)

    receiver = _counting_receiver(eng, tmp_path / "stored.json")
    parent = eng.run(receiver, n=2)
    assert parent.status == "waiting"
    eng.run(sender, to=parent.run_id, value="a")
    eng.run(sender, to=parent.run_id, value="b")
    wait_until(lambda: eng.state(parent.run_id).status == "completed", "the parent to finish")
    assert eng.state(parent.run_id).output == ["a", "b"]
    fork = eng.rewind(parent.run_id, to="start", effects=effects)
    assert (fork.status, fork.output) == ("completed", ["a", "b"])
    ids = [d["message_id"] for d in _data(eng, parent.run_id, "message_received")]
    assert [d["message_id"] for d in _data(eng, fork.run_id, "message_received")] == ids
    stored = json.loads((tmp_path / "stored.json").read_text())
    assert stored == (["a", "b"] if effects == "reuse" else ["a", "b", "a", "b"])
    assert _inbox(eng, fork.run_id) == [] and _inbox(eng, parent.run_id) == ["a", "b"]


REWIND = """
import sys
from engine import Engine
Engine.open(sys.argv[1]).rewind(sys.argv[2], to=1)
"""
RECOVER = """
import json, sys
from engine import Engine
print(json.dumps([[r.run_id, r.status, r.output] for r in Engine.open(sys.argv[1]).recover()]))
"""


@STORES
def test_a_receivers_fork_killed_after_its_first_receive_receives_each_once(
    store_url: str, eng: Engine
) -> None:
    """A real process rewinding a receiver is SIGKILLed right after the fork's first
    receive committed; recover in another process: the fork replays that receive and
    takes the parent's second message, each once, in the parent's order."""
    parent = eng.run(agents.receiver, n=2)
    assert parent.status == "waiting"
    eng.run(agents.sender, to=parent.run_id, value="first")
    eng.run(agents.sender, to=parent.run_id, value="second")
    wait_until(lambda: eng.state(parent.run_id).status == "completed", "the parent to finish")
    p = python("-c", REWIND, store_url, parent.run_id, env={"AGENTLOG_FAILPOINTS": "after_recv"})
    assert p.returncode == -9, p.stderr[-2000:]
    p = python("-c", RECOVER, store_url)
    assert p.returncode == 0, p.stderr[-2000:]
    forks = [r for r in json.loads(p.stdout) if r[0] != parent.run_id]
    assert [r[1:] for r in forks] == [["completed", ["first", "second"]]]
    ids = [d["message_id"] for d in _data(eng, parent.run_id, "message_received")]
    assert [d["message_id"] for d in _data(eng, forks[0][0], "message_received")] == ids


@STORES
def test_a_senders_fork_killed_after_taking_the_send_over_posts_nothing(
    store_url: str, eng: Engine
) -> None:
    """A real process rewinding a sender is SIGKILLed right after the fork took the
    parent's send over; recovered, the fork replays it: the inbox holds one message."""
    box = eng.run(agents.receiver, n=2)
    eng.run(agents.sender, to=box.run_id, value="once")
    p = python("-c", REWIND, store_url, _sender_of(eng, box.run_id), env=_KILL_AFTER_SEND)
    assert p.returncode == -9, p.stderr[-2000:]
    p = python("-c", RECOVER, store_url)
    assert p.returncode == 0, p.stderr[-2000:]
    assert _inbox(eng, box.run_id) == ["once"]
    wait_until(lambda: eng.state(box.run_id).status == "waiting", "the receiver to wait")
    assert [d["value"] for d in _data(eng, box.run_id, "message_received")] == ["once"]


_KILL_AFTER_SEND = {"AGENTLOG_FAILPOINTS": "after_send"}


def _sender_of(eng: Engine, run_id: str) -> str:
    return str(posted(eng.store, run_id)[0][1].from_run_id)
