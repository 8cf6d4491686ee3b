"""An engine owns what it uses: the tools and agents it defined (so two engines in one
process may each define ``charge``), the settings it was built with, and the thread pool
its async durable calls run in, which ``close`` shuts down."""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import random
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from agents.fake_time import FakeTime

from engine import Engine, EngineConfig, RetryPolicy, Transient, observe
from engine.runtime.defs import registry
from engine.runtime.defs.definitions import AgentDef


@pytest.fixture
def engines(store_url: str) -> Iterator[list[Engine]]:
    """Two engines on one store, closed at the end."""
    pair = [Engine(store_url), Engine(store_url)]
    yield pair
    for e in pair:
        e.close()


def _shop(eng: Engine, undone: list[str], tag: str) -> AgentDef:
    """An agent that charges once and waits for a person; its ``charge`` (the same name
    on every engine) records its undo as ``tag``."""

    @eng.tool(side_effect=True, compensate=lambda receipt: undone.append(f"{tag}:{receipt}"))
    def charge(order: str) -> str:
        return f"R-{order}"

    @eng.agent
    def buy(run: Any, order: str) -> str:
        receipt = charge(order)
        run.ask("ship?")
        return receipt

    return buy


def test_two_engines_each_define_charge_and_abandon_undoes_with_its_own(
    engines: list[Engine],
) -> None:
    """Engines A and B each define a tool ``charge`` (and an agent) under the same names
    with different compensations: abandoning A's run undoes with A's, B's with B's."""
    a, b = engines
    undone: list[str] = []
    run_a = a.run(_shop(a, undone, "A"), order="o1")
    run_b = b.run(_shop(b, undone, "B"), order="o2")
    assert (run_a.status, run_b.status) == ("paused", "paused")
    assert b.abandon(run_b.run_id).status == "abandoned"
    assert a.abandon(run_a.run_id).status == "abandoned"
    assert undone == ["B:R-o2", "A:R-o1"]


def test_a_tool_name_reused_within_one_engine_warns_across_engines_not(
    engines: list[Engine], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two functions under one tool name in one engine are worth a warning; the same name
    in two engines is each engine's own tool."""
    warned: list[dict[str, Any]] = []

    class Capture:
        def warning(self, event: str, **fields: Any) -> None:
            warned.append({"event": event, **fields})

    def first() -> int:
        return 1

    def second() -> int:
        return 2

    monkeypatch.setattr(observe, "get", lambda **_: Capture())
    a, b = engines
    a.tool(first, name="shared")
    b.tool(second, name="shared")
    assert warned == []
    a.tool(second, name="shared")
    assert [w["event"] for w in warned] == ["tool_name_reused"]


SHOP = """
from engine import Engine

engine = Engine.open()  # registers only; the engine that runs the agent picks the store
undone = []


@engine.tool(side_effect=True, compensate=lambda receipt: undone.append(receipt))
def charge(order: str) -> str:
    return f"R-{order}"


@engine.agent(name="checkout-NAME")
def checkout(run, order: str) -> str:
    receipt = charge(order)
    run.ask("ship?")
    return receipt
"""

TOOLS = """
from engine import Engine

tools_engine = Engine.open()
undone = []


@tools_engine.tool(side_effect=True, compensate=lambda receipt: undone.append(receipt))
def charge(order: str) -> str:
    return f"R-{order}"
"""

AGENTS = """
from engine import Engine
IMPORT

engine = Engine.open()


@engine.agent
def checkout(run, order: str) -> str:
    receipt = CALL(order)
    run.ask("ship?")
    return receipt
"""


def _module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, text: str) -> ModuleType:
    """Write and import a module ``name`` from ``tmp_path`` (forgotten afterwards)."""
    (tmp_path / f"{name}.py").write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    __import__(name)
    monkeypatch.setitem(sys.modules, name, sys.modules[name])  # removed at teardown
    return sys.modules[name]


def test_another_engine_finds_an_agent_by_its_recorded_name_and_undoes_with_its_tools(
    store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A user's module registers ``charge`` and an agent named ``checkout-…`` on its own
    engine; an engine that defined neither (as the CLI's) runs it and abandons it: the
    agent is found by its recorded name in its module, its compensation is its engine's."""
    tag = uuid.uuid4().hex[:8]
    shop = _module(tmp_path, monkeypatch, f"shop_{tag}", SHOP.replace("NAME", tag))
    runner = Engine(store_url)
    try:
        r = runner.run(shop.checkout, order="o1")
        assert r.status == "paused"
        found = registry.load_agent(f"checkout-{tag}", shop.__name__, runner.registry)
        assert found is shop.checkout
        assert runner.abandon(r.run_id).status == "abandoned"
        assert shop.undone == ["R-o1"]
    finally:
        runner.close()


FACTORY = """
from engine import Engine

engine = Engine.open()


def make():
    @engine.agent(name="made-NAME")
    def made(run, n: int) -> int:
        return n + 1

    return made


make()  # the agent is no attribute of the module: only its engine holds it
"""


def test_an_agent_only_its_modules_engine_holds_is_found_by_recorded_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An agent defined (with ``name=``) inside a function the module calls on import is
    found through the registry of the module's engine."""
    tag = uuid.uuid4().hex[:8]
    factory = _module(tmp_path, monkeypatch, f"factory_{tag}", FACTORY.replace("NAME", tag))
    found = registry.load_agent(f"made-{tag}", factory.__name__, Engine("memory://").registry)
    assert found.name == f"made-{tag}" and found.fn(None, n=1) == 2


SERVICE = """
import TOOLS


def pay(order: str) -> str:
    return TOOLS.charge(order)
"""


@pytest.mark.parametrize(
    ("imports", "call"),
    [
        ("from TOOLS import charge", "charge"),
        ("import TOOLS", "TOOLS.charge"),
        ("from SERVICE import pay", "pay"),  # reached only through a module of the user's
    ],
)
def test_a_tool_imported_from_another_engines_module_is_undone_with_its_compensation(
    store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, imports: str, call: str
) -> None:
    """The agent's engine did not define ``charge``: the module the agent's module imported
    it from did (on an engine of its own), directly or through another module; abandon
    still finds its compensation, as a process-wide registry did."""
    tag = uuid.uuid4().hex[:8]
    tools = _module(tmp_path, monkeypatch, f"tools_{tag}", TOOLS)
    service = SERVICE.replace("TOOLS", tools.__name__)
    imports = imports.replace(
        "SERVICE", _module(tmp_path, monkeypatch, f"service_{tag}", service).__name__
    )
    text = AGENTS.replace("IMPORT", imports).replace("CALL", call)
    agents = _module(tmp_path, monkeypatch, f"agents_{tag}", text.replace("TOOLS", tools.__name__))
    runner = Engine(store_url)
    try:
        r = runner.run(agents.checkout, order="o1")
        assert runner.abandon(r.run_id).status == "abandoned"
        assert tools.undone == ["R-o1"]
    finally:
        runner.close()


def test_the_guards_use_the_clock_sleep_and_random_source_given_at_construction(
    store_url: str,
) -> None:
    """Built with a fake clock and sleep, a seeded random source and a run budget of 2: a
    failing tool is retried twice, sleeping (on the fake clock) exactly the jittered delays
    that seed gives; the guards cannot be patched afterwards."""
    fake = FakeTime()
    config = EngineConfig(clock=fake, sleep=fake.sleep, rng=random.Random(7), run_retry_budget=2)
    policy = RetryPolicy(max_attempts=10, initial=1.0, jitter=True)
    eng = Engine(store_url, config=config)
    try:

        @eng.tool(retry=policy)
        def flaky() -> None:
            raise Transient("down")

        @eng.agent
        def agent(run: Any) -> None:
            flaky()

        assert eng.run(agent).status == "failed"
        same = random.Random(7)
        assert fake.slept == [policy.delay(1, same), policy.delay(2, same)]
        assert fake.now == pytest.approx(1000.0 + sum(fake.slept))  # no real time read
        with pytest.raises(dataclasses.FrozenInstanceError):
            eng.guards.sleep = lambda _s: None  # type: ignore[misc]
    finally:
        eng.close()


def test_async_durable_calls_run_in_the_engines_own_pool_which_close_shuts_down(
    store_url: str,
) -> None:
    """An async tool's durable call runs in a thread of the engine's pool (not asyncio's
    default one); closing the engine shuts that pool down, and a later run gets a new one."""
    eng = Engine(store_url)
    threads: list[str] = []

    def key(order: str) -> str:  # computed in the thread making the durable call
        threads.append(threading.current_thread().name)
        return f"send:{order}"

    @eng.tool(side_effect=True, key=key)
    async def send(order: str) -> str:
        return f"sent {order}"

    @eng.agent
    async def agent(run: Any, order: str) -> str:
        return await send(order)

    try:
        pool = eng.executor()
        assert eng.run(agent, order="o1").output == "sent o1"
        assert threads and threads[0].startswith("agentlog-call")
    finally:
        eng.close()
    with pytest.raises(RuntimeError, match="shutdown"):
        pool.submit(int)
    try:
        assert eng.run(agent, order="o2").output == "sent o2"
        assert eng.executor() is not pool
    finally:
        eng.close()


def test_concurrent_async_calls_are_not_queued_behind_a_small_pool(store_url: str) -> None:
    """Two runs of an async agent, each gathering 12 calls of a tool that waits until all
    24 have started: every call holds a pool thread while its tool runs, so the engine's
    pool must be wider than asyncio's default (6 threads on two cores) or they deadlock
    (the tools give up after a generous 60 s and the runs fail)."""
    eng = Engine(store_url)
    lock, started, everyone = threading.Lock(), [0], threading.Event()

    @eng.tool
    async def wait_for_all(i: int) -> int:
        with lock:
            started[0] += 1
            if started[0] == 24:
                everyone.set()
        for _ in range(6000):  # gives up after about 60 s, only when the pool is too small
            if everyone.is_set():
                return i
            await asyncio.sleep(0.01)
        raise RuntimeError(f"only {started[0]} of 24 calls started")

    @eng.agent
    async def agent(run: Any, n: int) -> int:
        return sum(await asyncio.gather(*(wait_for_all(i) for i in range(n))))

    try:
        with concurrent.futures.ThreadPoolExecutor(2) as runs:
            results = list(runs.map(lambda _: eng.run(agent, n=12), range(2)))
        assert [r.status for r in results] == ["completed", "completed"]
        assert [r.output for r in results] == [66, 66]
    finally:
        eng.close()
