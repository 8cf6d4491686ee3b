"""Durable messages between runs (SQLite files and PostgreSQL): ``run.send`` posts to the
recipient's inbox stream in the sender's commit, ``run.recv`` consumes the first
unconsumed message on its topic once, waiting inline up to ``inline_wait`` and then
suspending (status waiting) until the message comes. Real processes and SIGKILL: a
sender killed right after sending, then recovered, delivers once; a receiver killed
right after consuming, then recovered, consumes once."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from engine import Engine
from engine import events as ev
from engine.errors import RunNotFound, UsageError
from engine.runtime.host.config import EngineConfig
from engine.runtime.waits import timers
from engine.runtime.waits.mailbox import inbox_stream, posted
from engine.store import Append
from tests.agents import mailbox_agents as agents
from tests.agents.kit import python, wait_until
from tests.conftest import backends

STORES = backends("sqlite", "postgres")
MODULE = "tests.agents.mailbox_agents"


@pytest.fixture
def eng(store_url: str) -> Iterator[Engine]:
    """An engine whose receives suspend after a short inline wait."""
    e = Engine(store_url, config=EngineConfig(inline_wait=0.2))
    yield e
    e.close()


def _types(e: Engine, run_id: str, type_: str) -> list[dict[str, Any]]:
    return [x.data for x in e.events(run_id) if x.type == type_]


def _status(e: Engine, run_id: str) -> str:
    return str(e.state(run_id).status)


@STORES
def test_a_message_sent_to_a_waiting_run_wakes_it_with_the_value(eng: Engine) -> None:
    """The receiver suspends (no message yet); the send posts and wakes it; it gets the
    messages on its topic in order, each once, secret-named entries masked."""
    r = eng.run(agents.receiver, n=2)
    assert r.status == "waiting" and "message 'go'" in (r.waiting or "")
    eng.run(agents.sender, to=r.run_id, topic="other", value=0)
    eng.run(agents.secret_sender, to=r.run_id, n=1)
    eng.run(agents.sender, to=r.run_id, value={"n": 2})
    wait_until(lambda: _status(eng, r.run_id) == "completed", "the receiver to finish")
    assert eng.state(r.run_id).output == [{"n": 1, "password": "<redacted>"}, {"n": 2}]
    got = [d["message_id"] for d in _types(eng, r.run_id, "message_received")]
    assert len(got) == len(set(got)) == 2
    topics = [m.topic for _, m in posted(eng.store, r.run_id)]
    assert topics == ["other", "go", "go"]  # the other topic's message stays unconsumed


@STORES
def test_a_message_waiting_in_the_inbox_is_received_without_waiting(eng: Engine) -> None:
    r = eng.run(agents.receiver, n=2)
    eng.run(agents.sender, to=r.run_id, value="a")
    wait_until(lambda: _types(eng, r.run_id, "message_received"), "the first receive")
    sent = eng.run(agents.sender, to=r.run_id, value="b")
    assert sent.output == "sent"
    wait_until(lambda: _status(eng, r.run_id) == "completed", "the receiver to finish")
    assert eng.state(r.run_id).output == ["a", "b"]
    [s] = _types(eng, sent.run_id, "message_sent")
    assert s["message_id"] == f"{sent.run_id}:1" and s["to_run_id"] == r.run_id


@STORES
def test_a_send_to_no_run_or_an_ended_run_writes_nothing(eng: Engine) -> None:
    missing = "nobody-" + uuid.uuid4().hex[:8]
    r = eng.run(agents.sender, to=missing)
    assert r.status == "failed" and "no run" in (r.error or "")
    assert not _types(eng, r.run_id, "message_sent")
    assert eng.store.last_position(inbox_stream(missing)) == 0
    done = eng.run(agents.sleeper, seconds=0)
    r = eng.run(agents.sender, to=done.run_id)
    assert r.status == "failed" and "receives no more messages" in (r.error or "")
    assert eng.store.last_position(inbox_stream(done.run_id)) == 0


def test_bad_topics_and_timeouts_are_one_clear_error(eng: Engine) -> None:
    @eng.agent
    def bad(run: Any, what: str) -> Any:
        if what == "topic":
            return run.recv("")
        if what == "control":
            return run.recv("go\x00")
        if what == "timeout":
            return run.recv("go", timeout=float("nan"))
        return run.send("not a run id!", "go", 1)

    for what in ("topic", "control", "timeout", "to"):
        r = eng.run(bad, what=what)
        assert r.status == "failed", what
        assert r.error is not None and "UsageError" in r.error, r.error
    assert issubclass(RunNotFound, UsageError)


def test_a_receive_timeout_returns_none_inline(eng: Engine) -> None:
    r = eng.run(agents.receiver, timeout=0.05)
    assert (r.status, r.output) == ("completed", [None])
    [timer] = _types(eng, r.run_id, "timer_set")
    [got] = _types(eng, r.run_id, "message_received")
    assert timer["purpose"] == "recv" and got["message_id"] is None


def _post(e: Engine, to: str, *values: Any) -> None:
    """Messages in the inbox of ``to`` as a sender's commit puts them there."""
    at = ev.now()
    e.store.append(
        [
            Append(
                inbox_stream(to),
                i + 1,
                ev.MessagePosted(at=at, message_id=f"m{i}", from_run_id="x", topic="go", value=v),
            )
            for i, v in enumerate(values)
        ]
    )


RECOVER = """
import json, sys
from engine import Engine
e = Engine.open(sys.argv[1])
print(json.dumps([[r.run_id, r.status, r.output] for r in e.recover()]))
"""


@STORES
def test_a_receiver_killed_right_after_consuming_receives_each_message_once(
    store_url: str, eng: Engine
) -> None:
    """recover in a process SIGKILLed right after its first receive committed; recover
    again: the first receive replays, the second takes the next message."""
    r = eng.run(agents.receiver, n=2)
    assert r.status == "waiting"
    _post(eng, r.run_id, "first", "second")
    p = python("-c", RECOVER, store_url, env={"AGENTLOG_FAILPOINTS": "after_recv"})
    assert p.returncode == -9, p.stderr[-2000:]
    assert [d["value"] for d in _types(eng, r.run_id, "message_received")] == ["first"]
    p = python("-c", RECOVER, store_url)
    assert p.returncode == 0, p.stderr[-2000:]
    assert [r.run_id, "completed", ["first", "second"]] in json.loads(p.stdout)
    got = [d["message_id"] for d in _types(eng, r.run_id, "message_received")]
    assert got == ["m0", "m1"]


@STORES
def test_a_sender_killed_right_after_sending_delivers_once(store_url: str, eng: Engine) -> None:
    """A real process SIGKILLed right after the send committed; recover in another
    process replays the sender (it sends nothing) and wakes the receiver."""
    r = eng.run(agents.receiver)
    assert r.status == "waiting"
    sid = uuid.uuid4().hex
    data = json.dumps({"to": r.run_id, "value": "once"})
    env = {"AGENTLOG_FAILPOINTS": "after_send"}
    p = python("-m", MODULE, store_url, sid, "sender", data, env=env)
    assert p.returncode == -9, p.stderr[-2000:]
    assert _status(eng, sid) == "running"
    p = python("-c", RECOVER, store_url)
    assert p.returncode == 0, p.stderr[-2000:]
    recovered = json.loads(p.stdout)
    assert [sid, "completed", "sent"] in recovered
    assert [r.run_id, "completed", ["once"]] in recovered  # due: its message came
    assert eng.state(r.run_id).output == ["once"]
    assert len(posted(eng.store, r.run_id)) == 1
    assert len(_types(eng, sid, "message_sent")) == 1
    assert len(_types(eng, sid, "agent_resumed")) == 1


@STORES
def test_senders_racing_for_one_inbox_each_post_once(eng: Engine) -> None:
    """Eight senders at once: a sender whose inbox position was taken takes the next."""
    r = eng.run(agents.receiver, n=8)
    with ThreadPoolExecutor(8) as pool:
        sent = list(pool.map(lambda i: eng.run(agents.sender, to=r.run_id, value=i), range(8)))
    assert {s.status for s in sent} == {"completed"}, [s.error for s in sent]
    assert sorted(m.value for _, m in posted(eng.store, r.run_id)) == list(range(8))
    wait_until(lambda: _status(eng, r.run_id) == "completed", "the receiver to finish")
    assert sorted(eng.state(r.run_id).output) == list(range(8))


def test_a_message_posted_while_the_receiver_suspends_still_wakes_it(
    eng: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sender's wake-up comes while the receiver still holds its lease (so it finds
    nothing due); the receiver is looked at again once it let go, and goes on."""
    suspend = timers.suspend

    def posted_meanwhile(ctx: Any, *args: Any, **kwargs: Any) -> Any:
        monkeypatch.setattr(timers, "suspend", suspend)
        _post(eng, ctx.run_id, "late")
        eng.wake(ctx.run_id)  # as the sender does: not due, the run is still running
        return suspend(ctx, *args, **kwargs)

    monkeypatch.setattr(timers, "suspend", posted_meanwhile)
    r = eng.run(agents.receiver)
    assert r.status == "waiting"
    wait_until(lambda: _status(eng, r.run_id) == "completed", "the receiver to wake")
    assert eng.state(r.run_id).output == ["late"]
