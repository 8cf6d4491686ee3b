"""A store failure after a tool's effect stops the run (``OutcomeNotRecorded``, which agent
code cannot catch as an ``Exception``): the run stays running, records nothing more, and
its resume resolves the call as uncertain instead of sending it again. The failures are
real: PostgreSQL's backends terminated (``pg_terminate_backend``) between the effect and
its outcome, SQLite's insert of the outcome aborted by a trigger another connection made."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from agents.kit import log_of
from conftest import PG_URL, backends

from engine import Engine
from engine.errors import StoreError

both = backends("sqlite", "postgres")


class Counter:
    """An outside service in a JSON file: every execution is counted, by key."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.write_text("[]")

    def perform(self, key: str | None) -> str:
        sent = [*self.sent(), key]
        self.path.write_text(json.dumps(sent))
        return f"receipt-{len(sent)}"

    def sent(self) -> list[str | None]:
        return list(json.loads(self.path.read_text()))

    def find(self, key: str) -> str | None:
        return f"receipt-{self.sent().index(key) + 1}" if key in self.sent() else None


class Breaker:
    """Makes the store fail for real once armed: on PostgreSQL it terminates the engine's
    backends; on SQLite a trigger aborts every insert of an event of the ``refused``
    types (a tool outcome, a run's end) until healed."""

    def __init__(self, url: str, refused: tuple[str, ...] = ("tool_succeeded", "agent_finished")):
        self.refused = refused
        self.app = f"blip-{uuid.uuid4().hex[:12]}"
        self.sqlite = url.startswith("sqlite")
        sep = "&" if "?" in url else "?"
        self.url = url if self.sqlite else f"{url}{sep}application_name={self.app}"
        self.db = url.split("?")[0][len("sqlite:///") :]

    def arm(self) -> None:
        if self.sqlite:
            with sqlite3.connect(self.db) as conn:
                when = " OR ".join(f"NEW.topic LIKE '{t}%'" for t in self.refused)
                conn.execute(
                    f"CREATE TRIGGER blip BEFORE INSERT ON agentlog_events WHEN {when} "
                    "BEGIN SELECT RAISE(ABORT, 'disk unavailable'); END"
                )
            return
        with psycopg.connect(PG_URL.split("?")[0], autocommit=True) as conn:
            killed = conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = %s",
                (self.app,),
            ).fetchall()
        assert killed, "the engine has no connection to terminate"

    def heal(self) -> None:
        if self.sqlite:
            with sqlite3.connect(self.db) as conn:
                conn.execute("DROP TRIGGER IF EXISTS blip")


@pytest.fixture
def breaker(store_url: str) -> Breaker:
    return Breaker(store_url)


@pytest.fixture
def counter(tmp_path: Path) -> Counter:
    return Counter(tmp_path / "service.json")


@pytest.fixture
def engine_of(breaker: Breaker) -> Iterator[Callable[[], Engine]]:
    opened: list[Engine] = []

    def open_one() -> Engine:
        opened.append(Engine.open(breaker.url))
        return opened[-1]

    yield open_one
    for e in opened:
        e.close()


def _define(eng: Engine, counter: Counter, breaker: Breaker, *, verified: bool) -> Any:
    """A side-effecting tool that sends, then breaks the store (once), and an agent that
    retries on ``StoreError`` as ordinary code would."""
    armed = [True]

    def send(to: str, *, idempotency_key: str | None = None) -> str:
        receipt = counter.perform(idempotency_key if verified else to)
        if armed[0]:
            armed[0] = False
            breaker.arm()
        return receipt

    tool = (
        eng.tool(side_effect=True, verify=counter.find)(send)
        if verified
        else eng.tool(side_effect=True)(lambda to: send(to))
    )

    @eng.agent(name="mailer")
    def mailer(run: Any) -> str:
        for _ in range(3):
            try:
                return str(tool("ann@example.com"))
            except StoreError:  # what the user wrote: it must not re-send
                continue
        return "gave up"

    return mailer


@both
@pytest.mark.parametrize("verified", [True, False], ids=["verified", "plain"])
def test_a_store_failure_after_the_effect_stops_the_run_resumable(
    breaker: Breaker, counter: Counter, engine_of: Callable[[], Engine], verified: bool
) -> None:
    """The effect is sent once; the run stays running with a clear error; its resume
    (the store back) resolves call 1 as uncertain: the verifier finds the effect, or a
    person is asked. Nothing is sent again and nothing was recorded completed."""
    eng = engine_of()
    mailer = _define(eng, counter, breaker, verified=verified)
    r = eng.run(mailer, run_id="mail-1")
    assert r.status == "running" and r.error is not None
    assert "was not recorded" in r.error and "mail-1" in r.error
    assert len(counter.sent()) == 1
    breaker.heal()
    again = engine_of()  # as another process would
    _define(again, counter, breaker, verified=verified)
    assert again.state("mail-1").status == "running"
    resumed = again.resume("mail-1")
    assert len(counter.sent()) == 1
    if verified:
        assert (resumed.status, resumed.output) == ("completed", "receipt-1")
        sources = [d["source"] for _, t, d in log_of(again, "mail-1") if t == "tool_succeeded"]
        assert sources == ["verified"]
    else:
        assert resumed.status == "paused" and "take effect" in str(resumed.waiting)


@both
def test_an_async_agent_stops_the_same_way(
    breaker: Breaker, counter: Counter, engine_of: Callable[[], Engine]
) -> None:
    """An async tool in an async agent: the stop reaches the agent's await and ends the
    run as running; a resume verifies the effect instead of sending it again."""
    eng, armed = engine_of(), [True]

    async def send(to: str, *, idempotency_key: str) -> str:
        receipt = counter.perform(idempotency_key)
        if armed[0]:
            armed[0] = False
            breaker.arm()
        return receipt

    tool = eng.tool(side_effect=True, verify=counter.find)(send)

    @eng.agent(name="amailer")
    async def amailer(run: Any) -> str:
        try:
            return str(await tool("bo@example.com"))
        except StoreError:
            await asyncio.sleep(0)
            return str(await tool("bo@example.com"))

    r = eng.run(amailer, run_id="amail-1")
    assert r.status == "running" and "was not recorded" in str(r.error)
    assert len(counter.sent()) == 1
    breaker.heal()
    assert eng.resume("amail-1").output == "receipt-1"
    assert len(counter.sent()) == 1


@both
def test_code_that_swallows_the_stop_can_neither_send_nor_complete(
    breaker: Breaker, counter: Counter, engine_of: Callable[[], Engine]
) -> None:
    """Even ``except BaseException`` does not let the execution go on: every later tool
    call (read-only too) raises the stop again before running, and the agent's return is
    not recorded."""
    eng, armed = engine_of(), [True]

    @eng.tool(side_effect=True)
    def send(to: str) -> str:
        receipt = counter.perform(to)
        if armed[0]:
            armed[0] = False
            breaker.arm()
        return receipt

    looked: list[str] = []

    @eng.tool
    def lookup(to: str) -> str:  # read-only: no intent is written before it runs
        looked.append(to)
        return to

    @eng.agent(name="stubborn")
    def stubborn(run: Any) -> str:
        for _ in range(2):
            with contextlib.suppress(BaseException):  # as hostile code would
                send("cy@example.com")
        with contextlib.suppress(BaseException):
            lookup("cy@example.com")
        return "done anyway"

    r = eng.run(stubborn, run_id="stub-1")
    assert r.status == "running" and r.output is None
    assert counter.sent() == ["cy@example.com"] and looked == []
    breaker.heal()
    types = [t for _, t, _ in log_of(engine_of(), "stub-1")]
    assert "agent_finished" not in types and "tool_succeeded" not in types
