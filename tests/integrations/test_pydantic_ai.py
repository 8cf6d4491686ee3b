"""pydantic-ai on agentlog (engine.integrations.pydantic_ai): inside a run, every model
request of a ``DurableAgent`` is a recorded decision and every tool call a durable call; a
replay returns the recorded responses, tool results and typed outputs without calling the
model or the tools. Offline: pydantic-ai's ``FunctionModel`` and ``TestModel``.
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import pytest
from conftest import all_backends
from pydantic import BaseModel
from pydantic_ai import Agent, ModelRetry
from pydantic_ai import RunContext as PaiContext
from pydantic_ai.exceptions import ContentFilterError, ModelHTTPError
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel

from engine import Budget, Engine, NonDeterminismError, RetryPolicy, Transient
from engine.integrations.pydantic_ai import (
    DurableAgent,
    DurableModel,
    recorded_response,
    restored_response,
)


class Invoice(BaseModel):
    order: str
    total: float
    lines: list[str]


def _events(eng: Engine, run_id: str, kind: str) -> list[dict[str, Any]]:
    return [e.data for e in eng.events(run_id) if e.type == kind]


def _charging_model(calls: Counter[str]) -> FunctionModel:
    """Asks for the ``charge`` tool, then answers with what it returned."""

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        calls["model"] += 1
        returned = [
            p.content
            for m in messages
            for p in getattr(m, "parts", [])
            if getattr(p, "part_kind", "") == "tool-return"
        ]
        if not returned:
            return ModelResponse(parts=[ToolCallPart("charge", {"order": "o1", "amount": 5})])
        return ModelResponse(parts=[TextPart(f"charged: {returned[-1]}")])

    return FunctionModel(model)


def _charging_agent(calls: Counter[str], name: str = "shop") -> Agent[None, str]:
    agent: Agent[None, str] = Agent(_charging_model(calls), name=name)

    @agent.tool_plain
    def charge(order: str, amount: int) -> str:
        calls["charge"] += 1
        return f"receipt-{order}-{amount}"

    return agent


@all_backends
def test_model_requests_are_decisions_and_tool_calls_durable_calls(eng: Engine) -> None:
    calls: Counter[str] = Counter()
    durable = DurableAgent(_charging_agent(calls), eng)
    outputs: list[str] = []

    @eng.agent
    def shop(run: Any, prompt: str) -> str:
        outputs.append(durable.run_sync(prompt).output)
        run.ask("ship it?")
        return outputs[-1]

    r = eng.run(shop, prompt="charge o1")
    assert r.status == "paused", r.error
    decided = _events(eng, r.run_id, "llm_decided")
    assert [d["name"] for d in decided] == ["shop.model", "shop.model"]
    assert decided[0]["value"]["usage"]["input_tokens"] > 0
    invoked = _events(eng, r.run_id, "tool_invoked")
    assert [(t["tool"], t["args"]) for t in invoked] == [
        ("shop.charge", {"tool_args": {"order": "o1", "amount": 5}})
    ]
    assert calls == Counter(model=2, charge=1)

    done = eng.answer(r.run_id, "yes")  # replays the whole pydantic-ai run
    assert (done.status, done.output) == ("completed", "charged: receipt-o1-5"), done.error
    assert len(outputs) > 1 and set(outputs) == {"charged: receipt-o1-5"}
    assert calls == Counter(model=2, charge=1)  # nothing called again
    assert len(_events(eng, r.run_id, "llm_decided")) == 2


@all_backends
def test_an_async_agent_awaits_run_and_replays_it(eng: Engine) -> None:
    calls: Counter[str] = Counter()
    durable = DurableAgent(_charging_agent(calls), eng)
    outputs: list[str] = []

    @eng.agent
    async def shop(run: Any) -> str:
        outputs.append((await durable.run("charge o1")).output)
        run.ask("ship it?")
        return outputs[-1]

    r = eng.run(shop)
    assert r.status == "paused", r.error
    assert [t["tool"] for t in _events(eng, r.run_id, "tool_succeeded")] == ["shop.charge"]
    done = eng.answer(r.run_id, "yes")
    assert (done.status, done.output) == ("completed", "charged: receipt-o1-5"), done.error
    assert calls == Counter(model=2, charge=1)


@all_backends
def test_tools_reach_the_run_context_and_its_deps(eng: Engine) -> None:
    calls: Counter[str] = Counter()
    agent: Agent[str, str] = Agent(_charging_model(calls), name="shop", deps_type=str)

    @agent.tool
    def charge(ctx: PaiContext[str], order: str, amount: int) -> str:
        calls["charge"] += 1
        return f"{ctx.deps}-{order}-{amount}"

    durable = DurableAgent(agent, eng)

    @eng.agent
    def shop(run: Any, currency: str) -> str:
        return durable.run_sync("charge o1", deps=currency).output

    r = eng.run(shop, currency="EUR")
    assert (r.status, r.output) == ("completed", "charged: EUR-o1-5"), r.error
    assert [t["tool"] for t in _events(eng, r.run_id, "tool_succeeded")] == ["shop.charge"]


@all_backends
def test_side_effect_tools_get_an_intent_and_the_key_given(eng: Engine) -> None:
    calls: Counter[str] = Counter()
    durable = DurableAgent(
        _charging_agent(calls),
        eng,
        side_effects={"charge": {"key": lambda order, amount: f"charge:{order}"}},
    )

    @eng.agent
    def shop(run: Any) -> str:
        return durable.run_sync("charge o1").output

    r = eng.run(shop)
    assert r.status == "completed", r.error
    (intent,) = _events(eng, r.run_id, "tool_invoked")
    assert (intent["side_effect"], intent["key"]) == (True, "charge:o1")
    assert calls["charge"] == 1


@all_backends
def test_abandoning_the_run_compensates_a_charge_with_what_the_tool_returned(
    eng: Engine,
) -> None:
    calls: Counter[str] = Counter()
    undone: list[Any] = []
    durable = DurableAgent(
        _charging_agent(calls), eng, side_effects={"charge": {"compensate": undone.append}}
    )

    @eng.agent
    def shop(run: Any) -> str:
        out = durable.run_sync("charge o1").output
        run.ask("ship it?")
        return out

    r = eng.run(shop)
    assert r.status == "paused", r.error
    assert eng.abandon(r.run_id).status == "abandoned"
    assert undone == ["receipt-o1-5"]


@all_backends
def test_a_typed_output_round_trips_through_replay(eng: Engine) -> None:
    calls: Counter[str] = Counter()

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        calls["model"] += 1
        args = {"order": "o7", "total": 12.5, "lines": ["tea", "cake"]}
        return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, args)])

    agent = Agent(FunctionModel(model), name="billing", output_type=Invoice)
    durable = DurableAgent(agent, eng)
    outputs: list[Any] = []

    @eng.agent
    def bill(run: Any) -> dict[str, Any]:
        outputs.append(durable.run_sync("bill o7").output)
        run.ask("send?")
        return outputs[-1].model_dump()

    r = eng.run(bill)
    assert r.status == "paused", r.error
    done = eng.answer(r.run_id, "y")
    assert done.status == "completed", done.error
    live, replayed = outputs[0], outputs[-1]
    assert type(live) is type(replayed) is Invoice
    assert live == replayed == Invoice(order="o7", total=12.5, lines=["tea", "cake"])
    assert calls["model"] == 1


@all_backends
def test_a_streamed_run_round_trips_through_replay(eng: Engine) -> None:
    calls: Counter[str] = Counter()

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        calls["model"] += 1
        for chunk in ["Hel", "lo, ", "world"]:
            yield chunk

    agent = Agent(FunctionModel(stream_function=stream), name="writer")
    durable = DurableAgent(agent, eng)
    texts: list[str] = []

    @eng.agent
    async def write(run: Any) -> str:
        async with durable.run_stream("greet") as result:
            texts.append(await result.get_output())
        run.ask("publish?")
        return texts[-1]

    r = eng.run(write)
    assert r.status == "paused", r.error
    done = eng.answer(r.run_id, "y")
    assert (done.status, done.output) == ("completed", "Hello, world"), done.error
    assert len(texts) > 1 and set(texts) == {"Hello, world"}
    assert calls["model"] == 1
    (decided,) = _events(eng, r.run_id, "llm_decided")
    assert restored_response(decided["value"]).parts == [TextPart("Hello, world")]
    assert decided["tokens_out"] == decided["value"]["usage"]["output_tokens"] > 0


@all_backends
def test_a_streamed_run_reaches_the_agent_live_and_replays_whole(eng: Engine) -> None:
    """Live, each chunk reaches the agent before the model makes the next; replayed,
    the recorded text comes as one chunk."""
    order: list[str] = []

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        for chunk in ["Hel", "lo, ", "world"]:
            order.append(f"model {chunk}")
            yield chunk

    durable = DurableAgent(Agent(FunctionModel(stream_function=stream), name="live"), eng)
    received: list[list[str]] = []

    @eng.agent
    async def write(run: Any) -> str:
        deltas = []
        async with durable.run_stream("greet") as result:
            async for delta in result.stream_text(delta=True, debounce_by=None):
                order.append(f"agent {delta}")
                deltas.append(delta)
        received.append(deltas)
        run.ask("publish?")
        return "".join(deltas)

    r = eng.run(write)
    assert r.status == "paused", r.error
    assert received == [["Hel", "lo, ", "world"]]
    assert order.index("agent Hel") < order.index("model world")  # not buffered
    done = eng.answer(r.run_id, "y")
    assert (done.status, done.output) == ("completed", "Hello, world"), done.error
    assert received[-1] == ["Hello, world"]
    assert [o for o in order if o.startswith("model")] == ["model Hel", "model lo, ", "model world"]
    (decided,) = _events(eng, r.run_id, "llm_decided")
    assert restored_response(decided["value"]).parts == [TextPart("Hello, world")]
    assert decided["tokens_out"] == decided["value"]["usage"]["output_tokens"] > 0


@all_backends
def test_a_stream_whose_reader_fails_records_nothing(eng: Engine) -> None:
    calls: Counter[str] = Counter()

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        calls["model"] += 1
        for chunk in ["Hel", "lo"]:
            yield chunk

    durable = DurableAgent(Agent(FunctionModel(stream_function=stream), name="flaky"), eng)
    failing = [True]

    @eng.agent
    async def write(run: Any) -> str:
        async with durable.run_stream("greet") as result:
            async for delta in result.stream_text(delta=True, debounce_by=None):
                if failing.pop() if failing else False:
                    raise ConnectionError(f"lost the reader at {delta!r}")
            return await result.get_output()

    r = eng.run(write)
    assert r.status == "failed" and "lost the reader" in (r.error or ""), r
    assert _events(eng, r.run_id, "llm_decided") == []
    again = eng.resume(r.run_id)
    assert (again.status, again.output) == ("completed", "Hello"), again.error
    assert calls["model"] == 2 and len(_events(eng, r.run_id, "llm_decided")) == 1


def test_a_replayed_model_response_equals_the_live_one() -> None:
    model = TestModel(custom_output_text="forty-two")
    agent = Agent(model, name="t")
    live = agent.run_sync("q").all_messages()[-1]
    assert isinstance(live, ModelResponse)
    again = restored_response(recorded_response(live))
    assert again == live and type(again) is ModelResponse


@all_backends
def test_a_model_retry_a_tool_raises_is_recorded_and_replayed(eng: Engine) -> None:
    calls: Counter[str] = Counter()
    agent = Agent(TestModel(), name="picky")

    @agent.tool_plain
    def lookup(x: int) -> str:
        calls["lookup"] += 1
        if calls["lookup"] == 1:
            raise ModelRetry("try again with another x")
        return "found"

    durable = DurableAgent(agent, eng)
    outputs: list[str] = []

    @eng.agent
    def ask_twice(run: Any) -> str:
        outputs.append(durable.run_sync("look").output)
        run.ask("ok?")
        return outputs[-1]

    r = eng.run(ask_twice)
    assert r.status == "paused", r.error
    results = [t["result"]["kind"] for t in _events(eng, r.run_id, "tool_succeeded")]
    assert results == ["model_retry", "tool_return"]
    done = eng.answer(r.run_id, "y")
    assert done.status == "completed", done.error
    assert len(set(outputs)) == 1 and calls["lookup"] == 2


@all_backends
@pytest.mark.parametrize("per_tool", [False, True])
def test_tool_calls_take_the_retry_policy(eng: Engine, per_tool: bool) -> None:
    calls: Counter[str] = Counter()
    agent = Agent(TestModel(), name="flaky")

    @agent.tool_plain
    def fetch(x: int) -> str:
        calls["fetch"] += 1
        if calls["fetch"] < 4:  # one more failure than the default policy allows
            raise Transient("reset by peer")
        return "page"

    policy = RetryPolicy(max_attempts=4, initial=0.0)
    if per_tool:
        durable = DurableAgent(agent, eng, tools={"fetch": {"retry": policy}})
    else:
        durable = DurableAgent(agent, eng, retry=policy)

    @eng.agent
    def crawl(run: Any) -> str:
        return durable.run_sync("fetch").output

    r = eng.run(crawl)
    assert r.status == "completed", r.error
    assert calls["fetch"] == 4
    (done,) = _events(eng, r.run_id, "tool_succeeded")
    assert done["attempt"] == 4


@all_backends
def test_a_different_prompt_at_a_recorded_turn_is_a_divergence(eng: Engine) -> None:
    calls: Counter[str] = Counter()
    durable = DurableAgent(_charging_agent(calls), eng)
    prompts = iter(["charge o1", "refund o1"])

    @eng.agent
    def shop(run: Any) -> str:
        out = durable.run_sync(next(prompts)).output
        run.ask("ok?")
        return out

    r = eng.run(shop)
    assert r.status == "paused", r.error
    with pytest.raises(NonDeterminismError, match=r"shop\.model"):
        eng.answer(r.run_id, "y")
    assert calls["model"] == 2  # the recorded answer was not reused for another prompt


def test_outside_a_run_it_is_the_plain_agent(eng: Engine) -> None:
    calls: Counter[str] = Counter()
    plain = _charging_agent(calls).run_sync("charge o1").output
    durable = DurableAgent(_charging_agent(calls), eng)
    assert durable.run_sync("charge o1").output == plain
    assert isinstance(durable.model, DurableModel)
    assert calls == Counter(model=4, charge=2)


def test_importing_engine_does_not_import_pydantic_ai() -> None:
    code = "import sys, engine; engine.Engine; import engine.integrations\n"
    code += "assert 'pydantic_ai' not in sys.modules, 'pydantic_ai loaded'"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr


def test_an_agent_without_a_name_or_with_a_misspelt_option_is_refused(eng: Engine) -> None:
    from engine.errors import UsageError

    with pytest.raises(UsageError, match="needs a name"):
        DurableAgent(Agent(TestModel()), eng)
    agent = _charging_agent(Counter())
    with pytest.raises(UsageError, match=r"tool 'charge'.*\['kee'\]"):
        DurableAgent(agent, eng, side_effects={"charge": {"kee": lambda order: order}})
    with pytest.raises(UsageError, match=r"model_options.*\['retries'\]"):
        DurableAgent(agent, eng, model_options={"retries": 3})
    durable = DurableAgent(agent, eng)
    with pytest.raises(UsageError, match="cannot override model"), durable.override(model="test"):
        pass
    with durable.override(instructions="be brief"):
        assert durable.run_sync("charge o1").output == "charged: receipt-o1-5"


@all_backends
def test_model_requests_take_the_model_retry_policy(eng: Engine) -> None:
    calls: Counter[str] = Counter()

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        calls["model"] += 1
        if calls["model"] < 4:  # one more failure than the default policy allows
            raise Transient("429 Too Many Requests")
        return ModelResponse(parts=[TextPart("fine")])

    durable = DurableAgent(
        Agent(FunctionModel(model), name="busy"),
        eng,
        model_options={"retry": RetryPolicy(max_attempts=4, initial=0.0)},
    )

    @eng.agent
    def ask(run: Any) -> str:
        return durable.run_sync("hello").output

    r = eng.run(ask)
    assert (r.status, r.output) == ("completed", "fine"), r.error
    assert calls["model"] == 4 and len(_events(eng, r.run_id, "llm_decided")) == 1


@all_backends
def test_model_requests_record_their_usage_and_spend_the_run_budget(eng: Engine) -> None:
    calls: Counter[str] = Counter()
    durable = DurableAgent(_charging_agent(calls), eng)

    @eng.agent
    def shop(run: Any) -> str:
        return durable.run_sync("charge o1").output

    r = eng.run(shop)
    assert r.status == "completed", r.error
    decided = _events(eng, r.run_id, "llm_decided")
    assert len(decided) == 2 and all(d["tokens_in"] > 0 and d["tokens_out"] > 0 for d in decided)
    usage = [d["value"]["usage"] for d in decided]
    assert [(d["tokens_in"], d["tokens_out"]) for d in decided] == [
        (u["input_tokens"], u["output_tokens"]) for u in usage
    ]
    assert eng.state(r.run_id).tokens_in == sum(d["tokens_in"] for d in decided)

    @eng.agent(budget=Budget(tokens=1))
    def thrifty(run: Any) -> str:
        return durable.run_sync("charge o1").output

    spent = eng.run(thrifty)
    assert spent.status == "failed" and "BudgetExhausted" in (spent.error or ""), spent
    assert len(_events(eng, spent.run_id, "llm_decided")) == 1


@pytest.mark.parametrize(
    ("error", "attempts", "kind"),
    [
        (ModelHTTPError(429, "m"), 3, None),
        (ModelHTTPError(503, "m"), 3, None),
        (ModelHTTPError(401, "m"), 1, "Permanent"),
        (ModelHTTPError(400, "m"), 1, "Permanent"),
        (ContentFilterError("refused"), 1, "Logical"),
    ],
)
def test_pydantic_ai_model_errors_are_classified(
    eng: Engine, error: Exception, attempts: int, kind: str | None
) -> None:
    """A 429 or a 5xx is retried; a 400, a 401 or a refused answer is not (SQLite)."""
    calls: Counter[str] = Counter()

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        calls["model"] += 1
        if calls["model"] < 3:
            raise error
        return ModelResponse(parts=[TextPart("fine")])

    retry = RetryPolicy(max_attempts=5, initial=0.0)
    durable = DurableAgent(
        Agent(FunctionModel(model), name="m"), eng, model_options={"retry": retry}
    )

    @eng.agent
    def ask(run: Any) -> str:
        return durable.run_sync("hello").output

    r = eng.run(ask)
    assert calls["model"] == attempts
    if kind is None:
        assert (r.status, r.output) == ("completed", "fine"), r.error
    else:
        assert r.status == "failed" and (r.error or "").startswith(kind), r.error
