"""The tools view on every store: real runs (retries, a permanent failure, a breaker that
opens and closes, a fallback, an effect the ledger dedupes, uncertain outcomes resolved by
a verifier, a same-key re-send, a person, and left by an abandonment) give the figures of
a hand count; latencies come from recorded durations (a fake clock the tools move);
hand-made events at fixed times prove the hourly windows, the agent filter and the
percentiles; catching up after each run equals one rebuild at the end."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterator
from typing import Any

import pytest
from agents.fake_time import FakeTime, timed_engine
from agents.kit import craft_uncertain, tool_def
from conftest import all_backends

from engine import CircuitBreaker, Engine, Given, Permanent, RetryPolicy, Transient
from engine import events as ev
from engine.log.history import RunWriter
from engine.log.state import RunState
from engine.policy.failure import NO_RETRY
from engine.stats import ToolStats
from engine.store import Append, Store, stream_id
from engine.store.ports import ViewQuery
from projections.runner import Runner
from projections.views import tools
from projections.views.tools import View, summarize

HOUR = 3600
T0 = 1_700_006_400.0  # an hour's start (1_700_006_400 = 472_224 * 3600)


@pytest.fixture
def fake() -> FakeTime:
    return FakeTime()


@pytest.fixture
def eng(store_url: str, fake: FakeTime) -> Iterator[Engine]:
    yield from timed_engine(store_url, fake, seed=3)


def rows(store: Store) -> list[bytes]:
    """Every row of the view in key order (the fold's whole result)."""
    return store.views.query(View.table(), ViewQuery(descending=False))


def by_tool(stats: list[ToolStats]) -> dict[str, ToolStats]:
    return {s.tool: s for s in stats}


# --- real runs --------------------------------------------------------------------------


class Service:
    """An outside service that dedupes by idempotency key and counts its requests."""

    def __init__(self) -> None:
        self.effects: dict[str, str] = {}
        self.requests = 0

    def perform(self, key: str) -> str:
        self.requests += 1
        return self.effects.setdefault(key, f"receipt-{self.requests}")


def _declare(eng: Engine, fake: FakeTime, svc: Service) -> dict[str, Any]:
    """The scenario's tools and agents. Each attempt moves the fake clock by a known
    duration, so the recorded latencies are known."""
    state = {"flaky": 0, "rates_up": False}

    @eng.tool(retry=RetryPolicy(max_attempts=3, initial=1.0, jitter=False))
    def flaky() -> str:
        state["flaky"] += 1
        fake.now += 0.010 * state["flaky"]  # 10 ms, 20 ms, 30 ms
        if state["flaky"] % 3:
            raise Transient("502 bad gateway")
        return "ok"

    @eng.tool(retry=RetryPolicy(max_attempts=3, initial=1.0, jitter=False))
    def strict() -> str:
        fake.now += 0.005
        raise Permanent("400 bad request")

    @eng.tool(
        retry=NO_RETRY,
        breaker=CircuitBreaker(failure_threshold=1, reset_timeout=10.0),
        fallback=lambda: 1.0,
    )
    def rates() -> float:
        fake.now += 0.040
        if not state["rates_up"]:
            raise Transient("rates API unavailable")
        return 1.08

    @eng.tool(side_effect=True, key=lambda order: f"charge:{order}")
    def charge(order: str, *, idempotency_key: str) -> str:
        fake.now += 0.100
        return svc.perform(idempotency_key)

    @eng.tool(side_effect=True, verify=lambda key: svc.effects.get(key))
    def transfer(cents: int, *, idempotency_key: str) -> str:
        return svc.perform(idempotency_key)

    @eng.tool(side_effect=True)
    def ship(order: str, *, idempotency_key: str) -> str:
        fake.now += 0.200
        return svc.perform(idempotency_key)

    @eng.tool(side_effect=True)
    def fax(number: str) -> str:  # neither verifier nor key: only a person knows
        return svc.perform(f"fax:{number}")

    @eng.agent
    def ops(run: Any, what: str) -> Any:
        if what == "flaky":
            return flaky()
        if what == "strict":
            return strict()
        if what == "rates":
            return rates()
        return charge(what)

    @eng.agent
    def payer(run: Any) -> str:
        return str(transfer(300))

    @eng.agent
    def shipper(run: Any) -> str:
        return str(ship("o1"))

    @eng.agent
    def faxer(run: Any, number: str) -> str:
        return str(fax(number))

    return (
        {"state": state}
        | {f.__name__: f for f in (flaky, strict, rates, charge, transfer, ship, fax)}
        | {"ops": ops, "payer": payer, "shipper": shipper, "faxer": faxer}
    )


def _name(fn: Any) -> str:
    return str(tool_def(fn).name)


def _scenario(eng: Engine, fake: FakeTime, svc: Service, step: Any) -> dict[str, Any]:
    """Run the scenario, calling ``step()`` after each run; the declarations."""
    d = _declare(eng, fake, svc)
    ops = d["ops"]
    assert eng.run(ops, what="flaky").status == "completed"  # 2 retries, 3 attempts
    step()
    assert eng.run(ops, what="strict").status == "failed"  # permanent, 1 attempt
    step()
    assert eng.run(ops, what="rates").status == "failed"  # transient; the circuit opens
    step()
    fell_back = eng.run(ops, what="rates")
    assert (fell_back.status, fell_back.output) == ("completed", 1.0)  # the fallback
    step()
    assert eng.run(ops, what="o1").status == "completed"  # the charge is sent
    first = eng.run(ops, what="o1")
    assert first.status == "completed" and svc.requests == 1  # the ledger dedupes it
    assert eng.resume(first.run_id).status == "completed" and svc.requests == 1
    step()
    key = craft_uncertain(eng, d["payer"], "u-verified", {}, d["transfer"], (300,))
    svc.effects[key] = "landed"
    assert eng.resume("u-verified").output == "landed"  # the verifier finds it
    step()
    craft_uncertain(eng, d["shipper"], "u-resent", {}, d["ship"], ("o1",))
    assert eng.resume("u-resent").status == "completed"  # re-sent under its key
    step()
    craft_uncertain(eng, d["faxer"], "u-human", {"number": "5"}, d["fax"], ("5",))
    assert eng.resume("u-human").status == "paused"
    assert eng.answer("u-human", Given("faxed 5")).status == "completed"  # a person says so
    step()
    craft_uncertain(eng, d["faxer"], "u-left", {"number": "6"}, d["fax"], ("6",))
    assert eng.resume("u-left").status == "paused"
    assert eng.abandon("u-left").status == "abandoned"  # nobody ever said
    step()
    fake.now += 10.0
    d["state"]["rates_up"] = True
    assert eng.run(ops, what="rates").output == 1.08  # half-open trial closes it
    step()
    return d


def _expected(d: dict[str, Any]) -> dict[str, ToolStats]:
    """The hand count of the scenario (latencies checked apart)."""
    n = _name
    return {
        n(d["flaky"]): ToolStats(
            n(d["flaky"]), calls=1, retries=2, attempts=3, attempt_failures={"transient": 2}
        ),
        n(d["strict"]): ToolStats(
            n(d["strict"]),
            calls=1,
            failures={"permanent": 1},
            attempts=1,
            attempt_failures={"permanent": 1},
        ),
        n(d["rates"]): ToolStats(
            n(d["rates"]),
            calls=3,
            failures={"transient": 1},
            attempt_failures={"transient": 1},
            fallbacks=1,
            attempts=2,
            breaker="closed",
            breaker_transitions=3,
        ),
        n(d["charge"]): ToolStats(
            n(d["charge"]), calls=2, attempts=1, effects_sent=1, effects_deduplicated=1
        ),
        n(d["transfer"]): ToolStats(n(d["transfer"]), calls=1, uncertain={"verified": 1}),
        n(d["ship"]): ToolStats(
            n(d["ship"]), calls=1, attempts=1, effects_sent=1, uncertain={"resent": 1}
        ),
        n(d["fax"]): ToolStats(n(d["fax"]), calls=2, uncertain={"abandoned": 1, "human": 1}),
    }


def _counts_only(s: ToolStats) -> ToolStats:
    import msgspec

    return msgspec.structs.replace(
        s, p50_ms=None, p95_ms=None, p99_ms=None, mean_ms=None, stdev_ms=None
    )


@all_backends
def test_real_runs_give_the_hand_count_and_incremental_equals_rebuilt(
    eng: Engine, fake: FakeTime
) -> None:
    """Each figure of each tool equals the hand count, whether the view caught up after
    every run or was rebuilt once at the end (also one event per batch)."""
    svc = Service()
    seen: list[list[ToolStats]] = []
    d = _scenario(eng, fake, svc, lambda: seen.append(summarize(eng.store, None, None)))
    rates = by_tool(seen[3])[_name(d["rates"])]
    assert (rates.breaker, rates.breaker_transitions, rates.fallbacks) == ("open", 1, 1)

    incremental = summarize(eng.store, None, None)
    assert [s.tool for s in incremental] == sorted(s.tool for s in incremental)
    assert {s.tool: _counts_only(s) for s in incremental} == _expected(d)
    built = rows(eng.store)
    Runner(eng.store, [View()]).rebuild("tools")
    assert rows(eng.store) == built and summarize(eng.store, None, None) == incremental
    Runner(eng.store, [View()], batch=1).rebuild("tools")
    assert rows(eng.store) == built

    flaky = by_tool(incremental)[_name(d["flaky"])]
    assert flaky.mean_ms == pytest.approx(20.0) and flaky.p50_ms == pytest.approx(20.0, rel=0.05)
    assert flaky.stdev_ms == pytest.approx(statistics.pstdev([10.0, 20.0, 30.0]))
    assert flaky.p99_ms == pytest.approx(30.0, rel=0.05)
    charge = by_tool(incremental)[_name(d["charge"])]
    assert charge.p50_ms == pytest.approx(100.0) and charge.stdev_ms == pytest.approx(0.0)
    rates_lat = by_tool(incremental)[_name(d["rates"])]
    assert rates_lat.mean_ms == pytest.approx(40.0)  # the fallback is no attempt
    assert by_tool(incremental)[_name(d["transfer"])].p50_ms is None  # nothing executed


@all_backends
def test_the_agent_filter_keeps_only_that_agents_calls(eng: Engine, fake: FakeTime) -> None:
    """Two agents call the same tool: each sees its own calls; no filter sees both; a tool
    an agent never called is not in its figures."""
    svc = Service()
    d = _declare(eng, fake, svc)

    @eng.agent
    def other(run: Any) -> str:
        return str(d["flaky"]())

    assert eng.run(d["ops"], what="flaky").status == "completed"
    assert eng.run(d["ops"], what="strict").status == "failed"
    assert eng.run(other).status == "completed"  # attempts 4 (fails), 5 (fails), 6 (ok)
    flaky = _name(d["flaky"])
    mine = by_tool(summarize(eng.store, None, d["ops"].name))
    theirs = by_tool(summarize(eng.store, None, other.name))
    both = by_tool(summarize(eng.store, None, None))
    assert (mine[flaky].calls, mine[flaky].retries) == (1, 2)
    assert mine[flaky].mean_ms == pytest.approx(20.0)
    assert (theirs[flaky].calls, theirs[flaky].retries) == (1, 2)
    assert theirs[flaky].mean_ms == pytest.approx(50.0)
    assert (both[flaky].calls, both[flaky].retries, both[flaky].attempts) == (2, 4, 6)
    assert set(theirs) == {flaky} and _name(d["strict"]) in mine
    assert summarize(eng.store, None, "nobody") == []


@all_backends
def test_a_fork_counts_its_own_calls_not_its_copy_of_the_parent(
    eng: Engine, fake: FakeTime
) -> None:
    """A rewound fork copies its parent's events before the checkpoint (a lookup): they
    are not counted again. Its own call of the parent's charge takes the parent's effect
    over (reused), sending nothing."""
    svc = Service()

    @eng.tool
    def lookup() -> int:
        fake.now += 0.001
        return 7

    @eng.tool(side_effect=True)
    def pay(cents: int, *, idempotency_key: str) -> str:
        fake.now += 0.002
        return svc.perform(idempotency_key)

    @eng.agent
    def buyer(run: Any) -> str:
        n = lookup()
        run.checkpoint("priced")
        return str(pay(n))

    parent = eng.run(buyer)
    fork = eng.rewind(parent.run_id, to="priced")
    assert fork.status == "completed" and svc.requests == 1
    found = by_tool(summarize(eng.store, None, None))
    looked, paid = found[_name(lookup)], found[_name(pay)]
    assert (looked.calls, looked.attempts) == (1, 1)
    assert (paid.calls, paid.attempts, paid.effects_sent, paid.effects_reused) == (2, 1, 1, 1)
    assert paid.effects_deduplicated == 0


@all_backends
def test_a_failed_call_re_attempted_on_resume_is_one_call(eng: Engine, fake: FakeTime) -> None:
    """The failure that ended a run is re-attempted by resume under a fresh intent: one
    durable call, two attempts, one final failure."""
    up = {"on": False}

    @eng.tool(retry=NO_RETRY)
    def probe() -> str:
        fake.now += 0.003
        if not up["on"]:
            raise Permanent("not yet")
        return "up"

    @eng.agent
    def watcher(run: Any) -> str:
        return str(probe())

    r = eng.run(watcher)
    assert r.status == "failed"
    up["on"] = True
    assert eng.resume(r.run_id).status == "completed"
    (s,) = summarize(eng.store, None, None)
    assert (s.calls, s.attempts, s.failures) == (1, 2, {"permanent": 1})


@all_backends
def test_a_run_keeps_few_notes_however_many_failures_its_code_catches(
    eng: Engine, fake: FakeTime
) -> None:
    """Agent code that catches 30 final failures: each counts, and the run's row keeps
    only the last one (the only failure a resume could re-attempt) while it runs."""

    @eng.tool(retry=NO_RETRY)
    def brittle(n: int) -> None:
        raise Permanent(f"no {n}")

    @eng.agent
    def tolerant(run: Any) -> int:
        caught = 0
        for n in range(30):
            try:
                brittle(n)
            except Exception:
                caught += 1
        run.ask("more?")
        return caught

    r = eng.run(tolerant)
    assert r.status == "paused"
    (s,) = summarize(eng.store, None, None)
    assert (s.calls, s.attempts, s.failures) == (30, 30, {"permanent": 30})
    (row,) = [
        tools._DECODE(b)
        for b in eng.store.views.query(View.table(), ViewQuery(equal={"kind": "run"}))
    ]
    assert row.calls is not None and list(row.calls.open) == [30]


@all_backends
def test_a_call_failing_fast_on_an_open_circuit_is_a_failure_not_an_attempt(
    eng: Engine, fake: FakeTime
) -> None:
    """No fallback: the first run's attempt fails and opens the circuit; the second run's
    call fails fast without running the tool (a final transient failure, no attempt, no
    latency of its own)."""

    @eng.tool(retry=NO_RETRY, breaker=CircuitBreaker(failure_threshold=1, reset_timeout=60.0))
    def stock() -> int:
        fake.now += 0.250
        raise ConnectionError("stock service unreachable")

    @eng.agent
    def checker(run: Any) -> int:
        return int(stock())

    assert [eng.run(checker).status for _ in range(2)] == ["failed", "failed"]
    (s,) = summarize(eng.store, None, None)
    assert (s.calls, s.attempts, s.failures) == (2, 1, {"transient": 2})
    assert s.attempt_failures == {"transient": 1}  # the fast failure ran nothing
    assert (s.breaker, s.breaker_transitions) == ("open", 1)
    assert s.p50_ms == pytest.approx(250.0) and s.mean_ms == pytest.approx(250.0)


# --- hand-made events at fixed times -----------------------------------------------------


def _run(store: Store, run_id: str, agent: str, *events: ev.Event) -> None:
    writer = RunWriter(store, RunState(run_id=run_id))
    writer.append(ev.AgentStarted(at=events[0].at, agent=agent, import_path="m"))
    for e in events:
        writer.append(e)


def _call(call: int, at: float, duration: float, tool: str = "search") -> list[ev.Event]:
    return [
        ev.ToolInvoked(at=at, call=call, tool=tool),
        ev.ToolSucceeded(at=at, call=call, tool=tool, duration=duration),
    ]


@all_backends
def test_windows_split_by_the_hour_and_since_starts_at_its_hour(store: Store) -> None:
    """Calls an hour apart land in two windows; ``since`` keeps the windows from the one
    it falls in; each window's figures are its own."""
    _run(store, "early", "a", *_call(1, T0 + 10, 0.001), *_call(2, T0 + HOUR - 1, 0.001))
    _run(store, "late", "a", *_call(1, T0 + HOUR, 0.004), *_call(2, T0 + 2 * HOUR + 5, 0.004))
    Runner(store, [View()]).catch_up()
    windows = [
        tools._DECODE(b).window_start
        for b in store.views.query(View.table(), ViewQuery(equal={"kind": "window"}))
    ]
    assert sorted(windows) == [T0, T0 + HOUR, T0 + 2 * HOUR]
    counts = {
        since: summarize(store, since, None)[0].calls
        for since in (None, T0, T0 + HOUR - 1, T0 + HOUR, T0 + HOUR + 1800, T0 + 2 * HOUR)
    }
    assert counts == {
        None: 4,
        T0: 4,
        T0 + HOUR - 1: 4,
        T0 + HOUR: 2,
        T0 + HOUR + 1800: 2,
        T0 + 2 * HOUR: 1,
    }
    assert summarize(store, T0 + 3 * HOUR, None) == []
    late = summarize(store, T0 + HOUR, None)[0]
    assert late.mean_ms == pytest.approx(4.0) and late.p99_ms == pytest.approx(4.0)


@all_backends
def test_percentiles_mean_and_stdev_of_known_durations_across_windows(store: Store) -> None:
    """Durations 1..200 ms in two windows and two agents: p50/p95/p99 within 5% of the
    nearest-rank values, mean and stdev exact, for the union and for one window alone."""
    durations = [n / 1000 for n in range(1, 201)]
    first = [e for n, d in enumerate(durations[:100], 1) for e in _call(n, T0 + n, d)]
    second = [e for n, d in enumerate(durations[100:], 1) for e in _call(n, T0 + HOUR + n, d)]
    _run(store, "r1", "a", *first)
    _run(store, "r2", "b", *second)
    for since, agent, sample in [
        (None, None, durations),
        (T0 + HOUR, None, durations[100:]),
        (None, "a", durations[:100]),
    ]:
        (s,) = summarize(store, since, agent)
        ms = sorted(d * 1000 for d in sample)
        for q, got in ((0.50, s.p50_ms), (0.95, s.p95_ms), (0.99, s.p99_ms)):
            assert got == pytest.approx(ms[math.ceil(q * len(ms)) - 1], rel=0.05)
        assert s.mean_ms == pytest.approx(statistics.fmean(ms))
        assert s.stdev_ms == pytest.approx(statistics.pstdev(ms))
        assert s.calls == s.attempts == len(ms)


@all_backends
def test_breaker_state_and_transitions_from_the_tools_own_stream(store: Store) -> None:
    """Circuit events in the tool's stream (no run, no agent): the last state and when it
    changed per tool, transitions counted per hour (``since``), for any agent's figures."""
    sid = stream_id("tool:search")
    changes = [
        ev.CircuitOpened(at=T0 + 1, tool="search", failures=3),
        ev.CircuitHalfOpened(at=T0 + 40, tool="search"),
        ev.CircuitOpened(at=T0 + HOUR + 1, tool="search"),
        ev.CircuitHalfOpened(at=T0 + HOUR + 40, tool="search"),
    ]
    store.append([Append(sid, n, e) for n, e in enumerate(changes, 1)])
    _run(store, "r", "a", *_call(1, T0 + 5, 0.01))
    (s,) = summarize(store, None, "a")
    assert (s.breaker, s.breaker_transitions, s.calls) == ("half_open", 4, 1)
    store.append([Append(sid, 5, ev.CircuitClosed(at=T0 + HOUR + 50, tool="search"))])
    (s,) = summarize(store, T0 + HOUR, None)
    assert (s.breaker, s.breaker_transitions, s.calls) == ("closed", 3, 0)
    (row,) = [
        tools._DECODE(b)
        for b in store.views.query(View.table(), ViewQuery(equal={"kind": "breaker"}))
    ]
    assert row.breaker == tools.Breaker("closed", T0 + HOUR + 50, 5)
    assert summarize(store, T0 + HOUR, "a") == []  # agent a made no call in that hour


@all_backends
def test_abandonment_counts_the_side_effects_it_left_in_doubt(store: Store) -> None:
    """At abandonment: a side effect with no outcome, and one that failed after an
    indeterminate attempt, are abandoned uncertain; a read with no outcome, a settled
    effect, and an effect that failed for sure are not. A completed run keeps no row."""
    at = T0 + 100
    _run(
        store,
        "left",
        "a",
        ev.ToolInvoked(at=at, call=1, tool="pay", side_effect=True, key="k1"),
        ev.ToolInvoked(at=at, call=2, tool="pay", side_effect=True, key="k2"),
        ev.ToolFailed(at=at, call=2, tool="pay", kind="indeterminate", message="t", final=False),
        ev.ToolFailed(at=at, call=2, tool="pay", kind="permanent", message="x"),
        ev.ToolInvoked(at=at, call=3, tool="read", side_effect=False),
        ev.ToolInvoked(at=at, call=4, tool="pay", side_effect=True, key="k4"),
        ev.ToolSucceeded(at=at, call=4, tool="pay"),
        ev.ToolInvoked(at=at, call=5, tool="mail", side_effect=True, key="k5"),
        ev.ToolFailed(at=at, call=5, tool="mail", kind="permanent", message="x"),
        ev.AgentAbandoned(at=at + HOUR),
    )
    _run(store, "done", "a", *_call(1, at, 0.01, "pay"), ev.AgentFinished(at=at))
    found = by_tool(summarize(store, None, None))
    assert found["pay"].uncertain == {"abandoned": 2}
    assert found["read"].uncertain == {} and found["mail"].uncertain == {}
    assert found["pay"].failures == {"permanent": 1}
    # call 2's indeterminate attempt, call 4's, and the read of run "done" (the final
    # failures carry no attempt of their own: no error_type)
    assert (found["pay"].attempts, found["pay"].effects_sent) == (3, 2)
    assert by_tool(summarize(store, T0 + HOUR, None))["pay"].uncertain == {"abandoned": 2}
    assert by_tool(summarize(store, None, "b")) == {}
    kinds = [
        tools._DECODE(b).kind for b in store.views.query(View.table(), ViewQuery(descending=False))
    ]
    assert kinds.count("run") == 0 and kinds.count("abandoned") == 1


@all_backends
def test_a_fork_taking_over_an_uncertain_parent_effect_counts_its_resolution(
    store: Store,
) -> None:
    """A fork's call that takes over its parent's effect: with the parent's outcome it is
    reused and nothing was in doubt; without it, the same-key re-send that follows
    resolves an uncertain outcome."""
    at = T0 + 7
    take = {"tool": "pay", "side_effect": True, "key": "k", "parent_call": 1}
    _run(
        store,
        "fork1",
        "a",
        ev.ToolInvoked(at=at, call=1, **take),
        ev.ToolSucceeded(at=at, call=1, tool="pay", source="parent"),
        ev.ToolInvoked(at=at, call=2, **take),
        ev.ToolSucceeded(at=at, call=2, tool="pay", duration=0.5),
    )
    (s,) = summarize(store, None, None)
    assert (s.calls, s.effects_reused, s.effects_sent, s.attempts) == (2, 1, 1, 1)
    assert s.uncertain == {"resent": 1}


@all_backends
def test_names_with_colons_never_share_a_row(store: Store) -> None:
    """Agent "m:f" calling tool "x" and agent "m" calling tool "f:x" in the same hour are
    two rows (agent names are module:qualname; a tool's name may hold ':' too)."""
    _run(store, "one", "m:f", *_call(1, T0 + 1, 0.001, "x"))
    _run(store, "two", "m", *_call(1, T0 + 2, 0.002, "f:x"), *_call(2, T0 + 3, 0.002, "f:x"))
    assert [(s.tool, s.calls) for s in summarize(store, None, "m")] == [("f:x", 2)]
    assert [(s.tool, s.calls) for s in summarize(store, None, "m:f")] == [("x", 1)]


@all_backends
def test_stats_say_the_hour_tool_figures_start_and_the_agent_filter_holds(
    store: Store,
) -> None:
    """Runs count from ``since``, tool figures from the start of its hour, and
    ``tools_since`` says so; ``agent`` keeps each agent's own tools either way: calls of
    runs started before ``since`` in that hour are the hour's, not another agent's."""
    from projections.stats import iso_utc, stats

    _run(store, "a1", "m:a", *_call(1, T0 + 10, 0.001))
    _run(store, "b1", "m:b", *_call(1, T0 + 20, 0.001, tool="lookup"))
    mid = stats(store, T0 + 1800, "m:a")
    assert (mid.runs.total, mid.since, mid.tools_since) == (0, iso_utc(T0 + 1800), iso_utc(T0))
    assert [(t.tool, t.calls) for t in mid.tools] == [("search", 1)]
    other = stats(store, T0 + 1800, "m:b")
    assert [(t.tool, t.calls) for t in other.tools] == [("lookup", 1)]
    assert [t.tool for t in stats(store, T0 + 1800, None).tools] == ["lookup", "search"]
    later = stats(store, T0 + HOUR, "m:a")
    assert (later.tools, later.tools_since) == ([], iso_utc(T0 + HOUR))
    every = stats(store, None, None)
    assert (every.runs.total, every.tools_since) == (2, None)
