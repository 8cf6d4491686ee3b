"""Timeouts: fixed seconds, or "adaptive" (theta = mu + k*sigma of the tool's recorded
latencies, k=3, clamped to [floor, ceiling], a default until enough samples).

The Latency statistics are tested directly with synthetic, seeded samples. End to end,
a sync tool past its timeout is abandoned in its thread: the call fails with
TimeoutError (transient for a read-only tool, indeterminate for a side effect, which is
then re-sent under the same key), and what the abandoned thread returns later is kept
as a ``tool_late_result`` event and never returned to agent code. The only real waits
are the timeouts themselves (0.3 s each); the backoff sleep is fake.
"""

from __future__ import annotations

import asyncio
import random
import statistics
import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from agents.fake_time import FakeTime, timed_engine
from agents.kit import Crash, log_of, tool_def
from conftest import all_backends

from engine import Engine, RetryPolicy
from engine import events as ev
from engine.polling import poll_until
from engine.runtime.host.guards import Latency
from engine.store import stream_id


@pytest.fixture
def fake() -> FakeTime:
    return FakeTime()


@pytest.fixture
def eng(store_url: str, fake: FakeTime) -> Iterator[Engine]:
    yield from timed_engine(store_url, fake, seed=2)


def of_type(eng: Engine, run_id: str, kind: str) -> list[dict[str, Any]]:
    return [d for _, t, d in log_of(eng, run_id) if t == kind]


def late_results(
    eng: Engine, run_id: str, tool: Any = None, wait: float = 10.0
) -> list[dict[str, Any]]:
    """The run's late results, waiting (bounded) for the abandoned thread's: events of its
    log while it still ran, else of ``tool``'s own stream naming the run (it had ended)."""
    stream = stream_id("tool:" + tool_def(tool).name) if tool is not None else None

    def look() -> list[dict[str, Any]] | None:
        found = of_type(eng, run_id, "tool_late_result")
        for r in eng.store.read(stream) if stream is not None else ():
            if isinstance(r.event, ev.ToolLateResult) and r.event.run_id == run_id:
                found.append(ev.event_data(r.event))
        return found or None  # none yet: look again

    return poll_until(look, wait, first=0.005, most=0.005) or []


# --- adaptive timeouts: the statistics ---------------------------------------------------


def test_default_until_enough_samples_then_mean_plus_k_sigma() -> None:
    lat = Latency(default=7.0, min_samples=5)
    samples = [0.1, 0.2, 0.3, 0.4]
    for s in samples:
        lat.add(s)
    assert lat.timeout() == 7.0
    samples.append(0.5)
    lat.add(0.5)
    expected = statistics.mean(samples) + 3 * statistics.stdev(samples)
    assert lat.timeout() == pytest.approx(expected)
    assert lat.k == 3.0


def test_timeout_is_clamped_to_floor_and_ceiling() -> None:
    fast = Latency(floor=0.05, ceiling=60.0)
    for _ in range(20):
        fast.add(0.001)
    assert fast.timeout() == 0.05
    slow = Latency(floor=0.05, ceiling=60.0)
    for i in range(20):
        slow.add(50.0 + i)
    assert slow.timeout() == 60.0


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_adaptive_timeout_follows_a_shifted_latency_distribution(seed: int) -> None:
    """Latency N(0.2, 0.02) -> theta ~ 0.26; the service degrades to N(1.0, 0.05) ->
    theta follows to ~ 1.15 (old samples decay away); it recovers -> theta comes back."""
    rng = random.Random(seed)
    lat = Latency()

    def feed(mu: float, sigma: float, n: int) -> float:
        for _ in range(n):
            lat.add(max(0.0, rng.gauss(mu, sigma)))
        return lat.timeout()

    assert feed(0.2, 0.02, 500) == pytest.approx(0.2 + 3 * 0.02, abs=0.015)
    during = feed(1.0, 0.05, 20)
    assert during > 0.5  # already stretching, so the slow calls are not all cut off
    assert feed(1.0, 0.05, 3000) == pytest.approx(1.0 + 3 * 0.05, abs=0.04)
    assert feed(0.2, 0.02, 3000) == pytest.approx(0.2 + 3 * 0.02, abs=0.02)


# --- end to end --------------------------------------------------------------------------


@all_backends
def test_read_only_tool_past_its_timeout_is_abandoned_and_its_late_result_kept(
    eng: Engine, fake: FakeTime
) -> None:
    """Attempt 1 hangs past 0.3 s: TimeoutError, transient, retried; attempt 2 answers.
    The hung thread finishes later: its value is a tool_late_result event (in the run's
    log, or in the tool's stream if the run had finished by then), the agent gets attempt
    2's value only."""
    count = Counter[str]()
    gate = threading.Event()

    @eng.tool(timeout=0.3, retry=RetryPolicy(max_attempts=3, initial=0.5, jitter=False))
    def quote(symbol: str) -> str:
        count["quote"] += 1
        if count["quote"] == 1:
            gate.wait(10)
            return "stale price"
        return "fresh price"

    fake.then = gate.set  # the abandoned thread finishes during the backoff

    @eng.agent
    def agent(run: Any) -> str:
        return str(quote("ACME"))

    r = eng.run(agent)
    assert (r.status, r.output) == ("completed", "fresh price")
    (failed,) = of_type(eng, r.run_id, "tool_failed")
    assert (failed["kind"], failed["error_type"], failed["attempt"]) == (
        "transient",
        "TimeoutError",
        1,
    )
    assert "no result within 0.3 s" in failed["message"]
    assert of_type(eng, r.run_id, "tool_succeeded")[0]["result"] == "fresh price"
    (late,) = late_results(eng, r.run_id, quote)  # in the log, or after it ended beside it
    assert (late["call"], late["result"], late.get("error")) == (1, "stale price", None)
    assert late["tool"] == tool_def(quote).name and late["after"] >= 0
    assert eng.state(r.run_id).output == "fresh price"


@all_backends
def test_side_effect_past_its_timeout_is_indeterminate_and_resent_with_its_key(
    eng: Engine,
) -> None:
    """The same hang on a side effect is indeterminate (the request may land): the call is
    re-sent under the same key, never a fresh one. When the abandoned request lands later
    the gateway dedupes it; its late result is evidence."""
    effects: dict[str, str] = {}
    requests: list[str] = []
    gate = threading.Event()
    lock = threading.Lock()

    @eng.tool(side_effect=True, timeout=0.3, retry=RetryPolicy(max_attempts=3, initial=0.2))
    def transfer(cents: int, *, idempotency_key: str) -> str:
        first = not requests
        requests.append(idempotency_key)
        if first:
            gate.wait(10)
        with lock:
            return effects.setdefault(idempotency_key, f"tx-{len(effects) + 1}")

    @eng.agent
    def agent(run: Any) -> str:
        return str(transfer(2500))

    r = eng.run(agent)
    assert (r.status, r.output) == ("completed", "tx-1")
    gate.set()
    (late,) = late_results(eng, r.run_id, transfer)  # it lands after the run finished
    assert late["result"] == "tx-1"  # deduped by the key: one transfer
    assert requests == [f"{r.run_id}:1"] * 2 and effects == {f"{r.run_id}:1": "tx-1"}
    (failed,) = of_type(eng, r.run_id, "tool_failed")
    assert (failed["kind"], failed["error_type"]) == ("indeterminate", "TimeoutError")
    assert {d["key"] for d in of_type(eng, r.run_id, "tool_invoked")} == {f"{r.run_id}:1"}


@all_backends
def test_adaptive_timeout_cuts_off_a_call_far_slower_than_the_recorded_latency(
    eng: Engine,
) -> None:
    """With latencies of 10 ms recorded, theta is the floor (300 ms here): a call that
    hangs is abandoned then (not after the 10 s default) and retried."""
    count = Counter[str]()
    gate, hung_call_ended = threading.Event(), threading.Event()

    @eng.tool(timeout="adaptive", retry=RetryPolicy(max_attempts=2, initial=0.0))
    def search(q: str) -> list[str]:
        count["n"] += 1
        if count["n"] == 1:
            gate.wait(60)
            hung_call_ended.set()
            return ["late"]
        return [q]

    lat = eng.guards.latencies[tool_def(search).name] = Latency(floor=0.3)
    for _ in range(10):
        lat.add(0.01)

    @eng.agent
    def agent(run: Any) -> list[str]:
        return list(search("lamps"))

    r = eng.run(agent)
    assert not hung_call_ended.is_set()  # the run did not wait for the hung attempt
    assert (r.status, r.output) == ("completed", ["lamps"])
    (failed,) = of_type(eng, r.run_id, "tool_failed")
    assert "no result within 0.3 s" in failed["message"] and failed["kind"] == "transient"
    gate.set()
    assert late_results(eng, r.run_id, search)[0]["result"] == ["late"]


@all_backends
def test_adaptive_timeout_is_seeded_from_the_runs_recorded_latencies(
    eng: Engine, fake: FakeTime
) -> None:
    """A new process (no latency statistics) resuming a run seeds the tool's statistics
    from the durations the run recorded, before its first live call."""
    crash = {"on": True}

    @eng.tool(timeout="adaptive")
    def step(i: int) -> int:
        fake.now += 0.25  # each call takes 250 ms on the engine's clock
        return i

    @eng.tool
    def boom() -> None:
        if crash["on"]:
            raise Crash

    @eng.agent
    def agent(run: Any) -> int:
        total = sum(step(i) for i in range(6))
        boom()
        return total + step(6)

    with pytest.raises(Crash):
        eng.run(agent, run_id="seeded")
    durations = [d["duration"] for d in of_type(eng, "seeded", "tool_succeeded")]
    assert durations == pytest.approx([0.25] * 6)

    eng.guards.latencies.clear()  # what a fresh process has
    crash["on"] = False
    r = eng.resume("seeded")
    assert (r.status, r.output) == ("completed", 21)
    lat = eng.guards.latencies[tool_def(step).name]
    assert lat.n == 7 and lat.mean == pytest.approx(0.25)
    assert lat.timeout() == pytest.approx(0.25)  # sigma 0: theta = mu


@all_backends
@pytest.mark.parametrize("agent_kind", ["sync", "async"])
def test_async_tool_past_its_timeout_is_cancelled_and_retried(eng: Engine, agent_kind: str) -> None:
    """An async tool (in a sync or an async agent) past its timeout is cancelled: a
    transient TimeoutError, a retry, and no late result (nothing keeps running)."""
    count = Counter[str]()

    @eng.tool(timeout=0.3, retry=RetryPolicy(max_attempts=2, initial=0.0))
    async def ping(host: str) -> str:
        count["n"] += 1
        if count["n"] == 1:
            await asyncio.Event().wait()  # never answers
        return f"pong {host}"

    if agent_kind == "sync":

        @eng.agent(name=f"sync-pinger-{id(eng)}")
        def agent(run: Any) -> str:
            return str(asyncio.run(ping("h1")))

    else:

        @eng.agent(name=f"async-pinger-{id(eng)}")
        async def agent(run: Any) -> str:
            return str(await ping("h1"))

    r = eng.run(agent)
    assert (r.status, r.output) == ("completed", "pong h1")
    (failed,) = of_type(eng, r.run_id, "tool_failed")
    assert (failed["kind"], failed["error_type"]) == ("transient", "TimeoutError")
    assert count["n"] == 2
    assert of_type(eng, r.run_id, "tool_late_result") == []


HUNG_TOOL = """
import threading
from engine import Engine

engine = Engine.open({url!r})


@engine.tool(side_effect=True, timeout=0.3)
def post_forever(order: str) -> dict:
    threading.Event().wait()  # the server never answers
    return {{"order": order}}


@engine.agent
def pay(run, order: str) -> dict:
    return post_forever(order)


print(engine.run(pay, order="o1").status, flush=True)
"""


def test_a_process_whose_tool_hung_past_its_timeout_still_exits(tmp_path: Any) -> None:
    """A sync tool abandoned past its timeout runs in a daemon thread: the run pauses
    (an unknown outcome, no verifier, no key) and the process exits, instead of waiting
    forever at interpreter exit for a worker that never returns."""
    import subprocess
    import sys

    script = tmp_path / "hung.py"
    script.write_text(HUNG_TOOL.format(url=f"sqlite:///{tmp_path}/a.db"))
    # The limit only turns a hang into a failure; the process needs well under a second.
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, check=False
    )
    assert (done.returncode, done.stdout.strip()) == (0, "paused"), done.stderr


@all_backends
def test_a_timeout_error_raised_by_the_tool_itself_is_classified_as_such(eng: Engine) -> None:
    """A tool that raises TimeoutError itself (asyncio, sockets) fails like any TimeoutError:
    transient for a read-only tool, retried; with its own message and no late-result event,
    whether it is an async tool on the agent's loop or a sync tool with a timeout."""
    tries: Counter[str] = Counter()

    @eng.tool(retry=RetryPolicy(max_attempts=2, initial=0))
    async def slow_async(q: str) -> str:
        tries["async"] += 1
        if tries["async"] == 1:
            raise TimeoutError("upstream timed out")
        return "a:" + q

    @eng.tool(retry=RetryPolicy(max_attempts=2, initial=0), timeout=5.0)
    def slow_sync(q: str) -> str:
        tries["sync"] += 1
        if tries["sync"] == 1:
            raise TimeoutError("upstream timed out")
        return "s:" + q

    @eng.agent
    async def timing_out(run: Any) -> list[str]:
        return [await slow_async("x"), slow_sync("y")]

    r = eng.run(timing_out)
    assert r.status == "completed", r.error
    assert r.output == ["a:x", "s:y"]
    failures = [e.data for e in eng.events(r.run_id) if e.type == "tool_failed"]
    assert [(f["kind"], f["message"]) for f in failures] == [
        ("transient", "TimeoutError: upstream timed out"),
        ("transient", "TimeoutError: upstream timed out"),
    ]
    assert "tool_late_result" not in [e.type for e in eng.events(r.run_id)]
