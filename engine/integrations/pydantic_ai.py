"""A pydantic-ai ``Agent`` made durable on an agentlog run (``agentlog[pydantic-ai]``).

:class:`DurableAgent` wraps an agent the way pydantic-ai's own durable integrations
(Temporal, DBOS, Prefect) do: its model is wrapped so that each model request is a
recorded decision (``llm_decided``, with the response's usage), and its toolsets so that
each tool call is a durable tool call of the engine, with its policies; the tools named in
``side_effects`` get an intent and an idempotency key. Inside a run (an ``@engine.agent``)
a replay returns the recorded responses and tool results without calling the model or the
tools again; outside one, it is the plain pydantic-ai agent.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import json
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, cast

from pydantic import TypeAdapter
from pydantic_ai.agent import AbstractAgent, AgentRun, WrapperAgent
from pydantic_ai.durable_exec import CallToolResult
from pydantic_ai.durable_exec._toolset import unwrap_tool_call_result, wrap_tool_call_result
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter, ModelResponse
from pydantic_ai.models import (
    CompletedStreamedResponse,
    Model,
    ModelRequestParameters,
    StreamedResponse,
)
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.settings import ModelSettings
from pydantic_ai.tool_manager import ToolManager
from pydantic_ai.tools import RunContext as ToolContext
from pydantic_ai.toolsets import AbstractToolset, ToolsetTool, WrapperToolset

from ..errors import UsageError
from ..policy import CircuitBreaker, Classifier, RetryPolicy
from ..runtime import streams
from ..runtime.context import RunContext, current
from ..runtime.declare import ToolOptions

if TYPE_CHECKING:
    from ..runtime.engine import Engine

__all__ = ["DurableAgent", "DurableModel", "DurableToolset"]

_RESPONSE: TypeAdapter[ModelResponse] = TypeAdapter(ModelResponse)
_RESULT: TypeAdapter[Any] = TypeAdapter(CallToolResult)
# What of a message the model sees and a replay reproduces (timestamps and pydantic-ai's
# run ids differ from one execution to the next and are left out of the comparison).
_COMPARED = ("part_kind", "content", "tool_name", "args", "tool_call_id")
# The recorded kinds of a tool call that returned (pydantic-ai's CallToolResult).
_RETURNED = frozenset({"tool_return", "tool_content_result"})
# The policy options run.decide takes for a model request, and @engine.tool for a tool.
_MODEL_OPTIONS = frozenset({"retry", "timeout", "breaker", "classify"})
_TOOL_OPTIONS = ToolOptions.__optional_keys__ - {"name"}


# --- model requests: recorded decisions ------------------------------------------------


def recorded_response(response: ModelResponse) -> dict[str, Any]:
    """``response`` as a decision records it: pydantic-ai's own JSON form, and its usage
    where the engine reads a decision's token counts."""
    usage: dict[str, Any] = {
        "input_tokens": response.usage.input_tokens,
        "output_tokens": response.usage.output_tokens,
    }
    cost = getattr(response.usage, "cost", None)
    if cost is not None:
        usage["cost"] = float(cost)
    return {"response": _RESPONSE.dump_python(response, mode="json"), "usage": usage}


def restored_response(value: Mapping[str, Any]) -> ModelResponse:
    """The :class:`ModelResponse` a recorded decision holds (equal to the one recorded)."""
    return _RESPONSE.validate_python(value["response"])


def conversation_digest(messages: Sequence[ModelMessage]) -> str:
    """What the model was asked, as the decision's argument: a replay that sends it
    something else at the same turn diverges instead of reusing an unrelated answer."""
    dumped = ModelMessagesTypeAdapter.dump_python(list(messages), mode="json")
    kept = [[{k: p[k] for k in _COMPARED if k in p} for p in m["parts"]] for m in dumped]
    blob = json.dumps(kept, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:32]


class DurableModel(WrapperModel):
    """A model whose requests, inside a run, are decisions named ``decision`` (policies:
    ``options``, as ``run.decide`` takes them); outside a run, the wrapped model's."""

    def __init__(self, wrapped: Model, decision: str, options: Mapping[str, Any]) -> None:
        super().__init__(wrapped)
        self.decision = decision
        self.options = dict(options)

    async def request(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> ModelResponse:
        run = current()
        if run is None:
            return await super().request(messages, model_settings, model_request_parameters)

        async def model_request(conversation: str) -> dict[str, Any]:
            response = await self.wrapped.request(
                messages, model_settings, model_request_parameters
            )
            return recorded_response(response)

        return await self._decide(run, model_request, messages)

    @asynccontextmanager
    async def request_stream(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
        run_context: ToolContext[Any] | None = None,
    ) -> AsyncIterator[StreamedResponse]:
        """Inside a run, a stream the log has not recorded reaches pydantic-ai live, and
        the response it made of it is recorded when it is done with it (``run.stream``);
        a replay gives the recorded response back as a completed stream."""
        run = current()
        if run is None:
            async with super().request_stream(
                messages, model_settings, model_request_parameters, run_context
            ) as streamed:
                yield streamed
            return
        opened = self._opener(messages, model_settings, model_request_parameters, run_context)
        digest = conversation_digest(messages)
        chunks = streams.stream(run, self.decision, opened, (digest,), {}, _streamed_response)
        assert isinstance(chunks, AsyncGenerator)
        first = await anext(chunks)
        if isinstance(first, StreamedResponse):
            try:
                yield first
            except BaseException:
                await _abandon(chunks)  # nothing recorded: resumed, the model is asked again
                raise
        else:
            yield CompletedStreamedResponse(
                restored_response(first), model_request_parameters=model_request_parameters
            )
        async for _ in chunks:  # the end of the stream: its response is recorded
            pass

    def _opener(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
        run_context: ToolContext[Any] | None,
    ) -> Callable[[str], AsyncIterator[Any]]:
        """The stream's two chunks: the wrapped model's stream (which pydantic-ai reads
        outside this generator), then, once it is done with it, the response as recorded."""

        async def model_stream(conversation: str) -> AsyncIterator[Any]:
            async with self.wrapped.request_stream(
                messages, model_settings, model_request_parameters, run_context
            ) as streamed:
                yield streamed
                yield recorded_response(streamed.get())

        return model_stream

    async def _decide(
        self,
        run: RunContext,
        fn: Callable[[str], Any],
        messages: Sequence[ModelMessage],
    ) -> ModelResponse:
        value = await run.decide(self.decision, fn, conversation_digest(messages), **self.options)
        return restored_response(value)


def _streamed_response(chunks: list[Any]) -> Any:
    """A stream's recorded value: the response pydantic-ai made of it (of what it had read,
    if it stopped reading early)."""
    last = chunks[-1]
    return last if isinstance(last, dict) else recorded_response(last.get())


class _Abandoned(Exception):
    """Thrown into a model stream whose reader failed: the stream ends, unrecorded."""


async def _abandon(chunks: AsyncGenerator[Any]) -> None:
    with contextlib.suppress(_Abandoned, StopAsyncIteration):
        await chunks.athrow(_Abandoned())


# --- tool calls: durable calls ---------------------------------------------------------

# The call a durable tool's body makes: pydantic-ai's toolset, run context and tool (not
# data, so not arguments: they reach the body, which runs on the agent's loop, this way).
_calling: contextvars.ContextVar[tuple[AbstractToolset[Any], ToolContext[Any], ToolsetTool[Any]]]
_calling = contextvars.ContextVar("agentlog_pydantic_ai_tool")


@dataclass
class ToolCalls:
    """The engine's durable tools standing for one agent's pydantic-ai tools, made on
    first call: ``{prefix}.{tool}``, with ``defaults`` and the tool's own ``options``."""

    engine: Engine
    prefix: str
    defaults: Mapping[str, Any]
    options: Mapping[str, Mapping[str, Any]]
    made: dict[str, Callable[..., Any]] = field(default_factory=dict)

    def durable(self, name: str) -> Callable[..., Any]:
        tool = self.made.get(name)
        if tool is None:
            options = cast("ToolOptions", {**self.defaults, **self.options.get(name, {})})
            options["name"] = f"{self.prefix}.{name}"
            _speak_plainly(options)
            tool = self.made[name] = self.engine.tool(_body(name), **options)
        return tool


def _check_options(what: str, given: Mapping[str, Any], known: frozenset[str]) -> None:
    """A misspelt option is refused when the agent is wrapped, not at its first call."""
    unknown = sorted(set(given) - known)
    if unknown:
        raise UsageError(f"{what} take {sorted(known)}, not {unknown}")


def _speak_plainly(options: ToolOptions) -> None:
    """A tool's ``verify`` returns, and its ``compensate`` takes, the tool's own result;
    the log holds it as pydantic-ai records a tool call's (``CallToolResult``)."""
    verify, compensate = options.get("verify"), options.get("compensate")
    if verify is not None:
        options["verify"] = lambda key: _as_recorded(verify(key))
    if compensate is not None:
        options["compensate"] = _undo(compensate)


def _as_recorded(value: Any) -> Any:
    """A tool's result as its durable call records it (None: no result)."""
    if value is None:
        return None
    result = _RESULT.validate_python({"kind": "tool_return", "result": value})
    return _RESULT.dump_python(result, mode="json")


def _undo(compensate: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``compensate`` of what the tool returned; nothing to undo for a call that raised
    control flow (a retry prompt, a deferral)."""

    def undo(recorded: Any) -> Any:
        if isinstance(recorded, dict) and recorded.get("kind") in _RETURNED:
            return compensate(unwrap_tool_call_result(_RESULT.validate_python(recorded)))
        return None

    return undo


def _body(name: str) -> Callable[..., Any]:
    """The durable tool's function: the pydantic-ai tool call, its result (or the
    control flow it raised: a retry prompt, a deferral) recorded as data."""

    async def call_tool(**tool_args: Any) -> Any:
        toolset, ctx, tool = _calling.get()
        result = await wrap_tool_call_result(toolset.call_tool(name, tool_args, ctx, tool))
        return _RESULT.dump_python(result, mode="json")

    call_tool.__qualname__ = f"pydantic_ai_tool.{name}"
    return call_tool


@dataclass
class DurableToolset(WrapperToolset[Any]):
    """A toolset whose tool calls, inside a run, are durable calls (``calls``)."""

    calls: ToolCalls | None = None

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: ToolContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        if current() is None or self.calls is None:
            return await super().call_tool(name, tool_args, ctx, tool)
        token = _calling.set((self.wrapped, ctx, tool))
        try:
            value = await self.calls.durable(name)(**tool_args)
        finally:
            _calling.reset(token)
        return unwrap_tool_call_result(_RESULT.validate_python(value))


# --- the agent -------------------------------------------------------------------------


class DurableAgent(WrapperAgent[Any, Any]):
    """``agent`` made durable on ``engine``'s runs.

    Inside an ``@engine.agent``, ``run``, ``run_sync``, ``run_stream`` and ``iter`` record
    every model request as a decision named ``{name}.model`` (``model_options``: its
    ``retry``/``timeout``/``breaker``/``classify``) and make every tool call a durable call
    of the tool ``{name}.{tool}`` (``retry``, ``timeout``, ``breaker``, ``classify`` for every
    tool; ``tools={"t": {...}}``: a tool's own ``@engine.tool`` options; ``side_effects``: the
    same, for tools that have effects, which get an intent and a key). Tool calls run one
    at a time inside a run, so their order is the same on replay. ``name`` (default: the
    agent's) is part of what the log records: keep it stable.
    """

    def __init__(
        self,
        agent: AbstractAgent[Any, Any],
        engine: Engine,
        *,
        name: str | None = None,
        retry: RetryPolicy | None = None,
        timeout: float | Literal["adaptive"] | None = None,
        breaker: CircuitBreaker | None = None,
        classify: Classifier | None = None,
        tools: Mapping[str, ToolOptions] | None = None,
        side_effects: Mapping[str, ToolOptions] | None = None,
        model_options: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(agent)
        self._durable_name = name or agent.name
        if not self._durable_name:
            raise UsageError("DurableAgent needs a name: Agent(name=...) or name=")
        if not isinstance(agent.model, Model):
            raise UsageError("DurableAgent needs an agent whose model is a Model instance")
        _check_options("model_options", model_options or {}, _MODEL_OPTIONS)
        defaults = {"retry": retry, "timeout": timeout, "breaker": breaker, "classify": classify}
        per_tool: dict[str, dict[str, Any]] = {t: dict(o) for t, o in (tools or {}).items()}
        for tool, effect in (side_effects or {}).items():
            per_tool[tool] = {**per_tool.get(tool, {}), **effect, "side_effect": True}
        for tool, options in per_tool.items():
            _check_options(f"the options of tool {tool!r}", options, _TOOL_OPTIONS)
        given = {k: v for k, v in defaults.items() if v is not None}
        self._calls = ToolCalls(engine, self._durable_name, given, per_tool)
        self._model = DurableModel(agent.model, f"{self._durable_name}.model", model_options or {})
        self._toolsets = [DurableToolset(t, calls=self._calls) for t in agent.toolsets]

    @property
    def name(self) -> str | None:
        return self._durable_name

    @name.setter
    def name(self, value: str | None) -> None:
        raise UsageError("a DurableAgent's name is recorded in the log: it cannot change")

    @property
    def model(self) -> Model:
        return self._model

    @contextmanager
    def override(self, **changes: Any) -> Iterator[None]:
        """As pydantic-ai's, except for the model and tools, which the log's decisions and
        calls stand for: a DurableAgent keeps those it wrapped."""
        fixed = sorted(k for k in ("model", "toolsets", "tools") if k in changes)
        if fixed:
            raise UsageError(
                f"a DurableAgent cannot override {', '.join(fixed)}: wrap an agent built "
                "with the ones you want"
            )
        with self.wrapped.override(**changes):
            yield

    @contextmanager
    def _durable(self, kwargs: Mapping[str, Any]) -> Iterator[None]:
        """Inside a run: the wrapped agent with the durable model and toolsets, its tool
        calls one at a time."""
        if kwargs.get("model") is not None:
            raise UsageError("inside a run, a DurableAgent's model cannot be replaced per call")
        if kwargs.get("toolsets"):
            raise UsageError("inside a run, a DurableAgent takes no extra toolsets per call")
        with (
            self.wrapped.override(model=self._model, toolsets=self._toolsets, tools=[]),
            ToolManager.parallel_execution_mode("sequential"),
        ):
            yield

    @asynccontextmanager
    async def iter(self, *args: Any, **kwargs: Any) -> AsyncIterator[AgentRun[Any, Any]]:
        if current() is None:
            async with self.wrapped.iter(*args, **kwargs) as plain:
                yield plain
            return
        with self._durable(kwargs):
            async with self.wrapped.iter(*args, **kwargs) as durable:
                yield durable
