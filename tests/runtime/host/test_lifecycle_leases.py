"""Owner leases on every store: a run holds a lease (``store.lease(run_id)`` -> ``(owner,
expires_at)``) only while it executes, renewed by a heartbeat; ``engine.recover()``
resumes every running run whose lease expired or whose owner on this host is gone, and
skips a run whose owner is alive; resuming (answering, abandoning) a run a live owner
executes is refused with RunBusy (a UsageError); recoverers racing in threads or
processes never run one run twice. Real processes (SQLite, PostgreSQL): an owner killed
by SIGKILL mid-run is recovered from another process; a process blocked inside a tool
keeps its run from being resumed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agents import service
from agents.kit import ROOT, Crash, log_of, python
from conftest import all_backends, backends

from engine import Engine, EngineConfig
from engine.errors import UsageError
from engine.polling import poll_until
from engine.runtime.host.leases import HOST, RunBusy, pid_space

PROCESS_BACKENDS = backends("sqlite", "postgres")


def _dead_pid() -> int:
    """The pid of a process that has exited and been reaped."""
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def _plant_lease(eng: Engine, run_id: str, owner: str, seconds: float) -> None:
    now = time.time()
    assert eng.store.take_lease(run_id, owner, now + seconds, now) == owner


class Counting:
    """Executions per idempotency key, and a crash switch for the first read."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.crash = True
        self.lock = threading.Lock()


def _crashable(eng: Engine, counting: Counting, delay: float = 0.0) -> Any:
    """An agent that crashes at its first (read-only) call while ``counting.crash``, then
    makes three side effects, each counted per key."""

    @eng.tool
    def look(tag: str) -> str:
        if counting.crash:
            raise Crash()
        return tag

    @eng.tool(side_effect=True)
    def act(tag: str, i: int, *, idempotency_key: str) -> str:
        with counting.lock:
            counting.calls[idempotency_key] += 1
        time.sleep(delay)
        return f"{tag}-{i}"

    @eng.agent
    def work(run: Any, tag: str) -> list[str]:
        return [look(tag)] + [act(tag, i) for i in range(3)]

    return work


def _crashed_runs(eng: Engine, agent: Any, counting: Counting, n: int) -> list[str]:
    ids = []
    for i in range(n):
        with pytest.raises(Crash):
            eng.run(agent, run_id=f"crashed-{i}", tag=f"t{i}")
        ids.append(f"crashed-{i}")
    counting.crash = False
    return ids


@all_backends
def test_a_run_holds_its_lease_only_while_it_executes(eng: Engine) -> None:
    """Inside a tool the run's lease is this engine's, expiring in the future; after the
    run pauses, completes or fails there is no lease; abandon and answer hold it while
    they work and drop it after."""
    seen: list[Any] = []

    def undo(result: str) -> str:
        seen.append(("undo", eng.store.lease(result)))
        return "undone"

    @eng.tool(side_effect=True, compensate=undo)
    def probe(run_id: str, *, idempotency_key: str) -> str:
        seen.append(("tool", eng.store.lease(run_id)))
        return run_id

    @eng.tool(retry=None)
    def fail() -> None:
        raise PermissionError("no")

    @eng.agent
    def leased(run: Any, rid: str, then: str) -> Any:
        probe(rid)
        if then == "ask":
            run.ask("go?")
            probe(rid)
        if then == "fail":
            fail()
        return "ok"

    done = eng.run(leased, run_id="l1", rid="l1", then="finish")
    assert done.status == "completed" and eng.store.lease("l1") is None
    paused = eng.run(leased, run_id="l2", rid="l2", then="ask")
    assert paused.status == "paused" and eng.store.lease("l2") is None
    assert eng.answer("l2", "yes").status == "completed" and eng.store.lease("l2") is None
    failed = eng.run(leased, run_id="l3", rid="l3", then="fail")
    assert failed.status == "failed" and eng.store.lease("l3") is None
    assert eng.abandon("l3").status == "abandoned" and eng.store.lease("l3") is None
    assert len(seen) == 5
    now = time.time()
    for what, lease in seen:
        assert lease is not None, what
        owner, expires = lease
        assert owner == eng.owner and expires > now - 60, what
    assert eng.owner.startswith(f"{HOST}:{os.getpid()}:")


@pytest.fixture
def short_lease(store_url: str) -> Iterator[Engine]:
    """An engine whose leases last 0.6 s without a heartbeat."""
    e = Engine(store_url, config=EngineConfig(lease_ttl=0.6))
    yield e
    e.close()


@all_backends
def test_the_heartbeat_renews_the_lease_while_a_long_call_runs(short_lease: Engine) -> None:
    """With a 0.6 s lease, a call running 1.5 s keeps it: sampled every 50 ms it never
    lapses, its expiry moves forward, and another engine is refused meanwhile."""
    eng = short_lease
    samples: list[tuple[float, tuple[str, float] | None]] = []
    refused: list[str] = []
    other = Engine(eng.url, store=eng.store)  # another owner on the same store

    @eng.tool
    def long_call(rid: str) -> str:
        end = time.time() + 1.5
        while time.time() < end:
            samples.append((time.time(), eng.store.lease(rid)))
            time.sleep(0.05)
        try:
            other.resume(rid)
        except RunBusy as e:
            refused.append(str(e))
        return "done"

    @eng.agent
    def slow(run: Any, rid: str) -> str:
        return str(long_call(rid))

    assert eng.run(slow, run_id="hb", rid="hb").status == "completed"
    assert len(samples) > 10
    for at, lease in samples:
        assert lease is not None and lease[0] == eng.owner
        assert lease[1] > at  # never expired while the call ran
    expiries = [lease[1] for _, lease in samples if lease is not None]
    assert expiries[-1] - expiries[0] > 0.6  # renewed, not one long lease
    assert refused and eng.owner in refused[0]
    assert eng.store.lease("hb") is None


@all_backends
def test_recover_resumes_runs_whose_lease_expired_and_skips_live_owners(eng: Engine) -> None:
    """Two crashed runs held by a live owner on another host: recover skips them and
    resume, answer and abandon are refused (RunBusy, a UsageError naming the owner).
    Once the first lease expires (its expiry set in the past, as a missed heartbeat
    leaves it), recover resumes that run alone, exactly once; paused and completed runs
    are never recovered."""
    counting = Counting()
    work = _crashable(eng, counting)
    first, second = _crashed_runs(eng, work, counting, 2)
    elsewhere = "elsewhere.example:4242:feedbeef"
    _plant_lease(eng, first, elsewhere, 60)
    _plant_lease(eng, second, elsewhere, 60)

    @eng.agent
    def asking(run: Any) -> Any:
        return run.ask("go?")

    paused = eng.run(asking)
    completed = eng.run(work, tag="done")
    assert eng.recover() == []
    for act in (eng.resume, eng.abandon, lambda rid: eng.answer(rid, "yes")):
        with pytest.raises(RunBusy, match=elsewhere) as refused:
            act(first)
        assert isinstance(refused.value, UsageError)
    assert eng.state(first).status == "running"
    assert counting.calls == {f"{completed.run_id}:{i}": 1 for i in (2, 3, 4)}

    _plant_lease(eng, first, elsewhere, -1)  # expired a second ago
    recovered = eng.recover()
    assert [(r.run_id, r.status) for r in recovered] == [(first, "completed")]
    assert recovered[0].output == ["t0", "t0-0", "t0-1", "t0-2"]
    assert eng.store.lease(first) is None
    assert eng.store.lease(second)[0] == elsewhere  # type: ignore[index]
    assert eng.state(second).status == "running"
    assert eng.state(paused.run_id).status == "paused"
    assert eng.recover() == []
    assert sum(counting.calls.values()) == 6  # 3 for the completed run, 3 recovered


@all_backends
def test_recover_resumes_a_run_whose_same_host_owner_process_is_gone(eng: Engine) -> None:
    """The lease of a process of this PID namespace (its owner id proves it) that no
    longer exists is dead at once, however far its expiry: recover resumes the run and
    takes the lease over."""
    counting = Counting()
    work = _crashable(eng, counting)
    (rid,) = _crashed_runs(eng, work, counting, 1)
    gone = f"{HOST}:{_dead_pid()}:0badc0de:{pid_space()}"
    _plant_lease(eng, rid, gone, 3600)
    recovered = eng.recover()
    assert [(r.run_id, r.status) for r in recovered] == [(rid, "completed")]
    resumed = [d for _, t, d in log_of(eng, rid) if t == "agent_resumed"]
    assert [d["owner"] for d in resumed] == [eng.owner]
    assert eng.store.lease(rid) is None
    assert counting.calls == {f"{rid}:{i}": 1 for i in (2, 3, 4)}


@all_backends
@pytest.mark.parametrize("engines", ["one engine", "two engines"])
def test_recoverers_racing_in_threads_never_run_a_run_twice(eng: Engine, engines: str) -> None:
    """Four threads call recover() at once over five crashed runs (whose calls are slow
    enough to overlap), sharing one engine or on two engines (two owners) over one
    store: every run completes, each resumed once, every effect executed once."""
    counting = Counting()
    work = _crashable(eng, counting, delay=0.03)
    ids = _crashed_runs(eng, work, counting, 5)
    pool = [eng]
    if engines == "two engines":  # another owner with the same code loaded (its agent)
        pool.append(Engine(eng.url, store=eng.store))
        pool[1].agent(work.fn)
    barrier = threading.Barrier(4)
    results: list[list[Any]] = []
    errors: list[BaseException] = []

    def recoverer(e: Engine) -> None:
        try:
            barrier.wait()
            results.append(e.recover())
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=recoverer, args=(pool[i % len(pool)],)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    for rid in ids:
        assert eng.state(rid).status == "completed"
        assert [t for _, t, _ in log_of(eng, rid)].count("agent_resumed") == 1
        assert eng.store.lease(rid) is None
    assert counting.calls == {f"{rid}:{i}": 1 for rid in ids for i in (2, 3, 4)}
    # each run reported completed by recover() in at most one thread... or by a thread
    # that found it already completed (it executed nothing)
    finished = Counter(r.run_id for rs in results for r in rs if r.status == "completed")
    assert set(finished) <= set(ids)


@all_backends
def test_two_threads_of_one_engine_cannot_both_execute_a_run(eng: Engine) -> None:
    """While one thread executes a run, another thread of the same engine asking to
    resume it is refused (the lease is re-entrant only in the thread holding it)."""
    entered, release = threading.Event(), threading.Event()

    @eng.tool
    def block() -> str:
        entered.set()
        release.wait(30)
        return "released"

    @eng.agent
    def blocking(run: Any) -> str:
        return str(block())

    result: list[Any] = []
    t = threading.Thread(target=lambda: result.append(eng.run(blocking, run_id="busy")))
    t.start()
    assert entered.wait(30)
    with pytest.raises(RunBusy):
        eng.resume("busy")
    assert eng.recover() == []
    release.set()
    t.join(30)
    assert result[0].status == "completed" and eng.store.lease("busy") is None
    assert [e.type for e in eng.events("busy")].count("tool_invoked") == 1


# --- real processes ------------------------------------------------------------------

RECOVER = """
import json, sys
from engine import Engine
e = Engine.open(sys.argv[1])
print(json.dumps([[r.run_id, r.status, r.output] for r in e.recover()]))
"""


def _expected(order: str, n: int) -> dict[str, Any]:
    return {
        "quote": 100 * len(order),
        "receipts": [f"charge:{order}-{i}" for i in range(n)] + [f"notify:{order}"],
    }


def _kill_mid_run(url: str, svc: str, run_id: str, order: str, failpoint: str) -> None:
    env = {"AGENTLOG_TEST_SERVICE": svc, "AGENTLOG_FAILPOINTS": failpoint}
    data = json.dumps({"order": order, "n": 3})
    p = python("-m", "tests.agents.runtime_agents", url, run_id, "durable_flow", data, env=env)
    assert p.returncode == -9, p.stderr[-2000:]


@PROCESS_BACKENDS
def test_an_owner_killed_mid_run_is_recovered_from_another_process(
    store_url: str, tmp_path: Path
) -> None:
    """SIGKILL mid-call (a charge sent, its outcome not recorded): the dead process still
    holds an unexpired lease; `recover` in another process sees its pid is gone, resumes
    the run to completion, and no effect happens twice."""
    svc = str(tmp_path / "service.db")
    service.reset(svc)
    _kill_mid_run(store_url, svc, "killed", "k1", "after_tool:3")
    e = Engine.open(store_url)
    try:
        lease = e.store.lease("killed")
        assert lease is not None and lease[1] > time.time() + 5  # dead, not expired
        assert e.state("killed").status == "running"
        p = python("-c", RECOVER, store_url, env={"AGENTLOG_TEST_SERVICE": svc})
        assert p.returncode == 0, p.stderr[-2000:]
        assert json.loads(p.stdout) == [["killed", "completed", _expected("k1", 3)]]
        assert e.store.lease("killed") is None
        assert e.state("killed").status == "completed"
    finally:
        e.close()
    assert service.effects(svc) == Counter(
        {**{("charge", f"k1-{i}"): 1 for i in range(3)}, ("notify", "k1"): 1}
    )
    again = python("-c", RECOVER, store_url, env={"AGENTLOG_TEST_SERVICE": svc})
    assert json.loads(again.stdout) == []


BLOCKING = """
import os, sys
from engine import Engine
from engine.polling import poll_until

engine = Engine.open()
GATE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gate")


@engine.tool(side_effect=True)
def wait_at_gate(order: str, *, idempotency_key: str) -> str:
    open(GATE + ".entered", "w").close()
    poll_until(lambda: os.path.exists(GATE + ".open"), None, first=0.02, most=0.02)
    with open(GATE + ".sent", "a") as f:
        f.write(idempotency_key + "\\n")
    return "through " + order


@engine.agent
def gated(run, order: str) -> str:
    return wait_at_gate(order)


if __name__ == "__main__":
    print(Engine.open(sys.argv[1]).run(gated, run_id=sys.argv[2], order="g1").status)
"""


@PROCESS_BACKENDS
def test_a_run_whose_owner_is_alive_cannot_be_resumed_and_recover_skips_it(
    store_url: str, tmp_path: Path
) -> None:
    """A subprocess blocked inside a tool holds the run's lease: resume, answer and
    abandon here are refused with RunBusy naming the owner's pid, recover skips the run,
    and nothing is written to its log; released, the owner completes it alone."""
    script = tmp_path / "blocking.py"
    script.write_text(BLOCKING)
    env = {k: v for k, v in os.environ.items() if k != "AGENTLOG_FAILPOINTS"}
    env["PYTHONPATH"] = str(ROOT)
    owner = subprocess.Popen(
        [sys.executable, str(script), store_url, "gated"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        entered = tmp_path / "gate.entered"
        poll_until(lambda: entered.exists() or owner.poll() is not None, 60)
        assert entered.exists() and owner.poll() is None, owner.stderr
        e = Engine.open(store_url)
        try:
            before = log_of(e, "gated")
            lease = e.store.lease("gated")
            assert lease is not None and f":{owner.pid}:" in lease[0]
            for act in (e.resume, e.abandon, lambda rid: e.answer(rid, "x")):
                with pytest.raises(RunBusy, match=str(owner.pid)):
                    act("gated")
            assert e.recover() == []
            p = python("-c", RECOVER, store_url, env={"PYTHONPATH": str(ROOT)})
            assert p.returncode == 0 and json.loads(p.stdout) == [], p.stderr[-2000:]
            assert log_of(e, "gated") == before
            (tmp_path / "gate.open").touch()
            out, err = owner.communicate(timeout=60)
            assert owner.returncode == 0 and out.strip() == "completed", err[-2000:]
            assert e.store.lease("gated") is None
            assert e.resume("gated").output == "through g1"
        finally:
            e.close()
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait()
    assert (tmp_path / "gate.sent").read_text().splitlines() == ["gated:1"]


@PROCESS_BACKENDS
def test_recoverers_racing_in_processes_never_run_a_run_twice(
    store_url: str, tmp_path: Path
) -> None:
    """Four runs killed mid-run (at different failpoints); three recoverer processes
    started together: each run completes, resumed exactly once, and every effect
    happened once."""
    svc = str(tmp_path / "service.db")
    service.reset(svc)
    points = ["after_intent:2", "after_tool:3", "after_outcome:2", "after_tool:5"]
    ids = [f"race-{i}" for i in range(len(points))]
    for i, point in enumerate(points):
        _kill_mid_run(store_url, svc, ids[i], f"o{i}", point)
    env = {k: v for k, v in os.environ.items() if k != "AGENTLOG_FAILPOINTS"}
    env.update(AGENTLOG_TEST_SERVICE=svc, PYTHONPATH=str(ROOT))
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RECOVER, store_url],
            env=env,
            cwd=str(ROOT),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    reported: list[list[Any]] = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err[-2000:]
        reported.extend(json.loads(out))
    assert {rid for rid, _, _ in reported} == set(ids)
    e = Engine.open(store_url)
    try:
        for i, rid in enumerate(ids):
            assert e.state(rid).status == "completed"
            assert e.state(rid).output == _expected(f"o{i}", 3)
            assert [t for _, t, _ in log_of(e, rid)].count("agent_resumed") == 1
    finally:
        e.close()
    want = Counter()
    for i in range(len(ids)):
        want.update({("charge", f"o{i}-{j}"): 1 for j in range(3)})
        want[("notify", f"o{i}")] = 1
    assert service.effects(svc) == want
