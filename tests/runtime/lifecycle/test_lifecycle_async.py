"""Async agents on every store: ``async def`` agents and tools, ``engine.run`` of an async
agent from sync code, ``await engine.arun(...)`` from inside an event loop, and ``await
run.decide(...)`` of an async model call. Concurrent calls (``asyncio.gather``) take
their call identities in the order they are issued, whatever order they finish in, so a
resumed run replays them; a failed or paused gather lets its in-flight siblings finish
and records them. Real SIGKILLs in the middle of a gather (SQLite, PostgreSQL) resume in
a new process with no effect duplicated."""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from agents import service
from agents.kit import Crash, engine_call, log_of, python
from conftest import all_backends, backends

from engine import Engine, Permanent

PROCESS_BACKENDS = backends("sqlite", "postgres")
MODULE = "tests.agents.async_campaign_agent"


def _invoked(eng: Engine, run_id: str) -> list[tuple[int, dict[str, Any]]]:
    return [(d["call"], d["args"]) for _, t, d in log_of(eng, run_id) if t == "tool_invoked"]


def _succeeded(eng: Engine, run_id: str) -> list[int]:
    return [d["call"] for _, t, d in log_of(eng, run_id) if t == "tool_succeeded"]


@all_backends
def test_an_async_agent_with_async_tools_runs_from_sync_code_and_replays(eng: Engine) -> None:
    """engine.run accepts an async agent: its awaited tools are durable (recorded and
    replayed: a crash after them and a resume execute nothing twice)."""
    count: Counter[str] = Counter()
    crash = {"on": True}

    @eng.tool
    async def fetch(item: str) -> dict[str, Any]:
        count[f"fetch:{item}"] += 1
        await asyncio.sleep(0.01)
        return {"item": item, "price": len(item)}

    @eng.tool(side_effect=True)
    async def buy(item: str, *, idempotency_key: str) -> str:
        count[f"buy:{item}"] += 1
        await asyncio.sleep(0.01)
        return f"B-{item}-{idempotency_key}"

    @eng.tool
    def finish(n: int) -> int:
        if crash["on"]:
            raise Crash()
        return n

    @eng.agent
    async def shopper(run: Any, items: list[str]) -> dict[str, Any]:
        got = [await fetch(i) for i in items]
        bought = [await buy(g["item"]) for g in got]
        return {"bought": bought, "n": finish(len(bought))}

    with pytest.raises(Crash):
        eng.run(shopper, run_id="as1", items=["a", "bb"])
    crash["on"] = False
    r = eng.resume("as1")
    assert r.status == "completed"
    assert r.output == {"bought": ["B-a-as1:3", "B-bb-as1:4"], "n": 2}
    assert count == {"fetch:a": 1, "fetch:bb": 1, "buy:a": 1, "buy:bb": 1}
    types = [t for _, t, _ in log_of(eng, "as1")]
    assert types.count("tool_succeeded") == 5 and types[-1] == "agent_finished"


@all_backends
def test_await_arun_from_inside_an_event_loop_runs_async_and_sync_agents(eng: Engine) -> None:
    """await engine.arun(...) inside a running loop (asyncio.run(main())): async and sync
    agents complete, the caller's loop keeps turning while they run, a run id may be
    given, and a paused run is answered afterwards."""

    @eng.tool
    async def slow(n: int) -> int:
        await asyncio.sleep(0.2)
        return n * 2

    @eng.tool
    def plain(n: int) -> int:
        time.sleep(0.2)
        return n + 1

    @eng.agent
    async def async_agent(run: Any, n: int) -> int:
        return int(await slow(n))

    @eng.agent
    def sync_agent(run: Any, n: int) -> int:
        return int(plain(n))

    @eng.agent
    async def asking(run: Any) -> Any:
        return run.ask("continue?")

    async def main() -> tuple[Any, ...]:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        t = asyncio.create_task(ticker())
        a = await eng.arun(async_agent, n=4)
        b = await eng.arun(sync_agent, run_id="sync-in-loop", n=4)
        c = await eng.arun(asking)
        t.cancel()
        return a, b, c, ticks

    a, b, c, ticks = asyncio.run(main())
    assert (a.status, a.output) == ("completed", 8)
    assert (b.run_id, b.status, b.output) == ("sync-in-loop", "completed", 5)
    assert (c.status, c.waiting) == ("paused", "continue?")
    assert ticks > 10  # the caller's loop was not blocked by the runs
    assert eng.answer(c.run_id, "yes").output == "yes"


@all_backends
def test_sync_engine_run_of_an_async_agent_from_inside_a_running_loop_completes(
    eng: Engine,
) -> None:
    """The plain engine.run of an async agent called from code already inside an event loop
    (a notebook, an async handler) completes: the agent gets a loop of its own instead of
    failing the run on 'asyncio.run() cannot be called from a running event loop'."""
    count: Counter[str] = Counter()

    @eng.tool(side_effect=True)
    async def ping(n: int, *, idempotency_key: str) -> int:
        count[idempotency_key] += 1
        await asyncio.sleep(0.01)
        return n + 1

    @eng.agent
    async def pinger(run: Any, n: int) -> list[int]:
        return list(await asyncio.gather(ping(n), ping(n + 10)))

    async def handler() -> Any:
        return eng.run(pinger, run_id="in-loop", n=1)

    r = asyncio.run(handler())
    assert (r.status, r.output, r.error) == ("completed", [2, 12], None)
    assert count == {"in-loop:1": 1, "in-loop:2": 1}
    assert eng.resume("in-loop").output == [2, 12] and sum(count.values()) == 2


@all_backends
def test_gathered_calls_take_identities_in_issue_order_even_finishing_in_reverse(
    eng: Engine,
) -> None:
    """gather(a, b, c, d) where d finishes first and a last: the calls are numbered in
    the order issued (call n = the n-th argument of the gather), their outcomes are
    recorded in the order they finished, and gather returns results in issue order.
    Read-only and side-effecting calls alike."""
    finished: list[str] = []

    @eng.tool
    async def read(slot: int) -> str:
        await asyncio.sleep(0.1 * (4 - slot))
        finished.append(f"read{slot}")
        return f"r{slot}"

    @eng.tool(side_effect=True)
    async def write(slot: int, *, idempotency_key: str) -> str:
        await asyncio.sleep(0.1 * (4 - slot))
        finished.append(f"write{slot}")
        return f"w{slot}:{idempotency_key}"

    @eng.agent
    async def fan(run: Any) -> list[Any]:
        reads = await asyncio.gather(*(read(s) for s in range(4)))
        writes = await asyncio.gather(*(write(s) for s in range(4)))
        return [reads, writes]

    r = eng.run(fan)
    assert r.status == "completed"
    rid = r.run_id
    assert r.output == [
        [f"r{s}" for s in range(4)],
        [f"w{s}:{rid}:{s + 5}" for s in range(4)],
    ]
    assert finished == [f"read{s}" for s in (3, 2, 1, 0)] + [f"write{s}" for s in (3, 2, 1, 0)]
    invoked = dict(_invoked(eng, rid))
    assert {call: args["slot"] for call, args in invoked.items()} == {
        **{s + 1: s for s in range(4)},
        **{s + 5: s for s in range(4)},
    }
    # outcomes are recorded as the calls finish: the last issued (300 ms sooner) first
    done = _succeeded(eng, rid)
    assert sorted(done) == list(range(1, 9))
    assert done.index(4) < done.index(1) and done.index(8) < done.index(5)
    again = eng.resume(rid)
    assert again.output == r.output and len(finished) == 8


@all_backends
def test_a_crash_after_a_gather_resumes_replaying_it_in_order(eng: Engine) -> None:
    """A run dies after a gather whose calls finished in reverse order; resume re-issues
    the gather, each call finds its own recorded outcome by identity (no divergence, no
    execution), and the run continues."""
    executed: Counter[str] = Counter()
    crash = {"on": True}

    @eng.tool(side_effect=True)
    async def charge(slot: int, *, idempotency_key: str) -> str:
        await asyncio.sleep(0.03 * (4 - slot))
        executed[idempotency_key] += 1
        return f"c{slot}"

    @eng.tool
    def after(results: list[str]) -> int:
        if crash["on"]:
            raise Crash()
        return len(results)

    @eng.agent
    async def charging(run: Any) -> dict[str, Any]:
        results = await asyncio.gather(*(charge(s) for s in range(4)))
        return {"results": list(results), "n": after(list(results))}

    with pytest.raises(Crash):
        eng.run(charging, run_id="gc")
    crash["on"] = False
    r = eng.resume("gc")
    assert (r.status, r.output) == ("completed", {"results": ["c0", "c1", "c2", "c3"], "n": 4})
    assert executed == {f"gc:{s + 1}": 1 for s in range(4)}


@all_backends
def test_a_failed_call_in_a_gather_lets_its_siblings_finish_and_resume_retries_it_alone(
    eng: Engine,
) -> None:
    """One call of a gather fails permanently while its siblings are still running: the
    siblings finish and their outcomes are recorded (not cancelled midway, not retried),
    the run fails naming the failed call; fixed, a resume re-attempts that call only."""
    executed: Counter[str] = Counter()
    broken = {"on": True}

    @eng.tool(side_effect=True, key=lambda slot: f"notify:{slot}", verify=lambda key: None)
    async def notify(slot: int) -> str:
        await asyncio.sleep(0.3)
        executed[f"notify:{slot}"] += 1
        return f"n{slot}"

    @eng.tool(side_effect=True)
    async def check(slot: int, *, idempotency_key: str) -> str:
        await asyncio.sleep(0.02)
        executed["check"] += 1
        if broken["on"]:
            raise Permanent("card declined")
        return "ok"

    @eng.agent
    async def mixed(run: Any) -> list[str]:
        return list(await asyncio.gather(notify(0), check(1), notify(2)))

    r = eng.run(mixed, run_id="gf")
    assert r.status == "failed" and "card declined" in str(r.error)
    log = log_of(eng, "gf")
    succeeded = {d["call"]: d["source"] for _, t, d in log if t == "tool_succeeded"}
    assert succeeded == {1: "executed", 3: "executed"}
    failed = [d for _, t, d in log if t == "tool_failed"]
    assert [(d["call"], d["kind"], d["final"]) for d in failed] == [(2, "permanent", True)]
    assert log[-1][1] == "agent_failed" and log[-1][2]["call"] == 2
    assert executed == {"notify:0": 1, "notify:2": 1, "check": 1}

    broken["on"] = False
    again = eng.resume("gf")
    assert (again.status, again.output) == ("completed", ["n0", "ok", "n2"])
    assert executed == {"notify:0": 1, "notify:2": 1, "check": 2}


@all_backends
def test_a_pause_inside_a_gather_records_its_siblings_and_answer_replays_them(
    eng: Engine,
) -> None:
    """A coroutine of a gather asks a person while its siblings are still running: the
    run pauses only after they finish, with their outcomes recorded; the answer
    continues the run without executing them again."""
    executed: Counter[str] = Counter()

    @eng.tool(side_effect=True)
    async def reserve(slot: int, *, idempotency_key: str) -> str:
        await asyncio.sleep(0.2)
        executed[idempotency_key] += 1
        return f"r{slot}"

    @eng.agent
    async def approving(run: Any) -> list[Any]:
        async def approval() -> Any:
            return run.ask("approve?")  # call 2: the gather starts its coroutines in order

        return list(await asyncio.gather(reserve(0), approval(), reserve(1)))

    r = eng.run(approving, run_id="gp")
    assert (r.status, r.waiting) == ("paused", "approve?")
    assert sorted(_succeeded(eng, "gp")) == [1, 3]
    assert executed == {"gp:1": 1, "gp:3": 1}
    done = eng.answer("gp", {"ok": True})
    assert (done.status, done.output) == ("completed", ["r0", {"ok": True}, "r1"])
    assert executed == {"gp:1": 1, "gp:3": 1}


@all_backends
def test_await_run_decide_records_an_async_decision_and_replays_it(eng: Engine) -> None:
    """await run.decide(name, async_fn, *args): the coroutine's value is recorded
    (llm_decided) and returned; on resume the recorded value returns without calling the
    function. Decisions gathered concurrently number in issue order too."""
    called: list[str] = []
    crash = {"on": True}

    async def model(prompt: str, delay: float) -> dict[str, Any]:
        await asyncio.sleep(delay)
        called.append(prompt)
        return {"prompt": prompt, "answer": prompt.upper()}

    @eng.tool
    def stop_here() -> None:
        if crash["on"]:
            raise Crash()

    @eng.agent
    async def thinker(run: Any) -> list[Any]:
        first = await run.decide("plan", model, "plan it", 0.01)
        both = await asyncio.gather(
            run.decide("left", model, "left", 0.1), run.decide("right", model, "right", 0.0)
        )
        stop_here()
        return [first, *both]

    with pytest.raises(Crash):
        eng.run(thinker, run_id="ad")
    decided = [(d["call"], d["name"]) for _, t, d in log_of(eng, "ad") if t == "llm_decided"]
    assert decided == [(1, "plan"), (3, "right"), (2, "left")]  # finished right first
    crash["on"] = False
    r = eng.resume("ad")
    assert r.status == "completed"
    assert [x["answer"] for x in r.output] == ["PLAN IT", "LEFT", "RIGHT"]
    assert sorted(called) == ["left", "plan it", "right"]  # each model call made once


# --- real SIGKILLs in the middle of a gather -----------------------------------------


def _start(url: str, run_id: str, svc: str, failpoint: str, data: dict[str, Any]) -> int:
    env = {"AGENTLOG_TEST_SERVICE": svc, "AGENTLOG_FAILPOINTS": failpoint}
    p = python("-m", MODULE, url, run_id, "fan_out", json.dumps(data), env=env)
    assert p.returncode in (0, -9), p.stderr[-3000:]
    return p.returncode


@PROCESS_BACKENDS
@pytest.mark.parametrize(
    "failpoint",
    [
        "after_intent:2",  # all four intents written as issued; killed as the 2nd is
        "after_tool:1",  # the first to finish (the last issued) sent, outcome not recorded
        "after_tool:3",  # three sent, none recorded (outcomes ride in the next commit)
        "after_outcome:2",  # outcomes being recorded as the calls finish
    ],
)
def test_killed_mid_gather_resumes_in_a_new_process_with_no_duplicated_effect(
    store_url: str, tmp_path: Path, failpoint: str
) -> None:
    """A process running a gather of four charges (finishing in reverse order) dies by
    SIGKILL at a failpoint; a new process resumes the run: each charge keeps its call
    identity and key, the ones that happened are verified, the others sent, and every
    effect happened exactly once."""
    svc = str(tmp_path / "service.db")
    service.reset(svc)
    assert _start(store_url, "mid-gather", svc, failpoint, {"order": "g"}) == -9
    r = engine_call(store_url, "resume", "mid-gather", env={"AGENTLOG_TEST_SERVICE": svc})
    assert r["status"] == "completed", r
    assert r["output"] == {"receipts": [f"charge:g-{s}" for s in range(4)]}
    assert service.effects(svc) == Counter({("charge", f"g-{s}"): 1 for s in range(4)})
    keys: dict[str, set[str | None]] = {}
    for _, op, key in service.requests(svc, kind="perform"):
        keys.setdefault(op, set()).add(key)
    assert keys == {f"g-{s}": {f"mid-gather:{s + 1}"} for s in range(4)}


@PROCESS_BACKENDS
def test_killed_mid_gather_of_unverifiable_effects_asks_and_never_sends_twice(
    store_url: str, tmp_path: Path
) -> None:
    """Posts (business key, no verifier, no idempotency key) killed mid-gather: resume
    asks a person about each post it cannot settle, one at a time; answered truthfully
    (from the service's books) the run completes and no post is sent twice."""
    svc = str(tmp_path / "service.db")
    service.reset(svc)
    env = {"AGENTLOG_TEST_SERVICE": svc}
    assert _start(store_url, "posts", svc, "after_tool:2", {"order": "p", "posts": True}) == -9
    r = engine_call(store_url, "resume", "posts", env=env)
    asked = 0
    e = Engine.open(store_url)
    try:
        while r["status"] == "paused":
            asked += 1
            assert asked <= 4, r
            events = e.events("posts")
            call = [x for x in events if x.type == "human_input_requested"][-1].data["call"]
            intent = [x for x in events if x.type == "tool_invoked" and x.data["call"] == call]
            op = intent[-1].data["args"]["op"]
            assert f"post:{op}" in str(r["waiting"])
            receipt = service.by_op("post", op, svc)  # the post's result, if it happened
            truth = "not done" if receipt is None else "given:" + json.dumps({"receipt": receipt})
            r = engine_call(store_url, "answer", "posts", truth, env=env)
        assert r["status"] == "completed", r
        assert asked >= 1
    finally:
        e.close()
    assert service.effects(svc) == Counter({("post", f"p-{s}"): 1 for s in range(4)})
