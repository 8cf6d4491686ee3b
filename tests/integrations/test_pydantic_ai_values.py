"""What a DurableAgent's recorded model responses hold (engine.integrations.pydantic_ai):
the model's own values, never redacted by name (a tool's ``session_id`` reaches the tool,
an output field named ``session_id`` the agent), their usage and cost counted by the
engine; and a streamed request's policies (a stream failing before its first chunk is
retried as ``model_options`` say). Offline: pydantic-ai's ``FunctionModel``/``TestModel``.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import AsyncIterator
from decimal import Decimal
from typing import Any

import pytest
from conftest import all_backends
from pydantic import BaseModel
from pydantic_ai import Agent
from pydantic_ai.exceptions import ModelHTTPError
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel
from pydantic_ai.usage import RequestUsage

from engine import Budget, Engine, Permanent, RetryPolicy
from engine.integrations.pydantic_ai import DurableAgent, recorded_response, restored_response
from engine.secrets import REDACTED


def _events(eng: Engine, run_id: str, kind: str) -> list[dict[str, Any]]:
    return [e.data for e in eng.events(run_id) if e.type == kind]


def _returned(messages: list[ModelMessage]) -> list[Any]:
    return [p.content for m in messages for p in m.parts if p.part_kind == "tool-return"]


@all_backends
def test_a_secret_named_tool_argument_reaches_the_tool_and_is_redacted_in_its_call(
    eng: Engine,
) -> None:
    calls: Counter[str] = Counter()
    received: list[str] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        calls["model"] += 1
        if not _returned(messages):
            args = {"session_id": "chat-42", "max_tokens": 5}
            return ModelResponse(parts=[ToolCallPart("close_session", args)])
        return ModelResponse(parts=[TextPart(f"done: {_returned(messages)[-1]}")])

    agent = Agent(FunctionModel(model), name="support")

    @agent.tool_plain
    def close_session(session_id: str, max_tokens: int | None = None) -> str:
        received.append(session_id)
        return f"closed {session_id}"

    durable = DurableAgent(agent, eng)
    outputs: list[str] = []

    @eng.agent
    def support(run: Any) -> str:
        outputs.append(durable.run_sync("close it").output)
        run.ask("ok?")
        return outputs[-1]

    r = eng.run(support)
    assert r.status == "paused", r.error
    # The tool got the value; its result quoting it is masked, live as on replay.
    assert received == ["chat-42"] and outputs == ["done: closed ***"]
    (invoked,) = _events(eng, r.run_id, "tool_invoked")
    assert invoked["args"]["tool_args"] == {"session_id": REDACTED, "max_tokens": 5}
    first = _events(eng, r.run_id, "llm_decided")[0]["value"]
    assert REDACTED not in json.dumps(first)
    done = eng.answer(r.run_id, "y")  # replayed: the recorded call's args, unredacted
    assert (done.status, done.output) == ("completed", "done: closed ***"), done.error
    assert received == ["chat-42"] and calls["model"] == 2


class Ticket(BaseModel):
    title: str
    session_id: str
    max_tokens: int | None = None


@all_backends
def test_an_output_type_with_secret_named_fields_is_the_models_answer(eng: Engine) -> None:
    answer = {"title": "t", "session_id": "s-1", "max_tokens": None}
    agent = Agent(TestModel(custom_output_args=answer), name="triage", output_type=Ticket)
    durable = DurableAgent(agent, eng)
    outputs: list[Ticket] = []

    @eng.agent
    def triage(run: Any) -> str:
        outputs.append(durable.run_sync("go").output)
        run.ask("file it?")
        return outputs[-1].session_id

    r = eng.run(triage)
    assert r.status == "paused", r.error
    done = eng.answer(r.run_id, "y")
    assert (done.status, done.output) == ("completed", "s-1"), done.error
    assert outputs[0] == outputs[-1] == Ticket(**answer)


def _priced(input_tokens: int, output_tokens: int, cost: Decimal | None = None) -> FunctionModel:
    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        usage = RequestUsage(input_tokens=input_tokens, output_tokens=output_tokens, cost=cost)
        return ModelResponse(parts=[TextPart("hi")], usage=usage)

    return FunctionModel(model, model_name="gpt-4o")  # genai-prices knows it (offline)


@all_backends
@pytest.mark.parametrize("reported", [Decimal("0.5"), None])
def test_a_responses_cost_is_counted_and_spends_a_cost_budget(
    eng: Engine, reported: Decimal | None
) -> None:
    """The cost the response reports, else the price pydantic-ai gives its usage
    (genai-prices' bundled table: gpt-4o, $2.50 in and $10 out per million tokens)."""
    durable = DurableAgent(Agent(_priced(100_000, 10_000, reported), name="pricey"), eng)
    expected = 0.5 if reported is not None else 0.35
    costs: list[Any] = []

    @eng.agent(budget=Budget(cost=1.0))
    def ask(run: Any) -> str:
        for i in range(5):
            result = durable.run_sync(f"q{i}")
            costs.append(result.usage.cost)
        return "spent nothing?"

    r = eng.run(ask)
    assert r.status == "failed" and "BudgetExhausted" in (r.error or ""), r
    decided = _events(eng, r.run_id, "llm_decided")
    assert [d["cost"] for d in decided] == [pytest.approx(expected)] * len(decided)
    assert len(decided) == (2 if reported is not None else 3)
    assert eng.state(r.run_id).cost == pytest.approx(expected * len(decided))
    assert costs and all(float(c) == pytest.approx(expected) for c in costs)


def test_a_recorded_response_is_text_validated_back_equal() -> None:
    live = Agent(TestModel(custom_output_text="x"), name="t").run_sync("q").all_messages()[-1]
    assert isinstance(live, ModelResponse)
    value = recorded_response(live)
    assert isinstance(value["response_json"], str)
    assert value["usage"]["input_tokens"] == live.usage.input_tokens
    assert restored_response(value) == live


class _Refused(Exception):
    """An error the engine's default table calls transient."""


@all_backends
@pytest.mark.parametrize("fault", ["429", "refused"])
def test_a_stream_failing_before_its_first_chunk_takes_the_model_policies(
    eng: Engine, fault: str
) -> None:
    """A 429 three times (one more than the default retry policy allows) is retried as
    ``model_options["retry"]`` says; an error the agent's ``classify`` calls permanent is
    not retried."""
    calls: Counter[str] = Counter()

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        calls["model"] += 1
        if calls["model"] < 4:
            raise ModelHTTPError(429, "m") if fault == "429" else _Refused("no")
        for chunk in ["Hel", "lo"]:
            yield chunk

    def classify(exc: BaseException) -> Any:
        return Permanent if isinstance(exc, _Refused) else None

    durable = DurableAgent(
        Agent(FunctionModel(stream_function=stream), name="writer"),
        eng,
        model_options={"retry": RetryPolicy(max_attempts=4, initial=0.0), "classify": classify},
    )

    @eng.agent
    async def write(run: Any) -> str:
        async with durable.run_stream("greet") as result:
            return await result.get_output()

    r = eng.run(write)
    if fault == "refused":
        assert r.status == "failed" and (r.error or "").startswith("Permanent"), r.error
        assert calls["model"] == 1 and _events(eng, r.run_id, "retry_scheduled") == []
        return
    assert (r.status, r.output) == ("completed", "Hello"), r.error
    assert calls["model"] == 4
    assert len(_events(eng, r.run_id, "retry_scheduled")) == 3
    (decided,) = _events(eng, r.run_id, "llm_decided")
    assert decided["attempt"] == 4
